//! Contention: P processes × W waiters on one key, each holding it `hold`
//! and releasing, until `total` acquisitions; once with release
//! notifications and once without (an ACL user without channel rights, so
//! SUBSCRIBE is refused with NOPERM and the lockers poll). The `semaphore`
//! scenario runs the same with a fenced semaphore of `--permits` (default
//! 3) instead of a lock: hand-overs are counted per slot, and a violation
//! is more than `permits` holders at once (or two in one slot).
//!
//! The controller (`contention`) re-executes this binary as worker
//! processes (`contention-worker`) and talks to them over their stdin and
//! stdout: `READY` (connected), `GO`, one `A` per acquisition (so the
//! controller can count to `total` and say `STOP`), then one `R` line per
//! acquisition (fence, shared-clock timestamps), an `S` line with the
//! locker's statistics and `END`. Timestamps are `SystemTime` in µs: the
//! one clock all processes share.
//!
//! The `rw` scenario (`rw.rs`) drives the same workers on a read-write
//! lease (`--rw 1`): each waiter loop then reads, and writes every
//! `--write-every`th operation, and the `R` lines carry the mode and the
//! time of the call; an acquire cancelled by STOP is reported as a `P`
//! line (mode, call time, cancel time).
//!
//! The `scale` scenario (`scale.rs`) calls `gather` and `analyse` with its
//! own `Plan`s; with `distinct_keys` (`--distinct 1`) each waiter loop
//! takes a key of its own, sends no `A` line, and reports one `C` line
//! (waiter, grants) per loop instead of the `R` lines; with `duration` the
//! controller says STOP after that time. Every run also measures the CPU
//! Redis and the workers used between GO and STOP (`Raw::cpu`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redlease::{AcquireOptions, CancelHandle, Config, ReleaseOutcome, Stats};

use super::handover_steps::{self, Mark};
use super::json::J;
use super::uncontended::{num, pipelined_pings, rtt_connection, with_script_calls};
use super::util::{self, sys_us, CommandStats, Front};
use super::{Args, BoxResult};

/// The ACL user of the poll-only runs: every command, every key, no channel.
const NO_NOTIFY_USER: &str = "redlease-bench-nonotify";
const NO_NOTIFY_PASSWORD: &str = "redlease-bench-nonotify-pw";

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let permits = match args.scenario.as_str() {
        "semaphore" => Some(args.num("permits", 3)?),
        _ => None,
    };
    let plan = Plan::new(
        permits.map_or(Kind::Lock, Kind::Semaphore),
        args.num("processes", 4)?,
        args.num("waiters", 8)?,
        args.num("total", 500)?,
        Duration::from_micros(args.num("hold-us", 2_000)?),
        Duration::from_secs(args.num("budget-s", 120)?),
    );
    let modes: Vec<bool> = match args.get("notify").unwrap_or("both") {
        "both" => vec![true, false],
        "on" => vec![true],
        "off" => vec![false],
        other => return Err(format!("--notify: on, off or both, not {other:?}").into()),
    };
    let mut admin = util::connect(&url)?;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(NO_NOTIFY_USER)
        .arg("reset")
        .arg("on")
        .arg(format!(">{NO_NOTIFY_PASSWORD}"))
        .arg("~*")
        .arg("resetchannels")
        .arg("+@all")
        .query::<()>(&mut admin)?;
    let handovers: Vec<bool> = match args.get("handover").unwrap_or("on") {
        "both" => vec![true, false],
        "on" => vec![true],
        "off" => vec![false],
        other => return Err(format!("--handover: on, off or both, not {other:?}").into()),
    };
    let mut plan = plan;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let mut per_front = Vec::new();
        for &notify in &modes {
            for &handover in &handovers {
                plan.handover = handover;
                let r = one(front, &url, notify, &plan)?;
                eprintln!(
                    "{} handover {handover}{}",
                    headline(front.name(), notify, &r),
                    steps_line(&r)
                );
                let name = match (notify, handover) {
                    (true, true) => "notify",
                    (false, true) => "poll_only",
                    (true, false) => "notify_race",
                    (false, false) => "poll_only_race",
                };
                per_front.push((name, r));
            }
        }
        out.push((front.name(), J::obj(per_front)));
    }
    if let (Kind::Lock, Some(bin)) = (plan.kind, args.get("rslock-bin")) {
        plan.rslock = Some(bin.to_owned());
        let r = one(Front::Async, &url, true, &plan)?;
        eprintln!("{}", headline("rslock", true, &r));
        out.push(("redlease_over_rslock", over_rslock(&out, &r)));
        out.push(("rslock", r));
    }
    Ok(J::obj(out))
}

/// Each front end's figures (notifications and hand-over on) over
/// rslock's of the same run.
fn over_rslock(fronts: &[(&str, J)], rslock: &J) -> J {
    let figures: [(&str, &[&str]); 5] = [
        (
            "handover_other_process_p50",
            &["handover_other_process", "p50_us"],
        ),
        ("wait_p99", &["wait", "p99_us"]),
        ("wait_max", &["wait", "max_us"]),
        (
            "commands_per_acquisition",
            &["redis_commands_with_script_calls_per_acquisition"],
        ),
        (
            "round_trips_per_acquisition",
            &["redis_round_trips_per_acquisition"],
        ),
    ];
    J::obj(fronts.iter().filter_map(|(front, per_front)| {
        let ours = per_front.get("notify")?;
        Some((
            *front,
            J::obj(
                figures
                    .iter()
                    .map(|(name, path)| (*name, J::round(num(ours, path) / num(rslock, path), 3))),
            ),
        ))
    }))
}

