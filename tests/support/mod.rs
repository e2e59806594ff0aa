//! Shared integration-test support: throw-away `redis-server` processes on
//! free loopback ports, plus small helpers to inspect and poke them.
//!
//! Include it from a test file with `mod support;` (or, outside `tests/`,
//! with `#[path = "../tests/support/mod.rs"] mod support;`, as
//! `examples/fencing_torture.rs` does). Every test binary uses a different
//! subset of these helpers, hence the blanket `dead_code` allow.
//!
//! The servers never touch the system Redis on 6379: each one listens on a
//! port picked by the kernel, keeps its files in a fresh temporary directory,
//! and is killed (SIGKILL + `wait`) when its [`RedisServer`] is dropped, even
//! while paused. The child stays in the test's process group, so nextest's
//! timeout termination takes it down too.
#![allow(dead_code, unreachable_pub)]
// clippy.toml forbids `Instant::now` / `thread::sleep` for the sans-IO core;
// test scaffolding polls startups and conditions that have no event to await.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub mod cluster;
pub mod monitor;
pub mod proxy;
pub mod script_source;
pub mod sentinel;

/// How long a server (or a replica link) gets to come up.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Poll interval while waiting for PING during startup.
const STARTUP_POLL: Duration = Duration::from_millis(10);
/// How many fresh ports to try when a server fails to start.
const START_ATTEMPTS: usize = 5;
/// Read/write/connect timeout of connections made by [`RedisServer::conn`].
const CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// Log file of every server, inside its temp dir.
const LOG_FILE: &str = "redis.log";

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Builder for [`RedisServer`]; see [`RedisServer::builder`].
#[derive(Debug, Default, Clone)]
pub struct RedisServerBuilder {
    args: Vec<String>,
    replica_of: Option<u16>,
    /// The primary's TLS port, for [`tls_replication`](Self::tls_replication).
    primary_tls_port: Option<u16>,
    tls: Option<Arc<TlsMaterial>>,
    tls_replication: bool,
    password: Option<String>,
}

impl RedisServerBuilder {
    /// Appends one extra `redis-server` argument (after the default ones, so
    /// it can override them), e.g. `.arg("--maxmemory-policy").arg("allkeys-lru")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several extra arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Makes the server a replica of `primary` (`--replicaof 127.0.0.1 <port>`).
    /// [`start`](Self::start) then also waits for `master_link_status:up`.
    pub fn replica_of(mut self, primary: &RedisServer) -> Self {
        self.replica_of = Some(primary.port());
        self.primary_tls_port = primary.tls_port_if_any();
        self
    }

    /// Replication over TLS (`--tls-replication yes`): a replica links to
    /// its primary's TLS port, and announces its own TLS port (what
    /// Sentinel then names). Needs [`tls`](Self::tls) or
    /// [`tls_with`](Self::tls_with), on the primary too.
    pub fn tls_replication(mut self) -> Self {
        self.tls_replication = true;
        self
    }

    /// Wants `password` from clients and replicas (`--requirepass`, and
    /// `--masterauth` for when it is or becomes a replica). The URLs and
    /// inspection helpers of the [`RedisServer`] carry it.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self.args.extend([
            "--requirepass".to_owned(),
            password.to_owned(),
            "--masterauth".to_owned(),
            password.to_owned(),
        ]);
        self
    }

    /// Also listens with TLS on a second free port (`--tls-port`), with a
    /// CA and a server certificate for `127.0.0.1`/`localhost` made at
    /// start (rcgen) and kept in their own temp dir; clients are not asked
    /// for certificates. The plain port stays, for the inspection helpers.
    /// See [`RedisServer::tls_url`] and [`RedisServer::ca_pem`].
    pub fn tls(self) -> Self {
        self.tls_with(&TlsMaterial::generate())
    }

    /// As [`tls`](Self::tls), with certificates shared with other servers
    /// (the nodes of a TLS cluster must trust each other).
    pub fn tls_with(mut self, material: &Arc<TlsMaterial>) -> Self {
        self.tls = Some(material.clone());
        self
    }

    /// Starts the server and waits until it answers PING (and, for a replica,
    /// until its link to the primary is up). Panics on failure.
    pub fn start(self) -> RedisServer {
        self.try_start().unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// [`start`](Self::start), but a server that does not come up is an
    /// error (the reasons, with log tails) instead of a panic. A replica
    /// whose link does not come up still panics.
    pub fn try_start(mut self) -> Result<RedisServer, String> {
        let mut replica_of = self.replica_of;
        if self.tls_replication {
            self.args
                .extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            if replica_of.is_some() {
                let tls_port = self.primary_tls_port;
                replica_of = Some(tls_port.expect("tls_replication: the primary has no TLS port"));
            }
        }
        if let Some(material) = self.tls {
            return RedisServer::launch_tls(self.args, replica_of, material, self.password);
        }
        RedisServer::launch(self.args, replica_of, self.password)
    }
}

