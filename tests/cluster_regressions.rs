//! Regression tests for faults found on Redis Cluster, each on both front
//! ends and each on a private 3-primary / 3-replica cluster (so killing
//! clients, failing over, migrating slots, pausing primaries and changing
//! a primary's config never disturb another test):
//!
//! - pooled connections killed with `CLIENT KILL` failed the next acquire;
//! - a release after a failover did not follow the slot to the new primary;
//! - renew and release did not follow `-ASK` during a slot migration, and
//!   `with_lock(extend(true))` reported the lease lost across it;
//! - shutdown against paused primaries took far longer than
//!   `shutdown_timeout`;
//! - an evicting `maxmemory-policy` on a primary was not reported at connect;
//! - the async locker kept a paused old primary's slots after a failover.
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use behaviour::common::{granted, lock_name, namespace, no_wait, spawn, BOUND};
use behaviour::front::{ClusterFront, Front};
use behaviour::logs;
use redlease::{Config, Error, ReleaseOutcome, RenewOutcome, WithLock};
use support::cluster::{ClusterNode, RedisCluster};
use support::{wait_until, PauseGuard};

/// How a `with_lock(extend(true))` body that watched its lease ended.
#[derive(Debug, PartialEq, Eq)]
enum Watched {
    /// The watched condition (e.g. two renewals seen in Redis) held.
    Renewed,
    /// `lost` fired, with this cause.
    Lost(String),
    /// Neither happened within [`BOUND`].
    Stuck,
}

/// One look at a watched lease: `Some` once the watch is over.
fn watch_step(
    lost: &redlease::Lost,
    renewed: &mut impl FnMut() -> bool,
    started: Instant,
) -> Option<Watched> {
    if lost.is_lost() {
        let cause = lost
            .cause()
            .map(|e| format!("{} ({e:?})", e.code()))
            .unwrap_or_default();
        return Some(Watched::Lost(cause));
    }
    if renewed() {
        return Some(Watched::Renewed);
    }
    (started.elapsed() >= BOUND).then_some(Watched::Stuck)
}

/// A front end that can connect to a cluster.
trait WithLockWatching: ClusterFront {
    /// On a locker of its own: `with_lock(key, extend(true))` whose body
    /// runs `start`, then watches until `renewed` holds or `lost` fires.
    fn with_lock_watching(
        nodes: &[String],
        config: Config,
        key: &str,
        start: impl FnOnce(),
        renewed: impl FnMut() -> bool,
    ) -> Result<Watched, Error>;
}

impl WithLockWatching for behaviour::Blocking {
    fn with_lock_watching(
        nodes: &[String],
        config: Config,
        key: &str,
        start: impl FnOnce(),
        mut renewed: impl FnMut() -> bool,
    ) -> Result<Watched, Error> {
        let locker = <Self as ClusterFront>::connect_cluster(nodes, config)?;
        let result = locker.with_lock(key, WithLock::new().extend(true), |_lease, lost| {
            start();
            let started = Instant::now();
            loop {
                if let Some(end) = watch_step(lost, &mut renewed, started) {
                    return Ok::<_, Error>(end);
                }
                // Returns early when `lost` fires.
                lost.wait_timeout(Duration::from_millis(20));
            }
        });
        let _ = locker.shutdown();
        result
    }
}

impl WithLockWatching for behaviour::Async {
    fn with_lock_watching(
        nodes: &[String],
        config: Config,
        key: &str,
        start: impl FnOnce(),
        mut renewed: impl FnMut() -> bool,
    ) -> Result<Watched, Error> {
        futures::executor::block_on(async {
            let locker =
                redlease::aio::Locker::connect_cluster(nodes.iter().map(String::as_str), config)
                    .await?;
            let result = locker
                .with_lock(key, WithLock::new().extend(true), async |_lease, lost| {
                    start();
                    let started = Instant::now();
                    loop {
                        if let Some(end) = watch_step(lost, &mut renewed, started) {
                            return Ok::<_, Error>(end);
                        }
                        // Lets the renewal, polled beside this body, run.
                        async_io::Timer::after(Duration::from_millis(20)).await;
                    }
                })
                .await;
            let _ = locker.shutdown().await;
            result
        })
    }
}

