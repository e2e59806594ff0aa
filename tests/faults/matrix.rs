//! The rows of the fault matrix (docs/FAULTS.md), each written once for
//! any front end. Every row starts its own `redis-server`, injects one
//! fault, and checks the documented behaviour: which operation fails and
//! how, that fences keep increasing, that no waiter is stranded, and that
//! the locker works again afterwards. Waits are bounded ([`BOUND`],
//! `join_within`, `wait_until`); no row asserts how long something took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::{Config, Error, Operation, ReleaseOutcome, RenewOutcome};

use crate::behaviour::common::{
    config, connect, exists, fence_name, get, granted, leased, lock_name, namespace, no_wait,
    refused, server_time_ms, spawn, wait_for_stats, waiting, Bounded, BOUND,
};
use crate::behaviour::front::Front;
use crate::behaviour::logs;
use crate::behaviour::rw_lock::rw_name;
use crate::child;
use crate::support::{wait_until, RedisServer};

/// Safety polls so slow that a hand-over within [`BOUND`] proves that a
/// notification (or a fallback the fault triggered) did it.
pub(crate) const SLOW_POLL: Duration = Duration::from_secs(30);

/// A holder's lease longer than every bound: the key frees up by release.
pub(crate) const LONG_LEASE: Duration = Duration::from_secs(60);

/// The command timeout of rows that pause the server.
pub(crate) const SHORT_TIMEOUT: Duration = Duration::from_millis(200);

/// A locker whose waiters only move on a notification (or a fallback).
pub(crate) fn slow_polling(ns: &str) -> Config {
    config(ns)
        .poll_interval(SLOW_POLL)
        .notify_poll_interval(SLOW_POLL)
        .wait(Duration::from_secs(25))
}

/// Starts `n` waiters for `key` on `locker`, one after the other (each is
/// queued before the next starts, so the line's order is known). Each
/// records its index in `order` while it holds the key, checks that nobody
/// else holds it meanwhile, and releases.
fn queue_waiters<F: Front>(
    locker: &Arc<F>,
    key: &'static str,
    n: usize,
    order: &Arc<Mutex<Vec<(usize, u64)>>>,
    inside: &Arc<AtomicBool>,
) -> Vec<Bounded<Result<ReleaseOutcome, Error>>> {
    (0..n)
        .map(|i| {
            let queued = locker.stats().waiters;
            let (l, order, inside) = (locker.clone(), order.clone(), inside.clone());
            let t = spawn(&format!("waiter-{i}"), move || {
                let lease = l.acquire(key)?;
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                order.lock().unwrap().push((i, F::fence(&lease).get()));
                inside.store(false, Ordering::SeqCst);
                F::release(lease)
            });
            wait_for_stats(&**locker, &format!("waiter-{i} queued"), |s| {
                s.waiters == queued + 1
            });
            t
        })
        .collect()
}

/// Joins every waiter (each within `bound`) and checks that each got the
/// key and released it, in arrival order, with fences above `above`.
fn all_served_in_order(
    waiters: Vec<Bounded<Result<ReleaseOutcome, Error>>>,
    order: &Mutex<Vec<(usize, u64)>>,
    above: u64,
    bound: Duration,
) {
    let n = waiters.len();
    for (i, t) in waiters.into_iter().enumerate() {
        match t.join_within(bound) {
            Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Released, "waiter-{i}"),
            Err(e) => panic!("waiter-{i} ended with {} ({e:?})", e.code()),
        }
    }
    let order = order.lock().unwrap();
    let indices: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, (0..n).collect::<Vec<_>>(), "arrival order");
    let mut last = above;
    for (_, fence) in order.iter() {
        assert!(
            *fence > last,
            "fences strictly increase: {order:?} above {above}"
        );
        last = *fence;
    }
}

/// Waits until the server clock has passed the millisecond `fence` was
/// seeded in, which the fence guarantee after data loss needs.
fn clock_passes(server: &RedisServer, fence: u64) {
    wait_until(BOUND, "the server clock passes the last fence's ms", || {
        server_time_ms(server) > fence / 1000
    });
}

/// The redis error behind `e`.
fn redis_source(e: &Error) -> &redis::RedisError {
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<redis::RedisError>())
        .unwrap_or_else(|| panic!("{} keeps the redis error as its source: {e:?}", e.code()))
}

#[track_caller]
pub(crate) fn assert_outcome_unknown(e: &Error, op: Operation) {
    assert_eq!(e.code(), "OUTCOME_UNKNOWN", "{e:?}");
    assert!(e.is_outcome_unknown());
    match e {
        Error::OutcomeUnknown { op: got, .. } => assert_eq!(*got, op, "{e:?}"),
        other => panic!("expected OutcomeUnknown for {op:?}, got {other:?}"),
    }
    assert!(redis_source(e).is_timeout(), "a timeout: {e:?}");
}

// ----- restarts with data loss ---------------------------------------------------

/// Redis restarted (SIGKILL, nothing saved) between two acquires: the
/// fence counter is gone, is seeded again from the server's clock, and the
/// next fence is still larger.
pub(crate) fn restart_with_data_loss_between_two_acquires_still_increases_the_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-restart");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "before the restart");
    let before = F::fence(&lease).get();
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    clock_passes(&server, before);

    server.restart();
    assert_eq!(
        get(&server, &fence_name(&ns, "k")),
        None,
        "the data is lost"
    );
    let lease = granted(locker.acquire("k"), "after the restart");
    let after = F::fence(&lease).get();
    assert!(after > before, "{after} > {before}");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let fresh: F = connect(&server, config(&ns));
    let lease = granted(fresh.acquire("k"), "a fresh locker");
    assert!(F::fence(&lease).get() > after);
    F::release(lease).unwrap();
}

/// Redis restarted while a lease was held: the lock is gone, so another
/// locker acquires at once with a higher fence; the old holder's renew and
/// release report `Conflict` and its lease stays invalid.
pub(crate) fn restart_with_data_loss_while_held_lets_the_next_holder_in_with_a_higher_fence<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-restart-held");
    let holder: F = connect(&server, config(&ns));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let old = F::fence(&held).get();
    clock_passes(&server, old);

    server.restart();
    if F::NOTICES_IDLE_CLOSE {
        wait_for_stats(&holder, "the holder noticed the restart", |s| !s.connected);
    }
    let next: F = connect(&server, config(&ns));
    let lease = granted(next.acquire_with("k", no_wait()), "the lock was lost");
    assert!(
        F::fence(&lease).get() > old,
        "a higher fence after data loss"
    );

    assert_eq!(F::renew(&held).unwrap(), RenewOutcome::Conflict);
    assert!(
        !F::is_valid(&held),
        "a conflicting lease is never valid again"
    );
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

