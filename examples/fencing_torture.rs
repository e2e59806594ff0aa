//! Fencing torture run: several worker processes, each with blocking
//! threads and async tasks, contend for a few locks, fenced semaphores and
//! read-write leases with random hold times, while a controller injects
//! faults at random: into the lock's `redis-server` (SIGSTOP/SIGCONT,
//! `CLIENT KILL` of command and subscriber connections, restarts with data
//! loss, and `SCRIPT FLUSH`), and into the workers (SIGKILL of a worker
//! process, holding or waiting, then a replacement started).
//!
//! ```text
//! cargo run --release --example fencing_torture -- --seconds 20
//! ```
//!
//! Every contender picks a kind and a key at random for each round: a lock
//! (`torture:resource:<k>`), a permit of a semaphore of `--permits` permits
//! (`torture:sem:<k>`), or the write or a read lease of a read-write lease
//! (`torture:rw:<k>`). With `--multi-key N`, one round in N instead takes
//! two distinct lock keys as one multi-key lease (`acquire_all`, in either order, so `{a, b}`
//! and `{b, a}` contend); each of its keys is reported, written and checked
//! as a lock hold of that key, so the lock checks below cover single- and
//! multi-key holders of a key together (`acquisitions.multi_key` counts
//! these leases, which also count twice in `lock`; their failed acquires
//! and releases count once, under `multi_key/`). Every holder writes twice, at the start and at the
//! end of its hold, through a fenced store
//! ([`redlease::fenced::FencedStore`]) kept on a second `redis-server` that
//! is never faulted (the protected resource, and the checker): a lock with
//! `write`, a permit with `write_permit` (its slot's register), a writer
//! with `write` and a reader with `write_derived` and its epoch (both on
//! the rw key's register). It brackets each write, and each acquire, with
//! `INCR` of a logical clock on that server, so two events whose intervals
//! do not overlap are ordered. A holder *certainly held* from the end of its
//! first write to the start of its second when the store accepted both.
//! The controller then counts, per kind:
//!
//! - lock: a write accepted after a write with a higher fence was accepted
//!   for the same key (`ordering_violations`), two grants of one key with
//!   the same fence (`duplicate_fences`), a store whose final fence is not
//!   the highest one it accepted (`store_mismatches`);
//! - semaphore: the same three per (key, slot), plus a slot outside
//!   `0..permits` (`slot_out_of_range`), two holders of one slot certainly
//!   holding at once (`slot_overlaps`), and more than `permits` holders of
//!   one key certainly holding at once (`over_capacity`);
//! - rw: the same three on the key's register (writers' fences and
//!   readers' epochs), plus a writer certainly holding at once with another
//!   writer or a reader (`writer_overlaps`), two writers certainly granted
//!   one after the other whose fences do not increase (`write_fence_order`),
//!   and a reader whose epoch is not the fence of the last writer granted
//!   before it (`epoch_mismatches`; a larger epoch is allowed only where a
//!   restart with data loss, or a write acquire whose outcome the client
//!   does not know, came in between; a killed worker's waiting write
//!   acquire counts as such until its hand-over registration is surely
//!   gone, [`REGISTRATIONS_GONE`] after the kill, since a grant made out to
//!   it takes a fence and lapses unclaimed), and a writer's write accepted after
//!   a derived write at its fence was (`writes_after_derived`: a reader
//!   gets epoch `f` only after writer `f`'s lease ended, so the store must
//!   refuse that writer from then on). `expired_writers_refused` counts the
//!   writers' writes the store refused that way (not a check);
//!
//! and for the whole run:
//!
//! - kills: a worker prints each round's start (`S`), grant (`G`) and first
//!   write (`P`) as they happen, so a killed worker's unfinished rounds
//!   join the checks: its grants count for `duplicate_fences` and the rw
//!   checks, its unreported writes have an unknown outcome (maybe accepted,
//!   so the store may end at its fence), it never *certainly held* past
//!   its kill (no tenure), and its write acquires without a reply may have
//!   moved the fence counter unseen (as an `OUTCOME_UNKNOWN` does). Its
//!   lease simply expires: a grant of its key (slot) started after the
//!   kill with a fence not above its own is `kills.fence_reused`;
//! - `stranded_waiters` (must be 0): threads or tasks of the living
//!   workers that did not finish within a bound after the run ended;
//! - `tokens_left` (must be 0): `<ns>:lock:*`, `<ns>:sem:*` and
//!   `<ns>:rw-write:*` keys, and live members of `<ns>:rw-read:*` sets,
//!   still in Redis after every living locker shut down. A killed worker's
//!   tokens expire within a lease: no worker is killed in the run's last
//!   second, and the scan waits (bounded) until a lease after the last
//!   kill.
//!
//! Queue scenarios (every third injection while 5 s of the run are left,
//! counted under `faults_injected.queued_kill` and `.tagged_burst`, seen
//! under `queues`): on a read-write key held by a long write lease, 12
//! readers on lockers of their own are SIGKILLed at once while queued,
//! ahead of 17-20 live readers, a writer and readers with the hand-over
//! off (`registrants_killed_queued`, `most_dead_ahead_of_live`,
//! `most_readers_ahead_of_writer`); and 12 permit waiters burst on a
//! tagged semaphore (`most_queued_tagged`). Every worker also contends for
//! two tagged semaphores (`torture:sem:{tagged}:N`, `key_hash_tags(true)`
//! in the namespace `<ns>-tags`: a namespace's lockers must agree on it;
//! `permit_tagged`) and takes a third of its blocking reads on a locker
//! with the hand-over off (`read_handover_off`). `rw.fenced_out_while_valid`
//! counts readers and writers whose write the store refused while their
//! lease was valid (no restart since): a writer beside a live reader.
//!
//! It prints one JSON line and exits with 1 when a violation of any kind,
//! a stranded waiter or a token left is not 0 (2 when the run could not be
//! set up). Options: `--seconds N` (20), `--processes N` (3), `--threads N`
//! (3), `--tasks N` (3), `--keys N` (3, per kind), `--permits N` (2),
//! `--seed N` (from the clock by default; the report names it),
//! `--multi-key N` (6: one round in six is a multi-key lease; 0: none). The worker
//! processes are this program again (`std::env::current_exe`) with
//! `--worker`; `tests/faults.rs` reuses this file for its ignored long run.
//! Everything listens on loopback only; `redis-server` must be on `PATH`.
#![allow(clippy::disallowed_methods)] // a driver program reads the clock and sleeps

use std::collections::{BTreeMap, HashMap, HashSet};
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redlease::fenced::{FencedStore, WriteError};
use redlease::{AcquireOptions, Config, Fence};
use sha2::{Digest, Sha256};

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
/// How long a worker process gets to start (connect and say READY).
const READY_BOUND: Duration = Duration::from_secs(30);
/// No worker is killed in the last this-long of a run (more than a lease),
/// so killed workers' tokens have expired by the tokens-left scan.
const KILL_QUIET: Duration = Duration::from_secs(1);
/// How long after a kill the hand-over registrations of the killed
/// worker's waiting acquires are surely gone: the registration's bound (3 ×
/// the default `notify_poll_interval`, counted from its last refresh,
/// before the kill) and a grant's claim window, with a margin for a loaded
/// machine. Until then a grant may still be made out to one and lapse.
const REGISTRATIONS_GONE: Duration = Duration::from_secs(2);
/// Slack over a lease for a killed worker's token to expire.
const TOKEN_SLACK_MS: u64 = 200;
/// Lease of every acquire: short, so holds sometimes outlast it.
const LEASE_MS: u64 = 400;
/// Wait of every acquire.
const WAIT_MS: u64 = 1500;
/// Command timeout of the lockers: a paused Redis turns into
/// `OUTCOME_UNKNOWN` quickly.
const COMMAND_TIMEOUT_MS: u64 = 250;
/// A holder that writes with less of its lease left than this (by the
/// lease's own conservative estimate) may be writing after it expired.
pub(crate) const VALID_MARGIN_MS: u64 = 100;

const ENV_WORKER: &str = "REDLEASE_TORTURE_WORKER";
const ENV_LOCK_URL: &str = "REDLEASE_TORTURE_LOCK_URL";
const ENV_STORE_URL: &str = "REDLEASE_TORTURE_STORE_URL";
const ENV_NAMESPACE: &str = "REDLEASE_TORTURE_NAMESPACE";
const ENV_THREADS: &str = "REDLEASE_TORTURE_THREADS";
const ENV_TASKS: &str = "REDLEASE_TORTURE_TASKS";
const ENV_KEYS: &str = "REDLEASE_TORTURE_KEYS";
const ENV_PERMITS: &str = "REDLEASE_TORTURE_PERMITS";
const ENV_SEED: &str = "REDLEASE_TORTURE_SEED";
const ENV_MULTI_KEY: &str = "REDLEASE_TORTURE_MULTI_KEY";

/// The size of a run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) seconds: u64,
    pub(crate) processes: usize,
    pub(crate) threads: usize,
    pub(crate) tasks: usize,
    /// Keys per kind.
    pub(crate) keys: usize,
    /// Permits of every semaphore.
    pub(crate) permits: u32,
    pub(crate) seed: u64,
    /// One round in this many takes a multi-key lease (`0`: none).
    pub(crate) multi_key: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: 20,
            processes: 3,
            threads: 3,
            tasks: 3,
            keys: 3,
            permits: 2,
            // New random choices every run; the report names the seed and
            // `--seed` repeats the choices (timing still varies).
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x5eed_f00d, |d| d.as_nanos() as u64),
            multi_key: 6,
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
            "--permits" => {
                options.permits = u32::try_from(value.clamp(1, 1024)).map_err(|e| e.to_string())?
            }
            "--seed" => options.seed = value,
            "--multi-key" => options.multi_key = value,
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

/// What a contender holds in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    Lock,
    Permit,
    Write,
    Read,
}

impl Kind {
    /// A third of the rounds take a lock, a third a permit, and the rest
    /// the read-write lease, reading three times out of four.
    fn pick(rng: &mut Rng) -> Kind {
        match rng.below(12) {
            0..=3 => Kind::Lock,
            4..=7 => Kind::Permit,
            8 => Kind::Write,
            _ => Kind::Read,
        }
    }

    fn code(self) -> char {
        match self {
            Kind::Lock => 'l',
            Kind::Permit => 's',
            Kind::Write => 'w',
            Kind::Read => 'r',
        }
    }

    fn from_code(code: &str) -> Option<Kind> {
        match code {
            "l" => Some(Kind::Lock),
            "s" => Some(Kind::Permit),
            "w" => Some(Kind::Write),
            "r" => Some(Kind::Read),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Permit => "permit",
            Kind::Write => "write",
            Kind::Read => "read",
        }
    }
}

/// The first tagged semaphore key's number: semaphore keys
/// `TAGGED_BASE..TAGGED_BASE + TAGGED_KEYS` carry the hash tag [`TAG`]
/// and live in the namespace [`tagged_namespace`], whose lockers have
/// `key_hash_tags(true)`.
const TAGGED_BASE: u64 = 100;
/// How many tagged semaphore keys (one tag: they share a hash slot).
const TAGGED_KEYS: u64 = 2;
/// The tagged semaphore keys' hash tag.
const TAG: &str = "tagged";

/// The namespace of the tagged semaphores' lockers: `key_hash_tags` is one
/// setting per namespace (a locker refuses to connect to a namespace whose
/// lockers recorded the other), and the other lockers keep the default.
fn tagged_namespace(namespace: &str) -> String {
    format!("{namespace}-tags")
}

/// A key number of `kind` at random: a semaphore's among the untagged and
/// the tagged ones, any other kind's among `0..keys`.
fn pick_key(rng: &mut Rng, kind: Kind, keys: u64) -> u64 {
    if kind != Kind::Permit {
        return rng.below(keys);
    }
    match rng.below(keys + TAGGED_KEYS) {
        i if i >= keys => TAGGED_BASE + i - keys,
        i => i,
    }
}

/// The key (and protected resource) of `kind` number `index`.
fn key_name(kind: Kind, index: u64) -> String {
    match kind {
        Kind::Lock => format!("torture:resource:{index}"),
        Kind::Permit if index >= TAGGED_BASE => format!("torture:sem:{{{TAG}}}:{index}"),
        Kind::Permit => format!("torture:sem:{index}"),
        Kind::Write | Kind::Read => format!("torture:rw:{index}"),
    }
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
    permits: u32,
    seed: u64,
    multi_key: u64,
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
            permits: u32::try_from(num(ENV_PERMITS)?).ok()?,
            seed: num(ENV_SEED)?,
            multi_key: num(ENV_MULTI_KEY)?,
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
    /// One round in this many takes a multi-key lease (`0`: none).
    multi_key: u64,
}

/// One fenced write's record: verdict (`1` accepted, `0` stale, `e`
/// error) and the logical clock before and after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WriteRecord {
    verdict: char,
    before: u64,
    after: u64,
}

fn verdict(result: &Result<(), WriteError>) -> char {
    match result {
        Ok(()) => '1',
        Err(WriteError::Stale(_)) => '0',
        Err(_) => 'e',
    }
}

/// One hold, as the contender saw it.
struct HoldLine {
    kind: Kind,
    key: u64,
    slot: u32,
    /// The fence, or the epoch of a read.
    fence: Fence,
    /// The logical clock before the acquire call and after its grant.
    started: u64,
    granted: u64,
    first: WriteRecord,
    second: WriteRecord,
    /// Both writes went out with at least [`VALID_MARGIN_MS`] of the lease
    /// left.
    valid: bool,
}

impl HoldLine {
    /// `H <kind> <key> <slot> <fence> <started> <granted> <v1> <b1> <a1>
    /// <v2> <b2> <a2> <valid>`.
    fn emit(&self) {
        let (f, s) = (self.first, self.second);
        emit(format_args!(
            "H {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.kind.code(),
            self.key,
            self.slot,
            self.fence,
            self.started,
            self.granted,
            f.verdict,
            f.before,
            f.after,
            s.verdict,
            s.before,
            s.after,
            u8::from(self.valid)
        ));
    }
}

/// `S <kind> <started>`: an acquire call starts. With `G` and `P` it tells
/// the controller what a worker killed mid-round was doing.
fn emit_started(kind: Kind, started: u64) {
    emit(format_args!("S {} {started}", kind.code()));
}

/// `G <kind> <key> <slot> <fence> <started> <granted>`: a grant.
fn emit_granted(kind: Kind, key: u64, slot: u32, fence: Fence, started: u64, granted: u64) {
    emit(format_args!(
        "G {} {key} {slot} {fence} {started} {granted}",
        kind.code()
    ));
}

