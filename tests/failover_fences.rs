//! Fences floored at the server clock (SPEC §3): a failover to a replica
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

use redlease::fenced::{FencedStore, WriteError};

use behaviour::common::{config, connect, granted, namespace, no_wait, BOUND};
use behaviour::front::Front;
use support::{wait_until, RedisServer};

/// A primary and its replica.
fn primary_and_replica() -> (RedisServer, RedisServer) {
    let primary = RedisServer::start();
    let replica = RedisServer::builder().replica_of(&primary).start();
    (primary, replica)
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
    let promoted: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.conn())
        .expect("promote the replica");
    assert_eq!(promoted, "OK");
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

    let promoted: String = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.conn())
        .expect("promote the replica");
    assert_eq!(promoted, "OK");
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
            fn every_grant_is_floored_at_the_server_clock() {
                super::every_grant_is_floored_at_the_server_clock::<$front>();
            }
        }
    };
}

suite!(blocking, crate::behaviour::Blocking);
suite!(aio, crate::behaviour::Async);