/// The cluster test config, with a 5 s wait.
fn config(ns: &str) -> Config {
    behaviour::common::cluster_config(ns).wait(Duration::from_secs(5))
}

fn connect<F: ClusterFront>(cluster: &RedisCluster, config: Config) -> Arc<F> {
    behaviour::common::connect_cluster(cluster, config)
}

fn exists_on(node: &ClusterNode, name: &str) -> bool {
    let (exists,): (bool,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("EXISTS")
        .arg(name)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("EXISTS on node {}: {e}", node.port()));
    exists
}

/// `PTTL name` on `node` itself, with `ASKING` first.
fn pttl_on(node: &ClusterNode, name: &str) -> i64 {
    let (pttl,): (i64,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("PTTL")
        .arg(name)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("PTTL on node {}: {e}", node.port()));
    pttl
}

/// Bound for a replica to take over from a dead primary: the node timeout
/// (2 s), the election and the cluster state settling.
const FAILOVER_BOUND: Duration = Duration::from_secs(30);

/// SIGKILLs a node (of a private cluster: it never comes back; dropping the
/// cluster reaps it).
fn kill(node: &ClusterNode) {
    let status = std::process::Command::new("kill")
        .arg("-KILL")
        .arg(node.pid().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -KILL {}", node.pid());
}

/// Whether `replica` is a primary and every node but the dead `old` one
/// reports `cluster_state:ok` (errors count as not yet).
fn promoted(cluster: &RedisCluster, old: &ClusterNode, replica: &ClusterNode) -> bool {
    let probe = Duration::from_secs(1);
    let is_primary = replica.try_conn(probe).is_ok_and(|mut c| {
        redis::cmd("ROLE")
            .query::<redis::Value>(&mut c)
            .is_ok_and(|v| {
                matches!(&v, redis::Value::Array(items)
                if items.first() == Some(&redis::Value::BulkString(b"master".to_vec())))
            })
    });
    is_primary
        && cluster
            .all()
            .iter()
            .filter(|n| n.port() != old.port())
            .all(|n| {
                n.try_conn(probe).is_ok_and(|mut c| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(&mut c)
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                })
            })
}

/// `EXISTS name` on a replica (with `READONLY` first).
fn exists_on_replica(node: &ClusterNode, name: &str) -> bool {
    let (exists,): (bool,) = redis::pipe()
        .cmd("READONLY")
        .ignore()
        .cmd("EXISTS")
        .arg(name)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("EXISTS on replica {}: {e}", node.port()));
    exists
}

/// Whether the source of a migration no longer has `name`: it answers
/// `-ASK` for a key it does not have.
fn gone_from_source(node: &ClusterNode, name: &str) -> bool {
    match redis::cmd("EXISTS")
        .arg(name)
        .query::<bool>(&mut node.conn())
    {
        Ok(exists) => !exists,
        Err(e) if e.code() == Some("ASK") => true,
        Err(e) => panic!("EXISTS on node {}: {e}", node.port()),
    }
}

/// Sets a config parameter on one node and restores its old value when
/// dropped (also on unwind).
struct ConfigGuard<'a> {
    node: &'a ClusterNode,
    key: &'static str,
    old: String,
}

impl<'a> ConfigGuard<'a> {
    fn set(node: &'a ClusterNode, key: &'static str, value: &str) -> Self {
        let old = node
            .server()
            .config_get(key)
            .unwrap_or_else(|| panic!("CONFIG GET {key} on node {}", node.port()));
        node.server().config_set(key, value);
        ConfigGuard { node, key, old }
    }
}

impl Drop for ConfigGuard<'_> {
    fn drop(&mut self) {
        self.node.server().config_set(self.key, &self.old);
    }
}

/// A slot half-way through a migration: the target is `IMPORTING` it, the
/// source `MIGRATING` it and some of its keys already moved, so the source
/// answers `-ASK` for them.
struct Migration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: &'a ClusterNode,
    target: &'a ClusterNode,
}