/// `P <kind> <started> <v1> <b1> <a1>`: the first write of a hold.
fn emit_first_write(kind: Kind, started: u64, w: WriteRecord) {
    emit(format_args!(
        "P {} {started} {} {} {}",
        kind.code(),
        w.verdict,
        w.before,
        w.after
    ));
}

/// `E <kind> <code> <started> <ended>`: an acquire that failed.
fn emit_failed_acquire(kind: Kind, code: &str, started: u64, ended: u64) {
    emit(format_args!("E {} {code} {started} {ended}", kind.code()));
}

fn emit_release(kind: Kind, result: Result<redlease::ReleaseOutcome, redlease::Error>) {
    match result {
        Ok(outcome) => emit(format_args!("R {} {outcome:?}", kind.code())),
        Err(e) => emit(format_args!("F {} {}", kind.code(), e.code())),
    }
}

/// A multi-key lease's release: a lock's line marked `m`.
fn emit_multi_release(result: Result<redlease::ReleaseOutcome, redlease::Error>) {
    match result {
        Ok(outcome) => emit(format_args!("R l {outcome:?} m")),
        Err(e) => emit(format_args!("F l {} m", e.code())),
    }
}

/// With `--multi-key N`, one round in N takes two distinct lock keys as
/// one multi-key lease, in either order (so `{a, b}` and `{b, a}`
/// contend); with one key, none.
fn multi_pair(rng: &mut Rng, shared: &Shared) -> Option<[u64; 2]> {
    let (keys, every) = (shared.keys, shared.multi_key);
    if keys < 2 || every == 0 || rng.below(every) != 0 {
        return None;
    }
    let a = rng.below(keys);
    Some([a, (a + 1 + rng.below(keys - 1)) % keys])
}

/// A multi-key round, reported as one lock round per key (`S`, `G`, `P`,
/// `H` with a `started` of its own, both read before the acquire call), so
/// that the lock checks cover each key's holds, single- and multi-key
/// alike; `M <started> <started>` names the pair.
struct MultiRound {
    keys: [u64; 2],
    started: [u64; 2],
}

impl MultiRound {
    fn start(keys: [u64; 2], started: [u64; 2]) -> Self {
        emit(format_args!("M {} {}", started[0], started[1]));
        for s in started {
            emit_started(Kind::Lock, s);
        }
        MultiRound { keys, started }
    }

    fn names(&self) -> [String; 2] {
        self.keys.map(|k| key_name(Kind::Lock, k))
    }

    /// Each key's fence, once granted (`None`: not two fences, reported as
    /// a failed acquire).
    fn granted(&self, fences: &[Fence], granted: u64) -> Option<[Fence; 2]> {
        let &[a, b] = fences else {
            self.failed("UNEXPECTED_FENCES", granted);
            return None;
        };
        for (i, fence) in [a, b].into_iter().enumerate() {
            emit_granted(Kind::Lock, self.keys[i], 0, fence, self.started[i], granted);
        }
        Some([a, b])
    }

    fn failed(&self, code: &str, ended: u64) {
        for s in self.started {
            emit_failed_acquire(Kind::Lock, code, s, ended);
        }
    }

    fn first_writes(&self, first: [WriteRecord; 2]) {
        for (s, w) in self.started.into_iter().zip(first) {
            emit_first_write(Kind::Lock, s, w);
        }
    }

    fn holds(
        &self,
        fences: [Fence; 2],
        granted: u64,
        first: [WriteRecord; 2],
        second: [WriteRecord; 2],
        valid: bool,
    ) {
        for i in 0..2 {
            HoldLine {
                kind: Kind::Lock,
                key: self.keys[i],
                slot: 0,
                fence: fences[i],
                started: self.started[i],
                granted,
                first: first[i],
                second: second[i],
                valid,
            }
            .emit();
        }
    }
}

fn blocking_multi_round(
    shared: &Shared,
    locker: &redlease::blocking::Locker,
    store: &mut redis::Connection,
    rng: &mut Rng,
    keys: [u64; 2],
) {
    let round = MultiRound::start(keys, [(); 2].map(|()| tick_sync(shared, store)));
    let acquired = locker.acquire_all(&round.names());
    let granted = tick_sync(shared, store);
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) => return round.failed(e.code(), granted),
    };
    let Some(fences) = round.granted(lease.fences(), granted) else {
        return;
    };
    let mut valid = valid_for(lease.remaining());
    let mut write = |i: usize| write_sync(shared, store, Kind::Lock, keys[i], 0, fences[i]);
    let first = [write(0), write(1)];
    round.first_writes(first);
    thread::sleep(hold_time(rng));
    valid &= valid_for(lease.remaining());
    let second = [write(0), write(1)];
    round.holds(fences, granted, first, second, valid);
    emit_multi_release(lease.release());
}

async fn async_multi_round(
    shared: &Shared,
    locker: &redlease::aio::Locker,
    store: &mut redis::aio::MultiplexedConnection,
    rng: &mut Rng,
    keys: [u64; 2],
) {
    let started = [
        tick_async(shared, store).await,
        tick_async(shared, store).await,
    ];
    let round = MultiRound::start(keys, started);
    let acquired = locker.acquire_all(&round.names()).await;
    let granted = tick_async(shared, store).await;
    let lease = match acquired {
        Ok(lease) => lease,
        Err(e) => return round.failed(e.code(), granted),
    };
    let Some(fences) = round.granted(lease.fences(), granted) else {
        return;
    };
    let mut valid = valid_for(lease.remaining());
    let first = [
        write_async(shared, store, Kind::Lock, keys[0], 0, fences[0]).await,
        write_async(shared, store, Kind::Lock, keys[1], 0, fences[1]).await,
    ];
    round.first_writes(first);
    async_io::Timer::after(hold_time(rng)).await;
    valid &= valid_for(lease.remaining());
    let second = [
        write_async(shared, store, Kind::Lock, keys[0], 0, fences[0]).await,
        write_async(shared, store, Kind::Lock, keys[1], 0, fences[1]).await,
    ];
    round.holds(fences, granted, first, second, valid);
    emit_multi_release(lease.release().await);
}

fn tick_sync(shared: &Shared, conn: &mut redis::Connection) -> u64 {
    redis::cmd("INCR")
        .arg(&shared.clock_key)
        .query::<u64>(conn)
        .unwrap_or(0)
}

async fn tick_async(shared: &Shared, conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    redis::cmd("INCR")
        .arg(&shared.clock_key)
        .query_async::<u64>(conn)
        .await
        .unwrap_or(0)
}

/// A fenced write of `kind` bracketed by two reads of the store's logical
/// clock.
fn write_sync(
    shared: &Shared,
    conn: &mut redis::Connection,
    kind: Kind,
    key: u64,
    slot: u32,
    fence: Fence,
) -> WriteRecord {
    let before = tick_sync(shared, conn);
    let (store, name) = (&shared.store, key_name(kind, key));
    let result = match kind {
        Kind::Lock | Kind::Write => store.write(conn, &name, fence, fence.get()),
        Kind::Permit => store.write_permit(conn, &name, slot, fence, fence.get()),
        Kind::Read => store.write_derived(conn, &name, fence, fence.get()),
    };
    let after = tick_sync(shared, conn);
    WriteRecord {
        verdict: verdict(&result),
        before,
        after,
    }
}

async fn write_async(
    shared: &Shared,
    conn: &mut redis::aio::MultiplexedConnection,
    kind: Kind,
    key: u64,
    slot: u32,
    fence: Fence,
) -> WriteRecord {
    let before = tick_async(shared, conn).await;
    let (store, name) = (&shared.store, key_name(kind, key));
    let result = match kind {
        Kind::Lock | Kind::Write => store.write_async(conn, &name, fence, fence.get()).await,
        Kind::Permit => {
            store
                .write_permit_async(conn, &name, slot, fence, fence.get())
                .await
        }
        Kind::Read => {
            store
                .write_derived_async(conn, &name, fence, fence.get())
                .await
        }
    };
    let after = tick_async(shared, conn).await;
    WriteRecord {
        verdict: verdict(&result),
        before,
        after,
    }
}

/// Whatever a blocking contender holds.
enum BlockingHeld {
    Lock(redlease::blocking::Lease),
    Permit(redlease::blocking::Permit),
    Write(redlease::blocking::WriteLease),
    Read(redlease::blocking::ReadLease),
}

impl BlockingHeld {
    /// `(slot, fence or epoch)`.
    fn grant(&self) -> (u32, Fence) {
        match self {
            BlockingHeld::Lock(l) => (0, l.fence()),
            BlockingHeld::Permit(p) => (p.slot(), p.fence()),
            BlockingHeld::Write(w) => (0, w.fence()),
            BlockingHeld::Read(r) => (0, r.epoch()),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            BlockingHeld::Lock(l) => l.remaining(),
            BlockingHeld::Permit(p) => p.remaining(),
            BlockingHeld::Write(w) => w.remaining(),
            BlockingHeld::Read(r) => r.remaining(),
        }
    }

    fn release(self) -> Result<redlease::ReleaseOutcome, redlease::Error> {
        match self {
            BlockingHeld::Lock(l) => l.release(),
            BlockingHeld::Permit(p) => p.release(),
            BlockingHeld::Write(w) => w.release(),
            BlockingHeld::Read(r) => r.release(),
        }
    }
}

/// Whatever an async contender holds.
enum AsyncHeld {
    Lock(redlease::aio::Lease),
    Permit(redlease::aio::Permit),
    Write(redlease::aio::WriteLease),
    Read(redlease::aio::ReadLease),
}

impl AsyncHeld {
    /// `(slot, fence or epoch)`.
    fn grant(&self) -> (u32, Fence) {
        match self {
            AsyncHeld::Lock(l) => (0, l.fence()),
            AsyncHeld::Permit(p) => (p.slot(), p.fence()),
            AsyncHeld::Write(w) => (0, w.fence()),
            AsyncHeld::Read(r) => (0, r.epoch()),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            AsyncHeld::Lock(l) => l.remaining(),
            AsyncHeld::Permit(p) => p.remaining(),
            AsyncHeld::Write(w) => w.remaining(),
            AsyncHeld::Read(r) => r.remaining(),
        }
    }

    async fn release(self) -> Result<redlease::ReleaseOutcome, redlease::Error> {
        match self {
            AsyncHeld::Lock(l) => l.release().await,
            AsyncHeld::Permit(p) => p.release().await,
            AsyncHeld::Write(w) => w.release().await,
            AsyncHeld::Read(r) => r.release().await,
        }
    }
}

/// A front end's handles: one semaphore and one read-write lease per key.
struct Handles<S, W> {
    semaphores: Vec<S>,
    rw_locks: Vec<W>,
    /// The tagged semaphores (keys from [`TAGGED_BASE`]), on the tagged
    /// namespace's locker.
    tagged: Vec<S>,
    /// The read-write leases again, on a locker of the same namespace with
    /// the hand-over off (empty: none). A third of the reads take them.
    rw_off: Vec<W>,
}

impl<S, W> Handles<S, W> {
    /// Semaphore key number `key`, tagged or not.
    fn semaphore(&self, key: u64) -> &S {
        match key.checked_sub(TAGGED_BASE) {
            Some(j) => &self.tagged[j as usize],
            None => &self.semaphores[key as usize],
        }
    }

    /// Read-write key number `key`'s lease, on the hand-over-off locker
    /// when `off`.
    fn rw(&self, key: u64, off: bool) -> &W {
        if off {
            &self.rw_off[key as usize]
        } else {
            &self.rw_locks[key as usize]
        }
    }

    /// Whether a read takes the hand-over-off locker (one in three).
    fn read_off(&self, rng: &mut Rng) -> bool {
        !self.rw_off.is_empty() && rng.below(3) == 0
    }
}

/// `O <started>`: the read round that started at `started` runs on a
/// locker with the hand-over off.
fn emit_handover_off(started: u64) {
    emit(format_args!("O {started}"));
}

/// `B <burst> <started>`: the round that started at `started` belongs to
/// burst `burst` (a controller's `burst` command).
fn emit_burst(burst: u64, started: u64) {
    emit(format_args!("B {burst} {started}"));
}

fn valid_for(remaining: Duration) -> bool {
    remaining >= ms(VALID_MARGIN_MS)
}

/// One round of a burst, on a locker of its own.
fn burst_round(
    shared: &Shared,
    store: &mut redis::Connection,
    url: &str,
    config: Config,
    burst: Burst,
    off: bool,
    permits: u32,
) {
    let locker = match redlease::blocking::Locker::connect(url, config) {
        Ok(locker) => locker,
        Err(e) => {
            emit(format_args!("Y burst {} connect {}", burst.id, e.code()));
            return;
        }
    };
    let options = AcquireOptions::new()
        .lease(ms(burst.lease_ms))
        .wait(ms(burst.wait_ms));
    let (kind, name) = (burst.kind, key_name(burst.kind, burst.key));
    let acquire = || match kind {
        Kind::Lock => locker.acquire_with(&name, options).map(BlockingHeld::Lock),
        Kind::Permit => locker
            .semaphore(&name, permits)
            .and_then(|s| s.acquire_with(options))
            .map(BlockingHeld::Permit),
        Kind::Write => locker
            .rw_lock(&name)
            .and_then(|rw| rw.write_with(options))
            .map(BlockingHeld::Write),
        Kind::Read => locker
            .rw_lock(&name)
            .and_then(|rw| rw.read_with(options))
            .map(BlockingHeld::Read),
    };
    blocking_round(
        shared,
        store,
        (kind, burst.key, off),
        |started| emit_burst(burst.id, started),
        acquire,
        || ms(burst.hold_ms),
    );
    if let Err(e) = locker.shutdown() {
        emit(format_args!("Y burst {} shutdown {}", burst.id, e.code()));
    }
}

type BlockingHandles = Handles<redlease::blocking::Semaphore, redlease::blocking::RwLock>;

/// One blocking round of `kind` on key number `key`: `S` (then whatever
/// `mark` prints about the round), `acquire`, `G`, the first write, a hold
/// of `hold`, the second write, `H` and the release; or `E`.
fn blocking_round(
    shared: &Shared,
    store: &mut redis::Connection,
    (kind, key, off): (Kind, u64, bool),
    mark: impl FnOnce(u64),
    acquire: impl FnOnce() -> Result<BlockingHeld, redlease::Error>,
    hold: impl FnOnce() -> Duration,
) {
    let started = tick_sync(shared, store);
    emit_started(kind, started);
    if off {
        emit_handover_off(started);
    }
    mark(started);
    let acquired = acquire();
    let granted = tick_sync(shared, store);
    match acquired {
        Ok(held) => {
            let (slot, fence) = held.grant();
            emit_granted(kind, key, slot, fence, started, granted);
            let mut valid = valid_for(held.remaining());
            let first = write_sync(shared, store, kind, key, slot, fence);
            emit_first_write(kind, started, first);
            thread::sleep(hold());
            valid &= valid_for(held.remaining());
            let second = write_sync(shared, store, kind, key, slot, fence);
            HoldLine {
                kind,
                key,
                slot,
                fence,
                started,
                granted,
                first,
                second,
                valid,
            }
            .emit();
            emit_release(kind, held.release());
        }
        Err(e) => emit_failed_acquire(kind, e.code(), started, granted),
    }
}

