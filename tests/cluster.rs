//! Both lockers on a real 3-primary / 3-replica Redis Cluster: the core
//! behaviours, keys on every primary, failover while waiters wait, a paused
//! primary, and the redis crate's cluster traps (timed-out writes re-sent,
//! redirects not followed, no re-subscription after a slot moved).
#![allow(clippy::disallowed_methods)]
// The standalone suite's macro is not used here, only its helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use behaviour::common::{granted, lock_name, namespace, no_wait, refused, spawn, waiting, BOUND};
use behaviour::front::Front;
use redlease::{Config, Error, ReleaseOutcome};
use support::cluster::{ClusterNode, FailoverMode, RedisCluster};
use support::wait_until;

/// The cluster tests run for any front end.
use behaviour::front::ClusterFront;

fn config(ns: &str) -> Config {
    behaviour::common::cluster_config(ns)
}

fn connect<F: ClusterFront>(cluster: &RedisCluster, config: Config) -> Arc<F> {
    behaviour::common::connect_cluster(cluster, config)
}

/// Waits until the locker has a waiter whose subscription is confirmed.
fn wait_until_waiting<F: Front>(locker: &F, waiters: usize) {
    wait_until(
        BOUND,
        "the waiters wait with a confirmed subscription",
        || {
            let stats = locker.stats();
            stats.waiters == waiters && stats.subscribed && stats.busy_replies >= 2
        },
    );
}

fn core_behaviours_work_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-core");
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let other: Arc<F> = connect(&cluster, config(&ns));

    // Fences increase and a held key is busy for another locker.
    let first = granted(locker.acquire("job"), "first acquire");
    let busy = refused(other.acquire_with("job", no_wait()), "busy");
    assert_eq!(busy.code(), "LOCK_BUSY");
    assert!(busy.holder_remaining().is_some());
    let first_fence = F::fence(&first);

    // A waiter of the other locker is woken by the sharded notification.
    let waiter = {
        let other = other.clone();
        spawn("waiter", move || {
            let lease = granted(other.acquire_with("job", waiting(BOUND)), "waiter");
            let fence = F::fence(&lease);
            assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
            fence
        })
    };
    wait_until_waiting(&*other, 1);
    assert_eq!(F::release(first).unwrap(), ReleaseOutcome::Released);
    let second_fence = waiter.join_within(BOUND);
    assert!(second_fence > first_fence);
    assert!(other.stats().notifications >= 1);

    // FIFO inside one locker.
    let holder = granted(other.acquire("fifo"), "fifo holder");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let (for_thread, order) = (locker.clone(), order.clone());
        threads.push(spawn("fifo waiter", move || {
            let lease = granted(for_thread.acquire_with("fifo", waiting(BOUND)), "fifo");
            order.lock().unwrap().push(i);
            F::release(lease).unwrap();
        }));
        wait_until(BOUND, "the waiter joined", || {
            locker.stats().waiters == i + 1
        });
    }
    F::release(holder).unwrap();
    for t in threads {
        t.join_within(BOUND);
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);

    // Release outcomes: expired and conflict.
    let short = granted(
        locker.acquire_with(
            "short",
            redlease::AcquireOptions::new().lease(Duration::from_millis(50)),
        ),
        "short lease",
    );
    let mut conn = cluster.cluster_conn();
    let name = lock_name(&ns, "short");
    wait_until(BOUND, "the short lease expired", || {
        !redis::cmd("EXISTS")
            .arg(&name)
            .query::<bool>(&mut conn)
            .unwrap()
    });
    assert_eq!(F::release(short).unwrap(), ReleaseOutcome::Expired);

    // Shutdown releases what the locker still holds.
    let kept = granted(locker.acquire("kept"), "kept");
    locker.shutdown().unwrap();
    let kept_name = lock_name(&ns, "kept");
    assert!(!redis::cmd("EXISTS")
        .arg(&kept_name)
        .query::<bool>(&mut conn)
        .unwrap());
    assert_eq!(F::release(kept).unwrap_err().code(), "SHUTTING_DOWN");
    other.shutdown().unwrap();
}

