//! `with_lock` on both front ends against a real Redis (`with_lock`'s docs): it
//! acquires (waiting per its options), runs the closure with the lease and
//! its loss signal, and always releases afterwards; with `extend(true)` it
//! keeps the lease alive, and the loss signal fires when the lease is lost
//! (key deleted, taken by another owner, Redis paused) and never otherwise.
//!
//! Waits are bounded; the only sleeps let time pass so that a lease needs
//! renewing. Leases are short (300–500 ms) to keep the file fast.
#![allow(clippy::disallowed_methods)]

mod support;

#[allow(
    dead_code,
    unused_imports,
    unused_macros,
    reason = "this binary uses the suite's helpers, not its bodies"
)]
mod behaviour;

use std::time::Duration;

use crate::support::RedisServer;

/// The error type of every closure here: redlease's errors through `From`,
/// and the job's own.
#[derive(Debug)]
enum JobError {
    /// Not obtaining the lock (or another redlease error).
    Lock(redlease::Error),
    /// The job itself failed.
    Job(u32),
}

impl From<redlease::Error> for JobError {
    fn from(e: redlease::Error) -> Self {
        JobError::Lock(e)
    }
}

/// A short lease that needs renewing several times within a test.
const SHORT_LEASE: Duration = Duration::from_millis(400);

/// `DEL name` behind the lease's back.
fn del(server: &RedisServer, name: &str) {
    let deleted: u64 = redis::cmd("DEL")
        .arg(name)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("DEL on the test redis: {e}"));
    assert_eq!(deleted, 1, "the lock existed");
}

/// The slow-renewal case: a 4 s lease renewed at 2 s, a 500 ms command
/// timeout, a 5 s job, and writes paused for 1200 ms from 1.8 s into it.
const SLOW_RENEW_LEASE: Duration = Duration::from_secs(4);
const SLOW_RENEW_COMMAND_TIMEOUT: Duration = Duration::from_millis(500);
const SLOW_RENEW_JOB: Duration = Duration::from_secs(5);
const SLOW_RENEW_PAUSE_AT: Duration = Duration::from_millis(1800);

/// `CLIENT PAUSE 1200 WRITE` on a raw connection: scripts (EVALSHA) get no
/// reply for 1.2 s.
fn pause_writes(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1200)
        .arg("WRITE")
        .query(conn)
        .unwrap_or_else(|e| panic!("CLIENT PAUSE on the test redis: {e}"));
}

/// Whether the loss's cause is the one expected.
fn cause_of(lost: &redlease::Lost) -> Option<&'static str> {
    match lost.cause()? {
        redlease::Error::LockLost { cause } => Some(match cause {
            redlease::LostCause::Expired => "expired",
            redlease::LostCause::Conflict => "conflict",
            redlease::LostCause::DeadlinePassed => "deadline",
            redlease::LostCause::RenewFailed(_) => "renew-failed",
            _ => "other",
        }),
        other => panic!("Lost::cause must be LockLost, got {other:?}"),
    }
}

/// Removes every member of the reader set `name` behind the readers'
/// backs, as if they had expired.
fn clear_readers(server: &RedisServer, name: &str) {
    let removed: u64 = redis::cmd("ZREMRANGEBYRANK")
        .arg(name)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("ZREMRANGEBYRANK on the test redis: {e}"));
    assert_eq!(removed, 1, "one reader was in the set");
}

/// The blocking `Locker::with_lock`.
mod blocking {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    use redlease::blocking::Locker;
    use redlease::{Error, ReleaseOutcome, WithLock};

    use super::{cause_of, clear_readers, del, JobError, SHORT_LEASE};
    use crate::behaviour::common::{
        config, connect, exists, get, granted, leased, lock_name, namespace, no_wait, pttl,
        refused, spawn, token_of, wait_for_stats, BOUND,
    };
    use crate::behaviour::logs;
    use crate::behaviour::rw_lock::rw_name;
    use crate::support::{wait_until, RedisServer};

    /// `f` sees the lock held under its lease's fence and an unfired loss
    /// signal; its value comes back and the key is gone afterwards.
    #[test]
    fn f_runs_under_the_held_lock_and_the_key_is_released_after_ok() {
        let server = RedisServer::start();
        let ns = namespace("wl-ok");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let (fence, stored) = locker
            .with_lock("k", WithLock::new(), |lease, lost| {
                assert!(lease.is_valid());
                assert!(!lost.is_lost());
                assert!(lost.cause().is_none());
                assert_eq!(locker.stats().tracked_leases, 1);
                Ok::<_, JobError>((lease.fence(), get(&server, &name)))
            })
            .unwrap();
        let stored = stored.expect("the lock is stored while f runs");
        assert!(stored.ends_with(&format!(":{fence}")), "{stored}");
        assert!(!exists(&server, &name), "released after f");
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// `with_all` holds every key while `f` runs, with a fence per key, and
    /// releases them all afterwards, also when `f` fails.
    #[test]
    fn with_all_holds_every_key_while_f_runs_and_releases_them_after() {
        let server = RedisServer::start();
        let ns = namespace("wl-all");
        let locker: Locker = connect(&server, config(&ns));
        let keys = ["a", "b"];
        let fences = locker
            .with_all(&keys, WithLock::new().extend(true), |lease, lost| {
                assert!(!lost.is_lost());
                for key in keys {
                    let stored = get(&server, &lock_name(&ns, key)).expect("held while f runs");
                    let fence = lease.fence_of(key).expect("a key of the lease");
                    assert!(stored.ends_with(&format!(":{fence}")), "{stored}");
                }
                Ok::<_, JobError>(lease.fences().to_vec())
            })
            .unwrap();
        assert_eq!(fences.len(), 2);
        for key in keys {
            assert!(!exists(&server, &lock_name(&ns, key)), "released after f");
        }
        let failed = locker.with_all(&keys, WithLock::new(), |_, _| {
            Err::<(), _>(JobError::Job(7))
        });
        assert!(matches!(failed, Err(JobError::Job(7))));
        assert!(
            !exists(&server, &lock_name(&ns, "a")),
            "released after an error"
        );
    }

    /// A held key makes `with_lock` wait (per its `wait`) and run `f` once
    /// the holder releases it.
    #[test]
    fn with_lock_waits_for_a_held_key_per_its_options() {
        let server = RedisServer::start();
        let ns = namespace("wl-wait");
        let holder: Locker = connect(&server, config(&ns));
        let locker = Arc::new(connect::<Locker>(&server, config(&ns)));
        let held = granted(
            holder.acquire_with("k", leased(Duration::from_secs(60))),
            "holder",
        );
        let held_fence = held.fence();
        let l = locker.clone();
        let waiter = spawn("with_lock", move || {
            l.with_lock(
                "k",
                WithLock::new().wait(Duration::from_secs(20)),
                |lease, _lost| Ok::<_, JobError>(lease.fence()),
            )
        });
        wait_for_stats(&*locker, "with_lock is waiting", |s| s.waiters == 1);
        assert_eq!(held.release().unwrap(), ReleaseOutcome::Released);
        let fence = waiter.join_within(BOUND).unwrap();
        assert!(fence > held_fence);
        assert!(!exists(&server, &lock_name(&ns, "k")));
    }

    /// `f`'s own error comes back unchanged, and the key is released.
    #[test]
    fn f_returning_err_gives_its_error_back_and_releases_the_key() {
        let server = RedisServer::start();
        let ns = namespace("wl-err");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let e = locker
            .with_lock("k", WithLock::new().extend(true), |_lease, _lost| {
                assert!(exists(&server, &name));
                Err::<(), _>(JobError::Job(7))
            })
            .unwrap_err();
        assert!(matches!(e, JobError::Job(7)), "{e:?}");
        assert!(!exists(&server, &name));
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// A panic in `f` is resumed after the release: the key is gone when
    /// `catch_unwind` sees the panic, and the locker keeps working.
    #[test]
    fn a_panic_in_f_is_resumed_after_the_release() {
        let server = RedisServer::start();
        let ns = namespace("wl-panic");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let result = catch_unwind(AssertUnwindSafe(|| {
            locker.with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |_lease, _lost| -> Result<(), JobError> {
                    assert!(exists(&server, &name));
                    panic!("the job panicked");
                },
            )
        }));
        let payload = result.expect_err("the panic comes back to the caller");
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the job panicked"),
            "the original panic payload"
        );
        assert!(!exists(&server, &name), "released before the panic resumed");
        assert_eq!(locker.stats().tracked_leases, 0);
        granted(locker.acquire_with("k", no_wait()), "the key is free")
            .release()
            .unwrap();
    }