impl<'a> Migration<'a> {
    /// Starts migrating `name`'s slot to another primary and moves `name`
    /// there; checks that its old primary now answers `-ASK` for it.
    fn begin(cluster: &'a RedisCluster, name: &str) -> Self {
        let slot = cluster.slot_of(name);
        let source = cluster.primary_for_slot(slot);
        let target = cluster
            .primaries()
            .into_iter()
            .find(|p| p.port() != source.port())
            .expect("another primary");
        target.query(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(source.id()),
        );
        source.query(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(target.id()),
        );
        let migration = Migration {
            cluster,
            slot,
            source,
            target,
        };
        migration.migrate(&[name.to_owned()]);
        let asked = redis::cmd("PTTL")
            .arg(name)
            .query::<i64>(&mut source.conn())
            .expect_err("the source no longer has the key");
        assert_eq!(asked.code(), Some("ASK"), "{asked:?}");
        assert!(exists_on(target, name), "the key moved to the target");
        migration
    }

    fn migrate(&self, names: &[String]) {
        let reply = self.source.query(
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.target.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(names),
        );
        assert_eq!(reply, redis::Value::Okay, "MIGRATE {names:?}");
    }

    /// Moves the slot's remaining keys, hands the slot to the target on
    /// every primary and waits until the cluster is healthy again.
    fn finish(self) {
        loop {
            let names: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(100)
                .query(&mut self.source.conn())
                .expect("CLUSTER GETKEYSINSLOT");
            if names.is_empty() {
                break;
            }
            self.migrate(&names);
        }
        let mut primaries = self.cluster.primaries();
        // The target first, then the source: the order redis-cli uses.
        primaries.sort_by_key(|p| {
            (
                p.port() != self.target.port(),
                p.port() != self.source.port(),
            )
        });
        for primary in primaries {
            primary.query(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(self.slot)
                    .arg("NODE")
                    .arg(self.target.id()),
            );
        }
        self.cluster.wait_healthy();
    }
}

/// Fault: after `CLIENT KILL TYPE normal` on the primaries closed the
/// locker's pooled connections while idle, the next acquire failed
/// (`OUTCOME_UNKNOWN` on the blocking locker) instead of reconnecting.
fn an_acquire_after_client_kill_on_the_primaries_succeeds<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("regress-kill");
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let keys = cluster.keys_on_distinct_primaries(|i| format!("key-{i}"));
    for key in &keys {
        let lease = granted(locker.acquire_with(key, no_wait()), "warm-up acquire");
        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    }
    for primary in cluster.primaries() {
        // A fresh connection each; Redis's SKIPME spares only it.
        let killed = primary.server().client_kill_type("normal");
        assert!(killed >= 1, "node {}: killed {killed}", primary.port());
    }
    for key in &keys {
        let lease = granted(
            locker.acquire_with(key, no_wait()),
            "acquire after CLIENT KILL",
        );
        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    }
    locker.shutdown().unwrap();
}

/// Fault: a lease held while its key's primary died (SIGKILL) and its
/// replica took over could not be released afterwards (`OUTCOME_UNKNOWN`
/// on the blocking locker, from the pooled connection to the dead node; the
/// lock stayed until its TTL) although the new primary serves the slot.
fn a_holders_release_after_a_failover_reports_released<F: ClusterFront>() {
    // Private: one node is killed and never comes back.
    let cluster = RedisCluster::start();
    let ns = namespace("regress-failover");
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let held = granted(locker.acquire_with("job", no_wait()), "holder");
    let name = lock_name(&ns, "job");
    let primary = cluster.primary_for_lock("job");
    let replica = cluster.replica_of(primary);
    wait_until(BOUND, "the lock reached the replica", || {
        exists_on_replica(replica, &name)
    });
    kill(primary);
    // The replica takes over after the node timeout (2 s) and an election.
    wait_until(FAILOVER_BOUND, "the replica took over the slots", || {
        promoted(&cluster, primary, replica)
    });
    let outcome = F::release(held)
        .unwrap_or_else(|e| panic!("release after the failover: {} ({e:?})", e.code()));
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert!(
        !exists_on(replica, &name),
        "the lock is gone from the new primary"
    );
    locker.shutdown().unwrap();
}