fn keys_on_all_three_primaries_are_locked_independently<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-spread");
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let keys = cluster.keys_on_distinct_primaries(|i| format!("key-{i}"));
    let primaries: std::collections::HashSet<u16> = keys
        .iter()
        .map(|k| cluster.primary_for_lock(k).port())
        .collect();
    assert_eq!(primaries.len(), 3, "the keys live on three primaries");
    let leases: Vec<_> = keys
        .iter()
        .map(|k| granted(locker.acquire_with(k, no_wait()), "acquire on each primary"))
        .collect();
    for (key, lease) in keys.iter().zip(leases) {
        let owner = cluster.primary_for_lock(key);
        let name = lock_name(&ns, key);
        let exists: bool = redis::cmd("EXISTS")
            .arg(&name)
            .query(&mut owner.conn())
            .unwrap();
        assert!(exists, "the lock lives on its slot's primary");
        assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
    }
    locker.shutdown().unwrap();
}

fn failover_while_a_lease_is_held_and_waiters_wait<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-failover");
    let holder_locker: Arc<F> = connect(&cluster, config(&ns));
    let locker: Arc<F> = connect(&cluster, config(&ns));
    let held = granted(holder_locker.acquire("job"), "holder");
    let before = F::fence(&held);
    let waiter = {
        let locker = locker.clone();
        spawn("waiter", move || {
            let lease = granted(locker.acquire_with("job", waiting(BOUND * 2)), "waiter");
            let fence = F::fence(&lease);
            F::release(lease).unwrap();
            fence
        })
    };
    wait_until_waiting(&*locker, 1);

    let primary = cluster.primary_for_lock("job");
    let replica = cluster.replica_of(primary);
    cluster.failover(replica);
    assert_eq!(cluster.primary_for_lock("job").port(), replica.port());

    // The holder's release goes to the new primary; with 30 s safety polls
    // the waiter can only get the lock in time through a notification, so
    // its subscription must have moved to the new owner.
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let after = waiter.join_within(BOUND * 2);
    assert!(after > before, "fences keep increasing across the failover");
    let again = granted(locker.acquire_with("job", no_wait()), "after the failover");
    assert!(F::fence(&again) > after);
    F::release(again).unwrap();
    locker.shutdown().unwrap();
    holder_locker.shutdown().unwrap();
}

/// Lets `primary` be paused for longer than the node timeout while its
/// slots stay where they are and the other primaries go on serving theirs
/// (no failover to its replica; `cluster-require-full-coverage no`), and
/// back to the defaults with `on == false`. Without it, a pause stretched
/// past the node timeout (a loaded machine) fails the node and takes the
/// whole cluster down (`CLUSTERDOWN` on every key), which Redis decides,
/// not the locker.
fn keep_slots_while_paused(cluster: &RedisCluster, primary: &ClusterNode, on: bool) {
    let config_set = |name: &str, value: &str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg(name).arg(value);
        cmd
    };
    let (no_failover, full_coverage) = if on { ("yes", "no") } else { ("no", "yes") };
    cluster
        .replica_of(primary)
        .query(&config_set("cluster-replica-no-failover", no_failover));
    for node in cluster.all() {
        node.query(&config_set("cluster-require-full-coverage", full_coverage));
    }
}

/// Runs `body` with a locker (command timeout 300 ms) and keys on three
/// primaries while the first key's primary is paused (its slots kept in
/// place, [`keep_slots_while_paused`]). Returns how many scripts the
/// paused primary ran once it resumed: what was sent to it while paused.
fn with_a_paused_primary<F: ClusterFront>(
    ns: &str,
    body: impl FnOnce(&Arc<F>, &[String; 3]),
) -> u64 {
    let cluster = RedisCluster::start();
    let locker: Arc<F> = connect(
        &cluster,
        config(&namespace(ns)).command_timeout(Duration::from_millis(300)),
    );
    let keys = cluster.keys_on_distinct_primaries(|i| format!("key-{i}"));
    let paused = cluster.primary_for_lock(&keys[0]);
    keep_slots_while_paused(&cluster, paused, true);
    paused.server().reset_stats();
    {
        let _guard = paused.pause_guard();
        body(&locker, &keys);
    }
    keep_slots_while_paused(&cluster, paused, false);
    cluster.wait_healthy();
    let calls = paused.server().commandstats();
    let scripts = ["evalsha", "eval"]
        .iter()
        .filter_map(|c| calls.get(*c))
        .sum();
    locker.shutdown().unwrap();
    scripts
}