// ----- SIGSTOP ---------------------------------------------------------------------

/// A locker with a short command timeout, warmed up (a pooled connection
/// and cached scripts), so that paused-server calls are really sent.
pub(crate) fn warm_locker<F: Front>(server: &RedisServer, ns: &str) -> Arc<F> {
    let locker = Arc::new(connect::<F>(
        server,
        config(ns).command_timeout(SHORT_TIMEOUT),
    ));
    let lease = granted(locker.acquire("warm-up"), "warm-up");
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    F::release(lease).unwrap();
    locker
}

/// Redis SIGSTOPped during an acquire: it returns `OUTCOME_UNKNOWN` (a
/// timeout) within the command timeout; after SIGCONT nothing is stuck: the
/// token it may have set is released by the locker, and the key can be
/// acquired by this locker and by another one.
pub(crate) fn sigstop_during_acquire_is_outcome_unknown_and_a_later_acquire_works<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-stop-acquire");
    let locker = warm_locker::<F>(&server, &ns);

    let e = {
        let _paused = server.pause_guard();
        let l = locker.clone();
        refused(
            spawn("acquire", move || l.acquire_with("k", no_wait())).join_within(BOUND),
            "acquire on a paused server",
        )
    };
    assert_outcome_unknown(&e, Operation::Acquire);
    assert_eq!(locker.stats().waiters, 0, "the waiter left");

    let lease = granted(
        locker.acquire_with("k", waiting(BOUND)),
        "the same locker, after SIGCONT",
    );
    F::release(lease).unwrap();
    let other: F = connect(&server, config(&ns));
    let lease = granted(other.acquire_with("k", no_wait()), "another locker");
    F::release(lease).unwrap();
    assert_eq!(server.keys(&format!("{ns}:lock:*")), Vec::<String>::new());
}

/// Redis SIGSTOPped during a renew: it returns `OUTCOME_UNKNOWN` within
/// the command timeout and the lease is never valid again (a later renew
/// reports `Expired` without asking Redis); after SIGCONT the key is
/// released and another locker acquires it.
pub(crate) fn sigstop_during_renew_is_outcome_unknown_and_the_lease_is_never_valid_again<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-stop-renew");
    let locker = warm_locker::<F>(&server, &ns);
    let lease = granted(locker.acquire("k"), "acquire");
    assert!(F::is_valid(&lease));

    let (lease, result) = {
        let _paused = server.pause_guard();
        spawn("renew", move || {
            let result = F::renew(&lease);
            (lease, result)
        })
        .join_within(BOUND)
    };
    let e = refused(result, "renew on a paused server");
    assert_outcome_unknown(&e, Operation::Renew);
    assert!(!F::is_valid(&lease), "an unknown renew ends the lease");
    assert_eq!(F::remaining(&lease), Duration::ZERO);

    // After SIGCONT (the renew itself ran then): still never valid.
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Expired);
    assert!(!F::is_valid(&lease));
    let _ = F::release(lease);
    let other: F = connect(&server, config(&ns));
    let lease = granted(
        other.acquire_with("k", waiting(BOUND)),
        "another locker, after SIGCONT",
    );
    F::release(lease).unwrap();
    locker.shutdown().unwrap();
}

/// Redis SIGSTOPped during a release: it returns `OUTCOME_UNKNOWN` within
/// the command timeout; after SIGCONT the key becomes free (the release ran
/// then, or the TTL ends it), another locker acquires it, and the first
/// locker still shuts down cleanly.
pub(crate) fn sigstop_during_release_is_outcome_unknown_and_a_later_acquire_works<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-stop-release");
    let locker = warm_locker::<F>(&server, &ns);
    let lease = granted(locker.acquire("k"), "acquire");
    let fence = F::fence(&lease).get();

    let e = {
        let _paused = server.pause_guard();
        refused(
            spawn("release", move || F::release(lease).map(|_| ())).join_within(BOUND),
            "release on a paused server",
        )
    };
    assert_outcome_unknown(&e, Operation::Release);

    let other: F = connect(&server, config(&ns));
    let lease = granted(
        other.acquire_with("k", waiting(BOUND)),
        "another locker, after SIGCONT",
    );
    assert!(F::fence(&lease).get() > fence);
    F::release(lease).unwrap();
    let lease = granted(locker.acquire_with("k", no_wait()), "the first locker");
    F::release(lease).unwrap();
    locker.shutdown().unwrap();
}

// ----- CLIENT KILL -------------------------------------------------------------------

/// The command connections of both lockers are killed (`CLIENT KILL TYPE
/// normal`) while three waiters wait for a notification: the holder's
/// release and every waiter's attempt go out on new connections, and each
/// waiter gets the key in arrival order.
pub(crate) fn client_kill_of_the_command_connection_mid_wait_strands_no_waiter<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-kill-normal");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 3, &order, &inside);
    // Subscribed, and the head's check after the confirmation was busy: no
    // attempt is in flight, the head waits 30 s for a notification.
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let killed = server.client_kill_type("normal");
    assert!(
        killed >= 2,
        "both lockers had a command connection: {killed}"
    );
    if F::NOTICES_IDLE_CLOSE {
        for (who, locker) in [("holder", &holder), ("waiters", &*waiters)] {
            wait_for_stats(locker, &format!("the {who} noticed the kill"), |s| {
                !s.connected
            });
        }
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    all_served_in_order(threads, &order, 0, BOUND);
    assert_eq!(waiters.stats().waiters, 0);
}

/// The subscriber connection is killed (`CLIENT KILL TYPE pubsub`) while
/// three waiters wait: the locker subscribes again, its heads check once
/// more, and a later release still hands the key over by notification
/// (safety polls are 30 s, beyond the bound).
pub(crate) fn client_kill_of_the_subscriber_mid_wait_resubscribes_and_notifications_still_wake_waiters<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-kill-pubsub");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 3, &order, &inside);
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let busy = waiters.stats().busy_replies;
    assert_eq!(server.client_kill_type("pubsub"), 1, "one subscriber");
    wait_until(
        BOUND,
        "subscribed again, and the head checked again",
        || {
            let s = waiters.stats();
            s.subscribed
                && s.busy_replies > busy
                && server.client_list().iter().any(|c| c.contains(" sub=1 "))
        },
    );
    let notified = waiters.stats().notifications;

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    all_served_in_order(threads, &order, 0, BOUND);
    assert!(waiters.stats().notifications > notified, "by notification");
}

