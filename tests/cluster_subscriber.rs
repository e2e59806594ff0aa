//! The shared subscriber thread on Redis Cluster, on both front ends and
//! each test on a private 3-primary / 3-replica cluster: its sharded
//! subscriptions (`SSUBSCRIBE <ns>:lock-released:{<sha>}` on the primary
//! owning the key's slot) close a second after contention ends without any
//! further call, a paused primary does not keep the notifications of keys on
//! other primaries from their waiters, and killed subscriber connections
//! are re-established and notify again (the crate docs' "How it works" "Waiting survives faults",
//! "Nothing waits on a lazy front end", §10).
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use behaviour::common::{granted, key_sha, leased, namespace, no_wait, spawn, waiting, BOUND};
use behaviour::front::Front;
use redlease::{Config, Error, ReleaseOutcome};
use support::cluster::{ClusterNode, RedisCluster};
use support::wait_until;

/// Bound for getting the waiters in place while a primary is paused: every
/// fresh cluster connection (and every slot-map read of the subscriber)
/// also tries the paused node and waits out the command timeout there.
const SETUP_BOUND: Duration = Duration::from_secs(30);

/// The subscriber tests run for any front end.
use behaviour::front::ClusterFront;

/// The cluster test config with a lease and a wait that outlast the pauses.
fn config(ns: &str) -> Config {
    behaviour::common::cluster_config(ns)
        .lease(Duration::from_secs(60))
        .wait(Duration::from_secs(40))
}

fn connect<F: ClusterFront>(cluster: &RedisCluster, config: Config) -> Arc<F> {
    behaviour::common::connect_cluster(cluster, config)
}

/// The sharded release channel of `key`: `<ns>:lock-released:{<sha>}`.
fn sharded_channel(ns: &str, key: &str) -> String {
    format!("{ns}:lock-released:{{{}}}", key_sha(key))
}

/// `PUBSUB SHARDNUMSUB channel` on `node` itself: how many of its clients
/// hold a sharded subscription to `channel`.
fn shardnumsub(node: &ClusterNode, channel: &str) -> u64 {
    let (name, count): (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("PUBSUB SHARDNUMSUB on node {}: {e}", node.port()));
    assert_eq!(name, channel, "SHARDNUMSUB answers for the channel asked");
    count
}

/// Like [`wait_until`], but `probe` also describes what it saw; the last
/// description is in the panic message when the bound runs out.
fn wait_showing(bound: Duration, what: &str, mut probe: impl FnMut() -> (bool, String)) {
    let mut last = String::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(bound, what, || {
            let (done, seen) = probe();
            last = seen;
            done
        });
    }));
    if outcome.is_err() {
        panic!("timed out after {bound:?} waiting for: {what}; last seen: {last}");
    }
}

/// Sets `cluster-node-timeout` on every node and restores the old value
/// when dropped (also on unwind).
struct NodeTimeoutGuard<'a> {
    cluster: &'a RedisCluster,
    old: Vec<String>,
}

impl<'a> NodeTimeoutGuard<'a> {
    fn set(cluster: &'a RedisCluster, timeout: Duration) -> Self {
        let millis = timeout.as_millis().to_string();
        let old = cluster
            .all()
            .iter()
            .map(|node| {
                let old = node
                    .server()
                    .config_get("cluster-node-timeout")
                    .unwrap_or_else(|| {
                        panic!("CONFIG GET cluster-node-timeout on {}", node.port())
                    });
                node.server().config_set("cluster-node-timeout", &millis);
                old
            })
            .collect();
        NodeTimeoutGuard { cluster, old }
    }
}

impl Drop for NodeTimeoutGuard<'_> {
    fn drop(&mut self) {
        for (node, old) in self.cluster.all().iter().zip(&self.old) {
            node.server().config_set("cluster-node-timeout", old);
        }
    }
}

/// Contention on a key makes the locker subscribe the key's sharded channel
/// on the key's primary (`stats().subscribed`, `SHARDNUMSUB` 1 there); after
/// the holder released and the waiter acquired and released, with no
/// further call on the locker, the subscription closes by itself
/// (`SHARDNUMSUB` drops to 0 on that primary).
fn on_a_cluster_the_sharded_subscriptions_close_a_second_after_contention_ends_without_further_calls<
    F: ClusterFront,
