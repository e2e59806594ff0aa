//! The lease kinds beyond the lock on a real 3-primary / 3-replica Redis
//! Cluster, both front ends. The fenced semaphore (docs/PROTOCOL.md §5.2): every name
//! of one semaphore lives on the primary that owns its hash tag, permits go
//! out up to the count from two lockers, a waiter is woken by the sharded
//! release notification, and semaphores on different primaries work
//! independently. The read-write lease (docs/PROTOCOL.md §5.3): the same for readers
//! and writers. Leader election (docs/PROTOCOL.md §7) likewise, with an
//! observer woken by the sharded notifications. One cluster
//! per test (startup is the expensive part).
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use behaviour::common::{granted, namespace, no_wait, refused, spawn, waiting, BOUND};
use behaviour::election::{next_of, observed};
use behaviour::front::{ClusterFront, Front};
use behaviour::rw_lock::rw_name;
use behaviour::semaphore::{permits_name, slot_fence_name, slot_name};
use redlease::fenced::{FencedStore, WriteError};
use redlease::{Error, ReleaseOutcome};
use support::cluster::{ClusterNode, RedisCluster};
use support::wait_until;

fn exists_on(node: &ClusterNode, name: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(name)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("EXISTS on node {}: {e}", node.port()))
}

/// Grants up to the count from two lockers, each slot's names on the
/// owning primary, `Busy` beyond it; a waiter of the other locker woken by
/// the sharded notification (safety polls 30 s, bound 10 s) gets the freed
/// slot with a larger fence; semaphores whose keys live on three different
/// primaries are granted there.
fn the_semaphore_works_on_a_cluster<F: ClusterFront>(cluster: &RedisCluster) {
    let ns = namespace("cluster-sem");
    let config = behaviour::common::cluster_config(&ns);
    let a: Arc<F> = behaviour::common::connect_cluster(cluster, config.clone());
    let b: Arc<F> = behaviour::common::connect_cluster(cluster, config);

    let mut permits: Vec<_> = (0..3)
        .map(|i| {
            let locker = if i % 2 == 0 { &a } else { &b };
            granted(locker.acquire_permit("pool", 3, no_wait()), "a free permit")
        })
        .collect();
    let slots: BTreeSet<u32> = permits.iter().map(F::slot).collect();
    assert_eq!(slots, BTreeSet::from([0, 1, 2]));
    let owner = cluster.primary_for_lock("pool");
    for slot in 0..3 {
        assert!(
            exists_on(owner, &slot_name(&ns, "pool", slot)),
            "slot {slot}"
        );
        assert!(exists_on(owner, &slot_fence_name(&ns, "pool", slot)));
    }
    assert!(exists_on(owner, &permits_name(&ns, "pool")));
    for locker in [&a, &b] {
        let e = refused(locker.acquire_permit("pool", 3, no_wait()), "a fourth");
        assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    }

    let busy = b.stats().busy_replies;
    let waiter = {
        let b = b.clone();
        spawn("semaphore waiter", move || {
            let permit = granted(b.acquire_permit("pool", 3, waiting(BOUND)), "waiter");
            (F::slot(&permit), F::permit_fence(&permit), permit)
        })
    };
    wait_until(
        BOUND,
        "the waiter waits with a confirmed subscription",
        || {
            let s = b.stats();
            s.waiters == 1 && s.subscribed && s.busy_replies >= busy + 2
        },
    );
    let notified = b.stats().notifications;
    let freed = permits.remove(0);
    let (freed_slot, freed_fence) = (F::slot(&freed), F::permit_fence(&freed));
    assert_eq!(F::release_permit(freed).unwrap(), ReleaseOutcome::Released);
    let (slot, fence, permit) = waiter.join_within(BOUND);
    assert_eq!(slot, freed_slot, "the freed slot");
    assert!(fence > freed_fence, "{fence} after {freed_fence}");
    assert!(
        b.stats().notifications > notified,
        "woken by the notification"
    );
    permits.push(permit);
    for permit in permits {
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
    }

    let keys = cluster.keys_on_distinct_primaries(|i| format!("sem-{i}"));
    let primaries: BTreeSet<u16> = keys
        .iter()
        .map(|k| cluster.primary_for_lock(k).port())
        .collect();
    assert_eq!(primaries.len(), 3, "the semaphores live on three primaries");
    let held: Vec<_> = keys
        .iter()
        .map(|k| {
            granted(
                a.acquire_permit(k, 2, no_wait()),
                "a permit on each primary",
            )
        })
        .collect();
    for (key, permit) in keys.iter().zip(held) {
        let name = slot_name(&ns, key, F::slot(&permit));
        assert!(exists_on(cluster.primary_for_lock(key), &name), "{key}");
        assert_eq!(F::release_permit(permit).unwrap(), ReleaseOutcome::Released);
        assert!(!exists_on(cluster.primary_for_lock(key), &name));
    }
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// Readers on two lockers share, a writer of one of them waits with its
/// intent on the owning primary and is woken by the sharded notification
/// of the last reader's release (safety polls 30 s, bound 10 s); readers
/// on three primaries.
fn the_rw_lock_works_on_a_cluster<F: ClusterFront>(cluster: &RedisCluster) {
    let ns = namespace("cluster-rw");
    let config = behaviour::common::cluster_config(&ns);
    let a: Arc<F> = behaviour::common::connect_cluster(cluster, config.clone());
    let b: Arc<F> = behaviour::common::connect_cluster(cluster, config);

    let r1 = granted(a.read_with("doc", no_wait()), "a reader");
    let r2 = granted(b.read_with("doc", no_wait()), "a reader elsewhere");
    let epoch = F::epoch(&r1);
    assert_eq!(F::epoch(&r2), epoch);
    let owner = cluster.primary_for_lock("doc");
    assert!(exists_on(owner, &rw_name(&ns, "read", "doc")));
    let writer = {
        let b = b.clone();
        spawn("waiting writer", move || {
            granted(b.write_with("doc", waiting(BOUND)), "the writer")
        })
    };
    wait_until(BOUND, "the writer's intent on the owner", || {
        exists_on(owner, &rw_name(&ns, "intent", "doc"))
    });
    wait_until(BOUND, "the writer waits subscribed", || {
        let s = b.stats();
        s.waiters == 1 && s.subscribed
    });
    let e = refused(a.read_with("doc", no_wait()), "a reader behind the writer");
    assert!(matches!(e, Error::Busy { .. }), "{e:?}");
    let notified = b.stats().notifications;
    assert_eq!(F::release_read(r1).unwrap(), ReleaseOutcome::Released);
    assert_eq!(F::release_read(r2).unwrap(), ReleaseOutcome::Released);
    let w = writer.join_within(BOUND);
    assert!(F::write_fence(&w) > epoch);
    assert!(
        b.stats().notifications > notified,
        "woken by the notification"
    );
    assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);

    let keys = cluster.keys_on_distinct_primaries(|i| format!("rw-{i}"));
    for key in &keys {
        let r = granted(a.read_with(key, no_wait()), "a reader on each primary");
        assert!(exists_on(
            cluster.primary_for_lock(key),
            &rw_name(&ns, "read", key)
        ));
        assert_eq!(F::release_read(r).unwrap(), ReleaseOutcome::Released);
        let w = granted(b.write_with(key, no_wait()), "a writer on each primary");
        assert!(exists_on(
            cluster.primary_for_lock(key),
            &rw_name(&ns, "write", key)
        ));
        assert_eq!(F::release_write(w).unwrap(), ReleaseOutcome::Released);
    }
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// An election on a cluster: its names on the primary that owns its hash
/// tag, `leader()` (`EVALSHA_RO`, routed by key) from another locker, a
/// proclaim, a resign waking a candidate of the other locker by the
/// sharded notification (safety polls 30 s, bound 10 s) with a larger
/// term; elections on three primaries.
fn the_election_works_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-elect");
    let config = behaviour::common::cluster_config(&ns);
    let a: Arc<F> = behaviour::common::connect_cluster(&cluster, config.clone());
    let b: Arc<F> = behaviour::common::connect_cluster(&cluster, config.clone());
    let c: Arc<F> = behaviour::common::connect_cluster(&cluster, config);
    let name =
        |kind: &str, key: &str| format!("{ns}:{kind}:{{{}}}", behaviour::common::key_sha(key));
    // An observer on a locker of its own: only the sharded notifications
    // can deliver its changes within the bound (polls and lease are 30 s).
    let rx = observed(&*c, "scheduler");
    assert!(next_of(&rx, "the current state").resync);
    wait_until(BOUND, "the observer's channel", || c.stats().subscribed);
    let next_value = || next_of(&rx, "a change").leader.map(|l| l.value);

    let first = granted(a.campaign("scheduler", b"a", no_wait()), "a leads");
    assert_eq!(next_value(), Some(b"a".to_vec()));
    let owner = cluster.primary_for_lock("scheduler");
    for kind in ["elect", "elect-term", "elect-log"] {
        assert!(exists_on(owner, &name(kind, "scheduler")), "{kind}");
    }
    assert_eq!(F::proclaim(&first, b"a2").unwrap().seq, 1);
    assert_eq!(next_value(), Some(b"a2".to_vec()));
    let leader = b.leader("scheduler").unwrap().expect("a leads");
    assert_eq!(
        (leader.term, leader.value),
        (F::term(&first), b"a2".to_vec())
    );

    let waiter = {
        let b = b.clone();
        spawn("candidate b", move || {
            granted(b.campaign("scheduler", b"b", waiting(BOUND)), "b")
        })
    };
    wait_until(BOUND, "b waits subscribed", || {
        let s = b.stats();
        s.waiters == 1 && s.subscribed && s.busy_replies >= 2
    });
    let notified = b.stats().notifications;
    assert_eq!(F::resign(first).unwrap(), ReleaseOutcome::Released);
    let second = waiter.join_within(BOUND);
    assert!(
        b.stats().notifications > notified,
        "woken by the notification"
    );
    assert_eq!(next_value(), None, "the vacancy");
    assert_eq!(next_value(), Some(b"b".to_vec()));
    let leader = a.leader("scheduler").unwrap().expect("b leads");
    assert_eq!(
        (leader.term, leader.value),
        (F::term(&second), b"b".to_vec())
    );
    assert_eq!(F::resign(second).unwrap(), ReleaseOutcome::Released);

    for key in &cluster.keys_on_distinct_primaries(|i| format!("elect-{i}")) {
        let leadership = granted(a.campaign(key, b"x", no_wait()), "a leader on each primary");
        assert!(exists_on(
            cluster.primary_for_lock(key),
            &name("elect", key)
        ));
        assert_eq!(
            b.leader(key).unwrap().map(|l| l.term),
            Some(F::term(&leadership))
        );
        assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    }
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    c.shutdown().unwrap();
}

