//! Waiting: release notifications wake waiters, one attempt per key per
//! locker however many wait, FIFO inside a locker, and the ways a wait ends
//! without the lock (busy, queue full, timeout).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::{Error, ReleaseOutcome};

use super::common::{
    config, connect, granted, leased, namespace, no_wait, refused, spawn, wait_for_stats, waiting,
    BOUND,
};
use super::front::Front;
use crate::support::RedisServer;

/// Safety polls so slow that a waiter getting the lock within [`BOUND`]
/// proves a notification woke it.
const SLOW_POLL: Duration = Duration::from_secs(30);

/// The holder's lease, longer than every bound here: the lock only frees
/// up by release.
const LONG_LEASE: Duration = Duration::from_secs(60);

/// Holds `key` with a long lease on `holder` (or the waiters' own locker),
/// makes a waiter of a locker with 30 s safety polls really wait, releases,
/// and checks the waiter got the lock long before any poll would fire.
fn hand_over_by_notification<F: Front>(same_locker: bool) {
    let server = RedisServer::start();
    let ns = namespace("notify");
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(SLOW_POLL)
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(20)),
    ));
    let other: F = connect(&server, config(&ns));
    let holder: &F = if same_locker { &waiters } else { &other };
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let held_fence = F::fence(&held);

    let w = waiters.clone();
    let waiter = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "waiter");
        (F::fence(&lease), F::release(lease))
    });
    // Subscribed, and the head's check after the confirmation was busy:
    // from now on only a notification (or a 30 s poll) makes it retry.
    wait_for_stats(&*waiters, "the waiter subscribed and checked again", |s| {
        s.subscribed && s.busy_replies >= 2
    });
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);

    let (fence, released) = waiter.join_within(BOUND);
    assert!(fence > held_fence);
    assert_eq!(released.unwrap(), ReleaseOutcome::Released);
    assert!(
        waiters.stats().notifications >= 1,
        "the hand-over came through a notification: {:?}",
        waiters.stats()
    );
}

/// A waiter is woken by the release notification of another locker's
/// release, not by its safety poll.
pub(crate) fn a_waiter_is_woken_by_the_release_notification_not_its_safety_poll<F: Front>() {
    hand_over_by_notification::<F>(false);
}

/// A release by the waiters' own locker wakes them through the
/// notification too.
pub(crate) fn a_release_by_the_same_locker_wakes_its_waiters_through_the_notification<F: Front>() {
    hand_over_by_notification::<F>(true);
}

/// Waiters of one locker that queue behind each other get no busy reply:
/// the head before them acquired, so they back off behind their own
/// locker's grant. They really wait (the crate docs' "How it works"), so the locker subscribes,
/// and each release hands the key on through its notification. With 30 s
/// safety polls, every round finishing within [`BOUND`] proves it; before
/// the fix they waited for those polls (25 ms each by default).
pub(crate) fn waiters_queued_behind_their_own_lockers_grant_are_woken_by_the_notification<
    F: Front,
>() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 3;
    let server = RedisServer::start();
    let ns = namespace("queued");
    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(SLOW_POLL)
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(60)),
    ));
    let start = Arc::new(std::sync::Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (l, start) = (locker.clone(), start.clone());
            spawn(&format!("worker-{i}"), move || {
                start.wait();
                for _ in 0..ROUNDS {
                    let lease = granted(l.acquire("k"), "worker");
                    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join_within(BOUND);
    }
    let stats = locker.stats();
    assert_eq!(stats.acquires, (THREADS * ROUNDS) as u64, "{stats:?}");
    assert_eq!(
        stats.safety_polls, 0,
        "no grant waited for a poll: {stats:?}"
    );
}

/// Sixteen threads of one locker waiting on one key held by another locker
/// until its lease expires send about as many acquire scripts as one poller
/// would, not sixteen times that.
pub(crate) fn sixteen_waiters_of_one_locker_send_no_more_attempts_than_one_poller<F: Front>() {
    const THREADS: u64 = 16;
    const HOLD: Duration = Duration::from_secs(1);
    const POLL: Duration = Duration::from_millis(25);
    let server = RedisServer::start();
    let ns = namespace("herd");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(POLL)
            .notify_poll_interval(Duration::from_millis(250))
            .wait(Duration::from_secs(15)),
    ));
    let held = granted(holder.acquire_with("k", leased(HOLD)), "holder");
    server.reset_stats();

    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let w = waiters.clone();
            spawn(&format!("waiter-{i}"), move || {
                let lease = granted(w.acquire("k"), "waiter");
                let fence = F::fence(&lease);
                assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
                fence
            })
        })
        .collect();
    let mut fences: Vec<_> = threads
        .into_iter()
        .map(|t| t.join_within(Duration::from_secs(20)))
        .collect();
    fences.sort();
    fences.dedup();
    assert_eq!(
        fences.len() as u64,
        THREADS,
        "every waiter got its own grant"
    );

    let stats = server.commandstats();
    let scripts =
        stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0);
    // One poller at POLL for the whole hold, plus per waiter its grant, its
    // release and one busy try when it becomes head while the previous
    // waiter still holds the lock, plus slack.
    let one_poller = (HOLD.as_millis() / POLL.as_millis()) as u64;
    let bound = one_poller + 3 * THREADS + 10;
    assert!(
        scripts <= bound,
        "{scripts} scripts sent (bound {bound}; sixteen independent pollers would send about {}): \
         {stats:?}, locker {:?}",
        THREADS * one_poller,
        waiters.stats()
    );
    drop(held);
}

