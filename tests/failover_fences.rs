//! Fences floored at the server clock (docs/PROTOCOL.md §3): a failover to a replica
//! that never received the last grants still hands out larger fences, and a
//! fencing store rejects the old holder's write. Both front ends, against a
//! real primary and replica: the replication link is cut (the replica is
//! promoted with `REPLICAOF NO ONE`), the primary grants once more and is
//! killed, and a locker pointed at the promoted replica acquires.
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

use redlease::fenced::{FencedStore, WriteError};
use redlease::{AcquireOptions, Error, Fence};

use behaviour::common::{config, connect, granted, namespace, no_wait, polls_off, spawn, BOUND};
use behaviour::front::Front;
use support::proxy::ReplyHoldProxy;
use support::{wait_until, RedisServer};

/// A primary and its replica.
fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::builder().replica_of(&primary).start();
    (primary, replica)
}

/// `REPLICAOF NO ONE`: the replica is a primary from now on, with what it
/// had received.
fn promote(replica: &RedisServer) {
    let promoted: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.conn())
        .expect("promote the replica");
    assert_eq!(promoted, "OK");
}

fn replicated(replica: &RedisServer, name: &str) -> bool {
    let value: Option<String> = redis::cmd("GET")
        .arg(name)
        .query(&mut replica.conn())
        .unwrap_or(None);
    value.is_some()
}

/// The fence after a failover that lost the last grants is larger than
/// every fence handed out before it, and the store rejects the stale
/// holder. (Up to 0.1 the counter's `INCR` continued from the replica's
/// older value and handed out a fence that was already used.)
fn a_failover_that_lost_the_last_grants_still_hands_out_a_larger_fence<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let store_server = RedisServer::start();
    let store = FencedStore::new("failover-store");
    let ns = namespace("failover");
    let fence_name = behaviour::common::fence_name(&ns, "k");

    let first: F = connect(&primary, config(&ns));
    // Several grants that do reach the replica.
    for _ in 0..3 {
        F::release(granted(first.acquire_with("k", no_wait()), "before")).unwrap();
    }
    wait_until(BOUND, "the replica has the fence counter", || {
        replicated(&replica, &fence_name)
    });

    // The replication link breaks (the replica is promoted now: a link cut
    // with the primary's last writes still in flight would reach it later
    // from its socket buffer), then the primary grants once more and dies.
    promote(&replica);
    let stale = granted(first.acquire_with("k", no_wait()), "the last grant");
    let stale_fence = F::fence(&stale);
    store
        .write(
            &mut store_server.conn(),
            "doc",
            stale_fence,
            "old holder, early",
        )
        .expect("the first write is accepted");
    drop(primary);
    assert!(
        !behaviour::common::exists(&replica, &behaviour::common::lock_name(&ns, "k")),
        "the promoted replica never saw the last grant"
    );

    let second: F = connect(&replica, config(&ns));
    let fresh = granted(second.acquire_with("k", no_wait()), "after the failover");
    let fresh_fence = F::fence(&fresh);
    assert!(
        fresh_fence > stale_fence,
        "fence {fresh_fence} after the failover is not above {stale_fence}"
    );
    store
        .write(&mut store_server.conn(), "doc", fresh_fence, "new holder")
        .expect("the new holder's write is accepted");
    match store.write(
        &mut store_server.conn(),
        "doc",
        stale_fence,
        "old holder, late",
    ) {
        Err(WriteError::Stale(s)) => assert_eq!(s.current, fresh_fence),
        other => panic!("the stale holder's write must be rejected: {other:?}"),
    }
    F::release(fresh).unwrap();
    drop(stale);
    let _ = second.shutdown();
}

/// Every grant is floored at the server's clock: a counter set far below
/// it (as after a failover to an old replica) is overtaken at once, and the
/// fences still strictly increase afterwards.
fn every_grant_is_floored_at_the_server_clock<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("floor");
    let fence_name = behaviour::common::fence_name(&ns, "k");
    let _: () = redis::cmd("SET")
        .arg(&fence_name)
        .arg(5)
        .query(&mut server.conn())
        .unwrap();
    let locker: F = connect(&server, config(&ns));
    let now_us = behaviour::common::server_time_ms(&server) * 1000;
    let first = F::fence(&granted(locker.acquire_with("k", no_wait()), "first"));
    assert!(
        first.get() >= now_us,
        "{first} is below the clock floor {now_us}"
    );
    let second = F::fence(&granted(locker.acquire_with("k", no_wait()), "second"));
    assert!(second > first);
    let _ = locker.shutdown();
}

