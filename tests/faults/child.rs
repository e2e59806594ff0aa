//! A holder in another process: the fault matrix re-runs this test binary
//! with `--exact holder_child_process --ignored` and environment variables
//! that tell the child what to hold. The child acquires the key, prints
//! its fence on a marker line, and holds it until it is SIGKILLed (or its
//! parent goes away, closing its stdin).
//!
//! A child can also wait for a held lock ([`spawn_waiter`]): it registers
//! in the key's hand-over queue like any waiting locker, and the parent
//! can SIGSTOP, SIGCONT or SIGKILL it while it waits. A child can lead an
//! election ([`spawn_leader`]): it writes to a fenced store with its term,
//! and when told on stdin writes again and reports what it saw. Or it
//! takes a set of keys as one multi-key lease and releases it, over and over
//! ([`spawn_multi_loop`]), printing a marker line per grant, until the
//! parent SIGKILLs it at some point of the loop. A leader child can lead
//! on a Redis Cluster ([`spawn_cluster_leader`]), with its fenced store
//! on a standalone server. Or it runs candidates of an election in a loop
//! ([`spawn_candidates`]), recording their leaderships on a second Redis
//! (`tests/faults/candidates.rs`), until told to stop on stdin.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use redlease::{AcquireOptions, Config};

use crate::behaviour::common::{let_pass, BOUND};
use crate::behaviour::front::{ClusterFront, Front};
use crate::candidates::{candidate_rounds, candidate_task, Candidate, Counts};
use crate::support::RedisServer;

/// The server the child locks on, and where a leader child's fenced store
/// lives.
const ENV_URL: &str = "REDLEASE_FAULTS_CHILD_URL";
/// When set: the child's locker connects to this Redis Cluster (node URLs,
/// comma-separated) instead, and [`ENV_URL`] is its fenced store only.
const ENV_CLUSTER: &str = "REDLEASE_FAULTS_CHILD_CLUSTER";
const ENV_NAMESPACE: &str = "REDLEASE_FAULTS_CHILD_NAMESPACE";
const ENV_KEY: &str = "REDLEASE_FAULTS_CHILD_KEY";
const ENV_LEASE_MS: &str = "REDLEASE_FAULTS_CHILD_LEASE_MS";
const ENV_FRONT: &str = "REDLEASE_FAULTS_CHILD_FRONT";
const ENV_WHAT: &str = "REDLEASE_FAULTS_CHILD_WHAT";
/// A child of candidates: the checker's URL.
const ENV_CHECKER: &str = "REDLEASE_FAULTS_CHILD_CHECKER";
const MARKER: &str = "REDLEASE_CHILD_HELD";
/// A leader child's report, after [`ChildLeader::write_again`].
const REPORT: &str = "REDLEASE_CHILD_REPORT";
/// The fenced store's resource a leader child writes.
pub(crate) const LEADER_RESOURCE: &str = "schedule";

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
    /// The keys (comma-separated in place of the key) taken as one
    /// multi-key lease, waiting for them, and released, in a loop.
    AllInTurn,
    /// A lock the child waits for (it is held by someone else), with
    /// hand-over on, this claim window and this `notify_poll_interval`
    /// (its registration then lives at most 3 × `notify_poll`).
    WaitForLock {
        /// `Config::claim_window`.
        claim: Duration,
        /// `Config::notify_poll_interval`.
        notify_poll: Duration,
    },
    /// The leadership of the election named by the key (value `child`);
    /// the child writes `from child` with its term to a `FencedStore` of
    /// the namespace before it reports the term.
    Leader,
    /// `count` candidates of the election named by the key, in threads
    /// (blocking) or tasks of one executor thread (async), recording their
    /// leaderships as number `process` on the checker.
    Candidates {
        /// The number the child's leaderships are recorded under.
        process: usize,
        /// How many candidates.
        count: usize,
    },
}