struct Running {
    child: Child,
    dir: PathBuf,
}

/// A `redis-server` child process on `127.0.0.1:<free port>`.
///
/// All methods take `&self`, so a server can be shared between threads
/// (`&server` in scoped threads, or `Arc<RedisServer>`).
pub struct RedisServer {
    port: u16,
    extra_args: Vec<String>,
    replica_of: Option<u16>,
    running: Mutex<Running>,
    paused: AtomicBool,
    tls: Option<TlsFiles>,
    password: Option<String>,
}

/// The TLS side of a server started with [`RedisServerBuilder::tls`].
#[derive(Debug)]
struct TlsFiles {
    port: u16,
    material: Arc<TlsMaterial>,
}

/// A CA and a server certificate it signed for `127.0.0.1` and
/// `localhost` (rcgen), as `ca.crt`, `server.crt` and `server.key` in a
/// temp dir removed when the last holder drops it.
#[derive(Debug)]
pub struct TlsMaterial {
    dir: PathBuf,
    ca_pem: String,
}

impl TlsMaterial {
    /// Makes fresh certificates; panics on failure.
    pub fn generate() -> Arc<TlsMaterial> {
        let dir = fresh_dir(0);
        match write_tls_files(&dir) {
            Ok(ca_pem) => Arc::new(TlsMaterial { dir, ca_pem }),
            Err(msg) => {
                let _ = fs::remove_dir_all(&dir);
                panic!("TLS test certificates: {msg}")
            }
        }
    }

    /// The CA's PEM.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// The CA's PEM file.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    fn args(&self, tls_port: u16) -> Vec<String> {
        let file = |name: &str| self.dir.join(name).display().to_string();
        vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            file("server.crt"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]
    }
}

impl Drop for TlsMaterial {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .field("replica_of", &self.replica_of)
            .field("paused", &self.paused.load(Ordering::SeqCst))
            .finish()
    }
}

impl RedisServer {
    /// Starts a standalone server with the default arguments.
    pub fn start() -> RedisServer {
        Self::builder().start()
    }

