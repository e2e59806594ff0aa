//! A throw-away Redis Cluster for integration tests: 3 primaries and 3
//! replicas, each a [`RedisServer`] on a free loopback port.
//!
//! ```ignore
//! use support::cluster::RedisCluster;
//!
//! let cluster = RedisCluster::shared(); // started once per test process
//! let client = redis::cluster::ClusterClient::new(cluster.nodes())?;
//! let primary = cluster.primary_for_key("ns:lock:{abc}");
//! let replica = cluster.replica_of(primary);
//! ```
//!
//! # Startup
//!
//! [`RedisCluster::start`] starts six nodes with `--cluster-enabled yes`, a
//! `nodes.conf` in each node's own temp dir and `--cluster-node-timeout 2000`
//! (on top of the support module's defaults: loopback only, no persistence,
//! `DEBUG` allowed, no diskless-sync delay), runs
//! `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes` and
//! waits for [`wait_healthy`](RedisCluster::wait_healthy). It takes about
//! 2–3 s. Each node gets an explicit `--cluster-port` picked by the kernel, so
//! the bus port is never "data port + 10000" (which Redis refuses above
//! 55535 and which may be taken).
//!
//! # One cluster per test process
//!
//! [`RedisCluster::shared`] starts the cluster on first use and keeps it for
//! the rest of the process; tests share it and keep apart through distinct
//! namespaces/keys. Note that nextest runs every test in its own process, so
//! there each test gets its own cluster; `cargo test` really shares one.
//! Tests that change the topology (failover, long pauses) should hold
//! [`topology_exclusive`](RedisCluster::topology_exclusive), and tests that
//! rely on who is primary should hold
//! [`topology_shared`](RedisCluster::topology_shared), so that `cargo test`'s
//! parallel threads do not trip over each other.
//!
//! Statics are never dropped, so a small watchdog (`sh`, a child of the test
//! process holding the read end of a pipe whose write end only the test
//! process has) SIGKILLs the nodes and removes their temp dirs as soon as
//! the test process exits, however it exits. A cluster that *is* dropped
//! (one from [`RedisCluster::start`]) kills its nodes itself.
//!
//! # Pausing and failover
//!
//! [`ClusterNode::pause`] SIGSTOPs a node. A primary paused for longer than
//! the node timeout ([`NODE_TIMEOUT`], 2 s) is marked failed by the others
//! and its replica takes over automatically (about 3–4 s after the
//! pause; meanwhile the cluster answers `CLUSTERDOWN`). Tests that pause a
//! primary must keep the pause well under 2 s (≤ 1 s is safe), or expect that
//! failover and call [`wait_healthy`](RedisCluster::wait_healthy) after
//! resuming. A resumed former primary rejoins as a replica.
//!
//! Tests that fail over ([`failover`](RedisCluster::failover)) must call
//! [`wait_healthy`](RedisCluster::wait_healthy) before they finish, so the
//! next test finds three primaries, each with a linked replica.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{PauseGuard, RedisServer};

/// `--cluster-node-timeout`: how long a node may be unreachable (or paused)
/// before the others mark it failed and its replica takes over.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(2000);
/// Number of nodes: 3 primaries, 3 replicas.
const NODES: usize = 6;
const PRIMARIES: usize = 3;
/// Total hash slots in a Redis Cluster.
const SLOTS: u16 = 16384;
/// Bound for `redis-cli --cluster create`.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound for the cluster to converge (startup, failover, healing).
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval while waiting for the cluster to converge.
const POLL: Duration = Duration::from_millis(20);
/// Connect/read/write timeout of the polling connections.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// A coordinated manual failover gives up after 5 s inside Redis; re-issue
/// `CLUSTER FAILOVER` if the replica is not primary by then.
const FAILOVER_REISSUE: Duration = Duration::from_secs(6);
/// How many times to pick a fresh bus port when a node fails to start.
const NODE_ATTEMPTS: usize = 3;

static CLUSTER_COUNTER: AtomicU64 = AtomicU64::new(0);
static SHARED: OnceLock<RedisCluster> = OnceLock::new();

/// The process-wide cluster; same as [`RedisCluster::shared`].
pub fn shared() -> &'static RedisCluster {
    RedisCluster::shared()
}