    /// Not obtaining the lock returns `Busy` (wait zero) or `WaitTimeout`
    /// through `From`, without calling `f`; the holder keeps its lock.
    #[test]
    fn not_obtaining_the_lock_returns_busy_or_wait_timeout_without_calling_f() {
        let server = RedisServer::start();
        let ns = namespace("wl-busy");
        let holder: Locker = connect(&server, config(&ns));
        let locker: Locker = connect(&server, config(&ns));
        let held = granted(
            holder.acquire_with("k", leased(Duration::from_secs(60))),
            "holder",
        );
        let token = token_of(&server, &ns, "k");
        let called = AtomicBool::new(false);
        let f = |_: &redlease::blocking::Lease, _: &redlease::Lost| {
            called.store(true, Ordering::SeqCst);
            Ok::<_, JobError>(())
        };

        let e = locker
            .with_lock("k", WithLock::new().wait(Duration::ZERO), f)
            .unwrap_err();
        match e {
            JobError::Lock(e @ Error::Busy { .. }) => {
                assert_eq!(e.code(), "LOCK_BUSY");
                assert!(e.holder_remaining().is_some(), "{e:?}");
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        let e = locker
            .with_lock("k", WithLock::new().wait(Duration::from_millis(150)), f)
            .unwrap_err();
        match e {
            JobError::Lock(e @ Error::WaitTimeout { .. }) => assert_eq!(e.code(), "WAIT_TIMEOUT"),
            other => panic!("expected WaitTimeout, got {other:?}"),
        }
        assert!(!called.load(Ordering::SeqCst), "f was called");
        assert_eq!(token_of(&server, &ns, "k"), token, "the holder keeps it");
        assert_eq!(locker.stats().tracked_leases, 0);
        assert_eq!(held.release().unwrap(), ReleaseOutcome::Released);
    }

    /// With `extend(true)` a closure running three leases long keeps the
    /// lock: another locker's wait-zero acquire is busy throughout, the key
    /// keeps a TTL, the lease stays valid past its first deadline (the
    /// renewals show in `is_valid`/`remaining`), and the loss signal never
    /// fires over those six renewal periods.
    #[test]
    fn extend_keeps_the_lock_through_a_closure_three_leases_long() {
        let server = RedisServer::start();
        let ns = namespace("wl-extend");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let checks = locker
            .with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |lease, lost| {
                    let start = Instant::now();
                    let mut checks_past_first_lease = 0;
                    while start.elapsed() < SHORT_LEASE * 3 {
                        let busy = refused(other.acquire_with("k", no_wait()), "other locker");
                        assert_eq!(busy.code(), "LOCK_BUSY", "{busy:?}");
                        let ttl = pttl(&server, &name);
                        assert!(ttl > 0, "the key keeps a TTL: {ttl}");
                        assert!(lease.is_valid(), "valid after {:?}", start.elapsed());
                        let remaining = lease.remaining();
                        assert!(
                            remaining > Duration::ZERO && remaining <= SHORT_LEASE,
                            "{remaining:?}"
                        );
                        assert!(!lost.is_lost(), "{:?}", lost.cause());
                        if start.elapsed() > SHORT_LEASE {
                            checks_past_first_lease += 1;
                        }
                        thread::sleep(Duration::from_millis(40));
                    }
                    assert!(!lost.is_lost());
                    assert!(lost.cause().is_none());
                    Ok::<_, JobError>(checks_past_first_lease)
                },
            )
            .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &name));
        granted(other.acquire_with("k", no_wait()), "free after with_lock")
            .release()
            .unwrap();
    }

    /// `keep_alive` renews a lease the caller acquired past three lease
    /// lengths (the server says the key outlived them), fires nothing, and
    /// leaves the lease held: its release afterwards says `Released`.
    #[test]
    fn keep_alive_renews_a_lease_the_caller_holds_and_leaves_it_held() {
        let server = RedisServer::start();
        let ns = namespace("wl-keep");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let lease = granted(locker.acquire_with("k", leased(SHORT_LEASE)), "a lease");
        let until = crate::behaviour::common::server_time_ms(&server) + 3 * 400;
        let renewed = lease.keep_alive(|lost| {
            wait_until(BOUND, "three lease lengths on the server's clock", || {
                crate::behaviour::common::server_time_ms(&server) > until
            });
            assert!(exists(&server, &name), "renewed past three lease lengths");
            !lost.is_lost()
        });
        assert!(renewed, "nothing was lost");
        assert!(lease.is_valid());
        assert_eq!(lease.release().unwrap(), ReleaseOutcome::Released);
        assert!(!exists(&server, &name));
    }

    /// Without `extend` the lock expires during a long `f`, another owner
    /// can take it, the loss signal never fires, and `with_lock`'s release
    /// afterwards leaves the new owner's lock alone.
    #[test]
    fn without_extend_the_lock_expires_during_a_long_f_and_lost_never_fires() {
        let server = RedisServer::start();
        let ns = namespace("wl-noextend");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let taken = locker
            .with_lock(
                "k",
                WithLock::new().lease(Duration::from_millis(300)),
                |lease, lost| {
                    wait_until(BOUND, "the lock expired in redis", || {
                        !exists(&server, &name)
                    });
                    let taken = granted(other.acquire_with("k", no_wait()), "other locker");
                    wait_until(BOUND, "the local estimate ended", || !lease.is_valid());
                    let token = token_of(&server, &ns, "k");
                    assert!(!lost.is_lost());
                    assert!(!lost.wait_timeout(Duration::from_millis(50)));
                    assert!(lost.cause().is_none());
                    Ok::<_, JobError>((taken, token))
                },
            )
            .unwrap();
        let (taken, token) = taken;
        assert_eq!(
            token_of(&server, &ns, "k"),
            token,
            "the new owner's lock survived"
        );
        assert_eq!(taken.release().unwrap(), ReleaseOutcome::Released);
    }

    /// A key deleted behind the lease's back fires the loss signal within
    /// about one renewal period, with `LOCK_LOST` and `Expired`.
    #[test]
    fn a_deleted_key_fires_lost_with_expired() {
        let server = RedisServer::start();
        let ns = namespace("wl-lost-del");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        locker
            .with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |lease, lost| {
                    del(&server, &name);
                    assert!(lost.wait_timeout(SHORT_LEASE * 2), "the loss signal fired");
                    assert!(lost.is_lost());
                    assert_eq!(lost.cause().map(|e| e.code()), Some("LOCK_LOST"));
                    assert_eq!(cause_of(lost), Some("expired"), "{:?}", lost.cause());
                    assert!(!lease.is_valid());
                    Ok::<_, JobError>(())
                },
            )
            .unwrap();
        assert!(!exists(&server, &name));
    }

    /// Another owner taking the key (deleted, then acquired by another
    /// locker) fires the loss signal with `Conflict`; `with_lock`'s release
    /// leaves the new owner's lock in place.
    #[test]
    fn another_owner_taking_the_key_fires_lost_with_conflict() {
        let server = RedisServer::start();
        let ns = namespace("wl-lost-conflict");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let taken = locker
            .with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |lease, lost| {
                    // Both steps well before the first renewal at lease/2.
                    del(&server, &name);
                    let taken = granted(
                        other.acquire_with("k", no_wait().lease(Duration::from_secs(30))),
                        "other locker",
                    );
                    assert!(taken.fence() > lease.fence());
                    assert!(lost.wait_timeout(SHORT_LEASE * 2), "the loss signal fired");
                    assert_eq!(cause_of(lost), Some("conflict"), "{:?}", lost.cause());
                    assert_eq!(lost.cause().map(|e| e.code()), Some("LOCK_LOST"));
                    assert!(!lease.is_valid());
                    Ok::<_, JobError>(taken)
                },
            )
            .unwrap();
        assert!(exists(&server, &name), "the new owner's lock survived");
        assert_eq!(taken.release().unwrap(), ReleaseOutcome::Released);
    }

    /// A Redis paused (SIGSTOP) while `f` runs fires the loss signal no
    /// later than the lease's local deadline, although Redis never answers
    /// the renewal before it (the command timeout is longer than the lease).
    ///
    /// `wait_timeout(lease)` is not a timing assertion: the local deadline
    /// is at most one lease after any moment the lease was last confirmed,
    /// so it passes inside that wait by construction.
    #[test]
    fn a_paused_redis_fires_lost_by_the_lease_deadline() {
        let server = RedisServer::start();
        let ns = namespace("wl-lost-pause");
        let locker: Locker = connect(&server, config(&ns).command_timeout(Duration::from_secs(3)));
        locker
            .with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |lease, lost| {
                    let _paused = server.pause_guard();
                    assert!(
                        lost.wait_timeout(SHORT_LEASE),
                        "the loss signal fired by the local deadline"
                    );
                    let cause = cause_of(lost);
                    assert!(
                        matches!(cause, Some("deadline" | "renew-failed")),
                        "{:?}",
                        lost.cause()
                    );
                    assert!(!lease.is_valid());
                    Ok::<_, JobError>(())
                },
            )
            .unwrap();
    }

    /// Without `extend` the loss signal never fires, even when the key is
    /// deleted behind the lease's back.
    #[test]
    fn without_extend_a_deleted_key_never_fires_lost() {
        let server = RedisServer::start();
        let ns = namespace("wl-noextend-del");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        locker
            .with_lock(
                "k",
                WithLock::new().lease(Duration::from_millis(300)),
                |_lease, lost| {
                    del(&server, &name);
                    assert!(!lost.wait_timeout(Duration::from_millis(600)));
                    assert!(!lost.is_lost());
                    assert!(lost.cause().is_none());
                    Ok::<_, JobError>(())
                },
            )
            .unwrap();
    }

    /// The release stops the renewal first: after `with_lock` returned, a
    /// clone of its loss signal never fires, the key stays gone and no
    /// release failure was logged.
    #[test]
    fn after_with_lock_returns_nothing_fires_and_nothing_is_renewed() {
        let logs = logs::capture();
        let server = RedisServer::start();
        let ns = namespace("wl-after");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(&server, config(&ns));
        let lost = locker
            .with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |_lease, lost| {
                    // Let a renewal or two happen.
                    thread::sleep(SHORT_LEASE);
                    assert!(!lost.is_lost());
                    Ok::<_, JobError>(lost.clone())
                },
            )
            .unwrap();
        assert!(!exists(&server, &name));
        assert!(!lost.wait_timeout(SHORT_LEASE * 2), "{:?}", lost.cause());
        assert!(!lost.is_lost());
        assert!(!exists(&server, &name));
        assert_eq!(locker.stats().tracked_leases, 0);
        assert!(
            !logs
                .records()
                .iter()
                .any(|r| r.message.contains("LOCK_RELEASE_FAILED")),
            "{:?}",
            logs.records()
        );
    }

    /// One renewal reply held back (`CLIENT PAUSE 1200 WRITE` just before
    /// the renewal at lease/2, command timeout 500 ms) does not end a job
    /// that still has lease left: the renewal is re-sent, `lost` never
    /// fires and the job's `Ok` comes back.
    #[test]
    fn a_with_lock_job_survives_one_slow_renewal_reply() {
        let server = RedisServer::start();
        let ns = namespace("wl-slow-renew");
        let name = lock_name(&ns, "k");
        let locker: Locker = connect(
            &server,
            config(&ns).command_timeout(super::SLOW_RENEW_COMMAND_TIMEOUT),
        );
        let mut pauser = server.conn();
        let loss = locker
            .with_lock(
                "k",
                WithLock::new().lease(super::SLOW_RENEW_LEASE).extend(true),
                |_lease, lost| {
                    let start = Instant::now();
                    let mut paused = false;
                    while start.elapsed() < super::SLOW_RENEW_JOB {
                        if lost.is_lost() {
                            return Ok::<_, JobError>(Some(format!("{:?}", lost.cause())));
                        }
                        if !paused && start.elapsed() >= super::SLOW_RENEW_PAUSE_AT {
                            super::pause_writes(&mut pauser);
                            paused = true;
                        }
                        thread::sleep(Duration::from_millis(20));
                    }
                    Ok(None)
                },
            )
            .unwrap();
        assert_eq!(loss, None, "lost fired during the job");
        assert!(!exists(&server, &name), "released after the job");
    }

    /// `with_permit` with `extend(true)`: the permit stays valid through a
    /// closure three leases long, the semaphore stays busy for another
    /// locker and `lost` never fires; the slot is free afterwards.
    #[test]
    fn with_permit_extend_keeps_the_permit_past_its_lease() {
        let server = RedisServer::start();
        let ns = namespace("wp-extend");
        let slot = crate::behaviour::semaphore::slot_name(&ns, "pool", 0);
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let checks = locker
            .semaphore("pool", 1)
            .unwrap()
            .with_permit(
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |permit, lost| {
                    let start = Instant::now();
                    let mut checks_past_first_lease = 0;
                    while start.elapsed() < SHORT_LEASE * 3 {
                        let busy = refused(
                            other.semaphore("pool", 1).unwrap().try_acquire(),
                            "other locker",
                        );
                        assert_eq!(busy.code(), "LOCK_BUSY", "{busy:?}");
                        assert!(pttl(&server, &slot) > 0, "the slot keeps a TTL");
                        assert!(permit.is_valid(), "valid after {:?}", start.elapsed());
                        assert!(permit.remaining() <= SHORT_LEASE);
                        assert!(!lost.is_lost(), "{:?}", lost.cause());
                        if start.elapsed() > SHORT_LEASE {
                            checks_past_first_lease += 1;
                        }
                        thread::sleep(Duration::from_millis(40));
                    }
                    Ok::<_, JobError>(checks_past_first_lease)
                },
            )
            .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &slot), "released after with_permit");
        granted(
            other.semaphore("pool", 1).unwrap().try_acquire(),
            "free after with_permit",
        )
        .release()
        .unwrap();
    }

    /// `with_permit(extend)`: another holder taking the slot (deleted, then
    /// acquired by another locker) fires `lost` with `Conflict`, and the
    /// release afterwards leaves the new holder's slot alone.
    #[test]
    fn with_permit_lost_fires_when_the_slot_is_taken() {
        let server = RedisServer::start();
        let ns = namespace("wp-lost");
        let slot = crate::behaviour::semaphore::slot_name(&ns, "pool", 0);
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let taken = locker
            .semaphore("pool", 1)
            .unwrap()
            .with_permit(
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |permit, lost| {
                    del(&server, &slot);
                    let taken = granted(
                        other
                            .semaphore("pool", 1)
                            .unwrap()
                            .acquire_with(no_wait().lease(Duration::from_secs(30))),
                        "other locker",
                    );
                    assert_eq!(taken.slot(), permit.slot());
                    assert!(taken.fence() > permit.fence());
                    assert!(lost.wait_timeout(SHORT_LEASE * 2), "the loss signal fired");
                    assert_eq!(cause_of(lost), Some("conflict"), "{:?}", lost.cause());
                    assert!(!permit.is_valid());
                    Ok::<_, JobError>(taken)
                },
            )
            .unwrap();
        assert!(exists(&server, &slot), "the new holder's slot survived");
        assert_eq!(taken.release().unwrap(), ReleaseOutcome::Released);
    }

    /// Runs checks every 40 ms for three lease lengths while `f` holds a
    /// read-write lease with `extend(true)`: `busy` (another locker's
    /// try-once acquires) is refused with `LOCK_BUSY`, the held name keeps
    /// a TTL, the lease stays valid and `lost` never fires. Returns how many
    /// checks ran past the first lease length.
    fn holds_through_three_leases(
        server: &RedisServer,
        held: &str,
        valid: impl Fn() -> bool,
        lost: &redlease::Lost,
        busy: impl Fn() -> Vec<Result<(), Error>>,
    ) -> usize {
        let start = Instant::now();
        let mut past_first_lease = 0;
        while start.elapsed() < SHORT_LEASE * 3 {
            for refused in busy() {
                let e = refused.expect_err("another locker stays out");
                assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");
            }
            assert!(pttl(server, held) > 0, "{held} keeps a TTL");
            assert!(valid(), "valid after {:?}", start.elapsed());
            assert!(!lost.is_lost(), "{:?}", lost.cause());
            if start.elapsed() > SHORT_LEASE {
                past_first_lease += 1;
            }
            thread::sleep(Duration::from_millis(40));
        }
        past_first_lease
    }

    /// `with_write` and `with_read` with `extend(true)`: each keeps its
    /// lease through a closure three leases long (another locker's writer,
    /// and for `with_write` its reader, busy throughout; `lost` never
    /// fires), and nothing is held afterwards.
    #[test]
    fn with_write_and_with_read_extend_keep_the_lease_past_its_length() {
        let server = RedisServer::start();
        let ns = namespace("wrw-extend");
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        let theirs = other.rw_lock("doc").unwrap();
        let options = WithLock::new().lease(SHORT_LEASE).extend(true);
        let writer = rw_name(&ns, "write", "doc");
        let checks = doc
            .with_write(options.clone(), |write, lost| {
                Ok::<_, JobError>(holds_through_three_leases(
                    &server,
                    &writer,
                    || write.is_valid() && write.remaining() <= SHORT_LEASE,
                    lost,
                    || vec![theirs.try_write().map(drop), theirs.try_read().map(drop)],
                ))
            })
            .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &writer), "released after with_write");

        let readers = rw_name(&ns, "read", "doc");
        let checks = doc
            .with_read(options, |read, lost| {
                Ok::<_, JobError>(holds_through_three_leases(
                    &server,
                    &readers,
                    || read.is_valid() && read.remaining() <= SHORT_LEASE,
                    lost,
                    || vec![theirs.try_write().map(drop)],
                ))
            })
            .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &readers), "released after with_read");
        let w = granted(theirs.try_write(), "free after with_read");
        assert_eq!(w.release().unwrap(), ReleaseOutcome::Released);
    }

    /// `with_write(extend)`: another writer taking the key (deleted, then
    /// written by another locker) fires `lost` with `Conflict`; the
    /// release afterwards leaves the new writer's key in place.
    #[test]
    fn with_write_lost_fires_with_conflict_when_another_writer_takes_the_key() {
        let server = RedisServer::start();
        let ns = namespace("wrw-lost-w");
        let writer = rw_name(&ns, "write", "doc");
        let locker: Locker = connect(&server, config(&ns));
        let other: Locker = connect(&server, config(&ns));
        let taken = locker
            .rw_lock("doc")
            .unwrap()
            .with_write(
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |write, lost| {
                    // Both steps well before the first renewal at lease/2.
                    del(&server, &writer);
                    let taken = granted(
                        other
                            .rw_lock("doc")?
                            .write_with(no_wait().lease(Duration::from_secs(30))),
                        "another writer",
                    );
                    assert!(taken.fence() > write.fence());
                    assert!(lost.wait_timeout(SHORT_LEASE * 2), "the loss signal fired");
                    assert_eq!(lost.cause().map(|e| e.code()), Some("LOCK_LOST"));
                    assert_eq!(cause_of(lost), Some("conflict"), "{:?}", lost.cause());
                    assert!(!write.is_valid());
                    Ok::<_, JobError>(taken)
                },
            )
            .unwrap();
        assert!(exists(&server, &writer), "the new writer's key survived");
        assert_eq!(taken.release().unwrap(), ReleaseOutcome::Released);
    }

    /// `with_read(extend)`: the reader removed from the reader set by hand
    /// (as if it had expired) fires `lost` with `Expired`, and the reader
    /// is never renewed back.
    #[test]
    fn with_read_lost_fires_with_expired_when_the_reader_is_gone() {
        let server = RedisServer::start();
        let ns = namespace("wrw-lost-r");
        let readers = rw_name(&ns, "read", "doc");
        let locker: Locker = connect(&server, config(&ns));
        locker
            .rw_lock("doc")
            .unwrap()
            .with_read(
                WithLock::new().lease(SHORT_LEASE).extend(true),
                |read, lost| {
                    clear_readers(&server, &readers);
                    assert!(lost.wait_timeout(SHORT_LEASE * 2), "the loss signal fired");
                    assert_eq!(lost.cause().map(|e| e.code()), Some("LOCK_LOST"));
                    assert_eq!(cause_of(lost), Some("expired"), "{:?}", lost.cause());
                    assert!(!read.is_valid());
                    assert!(!exists(&server, &readers), "never renewed back");
                    Ok::<_, JobError>(())
                },
            )
            .unwrap();
        assert!(!exists(&server, &readers));
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// A `with_write` closure's error and a panic in a `with_read` closure
    /// come back to the caller after the release: nothing is held when they
    /// do, and the key is free for a writer.
    #[test]
    fn with_write_error_and_with_read_panic_still_release() {
        let server = RedisServer::start();
        let ns = namespace("wrw-err");
        let locker: Locker = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        let (writer, readers) = (rw_name(&ns, "write", "doc"), rw_name(&ns, "read", "doc"));
        let options = WithLock::new().lease(SHORT_LEASE).extend(true);
        let e = doc
            .with_write(options.clone(), |_write, _lost| {
                assert!(exists(&server, &writer));
                Err::<(), _>(JobError::Job(7))
            })
            .unwrap_err();
        assert!(matches!(e, JobError::Job(7)), "{e:?}");
        assert!(!exists(&server, &writer), "released after the error");

        let result = catch_unwind(AssertUnwindSafe(|| {
            doc.with_read(options, |_read, _lost| -> Result<(), JobError> {
                assert!(exists(&server, &readers));
                panic!("the job panicked");
            })
        }));
        let payload = result.expect_err("the panic comes back to the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the job panicked"));
        assert!(
            !exists(&server, &readers),
            "released before the panic resumed"
        );
        assert_eq!(locker.stats().tracked_leases, 0);
        let w = granted(doc.try_write(), "the key is free");
        assert_eq!(w.release().unwrap(), ReleaseOutcome::Released);
    }
}