impl Hold {
    fn to_env(self) -> String {
        match self {
            Hold::Lock => "lock".into(),
            Hold::Permit(n) => format!("permit:{n}"),
            Hold::Write => "write".into(),
            Hold::Leader => "leader".into(),
            Hold::AllInTurn => "all-in-turn".into(),
            Hold::Candidates { process, count } => format!("candidates:{process}:{count}"),
            Hold::WaitForLock { claim, notify_poll } => {
                format!("wait:{}:{}", claim.as_millis(), notify_poll.as_millis())
            }
        }
    }

    fn from_env(s: &str) -> Hold {
        let ms = |n: &str| Duration::from_millis(n.parse().expect("a number of ms"));
        match s.split_once(':') {
            Some(("permit", n)) => Hold::Permit(n.parse().expect("a permit count")),
            Some(("candidates", numbers)) => {
                let (process, count) = numbers.split_once(':').expect("process:count");
                Hold::Candidates {
                    process: process.parse().expect("a process number"),
                    count: count.parse().expect("a candidate count"),
                }
            }
            Some(("wait", times)) => {
                let (claim, notify_poll) = times.split_once(':').expect("claim:notify_poll");
                Hold::WaitForLock {
                    claim: ms(claim),
                    notify_poll: ms(notify_poll),
                }
            }
            _ if s == "write" => Hold::Write,
            _ if s == "leader" => Hold::Leader,
            _ if s == "all-in-turn" => Hold::AllInTurn,
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
    let (mut child, fences) = launch::<F>(server, ns, key, lease, what);
    match fences.recv_timeout(BOUND) {
        Ok(Ok(fence)) => ChildHolder { child, fence },
        other => panic!(
            "the holder process did not report a fence ({other:?}); stderr:\n{}",
            kill_for_stderr(&mut child)
        ),
    }
}

/// A child process waiting for a lock (see [`spawn_waiter`]); SIGKILLed
/// and reaped on drop, also while stopped.
pub(crate) struct ChildWaiter {
    child: Child,
    fences: mpsc::Receiver<Result<u64, std::num::ParseIntError>>,
}

impl ChildWaiter {
    /// SIGSTOPs the waiter: it neither attempts nor claims nor refreshes
    /// its registration until [`resume`](Self::resume).
    pub(crate) fn stop(&self) {
        signal(&self.child, "-STOP");
    }

    /// SIGCONTs a stopped waiter.
    pub(crate) fn resume(&self) {
        signal(&self.child, "-CONT");
    }

    /// The fence of the lock once the waiter holds it (it then holds it
    /// until it is killed); panics when it does not hold it within `bound`.
    pub(crate) fn fence_within(&mut self, bound: Duration) -> u64 {
        match self.fences.recv_timeout(bound) {
            Ok(Ok(fence)) => fence,
            other => panic!(
                "the waiting process did not report a fence within {bound:?} ({other:?}); \
                 stderr:\n{}",
                kill_for_stderr(&mut self.child)
            ),
        }
    }

    /// SIGKILLs the waiter (it never leaves its queue by itself).
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildWaiter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process leading an election (see [`spawn_leader`]); SIGKILLed
/// and reaped on drop, also while stopped.
pub(crate) struct ChildLeader {
    child: Child,
    term: u64,
    reports: mpsc::Receiver<String>,
}

impl ChildLeader {
    /// The term the child leads in.
    pub(crate) fn term(&self) -> u64 {
        self.term
    }

    /// SIGKILLs the leader (it never resigns: its lease lapses).
    #[allow(dead_code, reason = "tests/cluster_election.rs only")]
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOPs the leader: its keeper renews nothing until
    /// [`resume`](Self::resume).
    pub(crate) fn stop(&self) {
        signal(&self.child, "-STOP");
    }

    /// SIGCONTs a stopped leader.
    pub(crate) fn resume(&self) {
        signal(&self.child, "-CONT");
    }

    /// Tells the leader (also while stopped: it reads the line first thing
    /// once resumed) to write to the fenced store again with its term, then
    /// to wait for its `lost` and read the election's leader.
    pub(crate) fn write_again(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "write").expect("the leader's stdin");
        stdin.flush().expect("the leader's stdin");
    }

    /// The child's report after [`write_again`](Self::write_again):
    /// `write=<ok|stale|error> lost=<true|false> leader=<term|none>`.
    pub(crate) fn report_within(&mut self, bound: Duration) -> String {
        match self.reports.recv_timeout(bound) {
            Ok(report) => report,
            Err(e) => panic!(
                "the leader process did not report within {bound:?} ({e}); stderr:\n{}",
                kill_for_stderr(&mut self.child)
            ),
        }
    }
}

impl Drop for ChildLeader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a child process that leads the election `name` through front
/// end `F` with `lease`, after writing with its term to the namespace's
/// fenced store ([`LEADER_RESOURCE`]), and waits (within [`BOUND`]) until
/// it reports its term.
pub(crate) fn spawn_leader<F: Front>(
    server: &RedisServer,
    ns: &str,
    name: &str,
    lease: Duration,
) -> ChildLeader {
    let launched = launch_reporting::<F>(server, &[], ns, name, lease, Hold::Leader);
    leader_reported(launched)
}

/// As [`spawn_leader`], the child leading on the Redis Cluster of `nodes`
/// (its fenced store on `store`, a standalone server).
#[allow(dead_code, reason = "tests/cluster_election.rs only")]
pub(crate) fn spawn_cluster_leader<F: Front>(
    nodes: &[String],
    store: &RedisServer,
    ns: &str,
    name: &str,
    lease: Duration,
) -> ChildLeader {
    let cluster = [(ENV_CLUSTER, nodes.join(","))];
    let launched = launch_reporting::<F>(store, &cluster, ns, name, lease, Hold::Leader);
    leader_reported(launched)
}

/// Waits (within [`BOUND`]) until a launched leader child reports its term.
#[allow(clippy::type_complexity, reason = "the two marker lines' channels")]
fn leader_reported(
    (mut child, fences, reports): (
        Child,
        mpsc::Receiver<Result<u64, std::num::ParseIntError>>,
        mpsc::Receiver<String>,
    ),
) -> ChildLeader {
    match fences.recv_timeout(BOUND) {
        Ok(Ok(term)) => ChildLeader {
            child,
            term,
            reports,
        },
        other => panic!(
            "the leader process did not report a term ({other:?}); stderr:\n{}",
            kill_for_stderr(&mut child)
        ),
    }
}

/// A child process of candidates (see [`spawn_candidates`]); SIGKILLed
/// and reaped on drop, also while stopped.
pub(crate) struct ChildCandidates {
    child: Child,
    reports: mpsc::Receiver<String>,
}

impl ChildCandidates {
    /// SIGSTOPs the process: neither its candidates nor its leader's keeper
    /// do anything until [`resume`](Self::resume).
    pub(crate) fn stop(&self) {
        signal(&self.child, "-STOP");
    }

    /// SIGCONTs a stopped process.
    pub(crate) fn resume(&self) {
        signal(&self.child, "-CONT");
    }

    /// Tells the candidates to stop after their current round; the process
    /// then reports what they did ([`counts_within`](Self::counts_within)).
    pub(crate) fn finish(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        if let Err(e) = writeln!(stdin, "stop").and_then(|()| stdin.flush()) {
            panic!(
                "the candidates' process ended before it was told to stop ({e}); stderr:\n{}",
                kill_for_stderr(&mut self.child)
            );
        }
    }

    /// What the process's candidates did, once they stopped after
    /// [`finish`](Self::finish); panics when it does not report within
    /// `bound`.
    pub(crate) fn counts_within(&mut self, bound: Duration) -> Counts {
        match self.reports.recv_timeout(bound) {
            Ok(report) => Counts::parse(&report),
            Err(e) => panic!(
                "the candidates' process did not report within {bound:?} ({e}); stderr:\n{}",
                kill_for_stderr(&mut self.child)
            ),
        }
    }
}

impl Drop for ChildCandidates {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a child process of `count` candidates for the election `name`
/// on `server` through front end `F` (lease 400 ms, command timeout
/// 200 ms), recording their leaderships as number `process` on `checker`,
/// and waits (within [`BOUND`]) until it connected and its candidates
/// started.
pub(crate) fn spawn_candidates<F: Front>(
    server: &RedisServer,
    checker: &RedisServer,
    ns: &str,
    name: &str,
    process: usize,
    count: usize,
) -> ChildCandidates {
    let what = Hold::Candidates { process, count };
    let env = [(ENV_CHECKER, checker.url())];
    let lease = Duration::from_millis(400);
    let (mut child, started, reports) = launch_reporting::<F>(server, &env, ns, name, lease, what);
    match started.recv_timeout(BOUND) {
        Ok(Ok(_)) => ChildCandidates { child, reports },
        other => panic!(
            "the candidates' process did not start ({other:?}); stderr:\n{}",
            kill_for_stderr(&mut child)
        ),
    }
}

/// Starts a child process that waits (up to a minute) for the lock on
/// `key` through front end `F`, with hand-over on, `lease` and the claim
/// window and notification poll interval of `what`
/// ([`Hold::WaitForLock`]). It returns at once: the child registers in the
/// key's queue once it hears grants for the key (its notifications
/// confirmed), which the caller sees in Redis.
pub(crate) fn spawn_waiter<F: Front>(
    server: &RedisServer,
    ns: &str,
    key: &str,
    lease: Duration,
    what: Hold,
) -> ChildWaiter {
    assert!(
        matches!(what, Hold::WaitForLock { .. }),
        "a waiter waits for a lock"
    );
    let (child, fences) = launch::<F>(server, ns, key, lease, what);
    ChildWaiter { child, fences }
}

/// Starts a child process that takes `keys` as one multi-key lease through
/// front end `F` (waiting up to a minute, with `lease`), releases it, and
/// starts over, until it is killed. It returns at once; each grant's
/// first fence comes through [`ChildWaiter::fence_within`].
pub(crate) fn spawn_multi_loop<F: Front>(
    server: &RedisServer,
    ns: &str,
    keys: &[&str],
    lease: Duration,
) -> ChildWaiter {
    let (child, fences) = launch::<F>(server, ns, &keys.join(","), lease, Hold::AllInTurn);
    ChildWaiter { child, fences }
}

/// Re-runs the test binary as a child that holds (or waits for) `what`;
/// the receiver gets the fence from its marker line.
fn launch<F: Front>(
    server: &RedisServer,
    ns: &str,
    key: &str,
    lease: Duration,
    what: Hold,
) -> (Child, mpsc::Receiver<Result<u64, std::num::ParseIntError>>) {
    let (child, fences, _reports) = launch_reporting::<F>(server, &[], ns, key, lease, what);
    (child, fences)
}

/// As [`launch`], with a receiver of the child's report lines too, and
/// the variables `env` set (with [`ENV_CLUSTER`], the child's locker
/// connects to that cluster instead of `server`).
#[allow(clippy::type_complexity, reason = "the two marker lines' channels")]
fn launch_reporting<F: Front>(
    server: &RedisServer,
    env: &[(&str, String)],
    ns: &str,
    key: &str,
    lease: Duration,
    what: Hold,
) -> (
    Child,
    mpsc::Receiver<Result<u64, std::num::ParseIntError>>,
    mpsc::Receiver<String>,
) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.envs(env.iter().map(|(name, value)| (name, value)));
    let mut child = command
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
    let (report_tx, report_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest prints `test holder_child_process ... ` first, on the
            // same line.
            if let Some(at) = line.find(MARKER) {
                let _ = tx.send(line[at + MARKER.len()..].trim().parse::<u64>());
            } else if let Some(at) = line.find(REPORT) {
                let _ = report_tx.send(line[at + REPORT.len()..].trim().to_owned());
            }
        }
    });
    (child, rx, report_rx)
}

