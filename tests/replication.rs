//! The replication check (`Config::min_replicas`, the crate docs' "Replication check") on both front
//! ends against a real primary and replica: `WAIT n timeout` after every
//! acquire and renew, `REPLICATION_FAILED` with the counts (and the key
//! released) when too few replicas acknowledge, `INVALID_CONFIG` for a lease
//! shorter than 1.5 × the timeout, and a clear `PROVIDER_FAILED` when the
//! server refuses `WAIT`.
//!
//! Every body is generic over the behaviour suite's `Front` and runs once
//! per front end (`blocking::` and `aio::` below).
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::sync::Arc;
use std::time::Duration;

use redlease::{Config, Error, Operation, RenewOutcome};

use behaviour::common::{
    config, connect, exists, granted, leased, lock_name, namespace, refused, spawn, stored_names,
    BOUND,
};
use behaviour::front::Front;
use support::{wait_until, RedisServer};

/// The replication timeout of every body.
const REPLICATION_TIMEOUT: Duration = Duration::from_millis(200);

/// The suite's config with `min_replicas(n, 200 ms)` and a 2 s lease.
fn replicated(ns: &str, n: u32) -> Config {
    config(ns)
        .lease(Duration::from_secs(2))
        .min_replicas(n, REPLICATION_TIMEOUT)
}

/// A primary and one replica that acknowledges writes.
///
/// `master_link_status:up` on the replica is not enough: after a diskless
/// full sync the primary streams (and counts the replica in `WAIT`) only
/// from the replica's first `REPLCONF ACK`, which can take up to a second.
/// So a probe write is repeated until `WAIT 1 50` sees it acknowledged.
fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::builder().replica_of(&primary).start();
    let mut conn = primary.conn();
    wait_until(BOUND, "the replica acknowledges writes", || {
        let (_, acked): ((), u64) = redis::pipe()
            .cmd("SET")
            .arg("replication-probe")
            .arg("1")
            .cmd("WAIT")
            .arg(1)
            .arg(50)
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("probe the replica: {e}"));
        acked == 1
    });
    (primary, replica)
}

/// Asserts `e` is `REPLICATION_FAILED` with these counts.
fn assert_replication_failed(e: &Error, acked: u32, required: u32) {
    assert_eq!(e.code(), "REPLICATION_FAILED", "{e:?}");
    match e {
        Error::ReplicationFailed {
            acked: a,
            required: r,
        } => assert_eq!((*a, *r), (acked, required), "{e:?}"),
        other => panic!("expected ReplicationFailed, got {other:?}"),
    }
}

/// An acquire one replica acknowledged succeeds and reports
/// `replicas() == Some(1)`; so does a renew. The lock reaches the replica.
fn an_acquire_and_a_renew_acknowledged_by_a_replica_report_it<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("repl-ok");
    let locker: F = connect(&primary, replicated(&ns, 1));
    let lease = granted(locker.acquire("k"), "replicated acquire");
    assert_eq!(F::replicas(&lease), Some(1));
    let name = lock_name(&ns, "k");
    wait_until(BOUND, "the lock reached the replica", || {
        exists(&replica, &name)
    });
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    assert_eq!(F::replicas(&lease), Some(1));
    assert!(F::is_valid(&lease));
    F::release(lease).unwrap();
    assert!(!exists(&primary, &name));

    // Without the option nothing is checked.
    let plain: F = connect(&primary, config(&ns));
    let lease = granted(plain.acquire("k"), "plain acquire");
    assert_eq!(F::replicas(&lease), None);
    F::release(lease).unwrap();
}

/// With the replica paused (SIGSTOP) no replica acknowledges: the acquire
/// fails with `REPLICATION_FAILED { acked: 0, required: 1 }` and the key is
/// gone from the primary.
fn an_acquire_with_the_replica_paused_fails_and_releases_the_key<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("repl-paused");
    let locker: F = connect(&primary, replicated(&ns, 1));
    let e = {
        let _paused = replica.pause_guard();
        refused(locker.acquire("k"), "acquire with the replica paused")
    };
    assert_replication_failed(&e, 0, 1);
    assert!(!exists(&primary, &lock_name(&ns, "k")), "released");
    assert_eq!(locker.stats().tracked_leases, 0);
    // Once the replica is back, the key can be taken.
    let lease = granted(locker.acquire("k"), "acquire after the resume");
    assert_eq!(F::replicas(&lease), Some(1));
    F::release(lease).unwrap();
}

