//! Helpers shared by the behaviour bodies: namespaces, short test configs,
//! the names redlease stores in Redis, and threads joined within a bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redlease::{AcquireOptions, Config, Error};
use sha2::{Digest, Sha256};

use super::front::Front;
use crate::support::RedisServer;

/// The bound on every wait for something that should happen promptly
/// (a thread finishing, a waiter showing up in the stats).
pub(crate) const BOUND: Duration = Duration::from_secs(10);

/// A namespace no other test uses: `t-<topic>-<pid>-<n>`.
pub(crate) fn namespace(topic: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("t-{topic}-{}-{n}", std::process::id())
}

/// A config with short defaults that keep the suite fast: lease 5 s,
/// wait 5 s, command timeout 1 s, shutdown timeout 2 s.
pub(crate) fn config(ns: &str) -> Config {
    Config::new(ns)
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(5))
        .command_timeout(Duration::from_secs(1))
        .shutdown_timeout(Duration::from_secs(2))
}

/// [`config`] with safety polls (30 s) far beyond [`BOUND`], the wait:
/// within the bound only a notification or a hand-over moves a key.
pub(crate) fn polls_off(ns: &str) -> Config {
    config(ns)
        .poll_interval(Duration::from_secs(30))
        .notify_poll_interval(Duration::from_secs(30))
        .wait(BOUND)
}

/// Connects a front end to `server`, panicking with the error code.
pub(crate) fn connect<F: Front>(server: &RedisServer, config: Config) -> F {
    F::connect(&server.url(), config)
        .unwrap_or_else(|e| panic!("connect to the test redis: {} ({e})", e.code()))
}

/// Options for a single try.
pub(crate) fn no_wait() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::ZERO)
}

/// Options with this wait.
pub(crate) fn waiting(wait: Duration) -> AcquireOptions {
    AcquireOptions::new().wait(wait)
}

/// Options with this lease.
pub(crate) fn leased(lease: Duration) -> AcquireOptions {
    AcquireOptions::new().lease(lease)
}

/// Unwraps an acquire, naming the error code on failure.
pub(crate) fn granted<L>(result: Result<L, Error>, what: &str) -> L {
    result.unwrap_or_else(|e| panic!("{what}: expected a lease, got {} ({e:?})", e.code()))
}

/// Unwraps an expected error.
pub(crate) fn refused<L>(result: Result<L, Error>, what: &str) -> Error {
    match result {
        Ok(_) => panic!("{what}: expected an error, got a lease"),
        Err(e) => e,
    }
}

/// The lowercase hex SHA-256 of a key, as used in stored names.
pub(crate) fn key_sha(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `<ns>:lock:{<sha>}`
pub(crate) fn lock_name(ns: &str, key: &str) -> String {
    format!("{ns}:lock:{{{}}}", key_sha(key))
}

/// `<ns>:lock-fence:{<sha>}`
pub(crate) fn fence_name(ns: &str, key: &str) -> String {
    format!("{ns}:lock-fence:{{{}}}", key_sha(key))
}

/// `GET name`.
pub(crate) fn get(server: &RedisServer, name: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(name)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("GET on the test redis: {e}"))
}

/// `PTTL name` (-2 when missing, -1 without expiry).
pub(crate) fn pttl(server: &RedisServer, name: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(name)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("PTTL on the test redis: {e}"))
}

/// The names stored for namespace `ns` besides its key-names marker
/// (which every locker records at connect).
pub(crate) fn stored_names(server: &RedisServer, ns: &str) -> Vec<String> {
    let marker = format!("{ns}:key-names");
    let mut names = server.keys(&format!("{ns}:*"));
    names.retain(|name| *name != marker);
    names
}

/// Whether `name` exists.
pub(crate) fn exists(server: &RedisServer, name: &str) -> bool {
    !server.keys(name).is_empty()
}