/// The timed-out attempt leaves its token to release. The operations on
/// the other primaries' keys try that release once (it goes unanswered),
/// then leave it for a back-off that starts at the command timeout
/// (`driver::quiet`), so they are not each held up to a command timeout
/// by it (before: all 40 carried it).
fn a_paused_primary_fails_only_the_keys_in_its_slots<F: ClusterFront>() {
    let scripts = with_a_paused_primary::<F>("cluster-paused", |locker, keys| {
        let e = refused(locker.acquire_with(&keys[0], no_wait()), "paused primary");
        assert_eq!(e.code(), "OUTCOME_UNKNOWN", "{e:?}");
        for round in 0..10 {
            for key in &keys[1..] {
                let lease = granted(
                    locker.acquire_with(key, no_wait()),
                    &format!("round {round}: other primaries"),
                );
                F::release(lease).unwrap();
            }
        }
    });
    // The attempt, the first try of its release, and a few tries more
    // if the rounds outlast the back-offs (300 ms, then 600 ms, ...).
    assert!(
        (2..=8).contains(&scripts),
        "{scripts} scripts sent to the paused primary"
    );
}

/// Attempts that keep trying a key of a paused primary (each times out and
/// leaves a token for the next operation to sweep) fail only that key:
/// cycles on the keys of the other primaries, on the same locker and at
/// the same time, all succeed.
fn attempts_on_a_paused_primary_do_not_stall_the_other_primaries<F: ClusterFront>() {
    let _ = with_a_paused_primary::<F>("cluster-paused-attempts", |locker, keys| {
        let stop = Arc::new(AtomicBool::new(false));
        let attempts: Vec<_> = (0..2)
            .map(|i| {
                let (locker, key, stop) = (locker.clone(), keys[0].clone(), stop.clone());
                spawn(&format!("attempts on the paused primary {i}"), move || {
                    let mut granted = 0;
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(lease) = locker.acquire_with(&key, no_wait()) {
                            granted += 1;
                            let _ = F::release(lease);
                        }
                    }
                    granted
                })
            })
            .collect();
        // Long enough for several attempts to time out and be swept.
        let until = Instant::now() + Duration::from_secs(2);
        let cycles: Vec<_> = keys[1..]
            .iter()
            .map(|key| {
                let (locker, key) = (locker.clone(), key.clone());
                spawn(&format!("cycles on {key}"), move || {
                    let mut rounds = 0;
                    while Instant::now() < until {
                        let lease = locker.acquire_with(&key, no_wait());
                        let lease = granted(lease, &format!("{key}, round {rounds}"));
                        F::release(lease)
                            .unwrap_or_else(|e| panic!("{key}, round {rounds}: release: {e:?}"));
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        for cycle in cycles {
            assert!(cycle.join_within(BOUND) > 0);
        }
        stop.store(true, Ordering::SeqCst);
        for attempt in attempts {
            assert_eq!(attempt.join_within(BOUND), 0, "a key of the paused primary");
        }
    });
}

/// The hand-over on a cluster: three lockers register for a key in a known
/// order (the queue lives in the key's slot, on its primary) and the
/// releases hand the key over in that order, through the key's sharded
/// notifications (safety polls are 30 s, beyond the bound).
fn grants_follow_registration_order_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-handover");
    let holder: Arc<F> = connect(&cluster, config(&ns));
    let held = granted(holder.acquire("job"), "holder");
    let queue = format!("{ns}:lock-queue:{{{}}}", behaviour::common::key_sha("job"));
    let queued = || -> usize {
        redis::cmd("LLEN")
            .arg(&queue)
            .query(&mut cluster.cluster_conn())
            .unwrap_or_else(|e| panic!("LLEN on the cluster: {e}"))
    };
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..3 {
        let locker: Arc<F> = connect(&cluster, config(&ns));
        let order = order.clone();
        threads.push(spawn(&format!("locker-{i}"), move || {
            let lease = granted(
                locker.acquire_with("job", waiting(BOUND)),
                "a registered waiter",
            );
            order.lock().unwrap().push(i);
            F::release(lease).unwrap()
        }));
        wait_until(BOUND, &format!("locker {i} registered"), || {
            queued() == i + 1
        });
    }
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    for t in threads {
        assert_eq!(t.join_within(BOUND), ReleaseOutcome::Released);
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    // Each served locker's registration lingered a moment after its
    // release (docs/PROTOCOL.md §4.4); its subscriber then took it out on
    // the connection of the key's node (a lapsed entry would stay listed).
    wait_until(BOUND, "every registration consumed", || queued() == 0);
}

/// A lease lost on a cluster (deleted, as a failover to a replica that
/// missed it would) while its locker's registration lingers: the next
/// attempt grants the key to that registration, whose claim window is
/// 30 s. Its locker's cluster subscriber passes the grant on at once, on
/// its connection to the key's node (docs/PROTOCOL.md §4.4), so the waiter
/// behind gets the key within its 10 s wait.
fn a_grant_to_a_lingering_registration_is_passed_on_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-pass-on");
    let sha = behaviour::common::key_sha("job");
    let queue = format!("{ns}:lock-queue:{{{sha}}}");
    let entries = || -> Vec<String> {
        redis::cmd("LRANGE")
            .arg(&queue)
            .arg(0)
            .arg(-1)
            .query(&mut cluster.cluster_conn())
            .unwrap_or_else(|e| panic!("LRANGE on the cluster: {e}"))
    };
    let holder: Arc<F> = connect(&cluster, config(&ns));
    let lingering: Arc<F> = connect(
        &cluster,
        config(&ns)
            .lease(Duration::from_secs(60))
            .claim_window(Duration::from_secs(30)),
    );
    let held = granted(holder.acquire("job"), "holder");
    let first = {
        let lingering = lingering.clone();
        spawn("registered waiter", move || {
            granted(lingering.acquire("job"), "a registered waiter")
        })
    };
    wait_until(BOUND, "the waiter registered", || entries().len() == 1);
    assert_eq!(F::release(held).unwrap(), ReleaseOutcome::Released);
    let _lost = first.join_within(BOUND);
    let reg = entries();
    assert_eq!(reg.len(), 1, "its registration stayed queued");
    let reg_key = format!(
        "{ns}:lock-reg:{{{sha}}}:{}",
        reg[0].split('|').next().unwrap_or_default()
    );
    let _: () = redis::cmd("DEL")
        .arg(lock_name(&ns, "job"))
        .query(&mut cluster.cluster_conn())
        .unwrap_or_else(|e| panic!("DEL on the cluster: {e}"));

    // Safety polls every 100 ms: it attempts soon, finds the key free
    // with a queue, and grants it to the lingering registration.
    let next: Arc<F> = connect(
        &cluster,
        config(&ns).notify_poll_interval(Duration::from_millis(100)),
    );
    let lease = granted(
        next.acquire("job"),
        "the waiter behind the lingering registration",
    );
    let exists: bool = redis::cmd("EXISTS")
        .arg(&reg_key)
        .query(&mut cluster.cluster_conn())
        .unwrap_or_else(|e| panic!("EXISTS on the cluster: {e}"));
    assert!(!exists, "the lingering registration was taken out");
    assert_eq!(F::release(lease).unwrap(), ReleaseOutcome::Released);
}

macro_rules! cluster_suite {
    ($module:ident, $front:ty) => {
        mod $module {
            use super::*;

            #[test]
            fn core_behaviours_work_on_a_cluster() {
                super::core_behaviours_work_on_a_cluster::<$front>();
            }

            #[test]
            fn keys_on_all_three_primaries_are_locked_independently() {
                super::keys_on_all_three_primaries_are_locked_independently::<$front>();
            }

            #[test]
            fn failover_while_a_lease_is_held_and_waiters_wait() {
                super::failover_while_a_lease_is_held_and_waiters_wait::<$front>();
            }

            #[test]
            fn a_paused_primary_fails_only_the_keys_in_its_slots() {
                super::a_paused_primary_fails_only_the_keys_in_its_slots::<$front>();
            }

            #[test]
            fn attempts_on_a_paused_primary_do_not_stall_the_other_primaries() {
                super::attempts_on_a_paused_primary_do_not_stall_the_other_primaries::<$front>();
            }

            #[test]
            fn grants_follow_registration_order_on_a_cluster() {
                super::grants_follow_registration_order_on_a_cluster::<$front>();
            }

            #[test]
            fn a_grant_to_a_lingering_registration_is_passed_on_on_a_cluster() {
                super::a_grant_to_a_lingering_registration_is_passed_on_on_a_cluster::<$front>();
            }
        }
    };
}

cluster_suite!(blocking, behaviour::Blocking);
cluster_suite!(aio, behaviour::Async);

/// The sync cluster connection re-sends a timed-out write when it may
/// retry. The blocking locker builds its own with `retries(0)`: a timed-out
/// acquire reaches the paused primary exactly once.
#[test]
fn a_timed_out_acquire_is_sent_to_the_paused_primary_once() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-no-resend");
    let locker = redlease::blocking::Locker::connect_cluster(
        cluster.nodes(),
        config(&ns).command_timeout(Duration::from_millis(300)),
    )
    .unwrap();
    // Warm up: the script is cached on the primary.
    let lease = locker.acquire("job").unwrap();
    lease.release().unwrap();
    let primary = cluster.primary_for_lock("job");
    primary.query(redis::cmd("CONFIG").arg("RESETSTAT"));
    {
        let _guard = primary.pause_guard();
        let e = locker.acquire_with("job", no_wait()).unwrap_err();
        assert_eq!(e.code(), "OUTCOME_UNKNOWN");
    }
    let stats = primary.info("commandstats");
    let evalsha = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert_eq!(evalsha, 1, "the timed-out acquire was sent once: {stats}");
    cluster.wait_healthy();
    locker.shutdown().ok();
}

/// A replayed acquire (what a retrying client library would send) returns
/// the same fence and moves the counter once, on a cluster too.
#[test]
fn a_replayed_acquire_returns_the_same_fence_on_a_cluster() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-replay");
    let script = behaviour::fences::acquire_lua();
    let mut conn = cluster.cluster_conn();
    let lock = lock_name(&ns, "job");
    let fence = behaviour::common::fence_name(&ns, "job");
    let eval = |conn: &mut redis::cluster::ClusterConnection, token: &str| -> redis::Value {
        redis::cmd("EVAL")
            .arg(script)
            .arg(2)
            .arg(&lock)
            .arg(&fence)
            .arg(token)
            .arg(5000)
            .arg(0)
            .query(conn)
            .unwrap()
    };
    let first = eval(&mut conn, "aaaa");
    let counter: String = redis::cmd("GET").arg(&fence).query(&mut conn).unwrap();
    let replay = eval(&mut conn, "aaaa");
    assert_eq!(first, replay);
    let after: String = redis::cmd("GET").arg(&fence).query(&mut conn).unwrap();
    assert_eq!(counter, after, "the replay did not increment the counter");
    assert!(
        matches!(eval(&mut conn, "bbbb"), redis::Value::Int(_)),
        "another token is busy"
    );
}

/// Failing over with the old primary paused (forced) still leaves a
/// working locker: commands follow the redirect to the new primary.
#[test]
fn the_blocking_locker_follows_redirects_after_a_failover() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-redirect");
    let locker = redlease::blocking::Locker::connect_cluster(cluster.nodes(), config(&ns)).unwrap();
    let lease = locker.acquire("job").unwrap();
    let before = lease.fence();
    lease.release().unwrap();
    let primary = cluster.primary_for_lock("job");
    cluster.failover_with(cluster.replica_of(primary), FailoverMode::Coordinated);
    // The pooled cluster connection still maps the slot to the old primary,
    // which now answers MOVED.
    let lease = locker.acquire_with("job", no_wait()).unwrap();
    assert!(lease.fence() > before);
    lease.release().unwrap();
    locker.shutdown().unwrap();
}

/// A cluster without sharded pub/sub (here: `SPUBLISH` renamed away, as on
/// a server older than Redis 7) is refused at connect with a message that
/// says why.
#[test]
fn a_cluster_without_sharded_pubsub_is_refused_at_connect() {
    let node = support::RedisServer::builder()
        .args([
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ])
        .args(["--rename-command", "SPUBLISH", ""])
        .start();
    node.query(redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383));
    let mut conn = node.conn();
    wait_until(BOUND, "the one-node cluster is ok", || {
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut conn)
            .is_ok_and(|info| info.contains("cluster_state:ok"))
    });
    let nodes = vec![node.url()];
    let ns = namespace("cluster-old");
    for e in [
        <behaviour::Blocking as ClusterFront>::connect_cluster(&nodes, config(&ns)).err(),
        <behaviour::Async as ClusterFront>::connect_cluster(&nodes, config(&ns)).err(),
    ] {
        let e = e.expect("connect must fail");
        assert_eq!(e.code(), "INVALID_CONFIG");
        assert!(e.to_string().contains("Redis 7"), "{e}");
    }
}