/// Kills and reaps `child`, and returns what it wrote to stderr.
fn kill_for_stderr(child: &mut Child) -> String {
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    stderr
}

/// Sends `sig` (`-STOP`, `-CONT`) to `child` with kill(1).
fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(sig)
        .arg(child.id().to_string())
        .status()
        .unwrap_or_else(|e| panic!("run `kill {sig}`: {e}"));
    assert!(status.success(), "`kill {sig}` failed: {status}");
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

/// The child's locker: on the cluster of [`ENV_CLUSTER`] when set, else on
/// `url`.
fn connect_child<F: ClusterFront>(url: &str, config: Config) -> F {
    match std::env::var(ENV_CLUSTER) {
        Ok(nodes) => {
            let nodes: Vec<String> = nodes.split(',').map(str::to_owned).collect();
            F::connect_cluster(&nodes, config).expect("the child connects to the cluster")
        }
        Err(_) => F::connect(url, config).expect("the child connects"),
    }
}

fn hold<F: ClusterFront>(url: &str, ns: &str, key: &str, lease: Duration, what: Hold) {
    let mut config = Config::new(ns).lease(lease);
    if let Hold::WaitForLock { claim, notify_poll } = what {
        config = config
            .claim_window(claim)
            .notify_poll_interval(notify_poll)
            .wait(Duration::from_secs(60));
    }
    if let Hold::AllInTurn = what {
        let locker = connect_child::<F>(url, config.wait(Duration::from_secs(60)));
        let keys: Vec<&str> = key.split(',').collect();
        loop {
            // A wait that runs out under contention just starts over.
            if let Ok(held) = locker.acquire_all_with(&keys, AcquireOptions::new()) {
                report(F::fences(&held)[0].get());
                // Work while holding the keys, where a kill may land.
                let_pass(Duration::from_millis(2));
                let _ = F::release_multi(held);
            }
        }
    }
    if let Hold::Candidates { process, count } = what {
        let checker = std::env::var(ENV_CHECKER).expect("the checker's URL");
        let config = config.command_timeout(Duration::from_millis(200));
        let running = running_until_told();
        let counts = if front_name::<F>() == "async" {
            candidates_in_tasks(url, config, key, process, count, &checker, &running)
        } else {
            let locker = Arc::new(connect_child::<F>(url, config));
            candidates_in_threads(&locker, key, process, count, &checker, &running)
        };
        let mut out = std::io::stdout();
        writeln!(out, "{REPORT} {}", counts.line()).expect("stdout");
        out.flush().expect("stdout");
        std::process::exit(0);
    }
    let locker = connect_child::<F>(url, config);
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
        Hold::WaitForLock { .. } => {
            let held = locker.acquire(key).expect("the waiting child acquires");
            (F::fence(&held).get(), Box::new(held))
        }
        Hold::Leader => return lead(url, ns, key, &locker, free()),
        Hold::AllInTurn | Hold::Candidates { .. } => unreachable!("runs above"),
    };
    report(fence);
    // Held until SIGKILL; if the parent goes away first, stdin closes and
    // the process exits without releasing (the TTL ends the lease).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0);
}