pub(crate) struct Plan {
    pub(crate) kind: Kind,
    pub(crate) processes: usize,
    pub(crate) waiters: usize,
    pub(crate) total: usize,
    pub(crate) hold: Duration,
    pub(crate) budget: Duration,
    /// Each waiter loop on a key of its own (`scale`): the workers count
    /// their grants instead of reporting each one.
    pub(crate) distinct_keys: bool,
    /// Say STOP after this long, whatever the count.
    pub(crate) duration: Option<Duration>,
    /// The workers' `Config::handover` (docs/PROTOCOL.md §4): on, or the
    /// race of every waiting process after a release (the 0.1 path).
    pub(crate) handover: bool,
    /// The workers are this build of the peer, rslock
    /// (`benchmarks/peers/rslock`), instead of redlease.
    pub(crate) rslock: Option<String>,
}

impl Plan {
    /// One key, `total` grants, nothing else.
    pub(crate) fn new(
        kind: Kind,
        processes: usize,
        waiters: usize,
        total: usize,
        hold: Duration,
        budget: Duration,
    ) -> Plan {
        Plan {
            kind,
            processes,
            waiters,
            total,
            hold,
            budget,
            distinct_keys: false,
            duration: None,
            handover: true,
            rslock: None,
        }
    }
}

/// What the workers contend for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    /// A fenced semaphore of this many permits.
    Semaphore(u32),
    /// A read-write lease; every `write_every`th operation of a loop writes.
    Rw {
        write_every: u32,
    },
}

impl Kind {
    fn permits(self) -> Option<u32> {
        match self {
            Kind::Semaphore(n) => Some(n),
            Kind::Lock | Kind::Rw { .. } => None,
        }
    }
}

/// What one grant was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A lock's lease or a semaphore's permit.
    Exclusive,
    Read,
    Write,
}

impl Mode {
    fn code(self) -> u64 {
        match self {
            Mode::Exclusive => 0,
            Mode::Read => 1,
            Mode::Write => 2,
        }
    }

    fn from_code(n: u64) -> Mode {
        match n {
            1 => Mode::Read,
            2 => Mode::Write,
            _ => Mode::Exclusive,
        }
    }
}

/// The mode of operation `i` (from 0) of waiter loop `seed` (its index
/// among all loops of the run): deterministic, every `write_every`th
/// operation a write, the loops' writes staggered by their index.
fn op_mode(kind: Kind, seed: usize, i: usize) -> Mode {
    match kind {
        Kind::Rw { write_every } => {
            let every = write_every.max(1) as usize;
            if (seed + i) % every == every - 1 {
                Mode::Write
            } else {
                Mode::Read
            }
        }
        Kind::Lock | Kind::Semaphore(_) => Mode::Exclusive,
    }
}

fn headline(label: &str, notify: bool, r: &J) -> String {
    let f = |path: &[&str]| {
        let mut v = r;
        for p in path {
            match v.get(p) {
                Some(x) => v = x,
                None => return f64::NAN,
            }
        }
        v.as_f64().unwrap_or(f64::NAN)
    };
    format!(
        "{} {:8} {:9}: {:.0} acq/s, hand-over to another waiter p50 {:.0} µs = {:.1} RTT \
         ({:.1} idle RTT), p99 {:.0} µs; releaser's process re-takes {:.0}%; {:.2} scripts/acq, \
         {:.2} round trips/acq, {:.1} commands/acq, Redis {:.1} µs/acq; per waiter {}..{}; \
         violations {}",
        match r.get("permits").and_then(J::as_f64) {
            Some(n) => format!("semaphore ({n} permits)"),
            None => "contention".to_owned(),
        },
        label,
        if notify { "notify" } else { "poll-only" },
        f(&["acquisitions_per_s"]),
        f(&["handover_other_waiter", "p50_us"]),
        f(&["handover_other_waiter_p50_rtt"]),
        f(&["handover_other_waiter_p50_in_rtt_after_idle"]),
        f(&["handover_other_waiter", "p99_us"]),
        f(&["releaser_process_retake_rate"]) * 100.0,
        f(&["redis_scripts_per_acquisition"]),
        f(&["redis_round_trips_per_acquisition"]),
        f(&["redis_commands_per_acquisition"]) + f(&["redis_calls_inside_scripts_per_acquisition"]),
        f(&["redis_server_us_per_acquisition"]),
        f(&["fairness", "min_per_waiter"]),
        f(&["fairness", "max_per_waiter"]),
        f(&["mutual_exclusion_violations"]),
    )
}

/// The hand-over's steps (p50, µs), when the workers recorded them.
fn steps_line(r: &J) -> String {
    let Some(steps) = r.get("handover_other_process_steps") else {
        return String::new();
    };
    let term = |name: &str| {
        steps
            .get(name)
            .and_then(|t| t.get("p50_us"))
            .and_then(J::as_f64)
            .unwrap_or(f64::NAN)
    };
    let count = |name: &str| steps.get(name).and_then(J::as_f64).unwrap_or(f64::NAN);
    format!(
        "\n  hand-over steps, p50 µs: release called→sent {:.0}, sent→notice read {:.0} (releaser's \
         round trip {:.0}), notice handled {:.0}, waiter woken {:.0}, woken→claim sent {:.0}, \
         claim round trip {:.0}, claim replied→returned {:.0}; claimed {:.0} of {:.0}",
        term("release_called_to_sent"),
        term("release_sent_to_notice_read"),
        term("releaser_round_trip"),
        term("notice_handling"),
        term("waiter_wake_up"),
        term("woken_to_claim_sent"),
        term("claim_round_trip"),
        term("claim_replied_to_returned"),
        count("claimed"),
        count("hand_overs"),
    )
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec {
    pub(crate) process: usize,
    pub(crate) waiter: usize,
    /// The permit's slot; 0 for a lock or a read-write lease.
    pub(crate) slot: u32,
    /// The fence (a writer's or a lock's) or a reader's epoch.
    pub(crate) fence: u64,
    pub(crate) mode: Mode,
    /// Shared clock, µs: the acquire was called.
    pub(crate) called: u64,
    /// The acquire returned.
    pub(crate) acquired: u64,
    /// The holder called release.
    pub(crate) release_called: u64,
    /// The release returned.
    pub(crate) released: u64,
}

/// An acquire still waiting when STOP cancelled it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) process: usize,
    pub(crate) waiter: usize,
    pub(crate) mode: Mode,
    /// Shared clock, µs: the acquire was called.
    pub(crate) called: u64,
    /// It returned `Cancelled`.
    pub(crate) cancelled: u64,
}