/// The subscriber connection is killed at the moment of the release, so
/// its notification may be lost: the waiters fall back (the locker polls
/// at `poll_interval` while it has no subscription, and its heads check
/// again once it subscribes again) and still get the key, all of them.
pub(crate) fn client_kill_of_the_subscriber_racing_a_release_strands_no_waiter<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-kill-race");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        slow_polling(&ns).poll_interval(Duration::from_millis(25)),
    ));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 3, &order, &inside);
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    assert_eq!(server.client_kill_type("pubsub"), 1, "one subscriber");
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    all_served_in_order(threads, &order, 0, BOUND);
    assert_eq!(waiters.stats().waiters, 0);
    let lease = granted(waiters.acquire_with("k", no_wait()), "afterwards");
    F::release(lease).unwrap();
}

// ----- SCRIPT FLUSH ------------------------------------------------------------------

/// `SCRIPT FLUSH` while waiters wait and a lease is held: the renew, the
/// release, the waiters' next acquire and shutdown's cleanup each load
/// their script again (`NOSCRIPT` never surfaces). The waiters take their
/// grants from the notices: the hand-over sends them no script.
pub(crate) fn script_flush_mid_wait_reloads_the_scripts_and_waiters_still_acquire<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-flush");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 2, &order, &inside);
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });
    let fence = F::fence(&held).get();

    server.script_flush();
    assert_eq!(F::renew(&held).unwrap(), RenewOutcome::Renewed);
    server.script_flush();
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    all_served_in_order(threads, &order, fence, BOUND);
    assert!(holder.stats().noscript_reloads >= 2, "{:?}", holder.stats());

    server.script_flush();
    let lease = granted(waiters.acquire("k"), "one more");
    assert!(
        waiters.stats().noscript_reloads >= 1,
        "{:?}",
        waiters.stats()
    );
    server.script_flush();
    waiters
        .shutdown()
        .expect("shutdown's cleanup loads the release script");
    assert!(!exists(&server, &lock_name(&ns, "k")));
    drop(lease);
}

// ----- eviction policy ---------------------------------------------------------------

/// A server whose `maxmemory-policy` is `allkeys-lru` (locks may be
/// evicted): connecting logs `REDIS_EVICTION_UNSAFE` at error level, and
/// the locker still works.
pub(crate) fn maxmemory_policy_allkeys_lru_logs_redis_eviction_unsafe_and_still_works<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "allkeys-lru"])
        .start();
    let ns = namespace("m-lru");
    let locker: F = connect(&server, config(&ns));
    assert!(
        logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        "{:?}",
        logs.records()
    );
    let lease = granted(locker.acquire("k"), "acquire on an evicting server");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// The eviction check falls back to `INFO memory` when the ACL refuses
/// `CONFIG GET`: a locker user without it still gets
/// `REDIS_EVICTION_UNSAFE` logged on an `allkeys-lru` server.
pub(crate) fn maxmemory_policy_is_checked_through_info_when_config_get_is_refused<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "allkeys-lru"])
        .start();
    let ns = namespace("m-lru-acl");
    let mut rules = crate::least_privilege::rules(&ns);
    rules.retain(|r| r != "+config|get");
    let url = crate::least_privilege::add_user(&server, "no-config", &rules);
    let locker = F::connect(&url, config(&ns)).unwrap_or_else(|e| panic!("connect: {e:?}"));
    assert!(
        logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        "{:?}",
        logs.records()
    );
    let lease = granted(locker.acquire("k"), "acquire");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    let denied = crate::least_privilege::denials(&server, "no-config");
    assert!(
        denied.iter().all(|d| d == "config|get"),
        "only CONFIG GET was refused: {denied:?}"
    );
}

// ----- ACL without pub/sub -----------------------------------------------------------

/// An ACL user without pub/sub commands (`-@pubsub`): `SUBSCRIBE` is
/// refused with `NOPERM`, the locker logs `LOCK_NOTIFY_UNAVAILABLE` and its
/// waiters poll at `poll_interval`; releases (whose `PUBLISH` is refused
/// inside the script) still report `Released`, and contention stays
/// correct: one holder at a time, FIFO, strictly increasing fences.
pub(crate) fn acl_user_without_pubsub_rights_falls_back_to_polling_and_stays_correct<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("m-nopubsub");
    let url = crate::least_privilege::add_user(
        &server,
        "nopubsub",
        &["+@all", "-@pubsub", "~*", "&*"].map(String::from),
    );
    let acl_config = |ns: &str| {
        config(ns)
            .poll_interval(Duration::from_millis(25))
            .notify_poll_interval(SLOW_POLL)
            .wait(Duration::from_secs(25))
    };
    let holder = F::connect(&url, acl_config(&ns)).unwrap_or_else(|e| panic!("{e:?}"));
    let waiters = Arc::new(F::connect(&url, acl_config(&ns)).unwrap_or_else(|e| panic!("{e:?}")));
    let held = granted(holder.acquire_with("k", leased(LONG_LEASE)), "holder");
    let fence = F::fence(&held).get();
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 3, &order, &inside);
    wait_until(BOUND, "the refused subscription was reported", || {
        logs.contains(log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE")
    });
    assert!(!waiters.stats().subscribed);

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    all_served_in_order(threads, &order, fence, BOUND);
    let stats = waiters.stats();
    assert!(!stats.subscribed, "{stats:?}");
    assert_eq!(stats.notifications, 0, "{stats:?}");
    assert!(
        stats.safety_polls >= 1,
        "the hand-over came by polls: {stats:?}"
    );
    let denied = crate::least_privilege::denials(&server, "nopubsub");
    assert!(
        denied.iter().all(|d| d == "subscribe" || d == "publish"),
        "only pub/sub was refused: {denied:?}"
    );
}

// ----- a holder process that dies ----------------------------------------------------

/// A holder process acquires the key and is SIGKILLed without releasing:
/// waiters of another process get the key when the dead holder's lease
/// expires, in arrival order, with higher fences; none is stranded.
pub(crate) fn holder_process_killed_without_releasing_frees_the_key_when_its_lease_expires<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-dead-holder");
    let lease = Duration::from_millis(1500);
    let holder = child::spawn_holder::<F>(&server, &ns, "k", lease);
    assert!(
        exists(&server, &lock_name(&ns, "k")),
        "the child holds the key"
    );

    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(20)),
    ));
    let (order, inside) = Default::default();
    let threads = queue_waiters(&waiters, "k", 2, &order, &inside);
    wait_for_stats(&*waiters, "the head found the key busy", |s| {
        s.busy_replies >= 1
    });
    let fence = holder.kill();
    all_served_in_order(threads, &order, fence, BOUND);
    assert_eq!(waiters.stats().waiters, 0);
}