/// A permit's fence after a failover that lost the last grant of its slot
/// is larger than that grant's: the slot's counter is floored at the
/// promoted replica's clock too.
fn a_permit_after_a_failover_that_lost_the_last_grant_has_a_larger_fence_on_its_slot<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let ns = namespace("sem-failover");
    let counter = behaviour::semaphore::slot_fence_name(&ns, "pool", 0);

    let first: F = connect(&primary, config(&ns));
    for _ in 0..3 {
        let permit = granted(first.acquire_permit("pool", 2, no_wait()), "before");
        assert_eq!(F::slot(&permit), 0);
        F::release_permit(permit).unwrap();
    }
    wait_until(BOUND, "the replica has slot 0's fence counter", || {
        replicated(&replica, &counter)
    });

    promote(&replica);
    let stale = granted(first.acquire_permit("pool", 2, no_wait()), "the last grant");
    assert_eq!(F::slot(&stale), 0);
    let stale_fence = F::permit_fence(&stale);
    drop(primary);
    assert!(
        !replicated(&replica, &behaviour::semaphore::slot_name(&ns, "pool", 0)),
        "the promoted replica never saw the last grant"
    );

    let second: F = connect(&replica, config(&ns));
    let fresh = granted(
        second.acquire_permit("pool", 2, no_wait()),
        "after the failover",
    );
    assert_eq!(F::slot(&fresh), 0, "the same slot");
    let fresh_fence = F::permit_fence(&fresh);
    assert!(
        fresh_fence > stale_fence,
        "slot 0's fence {fresh_fence} after the failover is not above {stale_fence}"
    );
    F::release_permit(fresh).unwrap();
    drop(stale);
    let _ = second.shutdown();
}

/// `GET name` on `server`, parsed as a fence counter.
fn counter(server: &RedisServer, name: &str) -> Option<u64> {
    let value: Option<u64> = redis::cmd("GET")
        .arg(name)
        .query(&mut server.conn())
        .unwrap_or(None);
    value
}

/// The read-write lease after a failover that lost the last writer's grant
/// and a reader granted after it (docs/PROTOCOL.md §3, §5.3): the next writer's fence
/// is above every fence and every epoch handed out before, so a fencing
/// store rejects the stale writer and the stale reader's derived write;
/// a reader granted on the promoted replica before that writer carries
/// the replica's older counter, so its derived write is rejected too
/// (refused, never accepted over the lost writer's data), and a reader
/// after the new writer carries its fence and is accepted.
fn a_writer_after_a_failover_that_lost_the_last_grant_is_fenced_above_every_fence_and_epoch_before<
    F: Front,