enum Msg {
    Ready,
    Acquired,
    Rec(Rec),
    Pending(Pending),
    Stats(usize, Vec<u64>),
    /// (process, waiter, grants) of a counting worker.
    Count(usize, usize, u64),
    Error(usize, String),
    /// A step a worker's locker recorded (`redlease::probe`).
    Mark(usize, Mark),
    End,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
}

fn say(stdin: &mut ChildStdin, what: &str) {
    let _ = writeln!(stdin, "{what}");
    let _ = stdin.flush();
}

/// What the workers of one run reported, and the run's facts.
pub(crate) struct Raw {
    pub(crate) recs: Vec<Rec>,
    pub(crate) pending: Vec<Pending>,
    /// The `S` fields of each process.
    pub(crate) stats: BTreeMap<usize, Vec<u64>>,
    pub(crate) errors: BTreeMap<String, u64>,
    pub(crate) commandstats: CommandStats,
    pub(crate) rtt: Vec<u64>,
    pub(crate) rtt_p50: u64,
    pub(crate) idle_rtt: Vec<u64>,
    /// Shared clock, µs: GO and STOP.
    pub(crate) go_us: u64,
    pub(crate) stop_us: u64,
    pub(crate) counted_at_stop: usize,
    pub(crate) timed_out: bool,
    /// Grants per (process, waiter) of counting workers (`distinct_keys`).
    pub(crate) counts: BTreeMap<(usize, usize), u64>,
    /// CPU that Redis and the worker processes used from GO to STOP.
    pub(crate) cpu: util::CpuUse,
    /// The steps each process's locker recorded.
    pub(crate) marks: BTreeMap<usize, Vec<Mark>>,
}

impl Raw {
    pub(crate) fn window_us(&self) -> u64 {
        self.stop_us.saturating_sub(self.go_us)
    }
}

fn one(front: Front, url: &str, notify: bool, plan: &Plan) -> BoxResult<J> {
    let raw = gather(front, url, notify, plan)?;
    let mut j = analyse(front, notify, plan, raw);
    if front == Front::Async {
        let plain = util::ping_blocking(url, 1_000)?;
        let gap = j
            .get("handover_other_process")
            .and_then(|g| g.get("p50_us"))
            .and_then(J::as_f64)
            .unwrap_or(0.0);
        j.set("plain_rtt", util::summary_us(&plain));
        j.set(
            "handover_other_process_p50_plain_rtt",
            util::in_rtt((gap * 1000.0) as u64, util::p50(&plain)),
        );
    }
    Ok(j)
}