    /// A builder for extra arguments and replicas.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The TCP port the server listens on (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://{}127.0.0.1:{}/0", self.auth(), self.port)
    }

    /// `:<password>@` for a server started with
    /// [`RedisServerBuilder::password`], else nothing.
    fn auth(&self) -> String {
        self.password
            .as_ref()
            .map_or_else(String::new, |p| format!(":{p}@"))
    }

    /// `rediss://127.0.0.1:<tls port>/0`; panics unless started with
    /// [`RedisServerBuilder::tls`].
    pub fn tls_url(&self) -> String {
        format!(
            "rediss://{}127.0.0.1:{}/0",
            self.auth(),
            self.tls_files().port
        )
    }

    /// The TLS port, if started with [`RedisServerBuilder::tls`].
    pub fn tls_port_if_any(&self) -> Option<u16> {
        self.tls.as_ref().map(|t| t.port)
    }

    /// The TLS port; panics unless started with [`RedisServerBuilder::tls`].
    pub fn tls_port(&self) -> u16 {
        self.tls_files().port
    }

    /// The PEM of the CA that signed the server's certificate; panics
    /// unless started with [`RedisServerBuilder::tls`].
    pub fn ca_pem(&self) -> String {
        self.tls_files().material.ca_pem()
    }

    /// The certificates this server uses; panics unless started with
    /// [`RedisServerBuilder::tls`].
    pub fn tls_material(&self) -> Arc<TlsMaterial> {
        self.tls_files().material.clone()
    }

    fn tls_files(&self) -> &TlsFiles {
        self.tls.as_ref().expect("server started without .tls()")
    }

    /// The pid of the current server process (changes on restart).
    pub fn pid(&self) -> u32 {
        self.lock().child.id()
    }

    /// The server's temp directory (holds `redis.log`; changes on restart).
    pub fn dir(&self) -> PathBuf {
        self.lock().dir.clone()
    }

    /// A `redis::Client` for [`url`](Self::url).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("redis::Client::open on a test server URL")
    }

    /// A fresh connection with 5 s connect, read and write timeouts.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn(CONN_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to test redis on port {}: {e}", self.port))
    }

    /// A fresh connection with `timeout` as connect, read and write timeout.
    pub fn try_conn(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        let conn = self.client().get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(conn)
    }

    /// SIGSTOPs the server: connections are still accepted by the kernel, but
    /// nothing is answered until [`resume`](Self::resume). Dropping a paused
    /// server still kills it.
    pub fn pause(&self) {
        let pid = self.pid();
        send_signal("-STOP", pid);
        self.paused.store(true, Ordering::SeqCst);
    }

    /// SIGCONTs a paused server.
    pub fn resume(&self) {
        let pid = self.pid();
        send_signal("-CONT", pid);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Pauses the server and returns a guard that resumes it when dropped
    /// (including during a panic unwind).
    pub fn pause_guard(&self) -> PauseGuard<'_> {
        self.pause();
        PauseGuard { server: self }
    }

    /// Whether the server is currently paused by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// Kills the server (SIGKILL, so nothing is saved) and starts a new one on
    /// the same port with the same arguments; all data is lost. Waits for
    /// PING (and for the replica link, for a replica). Panics on failure.
    pub fn restart(&self) {
        // The port was ours a moment ago; redis sets SO_REUSEADDR, so
        // TIME_WAIT sockets do not block the rebind. One try is enough.
        if let Err(msg) = self.try_restart(1, Duration::ZERO) {
            panic!("restarting redis-server on port {}: {msg}", self.port);
        }
    }

    /// Like [`restart`](Self::restart), but the port stays closed for `down`
    /// between the kill and the new start (connects are refused meanwhile):
    /// a short outage rather than an instant restart.
    pub fn restart_after(&self, down: Duration) {
        if let Err(msg) = self.try_restart_after(down, 1, Duration::ZERO) {
            panic!("restarting redis-server on port {}: {msg}", self.port);
        }
    }

    /// [`restart`](Self::restart), but starting the new server is tried up
    /// to `attempts` times, `backoff` apart (the port may be taken for a
    /// moment, e.g. as the local port of a client's outgoing connection),
    /// and a server that does not come up is an error instead of a panic.
    /// A replica whose link does not come up still panics.
    pub fn try_restart(&self, attempts: usize, backoff: Duration) -> Result<(), String> {
        self.try_restart_after(Duration::ZERO, attempts, backoff)
    }

    fn try_restart_after(
        &self,
        down: Duration,
        attempts: usize,
        backoff: Duration,
    ) -> Result<(), String> {
        let mut running = self.lock();
        kill_and_reap(&mut running.child);
        thread::sleep(down);
        self.paused.store(false, Ordering::SeqCst);
        let _ = fs::remove_dir_all(&running.dir);
        let args = base_args(self.port, &self.extra_args, self.replica_of);
        let mut result = Err("no attempt".to_owned());
        for attempt in 0..attempts.max(1) {
            if attempt > 0 {
                thread::sleep(backoff);
            }
            result = try_start(self.port, &args, self.password.as_deref());
            if result.is_ok() {
                break;
            }
        }
        *running = result?;
        drop(running);
        if self.replica_of.is_some() {
            self.wait_replica_link_up();
        }
        Ok(())
    }

    /// Runs one command on a fresh connection and returns the raw reply.
    /// Panics on any error.
    pub fn query(&self, cmd: &redis::Cmd) -> redis::Value {
        let mut conn = self.conn();
        cmd.query(&mut conn)
            .unwrap_or_else(|e| panic!("{cmd:?} on test redis port {}: {e}", self.port))
    }

    /// Runs one command on a fresh connection, converting the reply.
    fn query_as<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut conn = self.conn();
        cmd.query(&mut conn)
            .unwrap_or_else(|e| panic!("{cmd:?} on test redis port {}: {e}", self.port))
    }

    /// `INFO <section>` as text.
    pub fn info(&self, section: &str) -> String {
        self.query_as(redis::cmd("INFO").arg(section))
    }

    /// `INFO commandstats` parsed into `{command: calls}`, e.g.
    /// `{"evalsha": 2, "script|load": 1, ...}`. The `INFO` issued here is not
    /// counted in its own reply, but earlier helper calls are: right after
    /// [`reset_stats`](Self::reset_stats) the map holds `"config|resetstat": 1`.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        parse_commandstats(&self.info("commandstats"))
    }

    /// `CONFIG RESETSTAT` (zeroes commandstats among others).
    pub fn reset_stats(&self) {
        let _: () = self.query_as(redis::cmd("CONFIG").arg("RESETSTAT"));
    }

    /// `CLIENT KILL TYPE <kind>` (`normal`, `pubsub`, `replica`, `master`);
    /// returns how many clients were killed. Redis's default `SKIPME yes`
    /// spares the helper's own connection.
    pub fn client_kill_type(&self, kind: &str) -> u64 {
        self.query_as(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg(kind))
    }

    /// `CLIENT LIST`, one line per client (includes the helper's own connection).
    pub fn client_list(&self) -> Vec<String> {
        let text: String = self.query_as(redis::cmd("CLIENT").arg("LIST"));
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// `KEYS <pattern>`, sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = self.query_as(redis::cmd("KEYS").arg(pattern));
        keys.sort();
        keys
    }

    /// `FLUSHALL`.
    pub fn flushall(&self) {
        let _: () = self.query_as(&redis::cmd("FLUSHALL"));
    }

    /// `SCRIPT FLUSH`.
    pub fn script_flush(&self) {
        let _: () = self.query_as(redis::cmd("SCRIPT").arg("FLUSH"));
    }

    /// `CONFIG SET <key> <value>`.
    pub fn config_set(&self, key: &str, value: &str) {
        let _: () = self.query_as(redis::cmd("CONFIG").arg("SET").arg(key).arg(value));
    }

    /// `CONFIG GET <key>` for a single (non-glob) parameter.
    pub fn config_get(&self, key: &str) -> Option<String> {
        let map: HashMap<String, String> = self.query_as(redis::cmd("CONFIG").arg("GET").arg(key));
        map.get(key).cloned()
    }

    /// Whether `INFO replication` shows `master_link_status:up`.
    pub fn replica_link_up(&self) -> bool {
        self.try_conn(Duration::from_secs(1))
            .and_then(|mut c| {
                redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut c)
            })
            .map(|info| info.lines().any(|l| l.trim() == "master_link_status:up"))
            .unwrap_or(false)
    }

    /// The last `max_bytes` of the server's log.
    pub fn log_tail(&self, max_bytes: u64) -> String {
        log_tail(&self.lock().dir, max_bytes)
    }

    fn wait_replica_link_up(&self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while !self.replica_link_up() {
            if Instant::now() >= deadline {
                panic!(
                    "replica on port {} did not reach master_link_status:up with 127.0.0.1:{} within {:?}\n\
                     --- replica INFO replication ---\n{}\n--- replica log tail ---\n{}",
                    self.port,
                    self.replica_of.unwrap_or_default(),
                    STARTUP_TIMEOUT,
                    self.try_conn(Duration::from_secs(1))
                        .and_then(|mut c| redis::cmd("INFO").arg("replication").query::<String>(&mut c))
                        .unwrap_or_else(|e| format!("<INFO failed: {e}>")),
                    self.log_tail(4096),
                );
            }
            thread::sleep(STARTUP_POLL);
        }
    }

    fn launch(
        extra_args: Vec<String>,
        replica_of: Option<u16>,
        password: Option<String>,
    ) -> Result<RedisServer, String> {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let args = base_args(port, &extra_args, replica_of);
            match try_start(port, &args, password.as_deref()) {
                Ok(running) => {
                    let server = RedisServer {
                        port,
                        extra_args,
                        replica_of,
                        running: Mutex::new(running),
                        paused: AtomicBool::new(false),
                        tls: None,
                        password: password.clone(),
                    };
                    if replica_of.is_some() {
                        server.wait_replica_link_up();
                    }
                    return Ok(server);
                }
                Err(msg) => failures.push(format!("port {port}: {msg}")),
            }
        }
        Err(format!(
            "could not start redis-server after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        ))
    }

    fn launch_tls(
        extra_args: Vec<String>,
        replica_of: Option<u16>,
        material: Arc<TlsMaterial>,
        password: Option<String>,
    ) -> Result<RedisServer, String> {
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let tls_port = free_port();
            let mut args = extra_args.clone();
            args.extend(material.args(tls_port));
            let mut server = match RedisServer::launch(args, replica_of, password.clone()) {
                Ok(server) => server,
                Err(msg) => {
                    failures.push(msg);
                    continue;
                }
            };
            match tls_ping(&material.ca_file(), tls_port, password.as_deref()) {
                Ok(()) => {
                    server.tls = Some(TlsFiles {
                        port: tls_port,
                        material,
                    });
                    return Ok(server);
                }
                Err(msg) => failures.push(format!("tls port {tls_port}: {msg}")),
            }
        }
        Err(format!(
            "could not start a TLS redis-server after {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        // A panic while holding the lock must not stop Drop from killing the child.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let running = self.running.get_mut().unwrap_or_else(|p| p.into_inner());
        // SIGKILL works on a SIGSTOPped process too; `wait` reaps it.
        kill_and_reap(&mut running.child);
        let _ = fs::remove_dir_all(&running.dir);
    }
}

/// Writes `ca.crt`, `server.crt` and `server.key` (a CA, and a server
/// certificate it signed for `127.0.0.1` and `localhost`) into `dir`;
/// returns the CA's PEM.
fn write_tls_files(dir: &Path) -> Result<String, String> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let err = |e: rcgen::Error| format!("rcgen: {e}");
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "redlease test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().map_err(err)?;
    let mut server_params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .map_err(err)?;
    server_params
        .distinguished_name
        .push(DnType::CommonName, "redlease test server");
    let server_cert = server_params.signed_by(&server_key, &issuer).map_err(err)?;
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text).map_err(|e| format!("write {name}: {e}"))
    };
    let ca_pem = ca_cert.pem();
    write("ca.crt", &ca_pem)?;
    write("server.crt", &server_cert.pem())?;
    write("server.key", &server_key.serialize_pem())?;
    Ok(ca_pem)
}

