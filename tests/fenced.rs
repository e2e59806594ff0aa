//! Fences doing their job against a real Redis: `redlease::fenced`'s
//! compare-and-set store rejects a stale holder's late write after a newer
//! holder wrote (sync `write` and async `write_async`; a permit's per
//! (resource, slot) with `write_permit`), a read-write lease's writer whose
//! lease ran out is refused at its own fence once a reader's derived write
//! at that fence was accepted, a multi-key lease's write of a key is
//! checked with that key's fence (`fence_of`) against the key's single-key
//! holders, and `Config::fence_counter_ttl` lets an unused fence counter expire while the
//! next grant still gets a higher fence (seeded from Redis `TIME` × 1000).
//!
//! The lease bodies are generic over the behaviour suite's `Front` and run
//! once per front end; the async store is driven under smol and
//! `futures::executor`.
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

use redlease::fenced::{FencedStore, StaleFence, WriteError};
use redlease::{AcquireOptions, Fence, ReleaseOutcome};

use behaviour::common::{
    config, connect, exists, fence_name, granted, leased, lock_name, namespace, no_wait, pttl,
    server_time_ms, BOUND,
};
use behaviour::front::Front;
use support::{wait_until, RedisServer};

/// The resource every body writes.
const RESOURCE: &str = "report:2026-12-01";

/// Asserts a write was refused as stale with this accepted fence.
fn assert_stale(result: Result<(), WriteError>, current: Fence) {
    match result {
        Err(WriteError::Stale(stale)) => {
            assert_eq!(stale, StaleFence { current });
            assert!(stale.to_string().contains(&current.to_string()), "{stale}");
        }
        other => panic!("expected a stale write (current {current}), got {other:?}"),
    }
}

/// What the store holds for `RESOURCE`, value as text.
fn read(store: &FencedStore, server: &RedisServer) -> Option<(Fence, String)> {
    read_all(store, server, &[RESOURCE]).pop().flatten()
}

/// Two holders of one key in sequence: the first one's lease runs out, the
/// second acquires with a higher fence and writes, then the first one's
/// late write is rejected with the accepted fence. The newer holder writing
/// again with its own (equal) fence is accepted; `read` returns the last
/// accepted fence and value throughout.
fn a_stale_holders_write_is_rejected_after_a_newer_holder_wrote<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced");
    let first: F = connect(&server, config(&ns));
    let second: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();
    assert_eq!(read(&store, &server), None, "nothing written yet");

    let old = granted(
        first.acquire_with("k", leased(Duration::from_millis(300))),
        "first holder",
    );
    let old_fence = F::fence(&old);
    store
        .write(&mut conn, RESOURCE, old_fence, "from the first holder")
        .unwrap();
    assert_eq!(
        read(&store, &server),
        Some((old_fence, "from the first holder".to_owned()))
    );

    // The first holder stalls past its lease.
    wait_until(BOUND, "the first lease expired in redis", || {
        !exists(&server, &lock_name(&ns, "k"))
    });
    let new = granted(second.acquire_with("k", no_wait()), "second holder");
    let new_fence = F::fence(&new);
    assert!(new_fence > old_fence);
    store
        .write(&mut conn, RESOURCE, new_fence, "from the second holder")
        .unwrap();

    // The first holder wakes up and writes late.
    assert_stale(
        store.write(&mut conn, RESOURCE, old_fence, "late write"),
        new_fence,
    );
    assert_eq!(
        read(&store, &server),
        Some((new_fence, "from the second holder".to_owned())),
        "the late write changed nothing"
    );

    // The same holder writing again is accepted.
    store
        .write(&mut conn, RESOURCE, new_fence, "second write")
        .unwrap();
    assert_eq!(
        read(&store, &server),
        Some((new_fence, "second write".to_owned()))
    );
    // The key belongs to the second holder now.
    assert_eq!(F::release(old).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
}