/// The owner token of the lock on `key`: the stored value's part before ':'.
pub(crate) fn token_of(server: &RedisServer, ns: &str, key: &str) -> String {
    let value = get(server, &lock_name(ns, key))
        .unwrap_or_else(|| panic!("no lock stored for the key in namespace {ns}"));
    let (token, fence) = value
        .split_once(':')
        .unwrap_or_else(|| panic!("lock value is not <token>:<fence>: {value:?}"));
    assert_eq!(token.len(), 32, "a 128-bit token in hex: {value:?}");
    assert!(fence.parse::<u64>().is_ok(), "fence part: {value:?}");
    token.to_owned()
}

/// The server's clock (`TIME`) in unix milliseconds.
pub(crate) fn server_time_ms(server: &RedisServer) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("TIME on the test redis: {e}"));
    secs * 1000 + micros / 1000
}

/// Waits until `cond` holds on the locker's stats (within [`BOUND`]).
pub(crate) fn wait_for_stats<F: Front>(
    locker: &F,
    what: &str,
    cond: impl Fn(&redlease::Stats) -> bool,
) {
    crate::support::wait_until(BOUND, what, || cond(&locker.stats()));
}

/// A thread whose result is collected within a bound, so that a stranded
/// waiter fails its test instead of hanging it.
pub(crate) struct Bounded<T> {
    what: String,
    rx: mpsc::Receiver<T>,
    handle: Option<JoinHandle<()>>,
}

/// Runs `f` on a new thread named `what`.
pub(crate) fn spawn<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Bounded<T> {
    let (tx, rx) = mpsc::channel();
    let handle = thread::Builder::new()
        .name(what.to_owned())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    Bounded {
        what: what.to_owned(),
        rx,
        handle: Some(handle),
    }
}

impl<T> Bounded<T> {
    /// The thread's result; panics when it takes longer than `bound`, and
    /// re-raises the thread's own panic.
    pub(crate) fn join_within(mut self, bound: Duration) -> T {
        match self.rx.recv_timeout(bound) {
            Ok(value) => {
                if let Some(handle) = self.handle.take() {
                    let _ = handle.join();
                }
                value
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} did not finish within {bound:?}", self.what)
            }
            Err(RecvTimeoutError::Disconnected) => match self.handle.take().map(JoinHandle::join) {
                Some(Err(payload)) => std::panic::resume_unwind(payload),
                _ => panic!("{} ended without a result", self.what),
            },
        }
    }
}

/// The standalone release channel: `<ns>:lock-released`.
pub(crate) fn release_channel(ns: &str) -> String {
    format!("{ns}:lock-released")
}

/// `PUBSUB NUMSUB channel`: how many connections subscribe to `channel`.
pub(crate) fn numsub(server: &RedisServer, channel: &str) -> u64 {
    let (name, count): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("PUBSUB NUMSUB on the test redis: {e}"));
    assert_eq!(name, channel, "NUMSUB answers for the channel asked");
    count
}

/// Lets `d` pass: models work, or a delay before a fault is injected.
/// Never a synchronisation (wait for an event with `wait_until` instead).
#[allow(
    clippy::disallowed_methods,
    reason = "a modelled delay, not a synchronisation"
)]
pub(crate) fn let_pass(d: Duration) {
    thread::sleep(d);
}

/// A config for cluster tests: a long lease, so that no TTL runs out
/// during a test, and safety polls so slow (30 s) that within the 10 s bound
/// only a notification can hand a key over.
#[allow(dead_code, reason = "only the cluster test binaries")]
pub(crate) fn cluster_config(ns: &str) -> Config {
    Config::new(ns)
        .lease(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .command_timeout(Duration::from_millis(1500))
        .shutdown_timeout(Duration::from_secs(3))
        .poll_interval(Duration::from_secs(30))
        .notify_poll_interval(Duration::from_secs(30))
}

/// `F::connect_cluster` to the test cluster; panics on failure.
#[allow(dead_code, reason = "only the cluster test binaries")]
pub(crate) fn connect_cluster<F: super::front::ClusterFront>(
    cluster: &crate::support::cluster::RedisCluster,
    config: Config,
) -> std::sync::Arc<F> {
    std::sync::Arc::new(
        F::connect_cluster(&cluster.nodes(), config)
            .unwrap_or_else(|e| panic!("connect to the test cluster: {} ({e:?})", e.code())),
    )
}