/// A leader child: campaigns, writes with its term, reports the term; then,
/// told `write` on stdin (read first thing when resumed from a SIGSTOP),
/// writes again with the same term, waits (within [`BOUND`]; it panics
/// past it) for its `lost`, reads the election's leader and reports all
/// three.
fn lead<F: Front>(url: &str, ns: &str, name: &str, locker: &F, free: AcquireOptions) {
    let store = redlease::fenced::FencedStore::new(ns);
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("the child's store connection");
    let leadership = locker
        .campaign(name, b"child", free)
        .expect("the child leads a vacant election");
    let term = F::term(&leadership);
    store
        .write(&mut conn, LEADER_RESOURCE, term, "from child")
        .expect("the leader's first write");
    let mut out = std::io::stdout();
    writeln!(out, "{MARKER} {term}").expect("stdout");
    out.flush().expect("stdout");

    let mut line = String::new();
    let mut stdin = std::io::stdin().lock();
    if stdin.read_line(&mut line).unwrap_or(0) == 0 || line.trim() != "write" {
        std::process::exit(0);
    }
    // What a leader that resumed and still believes it leads does first.
    let write = match store.write(&mut conn, LEADER_RESOURCE, term, "late child") {
        Ok(()) => "ok",
        Err(redlease::fenced::WriteError::Stale(_)) => "stale",
        Err(_) => "error",
    };
    crate::support::wait_until(BOUND, "the resumed leader's loss", || {
        F::leadership_is_lost(&leadership)
    });
    let lost = F::leadership_is_lost(&leadership);
    let leader = match locker.leader(name) {
        Ok(Some(leader)) => leader.term.to_string(),
        Ok(None) => "none".into(),
        Err(e) => format!("error:{}", e.code()),
    };
    writeln!(out, "{REPORT} write={write} lost={lost} leader={leader}").expect("stdout");
    out.flush().expect("stdout");
    let _ = stdin.read_to_end(&mut Vec::new());
    std::process::exit(0);
}