>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-linger");
    let channel = sharded_channel(&ns, "k");
    let primary = cluster.primary_for_lock("k");
    let holder: Arc<F> = connect(&cluster, config(&ns));
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let held = granted(holder.acquire_with("k", no_wait()), "holder");
    let waiter = {
        let locker = locker.clone();
        spawn("waiter", move || {
            F::release(granted(locker.acquire_with("k", waiting(BOUND)), "waiter"))
                .map_err(|e| e.code())
        })
    };
    wait_until(BOUND, "a waiter, subscribed", || {
        let stats = locker.stats();
        stats.waiters == 1 && stats.subscribed
    });
    assert_eq!(
        shardnumsub(primary, &channel),
        1,
        "the locker subscribed the key's channel on its primary"
    );

    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    assert_eq!(waiter.join_within(BOUND), Ok(ReleaseOutcome::Released));

    // No call on `locker` from here on: the linger (1 s) must end by itself.
    wait_until(
        Duration::from_secs(6),
        "the sharded subscription closed after contention ended",
        || shardnumsub(primary, &channel) == 0,
    );
    assert!(!locker.stats().subscribed, "{:?}", locker.stats());
    locker.shutdown().unwrap();
    holder.shutdown().unwrap();
}

/// With key A's primary paused (SIGSTOP; the node timeout raised to 60 s so
/// that no failover happens meanwhile) and a waiter for A in line, so that
/// the subscriber has to try A's channel on the paused node, a waiter for
/// key B on another primary still subscribes B's channel and is handed B by
/// the release notification (30 s safety polls, 10 s bound).
fn a_waiter_is_still_notified_while_another_primary_is_unreachable<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-unreachable");
    let [a, b, _] = cluster.keys_on_distinct_primaries(|i| format!("key-{i}"));
    let a_primary = cluster.primary_for_lock(&a);
    let b_primary = cluster.primary_for_lock(&b);
    let b_channel = sharded_channel(&ns, &b);
    let holder: Arc<F> = connect(&cluster, config(&ns));
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let held_a = granted(holder.acquire_with(&a, no_wait()), "holder of A");
    let held_b = granted(holder.acquire_with(&b, no_wait()), "holder of B");
    let b_fence = F::fence(&held_b);

    let node_timeout = NodeTimeoutGuard::set(&cluster, Duration::from_secs(60));
    let paused = a_primary.pause_guard();
    // A's waiter: its acquires time out on the paused node and are re-sent;
    // it stays in line, so A's channel is wanted.
    let a_waiter = {
        let (locker, a) = (locker.clone(), a.clone());
        spawn("waiter of A", move || {
            locker
                .acquire_with(&a, waiting(Duration::from_secs(90)))
                .map_err(|e| e.code())
                .and_then(|lease| F::release(lease).map_err(|e| e.code()))
        })
    };
    wait_until(BOUND, "the waiter of A is in line", || {
        locker.stats().waiters == 1
    });
    // B's waiter gets a busy reply, which starts the subscriber.
    let b_granted = Arc::new(AtomicBool::new(false));
    let b_waiter = {
        let (locker, b, b_granted) = (locker.clone(), b.clone(), b_granted.clone());
        spawn("waiter of B", move || {
            let lease = granted(locker.acquire(&b), "waiter of B");
            b_granted.store(true, Ordering::SeqCst);
            let fence = F::fence(&lease);
            assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
            fence
        })
    };
    wait_showing(
        SETUP_BOUND,
        "B's channel subscribed on B's primary, B's head in its long backoff",
        || {
            let stats = locker.stats();
            let subscribers = shardnumsub(b_primary, &b_channel);
            let done = stats.waiters == 2 && stats.busy_replies >= 2 && subscribers == 1;
            (done, format!("SHARDNUMSUB of B {subscribers}, {stats:?}"))
        },
    );
    assert!(a_primary.is_paused(), "A's primary is still paused");
    let notified = locker.stats().notifications;
    assert_eq!(F::release(held_b).unwrap(), ReleaseOutcome::Released);
    wait_showing(BOUND, "B's waiter was handed B", || {
        let stats = locker.stats();
        let subscribers = shardnumsub(b_primary, &b_channel);
        let done = b_granted.load(Ordering::SeqCst);
        (done, format!("SHARDNUMSUB of B {subscribers}, {stats:?}"))
    });
    let fence = b_waiter.join_within(BOUND);
    assert!(fence > b_fence);
    assert!(
        locker.stats().notifications > notified,
        "B was handed over by a notification: {:?}",
        locker.stats()
    );
    assert!(a_primary.is_paused(), "A's primary was paused throughout");

    drop(paused);
    // A's waiter still waits; once A is released it gets the key.
    assert_eq!(F::release(held_a).unwrap(), ReleaseOutcome::Released);
    assert_eq!(
        a_waiter.join_within(Duration::from_secs(20)),
        Ok(ReleaseOutcome::Released)
    );
    drop(node_timeout);
    cluster.wait_healthy();
    locker.shutdown().unwrap();
    holder.shutdown().unwrap();
}