>() {
    let (primary, replica) = primary_and_replica();
    let store_server = RedisServer::start();
    let store = FencedStore::new("rw-failover-store");
    let ns = namespace("rw-failover");
    let fence_counter = behaviour::rw_lock::rw_name(&ns, "fence", "doc");

    let first: F = connect(&primary, config(&ns));
    // Writers and readers whose grants do reach the replica.
    for _ in 0..3 {
        F::release_write(granted(first.write_with("doc", no_wait()), "before")).unwrap();
        F::release_read(granted(first.read_with("doc", no_wait()), "before")).unwrap();
    }
    let held_names = ["write", "read"].map(|part| behaviour::rw_lock::rw_name(&ns, part, "doc"));
    wait_until(
        BOUND,
        "the replica has the latest counter and the releases",
        || {
            counter(&replica, &fence_counter).is_some()
                && counter(&replica, &fence_counter) == counter(&primary, &fence_counter)
                && !held_names
                    .iter()
                    .any(|name| behaviour::common::exists(&replica, name))
        },
    );

    promote(&replica);
    // The last writer, and a reader after it, on the primary only.
    let stale_writer = granted(first.write_with("doc", no_wait()), "the last writer");
    let stale_fence = F::write_fence(&stale_writer);
    store
        .write(
            &mut store_server.conn(),
            "doc",
            stale_fence,
            "the lost save",
        )
        .expect("the last writer's write is accepted");
    F::release_write(stale_writer).unwrap();
    let stale_reader = granted(first.read_with("doc", no_wait()), "the last reader");
    let stale_epoch = F::epoch(&stale_reader);
    assert_eq!(
        stale_epoch, stale_fence,
        "the epoch is the last writer's fence"
    );
    drop(primary);
    let replicated_counter = counter(&replica, &fence_counter).expect("the replica's counter");
    assert!(
        replicated_counter < stale_fence.get(),
        "the promoted replica never saw the last grant"
    );

    let second: F = connect(&replica, config(&ns));
    let early = granted(
        second.read_with("doc", no_wait()),
        "a reader after the failover",
    );
    let early_epoch = F::epoch(&early);
    assert_eq!(
        early_epoch.get(),
        replicated_counter,
        "the replica's counter"
    );
    match store.write_derived(&mut store_server.conn(), "doc", early_epoch, "early fill") {
        Err(WriteError::Stale(s)) => assert_eq!(s.current, stale_fence),
        other => panic!("a fill below the lost save must be rejected: {other:?}"),
    }
    F::release_read(early).unwrap();

    let fresh = granted(
        second.write_with("doc", no_wait()),
        "a writer after the failover",
    );
    let fresh_fence = F::write_fence(&fresh);
    assert!(
        fresh_fence > stale_fence && fresh_fence > stale_epoch,
        "fence {fresh_fence} after the failover is not above {stale_fence} / epoch {stale_epoch}"
    );
    store
        .write(&mut store_server.conn(), "doc", fresh_fence, "the new save")
        .expect("the new writer's write is accepted");
    for (what, result) in [
        (
            "the stale writer",
            store.write(&mut store_server.conn(), "doc", stale_fence, "late save"),
        ),
        (
            "the stale reader",
            store.write_derived(&mut store_server.conn(), "doc", stale_epoch, "late fill"),
        ),
    ] {
        match result {
            Err(WriteError::Stale(s)) => assert_eq!(s.current, fresh_fence, "{what}"),
            other => panic!("{what}'s write must be rejected: {other:?}"),
        }
    }
    F::release_write(fresh).unwrap();
    let after = granted(second.read_with("doc", no_wait()), "a reader after it");
    assert_eq!(F::epoch(&after), fresh_fence);
    store
        .write_derived(
            &mut store_server.conn(),
            "doc",
            F::epoch(&after),
            "fresh fill",
        )
        .expect("a fill of the new save is accepted");
    F::release_read(after).unwrap();
    drop(stale_reader);
    let _ = second.shutdown();
}