/// PING over TLS with `redis-cli --tls --cacert`, polled until PONG or
/// [`STARTUP_TIMEOUT`] (the server already answered on its plain port).
fn tls_ping(ca: &Path, port: u16, password: Option<&str>) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        let mut cli = Command::new("redis-cli");
        if let Some(password) = password {
            cli.args(["--no-auth-warning", "-a", password]);
        }
        let out = cli
            .args(["--tls", "--cacert"])
            .arg(ca)
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "PING"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run redis-cli: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && stdout.trim() == "PONG" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no PONG over TLS within {STARTUP_TIMEOUT:?}: {} {}",
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        thread::sleep(STARTUP_POLL);
    }
}

/// Resumes the server when dropped; see [`RedisServer::pause_guard`].
#[derive(Debug)]
pub struct PauseGuard<'a> {
    server: &'a RedisServer,
}

impl Drop for PauseGuard<'_> {
    fn drop(&mut self) {
        if self.server.is_paused() {
            self.server.resume();
        }
    }
}

/// Polls `cond` every 5 ms until it returns true; panics with `what` after
/// `timeout`. For conditions with no event to await (e.g. "key gone in redis").
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    if !polled_until(timeout, &mut cond) {
        panic!("timed out after {timeout:?} waiting for: {what}");
    }
}