fn blocking_contender(
    shared: &Shared,
    locker: &redlease::blocking::Locker,
    handles: &BlockingHandles,
    mut store: redis::Connection,
    mut rng: Rng,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        if let Some(keys) = multi_pair(&mut rng, shared) {
            blocking_multi_round(shared, locker, &mut store, &mut rng, keys);
            thread::sleep(ms(rng.below(20)));
            continue;
        }
        let kind = Kind::pick(&mut rng);
        let key = pick_key(&mut rng, kind, shared.keys);
        let off = kind == Kind::Read && handles.read_off(&mut rng);
        let hold = hold_time(&mut rng);
        let acquire = || match kind {
            Kind::Lock => locker.acquire(&key_name(kind, key)).map(BlockingHeld::Lock),
            Kind::Permit => handles.semaphore(key).acquire().map(BlockingHeld::Permit),
            Kind::Write => handles.rw(key, false).write().map(BlockingHeld::Write),
            Kind::Read => handles.rw(key, off).read().map(BlockingHeld::Read),
        };
        blocking_round(
            shared,
            &mut store,
            (kind, key, off),
            |_| {},
            acquire,
            || hold,
        );
        thread::sleep(ms(rng.below(20)));
    }
}

/// A controller's `burst <id> <kind> <key> <count> <lease ms> <wait ms>
/// <hold ms> <off>`: `count` threads each connect a locker of their own
/// (a locker has one registration per key in a hand-over queue, so
/// `count` lockers are `count` registrants) and run one blocking round of
/// `kind` on key number `key` at once, with that lease and wait, holding
/// `hold` ms; the first `off` of them (reads) with the hand-over off.
#[derive(Debug, Clone, Copy)]
struct Burst {
    id: u64,
    kind: Kind,
    key: u64,
    count: u64,
    lease_ms: u64,
    wait_ms: u64,
    hold_ms: u64,
    off: u64,
}

impl Burst {
    fn command(&self) -> String {
        format!(
            "burst {} {} {} {} {} {} {} {}",
            self.id,
            self.kind.code(),
            self.key,
            self.count,
            self.lease_ms,
            self.wait_ms,
            self.hold_ms,
            self.off
        )
    }

    fn parse(line: &str) -> Option<Burst> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| fields.get(i).and_then(|s| s.parse::<u64>().ok());
        (fields.first() == Some(&"burst")).then_some(())?;
        Some(Burst {
            id: num(1)?,
            kind: Kind::from_code(fields.get(2)?)?,
            key: num(3)?,
            count: num(4)?,
            lease_ms: num(5)?,
            wait_ms: num(6)?,
            hold_ms: num(7)?,
            off: num(8)?,
        })
    }
}

async fn async_contender(
    shared: &Shared,
    locker: &redlease::aio::Locker,
    handles: &Handles<redlease::aio::Semaphore, redlease::aio::RwLock>,
    mut store: redis::aio::MultiplexedConnection,
    mut rng: Rng,
) {
    while !shared.stop.load(Ordering::SeqCst) {
        if let Some(keys) = multi_pair(&mut rng, shared) {
            async_multi_round(shared, locker, &mut store, &mut rng, keys).await;
            async_io::Timer::after(ms(rng.below(20))).await;
            continue;
        }
        let kind = Kind::pick(&mut rng);
        let key = pick_key(&mut rng, kind, shared.keys);
        let index = key as usize;
        let started = tick_async(shared, &mut store).await;
        emit_started(kind, started);
        let acquired = match kind {
            Kind::Lock => locker
                .acquire(&key_name(kind, key))
                .await
                .map(AsyncHeld::Lock),
            Kind::Permit => handles
                .semaphore(key)
                .acquire()
                .await
                .map(AsyncHeld::Permit),
            Kind::Write => handles.rw_locks[index].write().await.map(AsyncHeld::Write),
            Kind::Read => handles.rw_locks[index].read().await.map(AsyncHeld::Read),
        };
        let granted = tick_async(shared, &mut store).await;
        match acquired {
            Ok(held) => {
                let (slot, fence) = held.grant();
                emit_granted(kind, key, slot, fence, started, granted);
                let mut valid = valid_for(held.remaining());
                let first = write_async(shared, &mut store, kind, key, slot, fence).await;
                emit_first_write(kind, started, first);
                async_io::Timer::after(hold_time(&mut rng)).await;
                valid &= valid_for(held.remaining());
                let second = write_async(shared, &mut store, kind, key, slot, fence).await;
                HoldLine {
                    kind,
                    key,
                    slot,
                    fence,
                    started,
                    granted,
                    first,
                    second,
                    valid,
                }
                .emit();
                emit_release(kind, held.release().await);
            }
            Err(e) => emit_failed_acquire(kind, e.code(), started, granted),
        }
        async_io::Timer::after(ms(rng.below(20))).await;
    }
}

/// One worker process: a blocking locker shared by `threads` threads and an
/// async locker shared by `tasks` tasks (on one thread, under
/// `futures::executor::block_on`), each with a semaphore and a read-write
/// lease handle per key. Runs until "stop" (or EOF) on stdin, then reports
/// stranded contenders, shuts both lockers down and exits.
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

/// Every locker's settings, in `namespace`.
fn locker_config(namespace: String) -> Config {
    Config::new(namespace)
        .lease(ms(LEASE_MS))
        .wait(ms(WAIT_MS))
        .command_timeout(ms(COMMAND_TIMEOUT_MS))
        .shutdown_timeout(ms(3000))
}

fn run_worker(p: &WorkerParams) -> Result<(), Box<dyn Error>> {
    let config = locker_config(p.namespace.clone());
    let blocking = Arc::new(redlease::blocking::Locker::connect(
        p.lock_url.as_str(),
        config.clone(),
    )?);
    let aio = Arc::new(futures::executor::block_on(
        redlease::aio::Locker::connect(p.lock_url.as_str(), config.clone()),
    )?);
    // Readers with the hand-over off beside the ones with it on, on the
    // same read-write keys (it never registers in their queues).
    let blocking_off =
        redlease::blocking::Locker::connect(p.lock_url.as_str(), config.clone().handover(false))?;
    // The tagged semaphores' lockers: hash tags on, in their own namespace.
    let tagged_config = locker_config(tagged_namespace(&p.namespace)).key_hash_tags(true);
    let blocking_tagged =
        redlease::blocking::Locker::connect(p.lock_url.as_str(), tagged_config.clone())?;
    let aio_tagged = futures::executor::block_on(redlease::aio::Locker::connect(
        p.lock_url.as_str(),
        tagged_config,
    ))?;
    let tagged_keys = TAGGED_BASE..TAGGED_BASE + TAGGED_KEYS;
    let blocking_handles = Arc::new(Handles {
        semaphores: (0..p.keys)
            .map(|k| blocking.semaphore(&key_name(Kind::Permit, k), p.permits))
            .collect::<Result<_, _>>()?,
        rw_locks: (0..p.keys)
            .map(|k| blocking.rw_lock(&key_name(Kind::Write, k)))
            .collect::<Result<_, _>>()?,
        tagged: tagged_keys
            .clone()
            .map(|k| blocking_tagged.semaphore(&key_name(Kind::Permit, k), p.permits))
            .collect::<Result<_, _>>()?,
        rw_off: (0..p.keys)
            .map(|k| blocking_off.rw_lock(&key_name(Kind::Write, k)))
            .collect::<Result<_, _>>()?,
    });
    let aio_handles = Arc::new(Handles {
        semaphores: (0..p.keys)
            .map(|k| aio.semaphore(&key_name(Kind::Permit, k), p.permits))
            .collect::<Result<_, _>>()?,
        rw_locks: (0..p.keys)
            .map(|k| aio.rw_lock(&key_name(Kind::Write, k)))
            .collect::<Result<_, _>>()?,
        tagged: tagged_keys
            .map(|k| aio_tagged.semaphore(&key_name(Kind::Permit, k), p.permits))
            .collect::<Result<_, _>>()?,
        rw_off: Vec::new(),
    });
    let store_client = redis::Client::open(p.store_url.as_str())?;
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        store: FencedStore::new(format!("{}-store", p.namespace)),
        clock_key: format!("{}-store:clock", p.namespace),
        keys: p.keys,
        multi_key: p.multi_key,
    });
    let worker_seed = p.seed
        ^ p.id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31) + u64::from(b));
    let (done_tx, done_rx) = mpsc::channel::<()>();

    for i in 0..p.threads {
        let (shared, locker, handles, done) = (
            shared.clone(),
            blocking.clone(),
            blocking_handles.clone(),
            done_tx.clone(),
        );
        let store = store_client.get_connection_with_timeout(ms(2000))?;
        let rng = Rng::new(worker_seed ^ (i as u64 + 1));
        thread::Builder::new()
            .name(format!("contender-{i}"))
            .spawn(move || {
                blocking_contender(&shared, &locker, &handles, store, rng);
                emit(format_args!("D"));
                let _ = done.send(());
            })?;
    }
    if p.tasks > 0 {
        let (shared, locker, handles, done) = (
            shared.clone(),
            aio.clone(),
            aio_handles.clone(),
            done_tx.clone(),
        );
        let store = futures::executor::block_on(store_client.get_multiplexed_async_connection())?;
        let (tasks, seed) = (p.tasks, worker_seed);
        thread::Builder::new().name("tasks".into()).spawn(move || {
            let contenders = (0..tasks).map(|i| {
                let (shared, locker, handles, store, done) = (
                    shared.clone(),
                    locker.clone(),
                    handles.clone(),
                    store.clone(),
                    done.clone(),
                );
                let rng = Rng::new(seed ^ (0x1000 + i as u64));
                async move {
                    async_contender(&shared, &locker, &handles, store, rng).await;
                    emit(format_args!("D"));
                    let _ = done.send(());
                }
            });
            futures::executor::block_on(futures::future::join_all(contenders));
        })?;
    }
    drop(done_tx);
    emit(format_args!("READY"));

    // Run until told to stop (or until the controller goes away); start
    // the bursts it asks for meanwhile.
    let (burst_tx, burst_rx) = mpsc::channel::<()>();
    let mut burst_threads = 0usize;
    let mut line = String::new();
    let stdin = std::io::stdin();
    while stdin.lock().read_line(&mut line).unwrap_or(0) > 0 && line.trim() != "stop" {
        match Burst::parse(&line) {
            Some(burst) => {
                for n in 0..burst.count {
                    let off = burst.kind == Kind::Read && n < burst.off;
                    let config = if burst.kind == Kind::Permit && burst.key >= TAGGED_BASE {
                        locker_config(tagged_namespace(&p.namespace)).key_hash_tags(true)
                    } else {
                        locker_config(p.namespace.clone()).handover(!off)
                    };
                    let (shared, done, url, permits) = (
                        shared.clone(),
                        burst_tx.clone(),
                        p.lock_url.clone(),
                        p.permits,
                    );
                    let Ok(mut store) = store_client.get_connection_with_timeout(ms(2000)) else {
                        emit(format_args!("Y burst {} store", burst.id));
                        continue;
                    };
                    burst_threads += 1;
                    thread::spawn(move || {
                        burst_round(&shared, &mut store, &url, config, burst, off, permits);
                        let _ = done.send(());
                    });
                }
            }
            None => emit(format_args!("Y unknown command {}", line.trim())),
        }
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
    let mut bursts_finished = 0;
    while bursts_finished < burst_threads {
        let left = deadline.saturating_duration_since(Instant::now());
        match burst_rx.recv_timeout(left) {
            Ok(()) => bursts_finished += 1,
            Err(_) => break,
        }
    }
    emit(format_args!(
        "X {}",
        total - finished + burst_threads - bursts_finished
    ));
    if let Err(e) = blocking.shutdown() {
        emit(format_args!("Y blocking {}", e.code()));
    }
    if let Err(e) = futures::executor::block_on(aio.shutdown()) {
        emit(format_args!("Y aio {}", e.code()));
    }
    if let Err(e) = blocking_off.shutdown() {
        emit(format_args!("Y blocking_off {}", e.code()));
    }
    if let Err(e) = blocking_tagged.shutdown() {
        emit(format_args!("Y blocking_tagged {}", e.code()));
    }
    if let Err(e) = futures::executor::block_on(aio_tagged.shutdown()) {
        emit(format_args!("Y aio_tagged {}", e.code()));
    }
    emit(format_args!("BYE"));
    Ok(())
}

// ----- the controller --------------------------------------------------------------

/// One hold a worker reported (an `H` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hold {
    kind: Kind,
    key: u64,
    slot: u32,
    /// The fence, or the epoch of a read.
    fence: u64,
    started: u64,
    granted: u64,
    first: WriteRecord,
    second: WriteRecord,
    valid: bool,
}

impl Hold {
    fn parse(fields: &[&str]) -> Option<Hold> {
        let num = |i: usize| fields.get(i).and_then(|s| s.parse::<u64>().ok());
        let record = |i: usize| {
            Some(WriteRecord {
                verdict: fields.get(i)?.chars().next()?,
                before: num(i + 1)?,
                after: num(i + 2)?,
            })
        };
        Some(Hold {
            kind: Kind::from_code(fields.get(1)?)?,
            key: num(2)?,
            slot: u32::try_from(num(3)?).ok()?,
            fence: num(4)?,
            started: num(5)?,
            granted: num(6)?,
            first: record(7)?,
            second: record(10)?,
            valid: num(13)? == 1,
        })
    }

    /// When this holder certainly held, by the store's logical clock: from
    /// the end of its first write to the start of its second, when the
    /// store accepted both.
    fn tenure(&self) -> Option<(u64, u64)> {
        (self.first.verdict == '1' && self.second.verdict == '1')
            .then_some((self.first.after, self.second.before))
    }

    /// The register of the store this hold wrote to: the lock's, the
    /// permit's slot, or the read-write lease's (shared by both modes).
    fn register(&self) -> (Kind, u64, u32) {
        match self.kind {
            Kind::Read => (Kind::Write, self.key, 0),
            kind => (kind, self.key, self.slot),
        }
    }
}

/// An acquire that failed (an `E` line): for a write, its grant may still
/// have moved the fence counter.
#[derive(Debug, Clone, Copy)]
struct FailedAcquire {
    kind: Kind,
    started: u64,
    ended: u64,
}