/// Runs the worker processes of one (front end, notifications) pair to
/// `plan.total` grants and collects what they report.
pub(crate) fn gather(front: Front, url: &str, notify: bool, plan: &Plan) -> BoxResult<Raw> {
    let mut admin = util::connect(url)?;
    let worker_url = if notify {
        url.to_owned()
    } else {
        util::with_user(url, NO_NOTIFY_USER, NO_NOTIFY_PASSWORD)?
    };
    let ns = util::fresh_namespace(match plan.kind {
        Kind::Rw { .. } => "rw",
        Kind::Lock | Kind::Semaphore(_) => "contention",
    });
    let rtt = util::ping(front, url, 1_000)?;
    let rtt_p50 = util::p50(&rtt);
    let idle_rtt = util::ping_after_idle(front, url, 200, Duration::from_millis(2))?;
    let write_every = match plan.kind {
        Kind::Rw { write_every } => write_every,
        Kind::Lock | Kind::Semaphore(_) => 0,
    };
    let (tx, rx) = mpsc::channel();
    let mut workers = Vec::new();
    for p in 0..plan.processes {
        let mut command = match &plan.rslock {
            Some(bin) => Command::new(bin),
            None => {
                let mut own = Command::new(std::env::current_exe()?);
                own.arg("contention-worker");
                own
            }
        };
        let mut child = command
            .args(["--url", &worker_url])
            .args(["--front", front.name(), "--ns", &ns, "--key", "contended"])
            .args(["--process", &p.to_string()])
            .args(["--waiters", &plan.waiters.to_string()])
            .args(["--hold-us", &plan.hold.as_micros().to_string()])
            .args(["--permits", &plan.kind.permits().unwrap_or(0).to_string()])
            .args(["--write-every", &write_every.to_string()])
            .args(["--distinct", if plan.distinct_keys { "1" } else { "0" }])
            .args(["--handover", if plan.handover { "1" } else { "0" }])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let tx = tx.clone();
        std::thread::spawn(move || read_worker(p, stdout, &tx));
        workers.push(Worker { child, stdin });
    }
    drop(tx);
    let mut ready = 0;
    while ready < plan.processes {
        match rx.recv_timeout(Duration::from_secs(30))? {
            Msg::Ready => ready += 1,
            Msg::End => return Err("a worker ended before it was ready".into()),
            _ => {}
        }
    }
    let pids: Vec<u32> = workers.iter().map(|w| w.child.id()).collect();
    CommandStats::reset(&mut admin)?;
    let cpu_at_go = util::CpuSample::take(&mut admin, &pids);
    let go_us = sys_us();
    let started = Instant::now();
    for w in &mut workers {
        say(&mut w.stdin, "GO");
    }
    let mut counted = 0usize;
    let mut stop_at = None;
    let mut recs = Vec::new();
    let mut pending = Vec::new();
    let mut stats: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    let mut counts = BTreeMap::new();
    let mut marks: BTreeMap<usize, Vec<Mark>> = BTreeMap::new();
    let mut cpu_at_stop = None;
    let mut ended = 0;
    let mut timed_out = false;
    while ended < plan.processes {
        let mut wait = Duration::from_millis(200);
        if let (Some(d), None) = (plan.duration, stop_at) {
            wait = wait.min(d.saturating_sub(started.elapsed()));
        }
        let msg = match rx.recv_timeout(wait) {
            Ok(msg) => Some(msg),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match msg {
            Some(Msg::Acquired) => counted += 1,
            Some(Msg::Rec(r)) => recs.push(r),
            Some(Msg::Pending(p)) => pending.push(p),
            Some(Msg::Stats(p, s)) => {
                stats.insert(p, s);
            }
            Some(Msg::Count(p, w, n)) => {
                counts.insert((p, w), n);
            }
            Some(Msg::Error(p, code)) => {
                *errors.entry(format!("process {p}: {code}")).or_default() += 1;
            }
            Some(Msg::Mark(p, mark)) => marks.entry(p).or_default().push(mark),
            Some(Msg::End) => ended += 1,
            Some(Msg::Ready) | None => {}
        }
        let over_budget = started.elapsed() > plan.budget;
        let over_time = plan.duration.is_some_and(|d| started.elapsed() >= d);
        if stop_at.is_none() && (counted >= plan.total || over_budget || over_time) {
            timed_out = over_budget && counted < plan.total;
            cpu_at_stop = Some(util::CpuSample::take(&mut admin, &pids));
            stop_at = Some((sys_us(), counted));
            for w in &mut workers {
                say(&mut w.stdin, "STOP");
            }
        }
        if over_budget && started.elapsed() > plan.budget + Duration::from_secs(20) {
            for w in &mut workers {
                let _ = w.child.kill();
            }
            return Err("workers did not stop within 20 s of STOP".into());
        }
    }
    let commandstats = CommandStats::read(&mut admin)?;
    for w in &mut workers {
        let _ = w.child.wait();
    }
    let (stop_us, counted_at_stop) = stop_at.unwrap_or((sys_us(), counted));
    let cpu_at_stop = cpu_at_stop.unwrap_or_else(|| util::CpuSample::take(&mut admin, &pids));
    Ok(Raw {
        counts,
        marks,
        cpu: cpu_at_go.until(&cpu_at_stop),
        recs,
        pending,
        stats,
        errors,
        commandstats,
        rtt,
        rtt_p50,
        idle_rtt,
        go_us,
        stop_us,
        counted_at_stop,
        timed_out,
    })
}

fn read_worker(p: usize, stdout: std::process::ChildStdout, tx: &mpsc::Sender<Msg>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        let nums = |words: std::str::SplitWhitespace<'_>| -> Vec<u64> {
            words.filter_map(|w| w.parse().ok()).collect()
        };
        let msg = match words.next() {
            Some("READY") => Msg::Ready,
            Some("A") => Msg::Acquired,
            Some("R") => {
                let n = nums(words);
                if n.len() != 8 {
                    continue;
                }
                Msg::Rec(Rec {
                    process: p,
                    waiter: n[0] as usize,
                    slot: n[1] as u32,
                    fence: n[2],
                    mode: Mode::from_code(n[3]),
                    called: n[4],
                    acquired: n[5],
                    release_called: n[6],
                    released: n[7],
                })
            }
            Some("P") => {
                let n = nums(words);
                if n.len() != 4 {
                    continue;
                }
                Msg::Pending(Pending {
                    process: p,
                    waiter: n[0] as usize,
                    mode: Mode::from_code(n[1]),
                    called: n[2],
                    cancelled: n[3],
                })
            }
            Some("S") => Msg::Stats(p, nums(words)),
            Some("C") => {
                let n = nums(words);
                if n.len() != 2 {
                    continue;
                }
                Msg::Count(p, n[0] as usize, n[1])
            }
            Some("E") => Msg::Error(p, words.collect::<Vec<_>>().join(" ")),
            Some("T") => match handover_steps::parse(words) {
                Some(mark) => Msg::Mark(p, mark),
                None => continue,
            },
            Some("END") => break,
            _ => continue,
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
    let _ = tx.send(Msg::End);
}

/// The lockers' statistics (the `S` fields) summed over the processes,
/// in total and per acquisition.
pub(crate) fn locker_stats(
    stats: &BTreeMap<usize, Vec<u64>>,
    acquisitions: usize,
) -> [(&'static str, J); 2] {
    let names = [
        "acquires",
        "busy_replies",
        "notifications",
        "safety_polls",
        "scripts_sent",
        "wait_timeouts",
        "noscript_reloads",
    ];
    let mut sums = vec![0u64; names.len()];
    for s in stats.values() {
        for (i, v) in s.iter().enumerate().take(names.len()) {
            sums[i] += v;
        }
    }
    let acq = acquisitions.max(1) as f64;
    [
        (
            "locker_stats_sum",
            J::obj(
                names
                    .iter()
                    .zip(&sums)
                    .map(|(name, v)| (*name, J::from(*v))),
            ),
        ),
        (
            "locker_stats_per_acquisition",
            J::obj(
                names
                    .iter()
                    .zip(&sums)
                    .map(|(name, v)| (*name, J::round(*v as f64 / acq, 2))),
            ),
        ),
    ]
}

/// Redis' work per acquisition from `INFO commandstats` (every grant has
/// one release script, the rest are acquire scripts).
pub(crate) fn redis_per_acquisition(
    front: Front,
    cs: &CommandStats,
    acquisitions: usize,
) -> Vec<(&'static str, J)> {
    let n = acquisitions as u64;
    let per_acq = |x: u64| J::round(x as f64 / acquisitions.max(1) as f64, 2);
    let pings = pipelined_pings(front, cs);
    vec![
        (
            "redis_commands_with_script_calls_per_acquisition",
            per_acq(with_script_calls(front, cs)),
        ),
        ("redis_pings_per_acquisition", per_acq(pings)),
        ("redis_server_us_per_acquisition", per_acq(cs.total_usec())),
        (
            "redis_server_us_pings_per_acquisition",
            per_acq(cs.usec("ping")),
        ),
        ("redis_scripts_per_acquisition", per_acq(cs.scripts())),
        (
            "redis_acquire_scripts_per_acquisition",
            per_acq(cs.scripts().saturating_sub(n)),
        ),
        ("redis_commands_per_acquisition", per_acq(cs.total())),
        (
            "redis_calls_inside_scripts_per_acquisition",
            per_acq(cs.inside_scripts()),
        ),
        (
            "redis_round_trips_per_acquisition",
            per_acq(cs.total().saturating_sub(pings)),
        ),
        ("commandstats", cs.to_json()),
    ]
}

/// Wait of each grant: from the call to the grant, in ns.
pub(crate) fn waits_ns<'a>(recs: impl IntoIterator<Item = &'a Rec>) -> Vec<u64> {
    recs.into_iter()
        .map(|r| r.acquired.saturating_sub(r.called) * 1000)
        .collect()
}

pub(crate) fn analyse(front: Front, notify: bool, plan: &Plan, a: Raw) -> J {
    let window_us = a.window_us();
    let mut recs = a.recs;
    // Fences increase strictly per key (per slot): fence order is grant
    // order, and each hand-over is from one holder of a slot to the next.
    recs.sort_by_key(|r| (r.slot, r.fence));
    let n = recs.len();
    // A lock's overlaps are the successive holders' below.
    let mut violations = plan
        .kind
        .permits()
        .map_or(0, |permits| over_capacity(&recs, permits));
    let successive: Vec<[Rec; 2]> = recs
        .windows(2)
        .filter(|pair| pair[0].slot == pair[1].slot)
        .map(|pair| [pair[0], pair[1]])
        .collect();
    let mut gaps_all = Vec::new();
    let mut gaps_other_waiter = Vec::new();
    let mut gaps_other_process = Vec::new();
    let mut gaps_same_process = Vec::new();
    let mut same_waiter = 0u64;
    let mut same_process = 0u64;
    // [releaser's process][next holder's process]
    let mut transitions = vec![vec![0u64; plan.processes]; plan.processes];
    let steps = handover_steps::breakdown(&successive, &a.marks, util::p50(&a.idle_rtt));
    for [prev, next] in successive {
        // The next holder saw its grant before the previous one started to
        // release (or fences repeated): two holders at once.
        if next.fence == prev.fence || next.acquired < prev.release_called {
            violations += 1;
            continue;
        }
        if let Some(row) = transitions.get_mut(prev.process) {
            if let Some(cell) = row.get_mut(next.process) {
                *cell += 1;
            }
        }
        let gap = (next.acquired - prev.release_called) * 1000;
        gaps_all.push(gap);
        if next.process == prev.process {
            same_process += 1;
            gaps_same_process.push(gap);
            if next.waiter == prev.waiter {
                same_waiter += 1;
            } else {
                gaps_other_waiter.push(gap);
            }
        } else {
            gaps_other_waiter.push(gap);
            gaps_other_process.push(gap);
        }
    }
    let pairs = n.saturating_sub(1).max(1) as f64;
    let mut per_waiter: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    for p in 0..plan.processes {
        for w in 0..plan.waiters {
            per_waiter.insert((p, w), 0);
        }
    }
    for r in &recs {
        *per_waiter.entry((r.process, r.waiter)).or_default() += 1;
    }
    let mut per_process = vec![0u64; plan.processes];
    for ((p, _), c) in &per_waiter {
        if let Some(slot) = per_process.get_mut(*p) {
            *slot += c;
        }
    }
    let counts: Vec<u64> = per_waiter.values().copied().collect();
    let release_rtts: Vec<u64> = recs
        .iter()
        .map(|r| r.released.saturating_sub(r.release_called) * 1000)
        .collect();
    let rtt_p50 = a.rtt_p50;
    let p50_of = |v: &[u64]| util::in_rtt(util::p50(v), rtt_p50);
    let mut fields = vec![
        ("front", J::from(front.name())),
        ("notifications", J::from(notify)),
        ("processes", J::from(plan.processes)),
        ("waiters_per_process", J::from(plan.waiters)),
        ("hold_us", J::from(plan.hold.as_micros() as u64)),
        ("target_acquisitions", J::from(plan.total)),
        ("acquisitions", J::from(n)),
        ("acquisitions_counted_at_stop", J::from(a.counted_at_stop)),
        ("timed_out", J::from(a.timed_out)),
        (
            "acquisitions_per_s",
            J::round(
                a.counted_at_stop as f64 / (window_us.max(1) as f64 / 1e6),
                1,
            ),
        ),
        ("rtt", util::summary_us(&a.rtt)),
        ("rtt_connection", J::from(rtt_connection(front))),
        ("rtt_after_2ms_idle", util::summary_us(&a.idle_rtt)),
        (
            "handover_other_waiter_p50_in_rtt_after_idle",
            util::in_rtt(util::p50(&gaps_other_waiter), util::p50(&a.idle_rtt)),
        ),
        ("handover_all", util::summary_us(&gaps_all)),
        ("handover_all_p50_rtt", p50_of(&gaps_all)),
        (
            "handover_other_waiter",
            util::summary_us(&gaps_other_waiter),
        ),
        ("handover_other_waiter_p50_rtt", p50_of(&gaps_other_waiter)),
        (
            "handover_other_waiter_p99_rtt",
            util::in_rtt(util::p99(&gaps_other_waiter), rtt_p50),
        ),
        (
            "handover_other_process",
            util::summary_us(&gaps_other_process),
        ),
        (
            "handover_other_process_p50_rtt",
            p50_of(&gaps_other_process),
        ),
        (
            "handover_same_process",
            util::summary_us(&gaps_same_process),
        ),
        ("release_call", util::summary_us(&release_rtts)),
        ("wait", util::summary_us(&waits_ns(&recs))),
        (
            "releaser_process_retake_rate",
            J::round(same_process as f64 / pairs, 3),
        ),
        (
            "releaser_waiter_retake_rate",
            J::round(same_waiter as f64 / pairs, 3),
        ),
        (
            "fairness",
            J::obj([
                (
                    "min_per_waiter",
                    J::from(counts.iter().copied().min().unwrap_or(0)),
                ),
                (
                    "max_per_waiter",
                    J::from(counts.iter().copied().max().unwrap_or(0)),
                ),
                (
                    "starved_waiters",
                    J::from(counts.iter().filter(|&&c| c == 0).count()),
                ),
                ("per_process", J::arr(per_process.into_iter().map(J::from))),
                (
                    "next_holder_process_by_releaser_process",
                    J::arr(
                        transitions
                            .into_iter()
                            .map(|row| J::arr(row.into_iter().map(J::from))),
                    ),
                ),
                ("per_waiter", J::arr(counts.iter().copied().map(J::from))),
            ]),
        ),
        ("mutual_exclusion_violations", J::from(violations)),
    ];
    fields.extend(redis_per_acquisition(front, &a.commandstats, n));
    fields.push((
        "redis_cpu_us_per_acquisition",
        J::round(a.cpu.redis_s() * 1e6 / a.counted_at_stop.max(1) as f64, 1),
    ));
    fields.push(("cpu_go_to_stop", a.cpu.to_json()));
    fields.extend(locker_stats(&a.stats, n));
    fields.push((
        "errors",
        J::obj(a.errors.iter().map(|(k, v)| (k.as_str(), J::from(*v)))),
    ));
    if let Some(permits) = plan.kind.permits() {
        fields.push(("permits", J::from(u64::from(permits))));
    }
    if let Some(steps) = steps {
        fields.push(("handover_other_process_steps", steps));
    }
    J::obj(fields)
}

/// How often more than `capacity` holders held at once, by the holders'
/// own view (from the grant's return to the release call, inside the
/// real hold): each grant that raised the count past the capacity.
fn over_capacity(recs: &[Rec], capacity: u32) -> u64 {
    let mut events: Vec<(u64, i8)> = recs
        .iter()
        .flat_map(|r| [(r.acquired, 1), (r.release_called, -1)])
        .collect();
    // At one instant, releases before grants: touching holds do not overlap.
    events.sort();
    let (mut holding, mut over) = (0i64, 0u64);
    for (_, delta) in events {
        holding += i64::from(delta);
        if delta > 0 && holding > i64::from(capacity) {
            over += 1;
        }
    }
    over
}

// ----- the worker process ---------------------------------------------------

struct Out(Mutex<std::io::Stdout>);

impl Out {
    fn line(&self, s: &str) {
        let out = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = out.lock();
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    }
}

struct WorkerState {
    stop: AtomicBool,
    cancel: CancelHandle,
    out: Out,
}

pub(crate) fn worker(args: &Args) -> BoxResult<()> {
    let url = args.url()?;
    let front = Front::parse(args.get("front").ok_or("--front")?)?;
    let ns = args.get("ns").ok_or("--ns")?.to_owned();
    let key = args.get("key").ok_or("--key")?.to_owned();
    let process: usize = args.num("process", 0)?;
    let waiters: usize = args.num("waiters", 8)?;
    let hold = Duration::from_micros(args.num("hold-us", 2_000)?);
    let permits: u32 = args.num("permits", 0)?;
    let write_every: u32 = args.num("write-every", 0)?;
    let distinct = args.num::<u8>("distinct", 0)? != 0;
    let handover = args.num::<u8>("handover", 1)? != 0;
    let kind = match (permits, write_every) {
        (0, 0) => Kind::Lock,
        (0, n) => Kind::Rw { write_every: n },
        (n, _) => Kind::Semaphore(n),
    };
    let job = |waiter: usize| Job {
        key: if distinct {
            format!("{key}:{process}:{waiter}")
        } else {
            key.clone()
        },
        kind,
        waiter,
        seed: process * waiters + waiter,
        hold,
        count_only: distinct,
    };
    let state = Arc::new(WorkerState {
        stop: AtomicBool::new(false),
        cancel: CancelHandle::new(),
        out: Out(Mutex::new(std::io::stdout())),
    });
    let (go_tx, go_rx) = mpsc::channel();
    {
        let state = state.clone();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                match line.as_deref().map(str::trim) {
                    Ok("GO") => {
                        let _ = go_tx.send(());
                    }
                    Ok("STOP") | Err(_) => break,
                    Ok(_) => {}
                }
            }
            state.stop.store(true, Ordering::SeqCst);
            state.cancel.cancel();
        });
    }
    let config = Config::new(ns)
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(60))
        .max_waiters(waiters.max(128))
        .handover(handover);
    // The steps of each hand-over, for `handover_steps`.
    redlease::probe::enable();
    let (recs, stats) = match front {
        Front::Blocking => {
            let locker = Arc::new(redlease::blocking::Locker::connect(url.as_str(), config)?);
            state.out.line("READY");
            go_rx.recv()?;
            let threads: Vec<_> = (0..waiters)
                .map(|w| {
                    let locker = locker.clone();
                    let state = state.clone();
                    let job = job(w);
                    std::thread::spawn(move || blocking_waiter(&locker, &state, &job))
                })
                .collect();
            let mut recs = Vec::new();
            for t in threads {
                recs.extend(t.join().map_err(|_| "a waiter thread panicked")?);
            }
            let stats = locker.stats();
            locker.shutdown()?;
            (recs, stats)
        }
        Front::Async => smol::block_on(async {
            let locker = redlease::aio::Locker::connect(url.as_str(), config).await?;
            state.out.line("READY");
            go_rx.recv()?;
            let jobs: Vec<Job> = (0..waiters).map(job).collect();
            let all =
                futures::future::join_all(jobs.iter().map(|j| async_waiter(&locker, &state, j)))
                    .await;
            let stats = locker.stats();
            locker.shutdown().await?;
            Ok::<_, Box<dyn std::error::Error>>((all.into_iter().flatten().collect(), stats))
        })?,
    };
    if distinct {
        // Counts only: a distinct-keys run makes too many grants to list.
        let mut per_waiter = vec![0u64; waiters];
        for r in &recs {
            if let Some(c) = per_waiter.get_mut(r.waiter) {
                *c += 1;
            }
        }
        for (w, c) in per_waiter.iter().enumerate() {
            state.out.line(&format!("C {w} {c}"));
        }
    }
    for r in recs.iter().filter(|_| !distinct) {
        state.out.line(&format!(
            "R {} {} {} {} {} {} {} {}",
            r.waiter,
            r.slot,
            r.fence,
            r.mode.code(),
            r.called,
            r.acquired,
            r.release_called,
            r.released
        ));
    }
    state.out.line(&stats_line(&stats));
    for mark in redlease::probe::take() {
        state.out.line(&handover_steps::line(&mark));
    }
    state.out.line("END");
    Ok(())
}