/// Waiters of one locker for one key are served in arrival order.
pub(crate) fn waiters_of_one_locker_are_served_in_arrival_order<F: Front>() {
    const N: usize = 6;
    let server = RedisServer::start();
    let ns = namespace("fifo");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(20)),
    ));
    let held = granted(holder.acquire("k"), "holder");

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..N {
        let (w, order) = (waiters.clone(), order.clone());
        threads.push(spawn(&format!("waiter-{i}"), move || {
            let lease = granted(w.acquire("k"), "waiter");
            order.lock().unwrap().push(i);
            F::release(lease).unwrap()
        }));
        wait_for_stats(&*waiters, &format!("waiter {i} queued"), |s| {
            s.waiters == i + 1
        });
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    for t in threads {
        assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    }
    assert_eq!(*order.lock().unwrap(), (0..N).collect::<Vec<_>>());
}

/// A zero wait tries once and reports `LOCK_BUSY` with the holder's
/// remaining time.
pub(crate) fn a_zero_wait_on_a_held_key_gives_lock_busy_with_the_holders_remaining_time<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("busy");
    let holder: F = connect(&server, config(&ns));
    let other: F = connect(&server, config(&ns));
    let lease_len = Duration::from_secs(5);
    let held = granted(holder.acquire_with("k", leased(lease_len)), "holder");

    for (who, locker) in [("another locker", &other), ("the holder's locker", &holder)] {
        let e = refused(locker.acquire_with("k", no_wait()), who);
        assert!(matches!(e, Error::Busy { .. }), "{who}: {e:?}");
        assert_eq!(e.code(), "LOCK_BUSY");
        let remaining = e.holder_remaining().expect("Redis reported the PTTL");
        assert!(
            !remaining.is_zero() && remaining <= lease_len,
            "{who}: remaining {remaining:?}"
        );
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let lease = granted(other.acquire_with("k", no_wait()), "a free key on one try");
    F::release(lease).unwrap();
}

/// A zero-wait acquire on a key its locker already waits for reports
/// `LOCK_BUSY` at once, without sending anything (it never jumps the line).
pub(crate) fn a_zero_wait_acquire_never_jumps_its_lockers_line<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("nojump");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(SLOW_POLL)
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(20)),
    ));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let w = waiters.clone();
    let waiter = spawn("waiter", move || {
        F::release(granted(w.acquire("k"), "waiter"))
    });
    wait_for_stats(&*waiters, "the waiter settled into its long backoff", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let sent = waiters.stats().scripts_sent;
    let e = refused(waiters.acquire_with("k", no_wait()), "second acquire");
    assert_eq!(e.code(), "LOCK_BUSY");
    assert!(
        e.holder_remaining().is_some(),
        "the line knows the holder's time"
    );
    assert_eq!(
        waiters.stats().scripts_sent,
        sent,
        "answered without asking Redis"
    );

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(waiter.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
}

/// With `max_waiters` acquires in progress, another acquire (any key) fails
/// at once with `QUEUE_FULL`; the waiters already queued are unaffected.
pub(crate) fn acquires_beyond_max_waiters_fail_with_queue_full<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("full");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).max_waiters(2).wait(Duration::from_secs(20)),
    ));
    let held = granted(holder.acquire("k"), "holder");
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let w = waiters.clone();
            let t = spawn(&format!("waiter-{i}"), move || {
                F::release(granted(w.acquire("k"), "queued waiter"))
            });
            wait_for_stats(&*waiters, "the waiter queued", |s| s.waiters == i + 1);
            t
        })
        .collect();

    for key in ["k", "another-key"] {
        // With a 20 s wait, anything but an immediate refusal would end
        // with a lease or WAIT_TIMEOUT instead.
        let e = refused(waiters.acquire(key), "third acquire");
        assert!(matches!(e, Error::QueueFull { limit: 2 }), "{e:?}");
        assert_eq!(e.code(), "QUEUE_FULL");
    }

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    for t in threads {
        assert_eq!(t.join_within(BOUND).unwrap(), ReleaseOutcome::Released);
    }
    let lease = granted(waiters.acquire("another-key"), "the queue has room again");
    F::release(lease).unwrap();
}

/// A wait that runs out reports `WAIT_TIMEOUT` with how long it waited and
/// the holder's remaining time.
pub(crate) fn a_wait_that_runs_out_gives_wait_timeout_with_the_holders_remaining_time<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("timeout");
    let holder: F = connect(&server, config(&ns));
    let waiter: F = connect(&server, config(&ns));
    let lease_len = Duration::from_secs(5);
    let held = granted(holder.acquire_with("k", leased(lease_len)), "holder");

    let wait = Duration::from_millis(300);
    let e = refused(waiter.acquire_with("k", waiting(wait)), "short wait");
    let Error::WaitTimeout { waited, remaining } = &e else {
        panic!("expected WAIT_TIMEOUT, got {e:?}");
    };
    assert_eq!(e.code(), "WAIT_TIMEOUT");
    assert!(*waited >= wait, "waited {waited:?} of {wait:?}");
    let remaining = remaining.expect("the holder's PTTL is known");
    assert!(
        !remaining.is_zero() && remaining <= lease_len,
        "{remaining:?}"
    );
    assert_eq!(e.holder_remaining(), Some(remaining));
    assert_eq!(waiter.stats().wait_timeouts, 1);
    assert_eq!(waiter.stats().waiters, 0);
    F::release(held).unwrap();
}
