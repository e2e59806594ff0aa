//! Fencing torture run: several worker processes, each with blocking
//! threads and async tasks, contend for a few keys with random hold times,
//! while a controller injects faults into the lock's `redis-server` at
//! random: SIGSTOP/SIGCONT, `CLIENT KILL` of command and subscriber
//! connections, restarts with data loss, and `SCRIPT FLUSH`.
//!
//! ```text
//! cargo run --release --example fencing_torture -- --seconds 20
//! ```
//!
//! Every holder writes through a fenced store
//! ([`redlease::fenced::FencedStore::write`]) kept on a second
//! `redis-server` that is never faulted (the protected resource), and
//! records each write (fence, accepted or stale) together with a logical
//! clock read from that server (`INCR` before and after the write, so two
//! writes whose intervals do not overlap are ordered). The controller then
//! counts:
//!
//! - `fencing_violations` (must be 0): a write accepted after a write with
//!   a higher fence was accepted for the same resource, two grants of one
//!   key with the same fence, or a store whose final fence is not the
//!   highest one it accepted;
//! - `stranded_waiters` (must be 0): threads or tasks that did not finish
//!   within a bound after the run ended;
//! - `tokens_left` (must be 0): `<ns>:lock:*` keys still in Redis after
//!   every locker shut down.
//!
//! It prints one JSON line and exits with 1 when any of the three is not 0
//! (2 when the run could not be set up). Options: `--seconds N` (20),
//! `--processes N` (3), `--threads N` (3), `--tasks N` (3), `--keys N` (3),
//! `--seed N` (from the clock by default; the report names it). The
//! worker processes are this program again (`std::env::current_exe`) with
//! `--worker`; `tests/faults.rs` reuses this file for its ignored long run. Everything listens on loopback only;
//! `redis-server` must be on `PATH`.
#![allow(clippy::disallowed_methods)] // a driver program reads the clock and sleeps

use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redlease::fenced::{FencedStore, WriteError};
use redlease::{Config, Fence};

// The integration tests' `redis-server` manager: loopback ports, temp
// dirs, SIGSTOP/SIGCONT, restarts with data loss. `pub(crate)` because
// tests/faults.rs, which includes this file, uses it as `crate::support`.
#[path = "../tests/support/mod.rs"]
pub(crate) mod support;

use support::RedisServer;

/// How long workers get to finish their threads and tasks after the run
/// ends (a wait, a hold and a few command timeouts fit many times).
const STOP_BOUND: Duration = Duration::from_secs(15);
/// How long the controller waits for a worker process to exit after that.
const EXIT_BOUND: Duration = Duration::from_secs(30);
/// Lease of every acquire: short, so holds sometimes outlast it.
const LEASE_MS: u64 = 400;
/// Wait of every acquire.
const WAIT_MS: u64 = 1500;
/// Command timeout of the lockers: a paused Redis turns into
/// `OUTCOME_UNKNOWN` quickly.
const COMMAND_TIMEOUT_MS: u64 = 250;

const ENV_WORKER: &str = "REDLEASE_TORTURE_WORKER";
const ENV_LOCK_URL: &str = "REDLEASE_TORTURE_LOCK_URL";
const ENV_STORE_URL: &str = "REDLEASE_TORTURE_STORE_URL";
const ENV_NAMESPACE: &str = "REDLEASE_TORTURE_NAMESPACE";
const ENV_THREADS: &str = "REDLEASE_TORTURE_THREADS";
const ENV_TASKS: &str = "REDLEASE_TORTURE_TASKS";
const ENV_KEYS: &str = "REDLEASE_TORTURE_KEYS";
const ENV_SEED: &str = "REDLEASE_TORTURE_SEED";

/// The size of a run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) seconds: u64,
    pub(crate) processes: usize,
    pub(crate) threads: usize,
    pub(crate) tasks: usize,
    pub(crate) keys: usize,
    pub(crate) seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: 20,
            processes: 3,
            threads: 3,
            tasks: 3,
            keys: 3,
            // New random choices every run; the report names the seed and
            // `--seed` repeats the choices (timing still varies).
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x5eed_f00d, |d| d.as_nanos() as u64),
        }
    }
}

