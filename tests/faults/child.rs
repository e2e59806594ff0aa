//! A holder in another process: the fault matrix re-runs this test binary
//! with `--exact holder_child_process --ignored` and environment variables
//! that tell the child what to hold. The child acquires the key, prints
//! its fence on a marker line, and holds it until it is SIGKILLed (or its
//! parent goes away, closing its stdin).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use redlease::{AcquireOptions, Config};

use crate::behaviour::common::BOUND;
use crate::behaviour::front::Front;
use crate::support::RedisServer;

const ENV_URL: &str = "REDLEASE_FAULTS_CHILD_URL";
const ENV_NAMESPACE: &str = "REDLEASE_FAULTS_CHILD_NAMESPACE";
const ENV_KEY: &str = "REDLEASE_FAULTS_CHILD_KEY";
const ENV_LEASE_MS: &str = "REDLEASE_FAULTS_CHILD_LEASE_MS";
const ENV_FRONT: &str = "REDLEASE_FAULTS_CHILD_FRONT";
const ENV_WHAT: &str = "REDLEASE_FAULTS_CHILD_WHAT";
const MARKER: &str = "REDLEASE_CHILD_HELD";

/// A child process holding a key; killed (SIGKILL) and reaped on drop.
pub(crate) struct ChildHolder {
    child: Child,
    fence: u64,
}

impl ChildHolder {
    /// SIGKILLs the holder (it never releases) and returns its fence.
    pub(crate) fn kill(mut self) -> u64 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.fence
    }
}

impl Drop for ChildHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The name the child uses for front end `F`.
fn front_name<F: Front>() -> &'static str {
    if std::any::type_name::<F>().contains("Async") {
        "async"
    } else {
        "blocking"
    }
}

/// What a child process holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Hold {
    /// A lock.
    Lock,
    /// A permit of a semaphore of this many permits.
    Permit(u32),
    /// The write lease of a read-write lease.
    Write,
}

impl Hold {
    fn to_env(self) -> String {
        match self {
            Hold::Lock => "lock".into(),
            Hold::Permit(n) => format!("permit:{n}"),
            Hold::Write => "write".into(),
        }
    }

    fn from_env(s: &str) -> Hold {
        match s.split_once(':') {
            Some(("permit", n)) => Hold::Permit(n.parse().expect("a permit count")),
            _ if s == "write" => Hold::Write,
            _ => Hold::Lock,
        }
    }
}

/// Starts a child process that holds `key` with `lease` through front end
/// `F`, and waits (within [`BOUND`]) until it reports its fence.
pub(crate) fn spawn_holder<F: Front>(
    server: &RedisServer,
    ns: &str,
    key: &str,
    lease: Duration,
) -> ChildHolder {
    spawn_holder_of::<F>(server, ns, key, lease, Hold::Lock)
}

/// As [`spawn_holder`], holding `what`.
pub(crate) fn spawn_holder_of<F: Front>(
    server: &RedisServer,
    ns: &str,
    key: &str,
    lease: Duration,
    what: Hold,
) -> ChildHolder {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "holder_child_process",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ENV_URL, server.url())
        .env(ENV_NAMESPACE, ns)
        .env(ENV_KEY, key)
        .env(ENV_LEASE_MS, lease.as_millis().to_string())
        .env(ENV_FRONT, front_name::<F>())
        .env(ENV_WHAT, what.to_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("re-run the test binary as a holder");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest prints `test holder_child_process ... ` first, on the
            // same line.
            if let Some(at) = line.find(MARKER) {
                let _ = tx.send(line[at + MARKER.len()..].trim().parse::<u64>());
            }
        }
    });
    match rx.recv_timeout(BOUND) {
        Ok(Ok(fence)) => ChildHolder { child, fence },
        other => {
            let _ = child.kill();
            let _ = child.wait();
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            panic!("the holder process did not report a fence ({other:?}); stderr:\n{stderr}");
        }
    }
}

/// The child's side: does nothing unless started by [`spawn_holder`].
pub(crate) fn run_holder_if_asked() {
    let Ok(url) = std::env::var(ENV_URL) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set"));
    let lease = Duration::from_millis(var(ENV_LEASE_MS).parse().expect("lease ms"));
    let (ns, key) = (var(ENV_NAMESPACE), var(ENV_KEY));
    let what = Hold::from_env(&std::env::var(ENV_WHAT).unwrap_or_default());
    match var(ENV_FRONT).as_str() {
        "async" => hold::<crate::behaviour::Async>(&url, &ns, &key, lease, what),
        _ => hold::<crate::behaviour::Blocking>(&url, &ns, &key, lease, what),
    }
}

fn hold<F: Front>(url: &str, ns: &str, key: &str, lease: Duration, what: Hold) {
    let locker = F::connect(url, Config::new(ns).lease(lease)).expect("the child connects");
    let free = || AcquireOptions::new().wait(Duration::ZERO);
    // Kept alive (never released) until the process is killed.
    let (fence, _held): (u64, Box<dyn std::any::Any>) = match what {
        Hold::Lock => {
            let held = locker
                .acquire_with(key, free())
                .expect("the child acquires a free key");
            (F::fence(&held).get(), Box::new(held))
        }
        Hold::Permit(permits) => {
            let held = locker
                .acquire_permit(key, permits, free())
                .expect("the child acquires a free permit");
            (F::permit_fence(&held).get(), Box::new(held))
        }
        Hold::Write => {
            let held = locker
                .write_with(key, free())
                .expect("the child acquires a free write lease");
            (F::write_fence(&held).get(), Box::new(held))
        }
    };
    let mut out = std::io::stdout();
    writeln!(out, "{MARKER} {fence}").expect("stdout");
    out.flush().expect("stdout");
    // Held until SIGKILL; if the parent goes away first, stdin closes and
    // the process exits without releasing (the TTL ends the lease).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}
