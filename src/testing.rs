//! A throwaway `redis-server` for your own tests (feature `test-server`),
//! so that they need not start one themselves.
//!
//! [`TestServer::start`] runs the `redis-server` found on `PATH` on a free
//! loopback port, without persistence (no RDB snapshots, no AOF; its
//! working directory is a fresh temporary one), waits until it answers
//! `PING` (at most 10 s), and gives its URL. Dropping it kills the server,
//! waits for it to exit and removes the directory. A missing binary is an
//! error ([`StartError::NotFound`]), not a panic, so a test can skip or
//! fail with a clear message.
//!
//! ```
//! use redlease::{blocking::Locker, testing::TestServer, Config};
//!
//! let server = TestServer::start()?;
//! let locker = Locker::connect(server.url(), Config::new("my-tests"))?;
//! let lease = locker.acquire("job:42")?;
//! assert!(lease.is_valid());
//! lease.release()?;
//! locker.shutdown()?;
//! drop(server); // killed and waited for
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Each test can start its own server: they share nothing, so tests run in
//! parallel without seeing each other's keys. Use it in tests only: the
//! server has no password and keeps its data in memory.

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a started server gets to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `PING` is tried again while the server prints nothing.
const READY_TICK: Duration = Duration::from_millis(50);
/// Fresh ports tried when the server exits at start (another process may
/// have taken the port between its choice and the server's bind).
const START_ATTEMPTS: usize = 5;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// Why [`TestServer::start`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The `redis-server` binary was not found.
    #[error(
        "redis-server was not found on PATH: install Redis (Debian/Ubuntu: \
         apt-get install redis-server; macOS: brew install redis) or pass its \
         path to TestServer::start_with"
    )]
    NotFound,
    /// The binary, its temporary directory or a free port could not be had.
    #[error("redis-server could not be started: {0}")]
    Io(#[source] io::Error),
    /// The server exited before it answered `PING`, at every attempt.
    #[error("redis-server exited before it answered PING ({0})")]
    Exited(ExitStatus),
    /// The server did not answer `PING` in time; it was killed.
    #[error("redis-server did not answer PING within {0:?}")]
    NotReady(Duration),
}

/// A `redis-server` on a free loopback port, killed when dropped.
pub struct TestServer {
    child: Child,
    port: u16,
    url: String,
    dir: PathBuf,
}

impl TestServer {
    /// Starts the `redis-server` found on `PATH`.
    pub fn start() -> Result<TestServer, StartError> {
        TestServer::start_with("redis-server")
    }

    /// Starts the `redis-server` binary `program` (a path, or a name looked
    /// up on `PATH`).
    pub fn start_with(program: impl AsRef<OsStr>) -> Result<TestServer, StartError> {
        let program = program.as_ref();
        let mut exited = None;
        for _ in 0..START_ATTEMPTS {
            match TestServer::try_start(program)? {
                Ok(server) => return Ok(server),
                Err(status) => exited = Some(status),
            }
        }
        Err(exited.map_or(StartError::NotReady(READY_TIMEOUT), StartError::Exited))
    }

    /// One attempt on a fresh port: the server, or its exit status when it
    /// exited before answering (a port taken meanwhile, say).
    fn try_start(program: &OsStr) -> Result<Result<TestServer, ExitStatus>, StartError> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map_err(StartError::Io)?
            .port();
        let dir = std::env::temp_dir().join(format!(
            "redlease-test-server-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(StartError::Io)?;
        let spawned = Command::new(program)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--logfile", ""])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let mut child = spawned.map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            match e.kind() {
                io::ErrorKind::NotFound => StartError::NotFound,
                _ => StartError::Io(e),
            }
        })?;
        // Each line the server logs (the last one at start is "Ready to
        // accept connections") is a moment to try PING; the reader also
        // keeps the pipe drained for as long as the server runs.
        let (lines, printed) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for _ in BufReader::new(stdout).lines() {
                    if lines.send(()).is_err() {
                        break;
                    }
                }
            });
        }
        let mut server = TestServer {
            child,
            port,
            url: format!("redis://127.0.0.1:{port}/0"),
            dir,
        };
        #[expect(clippy::disallowed_methods, reason = "the bound on the start")]
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = server.child.try_wait().map_err(StartError::Io)? {
                return Ok(Err(status));
            }
            if server.answers_ping() {
                return Ok(Ok(server));
            }
            #[expect(clippy::disallowed_methods, reason = "the bound on the start")]
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StartError::NotReady(READY_TIMEOUT));
            }
            match printed.recv_timeout(left.min(READY_TICK)) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                // Its output closed: it is exiting, which the next
                // `try_wait` sees; until then there is no line to wait for.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = server.child.wait().map_err(StartError::Io)?;
                    return Ok(Err(status));
                }
            }
        }
    }

    fn answers_ping(&self) -> bool {
        redis::Client::open(self.url.as_str())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(1)))
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_ok()
    }

    /// The server's URL, `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The server's loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// Leaves the port out, as every other Debug form leaves out addresses.
impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer").finish_non_exhaustive()
    }
}