/// How the controller starts this program again as a worker.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Relaunch {
    /// The example binary: `<exe> --worker`.
    Example,
    /// A test binary: `<exe> --exact <test> --ignored`, whose test calls
    /// [`run_worker_if_asked`].
    #[allow(
        dead_code,
        reason = "used by tests/faults.rs, which includes this file"
    )]
    TestHarness { test: &'static str },
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        worker_main();
    }
    let options = match parse_args(&args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("fencing_torture: {e}");
            return ExitCode::from(2);
        }
    };
    match run_controller(&options, Relaunch::Example) {
        Ok(report) => {
            println!("{}", report.to_json());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                eprintln!("fencing_torture: FAILED (violations, stranded waiters or tokens left)");
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("fencing_torture: could not run: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut options = Options::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?
            .parse::<u64>()
            .map_err(|e| format!("{flag}: {e}"))?;
        let count = usize::try_from(value.max(1)).map_err(|e| e.to_string())?;
        match flag.as_str() {
            "--seconds" => options.seconds = value,
            "--processes" => options.processes = count,
            "--threads" => options.threads = value as usize,
            "--tasks" => options.tasks = value as usize,
            "--keys" => options.keys = count,
            "--seed" => options.seed = value,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.threads + options.tasks == 0 {
        return Err("--threads and --tasks are both 0".into());
    }
    Ok(options)
}

// ----- small helpers ---------------------------------------------------------

/// xorshift64*: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A hold time: mostly well inside the lease, sometimes beyond it (then
/// another holder may take over and this holder's second write is stale).
fn hold_time(rng: &mut Rng) -> Duration {
    match rng.below(20) {
        0 => ms(LEASE_MS + rng.below(LEASE_MS)),
        1..=4 => ms(LEASE_MS / 2 + rng.below(LEASE_MS / 2)),
        _ => ms(rng.below(LEASE_MS / 3)),
    }
}

fn key_name(index: u64) -> String {
    format!("torture:resource:{index}")
}

/// One event line a worker prints for the controller.
fn emit(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

// ----- redis-server processes --------------------------------------------------

/// Tries to start a new server on a restarted server's port.
const RESTART_ATTEMPTS: usize = 20;

/// A `redis-server` on a loopback port, restartable with data loss.
fn start_redis() -> Result<RedisServer, Box<dyn Error>> {
    Ok(RedisServer::builder().try_start()?)
}

/// An admin connection (2 s timeouts).
fn admin(server: &RedisServer) -> redis::RedisResult<redis::Connection> {
    server.try_conn(ms(2000))
}

fn query<T: redis::FromRedisValue>(
    server: &RedisServer,
    cmd: &redis::Cmd,
) -> redis::RedisResult<T> {
    cmd.query(&mut admin(server)?)
}

// ----- the worker ----------------------------------------------------------------

/// What a worker process needs, passed in environment variables.
struct WorkerParams {
    id: String,
    lock_url: String,
    store_url: String,
    namespace: String,
    threads: usize,
    tasks: usize,
    keys: u64,
    seed: u64,
}

impl WorkerParams {
    fn from_env() -> Option<Self> {
        let var = |name: &str| std::env::var(name).ok();
        let num = |name: &str| var(name).and_then(|v| v.parse::<u64>().ok());
        Some(WorkerParams {
            id: var(ENV_WORKER)?,
            lock_url: var(ENV_LOCK_URL)?,
            store_url: var(ENV_STORE_URL)?,
            namespace: var(ENV_NAMESPACE)?,
            threads: num(ENV_THREADS)? as usize,
            tasks: num(ENV_TASKS)? as usize,
            keys: num(ENV_KEYS)?,
            seed: num(ENV_SEED)?,
        })
    }
}

/// The worker side for a test harness: does nothing unless this process
/// was started as a worker by [`run_controller`].
#[allow(
    dead_code,
    reason = "used by tests/faults.rs, which includes this file"
)]
pub(crate) fn run_worker_if_asked() {
    if std::env::var(ENV_WORKER).is_ok() {
        worker_main();
    }
}

/// Shared by a worker's threads and tasks.
struct Shared {
    stop: AtomicBool,
    store: FencedStore,
    clock_key: String,
    keys: u64,
}

/// A fenced write bracketed by two reads of the store's logical clock:
/// `W <key> <fence> <1 accepted | 0 stale | e error> <before> <after>`.
fn write_sync(shared: &Shared, conn: &mut redis::Connection, key: u64, fence: Fence) {
    let tick = |conn: &mut redis::Connection| {
        redis::cmd("INCR")
            .arg(&shared.clock_key)
            .query::<u64>(conn)
            .unwrap_or(0)
    };
    let before = tick(conn);
    let verdict = match shared.store.write(conn, &key_name(key), fence, fence.get()) {
        Ok(()) => "1",
        Err(WriteError::Stale(_)) => "0",
        Err(_) => "e",
    };
    let after = tick(conn);
    emit(format_args!("W {key} {fence} {verdict} {before} {after}"));
}

async fn write_async(
    shared: &Shared,
    conn: &mut redis::aio::MultiplexedConnection,
    key: u64,
    fence: Fence,
) {
    let mut incr = redis::cmd("INCR");
    incr.arg(&shared.clock_key);
    let before: u64 = incr.query_async(conn).await.unwrap_or(0);
    let verdict = match shared
        .store
        .write_async(conn, &key_name(key), fence, fence.get())
        .await
    {
        Ok(()) => "1",
        Err(WriteError::Stale(_)) => "0",
        Err(_) => "e",
    };
    let after: u64 = incr.query_async(conn).await.unwrap_or(0);
    emit(format_args!("W {key} {fence} {verdict} {before} {after}"));
}

fn blocking_contender(
    shared: &Shared,
    locker: &redlease::blocking::Locker,
    mut store: redis::Connection,
    mut rng: Rng,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        let key = rng.below(shared.keys);
        match locker.acquire(&key_name(key)) {
            Ok(lease) => {
                emit(format_args!("G {key} {}", lease.fence()));
                write_sync(shared, &mut store, key, lease.fence());
                thread::sleep(hold_time(&mut rng));
                write_sync(shared, &mut store, key, lease.fence());
                match lease.release() {
                    Ok(outcome) => emit(format_args!("R {outcome:?}")),
                    Err(e) => emit(format_args!("F release {}", e.code())),
                }
            }
            Err(e) => emit(format_args!("E acquire {}", e.code())),
        }
        thread::sleep(ms(rng.below(20)));
    }
}

async fn async_contender(
    shared: &Shared,
    locker: &redlease::aio::Locker,
    mut store: redis::aio::MultiplexedConnection,
    mut rng: Rng,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        let key = rng.below(shared.keys);
        match locker.acquire(&key_name(key)).await {
            Ok(lease) => {
                emit(format_args!("G {key} {}", lease.fence()));
                write_async(shared, &mut store, key, lease.fence()).await;
                async_io::Timer::after(hold_time(&mut rng)).await;
                write_async(shared, &mut store, key, lease.fence()).await;
                match lease.release().await {
                    Ok(outcome) => emit(format_args!("R {outcome:?}")),
                    Err(e) => emit(format_args!("F release {}", e.code())),
                }
            }
            Err(e) => emit(format_args!("E acquire {}", e.code())),
        }
        async_io::Timer::after(ms(rng.below(20))).await;
    }
}