// ----- the semaphore -----------------------------------------------------------------

/// A semaphore of two permits, both held by another locker for longer than
/// every bound: its slots free up only by release (or data loss).
const SEM_PERMITS: u32 = 2;

/// Takes every permit of the semaphore `key` on `holder`; returns the
/// permits and each slot's fence.
fn hold_every_permit<F: Front>(holder: &F, key: &str) -> (Vec<F::Permit>, Vec<(u32, u64)>) {
    let permits: Vec<_> = (0..SEM_PERMITS)
        .map(|_| {
            granted(
                holder.acquire_permit(key, SEM_PERMITS, leased(LONG_LEASE)),
                "a free permit",
            )
        })
        .collect();
    let fences = permits
        .iter()
        .map(|p| (F::slot(p), F::permit_fence(p).get()))
        .collect();
    (permits, fences)
}

/// Starts `n` waiters for the semaphore `key` on `locker`, each queued
/// before the next starts; each releases its permit and returns its slot
/// and fence.
fn queue_permit_waiters<F: Front>(
    locker: &Arc<F>,
    key: &'static str,
    n: usize,
    wait: Duration,
) -> Vec<Bounded<Result<(u32, u64), String>>> {
    (0..n)
        .map(|i| {
            let queued = locker.stats().waiters;
            let l = locker.clone();
            let t = spawn(&format!("permit-waiter-{i}"), move || {
                let permit = l
                    .acquire_permit(key, SEM_PERMITS, waiting(wait))
                    .map_err(|e| format!("{} ({e:?})", e.code()))?;
                let got = (F::slot(&permit), F::permit_fence(&permit).get());
                match F::release_permit(permit) {
                    Ok(ReleaseOutcome::Released) => Ok(got),
                    other => Err(format!("release: {other:?}")),
                }
            });
            wait_for_stats(&**locker, &format!("permit-waiter-{i} queued"), |s| {
                s.waiters == queued + 1
            });
            t
        })
        .collect()
}

/// Joins every permit waiter (each within `bound`): each got a permit and
/// released it, with a fence above the one its slot had in `held`.
fn all_permit_waiters_served(
    waiters: Vec<Bounded<Result<(u32, u64), String>>>,
    held: &[(u32, u64)],
    bound: Duration,
) {
    for (i, t) in waiters.into_iter().enumerate() {
        let (slot, fence) = t
            .join_within(bound)
            .unwrap_or_else(|e| panic!("permit-waiter-{i} ended with {e}"));
        let before = held
            .iter()
            .find(|(s, _)| *s == slot)
            .map_or(0, |(_, fence)| *fence);
        assert!(
            fence > before,
            "permit-waiter-{i}: slot {slot}'s fence {fence} after {before}"
        );
    }
}

/// Redis killed while permit waiters wait (every slot held), and started
/// again on the same port 400 ms later with all data lost: the waiters
/// keep waiting through the outage and all get a permit afterwards, each
/// with a fence above the one its slot had before.
pub(crate) fn restart_while_permit_waiters_wait_lets_them_acquire_after_it<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-sem-restart");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(15)),
    ));
    let (held, fences) = hold_every_permit(&holder, "pool");
    let threads = queue_permit_waiters(&waiters, "pool", 3, Duration::from_secs(15));
    wait_for_stats(&*waiters, "three permit waiters, subscribed", |s| {
        s.waiters == 3 && s.subscribed
    });
    let last = fences.iter().map(|(_, f)| *f).max().unwrap_or_default();
    clock_passes(&server, last);

    server.restart_after(Duration::from_millis(400));
    all_permit_waiters_served(threads, &fences, Duration::from_secs(20));
    assert_eq!(waiters.stats().waiters, 0);
    // The holder's permits went with the data.
    for permit in held {
        let _ = F::release_permit(permit);
    }
}

/// Redis SIGSTOPped during a permit acquire: `OUTCOME_UNKNOWN`; the script
/// runs after SIGCONT and takes a slot the locker never learnt, so the
/// token is released as an orphan by the locker's next operation (the
/// release that searches the slots for the token), and a second such
/// token by shutdown: no slot key is left for the TTL.
pub(crate) fn sigstop_during_a_permit_acquire_is_outcome_unknown_and_its_token_is_released_later<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-sem-stop");
    let locker = warm_locker::<F>(&server, &ns);
    // The semaphore's script cached too, so the paused acquire is sent.
    F::release_permit(granted(
        locker.acquire_permit("warm-up", 1, no_wait()),
        "warm-up permit",
    ))
    .unwrap();
    let slot_key = crate::behaviour::semaphore::slot_name(&ns, "p", 0);

    let acquire_paused = || {
        let e = {
            let _paused = server.pause_guard();
            let l = locker.clone();
            refused(
                spawn("permit acquire", move || {
                    l.acquire_permit("p", SEM_PERMITS, no_wait())
                })
                .join_within(BOUND),
                "permit acquire on a paused server",
            )
        };
        assert_outcome_unknown(&e, Operation::Acquire);
        // Redis runs the buffered script on resume, before it answers a
        // connection opened afterwards.
        assert!(
            exists(&server, &slot_key),
            "the unknown acquire took slot 0"
        );
    };

    acquire_paused();
    F::release(granted(locker.acquire("other"), "the next operation")).unwrap();
    assert!(
        !exists(&server, &slot_key),
        "the orphan was released by token"
    );

    acquire_paused();
    locker.shutdown().unwrap();
    assert!(!exists(&server, &slot_key), "shutdown released the orphan");
    assert_eq!(server.keys(&format!("{ns}:sem:*")), Vec::<String>::new());
    let other: F = connect(&server, config(&ns));
    let (permits, _) = hold_every_permit(&other, "p");
    for permit in permits {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
}