/// Lowercase hex SHA-256 of `key`: the hash tag of the library's names for
/// `key` (`<ns>:lock:{<hex>}`, `<ns>:lock-fence:{<hex>}`).
pub fn lock_hash_tag(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The library's lock name for `key` in namespace `ns`: `<ns>:lock:{<sha256 hex>}`.
pub fn lock_name(ns: &str, key: &str) -> String {
    format!("{ns}:lock:{{{}}}", lock_hash_tag(key))
}

/// How [`RedisCluster::failover_with`] asks the replica to take over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverMode {
    /// `CLUSTER FAILOVER`: coordinated with the (reachable) primary, no
    /// acknowledged write is lost.
    Coordinated,
    /// `CLUSTER FAILOVER FORCE`: without the primary (e.g. paused), still
    /// elected by a majority of primaries.
    Force,
    /// `CLUSTER FAILOVER TAKEOVER`: without the primary and without election.
    Takeover,
}

/// One node of a [`RedisCluster`]: a [`RedisServer`] plus its cluster node id.
///
/// Whether it is a primary or a replica can change (failover); ask
/// [`RedisCluster::primaries`] / [`RedisCluster::replicas`] or
/// [`role`](Self::role).
pub struct ClusterNode {
    server: RedisServer,
    id: String,
}

impl std::fmt::Debug for ClusterNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterNode")
            .field("port", &self.port())
            .field("id", &self.id)
            .field("pid", &self.pid())
            .field("paused", &self.is_paused())
            .finish()
    }
}

impl ClusterNode {
    /// The node's client port.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port())
    }

    /// The cluster node id (`CLUSTER MYID`), fixed for the node's life.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The redis-server pid.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// A fresh plain (non-cluster) connection to this node, 5 s timeouts.
    /// On a replica, send `READONLY` first to read keys.
    pub fn conn(&self) -> redis::Connection {
        self.server.conn()
    }

    /// A fresh plain connection with `timeout` as connect/read/write timeout.
    pub fn try_conn(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        self.server.try_conn(timeout)
    }

    /// SIGSTOPs the node. See the module docs: a primary paused for longer
    /// than [`NODE_TIMEOUT`] gets failed over.
    pub fn pause(&self) {
        self.server.pause();
    }

    /// SIGCONTs the node.
    pub fn resume(&self) {
        self.server.resume();
    }

    /// Pauses the node until the guard is dropped (also on unwind).
    pub fn pause_guard(&self) -> PauseGuard<'_> {
        self.server.pause_guard()
    }

    /// Whether the node is paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.server.is_paused()
    }

    /// One command on a fresh connection; panics on error.
    pub fn query(&self, cmd: &redis::Cmd) -> redis::Value {
        self.server.query(cmd)
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> String {
        self.server.info(section)
    }

    /// `"master"` or `"slave"`, from `ROLE` on the node itself.
    pub fn role(&self) -> String {
        let mut conn = self.conn();
        let reply: redis::Value = redis::cmd("ROLE")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("ROLE on cluster node {}: {e}", self.port()));
        role_of(&reply).unwrap_or_else(|e| panic!("ROLE on cluster node {}: {e}", self.port()))
    }

    /// The last `max_bytes` of the node's log.
    pub fn log_tail(&self, max_bytes: u64) -> String {
        self.server.log_tail(max_bytes)
    }

    /// The underlying server, for its other helpers (`commandstats`,
    /// `config_set`, `client_kill_type`, ...). Never `restart()` it: that
    /// wipes `nodes.conf`, the node would leave the cluster and escape the
    /// exit watchdog.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }
}