/// One worker process: a blocking locker shared by `threads` threads and an
/// async locker shared by `tasks` tasks (on one thread, under
/// `futures::executor::block_on`). Runs until "stop" (or EOF) on stdin,
/// then reports stranded contenders, shuts both lockers down and exits.
fn worker_main() -> ! {
    let Some(p) = WorkerParams::from_env() else {
        eprintln!("fencing_torture worker: missing {ENV_WORKER} and friends");
        std::process::exit(2);
    };
    let code = match run_worker(&p) {
        Ok(()) => 0,
        Err(e) => {
            emit(format_args!("Z {e}"));
            3
        }
    };
    std::process::exit(code);
}

fn run_worker(p: &WorkerParams) -> Result<(), Box<dyn Error>> {
    let config = Config::new(p.namespace.clone())
        .lease(ms(LEASE_MS))
        .wait(ms(WAIT_MS))
        .command_timeout(ms(COMMAND_TIMEOUT_MS))
        .shutdown_timeout(ms(3000));
    let blocking = Arc::new(redlease::blocking::Locker::connect(
        p.lock_url.as_str(),
        config.clone(),
    )?);
    let aio = Arc::new(futures::executor::block_on(
        redlease::aio::Locker::connect(p.lock_url.as_str(), config),
    )?);
    let store_client = redis::Client::open(p.store_url.as_str())?;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        store: FencedStore::new(format!("{}-store", p.namespace)),
        clock_key: format!("{}-store:clock", p.namespace),
        keys: p.keys,
    });
    let worker_seed = p.seed
        ^ p.id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) + u64::from(b));
    let (done_tx, done_rx) = mpsc::channel::<()>();

    for i in 0..p.threads {
        let (shared, locker, done) = (shared.clone(), blocking.clone(), done_tx.clone());
        let store = store_client.get_connection_with_timeout(ms(2000))?;
        let rng = Rng::new(worker_seed ^ (i as u64 + 1));
        thread::Builder::new()
            .name(format!("contender-{i}"))
            .spawn(move || {
                blocking_contender(&shared, &locker, store, rng);
                emit(format_args!("D"));
                let _ = done.send(());
            })?;
    }
    if p.tasks > 0 {
        let (shared, locker, done) = (shared.clone(), aio.clone(), done_tx.clone());
        let store = futures::executor::block_on(store_client.get_multiplexed_async_connection())?;
        let (tasks, seed) = (p.tasks, worker_seed);
        thread::Builder::new().name("tasks".into()).spawn(move || {
            let contenders = (0..tasks).map(|i| {
                let (shared, locker, store, done) =
                    (shared.clone(), locker.clone(), store.clone(), done.clone());
                let rng = Rng::new(seed ^ (0x1000 + i as u64));
                async move {
                    async_contender(&shared, &locker, store, rng).await;
                    emit(format_args!("D"));
                    let _ = done.send(());
                }
            });
            futures::executor::block_on(futures::future::join_all(contenders));
        })?;
    }
    drop(done_tx);
    emit(format_args!("READY"));

    // Run until told to stop (or until the controller goes away).
    let mut line = String::new();
    let stdin = std::io::stdin();
    while stdin.lock().read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "stop" {
        line.clear();
    }
    shared.stop.store(true, Ordering::SeqCst);

    let total = p.threads + p.tasks;
    let deadline = Instant::now() + STOP_BOUND;
    let mut finished = 0;
    while finished < total {
        let left = deadline.saturating_duration_since(Instant::now());
        match done_rx.recv_timeout(left) {
            Ok(()) => finished += 1,
            Err(_) => break,
        }
    }
    emit(format_args!("X {}", total - finished));
    if let Err(e) = blocking.shutdown() {
        emit(format_args!("Y blocking {}", e.code()));
    }
    if let Err(e) = futures::executor::block_on(aio.shutdown()) {
        emit(format_args!("Y aio {}", e.code()));
    }
    emit(format_args!("BYE"));
    Ok(())
}

