//! Release and renew outcomes: Released/Renewed while held, Expired after
//! the TTL, Conflict once another owner took the key; a lease seen ended
//! never becomes valid again.

use std::time::Duration;

use redlease::{ReleaseOutcome, RenewOutcome};

use super::common::{
    config, connect, exists, fence_name, get, granted, leased, lock_name, namespace, no_wait, pttl,
    token_of, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

const SHORT: Duration = Duration::from_millis(50);

/// Acquires `key` with a 50 ms lease and waits until Redis expired it.
fn expired_lease<F: Front>(server: &RedisServer, ns: &str, locker: &F, key: &str) -> F::Lease {
    let lease = granted(locker.acquire_with(key, leased(SHORT)), "short lease");
    let lock = lock_name(ns, key);
    wait_until(BOUND, "the short lease's key expires in Redis", || {
        !exists(server, &lock)
    });
    // Redis counted from the SET, which came after the submission the
    // local estimate counts from.
    assert!(
        !F::is_valid(&lease),
        "expired in Redis, so expired locally too"
    );
    lease
}

/// Releasing a held lease reports `Released`, deletes the lock and keeps
/// the fence counter.
pub(crate) fn release_of_a_held_lease_reports_released_and_keeps_the_fence_counter<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("released");
    let locker: F = connect(&server, config(&ns));
    let lease_len = Duration::from_secs(5);
    let lease = granted(locker.acquire_with("k", leased(lease_len)), "acquire");
    assert!(F::is_valid(&lease));
    let remaining = F::remaining(&lease);
    assert!(
        !remaining.is_zero() && remaining <= lease_len,
        "{remaining:?}"
    );
    let fence = F::fence(&lease);
    assert_eq!(
        get(&server, &lock_name(&ns, "k")),
        Some(format!("{}:{fence}", token_of(&server, &ns, "k")))
    );
    let ttl = pttl(&server, &lock_name(&ns, "k"));
    assert!(ttl > 0 && ttl <= 5000, "PX lease: {ttl}");
    assert_eq!(locker.stats().tracked_leases, 1);

    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    assert!(!exists(&server, &lock_name(&ns, "k")));
    assert_eq!(get(&server, &fence_name(&ns, "k")), Some(fence.to_string()));
    assert_eq!(locker.stats().tracked_leases, 0);
}

/// Releasing a lease whose key expired reports `Expired`.
pub(crate) fn release_after_the_lease_expired_reports_expired<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rel-expired");
    let locker: F = connect(&server, config(&ns));
    let lease = expired_lease(&server, &ns, &locker, "k");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Expired);
    assert_eq!(locker.stats().tracked_leases, 0);
}

/// Releasing a lease whose key another owner took reports `Conflict` and
/// leaves the new holder's lock intact.
pub(crate) fn release_after_another_owner_took_the_key_reports_conflict<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("rel-conflict");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));
    let old = expired_lease(&server, &ns, &a, "k");
    let new = granted(b.acquire_with("k", no_wait()), "the free key");
    let stored = get(&server, &lock_name(&ns, "k"));

    assert_eq!(F::release(old).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(
        get(&server, &lock_name(&ns, "k")),
        stored,
        "the new lock is untouched"
    );
    assert!(F::is_valid(&new));
    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
}

/// Renewing a held lease reports `Renewed` and extends it to a full lease,
/// in Redis and in the local estimate.
pub(crate) fn renew_of_a_held_lease_extends_it_to_a_full_lease<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("renewed");
    let locker: F = connect(&server, config(&ns));
    let lease = granted(
        locker.acquire_with("k", leased(Duration::from_secs(3))),
        "acquire",
    );
    // Let a third of the lease pass (bounded), then renew: both views must
    // grow back well above what was left.
    let low = Duration::from_secs(2);
    wait_until(BOUND, "a third of the lease passed", || {
        F::remaining(&lease) < low
    });
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Renewed);
    assert!(F::is_valid(&lease));
    assert!(F::remaining(&lease) > low, "{:?}", F::remaining(&lease));
    let ttl = pttl(&server, &lock_name(&ns, "k"));
    assert!(ttl > 2000 && ttl <= 3000, "PEXPIRE to a full lease: {ttl}");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

/// Renewing an expired lease reports `Expired`, never re-creates the lock,
/// and the lease stays invalid.
pub(crate) fn renew_after_the_lease_expired_reports_expired_and_the_lease_stays_invalid<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("renew-expired");
    let locker: F = connect(&server, config(&ns));
    let lease = expired_lease(&server, &ns, &locker, "k");
    for attempt in 0..2 {
        assert_eq!(
            F::renew(&lease).unwrap(),
            RenewOutcome::Expired,
            "renew #{attempt}"
        );
        assert!(!F::is_valid(&lease));
        assert_eq!(F::remaining(&lease), Duration::ZERO);
        assert!(
            !exists(&server, &lock_name(&ns, "k")),
            "renew never re-creates the lock"
        );
    }
}

/// Renewing a lease whose key another owner took reports `Conflict`,
/// leaves their lock alone, and the lease stays invalid even after the key
/// is free again.
pub(crate) fn renew_after_another_owner_took_the_key_reports_conflict_and_stays_invalid<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("renew-conflict");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));
    let old = expired_lease(&server, &ns, &a, "k");
    let new = granted(
        b.acquire_with("k", leased(Duration::from_secs(5))),
        "free key",
    );
    let stored = get(&server, &lock_name(&ns, "k"));

    assert_eq!(F::renew(&old).unwrap(), RenewOutcome::Conflict);
    assert!(!F::is_valid(&old));
    assert_eq!(get(&server, &lock_name(&ns, "k")), stored);

    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
    assert_ne!(F::renew(&old).unwrap(), RenewOutcome::Renewed);
    assert!(
        !F::is_valid(&old),
        "a lease seen in conflict never becomes valid again"
    );
    assert!(!exists(&server, &lock_name(&ns, "k")));
}

/// Releasing a lease after its renew reported `Expired` reports `Expired`
/// too (the locker is not shutting down).
pub(crate) fn release_after_a_renew_saw_the_lease_expired_reports_expired<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("renew-then-release");
    let locker: F = connect(&server, config(&ns));
    let lease = expired_lease(&server, &ns, &locker, "k");
    assert_eq!(F::renew(&lease).unwrap(), RenewOutcome::Expired);
    match F::release(lease) {
        Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Expired),
        Err(e) => panic!(
            "release after renew saw Expired failed with {} ({e:?})",
            e.code()
        ),
    }
}

/// Releasing a lease after its renew reported `Conflict` reports
/// `Conflict` and leaves the new holder's lock alone.
pub(crate) fn release_after_a_renew_saw_a_conflict_reports_conflict<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("conflict-then-release");
    let a: F = connect(&server, config(&ns));
    let b: F = connect(&server, config(&ns));
    let old = expired_lease(&server, &ns, &a, "k");
    let new = granted(b.acquire_with("k", no_wait()), "free key");
    assert_eq!(F::renew(&old).unwrap(), RenewOutcome::Conflict);
    match F::release(old) {
        Ok(outcome) => assert_eq!(outcome, ReleaseOutcome::Conflict),
        Err(e) => panic!(
            "release after renew saw Conflict failed with {} ({e:?})",
            e.code()
        ),
    }
    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
}