/// The async `Locker::with_lock`, with async closures.
mod aio {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use async_io::Timer;
    use futures::executor::block_on;
    use futures::future::{select, Either};
    use futures::task::SpawnExt;
    use redlease::aio::Locker;
    use redlease::{AcquireOptions, Config, Error, Lost, ReleaseOutcome, WithLock};

    use super::{cause_of, del, JobError, SHORT_LEASE};
    use crate::behaviour::common::{
        config, exists, get, lock_name, namespace, pttl, token_of, BOUND,
    };
    use crate::behaviour::logs;
    use crate::behaviour::rw_lock::rw_name;
    use crate::support::{wait_until, RedisServer};

    fn connect(server: &RedisServer, config: Config) -> Locker {
        block_on(Locker::connect(server.url(), config))
            .unwrap_or_else(|e| panic!("connect: {} ({e:?})", e.code()))
    }

    fn no_wait() -> AcquireOptions {
        AcquireOptions::new().wait(Duration::ZERO)
    }

    /// `with_all` holds every key while `f` runs and releases them after.
    #[test]
    fn with_all_holds_every_key_while_f_runs_and_releases_them_after() {
        let server = RedisServer::start();
        let ns = namespace("wl-all-aio");
        let locker = connect(&server, config(&ns));
        let keys = ["a", "b"];
        let fences =
            block_on(
                locker.with_all(&keys, WithLock::new().extend(true), async |lease, lost| {
                    assert!(!lost.is_lost());
                    for key in keys {
                        let stored = get(&server, &lock_name(&ns, key)).expect("held while f runs");
                        let fence = lease.fence_of(key).expect("a key of the lease");
                        assert!(stored.ends_with(&format!(":{fence}")), "{stored}");
                    }
                    Ok::<_, JobError>(lease.fences().to_vec())
                }),
            )
            .unwrap();
        assert_eq!(fences.len(), 2);
        for key in keys {
            assert!(!exists(&server, &lock_name(&ns, key)), "released after f");
        }
    }