// ----- the controller --------------------------------------------------------------

/// What one worker process reported.
#[derive(Debug, Default)]
struct WorkerLog {
    ready: bool,
    grants: Vec<(u64, u64)>,
    /// (key, fence, verdict, before, after)
    writes: Vec<(u64, u64, char, u64, u64)>,
    errors: BTreeMap<String, u64>,
    releases: BTreeMap<String, u64>,
    done: usize,
    stranded: Option<usize>,
    shutdown_errors: Vec<String>,
    failure: Option<String>,
    said_bye: bool,
}

impl WorkerLog {
    fn record(&mut self, line: &str) {
        // A test harness prints `test <name> ... ` before the first line.
        let line = match line.split_once(" ... ") {
            Some((harness, rest)) if harness.starts_with("test ") => rest,
            _ => line,
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| {
            fields
                .get(i)
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let text = |i: usize| fields.get(i).copied().unwrap_or("?").to_owned();
        match fields.first().copied().unwrap_or("") {
            "READY" => self.ready = true,
            "G" => self.grants.push((num(1), num(2))),
            "W" => {
                let verdict = text(3).chars().next().unwrap_or('e');
                self.writes.push((num(1), num(2), verdict, num(4), num(5)));
            }
            "E" => {
                *self
                    .errors
                    .entry(format!("acquire:{}", text(2)))
                    .or_default() += 1
            }
            "F" => {
                *self
                    .errors
                    .entry(format!("release:{}", text(2)))
                    .or_default() += 1
            }
            "R" => *self.releases.entry(text(1)).or_default() += 1,
            "D" => self.done += 1,
            "X" => self.stranded = Some(num(1) as usize),
            "Y" => self.shutdown_errors.push(fields[1..].join(" ")),
            "Z" => self.failure = Some(fields[1..].join(" ")),
            "BYE" => self.said_bye = true,
            _ => {}
        }
    }
}

/// Faults injected, by kind.
#[derive(Debug, Default, Clone)]
struct Faults {
    sigstop: u64,
    client_kill_normal: u64,
    client_kill_pubsub: u64,
    restart_with_data_loss: u64,
    script_flush: u64,
}

impl Faults {
    fn total(&self) -> u64 {
        self.sigstop
            + self.client_kill_normal
            + self.client_kill_pubsub
            + self.restart_with_data_loss
            + self.script_flush
    }
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub(crate) struct Report {
    options: Option<Options>,
    acquisitions: u64,
    faults: Faults,
    writes_accepted: u64,
    stale_writes_rejected: u64,
    store_errors: u64,
    ordering_violations: u64,
    duplicate_fences: u64,
    store_mismatches: u64,
    stranded_waiters: u64,
    tokens_left: u64,
    errors: BTreeMap<String, u64>,
    releases: BTreeMap<String, u64>,
    shutdown_errors: u64,
    worker_failures: Vec<String>,
}

impl Report {
    /// Ordering violations + duplicate fences + store mismatches.
    pub(crate) fn fencing_violations(&self) -> u64 {
        self.ordering_violations + self.duplicate_fences + self.store_mismatches
    }

    /// No violation, nobody stranded, nothing left in Redis, every worker ran.
    pub(crate) fn passed(&self) -> bool {
        self.fencing_violations() == 0
            && self.stranded_waiters == 0
            && self.tokens_left == 0
            && self.worker_failures.is_empty()
    }

    /// One JSON line (hand-written: the crate has no JSON dependency).
    pub(crate) fn to_json(&self) -> String {
        let map = |m: &BTreeMap<String, u64>| {
            let items: Vec<String> = m.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", items.join(","))
        };
        let o = self.options.clone().unwrap_or_default();
        let f = &self.faults;
        let failures: Vec<String> = self
            .worker_failures
            .iter()
            .map(|s| format!("\"{}\"", s.replace(['"', '\\'], "'")))
            .collect();
        format!(
            concat!(
                "{{\"seconds\":{},\"processes\":{},\"threads_per_process\":{},",
                "\"tasks_per_process\":{},\"keys\":{},\"seed\":{},",
                "\"acquisitions\":{},",
                "\"faults_injected\":{{\"total\":{},\"sigstop\":{},\"client_kill_normal\":{},",
                "\"client_kill_pubsub\":{},\"restart_with_data_loss\":{},\"script_flush\":{}}},",
                "\"writes_accepted\":{},\"stale_writes_rejected\":{},\"store_errors\":{},",
                "\"fencing_violations\":{},\"ordering_violations\":{},\"duplicate_fences\":{},",
                "\"store_mismatches\":{},\"stranded_waiters\":{},\"tokens_left\":{},",
                "\"acquire_release_errors\":{},\"release_outcomes\":{},\"shutdown_errors\":{},",
                "\"worker_failures\":[{}],\"passed\":{}}}"
            ),
            o.seconds,
            o.processes,
            o.threads,
            o.tasks,
            o.keys,
            o.seed,
            self.acquisitions,
            f.total(),
            f.sigstop,
            f.client_kill_normal,
            f.client_kill_pubsub,
            f.restart_with_data_loss,
            f.script_flush,
            self.writes_accepted,
            self.stale_writes_rejected,
            self.store_errors,
            self.fencing_violations(),
            self.ordering_violations,
            self.duplicate_fences,
            self.store_mismatches,
            self.stranded_waiters,
            self.tokens_left,
            map(&self.errors),
            map(&self.releases),
            self.shutdown_errors,
            failures.join(","),
            self.passed(),
        )
    }
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    log: Arc<Mutex<WorkerLog>>,
    /// Fires when the worker's stdout closes (it exited).
    closed: mpsc::Receiver<()>,
}

fn spawn_worker(
    index: usize,
    relaunch: Relaunch,
    env: &[(&str, String)],
    ready: mpsc::Sender<usize>,
) -> Result<Worker, Box<dyn Error>> {
    let mut cmd = Command::new(std::env::current_exe()?);
    match relaunch {
        Relaunch::Example => {
            cmd.arg("--worker");
        }
        Relaunch::TestHarness { test } => {
            cmd.args([
                "--exact",
                test,
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ]);
        }
    }
    let mut child = cmd
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env(ENV_WORKER, index.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stdin = child.stdin.take();
    let log = Arc::new(Mutex::new(WorkerLog::default()));
    let (closed_tx, closed) = mpsc::channel();
    let for_reader = log.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut log = for_reader.lock().unwrap_or_else(|p| p.into_inner());
            let was_ready = log.ready;
            log.record(&line);
            if log.ready && !was_ready {
                let _ = ready.send(index);
            }
        }
        let _ = closed_tx.send(());
    });
    Ok(Worker {
        child,
        stdin,
        log,
        closed,
    })
}

fn inject(lock: &RedisServer, rng: &mut Rng, faults: &mut Faults) -> Result<(), Box<dyn Error>> {
    match rng.below(10) {
        0..=2 => {
            lock.pause();
            thread::sleep(ms(100 + rng.below(1100)));
            lock.resume();
            faults.sigstop += 1;
        }
        3 | 4 => {
            query::<u64>(
                lock,
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"),
            )?;
            faults.client_kill_normal += 1;
        }
        5 | 6 => {
            query::<u64>(
                lock,
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"),
            )?;
            faults.client_kill_pubsub += 1;
        }
        7 => {
            lock.try_restart(RESTART_ATTEMPTS, ms(50))
                .map_err(|e| format!("redis-server could not restart on its port: {e}"))?;
            faults.restart_with_data_loss += 1;
        }
        _ => {
            query::<()>(lock, redis::cmd("SCRIPT").arg("FLUSH"))?;
            faults.script_flush += 1;
        }
    }
    Ok(())
}

/// Runs the controller: starts both servers and the workers, injects
/// faults for `options.seconds`, stops everything and checks the records.
///
/// # Errors
///
/// When a server or a worker cannot be started.
pub(crate) fn run_controller(
    options: &Options,
    relaunch: Relaunch,
) -> Result<Report, Box<dyn Error>> {
    let lock = start_redis()?;
    let store = start_redis()?;
    let namespace = format!("torture-{}", std::process::id());
    let env = [
        (ENV_LOCK_URL, lock.url()),
        (ENV_STORE_URL, store.url()),
        (ENV_NAMESPACE, namespace.clone()),
        (ENV_THREADS, options.threads.to_string()),
        (ENV_TASKS, options.tasks.to_string()),
        (ENV_KEYS, options.keys.to_string()),
        (ENV_SEED, options.seed.to_string()),
    ];
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut workers = Vec::new();
    for i in 0..options.processes {
        workers.push(spawn_worker(i, relaunch, &env, ready_tx.clone())?);
    }
    drop(ready_tx);
    let ready_deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..options.processes {
        let left = ready_deadline.saturating_duration_since(Instant::now());
        if ready_rx.recv_timeout(left).is_err() {
            let failures: Vec<String> = workers
                .iter()
                .filter_map(|w| w.log.lock().ok().and_then(|l| l.failure.clone()))
                .collect();
            for w in &mut workers {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
            return Err(format!("the workers did not all start: {failures:?}").into());
        }
    }

    // Faults at random intervals until the end of the run.
    let mut rng = Rng::new(options.seed);
    let mut faults = Faults::default();
    let end = Instant::now() + Duration::from_secs(options.seconds);
    let mut fault_errors = Vec::new();
    while Instant::now() < end {
        let pause = ms(200 + rng.below(1000)).min(end.saturating_duration_since(Instant::now()));
        thread::sleep(pause);
        if Instant::now() >= end {
            break;
        }
        if let Err(e) = inject(&lock, &mut rng, &mut faults) {
            fault_errors.push(e.to_string());
        }
    }
    if lock.is_paused() {
        lock.resume();
    }

    // Stop the workers; each must exit within a bound.
    for w in &mut workers {
        if let Some(mut stdin) = w.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
    }
    let exit_deadline = Instant::now() + STOP_BOUND + EXIT_BOUND;
    let mut killed = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        let left = exit_deadline.saturating_duration_since(Instant::now());
        if w.closed.recv_timeout(left).is_err() {
            let _ = w.child.kill();
            killed.push(i);
        }
        let _ = w.child.wait();
    }

    let tokens_left =
        query::<Vec<String>>(&lock, redis::cmd("KEYS").arg(format!("{namespace}:lock:*")))?.len()
            as u64;
    let store_fences = {
        let fenced = FencedStore::new(format!("{namespace}-store"));
        let mut conn = admin(&store)?;
        let mut fences = HashMap::new();
        for key in 0..options.keys as u64 {
            if let Some((fence, _)) = fenced.read(&mut conn, &key_name(key))? {
                fences.insert(key, fence.get());
            }
        }
        fences
    };

    let logs: Vec<WorkerLog> = workers
        .into_iter()
        .map(|w| std::mem::take(&mut *w.log.lock().unwrap_or_else(|p| p.into_inner())))
        .collect();
    let mut report = analyse(options, &logs, &store_fences);
    report.faults = faults;
    report.tokens_left = tokens_left;
    for i in killed {
        report
            .worker_failures
            .push(format!("worker {i} did not exit within its bound"));
    }
    report.worker_failures.extend(
        fault_errors
            .into_iter()
            .map(|e| format!("fault injection: {e}")),
    );
    Ok(report)
}

/// Checks the records of every worker against the fencing guarantee.
fn analyse(options: &Options, logs: &[WorkerLog], store_fences: &HashMap<u64, u64>) -> Report {
    let mut report = Report {
        options: Some(options.clone()),
        ..Report::default()
    };
    let per_worker = (options.threads + options.tasks) as u64;
    let mut grants: HashMap<(u64, u64), u64> = HashMap::new();
    let mut accepted: HashMap<u64, Vec<(u64, u64, u64)>> = HashMap::new();
    for (i, log) in logs.iter().enumerate() {
        report.acquisitions += log.grants.len() as u64;
        for g in &log.grants {
            *grants.entry(*g).or_default() += 1;
        }
        for &(key, fence, verdict, before, after) in &log.writes {
            match verdict {
                '1' => {
                    report.writes_accepted += 1;
                    accepted
                        .entry(key)
                        .or_default()
                        .push((fence, before, after));
                }
                '0' => report.stale_writes_rejected += 1,
                _ => report.store_errors += 1,
            }
        }
        for (k, v) in &log.errors {
            *report.errors.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &log.releases {
            *report.releases.entry(k.clone()).or_default() += v;
        }
        report.stranded_waiters += match log.stranded {
            Some(n) => n as u64,
            None => per_worker.saturating_sub(log.done as u64),
        };
        report.shutdown_errors += log.shutdown_errors.len() as u64;
        if let Some(f) = &log.failure {
            report.worker_failures.push(format!("worker {i}: {f}"));
        } else if !log.said_bye {
            report
                .worker_failures
                .push(format!("worker {i} did not finish its shutdown"));
        }
    }
    report.duplicate_fences = grants.values().filter(|n| **n > 1).map(|n| n - 1).sum();
    for (key, writes) in &accepted {
        report.ordering_violations += ordering_violations(writes);
        let highest = writes.iter().map(|w| w.0).max();
        if highest != store_fences.get(key).copied() {
            report.store_mismatches += 1;
        }
    }
    report
}

/// Accepted writes `(fence, before, after)` of one resource, where write A
/// certainly came before write B when `A.after < B.before` (logical clock
/// of the store). A write accepted with a fence lower than one accepted
/// before it is a violation.
fn ordering_violations(writes: &[(u64, u64, u64)]) -> u64 {
    let mut by_end: Vec<&(u64, u64, u64)> = writes.iter().collect();
    by_end.sort_by_key(|w| w.2);
    let mut by_start: Vec<&(u64, u64, u64)> = writes.iter().collect();
    by_start.sort_by_key(|w| w.1);
    let (mut highest_before, mut next, mut violations) = (0u64, 0usize, 0u64);
    for w in by_start {
        while next < by_end.len() && by_end[next].2 < w.1 {
            highest_before = highest_before.max(by_end[next].0);
            next += 1;
        }
        if w.0 < highest_before {
            violations += 1;
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_accepted_after_a_higher_fence_is_a_violation() {
        // (fence, before, after): 7 was accepted strictly after 9.
        assert_eq!(ordering_violations(&[(9, 1, 2), (7, 3, 4)]), 1);
        // Overlapping intervals are not ordered: no verdict.
        assert_eq!(ordering_violations(&[(9, 1, 4), (7, 2, 3)]), 0);
        // Increasing fences in order, and equal fences, are fine.
        assert_eq!(ordering_violations(&[(7, 1, 2), (9, 3, 4), (9, 5, 6)]), 0);
    }

    #[test]
    fn the_analysis_counts_duplicates_mismatches_and_stranded_contenders() {
        let options = Options {
            processes: 1,
            threads: 2,
            tasks: 0,
            ..Options::default()
        };
        let mut log = WorkerLog::default();
        for line in [
            "test torture_worker_process ... READY",
            "G 0 10",
            "G 0 10",
            "W 0 10 1 1 2",
            "W 0 8 1 3 4",
            "W 0 9 0 5 6",
            "D",
            "BYE",
        ] {
            log.record(line);
        }
        let store = HashMap::from([(0, 9)]);
        let report = analyse(&options, &[log], &store);
        assert!(report.options.is_some());
        assert_eq!(report.acquisitions, 2);
        assert_eq!(report.duplicate_fences, 1);
        assert_eq!(report.ordering_violations, 1);
        assert_eq!(report.store_mismatches, 1, "the store kept 9, not 10");
        assert_eq!(report.stale_writes_rejected, 1);
        assert_eq!(
            report.stranded_waiters, 1,
            "one of two contenders never finished"
        );
        assert_eq!(report.fencing_violations(), 3);
        assert!(!report.passed());
        assert!(report.to_json().contains("\"fencing_violations\":3"));
    }
}