/// One waiter loop of a worker.
struct Job {
    key: String,
    kind: Kind,
    waiter: usize,
    /// The loop's index among all loops of the run (for `op_mode`).
    seed: usize,
    hold: Duration,
    /// Reports no `A` line per grant (the controller stops by time).
    count_only: bool,
}

fn stats_line(s: &Stats) -> String {
    format!(
        "S {} {} {} {} {} {} {}",
        s.acquires,
        s.busy_replies,
        s.notifications,
        s.safety_polls,
        s.scripts_sent,
        s.wait_timeouts,
        s.noscript_reloads
    )
}

fn options(state: &WorkerState) -> AcquireOptions {
    AcquireOptions::new().cancel(state.cancel.clone())
}

/// One loop's record of a grant, once released; `slot_fence` is (slot,
/// fence or epoch), `times` (called, acquired, release called).
fn record(
    state: &WorkerState,
    job: &Job,
    mode: Mode,
    (slot, fence): (u32, u64),
    [called, acquired, release_called]: [u64; 3],
    outcome: Result<ReleaseOutcome, redlease::Error>,
) -> Rec {
    match outcome {
        Ok(ReleaseOutcome::Released) => {}
        Ok(other) => state.out.line(&format!("E release {other:?}")),
        Err(e) => state.out.line(&format!("E release {}", e.code())),
    }
    Rec {
        process: 0,
        waiter: job.waiter,
        slot,
        fence,
        mode,
        called,
        acquired,
        release_called,
        released: sys_us(),
    }
}