/// The command connections of both lockers killed while permit waiters
/// wait for a notification: the releases and every waiter's attempt go
/// out on new connections, and every waiter gets a permit.
pub(crate) fn client_kill_of_the_command_connections_mid_wait_permit_waiters_still_acquire<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-sem-kill-normal");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let (held, fences) = hold_every_permit(&holder, "pool");
    let threads = queue_permit_waiters(&waiters, "pool", 3, Duration::from_secs(25));
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let killed = server.client_kill_type("normal");
    assert!(
        killed >= 2,
        "both lockers had a command connection: {killed}"
    );
    if F::NOTICES_IDLE_CLOSE {
        for (who, locker) in [("holder", &holder), ("waiters", &*waiters)] {
            wait_for_stats(locker, &format!("the {who} noticed the kill"), |s| {
                !s.connected
            });
        }
    }
    for permit in held {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
    all_permit_waiters_served(threads, &fences, BOUND);
    assert_eq!(waiters.stats().waiters, 0);
}

/// The subscriber connection killed while permit waiters wait: the locker
/// subscribes again, the head checks once more, and the releases still
/// hand the permits over by notification (safety polls are 30 s).
pub(crate) fn client_kill_of_the_subscriber_mid_wait_permit_waiters_are_still_notified<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-sem-kill-pubsub");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let (held, fences) = hold_every_permit(&holder, "pool");
    let threads = queue_permit_waiters(&waiters, "pool", 3, Duration::from_secs(25));
    wait_for_stats(&*waiters, "subscribed, head backing off", |s| {
        s.subscribed && s.busy_replies >= 2
    });

    let busy = waiters.stats().busy_replies;
    assert_eq!(server.client_kill_type("pubsub"), 1, "one subscriber");
    wait_until(
        BOUND,
        "subscribed again, and the head checked again",
        || {
            let s = waiters.stats();
            s.subscribed
                && s.busy_replies > busy
                && server.client_list().iter().any(|c| c.contains(" sub=1 "))
        },
    );
    let notified = waiters.stats().notifications;

    for permit in held {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
    all_permit_waiters_served(threads, &fences, BOUND);
    assert!(waiters.stats().notifications > notified, "by notification");
}

/// An ACL user without pub/sub commands: `SUBSCRIBE` is refused, the
/// locker logs `LOCK_NOTIFY_UNAVAILABLE`, and its permit waiters poll at
/// `poll_interval` and all get a permit after the releases (whose
/// notification is refused inside the script, and still `Released`).
pub(crate) fn acl_user_without_pubsub_rights_permit_waiters_poll_and_still_acquire<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("m-sem-nopubsub");
    let url = crate::least_privilege::add_user(
        &server,
        "nopubsub",
        &["+@all", "-@pubsub", "~*", "&*"].map(String::from),
    );
    let acl_config = config(&ns)
        .poll_interval(Duration::from_millis(25))
        .notify_poll_interval(SLOW_POLL)
        .wait(Duration::from_secs(25));
    let holder = F::connect(&url, acl_config.clone()).unwrap_or_else(|e| panic!("{e:?}"));
    let waiters = Arc::new(F::connect(&url, acl_config).unwrap_or_else(|e| panic!("{e:?}")));
    let (held, fences) = hold_every_permit(&holder, "pool");
    let threads = queue_permit_waiters(&waiters, "pool", 3, Duration::from_secs(25));
    wait_until(BOUND, "the refused subscription was reported", || {
        logs.contains(log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE")
    });
    assert!(!waiters.stats().subscribed);

    for permit in held {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }
    all_permit_waiters_served(threads, &fences, BOUND);
    let stats = waiters.stats();
    assert!(!stats.subscribed, "{stats:?}");
    assert_eq!(stats.notifications, 0, "{stats:?}");
    assert!(
        stats.safety_polls >= 1,
        "the hand-over came by polls: {stats:?}"
    );
    let denied = crate::least_privilege::denials(&server, "nopubsub");
    assert!(
        denied.iter().all(|d| d == "subscribe" || d == "publish"),
        "only pub/sub was refused: {denied:?}"
    );
}

// ----- the read-write lease ----------------------------------------------------------

/// Starts a reader (`write == false`) or a writer for the read-write lease
/// `key` on `locker` and waits until it is queued; it releases what it
/// got and returns the epoch or fence.
fn queue_rw_waiter<F: Front>(
    locker: &Arc<F>,
    key: &'static str,
    write: bool,
    wait: Duration,
) -> Bounded<Result<u64, String>> {
    let queued = locker.stats().waiters;
    let l = locker.clone();
    let what = if write { "writer" } else { "reader" };
    let t = spawn(&format!("waiting {what}"), move || {
        let failed = |e: Error| format!("{} ({e:?})", e.code());
        let (got, released) = if write {
            let w = l.write_with(key, waiting(wait)).map_err(failed)?;
            (F::write_fence(&w).get(), F::release_write(w))
        } else {
            let r = l.read_with(key, waiting(wait)).map_err(failed)?;
            (F::epoch(&r).get(), F::release_read(r))
        };
        match released {
            Ok(ReleaseOutcome::Released) => Ok(got),
            other => Err(format!("release: {other:?}")),
        }
    });
    wait_for_stats(&**locker, &format!("the {what} queued"), |s| {
        s.waiters == queued + 1
    });
    t
}

/// A reader, then a writer, waiting on `locker` for `key` held by a
/// writer elsewhere; returns once both heads backed off after a busy reply
/// with the locker subscribed, so that no attempt is in flight.
fn reader_and_writer_backing_off<F: Front>(
    locker: &Arc<F>,
    key: &'static str,
) -> [Bounded<Result<u64, String>>; 2] {
    let wait = Duration::from_secs(25);
    let reader = queue_rw_waiter(locker, key, false, wait);
    // Its first attempt, and its check after the confirmation.
    wait_for_stats(&**locker, "the reader backs off, subscribed", |s| {
        s.subscribed && s.busy_replies >= 2
    });
    let writer = queue_rw_waiter(locker, key, true, wait);
    wait_for_stats(&**locker, "the writer backs off too", |s| {
        s.busy_replies >= 3
    });
    [reader, writer]
}

/// Joins the reader and the writer (each within `bound`): both got in;
/// the writer's fence is above `above`, the last writer fence before, and
/// the reader's epoch is at least that (it is `above` when the reader went
/// first, the new writer's fence when it went after it).
fn reader_and_writer_served(
    waiters: [Bounded<Result<u64, String>>; 2],
    above: u64,
    bound: Duration,
) {
    let [reader, writer] = waiters;
    let epoch = reader
        .join_within(bound)
        .unwrap_or_else(|e| panic!("the reader ended with {e}"));
    let fence = writer
        .join_within(bound)
        .unwrap_or_else(|e| panic!("the writer ended with {e}"));
    assert!(fence > above, "the writer's fence {fence} after {above}");
    assert!(
        epoch == above || epoch == fence,
        "the reader's epoch {epoch} is the last writer fence ({above} or {fence})"
    );
}