/// Permits write per (resource, slot): holders of two slots write beside
/// each other, and a stale holder of a slot is refused once the slot's next
/// holder wrote, while the other slot's register is untouched.
fn a_stale_permits_write_is_rejected_per_slot<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced-permit");
    let first: F = connect(&server, config(&ns));
    let second: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();

    let stale = granted(
        first.acquire_permit("pool", 2, leased(Duration::from_millis(300))),
        "slot 0",
    );
    let other = granted(second.acquire_permit("pool", 2, no_wait()), "slot 1");
    assert_eq!((F::slot(&stale), F::slot(&other)), (0, 1));
    for permit in [&stale, &other] {
        store
            .write_permit(
                &mut conn,
                RESOURCE,
                F::slot(permit),
                F::permit_fence(permit),
                "mine",
            )
            .unwrap();
    }
    // A slot's fence is compared with its own slot only: slot 0's
    // (lower or higher) fence never refuses slot 1's holder.
    store
        .write_permit(&mut conn, RESOURCE, 1, F::permit_fence(&other), "again")
        .unwrap();

    // Slot 0's holder stalls past its lease; slot 0 goes to a new holder.
    wait_until(BOUND, "slot 0 expired in redis", || {
        !exists(
            &server,
            &format!("{ns}:sem:{{{}}}:0", behaviour::common::key_sha("pool")),
        )
    });
    let next = granted(second.acquire_permit("pool", 2, no_wait()), "slot 0 again");
    assert_eq!(F::slot(&next), 0);
    assert!(F::permit_fence(&next) > F::permit_fence(&stale));
    store
        .write_permit(&mut conn, RESOURCE, 0, F::permit_fence(&next), "newer")
        .unwrap();
    assert_stale(
        store.write_permit(&mut conn, RESOURCE, 0, F::permit_fence(&stale), "late"),
        F::permit_fence(&next),
    );
    let read_slot = |slot| {
        store
            .read_permit(&mut server.conn(), RESOURCE, slot)
            .unwrap()
            .map(|(fence, value)| (fence, String::from_utf8(value).unwrap()))
    };
    assert_eq!(read_slot(0), Some((F::permit_fence(&next), "newer".into())));
    assert_eq!(
        read_slot(1),
        Some((F::permit_fence(&other), "again".into()))
    );
    assert_eq!(read(&store, &server), None, "the lease register is apart");
    assert_eq!(F::release_permit(stale).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::release_permit(next).unwrap(), ReleaseOutcome::Released);
    assert_eq!(F::release_permit(other).unwrap(), ReleaseOutcome::Released);
}

/// The read-write lease's two checks: a writer writes with its fence; a
/// cache fill derived from a read carries the read's epoch and is accepted
/// while no newer writer committed, refused (stale) once one did.
fn a_stale_cache_fill_is_rejected_after_a_newer_writer_committed<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced-rw");
    let locker: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();

    let w = granted(locker.write_with("doc", no_wait()), "the first writer");
    let first = F::write_fence(&w);
    store.write(&mut conn, RESOURCE, first, "v1").unwrap();
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    // A reader renders v1; its fill is current and accepted.
    let r = granted(locker.read_with("doc", no_wait()), "a reader of v1");
    let epoch = F::epoch(&r);
    assert_eq!(epoch, first, "the epoch is the latest writer fence");
    store
        .write_derived(&mut conn, RESOURCE, epoch, "v1 rendered")
        .unwrap();
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);

    // Another reader renders v1 slowly; meanwhile a writer saves v2.
    let slow = granted(
        locker.read_with("doc", leased(Duration::from_millis(300))),
        "a slow reader of v1",
    );
    let slow_epoch = F::epoch(&slow);
    let w = granted(
        locker.write_with("doc", behaviour::common::waiting(BOUND)),
        "the second writer",
    );
    let second = F::write_fence(&w);
    assert!(second > slow_epoch);
    store.write(&mut conn, RESOURCE, second, "v2").unwrap();
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    // The slow reader's fill of v1 comes too late.
    assert_stale(
        store.write_derived(&mut conn, RESOURCE, slow_epoch, "v1 rendered, late"),
        second,
    );
    assert_eq!(read(&store, &server), Some((second, "v2".to_owned())));
    assert_eq!(F::release_read(slow).unwrap(), ReleaseOutcome::Expired);
}