/// A round a worker started and has not finished (no `H` or `E` yet),
/// keyed by (kind, started): what it was doing if it is killed.
#[derive(Debug, Default, Clone, Copy)]
struct OpenRound {
    /// `(key, slot, fence, granted)` once granted.
    grant: Option<(u64, u32, u64, u64)>,
    first: Option<WriteRecord>,
}

/// The kind a release line (`R`/`F <kind> <what> [m]`) is counted under:
/// `multi_key` with the trailing `m` of a multi-key lease's release.
fn released_name(fields: &[&str]) -> &'static str {
    if fields.get(3) == Some(&"m") {
        return "multi_key";
    }
    fields
        .get(1)
        .and_then(|c| Kind::from_code(c))
        .map_or("?", Kind::name)
}

/// What one worker process reported.
#[derive(Debug, Default)]
struct WorkerLog {
    ready: bool,
    holds: Vec<Hold>,
    failed: Vec<FailedAcquire>,
    open: BTreeMap<(Kind, u64), OpenRound>,
    /// The store's logical clock just after the controller killed this
    /// worker (every command it sent had been run by then).
    killed_at: Option<u64>,
    /// The store's logical clock once the registrations its waiting
    /// acquires had queued for the hand-over were surely gone
    /// ([`REGISTRATIONS_GONE`] after the kill; `None`: not read before the
    /// run ended, so until its end).
    registrations_gone_at: Option<u64>,
    malformed: usize,
    /// The `started` of each multi-key round's (`M`) first and second key,
    /// and how many of those rounds reported their holds.
    multi_firsts: HashSet<u64>,
    multi_seconds: HashSet<u64>,
    multi_holds: u64,
    /// Burst rounds (`B`): each round's burst id by its `started`, and per
    /// burst how many rounds started, were granted and finished.
    burst_of: HashMap<u64, u64>,
    burst_started: HashMap<u64, u64>,
    burst_granted: HashMap<u64, u64>,
    burst_finished: HashMap<u64, u64>,
    /// Reads on the hand-over-off locker (`O`): their `started`, and how
    /// many held.
    off_reads: HashSet<u64>,
    off_read_holds: u64,
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
        let kind = |i: usize| fields.get(i).and_then(|c| Kind::from_code(c));
        let kind_name = |i: usize| kind(i).map_or("?", Kind::name);
        match fields.first().copied().unwrap_or("") {
            "READY" => self.ready = true,
            "S" => match kind(1) {
                Some(kind) => {
                    self.open.insert((kind, num(2)), OpenRound::default());
                }
                None => self.malformed += 1,
            },
            "G" => match kind(1).and_then(|k| self.open.get_mut(&(k, num(5)))) {
                Some(round) => {
                    let slot = u32::try_from(num(3)).unwrap_or(u32::MAX);
                    round.grant = Some((num(2), slot, num(4), num(6)));
                    if let Some(&id) = self.burst_of.get(&num(5)) {
                        *self.burst_granted.entry(id).or_default() += 1;
                    }
                }
                None => self.malformed += 1,
            },
            "B" => {
                self.burst_of.insert(num(2), num(1));
                *self.burst_started.entry(num(1)).or_default() += 1;
            }
            "O" => {
                self.off_reads.insert(num(1));
            }
            "P" => match kind(1).and_then(|k| self.open.get_mut(&(k, num(2)))) {
                Some(round) => {
                    round.first = Some(WriteRecord {
                        verdict: fields.get(3).and_then(|v| v.chars().next()).unwrap_or('?'),
                        before: num(4),
                        after: num(5),
                    });
                }
                None => self.malformed += 1,
            },
            "M" => {
                self.multi_firsts.insert(num(1));
                self.multi_seconds.insert(num(2));
            }
            "H" => match Hold::parse(&fields) {
                Some(hold) => {
                    if hold.kind == Kind::Lock && self.multi_firsts.contains(&hold.started) {
                        self.multi_holds += 1;
                    }
                    self.open.remove(&(hold.kind, hold.started));
                    if let Some(&id) = self.burst_of.get(&hold.started) {
                        *self.burst_finished.entry(id).or_default() += 1;
                    }
                    if hold.kind == Kind::Read && self.off_reads.contains(&hold.started) {
                        self.off_read_holds += 1;
                    }
                    self.holds.push(hold);
                }
                None => self.malformed += 1,
            },
            "E" => {
                if let Some(kind) = kind(1) {
                    self.open.remove(&(kind, num(3)));
                }
                if let Some(&id) = self.burst_of.get(&num(3)) {
                    *self.burst_finished.entry(id).or_default() += 1;
                }
                // A multi-key round's failure counts once, as its own.
                let what = if self.multi_firsts.contains(&num(3)) {
                    Some("multi_key")
                } else if self.multi_seconds.contains(&num(3)) {
                    None
                } else {
                    Some(kind_name(1))
                };
                if let Some(what) = what {
                    *self
                        .errors
                        .entry(format!("{what}/acquire:{}", text(2)))
                        .or_default() += 1;
                }
                if let Some(kind) = kind(1) {
                    self.failed.push(FailedAcquire {
                        kind,
                        started: num(3),
                        ended: num(4),
                    });
                }
            }
            "F" => {
                *self
                    .errors
                    .entry(format!("{}/release:{}", released_name(&fields), text(2)))
                    .or_default() += 1
            }
            "R" => {
                *self
                    .releases
                    .entry(format!("{}/{}", released_name(&fields), text(2)))
                    .or_default() += 1
            }
            "D" => self.done += 1,
            "X" => self.stranded = Some(num(1) as usize),
            "Y" => self.shutdown_errors.push(fields[1..].join(" ")),
            "Z" => self.failure = Some(fields[1..].join(" ")),
            "BYE" => self.said_bye = true,
            _ => {}
        }
    }

    /// The rounds a worker killed at clock `killed_at` had not finished:
    /// its holds, whose writes it did not report have an unknown outcome
    /// (`k`: maybe accepted, before `killed_at`), never certainly held (no
    /// tenure); and its write acquires without a grant, whose grant may
    /// have moved the fence counter unseen: before `killed_at`, and after
    /// it while their hand-over registration lived (a grant made out to it
    /// lapses unclaimed), until `registrations_gone_at`.
    fn cut_short(&self, killed_at: u64) -> (Vec<Hold>, Vec<FailedAcquire>) {
        let unknown = |before| WriteRecord {
            verdict: 'k',
            before,
            after: killed_at,
        };
        let (mut holds, mut failed) = (Vec::new(), Vec::new());
        for (&(kind, started), round) in &self.open {
            match round.grant {
                Some((key, slot, fence, granted)) => holds.push(Hold {
                    kind,
                    key,
                    slot,
                    fence,
                    started,
                    granted,
                    first: round.first.unwrap_or(unknown(granted)),
                    second: unknown(round.first.map_or(granted, |w| w.after)),
                    valid: false,
                }),
                None => failed.push(FailedAcquire {
                    kind,
                    started,
                    ended: self
                        .registrations_gone_at
                        .unwrap_or(u64::MAX)
                        .max(killed_at),
                }),
            }
        }
        (holds, failed)
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
    /// Worker processes SIGKILLed (holding or waiting) and replaced.
    worker_kill: u64,
    /// Queue scenarios: a burst of waiters killed at once while queued on
    /// a read-write key, ahead of a burst of live readers and a writer.
    queued_kill: u64,
    /// Bursts of waiters on a tagged semaphore.
    tagged_burst: u64,
    /// The store's logical clock before and after each restart: the fence
    /// counters were lost somewhere in between.
    restarts: Vec<(u64, u64)>,
    /// When the last worker was killed: its tokens expire within a lease.
    last_kill: Option<Instant>,
    /// The last fault on the lock's server, and when it ended.
    last_on_redis: Option<(&'static str, Instant)>,
}

impl Faults {
    fn total(&self) -> u64 {
        self.sigstop
            + self.client_kill_normal
            + self.client_kill_pubsub
            + self.restart_with_data_loss
            + self.script_flush
            + self.worker_kill
            + self.queued_kill
            + self.tagged_burst
    }
}

/// The checks every kind shares, on the store's registers.
#[derive(Debug, Default, Clone)]
struct FenceChecks {
    /// A write accepted after (by the logical clock) a write with a higher
    /// fence was accepted for the same register.
    ordering_violations: u64,
    /// Two grants of one key (one slot) with the same fence.
    duplicate_fences: u64,
    /// A register whose final fence is not the highest one it accepted.
    store_mismatches: u64,
}

impl FenceChecks {
    fn violations(&self) -> u64 {
        self.ordering_violations + self.duplicate_fences + self.store_mismatches
    }

    fn json(&self) -> String {
        format!(
            "\"ordering_violations\":{},\"duplicate_fences\":{},\"store_mismatches\":{}",
            self.ordering_violations, self.duplicate_fences, self.store_mismatches
        )
    }
}

/// The semaphore's checks.
#[derive(Debug, Default, Clone)]
struct SemaphoreChecks {
    fences: FenceChecks,
    /// A permit whose slot is not below the permit count.
    slot_out_of_range: u64,
    /// Two holders of one slot certainly holding at once.
    slot_overlaps: u64,
    /// A holder that certainly held while `permits` others of its key did.
    over_capacity: u64,
    /// The most holders of one key that certainly held at once (not a
    /// check: shows that the permits were really shared).
    most_holders_at_once: u64,
}

impl SemaphoreChecks {
    fn violations(&self) -> u64 {
        self.fences.violations() + self.slot_out_of_range + self.slot_overlaps + self.over_capacity
    }
}

/// The read-write lease's checks.
#[derive(Debug, Default, Clone)]
struct RwChecks {
    fences: FenceChecks,
    /// A writer certainly holding at once with another writer or a reader.
    writer_overlaps: u64,
    /// Two writers granted one after the other whose fences do not increase.
    write_fence_order: u64,
    /// A reader whose epoch is not the fence of the last writer granted
    /// before it (nor a larger value that a restart or a write acquire with
    /// an unknown outcome explains).
    epoch_mismatches: u64,
    /// A writer's write accepted after (by the logical clock) a write
    /// derived at its fence was accepted: that writer's lease had ended.
    writes_after_derived: u64,
    /// A reader or a writer whose write the store refused as stale while
    /// its lease was valid (both writes with at least [`VALID_MARGIN_MS`]
    /// of it left), with no restart with data loss since its acquire: a
    /// higher fence (a writer), or a read at its fence, got in beside a
    /// live holder. A writer beside a live reader shows here: the reader's
    /// next derived write is refused, so it never *certainly held* at once
    /// with that writer and `writer_overlaps` cannot see it.
    fenced_out_while_valid: u64,
    /// Not a check: writers' writes the store refused after a write derived
    /// at their fence was accepted (writers past their lease, fenced out
    /// by that reader's write or by a newer writer's).
    expired_writers_refused: u64,
    /// Not a check: writers that wrote with less than [`VALID_MARGIN_MS`]
    /// of their lease left.
    late_writers: u64,
    /// The most readers of one key that certainly held at once.
    most_readers_at_once: u64,
}

impl RwChecks {
    fn violations(&self) -> u64 {
        self.fences.violations()
            + self.writer_overlaps
            + self.write_fence_order
            + self.epoch_mismatches
            + self.writes_after_derived
            + self.fenced_out_while_valid
    }
}

/// The checks of the worker kills.
#[derive(Debug, Default, Clone)]
struct KillChecks {
    /// A grant of a killed holder's key (slot) that started after the kill
    /// with a fence not above the killed holder's: its fence reused.
    fence_reused: u64,
    /// Not a check: killed holders by kind name (holding at the kill).
    holding: BTreeMap<&'static str, u64>,
    /// Not a check: contenders killed inside an acquire call.
    acquiring: u64,
    /// Not a check: killed holds (not reads) whose key or slot was granted
    /// again after the kill (their lease expired; the next one got in).
    taken_over: u64,
}

impl KillChecks {
    fn violations(&self) -> u64 {
        self.fence_reused
    }
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub(crate) struct Report {
    options: Option<Options>,
    /// Grants by kind name.
    acquisitions: BTreeMap<&'static str, u64>,
    /// Multi-key leases held (each also two grants in `lock`).
    multi_key: u64,
    faults: Faults,
    writes_accepted: u64,
    stale_writes_rejected: u64,
    store_errors: u64,
    lock: FenceChecks,
    semaphore: SemaphoreChecks,
    rw: RwChecks,
    kills: KillChecks,
    /// Writes of killed holders whose outcome is unknown.
    writes_cut_short: u64,
    /// Not checks: what the queue scenarios did and saw.
    queues: QueueStats,
    /// Of the readers bursts queued ahead of a writer: the most readers of
    /// one burst granted before that writer, and the burst readers granted
    /// after their writer (queued behind it: none should be).
    readers_ahead: (u64, u64),
    /// Permits of the tagged semaphores held.
    tagged_permits: u64,
    /// Reads held on the hand-over-off lockers.
    off_reads: u64,
    malformed_lines: u64,
    stranded_waiters: u64,
    tokens_left: u64,
    errors: BTreeMap<String, u64>,
    releases: BTreeMap<String, u64>,
    shutdown_errors: u64,
    worker_failures: Vec<String>,
}

impl Report {
    /// Every kind's violations.
    pub(crate) fn fencing_violations(&self) -> u64 {
        self.lock.violations()
            + self.semaphore.violations()
            + self.rw.violations()
            + self.kills.violations()
    }

    /// No violation, nobody stranded, nothing left in Redis, every worker
    /// ran and every line it printed was understood.
    pub(crate) fn passed(&self) -> bool {
        self.fencing_violations() == 0
            && self.stranded_waiters == 0
            && self.tokens_left == 0
            && self.malformed_lines == 0
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
        let mut acquisitions: Vec<String> = [Kind::Lock, Kind::Permit, Kind::Write, Kind::Read]
            .iter()
            .map(|k| {
                let n = self.acquisitions.get(k.name()).copied().unwrap_or(0);
                format!("\"{}\":{n}", k.name())
            })
            .collect();
        acquisitions.push(format!("\"multi_key\":{}", self.multi_key));
        let (s, rw, k, q) = (&self.semaphore, &self.rw, &self.kills, &self.queues);
        let killed_holding: Vec<String> = [Kind::Lock, Kind::Permit, Kind::Write, Kind::Read]
            .iter()
            .map(|kind| {
                let n = k.holding.get(kind.name()).copied().unwrap_or(0);
                format!("\"{}\":{n}", kind.name())
            })
            .collect();
        format!(
            concat!(
                "{{\"seconds\":{},\"processes\":{},\"threads_per_process\":{},",
                "\"tasks_per_process\":{},\"keys_per_kind\":{},\"permits\":{},\"seed\":{},",
                "\"acquisitions\":{{\"total\":{},{}}},",
                "\"faults_injected\":{{\"total\":{},\"sigstop\":{},\"client_kill_normal\":{},",
                "\"client_kill_pubsub\":{},\"restart_with_data_loss\":{},\"script_flush\":{},",
                "\"worker_kill\":{},\"queued_kill\":{},\"tagged_burst\":{}}},",
                "\"writes_accepted\":{},\"stale_writes_rejected\":{},\"store_errors\":{},",
                "\"writes_cut_short\":{},",
                "\"fencing_violations\":{},",
                "\"lock\":{{\"violations\":{},{}}},",
                "\"semaphore\":{{\"violations\":{},\"over_capacity\":{},\"slot_out_of_range\":{},",
                "\"slot_overlaps\":{},{},\"most_holders_at_once\":{}}},",
                "\"rw\":{{\"violations\":{},\"writer_overlaps\":{},\"write_fence_order\":{},",
                "\"epoch_mismatches\":{},\"writes_after_derived\":{},",
                "\"fenced_out_while_valid\":{},{},",
                "\"expired_writers_refused\":{},\"late_writers\":{},",
                "\"most_readers_at_once\":{}}},",
                "\"kills\":{{\"violations\":{},\"fence_reused\":{},\"killed_holding\":{{{}}},",
                "\"killed_acquiring\":{},\"taken_over\":{}}},",
                "\"queues\":{{\"registrants_killed_queued\":{},\"most_dead_ahead_of_live\":{},",
                "\"reader_bursts\":{},\"most_readers_ahead_of_writer\":{},",
                "\"burst_readers_behind_writer\":{},\"read_handover_off\":{},",
                "\"permit_tagged\":{},\"most_queued_tagged\":{},\"incomplete\":{}}},",
                "\"malformed_lines\":{},\"stranded_waiters\":{},\"tokens_left\":{},",
                "\"acquire_release_errors\":{},\"release_outcomes\":{},\"shutdown_errors\":{},",
                "\"worker_failures\":[{}],\"passed\":{}}}"
            ),
            o.seconds,
            o.processes,
            o.threads,
            o.tasks,
            o.keys,
            o.permits,
            o.seed,
            self.acquisitions.values().sum::<u64>(),
            acquisitions.join(","),
            f.total(),
            f.sigstop,
            f.client_kill_normal,
            f.client_kill_pubsub,
            f.restart_with_data_loss,
            f.script_flush,
            f.worker_kill,
            f.queued_kill,
            f.tagged_burst,
            self.writes_accepted,
            self.stale_writes_rejected,
            self.store_errors,
            self.writes_cut_short,
            self.fencing_violations(),
            self.lock.violations(),
            self.lock.json(),
            s.violations(),
            s.over_capacity,
            s.slot_out_of_range,
            s.slot_overlaps,
            s.fences.json(),
            s.most_holders_at_once,
            rw.violations(),
            rw.writer_overlaps,
            rw.write_fence_order,
            rw.epoch_mismatches,
            rw.writes_after_derived,
            rw.fenced_out_while_valid,
            rw.fences.json(),
            rw.expired_writers_refused,
            rw.late_writers,
            rw.most_readers_at_once,
            k.violations(),
            k.fence_reused,
            killed_holding.join(","),
            k.acquiring,
            k.taken_over,
            q.killed_queued,
            q.most_dead_ahead,
            q.reader_bursts.len(),
            self.readers_ahead.0,
            self.readers_ahead.1,
            self.off_reads,
            self.tagged_permits,
            q.most_queued_tagged,
            map(&q
                .incomplete
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect()),
            self.malformed_lines,
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

/// Ticks the store's logical clock from the controller.
fn tick_admin(store: &RedisServer, clock_key: &str) -> Result<u64, Box<dyn Error>> {
    Ok(query::<u64>(store, redis::cmd("INCR").arg(clock_key))?)
}

/// The worker processes: the living ones, the killed ones (kept for their
/// logs), and what it takes to start a replacement.
struct Fleet<'a> {
    living: Vec<Worker>,
    killed: Vec<Worker>,
    relaunch: Relaunch,
    env: &'a [(&'a str, String)],
    ready_tx: mpsc::Sender<usize>,
    ready_rx: mpsc::Receiver<usize>,
    next_index: usize,
    /// Killed workers' logs, and when their registrations are surely gone
    /// (the clock is read then: [`Fleet::record_registrations_gone`]).
    registrations: Vec<(Instant, Arc<Mutex<WorkerLog>>)>,
}

impl Fleet<'_> {
    /// Reads the clock for the killed workers whose registrations are
    /// surely gone by now.
    fn record_registrations_gone(&mut self, store: &RedisServer, clock_key: &str) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.registrations.len() {
            if self.registrations[i].0 > now {
                i += 1;
                continue;
            }
            let (_, log) = self.registrations.swap_remove(i);
            // Without a clock value they count as queued to the run's end.
            if let Ok(at) = tick_admin(store, clock_key) {
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .registrations_gone_at = Some(at);
            }
        }
    }

    /// SIGKILLs a living worker, whatever its contenders are doing
    /// (holding, writing, waiting), and starts a replacement. The victim
    /// holds `wanted` by the lines read so far if one does (so that kills
    /// hit holders of every kind), else anything, else it is any worker;
    /// it may have moved on by the time the signal lands. The kill's
    /// time on the store's logical clock is taken once the lock server
    /// answered a `PING` after the process was gone: the server replies
    /// only after the commands it had already received (the dead worker's
    /// included) ran, so nothing of the dead worker happens after it.
    fn kill_one(
        &mut self,
        lock: &RedisServer,
        store: &RedisServer,
        clock_key: &str,
        rng: &mut Rng,
        wanted: Kind,
    ) -> Result<(), Box<dyn Error>> {
        if self.living.is_empty() {
            return Err("no living worker to kill".into());
        }
        let holds = |w: &Worker, kind: Option<Kind>| {
            let log = w.log.lock().unwrap_or_else(|p| p.into_inner());
            log.open
                .iter()
                .any(|(&(k, _), round)| round.grant.is_some() && kind.is_none_or(|kind| k == kind))
        };
        let pick = |kind: Option<Kind>| -> Vec<usize> {
            (0..self.living.len())
                .filter(|&i| holds(&self.living[i], kind))
                .collect()
        };
        let mut candidates = pick(Some(wanted));
        if candidates.is_empty() {
            candidates = pick(None);
        }
        if candidates.is_empty() {
            candidates = (0..self.living.len()).collect();
        }
        let victim = candidates[rng.below(candidates.len() as u64) as usize];
        self.kill_index(lock, store, clock_key, victim)
    }

    /// Sends living worker `i` one command line.
    fn send(&mut self, i: usize, line: &str) -> Result<(), Box<dyn Error>> {
        let stdin = self.living[i].stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// SIGKILLs living worker `victim` and starts a replacement (see
    /// [`Fleet::kill_one`]).
    fn kill_index(
        &mut self,
        lock: &RedisServer,
        store: &RedisServer,
        clock_key: &str,
        victim: usize,
    ) -> Result<(), Box<dyn Error>> {
        let mut worker = self.living.swap_remove(victim);
        let _ = worker.child.kill();
        let _ = worker.child.wait();
        // Every line it wrote is read before its log is cut short.
        let _ = worker.closed.recv_timeout(EXIT_BOUND);
        let ping = query::<String>(lock, &redis::cmd("PING"));
        let killed_at = tick_admin(store, clock_key);
        // Without a clock value the dead worker's unfinished rounds stay
        // open (unknown) to the end of the run.
        let at = killed_at.as_ref().map_or(u64::MAX, |t| *t);
        worker
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .killed_at = Some(at);
        self.registrations
            .push((Instant::now() + REGISTRATIONS_GONE, worker.log.clone()));
        self.killed.push(worker);
        ping?;
        killed_at?;

        let index = self.next_index;
        self.next_index += 1;
        self.living.push(spawn_worker(
            index,
            self.relaunch,
            self.env,
            self.ready_tx.clone(),
        )?);
        let deadline = Instant::now() + READY_BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.ready_rx.recv_timeout(left) {
                Ok(ready) if ready == index => return Ok(()),
                Ok(_) => {}
                Err(_) => return Err(format!("replacement worker {index} did not start").into()),
            }
        }
    }
}