/// Redis killed while a reader and a writer wait (a writer of another
/// locker holds the key), and started again on the same port 400 ms later
/// with all data lost: both keep waiting through the outage and get in
/// afterwards, the writer with a fence above the old holder's and the
/// reader with an epoch above it (floored at the server clock).
pub(crate) fn restart_while_a_reader_and_a_writer_wait_lets_them_acquire_after_it<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("m-rw-restart");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(15)),
    ));
    let held = granted(holder.write_with("doc", leased(LONG_LEASE)), "the holder");
    let above = F::write_fence(&held).get();
    let wait = Duration::from_secs(15);
    let reader = queue_rw_waiter(&waiters, "doc", false, wait);
    let writer = queue_rw_waiter(&waiters, "doc", true, wait);
    wait_for_stats(&*waiters, "a reader and a writer wait, subscribed", |s| {
        s.waiters == 2 && s.subscribed
    });
    clock_passes(&server, above);

    server.restart_after(Duration::from_millis(400));
    let epoch = reader
        .join_within(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the reader ended with {e}"));
    let fence = writer
        .join_within(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("the writer ended with {e}"));
    assert!(fence > above, "the writer's fence {fence} after {above}");
    assert!(epoch > above, "the reader's epoch {epoch} after {above}");
    assert_eq!(waiters.stats().waiters, 0);
    // The holder's lease went with the data.
    let _ = F::release_write(held);
}

/// Redis SIGSTOPped during a try-once read or write acquire: it returns
/// `OUTCOME_UNKNOWN`; the script runs after SIGCONT and takes what the
/// locker never learnt (the writer's key, or a member of the reader set),
/// so the token is released as an orphan by the locker's next operation,
/// and a second such token by shutdown: nothing is left for the TTL.
fn sigstop_during_an_rw_acquire<F: Front>(write: bool) {
    let server = RedisServer::start();
    let ns = namespace(if write { "m-rw-stop-w" } else { "m-rw-stop-r" });
    let locker = warm_locker::<F>(&server, &ns);
    // The read-write scripts cached too, so the paused acquire is sent.
    F::release_read(granted(locker.read_with("warm-up", no_wait()), "warm-up")).unwrap();
    F::release_write(granted(locker.write_with("warm-up", no_wait()), "warm-up")).unwrap();
    let held = rw_name(&ns, if write { "write" } else { "read" }, "doc");

    let acquire_paused = || {
        let e = {
            let _paused = server.pause_guard();
            let l = locker.clone();
            let t = spawn("rw acquire", move || {
                if write {
                    l.write_with("doc", no_wait()).map(drop)
                } else {
                    l.read_with("doc", no_wait()).map(drop)
                }
            });
            refused(t.join_within(BOUND), "an rw acquire on a paused server")
        };
        assert_outcome_unknown(&e, Operation::Acquire);
        assert_eq!(locker.stats().waiters, 0, "the waiter left");
        // Redis runs the buffered script on resume, before it answers a
        // connection opened afterwards.
        assert!(exists(&server, &held), "the unknown acquire took {held}");
    };

    acquire_paused();
    F::release(granted(locker.acquire("other"), "the next operation")).unwrap();
    assert!(!exists(&server, &held), "the orphan was released by token");

    acquire_paused();
    locker.shutdown().unwrap();
    assert!(!exists(&server, &held), "shutdown released the orphan");
    let other: F = connect(&server, config(&ns));
    let w = granted(other.write_with("doc", no_wait()), "a writer afterwards");
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
}

/// `sigstop_during_an_rw_acquire` for a writer.
pub(crate) fn sigstop_during_a_write_acquire_is_outcome_unknown_and_its_token_is_released_later<
    F: Front,
>() {
    sigstop_during_an_rw_acquire::<F>(true);
}

/// `sigstop_during_an_rw_acquire` for a reader.
pub(crate) fn sigstop_during_a_read_acquire_is_outcome_unknown_and_its_token_is_released_later<
    F: Front,
>() {
    sigstop_during_an_rw_acquire::<F>(false);
}

/// The command connections of both lockers killed while a reader and a
/// writer wait for a notification: the holder's release and the waiters'
/// attempts go out on new connections, and both get in.
pub(crate) fn client_kill_of_the_command_connections_mid_wait_readers_and_writers_still_acquire<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-rw-kill-normal");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let held = granted(holder.write_with("doc", leased(LONG_LEASE)), "the holder");
    let above = F::write_fence(&held).get();
    let threads = reader_and_writer_backing_off(&waiters, "doc");

    let killed = server.client_kill_type("normal");
    assert!(
        killed >= 2,
        "both lockers had a command connection: {killed}"
    );
    if F::NOTICES_IDLE_CLOSE {
        for (who, locker) in [("holder", &holder), ("waiters", &*waiters)] {
            wait_for_stats(locker, &format!("the {who} noticed the kill"), |s| {
                !s.connected
            });
        }
    }
    assert_eq!(F::release_write(held).unwrap(), ReleaseOutcome::Released);
    reader_and_writer_served(threads, above, BOUND);
    assert_eq!(waiters.stats().waiters, 0);
}

/// The subscriber connection killed while a reader and a writer wait: the
/// locker subscribes again, both heads check once more, and the release
/// still hands the key over by notification (safety polls are 30 s).
pub(crate) fn client_kill_of_the_subscriber_mid_wait_readers_and_writers_are_still_notified<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-rw-kill-pubsub");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(&server, slow_polling(&ns)));
    let held = granted(holder.write_with("doc", leased(LONG_LEASE)), "the holder");
    let above = F::write_fence(&held).get();
    let threads = reader_and_writer_backing_off(&waiters, "doc");

    let busy = waiters.stats().busy_replies;
    assert_eq!(server.client_kill_type("pubsub"), 1, "one subscriber");
    wait_until(
        BOUND,
        "subscribed again, and both heads checked again",
        || {
            let s = waiters.stats();
            s.subscribed
                && s.busy_replies >= busy + 2
                && server.client_list().iter().any(|c| c.contains(" sub=1 "))
        },
    );
    let notified = waiters.stats().notifications;

    assert_eq!(F::release_write(held).unwrap(), ReleaseOutcome::Released);
    reader_and_writer_served(threads, above, BOUND);
    assert!(waiters.stats().notifications > notified, "by notification");
}