/// A writer whose lease ran out is fenced out by the reader that got in
/// after it: a reader's epoch is the last writer's fence `f`, so a write
/// derived from that read is accepted at `f`, and from then on the stale
/// writer's writes with `f` are refused, while further fills at `f` are
/// still accepted. Before its lease ran out the writer wrote twice with
/// `f` (the same live holder writing again), and the next writer writes
/// above `f` as often as it likes.
fn an_expired_writers_write_is_rejected_after_a_fill_derived_at_its_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced-rw-expired");
    let writer: F = connect(&server, config(&ns));
    let reader: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();

    let w = granted(
        writer.write_with("doc", leased(Duration::from_millis(300))),
        "the writer",
    );
    let fence = F::write_fence(&w);
    store.write(&mut conn, RESOURCE, fence, "v1").unwrap();
    store
        .write(&mut conn, RESOURCE, fence, "v1, saved again")
        .unwrap();

    // The writer stalls past its lease; a reader gets in after it.
    let r = granted(
        reader.read_with("doc", behaviour::common::waiting(BOUND)),
        "a reader after the writer's lease ran out",
    );
    let epoch = F::epoch(&r);
    assert_eq!(epoch, fence, "the epoch is the expired writer's fence");
    store
        .write_derived(&mut conn, RESOURCE, epoch, "v1 rendered")
        .unwrap();

    // The writer wakes up and writes again with its fence: stale.
    assert_stale(store.write(&mut conn, RESOURCE, fence, "late save"), fence);
    assert_eq!(
        read(&store, &server),
        Some((fence, "v1 rendered".to_owned())),
        "the late save changed nothing"
    );
    // Fills at the epoch are still current.
    store
        .write_derived(&mut conn, RESOURCE, epoch, "v1 rendered again")
        .unwrap();
    assert_stale(store.write(&mut conn, RESOURCE, fence, "later save"), fence);
    assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);

    // The next writer is above the epoch and may write again.
    let next = granted(writer.write_with("doc", no_wait()), "the next writer");
    let next_fence = F::write_fence(&next);
    assert!(next_fence > fence);
    store.write(&mut conn, RESOURCE, next_fence, "v2").unwrap();
    store
        .write(&mut conn, RESOURCE, next_fence, "v2, saved again")
        .unwrap();
    assert_stale(
        store.write_derived(&mut conn, RESOURCE, epoch, "v1 rendered, late"),
        next_fence,
    );
    assert_eq!(
        read(&store, &server),
        Some((next_fence, "v2, saved again".to_owned()))
    );
    assert_eq!(F::release_write(next).unwrap(), ReleaseOutcome::Released);
    drop(w);
}

/// With `fence_counter_ttl(200 ms)` the fence counter carries a TTL after
/// an acquire, disappears once unused for that long, and the next acquire
/// still gets a higher fence, seeded from the server's `TIME` in ms × 1000.
/// Without the option the counter never expires.
fn an_expired_fence_counter_is_reseeded_above_every_earlier_fence<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fence-ttl");
    let ttl = Duration::from_millis(200);
    let locker: F = connect(&server, config(&ns).fence_counter_ttl(ttl));
    let counter = fence_name(&ns, "k");

    let lease = granted(locker.acquire("k"), "first acquire");
    let first = F::fence(&lease);
    let left = pttl(&server, &counter);
    assert!(
        left > 0 && left <= 200,
        "the counter expires within its TTL: {left}"
    );
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);

    wait_until(BOUND, "the unused fence counter expired", || {
        !exists(&server, &counter)
    });
    let seeded_after_ms = server_time_ms(&server);
    let lease = granted(locker.acquire("k"), "acquire after the counter expired");
    let second = F::fence(&lease);
    assert!(second > first, "{second} must exceed {first}");
    assert!(
        second.get() >= seeded_after_ms * 1000,
        "floored at TIME x 1000: {second} vs {seeded_after_ms} ms"
    );
    assert!(pttl(&server, &counter) > 0);
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);

    let plain: F = connect(&server, config(&ns));
    let lease = granted(plain.acquire("other"), "acquire without a counter TTL");
    assert_eq!(pttl(&server, &fence_name(&ns, "other")), -1, "no expiry");
    F::release(lease).unwrap();
}