fn inject(
    lock: &RedisServer,
    store: &RedisServer,
    clock_key: &str,
    rng: &mut Rng,
    faults: &mut Faults,
    fleet: &mut Fleet<'_>,
    kills_allowed: bool,
) -> Result<(), Box<dyn Error>> {
    let mut fault = rng.below(13);
    if fault >= 10 && !kills_allowed {
        // No kill in the run's last second: every killed worker's tokens
        // have expired before the tokens-left scan.
        fault = rng.below(10);
    }
    if fault >= 10 {
        // Holders of each kind in turn (writes are the rarest rounds).
        const TURNS: [Kind; 4] = [Kind::Write, Kind::Lock, Kind::Permit, Kind::Read];
        let wanted = TURNS[faults.worker_kill as usize % TURNS.len()];
        fleet.kill_one(lock, store, clock_key, rng, wanted)?;
        faults.worker_kill += 1;
        faults.last_kill = Some(Instant::now());
        return Ok(());
    }
    inject_on_redis(lock, store, clock_key, rng, faults, fault)
}

fn inject_on_redis(
    lock: &RedisServer,
    store: &RedisServer,
    clock_key: &str,
    rng: &mut Rng,
    faults: &mut Faults,
    fault: u64,
) -> Result<(), Box<dyn Error>> {
    let name = match fault {
        0..=2 => {
            lock.pause();
            thread::sleep(ms(100 + rng.below(1100)));
            lock.resume();
            faults.sigstop += 1;
            "sigstop"
        }
        3 | 4 => {
            query::<u64>(
                lock,
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"),
            )?;
            faults.client_kill_normal += 1;
            "kill normal"
        }
        5 | 6 => {
            query::<u64>(
                lock,
                redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"),
            )?;
            faults.client_kill_pubsub += 1;
            "kill pubsub"
        }
        7 => {
            let before = tick_admin(store, clock_key)?;
            let restarted = lock.try_restart(RESTART_ATTEMPTS, ms(50));
            // The counters were lost in between, whether or not the new
            // server came up.
            faults
                .restarts
                .push((before, tick_admin(store, clock_key)?));
            restarted.map_err(|e| format!("redis-server could not restart on its port: {e}"))?;
            faults.restart_with_data_loss += 1;
            "restart"
        }
        _ => {
            query::<()>(lock, redis::cmd("SCRIPT").arg("FLUSH"))?;
            faults.script_flush += 1;
            "script flush"
        }
    };
    faults.last_on_redis = Some((name, Instant::now()));
    Ok(())
}

// ----- queue scenarios ----------------------------------------------------------

/// The queue scenarios need this much of the run left (they take up to a
/// few seconds, and their kill must come before the run's quiet second).
const SCENARIO_ROOM: Duration = Duration::from_secs(5);
/// Waiters of a queued-kill scenario's doomed burst, SIGKILLed at once
/// while queued (more than the 8 dead entries the old scripts stopped at).
const DOOMED_WAITERS: u64 = 12;
/// Readers queued behind them, ahead of a writer (more than the 16 the
/// old scripts admitted at once): this many and up to 3 more.
const BURST_READERS: u64 = 17;

/// What the queue scenarios did and saw. Not checks: their rounds are
/// checked like every other round (a writer beside a live reader is a
/// `rw.writer_overlaps`); these show the faults really happened.
#[derive(Debug, Default, Clone)]
struct QueueStats {
    next_burst: u64,
    /// Scenario steps that did not happen as planned within their bound,
    /// by step (the scenario goes on without them).
    incomplete: BTreeMap<&'static str, u64>,
    /// Waiting registrants SIGKILLed at once while queued, in all.
    killed_queued: u64,
    /// The most dead registrations seen ahead of a live one in a queue.
    most_dead_ahead: u64,
    /// (readers burst, writer burst): a writer queued behind a burst of
    /// readers.
    reader_bursts: Vec<(u64, u64)>,
    /// The most entries seen in a tagged semaphore's queue.
    most_queued_tagged: u64,
}

impl QueueStats {
    /// A new burst of `count` rounds of `kind` on key number `key`.
    #[allow(clippy::too_many_arguments)]
    fn burst(
        &mut self,
        kind: Kind,
        key: u64,
        count: u64,
        lease_ms: u64,
        wait_ms: u64,
        hold_ms: u64,
        off: u64,
    ) -> Burst {
        self.next_burst += 1;
        Burst {
            id: self.next_burst,
            kind,
            key,
            count,
            lease_ms,
            wait_ms,
            hold_ms,
            off,
        }
    }

    fn incomplete(&mut self, step: &'static str) {
        *self.incomplete.entry(step).or_default() += 1;
    }
}

fn hex_sha(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The hand-over queue of `key` (`kind`: `rw`, `sem`, `lock`), named as
/// the crate names it: `<ns>:<kind>-queue:{<sha>}`, or with a hash tag
/// `<ns>:<kind>-queue:{<sha(tag)>}:<sha>`.
fn queue_name(namespace: &str, kind: &str, key: &str, tag: Option<&str>) -> String {
    match tag {
        Some(tag) => format!(
            "{namespace}:{kind}-queue:{{{}}}:{}",
            hex_sha(tag),
            hex_sha(key)
        ),
        None => format!("{namespace}:{kind}-queue:{{{}}}", hex_sha(key)),
    }
}

/// Whether each entry of `queue` is a live registration, as the scripts
/// judge it (`<reg>|<deadline ms>|<owner>:<claim ms>`, the deadline
/// still ahead by the server's clock).
fn queue_liveness(conn: &mut redis::Connection, queue: &str) -> redis::RedisResult<Vec<bool>> {
    let (entries, (secs, micros)): (Vec<String>, (u64, u64)) = redis::pipe()
        .cmd("LRANGE")
        .arg(queue)
        .arg(0)
        .arg(-1)
        .cmd("TIME")
        .query(conn)?;
    let now_ms = secs * 1000 + micros / 1000;
    Ok(entries
        .iter()
        .map(|entry| {
            let mut fields = entry.splitn(3, '|');
            let _reg = fields.next();
            let deadline = fields.next().and_then(|d| d.parse::<u64>().ok());
            let value = fields.next().unwrap_or("");
            deadline.is_some_and(|d| d > now_ms) && value.contains(':')
        })
        .collect())
}

/// Dead entries ahead of the last live one.
fn dead_ahead_of_live(live: &[bool]) -> u64 {
    live.iter().rposition(|l| *l).map_or(0, |last| {
        live[..last].iter().filter(|l| !**l).count() as u64
    })
}

/// Polls `done` every 10 ms for up to `bound`.
fn wait_for(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(ms(10));
    }
}

