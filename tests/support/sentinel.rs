//! A throw-away Redis Sentinel setup for integration tests: one primary,
//! one replica and three `redis-server --sentinel` processes, each on a
//! free loopback port, all stopped (SIGKILL) and their temp dirs removed
//! on drop.
//!
//! ```ignore
//! use support::sentinel::SentinelSet;
//!
//! let set = SentinelSet::start();
//! let locker = Locker::connect_sentinel(set.sentinel_urls(), set.master_name(), config)?;
//! let old = set.kill_primary();            // SIGKILL the current primary
//! let new = set.wait_failover(old, BOUND); // every sentinel names another
//! ```
//!
//! Each sentinel runs from its own `sentinel.conf` (Sentinel rewrites it)
//! with `sentinel monitor <name> 127.0.0.1 <primary> 2`,
//! `down-after-milliseconds 1000` and `failover-timeout 3000`, so a killed
//! primary is replaced within a few seconds. [`SentinelSet::start`]
//! returns once every sentinel names the primary, knows the replica and
//! the two other sentinels (without which no failover can be voted).
//!
//! [`SentinelSet::builder`] adds TLS (one CA for all; the sentinels listen
//! on a TLS port only, `port 0`, and talk TLS to the servers and to each
//! other through `tls-replication yes`; the data servers keep their plain
//! port for the inspection helpers) and passwords (`requirepass` on the
//! sentinels; `requirepass`/`masterauth` on the servers, given to the
//! sentinels with `sentinel auth-pass`):
//!
//! ```ignore
//! let set = SentinelSet::builder().tls().sentinel_password("s").primary_password("p").start();
//! // set.sentinel_urls(): rediss://:s@127.0.0.1:<port>; set.ca_pem() for the CA
//! ```

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    free_port, kill_and_reap, log_tail, ping_and_pid, wait_until, RedisServer, TlsMaterial,
    LOG_FILE, STARTUP_POLL, STARTUP_TIMEOUT, START_ATTEMPTS,
};

/// The master name the sentinels monitor.
pub const MASTER_NAME: &str = "redlease-primary";
/// How long startup may take (the sentinels find each other through
/// hello messages every 2 s).
const STARTUP: Duration = Duration::from_secs(30);

static SENTINEL_DIRS: AtomicU64 = AtomicU64::new(0);

/// What a [`SentinelSet`] is started with; see [`SentinelSet::builder`].
#[derive(Debug, Default, Clone)]
pub struct SentinelSetBuilder {
    tls: bool,
    sentinel_password: Option<String>,
    primary_password: Option<String>,
}

impl SentinelSetBuilder {
    /// Everything over TLS, with one CA made at start ([`SentinelSet::ca_pem`]).
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// The sentinels want `password` (`requirepass`; they use it with
    /// each other too); [`SentinelSet::sentinel_urls`] carry it.
    pub fn sentinel_password(mut self, password: &str) -> Self {
        self.sentinel_password = Some(password.to_owned());
        self
    }

    /// The primary and the replica want `password` (`requirepass`,
    /// `masterauth`); the sentinels get it with `sentinel auth-pass`.
    pub fn primary_password(mut self, password: &str) -> Self {
        self.primary_password = Some(password.to_owned());
        self
    }

    /// Starts everything; see [`SentinelSet::start`].
    pub fn start(self) -> SentinelSet {
        SentinelSet::start_with(self)
    }
}

/// One `redis-server --sentinel` process.
pub struct SentinelNode {
    port: u16,
    child: Child,
    dir: PathBuf,
    tls: Option<Arc<TlsMaterial>>,
    password: Option<String>,
}