/// An acquire that STOP cancelled: how long it had waited.
fn report_pending(state: &WorkerState, job: &Job, mode: Mode, called: u64) {
    state.out.line(&format!(
        "P {} {} {} {}",
        job.waiter,
        mode.code(),
        called,
        sys_us()
    ));
}

/// What a blocking waiter loop acquires.
enum BlockingTarget {
    Lock,
    Semaphore(redlease::blocking::Semaphore),
    Rw(redlease::blocking::RwLock),
}

/// What it holds.
enum BlockingHeld {
    Lease(redlease::blocking::Lease),
    Permit(redlease::blocking::Permit),
    Read(redlease::blocking::ReadLease),
    Write(redlease::blocking::WriteLease),
}

impl BlockingHeld {
    fn release(self) -> Result<ReleaseOutcome, redlease::Error> {
        match self {
            BlockingHeld::Lease(l) => l.release(),
            BlockingHeld::Permit(p) => p.release(),
            BlockingHeld::Read(r) => r.release(),
            BlockingHeld::Write(w) => w.release(),
        }
    }
}

fn blocking_acquire(
    locker: &redlease::blocking::Locker,
    target: &BlockingTarget,
    key: &str,
    mode: Mode,
    options: AcquireOptions,
) -> Result<((u32, u64), BlockingHeld), redlease::Error> {
    match (target, mode) {
        (BlockingTarget::Lock, _) => locker
            .acquire_with(key, options)
            .map(|l| ((0, l.fence().get()), BlockingHeld::Lease(l))),
        (BlockingTarget::Semaphore(s), _) => s
            .acquire_with(options)
            .map(|p| ((p.slot(), p.fence().get()), BlockingHeld::Permit(p))),
        (BlockingTarget::Rw(rw), Mode::Write) => rw
            .write_with(options)
            .map(|w| ((0, w.fence().get()), BlockingHeld::Write(w))),
        (BlockingTarget::Rw(rw), _) => rw
            .read_with(options)
            .map(|r| ((0, r.epoch().get()), BlockingHeld::Read(r))),
    }
}