/// With the replica stopped (killed) the acquire fails the same way.
fn an_acquire_with_the_replica_stopped_fails_and_releases_the_key<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("repl-stopped");
    let locker: F = connect(&primary, replicated(&ns, 1));
    drop(replica);
    wait_until(BOUND, "the primary saw the replica go", || {
        primary
            .info("replication")
            .lines()
            .any(|l| l.trim() == "connected_slaves:0")
    });
    let e = refused(locker.acquire("k"), "acquire without a replica");
    assert_replication_failed(&e, 0, 1);
    assert!(!exists(&primary, &lock_name(&ns, "k")), "released");
    assert_eq!(locker.stats().tracked_leases, 0);
}

/// A renew while the replica is paused fails with `REPLICATION_FAILED`;
/// the lease is released (key gone) and no longer valid.
fn a_renew_with_the_replica_paused_fails_and_releases_the_key<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("repl-renew");
    let name = lock_name(&ns, "k");
    let locker = Arc::new(connect::<F>(&primary, replicated(&ns, 1)));
    let lease = granted(locker.acquire("k"), "replicated acquire");
    assert_eq!(F::replicas(&lease), Some(1));
    let (lease, result) = {
        let _paused = replica.pause_guard();
        spawn("renew", move || {
            let result = F::renew(&lease);
            (lease, result)
        })
        .join_within(BOUND)
    };
    let e = match result {
        Ok(outcome) => panic!("expected REPLICATION_FAILED, got {outcome:?}"),
        Err(e) => e,
    };
    assert_replication_failed(&e, 0, 1);
    assert!(!exists(&primary, &name), "released");
    assert!(!F::is_valid(&lease));
    // Whatever a second release reports, it does not hang or re-create.
    let _ = spawn("release", move || F::release(lease)).join_within(BOUND);
    assert!(!exists(&primary, &name));
    assert_eq!(locker.stats().tracked_leases, 0);
}

/// Releasing a lease whose renew failed the replication check (and which
/// the renew therefore released) reports a settled outcome, not
/// `SHUTTING_DOWN`: the locker is not shutting down.
fn releasing_a_lease_whose_renew_failed_replication_is_not_shutting_down<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("repl-renew-release");
    let locker: F = connect(&primary, replicated(&ns, 1));
    let lease = granted(locker.acquire("k"), "replicated acquire");
    let renewed = {
        let _paused = replica.pause_guard();
        F::renew(&lease)
    };
    assert_replication_failed(&renewed.expect_err("renew with the replica paused"), 0, 1);
    match F::release(lease) {
        Ok(outcome) => assert!(!exists(&primary, &lock_name(&ns, "k")), "{outcome:?}"),
        Err(e) => panic!(
            "release of an already released lease on a running locker: {} ({e:?})",
            e.code()
        ),
    }
}

/// Asking for two replicas with one connected fails with `acked: 1`.
fn two_required_replicas_with_one_connected_fail_with_acked_one<F: Front>() {
    let (primary, _replica) = primary_and_replica();
    let ns = namespace("repl-two");
    let locker: F = connect(&primary, replicated(&ns, 2));
    let e = refused(locker.acquire("k"), "acquire needing two replicas");
    assert_replication_failed(&e, 1, 2);
    assert!(!exists(&primary, &lock_name(&ns, "k")), "released");
}