/// Fault: while the lock key's slot was being migrated (its old primary
/// answering `-ASK`), renew and release failed (`PROVIDER_FAILED`,
/// `Server(Ask)` on the blocking locker) instead of following the redirect,
/// and `with_lock(extend(true))` reported its lease lost.
fn renew_and_release_follow_ask_during_a_slot_migration<F: WithLockWatching>() {
    let cluster = RedisCluster::start();
    let ns = namespace("regress-ask");
    let lease_time = Duration::from_secs(2);
    let config = config(&ns).lease(lease_time);
    let locker: Arc<F> = connect(&cluster, config.clone());

    // A lease's own renew and release.
    let name = lock_name(&ns, "job");
    let lease = granted(locker.acquire_with("job", no_wait()), "holder");
    let migration = Migration::begin(&cluster, &name);
    let renewed = F::renew(&lease)
        .unwrap_or_else(|e| panic!("renew during the migration: {} ({e:?})", e.code()));
    assert_eq!(renewed, RenewOutcome::Renewed);
    assert!(
        pttl_on(migration.target, &name) > 0,
        "the renewed lock is on the target"
    );
    let released = F::release(lease)
        .unwrap_or_else(|e| panic!("release during the migration: {} ({e:?})", e.code()));
    assert_eq!(released, ReleaseOutcome::Released);
    assert!(
        !exists_on(migration.target, &name),
        "released on the target"
    );
    assert!(
        gone_from_source(migration.source, &name),
        "and not on the source"
    );
    migration.finish();

    // with_lock(extend(true)) renewing across a migration started inside it:
    // done once Redis shows two renewals (the TTL jumping back up).
    let name = lock_name(&ns, "report");
    let migration = std::cell::OnceCell::new();
    let mut last_pttl = i64::MAX;
    let mut renewals = 0;
    let watched = F::with_lock_watching(
        &cluster.nodes(),
        config,
        "report",
        || {
            let _ = migration.set(Migration::begin(&cluster, &name));
        },
        || {
            let target = migration.get().expect("migration begun").target;
            let pttl = pttl_on(target, &name);
            if pttl > last_pttl.saturating_add(200) {
                renewals += 1;
            }
            last_pttl = pttl;
            renewals >= 2
        },
    )
    .unwrap_or_else(|e| panic!("with_lock across a migration: {} ({e:?})", e.code()));
    assert_eq!(watched, Watched::Renewed, "with_lock across the migration");
    let migration = migration.into_inner().expect("migration begun");
    assert!(
        !exists_on(migration.target, &name),
        "with_lock released its lease on the target"
    );
    assert!(gone_from_source(migration.source, &name));
    migration.finish();
    locker.shutdown().unwrap();
}

/// Fault: with every primary paused, shutdown waited for each release's
/// `command_timeout` in turn (about 30 s on the blocking locker) instead of
/// returning `CLEANUP_TIMEOUT` once `shutdown_timeout` had passed.
fn cluster_shutdown_is_bounded_by_shutdown_timeout<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("regress-shutdown");
    let locker: Arc<F> = connect(
        &cluster,
        config(&ns)
            .command_timeout(Duration::from_secs(3))
            .shutdown_timeout(Duration::from_millis(300)),
    );
    let keys = cluster.keys_on_distinct_primaries(|i| format!("key-{i}"));
    let leases: Vec<_> = keys
        .iter()
        .map(|k| granted(locker.acquire_with(k, no_wait()), "acquire on each primary"))
        .collect();
    let primaries: Vec<&ClusterNode> = keys.iter().map(|k| cluster.primary_for_lock(k)).collect();
    {
        // No replica can be elected while every primary is paused, and the
        // guards resume them even if the join below fails.
        let _paused: Vec<PauseGuard<'_>> = primaries.iter().map(|p| p.pause_guard()).collect();
        let shutdown = {
            let locker = locker.clone();
            spawn("shutdown", move || locker.shutdown().map_err(|e| e.code()))
        };
        let result = shutdown.join_within(Duration::from_secs(5));
        assert_eq!(result, Err("CLEANUP_TIMEOUT"));
    }
    drop(leases);
    cluster.wait_healthy();
}