fn blocking_waiter(
    locker: &redlease::blocking::Locker,
    state: &WorkerState,
    job: &Job,
) -> Vec<Rec> {
    let target = match job.kind {
        Kind::Lock => Ok(BlockingTarget::Lock),
        Kind::Semaphore(n) => locker.semaphore(&job.key, n).map(BlockingTarget::Semaphore),
        Kind::Rw { .. } => locker.rw_lock(&job.key).map(BlockingTarget::Rw),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            state.out.line(&format!("E handle {}", e.code()));
            return Vec::new();
        }
    };
    let mut recs = Vec::new();
    let mut op = 0;
    while !state.stop.load(Ordering::SeqCst) {
        let mode = op_mode(job.kind, job.seed, op);
        let called = sys_us();
        match blocking_acquire(locker, &target, &job.key, mode, options(state)) {
            Ok((grant, held)) => {
                let acquired = sys_us();
                if !job.count_only {
                    state.out.line("A");
                }
                util::sleep(job.hold);
                let release_called = sys_us();
                let outcome = held.release();
                let times = [called, acquired, release_called];
                recs.push(record(state, job, mode, grant, times, outcome));
                op += 1;
            }
            Err(e) if e.code() == "CANCELLED" => {
                report_pending(state, job, mode, called);
                break;
            }
            Err(e) => state.out.line(&format!("E acquire {}", e.code())),
        }
    }
    recs
}

