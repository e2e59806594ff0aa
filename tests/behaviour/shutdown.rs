//! Shutdown: releases every tracked lease (fence counters stay), ends waits
//! and refuses acquires with `SHUTTING_DOWN`, and never reports an
//! unconfirmed cleanup as success.

use std::sync::Arc;
use std::time::Duration;

use redlease::{Error, ReleaseOutcome};

use super::common::{
    config, connect, exists, fence_name, granted, leased, lock_name, namespace, no_wait, refused,
    spawn, wait_for_stats, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// Shutdown deletes the locks of every tracked lease but keeps their fence
/// counters; a second shutdown is a no-op.
pub(crate) fn shutdown_releases_tracked_leases_and_keeps_fence_counters<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown");
    let locker: F = connect(&server, config(&ns));
    let keys = ["a", "b", "c"];
    let leases: Vec<_> = keys
        .iter()
        .map(|k| {
            granted(
                locker.acquire_with(k, leased(Duration::from_secs(30))),
                "acquire",
            )
        })
        .collect();
    assert_eq!(locker.stats().tracked_leases, 3);

    locker.shutdown().unwrap();
    for k in keys {
        assert!(!exists(&server, &lock_name(&ns, k)), "lock of {k} released");
        assert!(
            exists(&server, &fence_name(&ns, k)),
            "fence counter of {k} kept"
        );
    }
    assert_eq!(locker.stats().tracked_leases, 0);
    locker.shutdown().unwrap();
    drop(leases);
}

/// Shutdown ends every wait with `SHUTTING_DOWN`, and later acquires fail
/// the same way; other lockers' leases are untouched.
pub(crate) fn shutdown_ends_waits_and_refuses_new_acquires_with_shutting_down<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown-waits");
    let holder: F = connect(&server, config(&ns));
    let waiters = Arc::new(connect::<F>(
        &server,
        config(&ns).wait(Duration::from_secs(20)),
    ));
    let held = granted(holder.acquire("k"), "holder");
    let threads: Vec<_> = (0..2)
        .map(|i| {
            let w = waiters.clone();
            spawn(&format!("waiter-{i}"), move || w.acquire("k").map(|_| ()))
        })
        .collect();
    wait_for_stats(&*waiters, "two waiters", |s| s.waiters == 2);

    waiters.shutdown().unwrap();
    for t in threads {
        let e = refused(t.join_within(BOUND), "waiter at shutdown");
        assert!(matches!(e, Error::ShuttingDown), "{e:?}");
        assert_eq!(e.code(), "SHUTTING_DOWN");
    }
    for options in [no_wait(), leased(Duration::from_secs(1))] {
        let e = refused(
            waiters.acquire_with("free", options),
            "acquire after shutdown",
        );
        assert_eq!(e.code(), "SHUTTING_DOWN");
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
}

/// Releasing a lease that shutdown already released reports
/// `SHUTTING_DOWN`.
pub(crate) fn releasing_a_lease_after_shutdown_reports_shutting_down<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown-release");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(locker.acquire("k"), "acquire");
    locker.shutdown().unwrap();
    assert!(!exists(&server, &lock_name(&ns, "k")));
    let e = refused(F::release(lease), "release after shutdown");
    assert_eq!(e.code(), "SHUTTING_DOWN");
}

/// Shutdown against a paused server returns `CLEANUP_TIMEOUT` after its
/// `shutdown_timeout`; the release it sent is applied after the resume.
pub(crate) fn shutdown_against_a_paused_server_reports_cleanup_timeout<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("shutdown-paused");
    let locker = Arc::new(connect::<F>(
        &server,
        config(&ns)
            .shutdown_timeout(Duration::from_millis(300))
            .command_timeout(Duration::from_millis(200)),
    ));
    let lease = granted(
        locker.acquire_with("k", leased(Duration::from_secs(30))),
        "acquire",
    );

    let e = {
        let _paused = server.pause_guard();
        let l = locker.clone();
        spawn("shutdown", move || l.shutdown()).join_within(BOUND)
    };
    let e = e.expect_err("an unconfirmed cleanup is never reported as success");
    assert_eq!(e.code(), "CLEANUP_TIMEOUT", "{e:?}");
    assert!(
        matches!(e, Error::CleanupTimeout { unconfirmed: 1, .. }),
        "{e:?}"
    );

    wait_until(
        BOUND,
        "the late release is applied after the resume",
        || !exists(&server, &lock_name(&ns, "k")),
    );
    assert_eq!(
        refused(F::release(lease), "release").code(),
        "SHUTTING_DOWN"
    );
}