/// A multi-key lease writes each key's resource with that key's fence
/// (`fence_of`): accepted while it holds them. Once its lease ran out, a
/// single-key holder of `a` gets a higher fence from `a`'s own counter and
/// writes `a`: the stale multi-key holder's late write of `a` is refused,
/// while its late write of `b` (nobody newer wrote `b`) is still accepted
/// at `b`'s fence. A newer multi-key lease writes `a` with `fence_of("a")`,
/// above the single-key holder's, and is accepted.
fn a_stale_multi_key_holders_write_is_rejected_per_key<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced-multi");
    let multi: F = connect(&server, config(&ns));
    let single: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();

    let old = granted(
        multi.acquire_all_with(
            &["a", "b"],
            AcquireOptions::new()
                .lease(Duration::from_millis(300))
                .wait(Duration::ZERO),
        ),
        "a and b",
    );
    let (old_a, old_b) = (
        F::fence_of(&old, "a").unwrap(),
        F::fence_of(&old, "b").unwrap(),
    );
    store.write(&mut conn, "a", old_a, "a by the set").unwrap();
    store.write(&mut conn, "b", old_b, "b by the set").unwrap();

    // The multi-key holder stalls past its lease.
    wait_until(BOUND, "the multi-key lease expired in redis", || {
        !exists(&server, &lock_name(&ns, "a")) && !exists(&server, &lock_name(&ns, "b"))
    });
    let new = granted(single.acquire_with("a", no_wait()), "a alone");
    let new_a = F::fence(&new);
    assert!(new_a > old_a, "a's own counter: {old_a} then {new_a}");
    store.write(&mut conn, "a", new_a, "a alone").unwrap();

    // The multi-key holder wakes up and writes late, key by key.
    assert_stale(store.write(&mut conn, "a", old_a, "late a"), new_a);
    store
        .write(&mut conn, "b", old_b, "late b, nobody newer")
        .unwrap();
    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
    assert_eq!(F::release_multi(old).unwrap(), ReleaseOutcome::Expired);

    let next = granted(
        multi.acquire_all_with(&["a", "b"], no_wait()),
        "a and b again",
    );
    let next_a = F::fence_of(&next, "a").unwrap();
    assert!(next_a > new_a, "{new_a} then {next_a}");
    store
        .write(&mut conn, "a", next_a, "a by the next set")
        .unwrap();
    assert_stale(store.write(&mut conn, "a", new_a, "late single"), next_a);
    assert_eq!(F::release_multi(next).unwrap(), ReleaseOutcome::Released);
}

/// What the store holds for each of `resources`, values as text.
fn read_all(
    store: &FencedStore,
    server: &RedisServer,
    resources: &[&str],
) -> Vec<Option<(Fence, String)>> {
    resources
        .iter()
        .map(|r| {
            store
                .read(&mut server.conn(), r)
                .unwrap_or_else(|e| panic!("fenced read: {e}"))
                .map(|(fence, value)| (fence, String::from_utf8(value).expect("utf-8 value")))
        })
        .collect()
}