    /// `lost.wait()` raced against a timer: the loss, if it came in time.
    async fn lost_within(lost: &Lost, bound: Duration) -> Option<Error> {
        match select(pin!(lost.wait()), Timer::after(bound)).await {
            Either::Left((e, _)) => Some(e),
            Either::Right(_) => None,
        }
    }

    async fn sleep(d: Duration) {
        Timer::after(d).await;
    }

    /// Polls `cond` every 5 ms until it holds; panics after [`BOUND`].
    async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + BOUND;
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            sleep(Duration::from_millis(5)).await;
        }
    }

    /// `f` sees the lock held under its lease's fence; its value comes back
    /// and the key is gone afterwards.
    #[test]
    fn f_runs_under_the_held_lock_and_the_key_is_released_after_ok() {
        let server = RedisServer::start();
        let ns = namespace("awl-ok");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let (fence, stored) =
            block_on(locker.with_lock("k", WithLock::new(), async |lease, lost| {
                assert!(lease.is_valid());
                assert!(!lost.is_lost());
                assert!(lost.cause().is_none());
                Ok::<_, JobError>((lease.fence(), get(&server, &name)))
            }))
            .unwrap();
        let stored = stored.expect("the lock is stored while f runs");
        assert!(stored.ends_with(&format!(":{fence}")), "{stored}");
        assert!(!exists(&server, &name));
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// A held key makes `with_lock` wait and run `f` once it is released.
    #[test]
    fn with_lock_waits_for_a_held_key_per_its_options() {
        let server = RedisServer::start();
        let ns = namespace("awl-wait");
        let locker = connect(&server, config(&ns));
        let holder = connect(&server, config(&ns));
        block_on(async {
            let held = holder
                .acquire_with("k", AcquireOptions::new().lease(Duration::from_secs(60)))
                .await
                .unwrap();
            let held_fence = held.fence();
            let work = locker.with_lock(
                "k",
                WithLock::new().wait(Duration::from_secs(20)),
                async |lease, _lost| Ok::<_, JobError>(lease.fence()),
            );
            let release = async {
                while locker.stats().waiters == 0 {
                    sleep(Duration::from_millis(5)).await;
                }
                held.release().await
            };
            let bound = Timer::after(BOUND);
            let (fence, released) =
                match select(pin!(futures::future::join(work, release)), bound).await {
                    Either::Left((both, _)) => both,
                    Either::Right(_) => panic!("with_lock did not get the key within {BOUND:?}"),
                };
            assert_eq!(released.unwrap(), ReleaseOutcome::Released);
            assert!(fence.unwrap() > held_fence);
        });
        assert!(!exists(&server, &lock_name(&ns, "k")));
    }

    /// `f`'s own error comes back unchanged, and the key is released.
    #[test]
    fn f_returning_err_gives_its_error_back_and_releases_the_key() {
        let server = RedisServer::start();
        let ns = namespace("awl-err");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let e =
            block_on(
                locker.with_lock("k", WithLock::new().extend(true), async |_lease, _lost| {
                    assert!(exists(&server, &name));
                    Err::<(), _>(JobError::Job(7))
                }),
            )
            .unwrap_err();
        assert!(matches!(e, JobError::Job(7)), "{e:?}");
        assert!(!exists(&server, &name));
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// A panic in an async `f` unwinds out of the `with_lock` future; the
    /// dropped lease goes back to the locker, which releases it at its next
    /// operation.
    #[test]
    fn a_panic_in_f_hands_the_lease_back_to_the_locker() {
        let server = RedisServer::start();
        let ns = namespace("awl-panic");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let result = catch_unwind(AssertUnwindSafe(|| {
            block_on(locker.with_lock(
                "k",
                WithLock::new().lease(SHORT_LEASE).extend(true),
                async |_lease, _lost| -> Result<(), JobError> {
                    assert!(exists(&server, &name));
                    panic!("the job panicked");
                },
            ))
        }));
        let payload = result.expect_err("the panic comes back to the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the job panicked"));
        let other = block_on(locker.acquire("other")).unwrap();
        assert!(!exists(&server, &name), "released at the next operation");
        block_on(other.release()).unwrap();
        let again = block_on(locker.acquire_with("k", no_wait())).expect("the key is free");
        assert_eq!(block_on(again.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// Not obtaining the lock returns `Busy` or `WaitTimeout` through
    /// `From`, without calling `f`.
    #[test]
    fn not_obtaining_the_lock_returns_busy_or_wait_timeout_without_calling_f() {
        let server = RedisServer::start();
        let ns = namespace("awl-busy");
        let holder = connect(&server, config(&ns));
        let locker = connect(&server, config(&ns));
        let called = AtomicBool::new(false);
        block_on(async {
            let held = holder
                .acquire_with("k", AcquireOptions::new().lease(Duration::from_secs(60)))
                .await
                .unwrap();
            let token = token_of(&server, &ns, "k");
            let e = locker
                .with_lock("k", WithLock::new().wait(Duration::ZERO), async |_, _| {
                    called.store(true, Ordering::SeqCst);
                    Ok::<_, JobError>(())
                })
                .await
                .unwrap_err();
            match e {
                JobError::Lock(e @ Error::Busy { .. }) => {
                    assert_eq!(e.code(), "LOCK_BUSY");
                    assert!(e.holder_remaining().is_some(), "{e:?}");
                }
                other => panic!("expected Busy, got {other:?}"),
            }
            let e = locker
                .with_lock(
                    "k",
                    WithLock::new().wait(Duration::from_millis(150)),
                    async |_, _| {
                        called.store(true, Ordering::SeqCst);
                        Ok::<_, JobError>(())
                    },
                )
                .await
                .unwrap_err();
            match e {
                JobError::Lock(e @ Error::WaitTimeout { .. }) => {
                    assert_eq!(e.code(), "WAIT_TIMEOUT")
                }
                other => panic!("expected WaitTimeout, got {other:?}"),
            }
            assert!(!called.load(Ordering::SeqCst), "f was called");
            assert_eq!(token_of(&server, &ns, "k"), token);
            assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
        });
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// With `extend(true)` an async closure running three leases long keeps
    /// the lock (another locker's wait-zero acquire is busy throughout, the
    /// key keeps a TTL, the lease stays valid past its first deadline), and
    /// the loss signal never fires.
    #[test]
    fn extend_keeps_the_lock_through_a_closure_three_leases_long() {
        let server = RedisServer::start();
        let ns = namespace("awl-extend");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let checks = block_on(locker.with_lock(
            "k",
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |lease, lost| {
                let start = Instant::now();
                let mut checks_past_first_lease = 0;
                while start.elapsed() < SHORT_LEASE * 3 {
                    let busy = other
                        .acquire_with("k", no_wait())
                        .await
                        .expect_err("the other locker is busy");
                    assert_eq!(busy.code(), "LOCK_BUSY", "{busy:?}");
                    let ttl = pttl(&server, &name);
                    assert!(ttl > 0, "the key keeps a TTL: {ttl}");
                    assert!(lease.is_valid(), "valid after {:?}", start.elapsed());
                    let remaining = lease.remaining();
                    assert!(
                        remaining > Duration::ZERO && remaining <= SHORT_LEASE,
                        "{remaining:?}"
                    );
                    assert!(!lost.is_lost(), "{:?}", lost.cause());
                    if start.elapsed() > SHORT_LEASE {
                        checks_past_first_lease += 1;
                    }
                    sleep(Duration::from_millis(40)).await;
                }
                assert!(lost.cause().is_none());
                Ok::<_, JobError>(checks_past_first_lease)
            },
        ))
        .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &name));
        block_on(async {
            other
                .acquire_with("k", no_wait())
                .await
                .expect("free after with_lock")
                .release()
                .await
                .unwrap();
        });
    }

    /// Without `extend` the lock expires during a long `f`, the loss signal
    /// never fires, and the release afterwards spares the new owner.
    #[test]
    fn without_extend_the_lock_expires_during_a_long_f_and_lost_never_fires() {
        let server = RedisServer::start();
        let ns = namespace("awl-noextend");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let taken = block_on(locker.with_lock(
            "k",
            WithLock::new().lease(Duration::from_millis(300)),
            async |lease, lost| {
                eventually("the lock expired in redis", || !exists(&server, &name)).await;
                let taken = other.acquire_with("k", no_wait()).await?;
                let token = token_of(&server, &ns, "k");
                eventually("the local estimate ended", || !lease.is_valid()).await;
                assert!(!lost.is_lost());
                assert!(lost_within(lost, Duration::from_millis(50)).await.is_none());
                assert!(lost.cause().is_none());
                Ok::<_, JobError>((taken, token))
            },
        ))
        .unwrap();
        let (taken, token) = taken;
        assert_eq!(
            token_of(&server, &ns, "k"),
            token,
            "the new owner's lock survived"
        );
        assert_eq!(block_on(taken.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// A key deleted behind the lease's back completes `lost.wait()` within
    /// about one renewal period, with `LOCK_LOST` and `Expired`.
    #[test]
    fn a_deleted_key_fires_lost_with_expired() {
        let server = RedisServer::start();
        let ns = namespace("awl-lost-del");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        block_on(locker.with_lock(
            "k",
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |lease, lost| {
                del(&server, &name);
                let e = lost_within(lost, SHORT_LEASE * 2)
                    .await
                    .expect("the loss signal fired");
                assert_eq!(e.code(), "LOCK_LOST");
                assert!(
                    matches!(
                        e,
                        Error::LockLost {
                            cause: redlease::LostCause::Expired
                        }
                    ),
                    "{e:?}"
                );
                assert!(lost.is_lost());
                assert_eq!(cause_of(lost), Some("expired"));
                assert!(!lease.is_valid());
                Ok::<_, JobError>(())
            },
        ))
        .unwrap();
        assert!(!exists(&server, &name));
    }

    /// Another owner taking the key fires the loss signal with `Conflict`.
    #[test]
    fn another_owner_taking_the_key_fires_lost_with_conflict() {
        let server = RedisServer::start();
        let ns = namespace("awl-lost-conflict");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let taken = block_on(locker.with_lock(
            "k",
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |lease, lost| {
                // Both steps well before the first renewal at lease/2.
                del(&server, &name);
                let taken = other
                    .acquire_with("k", no_wait().lease(Duration::from_secs(30)))
                    .await?;
                assert!(taken.fence() > lease.fence());
                let e = lost_within(lost, SHORT_LEASE * 2)
                    .await
                    .expect("the loss signal fired");
                assert_eq!(e.code(), "LOCK_LOST");
                assert_eq!(cause_of(lost), Some("conflict"), "{e:?}");
                assert!(!lease.is_valid());
                Ok::<_, JobError>(taken)
            },
        ))
        .unwrap();
        assert!(exists(&server, &name), "the new owner's lock survived");
        assert_eq!(block_on(taken.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// A Redis paused while `f` runs completes `lost.wait()` no later than
    /// the lease's local deadline (at most one lease after the pause), with
    /// the command timeout longer than the lease.
    #[test]
    fn a_paused_redis_fires_lost_by_the_lease_deadline() {
        let server = RedisServer::start();
        let ns = namespace("awl-lost-pause");
        let locker = connect(&server, config(&ns).command_timeout(Duration::from_secs(3)));
        block_on(locker.with_lock(
            "k",
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |lease, lost| {
                let paused = server.pause_guard();
                // The timer only bounds the test; the deadline passes first
                // by construction (see the blocking twin).
                let e = lost_within(lost, SHORT_LEASE + Duration::from_millis(1))
                    .await
                    .expect("the loss signal fired by the local deadline");
                assert_eq!(e.code(), "LOCK_LOST");
                assert!(
                    matches!(cause_of(lost), Some("deadline" | "renew-failed")),
                    "{e:?}"
                );
                assert!(!lease.is_valid());
                drop(paused);
                Ok::<_, JobError>(())
            },
        ))
        .unwrap();
    }

    /// Without `extend` the loss signal never fires, even when the key is
    /// deleted.
    #[test]
    fn without_extend_a_deleted_key_never_fires_lost() {
        let server = RedisServer::start();
        let ns = namespace("awl-noextend-del");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        block_on(locker.with_lock(
            "k",
            WithLock::new().lease(Duration::from_millis(300)),
            async |_lease, lost| {
                del(&server, &name);
                assert!(lost_within(lost, Duration::from_millis(600))
                    .await
                    .is_none());
                assert!(!lost.is_lost());
                assert!(lost.cause().is_none());
                Ok::<_, JobError>(())
            },
        ))
        .unwrap();
    }

    /// After `with_lock` returned, its loss signal never fires and the key
    /// stays gone: the renewal stopped before the release.
    #[test]
    fn after_with_lock_returns_nothing_fires_and_nothing_is_renewed() {
        let logs = logs::capture();
        let server = RedisServer::start();
        let ns = namespace("awl-after");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        block_on(async {
            let lost = locker
                .with_lock(
                    "k",
                    WithLock::new().lease(SHORT_LEASE).extend(true),
                    async |_lease, lost| {
                        sleep(SHORT_LEASE).await;
                        assert!(!lost.is_lost());
                        Ok::<_, JobError>(lost.clone())
                    },
                )
                .await
                .unwrap();
            assert!(!exists(&server, &name));
            assert!(lost_within(&lost, SHORT_LEASE * 2).await.is_none());
            assert!(!lost.is_lost());
        });
        assert!(!exists(&server, &name));
        assert_eq!(locker.stats().tracked_leases, 0);
        assert!(
            !logs
                .records()
                .iter()
                .any(|r| r.message.contains("LOCK_RELEASE_FAILED")),
            "{:?}",
            logs.records()
        );
    }

    /// The `with_lock` future is `Send` (checked at compile time with a
    /// concrete async closure) and runs to completion on a smol task and on
    /// a `futures` thread pool, renewing across the executor's threads.
    #[test]
    fn the_with_lock_future_is_send_and_runs_on_smol_and_a_futures_thread_pool() {
        fn assert_send<T: Send>(_: &T) {}

        let server = RedisServer::start();
        let ns = namespace("awl-send");
        let name = lock_name(&ns, "k");
        let locker = Arc::new(
            smol::block_on(Locker::connect(server.url(), config(&ns)))
                .unwrap_or_else(|e| panic!("connect: {e:?}")),
        );
        let job = |locker: Arc<Locker>| async move {
            let fut = locker.with_lock(
                "k",
                WithLock::new()
                    .lease(Duration::from_millis(300))
                    .extend(true),
                async |lease, lost| {
                    // Longer than the lease: only the renewals keep it.
                    Timer::after(Duration::from_millis(450)).await;
                    if lost.is_lost() || !lease.is_valid() {
                        return Err(JobError::Job(1));
                    }
                    Ok::<_, JobError>(lease.fence())
                },
            );
            assert_send(&fut);
            fut.await
        };

        let on_smol = smol::block_on(smol::spawn(job(locker.clone()))).unwrap();
        assert!(!exists(&server, &name));

        let pool = futures::executor::ThreadPool::new().unwrap();
        let handle = pool.spawn_with_handle(job(locker.clone())).unwrap();
        let on_pool = block_on(handle).unwrap();
        assert!(on_pool > on_smol);
        assert!(!exists(&server, &name));

        smol::block_on(locker.shutdown()).unwrap();
        wait_until(BOUND, "nothing left behind", || !exists(&server, &name));
    }

    /// One renewal reply held back (`CLIENT PAUSE 1200 WRITE` just before
    /// the renewal at lease/2, command timeout 500 ms) does not end a job
    /// that still has lease left: the renewal is re-sent, `lost` never
    /// fires and the job's `Ok` comes back.
    #[test]
    fn a_with_lock_job_survives_one_slow_renewal_reply() {
        let server = RedisServer::start();
        let ns = namespace("awl-slow-renew");
        let name = lock_name(&ns, "k");
        let locker = connect(
            &server,
            config(&ns).command_timeout(super::SLOW_RENEW_COMMAND_TIMEOUT),
        );
        let mut pauser = server.conn();
        let loss = block_on(locker.with_lock(
            "k",
            WithLock::new().lease(super::SLOW_RENEW_LEASE).extend(true),
            async |_lease, lost| {
                let start = Instant::now();
                let mut paused = false;
                while start.elapsed() < super::SLOW_RENEW_JOB {
                    if lost.is_lost() {
                        return Ok::<_, JobError>(Some(format!("{:?}", lost.cause())));
                    }
                    if !paused && start.elapsed() >= super::SLOW_RENEW_PAUSE_AT {
                        super::pause_writes(&mut pauser);
                        paused = true;
                    }
                    sleep(Duration::from_millis(20)).await;
                }
                Ok(None)
            },
        ))
        .unwrap();
        assert_eq!(loss, None, "lost fired during the job");
        assert!(!exists(&server, &name), "released after the job");
    }

    /// Async `with_permit` with `extend(true)`: the permit stays valid
    /// through a job three leases long and `lost` never fires.
    #[test]
    fn with_permit_extend_keeps_the_permit_past_its_lease() {
        let server = RedisServer::start();
        let ns = namespace("awp-extend");
        let slot = crate::behaviour::semaphore::slot_name(&ns, "pool", 0);
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let pool = locker.semaphore("pool", 1).unwrap();
        let checks = block_on(pool.with_permit(
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |permit, lost| {
                let start = Instant::now();
                let mut checks_past_first_lease = 0;
                while start.elapsed() < SHORT_LEASE * 3 {
                    let busy = other
                        .semaphore("pool", 1)?
                        .try_acquire()
                        .await
                        .expect_err("the other locker is busy");
                    assert_eq!(busy.code(), "LOCK_BUSY", "{busy:?}");
                    assert!(pttl(&server, &slot) > 0, "the slot keeps a TTL");
                    assert!(permit.is_valid(), "valid after {:?}", start.elapsed());
                    assert!(!lost.is_lost(), "{:?}", lost.cause());
                    if start.elapsed() > SHORT_LEASE {
                        checks_past_first_lease += 1;
                    }
                    sleep(Duration::from_millis(40)).await;
                }
                Ok::<_, JobError>(checks_past_first_lease)
            },
        ))
        .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &slot), "released after with_permit");
    }

    /// Async `with_permit(extend)`: the slot taken by another holder
    /// completes `lost.wait()` with `Conflict`; the new holder's slot
    /// survives the release afterwards.
    #[test]
    fn with_permit_lost_fires_when_the_slot_is_taken() {
        let server = RedisServer::start();
        let ns = namespace("awp-lost");
        let slot = crate::behaviour::semaphore::slot_name(&ns, "pool", 0);
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let pool = locker.semaphore("pool", 1).unwrap();
        let taken = block_on(pool.with_permit(
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |permit, lost| {
                del(&server, &slot);
                let taken = other
                    .semaphore("pool", 1)?
                    .acquire_with(no_wait().lease(Duration::from_secs(30)))
                    .await?;
                assert_eq!(taken.slot(), permit.slot());
                assert!(taken.fence() > permit.fence());
                let e = lost_within(lost, SHORT_LEASE * 2)
                    .await
                    .expect("the loss signal fired");
                assert_eq!(e.code(), "LOCK_LOST");
                assert_eq!(cause_of(lost), Some("conflict"), "{e:?}");
                assert!(!permit.is_valid());
                Ok::<_, JobError>(taken)
            },
        ))
        .unwrap();
        assert!(exists(&server, &slot), "the new holder's slot survived");
        assert_eq!(block_on(taken.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// Checks every 40 ms for three lease lengths while an async `f` holds
    /// a read-write lease with `extend(true)`, as the blocking twin does;
    /// `busy` runs the other locker's try-once acquires.
    async fn holds_through_three_leases(
        server: &RedisServer,
        held: &str,
        valid: impl Fn() -> bool,
        lost: &Lost,
        busy: impl AsyncFn() -> Vec<Result<(), Error>>,
    ) -> usize {
        let start = Instant::now();
        let mut past_first_lease = 0;
        while start.elapsed() < SHORT_LEASE * 3 {
            for refused in busy().await {
                let e = refused.expect_err("another locker stays out");
                assert_eq!(e.code(), "LOCK_BUSY", "{e:?}");
            }
            assert!(pttl(server, held) > 0, "{held} keeps a TTL");
            assert!(valid(), "valid after {:?}", start.elapsed());
            assert!(!lost.is_lost(), "{:?}", lost.cause());
            if start.elapsed() > SHORT_LEASE {
                past_first_lease += 1;
            }
            sleep(Duration::from_millis(40)).await;
        }
        past_first_lease
    }

    /// Async `with_write` and `with_read` with `extend(true)` keep their
    /// lease through a job three leases long; nothing is held afterwards.
    #[test]
    fn with_write_and_with_read_extend_keep_the_lease_past_its_length() {
        let server = RedisServer::start();
        let ns = namespace("awrw-extend");
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        let theirs = other.rw_lock("doc").unwrap();
        let options = WithLock::new().lease(SHORT_LEASE).extend(true);
        let writer = rw_name(&ns, "write", "doc");
        let checks = block_on(doc.with_write(options.clone(), async |write, lost| {
            Ok::<_, JobError>(
                holds_through_three_leases(
                    &server,
                    &writer,
                    || write.is_valid() && write.remaining() <= SHORT_LEASE,
                    lost,
                    async || {
                        vec![
                            theirs.try_write().await.map(drop),
                            theirs.try_read().await.map(drop),
                        ]
                    },
                )
                .await,
            )
        }))
        .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &writer), "released after with_write");

        let readers = rw_name(&ns, "read", "doc");
        let checks = block_on(doc.with_read(options, async |read, lost| {
            Ok::<_, JobError>(
                holds_through_three_leases(
                    &server,
                    &readers,
                    || read.is_valid() && read.remaining() <= SHORT_LEASE,
                    lost,
                    async || vec![theirs.try_write().await.map(drop)],
                )
                .await,
            )
        }))
        .unwrap();
        assert!(checks > 0, "some checks ran past the first lease");
        assert!(!exists(&server, &readers), "released after with_read");
        let w = block_on(theirs.try_write()).expect("free after with_read");
        assert_eq!(block_on(w.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// Async `with_write(extend)`: another writer taking the key completes
    /// `lost.wait()` with `Conflict`; its key survives the release.
    #[test]
    fn with_write_lost_fires_with_conflict_when_another_writer_takes_the_key() {
        let server = RedisServer::start();
        let ns = namespace("awrw-lost-w");
        let writer = rw_name(&ns, "write", "doc");
        let locker = connect(&server, config(&ns));
        let other = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        let taken = block_on(doc.with_write(
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |write, lost| {
                del(&server, &writer);
                let taken = other
                    .rw_lock("doc")?
                    .write_with(no_wait().lease(Duration::from_secs(30)))
                    .await?;
                assert!(taken.fence() > write.fence());
                let e = lost_within(lost, SHORT_LEASE * 2)
                    .await
                    .expect("the loss signal fired");
                assert_eq!(e.code(), "LOCK_LOST");
                assert_eq!(cause_of(lost), Some("conflict"), "{e:?}");
                assert!(!write.is_valid());
                Ok::<_, JobError>(taken)
            },
        ))
        .unwrap();
        assert!(exists(&server, &writer), "the new writer's key survived");
        assert_eq!(block_on(taken.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// Async `with_read(extend)`: the reader removed from the set by hand
    /// completes `lost.wait()` with `Expired`; it is never renewed back.
    #[test]
    fn with_read_lost_fires_with_expired_when_the_reader_is_gone() {
        let server = RedisServer::start();
        let ns = namespace("awrw-lost-r");
        let readers = rw_name(&ns, "read", "doc");
        let locker = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        block_on(doc.with_read(
            WithLock::new().lease(SHORT_LEASE).extend(true),
            async |read, lost| {
                super::clear_readers(&server, &readers);
                let e = lost_within(lost, SHORT_LEASE * 2)
                    .await
                    .expect("the loss signal fired");
                assert_eq!(e.code(), "LOCK_LOST");
                assert_eq!(cause_of(lost), Some("expired"), "{e:?}");
                assert!(!read.is_valid());
                assert!(!exists(&server, &readers), "never renewed back");
                Ok::<_, JobError>(())
            },
        ))
        .unwrap();
        assert!(!exists(&server, &readers));
        assert_eq!(locker.stats().tracked_leases, 0);
    }

    /// An async `with_write` job's error and a panic in an async
    /// `with_read` job come back after the release: nothing is held then.
    #[test]
    fn with_write_error_and_with_read_panic_still_release() {
        let server = RedisServer::start();
        let ns = namespace("awrw-err");
        let locker = connect(&server, config(&ns));
        let doc = locker.rw_lock("doc").unwrap();
        let (writer, readers) = (rw_name(&ns, "write", "doc"), rw_name(&ns, "read", "doc"));
        let options = WithLock::new().lease(SHORT_LEASE).extend(true);
        let e = block_on(doc.with_write(options.clone(), async |_write, _lost| {
            assert!(exists(&server, &writer));
            Err::<(), _>(JobError::Job(7))
        }))
        .unwrap_err();
        assert!(matches!(e, JobError::Job(7)), "{e:?}");
        assert!(!exists(&server, &writer), "released after the error");

        let result = catch_unwind(AssertUnwindSafe(|| {
            block_on(
                doc.with_read(options, async |_read, _lost| -> Result<(), JobError> {
                    assert!(exists(&server, &readers));
                    panic!("the job panicked");
                }),
            )
        }));
        let payload = result.expect_err("the panic comes back to the caller");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the job panicked"));
        assert!(
            !exists(&server, &readers),
            "released before the panic resumed"
        );
        assert_eq!(locker.stats().tracked_leases, 0);
        let w = block_on(doc.try_write()).expect("the key is free");
        assert_eq!(block_on(w.release()).unwrap(), ReleaseOutcome::Released);
    }

    /// The async `keep_alive`, as the blocking one: the lease outlives three
    /// lease lengths on the server's clock, nothing fires, and it stays held.
    #[test]
    fn keep_alive_renews_a_lease_the_caller_holds_and_leaves_it_held() {
        let server = RedisServer::start();
        let ns = namespace("wl-keep-aio");
        let name = lock_name(&ns, "k");
        let locker = connect(&server, config(&ns));
        block_on(async {
            let lease = locker
                .acquire_with("k", AcquireOptions::new().lease(SHORT_LEASE))
                .await
                .unwrap();
            let until = crate::behaviour::common::server_time_ms(&server) + 3 * 400;
            let renewed = lease
                .keep_alive(async |lost: &Lost| {
                    while crate::behaviour::common::server_time_ms(&server) <= until {
                        Timer::after(Duration::from_millis(20)).await;
                    }
                    assert!(exists(&server, &name), "renewed past three lease lengths");
                    !lost.is_lost()
                })
                .await;
            assert!(renewed, "nothing was lost");
            assert_eq!(lease.release().await.unwrap(), ReleaseOutcome::Released);
        });
        assert!(!exists(&server, &name));
    }
}