impl SentinelNode {
    /// Starts a sentinel on a free port, and again on another one when it
    /// is not this sentinel that answers there: a concurrent test's server
    /// may win the race for the port, as `RedisServer` allows for too.
    fn start(
        primary_port: u16,
        setup: &SentinelSetBuilder,
        tls: Option<&Arc<TlsMaterial>>,
    ) -> SentinelNode {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let node = SentinelNode::spawn(free_port(), primary_port, setup, tls);
            match node.wait_until_it_answers() {
                Ok(()) => return node,
                Err(why) => failures.push(why),
            }
        }
        panic!("could not start a sentinel after {START_ATTEMPTS} attempts: {failures:?}");
    }

    /// Waits until the sentinel answers PING on its port as this process
    /// (`INFO server`'s `process_id`).
    fn wait_until_it_answers(&self) -> Result<(), String> {
        let client = self.client().map_err(|e| format!("client: {e}"))?;
        let pid = self.child.id();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(answered) = ping_and_pid(&client) {
                if answered == pid {
                    return Ok(());
                }
                return Err(format!(
                    "port {} is served by pid {answered}, not {pid}",
                    self.port
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the sentinel (pid {pid}) did not answer within {STARTUP_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(STARTUP_POLL);
        }
    }

    fn spawn(
        port: u16,
        primary_port: u16,
        setup: &SentinelSetBuilder,
        tls: Option<&Arc<TlsMaterial>>,
    ) -> SentinelNode {
        let n = SENTINEL_DIRS.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "redlease-sentinel-{}-{n}-{port}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let conf = dir.join("sentinel.conf");
        let mut text = match tls {
            // The server arguments, as config lines: `tls-port <port>`,
            // `tls-cert-file ...`, ...
            Some(material) => {
                let args = material.args(port);
                let lines: Vec<String> = args
                    .chunks(2)
                    .map(|kv| format!("{} {}", kv[0].trim_start_matches("--"), kv[1]))
                    .collect();
                format!("port 0\n{}\ntls-replication yes\n", lines.join("\n"))
            }
            None => format!("port {port}\n"),
        };
        text.push_str(&format!(
            "bind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
             logfile {log}\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 3000\n",
            dir = dir.display(),
            log = dir.join(LOG_FILE).display(),
        ));
        if let Some(password) = &setup.sentinel_password {
            text.push_str(&format!("requirepass {password}\n"));
        }
        if let Some(password) = &setup.primary_password {
            text.push_str(&format!("sentinel auth-pass {MASTER_NAME} {password}\n"));
        }
        fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn redis-server --sentinel: {e}"));
        SentinelNode {
            port,
            child,
            dir,
            tls: tls.cloned(),
            password: setup.sentinel_password.clone(),
        }
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` with TLS), with the
    /// sentinel password if there is one.
    pub fn url(&self) -> String {
        self.url_with_password(self.password.as_deref())
    }

    /// As [`url`](Self::url), with `password` (or none) instead.
    pub fn url_with_password(&self, password: Option<&str>) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let auth = password.map_or_else(String::new, |p| format!(":{p}@"));
        format!("{scheme}://{auth}127.0.0.1:{}", self.port)
    }

    fn client(&self) -> redis::RedisResult<redis::Client> {
        match &self.tls {
            None => redis::Client::open(self.url()),
            #[cfg(feature = "tls-rustls")]
            Some(material) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(material.ca_pem().into_bytes()),
                },
            ),
            #[cfg(not(feature = "tls-rustls"))]
            Some(_) => panic!("a TLS sentinel set needs feature tls-rustls"),
        }
    }

    fn conn(&self) -> redis::RedisResult<redis::Connection> {
        let timeout = Duration::from_secs(2);
        let conn = self.client()?.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(conn)
    }

    /// `SENTINEL get-master-addr-by-name`: the port of the primary this
    /// sentinel names, if it answers.
    pub fn master_port(&self) -> Option<u16> {
        let mut conn = self.conn().ok()?;
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut conn)
            .ok()?;
        addr.and_then(|(_, port)| port.parse().ok())
    }

    /// How many entries `SENTINEL <what> <name>` lists (`sentinels`,
    /// `replicas`) that are not subjectively down.
    fn known(&self, what: &str) -> usize {
        let Ok(mut conn) = self.conn() else { return 0 };
        let listed: redis::RedisResult<Vec<std::collections::HashMap<String, String>>> =
            redis::cmd("SENTINEL")
                .arg(what)
                .arg(MASTER_NAME)
                .query(&mut conn);
        listed.map_or(0, |entries| {
            entries
                .iter()
                .filter(|e| e.get("flags").is_some_and(|f| !f.contains("s_down")))
                .count()
        })
    }
}

impl Drop for SentinelNode {
    fn drop(&mut self) {
        kill_and_reap(&mut self.child);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// One primary, one replica, three sentinels.
pub struct SentinelSet {
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelNode>,
    tls: Option<Arc<TlsMaterial>>,
}

impl SentinelSet {
    /// Starts everything and waits until the sentinels agree on the
    /// primary and know the replica and each other. Panics on failure.
    pub fn start() -> SentinelSet {
        Self::builder().start()
    }

    /// TLS and passwords; see [`SentinelSetBuilder`].
    pub fn builder() -> SentinelSetBuilder {
        SentinelSetBuilder::default()
    }

    fn start_with(setup: SentinelSetBuilder) -> SentinelSet {
        let tls = setup.tls.then(TlsMaterial::generate);
        let server = || {
            let mut builder = RedisServer::builder();
            if let Some(material) = &tls {
                builder = builder.tls_with(material).tls_replication();
            }
            if let Some(password) = &setup.primary_password {
                builder = builder.password(password);
            }
            builder
        };
        let primary = server().start();
        let replica = server().replica_of(&primary).start();
        let monitored = primary.tls_port_if_any().unwrap_or(primary.port());
        let sentinels: Vec<SentinelNode> = (0..3)
            .map(|_| SentinelNode::start(monitored, &setup, tls.as_ref()))
            .collect();
        let set = SentinelSet {
            servers: vec![primary, replica],
            sentinels,
            tls,
        };
        let primary_port = monitored;
        wait_until(STARTUP, "the sentinels agree on the primary", || {
            set.sentinels
                .iter()
                .all(|s| s.master_port() == Some(primary_port))
        });
        set.wait_until_every_sentinel_knows_the_others();
        set
    }

    /// Waits until every sentinel knows the replica and the two other
    /// sentinels, none subjectively down. Polls every 50 ms: each look opens
    /// a connection to every sentinel (a TLS handshake with `.tls()`), which
    /// a loaded machine's sentinels must not spend their time on. On
    /// timeout it says what each sentinel knew and what the primary said of
    /// its replica (seen once: a CI run on a loaded machine timed out here).
    fn wait_until_every_sentinel_knows_the_others(&self) {
        let deadline = Instant::now() + STARTUP;
        loop {
            let known: Vec<(usize, usize)> = self
                .sentinels
                .iter()
                .map(|s| (s.known("replicas"), s.known("sentinels")))
                .collect();
            if known
                .iter()
                .all(|&(replicas, others)| replicas >= 1 && others >= 2)
            {
                return;
            }
            if Instant::now() >= deadline {
                let replication = self.servers[0].info("replication");
                let replica: Vec<&str> = replication
                    .lines()
                    .filter(|l| l.starts_with("connected_slaves") || l.starts_with("slave0"))
                    .collect();
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| {
                        format!(
                            "--- sentinel on port {} ---\n{}",
                            s.port,
                            log_tail(&s.dir, 1500)
                        )
                    })
                    .collect();
                panic!(
                    "timed out after {STARTUP:?} waiting for every sentinel to know the \
                     replica and the others; (replicas, sentinels) known per sentinel: \
                     {known:?}; the primary: {replica:?}\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The master name to pass to `connect_sentinel`.
    pub fn master_name(&self) -> &'static str {
        MASTER_NAME
    }

    /// The sentinels' URLs (`rediss://` with TLS; with the sentinel
    /// password if there is one).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelNode::url).collect()
    }

    /// The sentinels' URLs with `password` (or none) instead of theirs.
    pub fn sentinel_urls_with_password(&self, password: Option<&str>) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| s.url_with_password(password))
            .collect()
    }

    /// The PEM of the CA of a TLS set; panics without
    /// [`SentinelSetBuilder::tls`].
    pub fn ca_pem(&self) -> String {
        self.tls
            .as_ref()
            .expect("a set started without .tls()")
            .ca_pem()
    }

    /// The data server on `port`: its plain port, or the TLS port the
    /// sentinels name in a TLS set.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port || s.tls_port_if_any() == Some(port))
            .unwrap_or_else(|| panic!("no server of the set on port {port}"))
    }

    /// The port the sentinels know `server` by (its TLS port in a TLS set).
    fn named_port(server: &RedisServer) -> u16 {
        server.tls_port_if_any().unwrap_or(server.port())
    }

    /// The port of the primary the first sentinel names.
    pub fn primary_port(&self) -> u16 {
        self.sentinels[0]
            .master_port()
            .expect("the first sentinel names a primary")
    }

    /// SIGKILLs the current primary (it stays down); returns its port.
    pub fn kill_primary(&self) -> u16 {
        let port = self.primary_port();
        let pid = self.server(port).pid();
        let status = Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("run `kill -9 {pid}`: {e}"));
        assert!(status.success(), "`kill -9 {pid}` failed: {status}");
        port
    }

    /// Asks the first sentinel for a manual failover (`SENTINEL FAILOVER`):
    /// the replica is promoted and the old primary, still running, becomes
    /// its replica. Returns the old primary's port.
    pub fn manual_failover(&self) -> u16 {
        let port = self.primary_port();
        let mut conn = self.sentinels[0].conn().expect("connect to a sentinel");
        let _: redis::Value = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut conn)
            .expect("SENTINEL FAILOVER");
        port
    }

    /// Swaps the roles by hand, behind the sentinels' back: the replica
    /// becomes primary, the primary its replica (still running, its client
    /// connections kept: they now get `READONLY` for writes), and every
    /// sentinel is told to monitor the new primary (`SENTINEL REMOVE` +
    /// `MONITOR`). Returns `(old, new)` once every sentinel names the new
    /// one.
    pub fn swap_roles_by_hand(&self) -> (u16, u16) {
        let old = self.primary_port();
        let new = self
            .servers
            .iter()
            .map(Self::named_port)
            .find(|p| *p != old)
            .expect("a replica");
        self.server(new)
            .query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
        self.server(old)
            .query(redis::cmd("REPLICAOF").arg("127.0.0.1").arg(new));
        for sentinel in &self.sentinels {
            let mut conn = sentinel.conn().expect("connect to a sentinel");
            let mut pipe = redis::pipe();
            pipe.cmd("SENTINEL").arg("REMOVE").arg(MASTER_NAME).ignore();
            pipe.cmd("SENTINEL")
                .arg("MONITOR")
                .arg(MASTER_NAME)
                .arg("127.0.0.1")
                .arg(new)
                .arg(2)
                .ignore();
            pipe.cmd("SENTINEL")
                .arg("SET")
                .arg(MASTER_NAME)
                .arg("down-after-milliseconds")
                .arg(1000)
                .arg("failover-timeout")
                .arg(3000)
                .ignore();
            let () = pipe.query(&mut conn).expect("re-monitor on a sentinel");
        }
        wait_until(STARTUP, "every sentinel names the new primary", || {
            self.sentinels.iter().all(|s| s.master_port() == Some(new))
        });
        (old, new)
    }

    /// The `role:` of `INFO replication` on the server at `port` (`master`,
    /// `slave`), or `None` when it does not answer. Never panics: Sentinel
    /// ends every normal connection (`CLIENT KILL TYPE normal`) of a server
    /// it reconfigures, a poll's own included.
    pub fn role(&self, port: u16) -> Option<String> {
        let mut conn = self.server(port).try_conn(Duration::from_secs(2)).ok()?;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .ok()?;
        info.lines()
            .find_map(|l| l.trim().strip_prefix("role:"))
            .map(str::to_owned)
    }

    /// Normal client connections on the server at `port`, other than the
    /// one asking and the sentinels' own command links (named
    /// `sentinel-<id>-cmd`; a sentinel that finds the server as a replica
    /// opens one within its 10 s `INFO` period).
    pub fn normal_clients(&self, port: u16) -> usize {
        self.server(port)
            .client_list()
            .iter()
            .filter(|c| {
                c.contains("flags=N")
                    && !c.contains("cmd=client|list")
                    && !c.contains(" name=sentinel-")
            })
            .count()
    }

    /// Waits until every sentinel names a primary other than `old` and
    /// that server says it is a primary; returns its port.
    pub fn wait_failover(&self, old: u16, timeout: Duration) -> u16 {
        let mut new = 0;
        wait_until(timeout, "the sentinels fail over to the replica", || {
            let ports: Vec<Option<u16>> = self.sentinels.iter().map(|s| s.master_port()).collect();
            let Some(Some(first)) = ports.first().copied() else {
                return false;
            };
            if first == old || ports.iter().any(|p| *p != Some(first)) {
                return false;
            }
            new = first;
            self.role(first).as_deref() == Some("master")
        });
        new
    }
}