/// Fault: the cluster lockers skipped the `maxmemory-policy` check, so an
/// evicting policy on a primary (which may evict locks) was not reported
/// with `REDIS_EVICTION_UNSAFE` at connect.
fn an_evicting_policy_on_any_primary_is_reported_at_connect<F: ClusterFront>() {
    // Under `cargo test` both front ends' bodies share the process logger:
    // one at a time, so that one's records never land in the other's check.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cluster = RedisCluster::start();
    let ns = namespace("regress-evict");
    // Not the node listed first, which a check of the seed node alone
    // would ask.
    let primaries = cluster.primaries();
    let evicting = *primaries.last().expect("three primaries");
    assert_ne!(evicting.port(), cluster.all()[0].port());
    {
        let _policy = ConfigGuard::set(evicting, "maxmemory-policy", "allkeys-lru");
        let logs = logs::capture();
        let locker: Arc<F> = connect(&cluster, config(&ns));
        assert!(
            logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
            "records: {:?}",
            logs.records()
        );
        locker.shutdown().unwrap();
    }
    let logs = logs::capture();
    let locker: Arc<F> = connect(&cluster, config(&ns));
    assert!(
        !logs.contains(log::Level::Error, "REDIS_EVICTION_UNSAFE"),
        "noeviction everywhere: records: {:?}",
        logs.records()
    );
    locker.shutdown().unwrap();
}

/// Fault (async front end): after a failover away from a primary that
/// does not answer (paused: a partition, not a refused connection), the
/// async locker kept sending the key's commands to the old node: its
/// shared cluster connection was kept after a timeout, and the redis crate
/// refreshes its slot map only on a redirect, which a silent node never
/// sends. A waiting acquire timed out attempt after attempt and ended with
/// `OUTCOME_UNKNOWN` when its wait ran out, although the new primary
/// served the slot. (The blocking locker reached it: a timed-out
/// connection is not reused.) Found by `tests/cluster_election.rs`'s
/// forced-failover row.
fn an_acquire_after_a_failover_away_from_a_paused_primary_reaches_the_new_one<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("regress-paused-failover");
    let locker: Arc<F> = connect(&cluster, config(&ns));
    // The slot map and the script cached: the locker has used the node.
    let warm = granted(locker.acquire_with("job", no_wait()), "warm-up");
    assert_eq!(F::release(warm).unwrap(), ReleaseOutcome::Released);
    let primary = cluster.primary_for_lock("job");
    let replica = cluster.replica_of(primary);
    let paused = primary.pause_guard();
    cluster.failover_with(replica, support::cluster::FailoverMode::Force);
    let lease = granted(
        locker.acquire_with("job", behaviour::common::waiting(BOUND)),
        "an acquire on the new primary",
    );
    assert!(exists_on(replica, &lock_name(&ns, "job")));
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    drop(paused);
    cluster.wait_healthy();
    locker.shutdown().unwrap();
}

macro_rules! regressions {
    ($module:ident, $front:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn an_acquire_after_client_kill_on_the_primaries_succeeds() {
                super::an_acquire_after_client_kill_on_the_primaries_succeeds::<$front>();
            }

            #[test]
            fn a_holders_release_after_a_failover_reports_released() {
                super::a_holders_release_after_a_failover_reports_released::<$front>();
            }

            #[test]
            fn renew_and_release_follow_ask_during_a_slot_migration() {
                super::renew_and_release_follow_ask_during_a_slot_migration::<$front>();
            }

            #[test]
            fn cluster_shutdown_is_bounded_by_shutdown_timeout() {
                super::cluster_shutdown_is_bounded_by_shutdown_timeout::<$front>();
            }

            #[test]
            fn an_acquire_after_a_failover_away_from_a_paused_primary_reaches_the_new_one() {
                super::an_acquire_after_a_failover_away_from_a_paused_primary_reaches_the_new_one::<
                    $front,
                >();
            }

            #[test]
            fn an_evicting_policy_on_any_primary_is_reported_at_connect() {
                super::an_evicting_policy_on_any_primary_is_reported_at_connect::<$front>();
            }
        }
    };
}

regressions!(blocking, behaviour::Blocking);
regressions!(aio, behaviour::Async);