/// An ACL user without pub/sub commands: `SUBSCRIBE` is refused, the
/// locker logs `LOCK_NOTIFY_UNAVAILABLE`, and its reader and writer poll
/// at `poll_interval` and both get in after the holder's release (whose
/// notification is refused inside the script, and still `Released`).
pub(crate) fn acl_user_without_pubsub_rights_readers_and_writers_poll_and_still_acquire<
    F: Front,
>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("m-rw-nopubsub");
    let url = crate::least_privilege::add_user(
        &server,
        "nopubsub",
        &["+@all", "-@pubsub", "~*", "&*"].map(String::from),
    );
    let acl_config = config(&ns)
        .poll_interval(Duration::from_millis(25))
        .notify_poll_interval(SLOW_POLL)
        .wait(Duration::from_secs(25));
    let holder = F::connect(&url, acl_config.clone()).unwrap_or_else(|e| panic!("{e:?}"));
    let waiters = Arc::new(F::connect(&url, acl_config).unwrap_or_else(|e| panic!("{e:?}")));
    let held = granted(holder.write_with("doc", leased(LONG_LEASE)), "the holder");
    let above = F::write_fence(&held).get();
    let wait = Duration::from_secs(25);
    let threads = [
        queue_rw_waiter(&waiters, "doc", false, wait),
        queue_rw_waiter(&waiters, "doc", true, wait),
    ];
    wait_until(BOUND, "the refused subscription was reported", || {
        logs.contains(log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE")
    });
    assert!(!waiters.stats().subscribed);

    assert_eq!(F::release_write(held).unwrap(), ReleaseOutcome::Released);
    reader_and_writer_served(threads, above, BOUND);
    let stats = waiters.stats();
    assert!(!stats.subscribed, "{stats:?}");
    assert_eq!(stats.notifications, 0, "{stats:?}");
    assert!(
        stats.safety_polls >= 1,
        "the hand-over came by polls: {stats:?}"
    );
    let denied = crate::least_privilege::denials(&server, "nopubsub");
    assert!(
        denied.iter().all(|d| d == "subscribe" || d == "publish"),
        "only pub/sub was refused: {denied:?}"
    );
}

// ----- Sentinel failover -------------------------------------------------------------

/// A front end that can connect through Sentinel.
pub(crate) trait SentinelConnect: Front + Sized {
    /// `Locker::connect_sentinel(urls, master, config)`.
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error>;
}

impl SentinelConnect for crate::behaviour::Blocking {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect_sentinel(
            urls.iter().map(String::as_str),
            master,
            config,
        )
    }
}

impl SentinelConnect for crate::behaviour::Async {
    fn connect_sentinel(urls: &[String], master: &str, config: Config) -> Result<Self, Error> {
        futures::executor::block_on(redlease::aio::Locker::connect_sentinel(
            urls.iter().map(String::as_str),
            master,
            config,
        ))
        .map(crate::behaviour::Async::from_locker)
    }
}

/// Detection (1 s down-after), vote and promotion, with room to spare.
const FAILOVER_BOUND: Duration = Duration::from_secs(45);

/// What the contenders of the failover row share.
#[derive(Default)]
struct FailoverLog {
    /// Every grant's fence, in the order the grants were seen (one key: a
    /// grant comes after the previous holder released, or lost its lease).
    fences: Vec<u64>,
    /// The holders inside now: (contender, granted after the failover).
    inside: Vec<(usize, bool)>,
    /// Two holders at once, both granted after the failover.
    overlaps_after: u64,
    /// Two holders at once, one granted before it (a grant the new primary
    /// may never have received: docs/PROTOCOL.md §3, §10).
    overlaps_across: u64,
    /// Grants after the failover.
    granted_after: u64,
}