/// One of a worker log's counts per burst (`started`, `granted`, `finished`).
type BurstCounts = fn(&WorkerLog) -> &HashMap<u64, u64>;

/// A burst's count in a worker's log.
fn burst_count(log: &Mutex<WorkerLog>, id: u64, of: BurstCounts) -> u64 {
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    of(&log).get(&id).copied().unwrap_or(0)
}

/// Registrants killed while queued, many at once, ahead of live ones; more
/// than 16 readers queued ahead of a writer; readers on a hand-over-off
/// locker beside them. On read-write key `key`: worker `live` takes the
/// write lease for a long hold (lease 3 s, hold 2 s); worker `victim`
/// queues [`DOOMED_WAITERS`] readers behind it, then `live` queues
/// [`BURST_READERS`]+ readers, a writer and 3 readers with the hand-over
/// off; `victim` is SIGKILLed. Its registrations die within their bound
/// (750 ms), well before the holder's release, which must walk past all of
/// them, admit the live readers together and keep the writer first in line
/// until they are gone. Meanwhile the queue is read every 10 ms for the
/// dead entries ahead of live ones.
#[allow(clippy::too_many_arguments)]
fn queued_kill_scenario(
    lock: &RedisServer,
    store: &RedisServer,
    clock_key: &str,
    namespace: &str,
    keys: u64,
    rng: &mut Rng,
    faults: &mut Faults,
    fleet: &mut Fleet<'_>,
    stats: &mut QueueStats,
) -> Result<(), Box<dyn Error>> {
    let n = fleet.living.len() as u64;
    if n < 2 {
        stats.incomplete("one_worker");
        return Ok(());
    }
    let victim = rng.below(n) as usize;
    let live = ((victim as u64 + 1 + rng.below(n - 1)) % n) as usize;
    let key = rng.below(keys);
    let queue = queue_name(namespace, "rw", &key_name(Kind::Write, key), None);
    let mut conn = admin(lock)?;
    let (live_log, victim_log) = (
        fleet.living[live].log.clone(),
        fleet.living[victim].log.clone(),
    );
    let queued = |conn: &mut redis::Connection| queue_liveness(conn, &queue).map_or(0, |q| q.len());

    let holder = stats.burst(Kind::Write, key, 1, 3000, 3000, 2000, 0);
    fleet.send(live, &holder.command())?;
    let granted: BurstCounts = |log| &log.burst_granted;
    if !wait_for(ms(3500), || burst_count(&live_log, holder.id, granted) > 0) {
        stats.incomplete("holder_granted");
        return Ok(());
    }
    let before = queued(&mut conn);
    let doomed = stats.burst(Kind::Read, key, DOOMED_WAITERS, LEASE_MS, 5000, 50, 0);
    fleet.send(victim, &doomed.command())?;
    let mut want = before + DOOMED_WAITERS as usize;
    if !wait_for(ms(1500), || queued(&mut conn) >= want) {
        stats.incomplete("doomed_queued");
    }
    let readers = stats.burst(
        Kind::Read,
        key,
        BURST_READERS + rng.below(4),
        LEASE_MS,
        5000,
        200,
        0,
    );
    fleet.send(live, &readers.command())?;
    want += readers.count as usize;
    if !wait_for(ms(1500), || queued(&mut conn) >= want) {
        stats.incomplete("readers_queued");
    }
    let writer = stats.burst(Kind::Write, key, 1, LEASE_MS, 5000, 50, 0);
    fleet.send(live, &writer.command())?;
    want += 1;
    if !wait_for(ms(1000), || queued(&mut conn) >= want) {
        stats.incomplete("writer_queued");
    }
    let off = stats.burst(Kind::Read, key, 3, LEASE_MS, 5000, 100, 3);
    fleet.send(live, &off.command())?;
    stats.reader_bursts.push((readers.id, writer.id));

    let started: BurstCounts = |log| &log.burst_started;
    let waiting = burst_count(&victim_log, doomed.id, started).saturating_sub(burst_count(
        &victim_log,
        doomed.id,
        granted,
    ));
    fleet.kill_index(lock, store, clock_key, victim)?;
    faults.queued_kill += 1;
    faults.last_kill = Some(Instant::now());
    stats.killed_queued += waiting;

    // Until the holder's release (and a little after).
    let finished: BurstCounts = |log| &log.burst_finished;
    let mut released_at = None;
    wait_for(ms(5000), || {
        if let Ok(live) = queue_liveness(&mut conn, &queue) {
            stats.most_dead_ahead = stats.most_dead_ahead.max(dead_ahead_of_live(&live));
        }
        if released_at.is_none() && burst_count(&live_log, holder.id, finished) > 0 {
            released_at = Some(Instant::now());
        }
        released_at.is_some_and(|at| at.elapsed() >= ms(100))
    });
    if released_at.is_none() {
        stats.incomplete("holder_released");
    }
    Ok(())
}

/// A burst of permit waiters on a tagged semaphore (hash tags on), from
/// up to two workers at once: 12 waiters for its permits queue in its
/// queue and each release hands a slot to the next one.
fn tagged_burst_scenario(
    lock: &RedisServer,
    namespace: &str,
    rng: &mut Rng,
    faults: &mut Faults,
    fleet: &mut Fleet<'_>,
    stats: &mut QueueStats,
) -> Result<(), Box<dyn Error>> {
    let key = TAGGED_BASE + rng.below(TAGGED_KEYS);
    let queue = queue_name(
        &tagged_namespace(namespace),
        "sem",
        &key_name(Kind::Permit, key),
        Some(TAG),
    );
    let mut conn = admin(lock)?;
    for i in 0..fleet.living.len().min(2) {
        let burst = stats.burst(Kind::Permit, key, 6, LEASE_MS, 3000, 100, 0);
        fleet.send(i, &burst.command())?;
    }
    wait_for(ms(1500), || {
        if let Ok(live) = queue_liveness(&mut conn, &queue) {
            stats.most_queued_tagged = stats.most_queued_tagged.max(live.len() as u64);
        }
        false
    });
    faults.tagged_burst += 1;
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
    let clock_key = format!("{namespace}-store:clock");
    let env = [
        (ENV_LOCK_URL, lock.url()),
        (ENV_STORE_URL, store.url()),
        (ENV_NAMESPACE, namespace.clone()),
        (ENV_THREADS, options.threads.to_string()),
        (ENV_TASKS, options.tasks.to_string()),
        (ENV_KEYS, options.keys.to_string()),
        (ENV_PERMITS, options.permits.to_string()),
        (ENV_SEED, options.seed.to_string()),
        (ENV_MULTI_KEY, options.multi_key.to_string()),
    ];
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut workers = Vec::new();
    for i in 0..options.processes {
        workers.push(spawn_worker(i, relaunch, &env, ready_tx.clone())?);
    }
    let ready_deadline = Instant::now() + READY_BOUND;
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
    let mut fleet = Fleet {
        living: workers,
        killed: Vec::new(),
        relaunch,
        env: &env,
        ready_tx,
        ready_rx,
        next_index: options.processes,
        registrations: Vec::new(),
    };

    // Faults at random intervals until the end of the run.
    let mut rng = Rng::new(options.seed);
    let mut faults = Faults::default();
    let end = Instant::now() + Duration::from_secs(options.seconds);
    let mut fault_errors = Vec::new();
    // Every third injection is a queue scenario while there is room for
    // one: a queued kill, then a tagged semaphore burst, in turn.
    let (mut injections, mut queues) = (0u64, QueueStats::default());
    while Instant::now() < end {
        let pause = ms(200 + rng.below(1000)).min(end.saturating_duration_since(Instant::now()));
        thread::sleep(pause);
        if Instant::now() >= end {
            break;
        }
        fleet.record_registrations_gone(&store, &clock_key);
        let kills_allowed = Instant::now() + KILL_QUIET < end;
        let scenario = injections % 3 == 1 && Instant::now() + SCENARIO_ROOM < end;
        let result = match (scenario, (injections / 3) % 2) {
            (true, 0) => queued_kill_scenario(
                &lock,
                &store,
                &clock_key,
                &namespace,
                options.keys as u64,
                &mut rng,
                &mut faults,
                &mut fleet,
                &mut queues,
            ),
            (true, _) => tagged_burst_scenario(
                &lock,
                &namespace,
                &mut rng,
                &mut faults,
                &mut fleet,
                &mut queues,
            ),
            (false, _) => inject(
                &lock,
                &store,
                &clock_key,
                &mut rng,
                &mut faults,
                &mut fleet,
                kills_allowed,
            ),
        };
        injections += 1;
        if let Err(e) = result {
            fault_errors.push(e.to_string());
        }
    }
    if lock.is_paused() {
        lock.resume();
    }

    // Stop the living workers; each must exit within a bound.
    let Fleet {
        living: mut workers,
        killed: dead,
        ..
    } = fleet;
    for w in &mut workers {
        if let Some(mut stdin) = w.stdin.take() {
            let _ = writeln!(stdin, "stop");
        }
    }
    let stopped_at = Instant::now();
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

    // Tokens of killed workers expire within a lease of their kill; with
    // no kill in the run's last second they are gone by now, but wait for
    // them (bounded) all the same. Anything left is a living worker's.
    let expired_by = faults
        .last_kill
        .map_or_else(Instant::now, |at| at + ms(LEASE_MS + TOKEN_SLACK_MS));
    let tokens_left = loop {
        let left =
            live_tokens(&lock, &namespace)? + live_tokens(&lock, &tagged_namespace(&namespace))?;
        if left == 0 || Instant::now() >= expired_by {
            break left;
        }
        thread::sleep(ms(50));
    };
    if tokens_left > 0 {
        if let Some(at) = faults.last_kill {
            eprintln!("last worker kill: {} ms before", at.elapsed().as_millis());
        }
        if let Some((name, at)) = faults.last_on_redis {
            eprintln!(
                "last fault on redis: {name}, ended {} ms before",
                at.elapsed().as_millis()
            );
        }
        eprintln!(
            "workers stopped {} ms before",
            stopped_at.elapsed().as_millis()
        );
        describe_tokens(&lock, &namespace);
        describe_tokens(&lock, &tagged_namespace(&namespace));
    }
    let store_fences = read_registers(&store, &namespace, options)?;

    let logs: Vec<WorkerLog> = workers
        .into_iter()
        .chain(dead)
        .map(|w| std::mem::take(&mut *w.log.lock().unwrap_or_else(|p| p.into_inner())))
        .collect();
    let mut report = analyse(options, &logs, &store_fences, &faults.restarts);
    report.readers_ahead = readers_ahead_of_writers(&logs, &queues.reader_bursts);
    // The 20 s run must show every queue scenario (two of them need two
    // workers).
    if options.seconds >= 20
        && (faults.tagged_burst == 0 || (options.processes >= 2 && faults.queued_kill == 0))
    {
        report
            .worker_failures
            .push("the queue scenarios did not all run".into());
    }
    report.queues = queues;
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

/// Held tokens of every kind on the lock server: locks, semaphore slots,
/// writers, and live members of the readers' sets (a reader past its expiry
/// is no token, though its set may live on with a later reader's TTL). Not
/// the fence counters, the permit counts or a waiting writer's intent,
/// which expires by itself.
fn live_tokens(lock: &RedisServer, namespace: &str) -> Result<u64, Box<dyn Error>> {
    let mut conn = admin(lock)?;
    let mut tokens = 0;
    for pattern in ["lock", "sem", "rw-write"] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{namespace}:{pattern}:*"))
            .query(&mut conn)?;
        tokens += keys.len() as u64;
    }
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn)?;
    let now_ms = secs * 1000 + micros / 1000;
    let sets: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:rw-read:*"))
        .query(&mut conn)?;
    for set in sets {
        let live: u64 = redis::cmd("ZCOUNT")
            .arg(&set)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .query(&mut conn)?;
        tokens += live;
    }
    Ok(tokens)
}

/// Prints each lease key left to stderr: its name, `PTTL` and whether its
/// value is a hold (`<token>:<fence>`) or a multi-key lease's reservation
/// (`<token>:r<age>`), never the token.
fn describe_tokens(lock: &RedisServer, namespace: &str) {
    let Ok(mut conn) = admin(lock) else { return };
    // The hand-over queues' live registrations (`<reg>|<deadline>|<token>:…`):
    // a release reserves a key for a multi-key registrant, dead or alive.
    let registrations: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:lock-reg:*"))
        .query(&mut conn)
        .unwrap_or_default();
    let mut registered_tokens = Vec::new();
    for reg in &registrations {
        let value: Option<String> = redis::cmd("GET").arg(reg).query(&mut conn).ok().flatten();
        let pttl: i64 = redis::cmd("PTTL").arg(reg).query(&mut conn).unwrap_or(-3);
        eprintln!("registration left: PTTL {pttl} ms");
        let grant_to = value.as_deref().and_then(|v| v.split('|').nth(2));
        if let Some((token, _)) = grant_to.and_then(|v| v.split_once(':')) {
            registered_tokens.push(token.to_owned());
        }
    }
    for pattern in ["lock", "sem", "rw-write"] {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{namespace}:{pattern}:*"))
            .query(&mut conn)
            .unwrap_or_default();
        for key in keys {
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap_or(-3);
            let value: Option<String> = redis::cmd("GET").arg(&key).query(&mut conn).ok().flatten();
            let shape = match value.as_deref().and_then(|v| v.split_once(':')) {
                Some((token, rest)) if rest.starts_with('r') => {
                    if registered_tokens.iter().any(|t| t == token) {
                        "a reservation for a registration still queued"
                    } else {
                        "a reservation for no queued registration"
                    }
                }
                Some(_) => "a hold",
                None => "not a lease value",
            };
            eprintln!("token left: {key}, PTTL {pttl} ms, {shape}");
        }
    }
}

/// A register of the store: (kind, key, slot), reads sharing the writers'.
type Register = (Kind, u64, u32);

/// The final fence of every register of the store.
fn read_registers(
    store: &RedisServer,
    namespace: &str,
    options: &Options,
) -> Result<HashMap<Register, u64>, Box<dyn Error>> {
    let fenced = FencedStore::new(format!("{namespace}-store"));
    let mut conn = admin(store)?;
    let mut fences = HashMap::new();
    for key in 0..options.keys as u64 {
        for kind in [Kind::Lock, Kind::Write] {
            if let Some((fence, _)) = fenced.read(&mut conn, &key_name(kind, key))? {
                fences.insert((kind, key, 0), fence.get());
            }
        }
    }
    for key in (0..options.keys as u64).chain(TAGGED_BASE..TAGGED_BASE + TAGGED_KEYS) {
        for slot in 0..options.permits {
            let name = key_name(Kind::Permit, key);
            if let Some((fence, _)) = fenced.read_permit(&mut conn, &name, slot)? {
                fences.insert((Kind::Permit, key, slot), fence.get());
            }
        }
    }
    Ok(fences)
}

