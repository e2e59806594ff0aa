//! Server setups: an eviction policy that may drop locks, and an ACL user
//! without channel permissions (no release notifications).

use std::sync::Arc;
use std::time::Duration;

use redlease::ReleaseOutcome;

use super::common::{config, connect, exists, granted, leased, lock_name, namespace, spawn, BOUND};
use super::front::Front;
use super::logs;
use crate::support::{wait_until, RedisServer};

/// Connecting to a server whose `maxmemory-policy` may evict keys works,
/// and logs an error with `REDIS_EVICTION_UNSAFE`; `noeviction` logs none.
pub(crate) fn connecting_to_a_server_that_may_evict_keys_logs_redis_eviction_unsafe<F: Front>() {
    let logs = logs::capture();
    let evicting = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start();
    let ns = namespace("evict");
    let locker: F = connect(&evicting, config(&ns));
    assert!(
        logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        "records: {:?}",
        logs.records()
    );
    F::release(granted(
        locker.acquire("k"),
        "acquire on an evicting server",
    ))
    .unwrap();

    let logs = logs::capture();
    let safe = RedisServer::start();
    let _locker: F = connect(&safe, config(&ns));
    assert!(
        !logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        "records: {:?}",
        logs.records()
    );
}

/// `nopub`: every command and key, but no channel but `none`.
fn add_user_without_channels(server: &RedisServer) -> String {
    server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("nopub")
            .arg("on")
            .arg(">pw")
            .arg("~*")
            .arg("resetchannels")
            .arg("&none")
            .arg("+@all"),
    );
    format!("redis://nopub:pw@127.0.0.1:{}/0", server.port())
}

/// When the ACL refuses the release channel, the locker knows it is not
/// subscribed (and logs `LOCK_NOTIFY_UNAVAILABLE`), so its waiters poll at
/// `poll_interval` (25 ms) and get the lock soon after a release; with the
/// 30 s `notify_poll_interval` a waiter that wrongly trusted notifications
/// would miss the bound.
pub(crate) fn waiters_poll_when_the_acl_refuses_release_notifications<F: Front>() {
    let logs = logs::capture();
    let server = RedisServer::start();
    let url = add_user_without_channels(&server);
    let ns = namespace("acl");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(
        F::connect(
            &url,
            config(&ns)
                .poll_interval(Duration::from_millis(25))
                .notify_poll_interval(Duration::from_secs(30))
                .wait(Duration::from_secs(25)),
        )
        .unwrap_or_else(|e| panic!("connect as nopub: {e:?}")),
    );
    let held = granted(
        holder.acquire_with("k", leased(Duration::from_secs(60))),
        "holder",
    );

    let w = waiters.clone();
    let waiter = spawn("waiter", move || {
        let lease = granted(w.acquire("k"), "waiter");
        let fence = F::fence(&lease);
        // The release is another test's concern (its PUBLISH is refused).
        let _ = F::release(lease);
        fence
    });
    wait_until(BOUND, "the subscription attempt settled", || {
        logs.contains(log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE") || waiters.stats().subscribed
    });
    let stats = waiters.stats();
    assert!(
        !stats.subscribed,
        "the ACL refused SUBSCRIBE, yet the locker reports itself subscribed: {stats:?}"
    );
    assert!(logs.contains(log::Level::Warn, "LOCK_NOTIFY_UNAVAILABLE"));
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);

    waiter.join_within(BOUND);
    let stats = waiters.stats();
    assert!(!stats.subscribed, "{stats:?}");
    assert_eq!(stats.notifications, 0, "{stats:?}");
}

/// A user whose ACL refuses the release channel can still release: the lock
/// is deleted and the outcome is `Released` (the notification is best effort).
pub(crate) fn a_release_whose_notification_the_acl_refuses_still_reports_released<F: Front>() {
    let server = RedisServer::start();
    let url = add_user_without_channels(&server);
    let ns = namespace("acl-release");
    let locker = F::connect(&url, config(&ns)).unwrap_or_else(|e| panic!("connect: {e:?}"));
    let lease = granted(locker.acquire("k"), "acquire as nopub");
    let result = F::release(lease);
    let deleted = !exists(&server, &lock_name(&ns, "k"));
    match result {
        Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Released),
        Err(e) => panic!(
            "release failed with {} ({e:?}) although the lock was {}deleted",
            e.code(),
            if deleted { "" } else { "not " }
        ),
    }
    assert!(deleted);
}
