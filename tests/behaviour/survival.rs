//! Survival: waiting, cleanup and notifications survive faults (the crate docs' "How it works"
//! "Waiting survives faults", "Nothing waits on a lazy front end", §7, §9).
//! A fault may fail the operation in flight, never a waiter that still has
//! wait left, and nothing is left for the TTL to clean up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::{Fence, ReleaseOutcome};

use super::common::{
    config, connect, exists, granted, leased, let_pass, lock_name, namespace, numsub, refused,
    release_channel, spawn, wait_for_stats, waiting, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// A server killed (`kill -9`) while three waiters of one locker wait, and
/// started again on the same port 400 ms later (all data lost, so the held
/// lock is gone): the waiters keep waiting through the outage and then all
/// get the key, one after another, with strictly increasing fences — none
/// fails with `PROVIDER_FAILED` or `OUTCOME_UNKNOWN`.
pub(crate) fn waiters_survive_a_short_outage_and_acquire_after_the_restart<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("outage");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(10)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(30))),
        "holder",
    );
    let held_fence = F::fence(&held);
    // Fences in the order the waiters held the lock (pushed while held).
    let order: Arc<Mutex<Vec<Fence>>> = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (w, order) = (waiters.clone(), order.clone());
            spawn(&format!("waiter-{i}"), move || {
                let lease = w.acquire("k").map_err(|e| format!("{} ({e})", e.code()))?;
                order.lock().unwrap().push(F::fence(&lease));
                F::release(lease).map_err(|e| format!("release: {} ({e})", e.code()))
            })
        })
        .collect();
    wait_for_stats(&*waiters, "three waiters, subscribed", |s| {
        s.waiters == 3 && s.subscribed
    });

    server.restart_after(Duration::from_millis(400));

    let results: Vec<_> = threads
        .into_iter()
        .map(|t| t.join_within(Duration::from_secs(20)))
        .collect();
    assert!(
        results.iter().all(|r| r == &Ok(ReleaseOutcome::Released)),
        "every waiter got the key after the restart: {results:?}"
    );
    let fences = order.lock().unwrap().clone();
    assert_eq!(fences.len(), 3, "{fences:?}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing in grant order: {fences:?}"
    );
    assert!(fences[0] > held_fence, "{held_fence} then {fences:?}");
    // The holder's lock went with the data; its release says so or fails.
    let _ = F::release(held);
}

/// `shutdown()` after the locker's command connections were killed
/// (`CLIENT KILL TYPE normal`, nothing in flight) reconnects, releases
/// both leases and returns `Ok`: no `OUTCOME_UNKNOWN`, no locks left.
pub(crate) fn shutdown_after_the_command_connection_was_killed_releases_the_locks<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown-killed");
    let locker: F = connect(&server, config(&ns));
    let leases: Vec<_> = ["a", "b"]
        .iter()
        .map(|k| {
            granted(
                locker.acquire_with(k, leased(Duration::from_secs(30))),
                "acquire",
            )
        })
        .collect();

    assert!(server.client_kill_type("normal") >= 1);
    // As in `a_command_connection_killed_while_idle_does_not_fail_the_next_operation`:
    // a request racing the close may be in flight; one sent after the
    // locker noticed it must work.
    if F::NOTICES_IDLE_CLOSE {
        wait_until(BOUND, "the locker noticed the close", || {
            !locker.stats().connected
        });
    }

    locker
        .shutdown()
        .unwrap_or_else(|e| panic!("shutdown: expected Ok, got {} ({e:?})", e.code()));
    for k in ["a", "b"] {
        assert!(!exists(&server, &lock_name(&ns, k)), "lock of {k} released");
    }
    drop(leases);
}

/// A lease dropped without `release` while a waiter of the same locker
/// waits for its key (lease 30 s, wait 10 s) frees that waiter within its
/// wait, not at the TTL.
pub(crate) fn a_dropped_lease_frees_a_waiter_of_the_same_locker_before_its_ttl<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("drop-frees");
    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(10)),
    ));
    let lease = granted(
        locker.acquire_with("k", leased(Duration::from_secs(30))),
        "first lease",
    );
    let dropped_fence = F::fence(&lease);
    let l = locker.clone();
    let waiter = spawn("waiter", move || {
        let lease = l.acquire("k").map_err(|e| format!("{} ({e})", e.code()))?;
        let fence = F::fence(&lease);
        F::release(lease)
            .map(|outcome| (fence, outcome))
            .map_err(|e| format!("release: {}", e.code()))
    });
    wait_for_stats(&*locker, "the second acquire waits", |s| s.waiters == 1);
    let_pass(Duration::from_millis(300));

    drop(lease);
    // The waiter ends by its 10 s wait at the latest.
    let (fence, outcome) = waiter
        .join_within(Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("the waiter got the dropped lease's key: {e}"));
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert!(fence > dropped_fence);
}