/// A multi-key lease of one key works on a cluster (its lock on the
/// owning primary, a single-key acquire of it busy); keys stored in
/// different hash slots are refused with `InvalidKey` before anything is
/// sent, naming positions and no address (docs/PROTOCOL.md §6).
fn the_multi_key_lease_on_a_cluster<F: ClusterFront>(cluster: &RedisCluster) {
    let ns = namespace("cluster-multi");
    let config = behaviour::common::cluster_config(&ns);
    let a: Arc<F> = behaviour::common::connect_cluster(cluster, config.clone());
    let b: Arc<F> = behaviour::common::connect_cluster(cluster, config);
    let lease = granted(a.acquire_all_with(&["solo"], no_wait()), "one key");
    let owner = cluster.primary_for_lock("solo");
    assert!(exists_on(owner, &behaviour::common::lock_name(&ns, "solo")));
    let e = refused(b.acquire_with("solo", no_wait()), "held by the set");
    assert_eq!(e.code(), "LOCK_BUSY");
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);

    let e = refused(a.acquire_all_with(&["x", "y"], no_wait()), "two slots");
    assert!(matches!(e, Error::InvalidKey { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("keys 1 and 2"), "{text}");
    assert!(!text.contains("127.0.0.1") && !text.contains('"'), "{text}");
    let e = refused(
        a.acquire_all_with(&["acct:{7}:in", "acct:{7}:out"], no_wait()),
        "one tag, but tags off",
    );
    assert!(matches!(e, Error::InvalidKey { .. }), "{e:?}");
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// With `key_hash_tags`, keys of one hash tag share a slot: a multi-key
/// lease of them runs on the tag's primary; a multi-key waiter and a
/// single-key waiter of the tag (another locker) are woken by the tag's
/// sharded notification (safety polls 30 s, bound 10 s). A fenced store
/// with `key_hash_tags` writes the lease's resources in one `write_all`
/// (without, Redis Cluster refuses resources of three slots). The namespace's
/// key-names marker is on the primary of its own slot, and a locker
/// without tags is refused there at connect.
fn tagged_keys_share_a_slot_on_a_cluster<F: ClusterFront>(cluster: &RedisCluster) {
    let ns = namespace("cluster-tags");
    let config = behaviour::common::cluster_config(&ns).key_hash_tags(true);
    let a: Arc<F> = behaviour::common::connect_cluster(cluster, config.clone());
    let b: Arc<F> = behaviour::common::connect_cluster(cluster, config.clone());
    let marker = format!("{ns}:key-names");
    let recorded: Option<String> = redis::cmd("GET")
        .arg(&marker)
        .query(&mut cluster.primary_for_key(&marker).conn())
        .unwrap();
    assert_eq!(recorded.as_deref(), Some("tagged"));
    match F::connect_cluster(&cluster.nodes(), config.key_hash_tags(false)) {
        Ok(_) => panic!("a locker without tags connected beside tagged ones"),
        Err(e) => assert!(
            matches!(
                e,
                Error::InvalidConfig {
                    option: "key_hash_tags",
                    ..
                }
            ),
            "{e:?}"
        ),
    }
    let keys = ["acct:{7}:in", "acct:{7}:out", "acct:{7}:fee"];
    let lease = granted(a.acquire_all_with(&keys, no_wait()), "one tag");
    let tag = behaviour::common::key_sha("7");
    let owner = cluster.primary_for_key(&format!("{{{tag}}}"));
    for key in keys {
        let name = format!("{ns}:lock:{{{tag}}}:{}", behaviour::common::key_sha(key));
        assert!(exists_on(owner, &name), "stored under the tag's slot");
    }
    let fences = F::fences(&lease);
    let writes: Vec<(&str, redlease::Fence, &str)> = keys
        .iter()
        .zip(&fences)
        .map(|(k, f)| (*k, *f, "v"))
        .collect();
    let store = FencedStore::new(ns.as_str()).key_hash_tags(true);
    store
        .write_all(&mut cluster.cluster_conn(), &writes)
        .unwrap_or_else(|e| panic!("write_all of one tag: {e:?}"));
    let untagged = FencedStore::new(ns.as_str());
    assert!(
        matches!(
            untagged.write_all(&mut cluster.cluster_conn(), &writes),
            Err(WriteError::Redis(_))
        ),
        "resources in three slots are refused by Redis Cluster"
    );
    let waiter = {
        let b = b.clone();
        spawn("tagged multi waiter", move || {
            let lease = granted(
                b.acquire_all_with(&["acct:{7}:out", "acct:{7}:in"], waiting(BOUND)),
                "the same keys in another order",
            );
            F::fences(&lease)
        })
    };
    let single = {
        let b = b.clone();
        spawn("tagged single waiter", move || {
            let lease = granted(b.acquire_with("acct:{7}:fee", waiting(BOUND)), "one key");
            F::fence(&lease)
        })
    };
    wait_until(BOUND, "both wait", || b.stats().waiters == 2);
    assert_eq!(F::release_multi(lease).unwrap(), ReleaseOutcome::Released);
    let next = waiter.join_within(BOUND);
    assert!(
        next[0] > fences[1] && next[1] > fences[0],
        "fences per key increase"
    );
    assert!(single.join_within(BOUND) > fences[2]);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

fn both_kinds_work_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    the_semaphore_works_on_a_cluster::<F>(&cluster);
    the_rw_lock_works_on_a_cluster::<F>(&cluster);
    the_multi_key_lease_on_a_cluster::<F>(&cluster);
    tagged_keys_share_a_slot_on_a_cluster::<F>(&cluster);
}

mod blocking {
    #[test]
    fn the_semaphore_the_rw_lock_and_multi_key_leases_work_on_a_cluster() {
        super::both_kinds_work_on_a_cluster::<crate::behaviour::Blocking>();
    }

    #[test]
    fn the_election_works_on_a_cluster() {
        super::the_election_works_on_a_cluster::<crate::behaviour::Blocking>();
    }
}

mod aio {
    #[test]
    fn the_semaphore_the_rw_lock_and_multi_key_leases_work_on_a_cluster() {
        super::both_kinds_work_on_a_cluster::<crate::behaviour::Async>();
    }

    #[test]
    fn the_election_works_on_a_cluster() {
        super::the_election_works_on_a_cluster::<crate::behaviour::Async>();
    }
}