/// A flag that holds until the parent says `stop` on stdin or goes away
/// (stdin closes), or for at most a minute.
fn running_until_told() -> Arc<AtomicBool> {
    let running = Arc::new(AtomicBool::new(true));
    let (told, told_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().lock().read_line(&mut String::new());
        let _ = told.send(());
    });
    let flag = running.clone();
    std::thread::spawn(move || {
        let _ = told_rx.recv_timeout(Duration::from_secs(60));
        flag.store(false, Ordering::SeqCst);
    });
    running
}

/// `count` candidate threads of `locker` for the election `name`, while
/// `running`; reports the start (marker line) once they are spawned.
fn candidates_in_threads<F: Front>(
    locker: &Arc<F>,
    name: &str,
    process: usize,
    count: usize,
    checker: &str,
    running: &Arc<AtomicBool>,
) -> Counts {
    let ns = std::env::var(ENV_NAMESPACE).expect("the namespace");
    let threads: Vec<_> = (0..count)
        .map(|c| {
            let (locker, running) = (locker.clone(), running.clone());
            let (name, checker, ns) = (name.to_owned(), checker.to_owned(), ns.clone());
            crate::behaviour::common::spawn(&format!("candidate {c}"), move || {
                let tag = format!("{process}.{c}");
                let candidate = Candidate {
                    by: process,
                    tag: &tag,
                    checker_url: &checker,
                    ns: &ns,
                    running: &running,
                };
                candidate_rounds(&*locker, &name, candidate)
            })
        })
        .collect();
    report(count as u64);
    let mut counts = Counts::default();
    for thread in threads {
        counts.add(thread.join_within(BOUND * 3));
    }
    counts
}