/// A grant one waiter of a locker took, brought back by a failover that
/// lost the release that ended it (docs/PROTOCOL.md §4.3): the locker's
/// next waiter, whose line names the same grant token, is not given that
/// fence again. Locker A reaches the primary through a proxy that then
/// leads to the promoted replica, as an address that moves would.
fn a_grant_a_failover_brings_back_is_not_given_to_the_next_waiter<F: Front>() {
    let (primary, replica) = primary_and_replica();
    let proxy = ReplyHoldProxy::start(primary.port());
    let ns = namespace("stale-grant");
    let lock = behaviour::common::lock_name(&ns, "k");
    let queued = |server: &RedisServer| behaviour::handover::queued(server, &ns, "k").len();

    let b: F = connect(&primary, config(&ns));
    let held = granted(b.acquire_with("k", no_wait()), "B");
    // A's two waiters (a claim window long enough for the grant to be
    // taken from its notice), then C's registration behind A's.
    let a_config = polls_off(&ns).claim_window(Duration::from_secs(1));
    let a: Arc<F> = Arc::new(F::connect(&proxy.url(), a_config).expect("connect A"));
    let a1 = Arc::clone(&a);
    let first = spawn("A's first waiter", move || a1.acquire("k"));
    wait_until(BOUND, "A registered", || queued(&primary) == 1);
    let a2 = Arc::clone(&a);
    let second = spawn("A's second waiter", move || a2.acquire("k"));
    let c: Arc<F> = Arc::new(connect(&primary, polls_off(&ns)));
    let c1 = Arc::clone(&c);
    let third = spawn("C's waiter", move || c1.acquire("k"));
    wait_until(BOUND, "C registered", || queued(&primary) == 2);

    // B's release grants the lock to A, whose first waiter takes it; the
    // replica gets that hold, extended past the claim window.
    F::release(held).unwrap();
    let first = granted(first.join_within(BOUND), "A's first waiter");
    let taken = F::fence(&first);
    wait_until(BOUND, "the replica has A's extended hold", || {
        behaviour::common::get(&replica, &lock).is_some_and(|v| v.ends_with(&format!(":{taken}")))
            && behaviour::common::pttl(&replica, &lock) > 1_000
    });

    // The replica is promoted; the primary then runs the release, which
    // hands the lock to C, and dies.
    promote(&replica);
    F::release(first).unwrap();
    let c_lease = granted(third.join_within(BOUND), "C's waiter");
    proxy.retarget(replica.port());
    drop(primary);

    // On the promoted replica the lock still holds A's first grant.
    let next = granted(second.join_within(BOUND * 2), "A's second waiter");
    assert!(
        F::fence(&next) > taken,
        "A's second waiter was given fence {} after its first waiter had {taken}",
        F::fence(&next)
    );
    drop(next);
    drop(c_lease);
    let _ = a.shutdown();
}

/// One kind of lease, as the claimed-grant test drives it.
struct Claimed<F: Front, L> {
    acquire: fn(&F, AcquireOptions) -> Result<L, Error>,
    fence: fn(&L) -> Fence,
    release: fn(L),
    /// The key that holds the grant, and the kind's queue.
    lease: fn(&str) -> String,
    queue: fn(&str) -> String,
}