/// `write_all` of a multi-key lease's fences: the current holder's writes
/// are stored whole; once a newer single-key holder of one key wrote, the
/// stalled multi-key holder's `write_all` is refused whole (`StaleAt`
/// naming that write's position and the accepted fence) and its other
/// resources keep their values; the next multi-key lease writes whole
/// again, and a write of a single resource checks against what
/// `write_all` stored.
fn a_stale_multi_key_holders_write_all_is_refused_whole<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("fenced-write-all");
    let multi: F = connect(&server, config(&ns));
    let single: F = connect(&server, config(&ns));
    let store = FencedStore::new(ns.as_str());
    let mut conn = server.conn();
    let keys = ["a", "b", "c"];

    let old = granted(
        multi.acquire_all_with(
            &keys,
            AcquireOptions::new()
                .lease(Duration::from_millis(300))
                .wait(Duration::ZERO),
        ),
        "a, b and c",
    );
    let fences = F::fences(&old);
    let writes: Vec<(&str, Fence, String)> = keys
        .iter()
        .zip(&fences)
        .map(|(k, f)| (*k, *f, format!("{k} by the set")))
        .collect();
    store.write_all(&mut conn, &writes).unwrap();
    let written = read_all(&store, &server, &keys);
    for ((k, f, v), stored) in writes.iter().zip(&written) {
        assert_eq!(stored.as_ref(), Some(&(*f, v.clone())), "{k}");
    }

    // The multi-key holder stalls past its lease; b gets a newer holder.
    wait_until(BOUND, "the multi-key lease expired in redis", || {
        keys.iter().all(|k| !exists(&server, &lock_name(&ns, k)))
    });
    let new = granted(single.acquire_with("b", no_wait()), "b alone");
    let new_b = F::fence(&new);
    store.write(&mut conn, "b", new_b, "b alone").unwrap();

    let late: Vec<(&str, Fence, &str)> = keys
        .iter()
        .zip(&fences)
        .map(|(k, f)| (*k, *f, "late"))
        .collect();
    match store.write_all(&mut conn, &late) {
        Err(WriteError::StaleAt { index, stale }) => {
            assert_eq!(index, 1, "b is the second write");
            assert_eq!(stale, StaleFence { current: new_b });
        }
        other => panic!("expected StaleAt, got {other:?}"),
    }
    let after = read_all(&store, &server, &keys);
    assert_eq!(after[0], written[0], "a untouched");
    assert_eq!(after[1], Some((new_b, "b alone".to_owned())));
    assert_eq!(after[2], written[2], "c untouched");
    assert_eq!(F::release(new).unwrap(), ReleaseOutcome::Released);
    assert_eq!(F::release_multi(old).unwrap(), ReleaseOutcome::Expired);

    let next = granted(multi.acquire_all_with(&keys, no_wait()), "a, b and c again");
    let next_fences = F::fences(&next);
    let writes: Vec<(&str, Fence, &str)> = keys
        .iter()
        .zip(&next_fences)
        .map(|(k, f)| (*k, *f, "by the next set"))
        .collect();
    store.write_all(&mut conn, &writes).unwrap();
    for (stored, f) in read_all(&store, &server, &keys).iter().zip(&next_fences) {
        assert_eq!(stored.as_ref(), Some(&(*f, "by the next set".to_owned())));
    }
    assert_stale(
        store.write(&mut conn, "b", new_b, "late single"),
        next_fences[1],
    );
    assert_eq!(F::release_multi(next).unwrap(), ReleaseOutcome::Released);
}

/// Instantiates every body for one front end.
macro_rules! fenced_suite {
    ($front:ty) => {
        #[test]
        fn a_stale_holders_write_is_rejected_after_a_newer_holder_wrote() {
            super::a_stale_holders_write_is_rejected_after_a_newer_holder_wrote::<$front>();
        }
        #[test]
        fn a_stale_permits_write_is_rejected_per_slot() {
            super::a_stale_permits_write_is_rejected_per_slot::<$front>();
        }
        #[test]
        fn a_stale_cache_fill_is_rejected_after_a_newer_writer_committed() {
            super::a_stale_cache_fill_is_rejected_after_a_newer_writer_committed::<$front>();
        }
        #[test]
        fn an_expired_writers_write_is_rejected_after_a_fill_derived_at_its_fence() {
            super::an_expired_writers_write_is_rejected_after_a_fill_derived_at_its_fence::<$front>(
            );
        }
        #[test]
        fn a_stale_multi_key_holders_write_is_rejected_per_key() {
            super::a_stale_multi_key_holders_write_is_rejected_per_key::<$front>();
        }
        #[test]
        fn a_stale_multi_key_holders_write_all_is_refused_whole() {
            super::a_stale_multi_key_holders_write_all_is_refused_whole::<$front>();
        }
        #[test]
        fn an_expired_fence_counter_is_reseeded_above_every_earlier_fence() {
            super::an_expired_fence_counter_is_reseeded_above_every_earlier_fence::<$front>();
        }
    };
}