/// A lease shorter than 1.5 × the replication timeout is `INVALID_CONFIG`,
/// both in the config at connect and as an acquire's lease; nothing is
/// written.
fn a_lease_shorter_than_one_and_a_half_timeouts_is_invalid_config<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("repl-invalid");
    let short = config(&ns)
        .lease(Duration::from_millis(250))
        .min_replicas(1, REPLICATION_TIMEOUT);
    match F::connect(&server.url(), short) {
        Ok(_) => panic!("connect accepted a 250 ms lease with a 200 ms replication timeout"),
        Err(e) => {
            assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}");
            assert!(
                matches!(
                    e,
                    Error::InvalidConfig {
                        option: "min_replicas",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }
    let locker: F = connect(&server, replicated(&ns, 1));
    let e = refused(
        locker.acquire_with("k", leased(Duration::from_millis(250))),
        "acquire with a short lease",
    );
    assert_eq!(e.code(), "INVALID_CONFIG", "{e:?}");
    assert!(stored_names(&server, &ns).is_empty(), "nothing written");
    assert_eq!(locker.stats().waiters, 0);
}

/// `ACL SETUSER nowait on >pw ~* &* +@all -wait`.
fn add_user_without_wait(server: &RedisServer) -> String {
    server.query(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("nowait")
            .arg("on")
            .arg(">pw")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-wait"),
    );
    format!("redis://nowait:pw@127.0.0.1:{}/0", server.port())
}

/// A server that refuses `WAIT` (an ACL without it) gives a clear
/// `PROVIDER_FAILED` for the replication step, within a bound (not a
/// hang), and the acquired key is released.
fn a_server_refusing_wait_gives_provider_failed_and_releases_the_key<F: Front>() {
    let server = RedisServer::start();
    let url = add_user_without_wait(&server);
    let ns = namespace("repl-acl");
    let locker = Arc::new(
        F::connect(&url, replicated(&ns, 1)).unwrap_or_else(|e| panic!("connect as nowait: {e:?}")),
    );
    let l = locker.clone();
    let e = refused(
        spawn("acquire", move || l.acquire("k")).join_within(BOUND),
        "acquire when WAIT is refused",
    );
    assert_eq!(e.code(), "PROVIDER_FAILED", "{e:?}");
    assert!(
        matches!(
            e,
            Error::ProviderFailed {
                op: Operation::Replication,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.redis_error().and_then(|r| r.code()),
        Some("NOPERM"),
        "{e:?}"
    );
    assert!(!exists(&server, &lock_name(&ns, "k")), "released");
    assert_eq!(locker.stats().tracked_leases, 0);
}

/// Instantiates every body for one front end.
macro_rules! replication_suite {
    ($front:ty) => {
        #[test]
        fn an_acquire_and_a_renew_acknowledged_by_a_replica_report_it() {
            super::an_acquire_and_a_renew_acknowledged_by_a_replica_report_it::<$front>();
        }
        #[test]
        fn an_acquire_with_the_replica_paused_fails_and_releases_the_key() {
            super::an_acquire_with_the_replica_paused_fails_and_releases_the_key::<$front>();
        }
        #[test]
        fn an_acquire_with_the_replica_stopped_fails_and_releases_the_key() {
            super::an_acquire_with_the_replica_stopped_fails_and_releases_the_key::<$front>();
        }
        #[test]
        fn a_renew_with_the_replica_paused_fails_and_releases_the_key() {
            super::a_renew_with_the_replica_paused_fails_and_releases_the_key::<$front>();
        }
        #[test]
        fn releasing_a_lease_whose_renew_failed_replication_is_not_shutting_down() {
            super::releasing_a_lease_whose_renew_failed_replication_is_not_shutting_down::<$front>(
            );
        }
        #[test]
        fn two_required_replicas_with_one_connected_fail_with_acked_one() {
            super::two_required_replicas_with_one_connected_fail_with_acked_one::<$front>();
        }
        #[test]
        fn a_lease_shorter_than_one_and_a_half_timeouts_is_invalid_config() {
            super::a_lease_shorter_than_one_and_a_half_timeouts_is_invalid_config::<$front>();
        }
        #[test]
        fn a_server_refusing_wait_gives_provider_failed_and_releases_the_key() {
            super::a_server_refusing_wait_gives_provider_failed_and_releases_the_key::<$front>();
        }
    };
}

/// The blocking front end.
mod blocking {
    replication_suite!(crate::behaviour::Blocking);
}

/// The async front end.
mod aio {
    replication_suite!(crate::behaviour::Async);
}

/// A lease of exactly 1.5 × the replication timeout is allowed ("at
/// least"), e.g. 300 ms for 200 ms or 150 ms for 100 ms, in the config and
/// as an acquire's lease.
#[test]
fn a_lease_of_exactly_one_and_a_half_timeouts_is_accepted() {
    for (lease_ms, timeout_ms) in [(300, 200), (150, 100), (75, 50), (1500, 1000)] {
        let config = Config::new("n")
            .lease(Duration::from_millis(lease_ms))
            .min_replicas(1, Duration::from_millis(timeout_ms));
        assert!(
            config.validate().is_ok(),
            "lease {lease_ms} ms with a {timeout_ms} ms replication timeout: {:?}",
            config.validate()
        );
    }
    let server = RedisServer::start();
    let ns = namespace("repl-exact");
    let locker: redlease::blocking::Locker = connect(&server, replicated(&ns, 1));
    // No replica: a valid lease gets as far as the replication check.
    let e = refused(
        locker.acquire_with("k", leased(Duration::from_millis(300))),
        "acquire with a lease of 1.5 x the timeout",
    );
    assert_replication_failed(&e, 0, 1);
}

/// `with_lock(.., extend(true))` with the replication check: a renewal
/// the (paused) replica does not acknowledge fires the loss signal with
/// `RenewFailed(ReplicationFailed { acked: 0, required: 1 })`, and the key
/// is released. The lease (1 s) leaves the renewal at 500 ms plus the
/// 200 ms `WAIT` well before the local deadline.
mod with_lock {
    use std::time::Duration;

    use redlease::{Error, Lost, LostCause, WithLock};

    use super::{assert_replication_failed, primary_and_replica, replicated};
    use crate::behaviour::common::{exists, lock_name, namespace, BOUND};
    use crate::behaviour::logs;

    const LEASE: Duration = Duration::from_secs(1);

    /// The loss's cause is a failed replication check.
    fn assert_lost_to_replication(e: Option<Error>) {
        match e {
            Some(Error::LockLost {
                cause: LostCause::RenewFailed(inner),
            }) => assert_replication_failed(&inner, 0, 1),
            other => panic!("expected RenewFailed(ReplicationFailed), got {other:?}"),
        }
    }

    /// The blocking scenario; returns whether `LOCK_RELEASE_FAILED` was logged.
    fn blocking_scenario() -> bool {
        let logs = logs::capture();
        let (primary, replica) = primary_and_replica();
        let ns = namespace("repl-wl");
        let name = lock_name(&ns, "k");
        let locker =
            redlease::blocking::Locker::connect(primary.url(), replicated(&ns, 1)).unwrap();
        locker
            .with_lock(
                "k",
                WithLock::new().lease(LEASE).extend(true),
                |lease, lost: &Lost| {
                    assert_eq!(lease.replicas(), Some(1));
                    let _paused = replica.pause_guard();
                    assert!(lost.wait_timeout(BOUND), "the loss signal fired");
                    assert_lost_to_replication(lost.cause());
                    assert!(!exists(&primary, &name), "released by the failed renewal");
                    Ok::<_, Error>(())
                },
            )
            .unwrap();
        assert!(!exists(&primary, &name));
        logs.records()
            .iter()
            .any(|r| r.message.contains("LOCK_RELEASE_FAILED"))
    }

    #[test]
    fn blocking_a_renewal_without_replica_acks_fires_lost() {
        blocking_scenario();
    }

    /// `with_lock`'s own release after such a loss is not a failure worth
    /// a warning: the renewal already released the key.
    #[test]
    fn blocking_no_release_failure_is_logged_after_a_replication_loss() {
        assert!(
            !blocking_scenario(),
            "a spurious LOCK_RELEASE_FAILED was logged"
        );
    }

    #[test]
    fn aio_a_renewal_without_replica_acks_fires_lost() {
        use futures::future::{select, Either};
        let (primary, replica) = primary_and_replica();
        let ns = namespace("repl-awl");
        let name = lock_name(&ns, "k");
        futures::executor::block_on(async {
            let locker = redlease::aio::Locker::connect(primary.url(), replicated(&ns, 1))
                .await
                .unwrap();
            locker
                .with_lock(
                    "k",
                    WithLock::new().lease(LEASE).extend(true),
                    async |lease, lost| {
                        assert_eq!(lease.replicas(), Some(1));
                        let _paused = replica.pause_guard();
                        let bound = async_io::Timer::after(BOUND);
                        let e = match select(std::pin::pin!(lost.wait()), bound).await {
                            Either::Left((e, _)) => e,
                            Either::Right(_) => panic!("the loss signal did not fire"),
                        };
                        assert_lost_to_replication(Some(e));
                        assert!(!exists(&primary, &name), "released by the failed renewal");
                        Ok::<_, Error>(())
                    },
                )
                .await
                .unwrap();
        });
        assert!(!exists(&primary, &name));
    }
}