/// For each (readers burst, writer burst) of the queued-kill scenarios:
/// how many of the readers were granted before the writer (all of them when
/// the writer got nothing). Gives the most of one burst, and how many burst
/// readers in all were granted after their writer.
fn readers_ahead_of_writers(logs: &[WorkerLog], pairs: &[(u64, u64)]) -> (u64, u64) {
    let burst_of: HashMap<u64, u64> = logs
        .iter()
        .flat_map(|l| l.burst_of.iter().map(|(s, id)| (*s, *id)))
        .collect();
    let holds_of = |id: u64, kind: Kind| -> Vec<u64> {
        logs.iter()
            .flat_map(|l| &l.holds)
            .filter(|h| h.kind == kind && burst_of.get(&h.started) == Some(&id))
            .map(|h| h.granted)
            .collect()
    };
    let (mut most, mut behind) = (0u64, 0u64);
    for &(readers, writer) in pairs {
        let writer_granted = holds_of(writer, Kind::Write)
            .into_iter()
            .min()
            .unwrap_or(u64::MAX);
        let granted = holds_of(readers, Kind::Read);
        let ahead = granted.iter().filter(|g| **g < writer_granted).count() as u64;
        most = most.max(ahead);
        behind += granted.len() as u64 - ahead;
    }
    (most, behind)
}

/// Checks the records of every worker against the guarantees of each kind.
fn analyse(
    options: &Options,
    logs: &[WorkerLog],
    store_fences: &HashMap<Register, u64>,
    restarts: &[(u64, u64)],
) -> Report {
    let mut report = Report {
        options: Some(options.clone()),
        ..Report::default()
    };
    let per_worker = (options.threads + options.tasks) as u64;
    let mut holds: Vec<Hold> = Vec::new();
    let mut failed: Vec<FailedAcquire> = Vec::new();
    let mut killed: Vec<(Hold, u64)> = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        holds.extend(&log.holds);
        failed.extend(&log.failed);
        report.multi_key += log.multi_holds;
        if let Some(killed_at) = log.killed_at {
            // Killed: no stop, no shutdown, no BYE to expect; what it was
            // doing joins the checks (its grants' fences, its writes of
            // unknown outcome, its write acquires' unseen grants).
            let (cut, acquiring) = log.cut_short(killed_at);
            report.kills.acquiring += acquiring.len() as u64;
            for h in &cut {
                *report.kills.holding.entry(h.kind.name()).or_default() += 1;
                killed.push((*h, killed_at));
            }
            holds.extend(&cut);
            failed.extend(acquiring.iter().filter(|f| f.kind == Kind::Write));
            report.malformed_lines += log.malformed as u64;
            if let Some(f) = &log.failure {
                report.worker_failures.push(format!("worker {i}: {f}"));
            }
            continue;
        }
        report.malformed_lines += log.malformed as u64;
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
    report.off_reads = logs.iter().map(|l| l.off_read_holds).sum();
    for h in &holds {
        *report.acquisitions.entry(h.kind.name()).or_default() += 1;
        report.tagged_permits += u64::from(h.kind == Kind::Permit && h.key >= TAGGED_BASE);
        for w in [h.first, h.second] {
            match w.verdict {
                '1' => report.writes_accepted += 1,
                '0' => report.stale_writes_rejected += 1,
                'k' => report.writes_cut_short += 1,
                _ => report.store_errors += 1,
            }
        }
    }
    let of = |kinds: &[Kind]| -> Vec<Hold> {
        holds
            .iter()
            .filter(|h| kinds.contains(&h.kind))
            .copied()
            .collect()
    };
    report.lock = fence_checks(&of(&[Kind::Lock]), store_fences);
    report.semaphore = semaphore_checks(&of(&[Kind::Permit]), store_fences, options.permits);
    report.rw = rw_checks(
        &of(&[Kind::Write, Kind::Read]),
        &failed,
        restarts,
        store_fences,
    );
    let kills = std::mem::take(&mut report.kills);
    report.kills = kill_checks(&killed, &holds, kills);
    report
}

/// A killed holder's lease simply expires: every grant of its key (its
/// slot) that started after the kill has a higher fence. Reads share
/// epochs and are neither checked nor checked against.
fn kill_checks(killed: &[(Hold, u64)], holds: &[Hold], mut checks: KillChecks) -> KillChecks {
    for (dead, killed_at) in killed.iter().filter(|(h, _)| h.kind != Kind::Read) {
        let mut later = holds.iter().filter(|h| {
            h.kind != Kind::Read && h.register() == dead.register() && h.started > *killed_at
        });
        let (mut taken_over, mut reused) = (false, 0);
        for h in &mut later {
            taken_over = true;
            reused += u64::from(h.fence <= dead.fence);
        }
        checks.taken_over += u64::from(taken_over);
        checks.fence_reused += reused;
    }
    checks
}

/// Duplicate grants, ordering and final fence of every register `holds`
/// wrote to. Reads count their epoch as the register's fence but are not
/// grants of a fence (many readers share one epoch).
fn fence_checks(holds: &[Hold], store_fences: &HashMap<Register, u64>) -> FenceChecks {
    let mut checks = FenceChecks::default();
    let mut grants: HashMap<(Register, u64), u64> = HashMap::new();
    let mut accepted: BTreeMap<Register, Vec<(u64, u64, u64)>> = BTreeMap::new();
    // Writes of killed holders whose outcome is unknown: maybe accepted.
    let mut maybe: HashSet<(Register, u64)> = HashSet::new();
    for h in holds {
        if h.kind != Kind::Read {
            *grants.entry((h.register(), h.fence)).or_default() += 1;
        }
        for w in [h.first, h.second] {
            match w.verdict {
                '1' => accepted
                    .entry(h.register())
                    .or_default()
                    .push((h.fence, w.before, w.after)),
                'k' => {
                    accepted.entry(h.register()).or_default();
                    maybe.insert((h.register(), h.fence));
                }
                _ => {}
            }
        }
    }
    checks.duplicate_fences = grants.values().filter(|n| **n > 1).map(|n| n - 1).sum();
    for (register, writes) in &accepted {
        checks.ordering_violations += ordering_violations(writes);
        let highest = writes.iter().map(|w| w.0).max();
        let stored = store_fences.get(register).copied();
        // Above every accepted write, the store may hold a killed holder's.
        let explained = stored.is_some_and(|f| stored > highest && maybe.contains(&(*register, f)));
        if highest != stored && !explained {
            checks.store_mismatches += 1;
        }
    }
    checks
}

/// Accepted writes `(fence, before, after)` of one register, where write A
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

/// Tenures (start, end) that overlap an earlier-starting one.
fn overlapping_tenures(mut tenures: Vec<(u64, u64)>) -> u64 {
    tenures.sort_unstable();
    let (mut latest_end, mut overlaps) = (0u64, 0u64);
    for (start, end) in tenures {
        if start < latest_end {
            overlaps += 1;
        }
        latest_end = latest_end.max(end);
    }
    overlaps
}

/// The tenures alive at each tenure's start, including itself.
fn alive_at_starts(tenures: &[(u64, u64)]) -> Vec<u64> {
    let mut events: Vec<(u64, bool)> = tenures
        .iter()
        .flat_map(|&(start, end)| [(start, true), (end, false)])
        .collect();
    // Clock values are unique (one `INCR` each), so no two events tie.
    events.sort_unstable();
    let mut alive = 0u64;
    let mut at_starts = Vec::new();
    for (_, is_start) in events {
        if is_start {
            alive += 1;
            at_starts.push(alive);
        } else {
            alive = alive.saturating_sub(1);
        }
    }
    at_starts
}

fn semaphore_checks(
    holds: &[Hold],
    store_fences: &HashMap<Register, u64>,
    permits: u32,
) -> SemaphoreChecks {
    let mut checks = SemaphoreChecks {
        fences: fence_checks(holds, store_fences),
        slot_out_of_range: holds.iter().filter(|h| h.slot >= permits).count() as u64,
        ..SemaphoreChecks::default()
    };
    let mut by_slot: BTreeMap<(u64, u32), Vec<(u64, u64)>> = BTreeMap::new();
    let mut by_key: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for h in holds {
        if let Some(tenure) = h.tenure() {
            by_slot.entry((h.key, h.slot)).or_default().push(tenure);
            by_key.entry(h.key).or_default().push(tenure);
        }
    }
    for tenures in by_slot.into_values() {
        checks.slot_overlaps += overlapping_tenures(tenures);
    }
    for tenures in by_key.values() {
        for alive in alive_at_starts(tenures) {
            checks.most_holders_at_once = checks.most_holders_at_once.max(alive);
            if alive > u64::from(permits) {
                checks.over_capacity += 1;
            }
        }
    }
    checks
}

