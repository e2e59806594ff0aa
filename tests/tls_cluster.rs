//! TLS on Redis Cluster (the crate docs' "Deployments", feature `tls-rustls`), both front ends:
//! `connect_cluster` with `rediss://` node URLs reaches every primary over
//! TLS, and a waiter on each primary's keys is woken by the sharded release
//! notification, so the per-node notification connections keep TLS too.
//!
//! The nodes' CA is trusted as a platform root through `SSL_CERT_FILE`
//! (read by `rustls-native-certs` at each connect); one cluster, hence one
//! CA, serves the whole binary.
#![cfg(feature = "tls-rustls")]
#![allow(clippy::disallowed_methods)]
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::{Arc, OnceLock};

use behaviour::common::{cluster_config, granted, namespace, spawn, waiting, BOUND};
use behaviour::front::{ClusterFront, Front};
use redlease::ReleaseOutcome;
use support::cluster::RedisCluster;
use support::wait_until;

fn tls_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    let cluster = CLUSTER.get_or_init(RedisCluster::start_tls);
    // Every test sets the same file: the one CA of the one cluster.
    std::env::set_var(
        "SSL_CERT_FILE",
        cluster.all()[0].server().tls_material().ca_file(),
    );
    cluster
}

fn leases_and_notifications_over_tls_on_a_cluster<F: ClusterFront>() {
    let cluster = tls_cluster();
    let ns = namespace("tls-cluster");
    let nodes = cluster.tls_nodes();
    let connect = || {
        Arc::new(
            F::connect_cluster(&nodes, cluster_config(&ns))
                .unwrap_or_else(|e| panic!("connect over TLS: {} ({e:?})", e.code())),
        )
    };
    let (holder, waiters): (Arc<F>, Arc<F>) = (connect(), connect());
    let keys = cluster.keys_on_distinct_primaries(|i| format!("tls-{i}"));
    for (i, key) in keys.iter().enumerate() {
        let held = granted(holder.acquire(key), "holder");
        let held_fence = F::fence(&held);
        let waiter = {
            let (waiters, key) = (waiters.clone(), key.clone());
            spawn("waiter", move || {
                let lease = granted(waiters.acquire_with(&key, waiting(BOUND)), "waiter");
                (F::fence(&lease), F::release(lease))
            })
        };
        let busy_before = waiters.stats().busy_replies;
        wait_until(
            BOUND,
            "the waiter waits with a confirmed subscription",
            || {
                let stats = waiters.stats();
                stats.waiters == 1 && stats.subscribed && stats.busy_replies >= busy_before + 2
            },
        );
        assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
        let (fence, released) = waiter.join_within(BOUND);
        assert!(fence > held_fence);
        assert_eq!(released.unwrap(), ReleaseOutcome::Released);
        assert!(
            waiters.stats().notifications > i as u64,
            "key {i}: woken by a notification: {:?}",
            waiters.stats()
        );
    }
    holder.shutdown().unwrap();
    waiters.shutdown().unwrap();
}

#[test]
fn blocking_leases_and_notifications_over_tls_on_a_cluster() {
    leases_and_notifications_over_tls_on_a_cluster::<behaviour::Blocking>();
}

#[test]
fn aio_leases_and_notifications_over_tls_on_a_cluster() {
    leases_and_notifications_over_tls_on_a_cluster::<behaviour::front::Async>();
}