/// Three primaries and three replicas on loopback; see the module docs.
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    /// `sh` that SIGKILLs the nodes when its stdin (a pipe from us) closes.
    watchdog: Option<Child>,
    /// Holds the `redis-cli --cluster create` log.
    dir: PathBuf,
    topology: RwLock<()>,
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("nodes", &self.nodes)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Stop the watchdog first so it cannot signal recycled pids once the
        // nodes (dropped right after this) are gone.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl RedisCluster {
    /// The process-wide cluster, started on first use (concurrent first
    /// callers wait for the one startup). Its nodes die with the process.
    pub fn shared() -> &'static RedisCluster {
        SHARED.get_or_init(RedisCluster::start)
    }

    /// Starts a new cluster (3 primaries + 3 replicas) and waits until it is
    /// healthy. Panics (with logs) on failure. Dropping it kills the nodes.
    pub fn start() -> RedisCluster {
        Self::start_with(None)
    }

    /// As [`start`](Self::start), with every node also listening with TLS
    /// (one CA for all, `--tls-cluster yes`, `--tls-replication yes`):
    /// clients on the plain ports (the helpers here) are told the plain
    /// ports, TLS clients the TLS ports. See [`tls_nodes`](Self::tls_nodes).
    pub fn start_tls() -> RedisCluster {
        Self::start_with(Some(super::TlsMaterial::generate()))
    }

    /// The six nodes' `rediss://127.0.0.1:<tls port>/` URLs; panics unless
    /// started with [`start_tls`](Self::start_tls).
    pub fn tls_nodes(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("rediss://127.0.0.1:{}/", n.server.tls_port()))
            .collect()
    }

    fn start_with(tls: Option<std::sync::Arc<super::TlsMaterial>>) -> RedisCluster {
        let started = Instant::now();
        let n = CLUSTER_COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("redlease-cluster-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));

        // Until `cluster` exists, an unwind drops these and kills them.
        let mut servers = Vec::with_capacity(NODES);
        for _ in 0..NODES {
            servers.push(start_node(tls.as_ref()));
        }
        let watchdog = spawn_watchdog(&servers, &dir);
        let nodes = servers
            .into_iter()
            .map(|server| {
                let mut conn = server.conn();
                let id: String = redis::cmd("CLUSTER")
                    .arg("MYID")
                    .query(&mut conn)
                    .unwrap_or_else(|e| panic!("CLUSTER MYID on {}: {e}", server.port()));
                ClusterNode { server, id }
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            watchdog: Some(watchdog),
            dir,
            topology: RwLock::new(()),
        };
        cluster.create();
        cluster.wait_healthy();
        eprintln!(
            "redis cluster up in {:?}: ports {:?}",
            started.elapsed(),
            cluster
                .nodes
                .iter()
                .map(ClusterNode::port)
                .collect::<Vec<_>>()
        );
        cluster
    }

    /// The six node URLs, `redis://127.0.0.1:<port>/`, for
    /// `redis::cluster::ClusterClient::new`.
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(ClusterNode::url).collect()
    }

    /// All six nodes, in start order (roles change on failover).
    pub fn all(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// The node listening on `port`; panics if there is none.
    pub fn node(&self, port: u16) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// A `ClusterClient` for [`nodes`](Self::nodes) with 5 s timeouts.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::builder(self.nodes())
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(5))
            .build()
            .expect("ClusterClient for the test cluster")
    }

    /// A fresh cluster connection from [`client`](Self::client).
    pub fn cluster_conn(&self) -> redis::cluster::ClusterConnection {
        self.client()
            .get_connection()
            .unwrap_or_else(|e| panic!("cluster connection to {:?}: {e}", self.nodes()))
    }

    /// The current primaries, in start order, as one (unpaused) node sees
    /// them in `CLUSTER NODES`. Call [`wait_healthy`](Self::wait_healthy)
    /// first if a failover may be in flight.
    pub fn primaries(&self) -> Vec<&ClusterNode> {
        self.with_role(true)
    }

    /// The current replicas, in start order; see [`primaries`](Self::primaries).
    pub fn replicas(&self) -> Vec<&ClusterNode> {
        self.with_role(false)
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        let mut conn = self.viewer().conn();
        keyslot(&mut conn, key).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The primary serving `slot`, per `CLUSTER SLOTS` on one unpaused node.
    pub fn primary_for_slot(&self, slot: u16) -> &ClusterNode {
        let viewer = self.viewer();
        let mut conn = viewer.conn();
        let slots = cluster_slots(&mut conn).unwrap_or_else(|e| panic!("{e}"));
        let port = slot_owner(&slots, slot).unwrap_or_else(|| {
            panic!(
                "slot {slot} unassigned in CLUSTER SLOTS of {}: {slots:?}",
                viewer.port()
            )
        });
        self.node(port)
    }

    /// The primary serving `key`'s slot. For the library's names the hash
    /// tag decides: `ns:lock:{<hex>}` lands where `{<hex>}` does.
    pub fn primary_for_key(&self, key: &str) -> &ClusterNode {
        self.primary_for_slot(self.slot_of(key))
    }

    /// The primary serving the library's lock name of `key` (any namespace).
    pub fn primary_for_lock(&self, key: &str) -> &ClusterNode {
        self.primary_for_key(&format!("{{{}}}", lock_hash_tag(key)))
    }

    /// The replica of `primary` (per `CLUSTER NODES` of one unpaused node).
    /// Panics unless there is exactly one.
    pub fn replica_of(&self, primary: &ClusterNode) -> &ClusterNode {
        let viewer = self.viewer();
        let view = self.view_of(viewer);
        let replicas: Vec<&NodeLine> = view
            .iter()
            .filter(|l| l.master_id.as_deref() == Some(primary.id()))
            .collect();
        match replicas.as_slice() {
            [one] => self.node(one.port),
            _ => panic!(
                "node {} has {} replicas in CLUSTER NODES of {}: {view:#?}",
                primary.port(),
                replicas.len(),
                viewer.port()
            ),
        }
    }

    /// For key names `make(0)`, `make(1)`, ...: the first three whose
    /// library lock names (`<ns>:lock:{sha256_hex(key)}`) land on three
    /// different primaries, in the order found. Panics after 10 000 tries.
    pub fn keys_on_distinct_primaries(&self, mut make: impl FnMut(usize) -> String) -> [String; 3] {
        let viewer = self.viewer();
        let mut conn = viewer.conn();
        let slots = cluster_slots(&mut conn).unwrap_or_else(|e| panic!("{e}"));
        let mut found: Vec<(u16, String)> = Vec::with_capacity(PRIMARIES);
        for i in 0..10_000 {
            let key = make(i);
            let slot = keyslot(&mut conn, &format!("{{{}}}", lock_hash_tag(&key)))
                .unwrap_or_else(|e| panic!("{e}"));
            let owner = slot_owner(&slots, slot)
                .unwrap_or_else(|| panic!("slot {slot} unassigned: {slots:?}"));
            if found.iter().all(|(port, _)| *port != owner) {
                found.push((owner, key));
                if found.len() == PRIMARIES {
                    let mut keys = found.into_iter().map(|(_, k)| k);
                    return [(); 3].map(|()| keys.next().expect("three keys"));
                }
            }
        }
        panic!("no three keys on distinct primaries among 10 000 candidates: {found:?}");
    }

    /// Coordinated failover: `CLUSTER FAILOVER` on `replica`, then waits
    /// (≤ 30 s) until `ROLE` on it says master and every unpaused node reports
    /// `cluster_state:ok` and shows it as the owner of its old primary's
    /// slots in `CLUSTER SLOTS`. The old primary may still be syncing as a
    /// replica afterwards: call [`wait_healthy`](Self::wait_healthy) before
    /// the test ends. The old primary must be reachable (use
    /// [`failover_with`](Self::failover_with) and [`FailoverMode::Force`]
    /// for a paused one).
    pub fn failover(&self, replica: &ClusterNode) {
        self.failover_with(replica, FailoverMode::Coordinated);
    }

    /// [`failover`](Self::failover) with the given `CLUSTER FAILOVER` option.
    pub fn failover_with(&self, replica: &ClusterNode, mode: FailoverMode) {
        assert!(
            !replica.is_paused(),
            "cannot fail over to paused node {}",
            replica.port()
        );
        let view = self.view_of(replica);
        let me = view
            .iter()
            .find(|l| l.myself)
            .unwrap_or_else(|| panic!("no myself line in CLUSTER NODES: {view:#?}"));
        let old_primary = me
            .master_id
            .as_deref()
            .and_then(|id| view.iter().find(|l| l.id == id))
            .unwrap_or_else(|| panic!("node {} is not a replica: {view:#?}", replica.port()));
        let moved = old_primary.slots.clone();
        assert!(
            !moved.is_empty(),
            "primary {} owns no slots",
            old_primary.port
        );

        let issue = || {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("FAILOVER");
            match mode {
                FailoverMode::Coordinated => {}
                FailoverMode::Force => {
                    cmd.arg("FORCE");
                }
                FailoverMode::Takeover => {
                    cmd.arg("TAKEOVER");
                }
            }
            let mut conn = replica.conn();
            let _: () = cmd
                .query(&mut conn)
                .unwrap_or_else(|e| panic!("CLUSTER FAILOVER on {}: {e}", replica.port()));
        };
        let started = Instant::now();
        let mut issued = Instant::now();
        issue();
        let mut probe = Probe::new(&self.nodes);
        let at = self.index_of(replica);
        loop {
            let promoted = probe
                .query::<redis::Value>(at, &redis::cmd("ROLE"))
                .and_then(|v| role_of(&v))
                .is_ok_and(|role| role == "master");
            let last = if promoted {
                match self.slots_moved(&mut probe, replica.port(), &moved) {
                    Ok(()) => return,
                    Err(e) => e,
                }
            } else {
                format!("ROLE on {} does not say master yet", replica.port())
            };
            if started.elapsed() >= CONVERGE_TIMEOUT {
                panic!(
                    "failover to {} (from {}) not done within {CONVERGE_TIMEOUT:?}: {last}\n{}",
                    replica.port(),
                    old_primary.port,
                    self.diagnostics()
                );
            }
            if !promoted && issued.elapsed() >= FAILOVER_REISSUE {
                issue();
                issued = Instant::now();
            }
            thread::sleep(POLL);
        }
    }

    /// Waits (≤ 30 s, polling every 20 ms) until the cluster is healthy:
    /// every node reports `cluster_state:ok`, all 16384 slots assigned and
    /// ok, 6 known nodes; all nodes show the same topology in `CLUSTER NODES`
    /// (no failure flags, links connected): 3 primaries owning slots, each
    /// with exactly one replica whose `master_link_status` is `up`. Panics
    /// with diagnostics on timeout, or at once if a node is paused.
    pub fn wait_healthy(&self) {
        if let Some(paused) = self.nodes.iter().find(|n| n.is_paused()) {
            panic!(
                "wait_healthy: node {} is paused; resume it first",
                paused.port()
            );
        }
        let started = Instant::now();
        let mut probe = Probe::new(&self.nodes);
        loop {
            let last = match self.health(&mut probe) {
                Ok(()) => return,
                Err(e) => e,
            };
            if started.elapsed() >= CONVERGE_TIMEOUT {
                panic!(
                    "redis cluster not healthy within {CONVERGE_TIMEOUT:?}: {last}\n{}",
                    self.diagnostics()
                );
            }
            thread::sleep(POLL);
        }
    }

    /// Shared hold on the topology: take it in tests that rely on who is
    /// primary; [`topology_exclusive`](Self::topology_exclusive) holders
    /// wait. (Only matters when tests share the cluster, as `cargo test`'s
    /// threads do.) If a previous holder panicked, waits for health first.
    pub fn topology_shared(&self) -> RwLockReadGuard<'_, ()> {
        match self.topology.read() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let guard = poisoned.into_inner();
                self.topology.clear_poison();
                self.wait_healthy();
                guard
            }
        }
    }

    /// Exclusive hold on the topology: take it in tests that fail over or
    /// pause nodes. If a previous holder panicked, waits for health first.
    pub fn topology_exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        match self.topology.write() {
            Ok(guard) => guard,
            Err(poisoned) => {
                let guard = poisoned.into_inner();
                self.topology.clear_poison();
                self.wait_healthy();
                guard
            }
        }
    }

    fn create(&self) {
        let log_path = self.dir.join("cluster-create.log");
        let log = fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("create {}: {e}", log_path.display()));
        let log_err = log.try_clone().expect("dup cluster-create log fd");
        let mut child = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn redis-cli (is it installed?): {e}"));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if started.elapsed() >= CREATE_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => thread::sleep(POLL),
                Err(e) => panic!("try_wait on redis-cli: {e}"),
            }
        };
        if status.is_some_and(|s| s.success()) {
            return;
        }
        let output = fs::read_to_string(&log_path).unwrap_or_default();
        panic!(
            "redis-cli --cluster create {}\n--- output ---\n{output}\n{}",
            match status {
                Some(s) => format!("failed: {s}"),
                None => format!("timed out after {CREATE_TIMEOUT:?}"),
            },
            self.diagnostics()
        );
    }

    fn health(&self, probe: &mut Probe<'_>) -> Result<(), String> {
        let mut first: Option<(u16, Vec<Normalized>)> = None;
        for (i, node) in self.nodes.iter().enumerate() {
            let port = node.port();
            let info: String = probe.query(i, redis::cmd("CLUSTER").arg("INFO"))?;
            for (field, want) in [
                ("cluster_state", "ok".to_owned()),
                ("cluster_slots_assigned", SLOTS.to_string()),
                ("cluster_slots_ok", SLOTS.to_string()),
                ("cluster_known_nodes", NODES.to_string()),
            ] {
                let got = info_field(&info, field);
                if got != Some(want.as_str()) {
                    return Err(format!("node {port}: {field} is {got:?}, want {want}"));
                }
            }
            let text: String = probe.query(i, redis::cmd("CLUSTER").arg("NODES"))?;
            let lines = parse_cluster_nodes(&text)?;
            for line in &lines {
                if let Some(bad) = line.flags.iter().find(|f| {
                    matches!(
                        f.as_str(),
                        "fail" | "fail?" | "handshake" | "noaddr" | "nofailover"
                    )
                }) {
                    return Err(format!("node {port} flags {} as {bad}", line.port));
                }
                if !line.myself && !line.connected {
                    return Err(format!("node {port} has no link to {}", line.port));
                }
            }
            let normalized = normalize(&lines)?;
            match &first {
                None => first = Some((port, normalized)),
                Some((first_port, view)) if *view != normalized => {
                    return Err(format!(
                        "nodes {first_port} and {port} disagree: {view:?} vs {normalized:?}"
                    ));
                }
                Some(_) => {}
            }
        }
        let (_, view) = first.ok_or("no nodes")?;
        let primaries: Vec<&Normalized> = view.iter().filter(|n| n.primary).collect();
        if primaries.len() != PRIMARIES || primaries.iter().any(|p| p.slots.is_empty()) {
            return Err(format!("want {PRIMARIES} primaries owning slots: {view:?}"));
        }
        for primary in &primaries {
            let replicas = view
                .iter()
                .filter(|n| n.master_port == Some(primary.port))
                .count();
            if replicas != 1 {
                return Err(format!(
                    "primary {} has {replicas} replicas: {view:?}",
                    primary.port
                ));
            }
        }
        for entry in &view {
            let i = self.index_of(self.node(entry.port));
            let info: String = probe.query(i, redis::cmd("INFO").arg("replication"))?;
            let role = info_field(&info, "role");
            match entry.master_port {
                None if role != Some("master") => {
                    return Err(format!("node {}: INFO role is {role:?}", entry.port))
                }
                None => {}
                Some(master) => {
                    // Over TLS replication a replica names its primary's TLS port.
                    let tls_port = self.node(master).server.tls_port_if_any();
                    let linked_port = info_field(&info, "master_port")
                        .and_then(|p| p.parse::<u16>().ok())
                        .is_some_and(|p| p == master || Some(p) == tls_port);
                    let linked = role == Some("slave")
                        && linked_port
                        && info_field(&info, "master_link_status") == Some("up");
                    if !linked {
                        return Err(format!(
                            "replica {} not linked up to {master}: role {role:?}, master_port {:?}, link {:?}",
                            entry.port,
                            info_field(&info, "master_port"),
                            info_field(&info, "master_link_status"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether every unpaused node has `cluster_state:ok` and shows `owner`
    /// serving every range in `moved` in `CLUSTER SLOTS`.
    fn slots_moved(
        &self,
        probe: &mut Probe<'_>,
        owner: u16,
        moved: &[(u16, u16)],
    ) -> Result<(), String> {
        for (i, node) in self.nodes.iter().enumerate() {
            if node.is_paused() {
                continue;
            }
            let info: String = probe.query(i, redis::cmd("CLUSTER").arg("INFO"))?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("node {}: cluster_state not ok", node.port()));
            }
            let reply: redis::Value = probe.query(i, redis::cmd("CLUSTER").arg("SLOTS"))?;
            let slots = parse_cluster_slots(&reply)?;
            for &(start, end) in moved {
                for slot in [start, end] {
                    let got = slot_owner(&slots, slot);
                    if got != Some(owner) {
                        return Err(format!(
                            "node {}: slot {slot} served by {got:?}, want {owner}",
                            node.port()
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn with_role(&self, primary: bool) -> Vec<&ClusterNode> {
        let view = self.view_of(self.viewer());
        self.nodes
            .iter()
            .filter(|n| {
                view.iter()
                    .any(|l| l.port == n.port() && l.master_id.is_none() == primary)
            })
            .collect()
    }

    /// `CLUSTER NODES` as `node` sees it; panics on error.
    fn view_of(&self, node: &ClusterNode) -> Vec<NodeLine> {
        let mut conn = node.conn();
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut conn)
            .unwrap_or_else(|e| panic!("CLUSTER NODES on {}: {e}", node.port()));
        parse_cluster_nodes(&text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The first unpaused node, to ask about the cluster.
    fn viewer(&self) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|n| !n.is_paused())
            .expect("every cluster node is paused")
    }

    fn index_of(&self, node: &ClusterNode) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == node.port())
            .unwrap_or_else(|| panic!("node {} is not in this cluster", node.port()))
    }

    /// Every node's `CLUSTER NODES` and log tail, for panic messages.
    fn diagnostics(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let nodes = if node.is_paused() {
                "<paused>".to_owned()
            } else {
                node.try_conn(PROBE_TIMEOUT)
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query::<String>(&mut c))
                    .unwrap_or_else(|e| format!("<CLUSTER NODES failed: {e}>"))
            };
            out.push_str(&format!(
                "--- node {} (pid {}) CLUSTER NODES ---\n{nodes}\n--- node {} log tail ---\n{}\n",
                node.port(),
                node.pid(),
                node.port(),
                node.log_tail(1500)
            ));
        }
        out
    }
}

/// Starts one cluster-enabled node with a kernel-picked bus port.
fn start_node(tls: Option<&std::sync::Arc<super::TlsMaterial>>) -> RedisServer {
    let mut last = None;
    for _ in 0..NODE_ATTEMPTS {
        let bus_port = free_port();
        let mut builder = RedisServer::builder();
        if let Some(material) = tls {
            builder = builder.tls_with(material).args([
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
            ]);
        }
        let builder = builder.args([
            "--cluster-enabled".to_owned(),
            "yes".to_owned(),
            // Relative to the node's own temp dir (its --dir and cwd).
            "--cluster-config-file".to_owned(),
            "nodes.conf".to_owned(),
            "--cluster-port".to_owned(),
            bus_port.to_string(),
            "--cluster-node-timeout".to_owned(),
            NODE_TIMEOUT.as_millis().to_string(),
        ]);
        // RedisServer retries fresh client ports; a bus port lost to a race
        // makes all of its attempts fail, so retry here with another one.
        match panic::catch_unwind(AssertUnwindSafe(|| builder.start())) {
            Ok(server) => return server,
            Err(payload) => last = Some(payload),
        }
    }
    panic::resume_unwind(last.expect("at least one attempt"))
}

/// Spawns `sh`, which blocks reading a pipe whose write end only this
/// process holds (std opens it close-on-exec). When this process exits, in
/// any way, the read sees EOF and `sh` SIGKILLs the nodes and removes their
/// temp dirs and `dir`.
fn spawn_watchdog(servers: &[RedisServer], dir: &std::path::Path) -> Child {
    let pids: Vec<String> = servers.iter().map(|s| s.pid().to_string()).collect();
    let script = format!(
        "read -r line; kill -9 {} 2>/dev/null; rm -rf -- \"$@\"",
        pids.join(" ")
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("redlease-cluster-watchdog")
        .args(servers.iter().map(RedisServer::dir))
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn sh for the cluster watchdog: {e}"))
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 to pick a free port")
        .port()
}

/// Reused polling connections, one per node, reconnected after any error.
struct Probe<'a> {
    nodes: &'a [ClusterNode],
    conns: Vec<Option<redis::Connection>>,
}

impl<'a> Probe<'a> {
    fn new(nodes: &'a [ClusterNode]) -> Self {
        Probe {
            nodes,
            conns: nodes.iter().map(|_| None).collect(),
        }
    }

    fn query<T: redis::FromRedisValue>(&mut self, i: usize, cmd: &redis::Cmd) -> Result<T, String> {
        let port = self.nodes[i].port();
        let conn = match &mut self.conns[i] {
            Some(conn) => conn,
            slot => slot.insert(
                self.nodes[i]
                    .try_conn(PROBE_TIMEOUT)
                    .map_err(|e| format!("connect to node {port}: {e}"))?,
            ),
        };
        cmd.query(conn).map_err(|e| {
            self.conns[i] = None;
            format!("{cmd:?} on node {port}: {e}")
        })
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct NodeLine {
    id: String,
    port: u16,
    myself: bool,
    flags: Vec<String>,
    master_id: Option<String>,
    connected: bool,
    slots: Vec<(u16, u16)>,
}

/// The observer-independent part of a `CLUSTER NODES` line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Normalized {
    port: u16,
    primary: bool,
    master_port: Option<u16>,
    slots: Vec<(u16, u16)>,
}

fn parse_cluster_nodes(text: &str) -> Result<Vec<NodeLine>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let bad = || format!("unparsable CLUSTER NODES line: {line:?}");
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(bad());
            }
            // ip:port@cport[,hostname]
            let port = fields[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse().ok())
                .ok_or_else(bad)?;
            let flags: Vec<String> = fields[2].split(',').map(str::to_owned).collect();
            let mut slots = Vec::new();
            for s in &fields[8..] {
                if s.starts_with('[') {
                    continue; // migrating/importing marker
                }
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                slots.push((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?));
            }
            Ok(NodeLine {
                id: fields[0].to_owned(),
                port,
                myself: flags.iter().any(|f| f == "myself"),
                master_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                flags,
                connected: fields[7] == "connected",
                slots,
            })
        })
        .collect()
}

fn normalize(lines: &[NodeLine]) -> Result<Vec<Normalized>, String> {
    let mut out = lines
        .iter()
        .map(|l| {
            let master_port = match &l.master_id {
                None => None,
                Some(id) => Some(
                    lines
                        .iter()
                        .find(|m| &m.id == id)
                        .ok_or_else(|| format!("replica {} of unknown node {id}", l.port))?
                        .port,
                ),
            };
            Ok(Normalized {
                port: l.port,
                primary: l.flags.iter().any(|f| f == "master"),
                master_port,
                slots: l.slots.clone(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    out.sort();
    Ok(out)
}

/// `CLUSTER SLOTS` as `(start, end, primary port)` ranges.
fn parse_cluster_slots(reply: &redis::Value) -> Result<Vec<(u16, u16, u16)>, String> {
    let bad = || format!("unexpected CLUSTER SLOTS reply: {reply:?}");
    let redis::Value::Array(entries) = reply else {
        return Err(bad());
    };
    entries
        .iter()
        .map(|entry| match entry {
            redis::Value::Array(items) => match items.as_slice() {
                [redis::Value::Int(start), redis::Value::Int(end), redis::Value::Array(primary), ..] => {
                    match primary.get(1) {
                        Some(redis::Value::Int(port)) => Ok((
                            u16::try_from(*start).map_err(|_| bad())?,
                            u16::try_from(*end).map_err(|_| bad())?,
                            u16::try_from(*port).map_err(|_| bad())?,
                        )),
                        _ => Err(bad()),
                    }
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}

fn cluster_slots(conn: &mut redis::Connection) -> Result<Vec<(u16, u16, u16)>, String> {
    let reply: redis::Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .map_err(|e| format!("CLUSTER SLOTS: {e}"))?;
    parse_cluster_slots(&reply)
}

fn slot_owner(slots: &[(u16, u16, u16)], slot: u16) -> Option<u16> {
    slots
        .iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|&(_, _, port)| port)
}

fn keyslot(conn: &mut redis::Connection, key: &str) -> Result<u16, String> {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(conn)
        .map_err(|e| format!("CLUSTER KEYSLOT {key:?}: {e}"))
}

/// The first element of a `ROLE` reply: `"master"`, `"slave"` or `"sentinel"`.
fn role_of(reply: &redis::Value) -> Result<String, String> {
    match reply {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
            _ => Err(format!("unexpected ROLE reply: {reply:?}")),
        },
        _ => Err(format!("unexpected ROLE reply: {reply:?}")),
    }
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.trim()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}