fn rw_checks(
    holds: &[Hold],
    failed: &[FailedAcquire],
    restarts: &[(u64, u64)],
    store_fences: &HashMap<Register, u64>,
) -> RwChecks {
    let mut checks = RwChecks {
        fences: fence_checks(holds, store_fences),
        ..RwChecks::default()
    };
    let keys: HashSet<u64> = holds.iter().map(|h| h.key).collect();
    for key in keys {
        let of_key = |kind: Kind| -> Vec<&Hold> {
            holds
                .iter()
                .filter(|h| h.key == key && h.kind == kind)
                .collect()
        };
        let (mut writers, readers) = (of_key(Kind::Write), of_key(Kind::Read));
        writers.sort_by_key(|w| w.granted);

        // Writers granted one after the other: fences increase. `best` is
        // the highest fence (and its writer) granted before a clock value.
        let last_granted_before = |t: u64| -> Option<&Hold> {
            let n = writers.partition_point(|w| w.granted < t);
            writers[..n].iter().max_by_key(|w| w.fence).copied()
        };
        for w in &writers {
            if last_granted_before(w.started).is_some_and(|before| before.fence >= w.fence) {
                checks.write_fence_order += 1;
            }
        }

        // Unknown moves of the counter: restarts, and write acquires whose
        // grant the client may not have seen.
        let unknown: Vec<(u64, u64)> = restarts
            .iter()
            .copied()
            .chain(
                failed
                    .iter()
                    .filter(|f| f.kind == Kind::Write)
                    .map(|f| (f.started, f.ended)),
            )
            .collect();
        let unknown_between = |from: u64, to: u64| unknown.iter().any(|&(a, b)| a < to && b > from);
        let fence_started: HashMap<u64, u64> =
            writers.iter().map(|w| (w.fence, w.started)).collect();
        for r in &readers {
            let epoch = r.fence;
            // A writer certainly granted after this reader has a fence
            // above its epoch.
            let later_below = writers
                .iter()
                .any(|w| w.started > r.granted && w.fence <= epoch);
            let ok = match last_granted_before(r.started) {
                // The first readers: the epoch is the counter's floor.
                None => true,
                Some(last) => {
                    epoch == last.fence
                        || (epoch > last.fence
                            && (fence_started.get(&epoch).is_some_and(|s| *s < r.granted)
                                || unknown_between(last.started, r.granted)))
                }
            };
            if later_below || !ok {
                checks.epoch_mismatches += 1;
                // What the analysis saw, for the report of a failed run
                // (clock values, fences and epochs only: no tokens).
                let near: Vec<(u64, u64, u64)> = writers
                    .iter()
                    .filter(|w| w.started <= r.granted + 50 && w.granted + 50 >= r.started)
                    .map(|w| (w.fence, w.started, w.granted))
                    .collect();
                eprintln!(
                    "fencing_torture: epoch mismatch on rw key {key}: reader epoch {epoch} \
                     started {} granted {}; last writer before it {:?}; writers near \
                     (fence, started, granted) {near:?}; unknown moves {:?}",
                    r.started,
                    r.granted,
                    last_granted_before(r.started).map(|w| (w.fence, w.started, w.granted)),
                    unknown
                        .iter()
                        .filter(|(a, b)| *b + 50 >= r.started && *a <= r.granted + 50)
                        .collect::<Vec<_>>(),
                );
            }
        }

        // Once a write derived at epoch f was accepted, writer f's lease
        // had ended: none of its later writes may be accepted.
        let derived: Vec<(u64, u64)> = readers
            .iter()
            .flat_map(|r| [r.first, r.second].map(|w| (r.fence, w)))
            .filter(|(_, w)| w.verdict == '1')
            .map(|(epoch, w)| (epoch, w.after))
            .collect();
        for w in &writers {
            checks.late_writers += u64::from(!w.valid);
            for write in [w.first, w.second] {
                let after_derived = derived
                    .iter()
                    .any(|&(epoch, after)| epoch == w.fence && after < write.before);
                match write.verdict {
                    '1' if after_derived => checks.writes_after_derived += 1,
                    '0' if after_derived => checks.expired_writers_refused += 1,
                    _ => {}
                }
            }
        }

        // A holder whose lease was valid is never fenced out, unless a
        // restart lost its lease.
        for h in writers.iter().chain(&readers) {
            let refused = h.first.verdict == '0' || h.second.verdict == '0';
            let restarted = restarts
                .iter()
                .any(|&(a, b)| a < h.second.after && b > h.started);
            if h.valid && refused && !restarted {
                checks.fenced_out_while_valid += 1;
                eprintln!(
                    "fencing_torture: {} on rw key {key} with fence/epoch {} fenced out while \
                     valid: started {} granted {} writes {:?} {:?}",
                    h.kind.name(),
                    h.fence,
                    h.started,
                    h.granted,
                    h.first,
                    h.second
                );
            }
        }

        // A writer overlaps nobody (a writer past its lease neither: the
        // store refuses it once the next writer, or a reader, wrote).
        let tenure = |h: &Hold| h.tenure();
        for (i, w) in writers.iter().enumerate() {
            let Some((ws, we)) = tenure(w) else { continue };
            let overlaps = |(s, e): (u64, u64)| s < we && ws < e;
            for other in writers[i + 1..].iter().chain(&readers) {
                if tenure(other).is_some_and(overlaps) {
                    checks.writer_overlaps += 1;
                }
            }
        }
        let reader_tenures: Vec<(u64, u64)> = readers.iter().filter_map(|r| r.tenure()).collect();
        if let Some(most) = alive_at_starts(&reader_tenures).into_iter().max() {
            checks.most_readers_at_once = checks.most_readers_at_once.max(most);
        }
    }
    checks
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

    /// A log of `lines` from one worker with `contenders` contenders, all
    /// done.
    fn log_of(lines: &[&str], contenders: usize) -> WorkerLog {
        let mut log = WorkerLog::default();
        log.record("test torture_worker_process ... READY");
        for line in lines {
            log.record(line);
        }
        for _ in 0..contenders {
            log.record("D");
        }
        log.record("X 0");
        log.record("BYE");
        log
    }

    fn options(permits: u32) -> Options {
        Options {
            processes: 1,
            threads: 1,
            tasks: 0,
            permits,
            ..Options::default()
        }
    }

    #[test]
    fn the_analysis_counts_duplicates_mismatches_and_stranded_contenders() {
        let options = Options {
            threads: 2,
            ..options(2)
        };
        let mut log = WorkerLog::default();
        for line in [
            "test torture_worker_process ... READY",
            // key 0: fence 10 twice; 8 accepted after 10; the store kept 9.
            "H l 0 0 10 1 2 1 3 4 1 5 6 1",
            "H l 0 0 10 7 8 0 9 10 0 11 12 1",
            "H l 0 0 8 13 14 1 15 16 0 17 18 1",
            "E l WAIT_TIMEOUT 19 20",
            "R l Released",
            "H l garbled",
            "D",
            "BYE",
        ] {
            log.record(line);
        }
        let store = HashMap::from([((Kind::Lock, 0, 0), 9)]);
        let report = analyse(&options, &[log], &store, &[]);
        assert_eq!(report.acquisitions.get("lock"), Some(&3));
        assert_eq!(report.lock.duplicate_fences, 1);
        assert_eq!(report.lock.ordering_violations, 1);
        assert_eq!(report.lock.store_mismatches, 1, "the store kept 9, not 10");
        assert_eq!(report.stale_writes_rejected, 3);
        assert_eq!(report.malformed_lines, 1);
        assert_eq!(report.errors.get("lock/acquire:WAIT_TIMEOUT"), Some(&1));
        assert_eq!(report.releases.get("lock/Released"), Some(&1));
        assert_eq!(
            report.stranded_waiters, 1,
            "one of two contenders never finished"
        );
        assert_eq!(report.fencing_violations(), 3);
        assert!(!report.passed());
        assert!(report.to_json().contains("\"fencing_violations\":3"));
    }

    #[test]
    fn a_multi_key_round_is_checked_as_one_lock_hold_per_key_and_counted_once() {
        let log = log_of(
            &[
                // Keys 0 and 1 as one lease (fences 7 and 3), then a
                // single-key holder of key 1 with fence 4 after it.
                "M 1 2",
                "S l 1",
                "S l 2",
                "G l 0 0 7 1 3",
                "G l 1 0 3 2 3",
                "P l 1 1 4 5",
                "P l 2 1 6 7",
                "H l 0 0 7 1 3 1 4 5 1 8 9 1",
                "H l 1 0 3 2 3 1 6 7 1 10 11 1",
                "R l Released m",
                "H l 1 0 4 12 13 1 14 15 1 16 17 1",
                "R l Released",
                // A multi-key round that waited in vain: one failure.
                "M 18 19",
                "S l 18",
                "S l 19",
                "E l WAIT_TIMEOUT 18 20",
                "E l WAIT_TIMEOUT 19 20",
            ],
            1,
        );
        let store = HashMap::from([((Kind::Lock, 0, 0), 7), ((Kind::Lock, 1, 0), 4)]);
        let report = analyse(&options(2), &[log], &store, &[]);
        assert_eq!(report.acquisitions.get("lock"), Some(&3));
        assert_eq!(report.multi_key, 1);
        assert_eq!(report.fencing_violations(), 0);
        assert_eq!(
            report.errors.get("multi_key/acquire:WAIT_TIMEOUT"),
            Some(&1)
        );
        assert_eq!(report.errors.get("lock/acquire:WAIT_TIMEOUT"), None);
        assert_eq!(report.releases.get("multi_key/Released"), Some(&1));
        assert_eq!(report.releases.get("lock/Released"), Some(&1));
        assert!(report.to_json().contains("\"multi_key\":1"));
        assert!(report.passed(), "{}", report.to_json());
    }

    #[test]
    fn a_multi_key_holds_fence_below_an_earlier_single_key_write_is_a_violation() {
        let log = log_of(
            &[
                "H l 1 0 5 1 2 1 3 4 1 5 6 1",
                "M 7 8",
                "H l 0 0 9 7 9 1 10 11 1 12 13 1",
                "H l 1 0 4 8 9 1 14 15 1 16 17 1",
            ],
            1,
        );
        let store = HashMap::from([((Kind::Lock, 0, 0), 9), ((Kind::Lock, 1, 0), 5)]);
        let report = analyse(&options(2), &[log], &store, &[]);
        assert_eq!(
            report.lock.ordering_violations, 2,
            "both writes of 4 after 5"
        );
        assert!(!report.passed());
    }

    #[test]
    fn permits_within_the_count_on_their_own_slots_pass() {
        // Two holders of key 0 at once on slots 0 and 1 (tenure 9..10
        // inside 4..11), then slot 0 again, after the first.
        let log = log_of(
            &[
                "H s 0 0 100 1 2 1 3 4 1 11 12 1",
                "H s 0 1 200 5 6 1 7 9 1 10 13 1",
                "H s 0 0 101 14 15 1 16 17 1 18 19 1",
            ],
            1,
        );
        let store = HashMap::from([((Kind::Permit, 0, 0), 101), ((Kind::Permit, 0, 1), 200)]);
        let report = analyse(&options(2), &[log], &store, &[]);
        assert_eq!(report.semaphore.violations(), 0, "{}", report.to_json());
        assert_eq!(report.semaphore.most_holders_at_once, 2);
        assert!(report.passed(), "{}", report.to_json());
    }

    #[test]
    fn more_holders_than_permits_two_holders_of_a_slot_or_a_slot_out_of_range_are_violations() {
        let at_once = [
            "H s 0 0 100 1 2 1 3 4 1 20 21 1",
            "H s 0 1 200 5 6 1 7 8 1 22 23 1",
            "H s 0 2 300 9 10 1 11 12 1 24 25 1",
        ];
        let store = HashMap::from([
            ((Kind::Permit, 0, 0), 100),
            ((Kind::Permit, 0, 1), 200),
            ((Kind::Permit, 0, 2), 300),
        ]);
        // Three slots in use with 3 permits: fine; with 2, the third
        // holder is over capacity and its slot out of range.
        let three = analyse(&options(3), &[log_of(&at_once, 1)], &store, &[]);
        assert_eq!(three.semaphore.violations(), 0, "{}", three.to_json());
        let two = analyse(&options(2), &[log_of(&at_once, 1)], &store, &[]);
        assert_eq!(two.semaphore.over_capacity, 1);
        assert_eq!(two.semaphore.slot_out_of_range, 1);

        // Slot 0 held by fences 100 and 101 at once (a store that skipped
        // the fence check accepted 100's second write after 101's first).
        let log = log_of(
            &[
                "H s 0 0 100 1 2 1 3 4 1 11 12 1",
                "H s 0 0 101 5 6 1 7 8 1 13 14 1",
            ],
            1,
        );
        let store = HashMap::from([((Kind::Permit, 0, 0), 101)]);
        let report = analyse(&options(2), &[log], &store, &[]);
        assert_eq!(report.semaphore.slot_overlaps, 1);
        assert_eq!(report.semaphore.fences.ordering_violations, 1);
        assert!(!report.passed());
    }

    #[test]
    fn a_killed_workers_unfinished_rounds_join_the_checks() {
        let options = Options {
            threads: 2,
            ..options(2)
        };
        let mut dead = WorkerLog::default();
        for line in [
            "READY",
            // Holding lock 0 (fence 10), its first write accepted.
            "S l 1",
            "G l 0 0 10 1 2",
            "P l 1 1 3 4",
            // Holding the write lease of rw 0 (fence 70), no write reported.
            "S w 5",
            "G w 0 0 70 5 6",
            // Inside a write acquire.
            "S w 7",
            // A finished round is not cut short.
            "S s 8",
            "G s 0 1 5 8 9",
            "P s 8 1 10 11",
            "H s 0 1 5 8 9 1 10 11 1 12 13 1",
        ] {
            dead.record(line);
        }
        dead.killed_at = Some(20);
        // After the kill, lock 0 goes to fence 11; the store holds the
        // killed writer's fence (its write's outcome is unknown).
        let taken_over = "H l 0 0 11 21 22 1 23 24 1 25 26 1";
        let store = HashMap::from([
            ((Kind::Lock, 0, 0), 11),
            ((Kind::Write, 0, 0), 70),
            ((Kind::Permit, 0, 1), 5),
        ]);
        let report = analyse(&options, &[log_of(&[taken_over], 2), dead], &store, &[]);
        assert!(report.passed(), "{}", report.to_json());
        assert_eq!(report.kills.holding.get("lock"), Some(&1));
        assert_eq!(report.kills.holding.get("write"), Some(&1));
        assert_eq!(report.kills.holding.get("permit"), None);
        assert_eq!(report.kills.acquiring, 1);
        assert_eq!(report.kills.taken_over, 1);
        assert_eq!(report.writes_cut_short, 3);
        assert_eq!(
            report.stranded_waiters, 0,
            "the dead worker is not waited for"
        );

        // A writer killed while it waited (its registration queued): the
        // hand-over may grant that registration until its bound passes,
        // after the kill, and the grant lapses unclaimed; a reader then
        // carries that fence, held by nobody (docs/PROTOCOL.md §11).
        let mut dead = WorkerLog::default();
        for line in ["READY", "S w 1"] {
            dead.record(line);
        }
        dead.killed_at = Some(3);
        dead.registrations_gone_at = Some(40);
        let live = [
            "H w 0 0 70 4 5 1 6 7 1 8 9 1",
            "H r 0 0 75 20 21 1 22 23 1 24 25 1",
        ];
        let store = HashMap::from([((Kind::Write, 0, 0), 75)]);
        let report = analyse(&options, &[log_of(&live, 2), dead], &store, &[]);
        assert!(report.passed(), "{}", report.to_json());
        // Its bound passed before the live writer: not explained.
        let mut dead = WorkerLog::default();
        for line in ["READY", "S w 1"] {
            dead.record(line);
        }
        dead.killed_at = Some(3);
        dead.registrations_gone_at = Some(3);
        let report = analyse(&options, &[log_of(&live, 2), dead], &store, &[]);
        assert_eq!(report.rw.epoch_mismatches, 1, "{}", report.to_json());

        // Lock 0 granted again with the killed holder's fence after the kill.
        let mut dead = WorkerLog::default();
        for line in ["READY", "S l 1", "G l 0 0 10 1 2"] {
            dead.record(line);
        }
        dead.killed_at = Some(20);
        let reused = "H l 0 0 10 21 22 1 23 24 1 25 26 1";
        let store = HashMap::from([((Kind::Lock, 0, 0), 10)]);
        let report = analyse(&options, &[log_of(&[reused], 2), dead], &store, &[]);
        assert_eq!(report.kills.fence_reused, 1, "{}", report.to_json());
        assert_eq!(report.lock.duplicate_fences, 1);
        assert!(!report.passed());
    }

    #[test]
    fn readers_share_and_carry_the_last_writers_fence() {
        let log = log_of(
            &[
                // Readers before any writer: the counter's floor.
                "H r 0 0 50 1 2 1 3 4 1 5 6 1",
                "H w 0 0 70 7 8 1 9 10 1 11 12 1",
                // Two readers at once with epoch 70, then a writer.
                "H r 0 0 70 13 14 1 15 16 1 21 22 1",
                "H r 0 0 70 17 18 1 19 20 1 23 24 1",
                "H w 0 0 80 25 26 1 27 28 1 29 30 1",
            ],
            1,
        );
        let store = HashMap::from([((Kind::Write, 0, 0), 80)]);
        let report = analyse(&options(2), &[log], &store, &[]);
        assert_eq!(report.rw.violations(), 0, "{}", report.to_json());
        assert_eq!(report.rw.most_readers_at_once, 2);
        assert!(report.passed(), "{}", report.to_json());
    }

    #[test]
    fn a_writer_beside_a_reader_a_wrong_epoch_or_a_lower_later_fence_are_violations() {
        let store = HashMap::from([((Kind::Write, 0, 0), 80)]);
        let run = |lines: &[&str], restarts: &[(u64, u64)]| {
            analyse(&options(2), &[log_of(lines, 1)], &store, restarts)
        };
        // Writer 80 holds from 9 to 20 by a valid lease; a reader with
        // epoch 80 holds from 15 to 17.
        let overlap = run(
            &[
                "H w 0 0 80 1 2 1 3 9 1 20 21 1",
                "H r 0 0 80 10 11 1 12 15 1 17 18 1",
            ],
            &[],
        );
        assert_eq!(overlap.rw.writer_overlaps, 1, "{}", overlap.to_json());
        // The same with a writer that wrote past its lease: its second
        // write, accepted after the reader's fill at its fence, is one too
        // (a store that accepts a fence equal to the high-water after a
        // derived write).
        let expired = run(
            &[
                "H w 0 0 80 1 2 1 3 9 1 20 21 0",
                "H r 0 0 80 10 11 1 12 15 1 17 18 1",
            ],
            &[],
        );
        assert_eq!(expired.rw.writes_after_derived, 1, "{}", expired.to_json());
        assert_eq!(expired.rw.writer_overlaps, 1);
        assert_eq!(expired.rw.late_writers, 1);
        // Refused by the store, it is fenced out: no violation.
        let refused = run(
            &[
                "H w 0 0 80 1 2 1 3 9 0 20 21 0",
                "H r 0 0 80 10 11 1 12 15 1 17 18 1",
            ],
            &[],
        );
        assert_eq!(refused.rw.violations(), 0, "{}", refused.to_json());
        assert_eq!(refused.rw.expired_writers_refused, 1);

        // A reader after writer 80 whose epoch is 70, or 90 with nothing
        // to explain it; 90 is fine after a restart.
        let after_writer_80 = |epoch: u64, restarts: &[(u64, u64)]| {
            let reader = format!("H r 0 0 {epoch} 7 8 1 9 10 1 11 12 1");
            run(&["H w 0 0 80 1 2 1 3 4 1 5 6 1", &reader], restarts)
        };
        assert_eq!(after_writer_80(70, &[]).rw.epoch_mismatches, 1);
        assert_eq!(after_writer_80(90, &[]).rw.epoch_mismatches, 1);
        assert_eq!(after_writer_80(90, &[(3, 7)]).rw.epoch_mismatches, 0);

        // Writer 80, then writer 75 granted after it.
        let order = run(
            &[
                "H w 0 0 80 1 2 1 3 4 1 5 6 1",
                "H w 0 0 75 7 8 1 9 10 0 11 12 1",
            ],
            &[],
        );
        assert_eq!(order.rw.write_fence_order, 1, "{}", order.to_json());
    }
}