/// What an async waiter loop acquires.
enum AsyncTarget {
    Lock,
    Semaphore(redlease::aio::Semaphore),
    Rw(redlease::aio::RwLock),
}

/// What it holds.
enum AsyncHeld {
    Lease(redlease::aio::Lease),
    Permit(redlease::aio::Permit),
    Read(redlease::aio::ReadLease),
    Write(redlease::aio::WriteLease),
}

impl AsyncHeld {
    async fn release(self) -> Result<ReleaseOutcome, redlease::Error> {
        match self {
            AsyncHeld::Lease(l) => l.release().await,
            AsyncHeld::Permit(p) => p.release().await,
            AsyncHeld::Read(r) => r.release().await,
            AsyncHeld::Write(w) => w.release().await,
        }
    }
}

async fn async_acquire(
    locker: &redlease::aio::Locker,
    target: &AsyncTarget,
    key: &str,
    mode: Mode,
    options: AcquireOptions,
) -> Result<((u32, u64), AsyncHeld), redlease::Error> {
    match (target, mode) {
        (AsyncTarget::Lock, _) => locker
            .acquire_with(key, options)
            .await
            .map(|l| ((0, l.fence().get()), AsyncHeld::Lease(l))),
        (AsyncTarget::Semaphore(s), _) => s
            .acquire_with(options)
            .await
            .map(|p| ((p.slot(), p.fence().get()), AsyncHeld::Permit(p))),
        (AsyncTarget::Rw(rw), Mode::Write) => rw
            .write_with(options)
            .await
            .map(|w| ((0, w.fence().get()), AsyncHeld::Write(w))),
        (AsyncTarget::Rw(rw), _) => rw
            .read_with(options)
            .await
            .map(|r| ((0, r.epoch().get()), AsyncHeld::Read(r))),
    }
}

async fn async_waiter(locker: &redlease::aio::Locker, state: &WorkerState, job: &Job) -> Vec<Rec> {
    let target = match job.kind {
        Kind::Lock => Ok(AsyncTarget::Lock),
        Kind::Semaphore(n) => locker.semaphore(&job.key, n).map(AsyncTarget::Semaphore),
        Kind::Rw { .. } => locker.rw_lock(&job.key).map(AsyncTarget::Rw),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            state.out.line(&format!("E handle {}", e.code()));
            return Vec::new();
        }
    };
    let mut recs = Vec::new();
    let mut op = 0;
    while !state.stop.load(Ordering::SeqCst) {
        let mode = op_mode(job.kind, job.seed, op);
        let called = sys_us();
        match async_acquire(locker, &target, &job.key, mode, options(state)).await {
            Ok((grant, held)) => {
                let acquired = sys_us();
                if !job.count_only {
                    state.out.line("A");
                }
                if !job.hold.is_zero() {
                    async_io::Timer::after(job.hold).await;
                }
                let release_called = sys_us();
                let outcome = held.release().await;
                let times = [called, acquired, release_called];
                recs.push(record(state, job, mode, grant, times, outcome));
                op += 1;
            }
            Err(e) if e.code() == "CANCELLED" => {
                report_pending(state, job, mode, called);
                break;
            }
            Err(e) => state.out.line(&format!("E acquire {}", e.code())),
        }
    }
    recs
}
