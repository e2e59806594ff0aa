//! Self-test of the Redis Cluster fixture in `tests/support/cluster.rs`.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::HashSet;
use std::error::Error;
use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use support::cluster::{lock_hash_tag, lock_name, RedisCluster};
use support::wait_until;

type TestResult = Result<(), Box<dyn Error>>;

#[test]
fn topology_client_roundtrip_and_key_placement() -> TestResult {
    let cluster = RedisCluster::shared();
    let _topology = cluster.topology_shared();
    cluster.wait_healthy();

    let urls = cluster.nodes();
    assert_eq!(urls.len(), 6);
    let primaries = cluster.primaries();
    let replicas = cluster.replicas();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    assert_eq!(replicas.len(), 3, "{replicas:?}");
    let ports: HashSet<u16> = primaries
        .iter()
        .chain(&replicas)
        .map(|n| n.port())
        .collect();
    assert_eq!(ports.len(), 6, "six distinct nodes");
    assert!(!ports.contains(&6379), "never the system redis");
    for node in primaries.iter().chain(&replicas) {
        assert!(urls.contains(&node.url()), "{} in {urls:?}", node.url());
        assert_eq!(node.url(), format!("redis://127.0.0.1:{}/", node.port()));
    }
    for primary in &primaries {
        assert_eq!(primary.role(), "master");
        let replica = cluster.replica_of(primary);
        assert_eq!(replica.role(), "slave");
        let info = replica.info("replication");
        assert!(
            info.contains(&format!("master_port:{}", primary.port())),
            "{info}"
        );
    }

    // Through the cluster client; the key lands on its slot's primary and
    // reaches that primary's replica.
    let mut conn = redis::cluster::ClusterClient::new(cluster.nodes())?.get_connection()?;
    let key = "cluster-selftest:roundtrip:{a}";
    let _: () = redis::cmd("SET").arg(key).arg("v1").query(&mut conn)?;
    let got: String = redis::cmd("GET").arg(key).query(&mut conn)?;
    assert_eq!(got, "v1");
    let owner = cluster.primary_for_key(key);
    let exists: i64 = redis::cmd("EXISTS").arg(key).query(&mut owner.conn())?;
    assert_eq!(exists, 1, "key on its slot's primary {}", owner.port());
    for other in cluster.primaries() {
        if other.port() != owner.port() {
            let moved = redis::cmd("GET")
                .arg(key)
                .query::<String>(&mut other.conn());
            assert!(
                moved.is_err(),
                "{} must redirect, got {moved:?}",
                other.port()
            );
        }
    }
    let replica = cluster.replica_of(owner);
    wait_until(Duration::from_secs(5), "key reaches the replica", || {
        let mut c = replica.conn();
        let _: () = redis::cmd("READONLY").query(&mut c).expect("READONLY");
        redis::cmd("GET")
            .arg(key)
            .query::<Option<String>>(&mut c)
            .expect("GET")
            == Some("v1".into())
    });

    // The library's lock names: the hash tag decides the slot.
    let hex = lock_hash_tag("job-0");
    assert_eq!(hex.len(), 64);
    assert_eq!(lock_name("ns", "job-0"), format!("ns:lock:{{{hex}}}"));
    assert_eq!(
        cluster.slot_of(&lock_name("ns", "job-0")),
        cluster.slot_of(&format!("other:lock-fence:{{{hex}}}"))
    );
    let keys = cluster.keys_on_distinct_primaries(|i| format!("job-{i}"));
    let owners: HashSet<u16> = keys
        .iter()
        .map(|k| cluster.primary_for_key(&lock_name("svc", k)).port())
        .collect();
    assert_eq!(owners.len(), 3, "{keys:?} on {owners:?}");
    for k in &keys {
        assert_eq!(
            cluster.primary_for_lock(k).port(),
            cluster.primary_for_key(&lock_name("svc", k)).port()
        );
    }
    Ok(())
}

#[test]
fn failover_moves_slots_and_cluster_heals() -> TestResult {
    let cluster = RedisCluster::shared();
    let _topology = cluster.topology_exclusive();
    cluster.wait_healthy();

    let key = lock_name("cluster-selftest-failover", "k");
    let old_primary = cluster.primary_for_key(&key);
    let replica = cluster.replica_of(old_primary);
    let mut direct = old_primary.conn();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("before")
        .query(&mut direct)?;
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut direct)?;
    assert_eq!(acked, 1, "replica acknowledged the write");

    let started = Instant::now();
    cluster.failover(replica);
    let failover_took = started.elapsed();
    assert_eq!(replica.role(), "master");
    assert_eq!(cluster.primary_for_key(&key).port(), replica.port());

    cluster.wait_healthy();
    eprintln!(
        "failover {} -> {}: {failover_took:?}, healthy after {:?}",
        old_primary.port(),
        replica.port(),
        started.elapsed()
    );
    assert_eq!(old_primary.role(), "slave");
    assert_eq!(cluster.replica_of(replica).port(), old_primary.port());
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);

    // A fresh cluster client finds the new owner; the data survived.
    let mut conn = cluster.client().get_connection()?;
    let got: String = redis::cmd("GET").arg(&key).query(&mut conn)?;
    assert_eq!(got, "before");
    let _: () = redis::cmd("SET").arg(&key).arg("after").query(&mut conn)?;
    let got: String = redis::cmd("GET").arg(&key).query(&mut replica.conn())?;
    assert_eq!(got, "after");
    Ok(())
}

/// Run in a child process by `nodes_die_with_the_test_process`.
#[test]
#[ignore = "helper: run in a child process by nodes_die_with_the_test_process"]
fn child_starts_shared_cluster() {
    let cluster = RedisCluster::shared();
    let pids: Vec<String> = cluster.all().iter().map(|n| n.pid().to_string()).collect();
    let dirs: Vec<String> = cluster
        .all()
        .iter()
        .map(|n| n.server().dir().display().to_string())
        .collect();
    println!("CLUSTER_PIDS {}", pids.join(" "));
    println!("CLUSTER_DIRS {}", dirs.join("\t"));
}

/// A running redis-server (not a zombie) with this pid.
fn redis_alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state ..."
    let Some((comm_part, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    comm_part.contains("redis-server") && !rest.trim_start().starts_with('Z')
}

#[test]
fn nodes_die_with_the_test_process() -> TestResult {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "child_starts_shared_cluster",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest prints "test <name> ... " on the same line as the test's output.
    let line = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.split_once(tag).map(|(_, rest)| rest))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no {tag} line in child output:\n{stdout}"))
    };
    let pids: Vec<u32> = line("CLUSTER_PIDS ")
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let dirs: Vec<String> = line("CLUSTER_DIRS ")
        .split('\t')
        .map(str::to_owned)
        .collect();
    assert_eq!(pids.len(), 6);
    wait_until(
        Duration::from_secs(5),
        "cluster nodes killed after exit",
        || pids.iter().all(|&pid| !redis_alive(pid)),
    );
    wait_until(Duration::from_secs(5), "node temp dirs removed", || {
        dirs.iter().all(|d| !std::path::Path::new(d).exists())
    });
    Ok(())
}