/// Redis Sentinel (one primary, one replica, three sentinels): the primary
/// is SIGKILLed while contenders of two lockers take turns on one key (one
/// holds, the others wait). The failover costs only time: every waiter is
/// granted within its wait (an attempt in flight at the kill may end
/// `OUTCOME_UNKNOWN`, nothing else fails), fences strictly increase in
/// grant order across the failover (every grant is floored at the
/// server's clock), no two holders granted after the failover hold at
/// once, and both lockers shut down leaving no lease on the new primary.
pub(crate) fn sentinel_failover_while_contenders_wait_costs_only_time<F: SentinelConnect>() {
    use crate::support::sentinel::SentinelSet;

    const CONTENDERS: usize = 4;
    const AFTER: u64 = 8;
    let set = SentinelSet::start();
    let ns = namespace("m-sentinel-failover");
    let wait = Duration::from_secs(30);
    let config = || {
        Config::new(ns.as_str())
            .lease(Duration::from_secs(2))
            .wait(wait)
            .command_timeout(Duration::from_secs(1))
            .shutdown_timeout(Duration::from_secs(3))
    };
    let lockers: Vec<Arc<F>> = (0..2)
        .map(|_| {
            Arc::new(
                F::connect_sentinel(&set.sentinel_urls(), set.master_name(), config())
                    .unwrap_or_else(|e| panic!("connect through sentinel: {e}")),
            )
        })
        .collect();
    let log = Arc::new(Mutex::new(FailoverLog::default()));
    let failed_over = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let contenders: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let locker = lockers[i % 2].clone();
            let (log, failed_over, stop) = (log.clone(), failed_over.clone(), stop.clone());
            spawn(&format!("contender-{i}"), move || {
                let mut unknown = 0u32;
                while !stop.load(Ordering::SeqCst) {
                    let lease = match locker.acquire_with("job", waiting(wait)) {
                        Ok(lease) => lease,
                        Err(e) if e.is_outcome_unknown() => {
                            unknown += 1;
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let after = failed_over.load(Ordering::SeqCst);
                    {
                        let mut log = log.lock().unwrap();
                        log.fences.push(F::fence(&lease).get());
                        let others = log.inside.len() as u64;
                        let after_too = log.inside.iter().filter(|o| after && o.1).count() as u64;
                        log.overlaps_after += after_too;
                        log.overlaps_across += others - after_too;
                        log.inside.push((i, after));
                        log.granted_after += u64::from(after);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    log.lock().unwrap().inside.retain(|(c, _)| *c != i);
                    // The lease may be gone with the old primary: any
                    // outcome but an error that is not about the failover.
                    let _ = F::release(lease);
                }
                Ok::<u32, Error>(unknown)
            })
        })
        .collect();

    // Kill the primary while one contender holds and others wait.
    wait_until(BOUND, "grants before the failover", || {
        log.lock().unwrap().fences.len() >= 5
    });
    wait_until(BOUND, "a holder inside and waiters in line", || {
        !log.lock().unwrap().inside.is_empty()
            && lockers.iter().map(|l| l.stats().waiters).sum::<usize>() >= 2
    });
    let killed = set.kill_primary();
    let new = set.wait_failover(killed, FAILOVER_BOUND);
    failed_over.store(true, Ordering::SeqCst);
    wait_until(FAILOVER_BOUND, "grants after the failover", || {
        log.lock().unwrap().granted_after >= AFTER
    });
    stop.store(true, Ordering::SeqCst);
    let mut unknown = 0;
    for c in contenders {
        match c.join_within(wait + BOUND) {
            Ok(n) => unknown += n,
            Err(e) => panic!("a waiter failed across the failover: {} ({e:?})", e.code()),
        }
    }
    let log = log.lock().unwrap();
    eprintln!(
        "sentinel failover under contention: {} grants ({} after), {unknown} OUTCOME_UNKNOWN, \
         {} overlaps across the failover",
        log.fences.len(),
        log.granted_after,
        log.overlaps_across
    );
    assert!(
        log.fences.windows(2).all(|w| w[0] < w[1]),
        "fences strictly increase in grant order across the failover: {:?}",
        log.fences
    );
    assert_eq!(
        log.overlaps_after, 0,
        "two holders granted after the failover held at once"
    );
    for locker in &lockers {
        assert_eq!(locker.stats().waiters, 0, "no waiter stranded");
        locker.shutdown().expect("shutdown after the failover");
    }
    let left: Vec<String> = set
        .server(new)
        .keys(&format!("{ns}:lock:*"))
        .into_iter()
        .map(|k| {
            let v = set.server(new).query(redis::cmd("GET").arg(&k));
            let t = set.server(new).query(redis::cmd("PTTL").arg(&k));
            format!("{v:?} pttl {t:?}")
        })
        .collect();
    assert!(
        left.is_empty(),
        "no lease left on the new primary: {left:?}"
    );
}

// ----- holder processes of a permit and of a write lease that die -------------------

/// A process holding the only permit of a semaphore, and one holding the
/// write lease of a read-write lease, are SIGKILLed without releasing:
/// a permit waiter, a writer and a reader of another process get them
/// once the dead holders' leases expire (their TTL), the permit on the
/// same slot with a higher fence, the writer with a fence above the dead
/// writer's and the reader with an epoch not below it; none is stranded.
pub(crate) fn permit_and_writer_processes_killed_without_releasing_free_their_keys_at_the_ttl<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("m-dead-kinds");
    let lease = Duration::from_millis(1500);
    let permit_holder =
        child::spawn_holder_of::<F>(&server, &ns, "pool", lease, child::Hold::Permit(1));
    let writer = child::spawn_holder_of::<F>(&server, &ns, "doc", lease, child::Hold::Write);

    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(20)),
    ));
    let wait = || waiting(Duration::from_secs(20));
    let l = locker.clone();
    let permit = spawn("permit waiter", move || {
        let p = l.acquire_permit("pool", 1, wait())?;
        let got = (F::slot(&p), F::permit_fence(&p).get());
        F::release_permit(p)?;
        Ok::<_, Error>(got)
    });
    let l = locker.clone();
    let write = spawn("writer", move || {
        let w = l.write_with("doc", wait())?;
        let fence = F::write_fence(&w).get();
        F::release_write(w)?;
        Ok::<_, Error>(fence)
    });
    let l = locker.clone();
    let read = spawn("reader", move || {
        let r = l.read_with("doc", wait())?;
        let epoch = F::epoch(&r).get();
        F::release_read(r)?;
        Ok::<_, Error>(epoch)
    });
    wait_for_stats(&*locker, "three waiters in line", |s| s.waiters == 3);
    let dead_permit = permit_holder.kill();
    let dead_writer = writer.kill();

    let (slot, fence) = permit.join_within(BOUND).expect("the permit after the TTL");
    assert_eq!(slot, 0, "the only slot");
    assert!(fence > dead_permit, "{fence} after the dead {dead_permit}");
    let fence = write
        .join_within(BOUND)
        .expect("the write lease after the TTL");
    assert!(fence > dead_writer, "{fence} after the dead {dead_writer}");
    let epoch = read
        .join_within(BOUND)
        .expect("the read lease after the TTL");
    assert!(
        epoch >= dead_writer,
        "epoch {epoch} below the dead writer's {dead_writer}"
    );
    assert_eq!(locker.stats().waiters, 0);
    locker.shutdown().expect("shutdown");
}

/// A locker whose ACL was written before the hand-over (no rights on the
/// queue's keys) turns the hand-over off at the first refusal, logs
/// `LOCK_HANDOVER_UNAVAILABLE` once, and waits and acquires as before; the
/// ACL refused nothing but the queue's keys.
pub(crate) fn acl_user_without_the_handover_keys_waits_without_them<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let ns = namespace("m-no-queue");
    let mut rules = crate::least_privilege::rules(&ns);
    rules.retain(|r| !r.contains(":lock-queue") && !r.contains(":lock-reg"));
    let url = crate::least_privilege::add_user(&server, "no-queue", &rules);
    let holder: F = connect(&server, config(&ns));
    let waiter =
        Arc::new(F::connect(&url, config(&ns)).unwrap_or_else(|e| panic!("connect: {e:?}")));
    let held = granted(holder.acquire("k"), "holder");
    let w = waiter.clone();
    let t = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "a waiter without the queue's keys");
        let again = granted(w.acquire_with("other", no_wait()), "a second key");
        (F::release(lease).unwrap(), F::release(again).unwrap())
    });
    wait_for_stats(&*waiter, "the waiter waits", |s| s.waiters == 1);
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let outcomes = t.join_within(BOUND);
    assert_eq!(
        outcomes,
        (ReleaseOutcome::Released, ReleaseOutcome::Released)
    );
    let warned = logs
        .records()
        .iter()
        .filter(|r| r.message.contains("LOCK_HANDOVER_UNAVAILABLE"))
        .count();
    assert_eq!(warned, 1, "{:?}", logs.records());
    let denied = crate::least_privilege::denials(&server, "no-queue");
    assert!(
        !denied.is_empty(),
        "the first attempt touched the queue's flag"
    );
    assert!(
        denied.iter().all(|d| d.contains(":lock-queue")),
        "only the queue's keys were refused: {denied:?}"
    );
}