/// As [`a_grant_a_failover_brings_back_is_not_given_to_the_next_waiter`],
/// for a grant claimed (a semaphore's slot, a writer's; or a lock's where
/// it is not taken from its notice): A's traffic is held while the
/// replica gets the grant and is promoted; A's first waiter then claims it
/// on the primary and releases it there, and the primary dies. On the
/// promoted replica the grant is back under A's grant token, and A's
/// second waiter must not be given its fence again.
fn a_claimed_grant_a_failover_brings_back_is_not_claimed_again<F: Front, L: Send + 'static>(
    kind: &Claimed<F, L>,
) {
    let (primary, replica) = primary_and_replica();
    let proxy = ReplyHoldProxy::start(primary.port());
    let ns = namespace("stale-claim");
    let lease = (kind.lease)(&ns);
    let queue = (kind.queue)(&ns);
    let queued = |server: &RedisServer| {
        let entries: Vec<String> = redis::cmd("LRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .unwrap_or_default();
        entries.len()
    };

    let b: F = connect(&primary, config(&ns));
    let held = granted((kind.acquire)(&b, no_wait()), "B");
    let a_config = polls_off(&ns).claim_window(Duration::from_secs(5));
    let a: Arc<F> = Arc::new(F::connect(&proxy.url(), a_config).expect("connect A"));
    let wait = || behaviour::common::waiting(BOUND);
    let (a1, acquire) = (Arc::clone(&a), kind.acquire);
    let first = spawn("A's first waiter", move || acquire(&a1, wait()));
    wait_until(BOUND, "A registered", || queued(&primary) == 1);
    let a2 = Arc::clone(&a);
    let second = spawn("A's second waiter", move || acquire(&a2, wait()));
    let c: Arc<F> = Arc::new(connect(&primary, polls_off(&ns)));
    let c1 = Arc::clone(&c);
    let third = spawn("C's waiter", move || acquire(&c1, wait()));
    wait_until(BOUND, "C registered", || queued(&primary) == 2);

    // A hears nothing and sends nothing while B's release grants to it and
    // the replica gets the grant.
    proxy.stop();
    (kind.release)(held);
    wait_until(BOUND, "the replica has the grant to A", || {
        let on_primary = behaviour::common::get(&primary, &lease);
        on_primary.is_some() && behaviour::common::get(&replica, &lease) == on_primary
    });
    promote(&replica);
    // A's first waiter claims the grant on the primary and releases it
    // there (to C); then the primary dies.
    proxy.release();
    let first = granted(first.join_within(BOUND), "A's first waiter");
    let claimed = (kind.fence)(&first);
    (kind.release)(first);
    let c_lease = granted(third.join_within(BOUND), "C's waiter");
    proxy.retarget(replica.port());
    drop(primary);

    let next = granted(second.join_within(BOUND * 2), "A's second waiter");
    assert!(
        (kind.fence)(&next) > claimed,
        "A's second waiter was given fence {} after its first waiter claimed {claimed}",
        (kind.fence)(&next)
    );
    drop((next, c_lease));
    let _ = a.shutdown();
}

fn claimed_lock<F: Front>() -> Claimed<F, F::Lease> {
    Claimed {
        acquire: |l, o| l.acquire_with("k", o),
        fence: F::fence,
        release: |l| drop(F::release(l)),
        lease: |ns| behaviour::common::lock_name(ns, "k"),
        queue: |ns| behaviour::handover::queue_name(ns, "k"),
    }
}

fn claimed_permit<F: Front>() -> Claimed<F, F::Permit> {
    Claimed {
        acquire: |l, o| l.acquire_permit("pool", 1, o),
        fence: F::permit_fence,
        release: |p| drop(F::release_permit(p)),
        lease: |ns| behaviour::semaphore::slot_name(ns, "pool", 0),
        queue: |ns| format!("{ns}:sem-queue:{{{}}}", behaviour::common::key_sha("pool")),
    }
}

fn claimed_write<F: Front>() -> Claimed<F, F::Write> {
    Claimed {
        acquire: |l, o| l.write_with("doc", o),
        fence: F::write_fence,
        release: |w| drop(F::release_write(w)),
        lease: |ns| behaviour::rw_lock::rw_name(ns, "write", "doc"),
        queue: |ns| behaviour::rw_lock::rw_name(ns, "queue", "doc"),
    }
}

macro_rules! suite {
    ($module:ident, $front:ty) => {
        mod $module {
            #[test]
            fn a_failover_that_lost_the_last_grants_still_hands_out_a_larger_fence() {
                super::a_failover_that_lost_the_last_grants_still_hands_out_a_larger_fence::<$front>(
                );
            }

            #[test]
            fn a_permit_after_a_failover_that_lost_the_last_grant_has_a_larger_fence_on_its_slot() {
                super::a_permit_after_a_failover_that_lost_the_last_grant_has_a_larger_fence_on_its_slot::<$front>();
            }

            #[test]
            fn a_writer_after_a_failover_that_lost_the_last_grant_is_fenced_above_every_fence_and_epoch_before() {
                super::a_writer_after_a_failover_that_lost_the_last_grant_is_fenced_above_every_fence_and_epoch_before::<$front>();
            }

            #[test]
            fn a_grant_a_failover_brings_back_is_not_given_to_the_next_waiter() {
                super::a_grant_a_failover_brings_back_is_not_given_to_the_next_waiter::<$front>();
            }

            #[test]
            fn a_claimed_lock_grant_a_failover_brings_back_is_not_claimed_again() {
                use super::*;
                a_claimed_grant_a_failover_brings_back_is_not_claimed_again(&claimed_lock::<$front>());
            }

            #[test]
            fn a_claimed_slot_grant_a_failover_brings_back_is_not_claimed_again() {
                use super::*;
                a_claimed_grant_a_failover_brings_back_is_not_claimed_again(&claimed_permit::<$front>());
            }

            #[test]
            fn a_claimed_writer_grant_a_failover_brings_back_is_not_claimed_again() {
                use super::*;
                a_claimed_grant_a_failover_brings_back_is_not_claimed_again(&claimed_write::<$front>());
            }

            #[test]
            fn every_grant_is_floored_at_the_server_clock() {
                super::every_grant_is_floored_at_the_server_clock::<$front>();
            }
        }
    };
}

suite!(blocking, crate::behaviour::Blocking);
suite!(aio, crate::behaviour::Async);