/// After contention ended (a waiter waited, acquired and released), the
/// locker's release subscription closes a second later although the program
/// makes no further call on the locker (`PUBSUB NUMSUB` drops to 0).
pub(crate) fn the_subscription_closes_a_second_after_contention_ends_without_further_calls<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("linger");
    let channel = release_channel(&ns);
    let holder: F = connect(&server, config(&ns));
    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(10)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(30))),
        "holder",
    );
    let l = locker.clone();
    let waiter = spawn("waiter", move || {
        F::release(granted(l.acquire("k"), "waiter")).map_err(|e| e.code())
    });
    wait_for_stats(&*locker, "a waiter, subscribed", |s| {
        s.waiters == 1 && s.subscribed
    });
    assert_eq!(numsub(&server, &channel), 1, "the locker subscribed");

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(waiter.join_within(BOUND), Ok(ReleaseOutcome::Released));

    // No call on `locker` from here on: the linger (1 s) must end by itself.
    wait_until(
        Duration::from_secs(6),
        "the subscription closed after contention ended",
        || numsub(&server, &channel) == 0,
    );
    assert!(!locker.stats().subscribed);
}

/// The subscriber connection killed twice (`CLIENT KILL TYPE pubsub`) is
/// re-established both times, and each time a waiter is still handed the
/// lock by a release notification (safety polls are 30 s, beyond the
/// 10 s bound). A waiter stays in line throughout, so the subscription is
/// never dropped for lack of contention between the kills.
pub(crate) fn waiters_are_still_notified_after_the_subscriber_connection_is_killed_twice<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("kill-pubsub-twice");
    let channel = release_channel(&ns);
    let slow = Duration::from_secs(30);
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .poll_interval(slow)
            .notify_poll_interval(slow)
            .lease(Duration::from_secs(60))
            .wait(Duration::from_secs(40)),
    ));
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(60))),
        "holder",
    );
    let start_waiter = |name: &str, queued: usize| {
        let w = waiters.clone();
        let t = spawn(name, move || granted(w.acquire("k"), "waiter"));
        wait_for_stats(&*waiters, "waiter queued", |s| s.waiters == queued);
        t
    };
    let first = start_waiter("first", 1);
    let second = start_waiter("second", 2);
    wait_for_stats(&*waiters, "subscribed, head in its long backoff", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    // Kills the subscriber connection and waits until the locker subscribed
    // again and its head checked once more.
    let kill_and_resubscribe = |round: u32| {
        let busy = waiters.stats().busy_replies;
        assert_eq!(
            server.client_kill_type("pubsub"),
            1,
            "kill {round}: one subscriber connection"
        );
        wait_until(BOUND, &format!("kill {round}: subscribed again"), || {
            numsub(&server, &channel) == 1
                && waiters.stats().subscribed
                && waiters.stats().busy_replies > busy
        });
    };

    // Round 1: another locker's release is notified after the first kill.
    kill_and_resubscribe(1);
    let notified = waiters.stats().notifications;
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let first = first.join_within(BOUND);
    assert!(waiters.stats().notifications > notified);

    // Round 2: the second waiter waits on the first's lease; after the
    // second kill, the release by its own locker reaches it by notification.
    assert_eq!(waiters.stats().waiters, 1, "the second waiter still waits");
    kill_and_resubscribe(2);
    let notified = waiters.stats().notifications;
    let first_fence = F::fence(&first);
    assert_eq!(F::release(first).unwrap(), ReleaseOutcome::Released);
    let second = second.join_within(BOUND);
    assert!(F::fence(&second) > first_fence);
    assert!(waiters.stats().notifications > notified);
    assert_eq!(F::release(second).unwrap(), ReleaseOutcome::Released);
}

/// A wait of one microsecond is still a wait: every acquire with it makes
/// at least one attempt, so on free keys all 50 are granted (never
/// `WAIT_TIMEOUT` without asking Redis).
pub(crate) fn a_tiny_positive_wait_always_asks_redis_at_least_once<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("tiny-wait");
    let locker: F = connect(&server, config(&ns));
    let mut failures = Vec::new();
    for i in 0..50 {
        match locker.acquire_with(&format!("k{i}"), waiting(Duration::from_micros(1))) {
            Ok(lease) => assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released),
            Err(e) => failures.push(format!("k{i}: {}", e.code())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 50 free keys not granted: {failures:?}",
        failures.len()
    );
}

/// At shutdown, one release refused by Redis (b's lock name now holds a
/// hash: `WRONGTYPE`) fails the shutdown with `CLEANUP_FAILED` (some
/// releases confirmed, others refused), not `PROVIDER_FAILED`, and the
/// release that worked (a's) is done.
pub(crate) fn one_refused_release_at_shutdown_does_not_hide_the_releases_that_worked<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown-refused");
    let locker: F = connect(&server, config(&ns));
    let a = granted(
        locker.acquire_with("a", leased(Duration::from_secs(30))),
        "a",
    );
    let b = granted(
        locker.acquire_with("b", leased(Duration::from_secs(30))),
        "b",
    );
    let b_lock = lock_name(&ns, "b");
    server.query(redis::cmd("DEL").arg(&b_lock));
    server.query(redis::cmd("HSET").arg(&b_lock).arg("field").arg("value"));

    let e = refused(locker.shutdown(), "shutdown with one release refused");
    assert_eq!(e.code(), "CLEANUP_FAILED", "{e:?}");
    assert!(
        !exists(&server, &lock_name(&ns, "a")),
        "a's release was done"
    );
    drop((a, b));
}