/// The cluster subscriber's connection to a key's primary killed twice
/// (`CLIENT KILL TYPE pubsub` there) is re-established both times
/// (`SHARDNUMSUB` 1 again), and each time a waiter is still handed the key
/// by a release notification (30 s safety polls, 10 s bound). A waiter
/// stays in line throughout, so the subscription is never dropped for lack
/// of contention between the kills.
fn waiters_are_still_notified_after_the_cluster_subscriber_connections_are_killed<
    F: ClusterFront,
>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-kill-pubsub");
    let channel = sharded_channel(&ns, "k");
    let primary = cluster.primary_for_lock("k");
    let holder: Arc<F> = connect(&cluster, config(&ns));
    let waiters: Arc<F> = connect(&cluster, config(&ns));
    let held = granted(holder.acquire_with("k", no_wait()), "holder");
    let start_waiter = |name: &str, queued: usize| {
        let w = waiters.clone();
        let t = spawn(name, move || granted(w.acquire("k"), "waiter"));
        wait_until(BOUND, "waiter queued", || waiters.stats().waiters == queued);
        t
    };
    let first = start_waiter("first", 1);
    let second = start_waiter("second", 2);
    wait_until(BOUND, "subscribed, head in its long backoff", || {
        let stats = waiters.stats();
        stats.subscribed && stats.busy_replies >= 2
    });
    assert_eq!(
        shardnumsub(primary, &channel),
        1,
        "subscribed on the primary"
    );

    // Kills the subscriber connection and waits until the locker subscribed
    // again and its head checked once more.
    let kill_and_resubscribe = |round: u32| {
        let busy = waiters.stats().busy_replies;
        assert_eq!(
            primary.server().client_kill_type("pubsub"),
            1,
            "kill {round}: one subscriber connection on the key's primary"
        );
        wait_until(BOUND, &format!("kill {round}: subscribed again"), || {
            let stats = waiters.stats();
            shardnumsub(primary, &channel) == 1 && stats.subscribed && stats.busy_replies > busy
        });
    };

    // Round 1: another locker's release is notified after the first kill.
    kill_and_resubscribe(1);
    let notified = waiters.stats().notifications;
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let first = first.join_within(BOUND);
    // The release must be notified; the grant may come a moment before the
    // notification is counted, when a wake that came in during the
    // resubscription's recheck made the head retry at once after it.
    wait_until(BOUND, "round 1: the release was notified", || {
        waiters.stats().notifications > notified
    });

    // Round 2: the second waiter waits on the first's lease; after the
    // second kill, the release by its own locker reaches it by notification.
    assert_eq!(waiters.stats().waiters, 1, "the second waiter still waits");
    kill_and_resubscribe(2);
    let notified = waiters.stats().notifications;
    let first_fence = F::fence(&first);
    assert_eq!(F::release(first).unwrap(), ReleaseOutcome::Released);
    let second = second.join_within(BOUND);
    assert!(F::fence(&second) > first_fence);
    wait_until(BOUND, "round 2: the release was notified", || {
        waiters.stats().notifications > notified
    });
    assert_eq!(F::release(second).unwrap(), ReleaseOutcome::Released);
    waiters.shutdown().unwrap();
    holder.shutdown().unwrap();
}

macro_rules! subscriber_suite {
    ($module:ident, $front:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn on_a_cluster_the_sharded_subscriptions_close_a_second_after_contention_ends_without_further_calls(
            ) {
                super::on_a_cluster_the_sharded_subscriptions_close_a_second_after_contention_ends_without_further_calls::<$front>();
            }

            #[test]
            fn a_waiter_is_still_notified_while_another_primary_is_unreachable() {
                super::a_waiter_is_still_notified_while_another_primary_is_unreachable::<$front>();
            }

            #[test]
            fn waiters_are_still_notified_after_the_cluster_subscriber_connections_are_killed() {
                super::waiters_are_still_notified_after_the_cluster_subscriber_connections_are_killed::<$front>();
            }
        }
    };
}

subscriber_suite!(blocking, behaviour::Blocking);
subscriber_suite!(aio, behaviour::Async);