/// The blocking front end.
mod blocking {
    fenced_suite!(crate::behaviour::Blocking);
}

/// The async front end.
mod aio {
    fenced_suite!(crate::behaviour::Async);
}

/// Fences compare as numbers, not as text: 10 beats 9 and 9 is stale after
/// 10 (the script compares decimal lengths first).
#[test]
fn fences_compare_as_numbers() {
    let server = RedisServer::start();
    let store = FencedStore::new(namespace("fenced-num"));
    let mut conn = server.conn();
    store
        .write(&mut conn, RESOURCE, Fence::new(9), "nine")
        .unwrap();
    store
        .write(&mut conn, RESOURCE, Fence::new(10), "ten")
        .unwrap();
    assert_stale(
        store.write(&mut conn, RESOURCE, Fence::new(9), "nine again"),
        Fence::new(10),
    );
    let big = Fence::new(u64::MAX);
    store.write(&mut conn, RESOURCE, big, "max").unwrap();
    assert_stale(
        store.write(&mut conn, RESOURCE, Fence::new(u64::MAX - 1), "late"),
        big,
    );
    assert_eq!(read(&store, &server), Some((big, "max".to_owned())));
    // Another resource and another namespace are independent.
    assert!(store.read(&mut conn, "other").unwrap().is_none());
    let other_ns = FencedStore::new(namespace("fenced-num"));
    assert!(other_ns.read(&mut conn, RESOURCE).unwrap().is_none());
}

/// `write_async` on the async front end: the stale holder's late write is
/// rejected, the newer holder's accepted, under smol and under
/// `futures::executor::block_on`, on a multiplexed connection.
#[test]
fn write_async_rejects_a_stale_holder_on_smol_and_futures() {
    let server = RedisServer::start();
    let ns = namespace("fenced-async");
    let store = FencedStore::new(ns.as_str());
    let client = server.client();
    let connect = || async {
        redlease::aio::Locker::connect(server.url(), config(&ns))
            .await
            .unwrap_or_else(|e| panic!("connect: {e:?}"))
    };

    let (old, new) = smol::block_on(async {
        let first = connect().await;
        let second = connect().await;
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let old = first
            .acquire_with("k", leased(Duration::from_millis(300)))
            .await
            .unwrap();
        store
            .write_async(&mut conn, RESOURCE, old.fence(), "first")
            .await
            .unwrap();
        wait_until(BOUND, "the first lease expired in redis", || {
            !exists(&server, &lock_name(&ns, "k"))
        });
        let new = second.acquire_with("k", no_wait()).await.unwrap();
        assert!(new.fence() > old.fence());
        store
            .write_async(&mut conn, RESOURCE, new.fence(), "second")
            .await
            .unwrap();
        assert_stale(
            store
                .write_async(&mut conn, RESOURCE, old.fence(), "late")
                .await,
            new.fence(),
        );
        let fences = (old.fence(), new.fence());
        assert_eq!(old.release().await.unwrap(), ReleaseOutcome::Conflict);
        assert_eq!(new.release().await.unwrap(), ReleaseOutcome::Released);
        fences
    });
    assert_eq!(read(&store, &server), Some((new, "second".to_owned())));

    futures::executor::block_on(async {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        assert_stale(
            store
                .write_async(&mut conn, RESOURCE, old, "late again")
                .await,
            new,
        );
        store
            .write_async(&mut conn, RESOURCE, new, "equal fence")
            .await
            .unwrap();
        // A permit's register is its slot's.
        store
            .write_permit_async(&mut conn, RESOURCE, 3, new, "slot 3")
            .await
            .unwrap();
        assert_stale(
            store
                .write_permit_async(&mut conn, RESOURCE, 3, old, "late slot 3")
                .await,
            new,
        );
        store
            .write_permit_async(&mut conn, RESOURCE, 2, old, "slot 2")
            .await
            .unwrap();
        // A read-derived write is checked like a writer's.
        assert_stale(
            store
                .write_derived_async(&mut conn, RESOURCE, old, "stale fill")
                .await,
            new,
        );
        store
            .write_derived_async(&mut conn, RESOURCE, new, "current fill")
            .await
            .unwrap();
        // A fill at `new` means writer `new`'s lease is over: its write
        // with `new` is stale now; the slot registers are untouched.
        assert_stale(
            store
                .write_async(&mut conn, RESOURCE, new, "late save")
                .await,
            new,
        );
        store
            .write_permit_async(&mut conn, RESOURCE, 3, new, "slot 3 again")
            .await
            .unwrap();
    });
    assert_eq!(
        read(&store, &server),
        Some((new, "current fill".to_owned()))
    );
}