/// Polls `cond` every 5 ms until it returns true (`true`) or `timeout`
/// passed (`false`), for a caller that says itself what was left.
pub fn polled_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Parses `INFO commandstats` text into `{command: calls}`.
pub fn parse_commandstats(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn base_args(port: u16, extra: &[String], replica_of: Option<u16>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "local",
        "--protected-mode",
        "no",
        // Redis 7 defaults to a 5 s delay before a diskless full sync.
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(primary) = replica_of {
        args.extend([
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            primary.to_string(),
        ]);
    }
    args.extend(extra.iter().cloned());
    args
}

/// A port that was free a moment ago (bind port 0, read it, release it).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 to pick a free port")
        .port()
}

fn fresh_dir(port: u16) -> PathBuf {
    let n = DIR_COUNTER.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("redlease-test-{}-{n}-{port}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// Spawns `redis-server` and waits for it to answer PING as *this* process
/// (checked through `INFO server`'s `process_id`, so a concurrent server
/// that won a port race is not mistaken for ours). On failure the child is
/// killed, the temp dir removed, and the reason returned with the log tail.
fn try_start(port: u16, args: &[String], password: Option<&str>) -> Result<Running, String> {
    let dir = fresh_dir(port);
    let log_path = dir.join(LOG_FILE);
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("open {}: {e}", log_path.display()))?;
    let log_err = log.try_clone().map_err(|e| format!("dup log fd: {e}"))?;
    let spawned = Command::new("redis-server")
        .args(args)
        .arg("--dir")
        .arg(&dir)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let _ = fs::remove_dir_all(&dir);
            return Err(format!("spawn redis-server (is it installed?): {e}"));
        }
    };
    let fail = |child: &mut Child, why: String| {
        kill_and_reap(child);
        let msg = format!("{why}\n--- redis log tail ---\n{}", log_tail(&dir, 4096));
        let _ = fs::remove_dir_all(&dir);
        Err(msg)
    };
    let pid = child.id();
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let auth = password.map_or_else(String::new, |p| format!(":{p}@"));
    let url = format!("redis://{auth}127.0.0.1:{port}/0");
    let client = redis::Client::open(url.as_str()).expect("valid URL");
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                return fail(&mut child, format!("redis-server exited early: {status}"))
            }
            Ok(None) => {}
            Err(e) => return fail(&mut child, format!("try_wait on redis-server: {e}")),
        }
        if let Some(server_pid) = ping_and_pid(&client) {
            if server_pid == pid {
                return Ok(Running { child, dir });
            }
            return fail(
                &mut child,
                format!(
                    "port {port} is served by another redis (pid {server_pid}), not ours ({pid})"
                ),
            );
        }
        if Instant::now() >= deadline {
            return fail(
                &mut child,
                format!("redis-server (pid {pid}) did not answer PING on {url} within {STARTUP_TIMEOUT:?}"),
            );
        }
        thread::sleep(STARTUP_POLL);
    }
}

/// PING on a fresh connection; on PONG, the server's `process_id`.
fn ping_and_pid(client: &redis::Client) -> Option<u32> {
    let timeout = Duration::from_millis(500);
    let mut conn = client.get_connection_with_timeout(timeout).ok()?;
    conn.set_read_timeout(Some(timeout)).ok()?;
    conn.set_write_timeout(Some(timeout)).ok()?;
    let pong: String = redis::cmd("PING").query(&mut conn).ok()?;
    if pong != "PONG" {
        return None;
    }
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|l| l.trim().strip_prefix("process_id:"))
        .and_then(|p| p.parse().ok())
}

fn kill_and_reap(child: &mut Child) {
    // `Child::kill` is SIGKILL; it is an error only if the child was
    // already reaped, which `wait` then reports harmlessly.
    let _ = child.kill();
    let _ = child.wait();
}

fn send_signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .unwrap_or_else(|e| panic!("run `kill {sig} {pid}`: {e}"));
    assert!(status.success(), "`kill {sig} {pid}` failed: {status}");
}

fn log_tail(dir: &Path, max_bytes: u64) -> String {
    let path = dir.join(LOG_FILE);
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) => return format!("<cannot open {}: {e}>", path.display()),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}