/// `count` candidate tasks of one async locker, on this thread's executor,
/// for the election `name`, while `running`; reports the start (marker
/// line) once the locker connected.
fn candidates_in_tasks(
    url: &str,
    config: Config,
    name: &str,
    process: usize,
    count: usize,
    checker: &str,
    running: &AtomicBool,
) -> Counts {
    let ns = std::env::var(ENV_NAMESPACE).expect("the namespace");
    futures::executor::block_on(async {
        let locker = redlease::aio::Locker::connect(url, config)
            .await
            .expect("the child connects");
        let election = locker.election(name).expect("the election");
        report(count as u64);
        let tags: Vec<String> = (0..count).map(|c| format!("{process}.{c}")).collect();
        let tasks = tags.iter().map(|tag| {
            let candidate = Candidate {
                by: process,
                tag,
                checker_url: checker,
                ns: &ns,
                running,
            };
            candidate_task(&election, candidate)
        });
        let mut counts = Counts::default();
        for one in futures::future::join_all(tasks).await {
            counts.add(one);
        }
        counts
    })
}

/// Prints the marker line with `fence` for the parent.
fn report(fence: u64) {
    let mut out = std::io::stdout();
    writeln!(out, "{MARKER} {fence}").expect("stdout");
    out.flush().expect("stdout");
}