/// `write_all` refuses no writes, more than `MAX_WRITES` and one resource
/// twice with `WriteError::Invalid` naming positions, never a resource,
/// and sends nothing (`INFO commandstats`).
#[test]
fn write_all_input_is_checked_before_anything_is_sent() {
    let server = RedisServer::start();
    let store = FencedStore::new(namespace("fenced-input"));
    let mut conn = server.conn();
    let f = Fence::new(7);
    server.reset_stats();
    let none: [(&str, Fence, &str); 0] = [];
    let too_many: Vec<(String, Fence, &str)> = (0..=redlease::fenced::MAX_WRITES)
        .map(|i| (format!("r{i}"), f, "v"))
        .collect();
    let twice = [("secret-x", f, "1"), ("y", f, "2"), ("secret-x", f, "3")];
    for (result, expected) in [
        (store.write_all(&mut conn, &none), "1 to 64 writes, got 0"),
        (
            store.write_all(&mut conn, &too_many),
            "1 to 64 writes, got 65",
        ),
        (
            store.write_all(&mut conn, &twice),
            "writes 1 and 3 name the same resource",
        ),
    ] {
        match result {
            Err(e @ WriteError::Invalid { .. }) => {
                let shown = format!("{e} {e:?}");
                assert!(shown.contains(expected), "{shown}");
                assert!(!shown.contains("secret"), "{shown}");
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }
    let ran = server.commandstats();
    assert!(
        !ran.keys().any(|c| c.starts_with("eval")),
        "nothing sent: {ran:?}"
    );
}

/// `write_all_async` on a multiplexed connection under smol: written
/// whole, then refused whole at the stale position.
#[test]
fn write_all_async_writes_whole_or_not_at_all() {
    let server = RedisServer::start();
    let ns = namespace("fenced-all-async");
    let store = FencedStore::new(ns.as_str());
    let client = server.client();
    smol::block_on(async {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let (one, two) = (Fence::new(5), Fence::new(9));
        store
            .write_all_async(&mut conn, &[("x", one, "x1"), ("y", one, "y1")])
            .await
            .unwrap();
        store.write_async(&mut conn, "y", two, "y2").await.unwrap();
        match store
            .write_all_async(&mut conn, &[("x", one, "x late"), ("y", one, "y late")])
            .await
        {
            Err(WriteError::StaleAt { index: 1, stale }) => assert_eq!(stale.current, two),
            other => panic!("expected StaleAt at 1, got {other:?}"),
        }
    });
    let stored = read_all(&store, &server, &["x", "y"]);
    assert_eq!(stored[0], Some((Fence::new(5), "x1".to_owned())));
    assert_eq!(stored[1], Some((Fence::new(9), "y2".to_owned())));
}
