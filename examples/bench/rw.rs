//! Read-mostly (`rw`): the contention workers (`contention.rs`) on a
//! read-write lease. P processes × W waiter loops on one key, each loop
//! reading, and writing every `--write-every`th operation (default 10: 90 %
//! reads, deterministic per loop and staggered across loops), holding
//! `hold` and releasing, until `total` grants; notifications on. In the
//! same run, per front end, a lock baseline: the `contention` scenario
//! with the same processes, loops and hold, reported beside it and as
//! ratios rw / lock.
//!
//! Violations are judged from the holders' own timestamps (grant returned
//! to release called): a writer overlapping anyone, a writer fence not
//! above the previous writer's, or a reader's epoch not matching the
//! writers around it. Finally one uncontended cycle of each kind (read,
//! write, lock) on a blocking locker, with `INFO commandstats` around
//! each, attributes the calls inside scripts to the scripts.

use std::collections::BTreeMap;
use std::time::Duration;

use redlease::Config;

use super::contention::{self, Kind, Mode, Plan, Raw, Rec};
use super::json::J;
use super::uncontended::num;
use super::util::{self, CommandStats, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let processes = args.num("processes", 4)?;
    let waiters = args.num("waiters", 8)?;
    let hold = Duration::from_micros(args.num("hold-us", 2_000)?);
    let budget = Duration::from_secs(args.num("budget-s", 120)?);
    let rw = Plan::new(
        Kind::Rw {
            write_every: args.num("write-every", 10)?,
        },
        processes,
        waiters,
        args.num("total", 3_000)?,
        hold,
        budget,
    );
    let lock = Plan::new(
        Kind::Lock,
        processes,
        waiters,
        args.num("lock-total", 500)?,
        hold,
        budget,
    );
    let load_before = util::loadavg();
    let mut out = Vec::new();
    for front in args.fronts()? {
        // The baseline first, then the read-write lease, back to back.
        let baseline = contention::analyse(
            front,
            true,
            &lock,
            contention::gather(front, &url, true, &lock)?,
        );
        let raw = contention::gather(front, &url, true, &rw)?;
        let r = analyse(front, &rw, raw);
        let ratios = ratios(&r, &baseline);
        eprintln!("{}", headline(front, &r, &baseline, &ratios));
        out.push((
            front.name(),
            J::obj([
                ("rw", r),
                ("lock_baseline", baseline),
                ("ratios_rw_to_lock", ratios),
            ]),
        ));
    }
    let costs = script_costs(&url)?;
    eprintln!("{}", costs_headline(&costs));
    out.push(("uncontended_cycle_costs", costs));
    out.push(("loadavg_before", J::from(load_before)));
    out.push(("loadavg_after", J::from(util::loadavg())));
    Ok(J::obj(out))
}

/// Commands per acquisition, top-level and inside scripts together.
fn all_commands(j: &J) -> f64 {
    num(j, &["redis_commands_per_acquisition"])
        + num(j, &["redis_calls_inside_scripts_per_acquisition"])
}

fn ratios(rw: &J, lock: &J) -> J {
    let ratio = |a: f64, b: f64| J::round(a / b, 2);
    J::obj([
        (
            "acquisitions_per_s",
            ratio(
                num(rw, &["acquisitions_per_s"]),
                num(lock, &["acquisitions_per_s"]),
            ),
        ),
        (
            "write_acquisitions_per_s",
            ratio(
                num(rw, &["per_mode", "write", "acquisitions_per_s"]),
                num(lock, &["acquisitions_per_s"]),
            ),
        ),
        (
            "writer_wait_p50",
            ratio(
                num(rw, &["per_mode", "write", "wait", "p50_us"]),
                num(lock, &["wait", "p50_us"]),
            ),
        ),
        (
            "writer_wait_p99",
            ratio(
                num(rw, &["per_mode", "write", "wait", "p99_us"]),
                num(lock, &["wait", "p99_us"]),
            ),
        ),
        (
            "reader_wait_p50",
            ratio(
                num(rw, &["per_mode", "read", "wait", "p50_us"]),
                num(lock, &["wait", "p50_us"]),
            ),
        ),
        (
            "reader_wait_p99",
            ratio(
                num(rw, &["per_mode", "read", "wait", "p99_us"]),
                num(lock, &["wait", "p99_us"]),
            ),
        ),
        (
            "round_trips_per_acquisition",
            ratio(
                num(rw, &["redis_round_trips_per_acquisition"]),
                num(lock, &["redis_round_trips_per_acquisition"]),
            ),
        ),
        (
            "scripts_per_acquisition",
            ratio(
                num(rw, &["redis_scripts_per_acquisition"]),
                num(lock, &["redis_scripts_per_acquisition"]),
            ),
        ),
        (
            "commands_per_acquisition_with_script_calls",
            ratio(all_commands(rw), all_commands(lock)),
        ),
        (
            "redis_server_us_per_acquisition",
            ratio(
                num(rw, &["redis_server_us_per_acquisition"]),
                num(lock, &["redis_server_us_per_acquisition"]),
            ),
        ),
    ])
}

fn headline(front: Front, r: &J, lock: &J, ratios: &J) -> String {
    let ms = |us: f64| us / 1000.0;
    format!(
        "rw {:8} notify: {:.0} acq/s (read {:.0}, write {:.0}) = {:.2}× lock ({:.0}); writer wait \
         p50 {:.1} ms p99 {:.1} ms, reader wait p50 {:.2} ms p99 {:.1} ms (lock p50 {:.1} ms p99 \
         {:.1} ms); up to {:.0} readers at once; {:.2} round trips/acq ({:.2}× lock), {:.1} + {:.1} \
         in scripts commands/acq ({:.2}× lock), Redis {:.1} µs/acq ({:.2}× lock); starved loops {:.0}, writes waiting at stop {:.0} \
         (longest {:.1} ms); violations {:.0}",
        front.name(),
        num(r, &["acquisitions_per_s"]),
        num(r, &["per_mode", "read", "acquisitions_per_s"]),
        num(r, &["per_mode", "write", "acquisitions_per_s"]),
        num(ratios, &["acquisitions_per_s"]),
        num(lock, &["acquisitions_per_s"]),
        ms(num(r, &["per_mode", "write", "wait", "p50_us"])),
        ms(num(r, &["per_mode", "write", "wait", "p99_us"])),
        ms(num(r, &["per_mode", "read", "wait", "p50_us"])),
        ms(num(r, &["per_mode", "read", "wait", "p99_us"])),
        ms(num(lock, &["wait", "p50_us"])),
        ms(num(lock, &["wait", "p99_us"])),
        num(r, &["max_concurrent_readers"]),
        num(r, &["redis_round_trips_per_acquisition"]),
        num(ratios, &["round_trips_per_acquisition"]),
        num(r, &["redis_commands_per_acquisition"]),
        num(r, &["redis_calls_inside_scripts_per_acquisition"]),
        num(ratios, &["commands_per_acquisition_with_script_calls"]),
        num(r, &["redis_server_us_per_acquisition"]),
        num(ratios, &["redis_server_us_per_acquisition"]),
        num(r, &["starved_loops"]),
        num(r, &["pending_at_stop", "write", "n"]),
        ms(num(r, &["pending_at_stop", "write", "max_us"])),
        num(r, &["violations", "total"]),
    )
}

fn overlap(a: &Rec, b: &Rec) -> bool {
    a.acquired < b.release_called && b.acquired < a.release_called
}

/// The violations a read-write lease must never show, by the holders'
/// own view of their holds (grant returned .. release called).
fn violations(recs: &[Rec]) -> J {
    let mut writers: Vec<&Rec> = recs.iter().filter(|r| r.mode == Mode::Write).collect();
    writers.sort_by_key(|r| r.acquired);
    let readers: Vec<&Rec> = recs.iter().filter(|r| r.mode == Mode::Read).collect();
    // A writer with another writer (each pair once) or with a reader.
    let writer_writer = writers
        .iter()
        .enumerate()
        .map(|(i, w)| writers[i + 1..].iter().filter(|o| overlap(w, o)).count())
        .sum::<usize>();
    let writer_reader = writers
        .iter()
        .map(|w| readers.iter().filter(|r| overlap(w, r)).count())
        .sum::<usize>();
    // Writer fences increase strictly in grant order.
    let fence_order = writers
        .windows(2)
        .filter(|pair| pair[1].fence <= pair[0].fence)
        .count();
    // A reader called after a writer's release returned has at least its
    // fence as epoch; a writer called after a reader's release returned
    // has a fence above that reader's epoch.
    let epoch = readers
        .iter()
        .map(|r| {
            writers
                .iter()
                .filter(|w| {
                    (w.released < r.called && r.fence < w.fence)
                        || (r.released < w.called && w.fence <= r.fence)
                })
                .count()
        })
        .sum::<usize>();
    J::obj([
        (
            "total",
            J::from(writer_writer + writer_reader + fence_order + epoch),
        ),
        ("writer_overlaps_writer", J::from(writer_writer)),
        ("writer_overlaps_reader", J::from(writer_reader)),
        ("writer_fence_not_increasing", J::from(fence_order)),
        ("reader_epoch_inconsistent", J::from(epoch)),
    ])
}

/// The most readers holding at once, by the holders' view.
fn max_concurrent_readers(recs: &[Rec]) -> i64 {
    let mut events: Vec<(u64, i8)> = recs
        .iter()
        .filter(|r| r.mode == Mode::Read)
        .flat_map(|r| [(r.acquired, 1), (r.release_called, -1)])
        .collect();
    events.sort();
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in events {
        now += i64::from(d);
        max = max.max(now);
    }
    max
}

fn analyse(front: Front, plan: &Plan, a: Raw) -> J {
    let window_s = a.window_us().max(1) as f64 / 1e6;
    let stop_us = a.stop_us;
    let in_window = |r: &Rec| r.acquired <= stop_us;
    let n = a.recs.len();
    let per_mode = |mode: Mode| {
        let recs: Vec<&Rec> = a.recs.iter().filter(|r| r.mode == mode).collect();
        let counted = recs.iter().filter(|r| in_window(r)).count();
        let hold: Vec<u64> = recs
            .iter()
            .map(|r| r.release_called.saturating_sub(r.acquired) * 1000)
            .collect();
        let release: Vec<u64> = recs
            .iter()
            .map(|r| r.released.saturating_sub(r.release_called) * 1000)
            .collect();
        J::obj([
            ("acquisitions", J::from(recs.len())),
            ("acquisitions_before_stop", J::from(counted)),
            ("acquisitions_per_s", J::round(counted as f64 / window_s, 1)),
            ("share", J::round(recs.len() as f64 / n.max(1) as f64, 3)),
            (
                "wait",
                util::summary_us(&contention::waits_ns(recs.iter().copied())),
            ),
            (
                "wait_p50_rtt",
                util::in_rtt(
                    util::p50(&contention::waits_ns(recs.iter().copied())),
                    a.rtt_p50,
                ),
            ),
            ("hold", util::summary_us(&hold)),
            ("release_call", util::summary_us(&release)),
        ])
    };
    let pending_of = |mode: Mode| {
        let waited: Vec<u64> = a
            .pending
            .iter()
            .filter(|p| p.mode == mode)
            .map(|p| p.cancelled.saturating_sub(p.called) * 1000)
            .collect();
        let mut j = util::summary_us(&waited);
        j.set(
            "loops",
            J::arr(
                a.pending
                    .iter()
                    .filter(|p| p.mode == mode)
                    .map(|p| J::from(format!("{}/{}", p.process, p.waiter))),
            ),
        );
        j
    };
    let mut per_loop: BTreeMap<(usize, usize), [u64; 2]> = BTreeMap::new();
    for p in 0..plan.processes {
        for w in 0..plan.waiters {
            per_loop.insert((p, w), [0, 0]);
        }
    }
    for r in &a.recs {
        let c = per_loop.entry((r.process, r.waiter)).or_default();
        c[usize::from(r.mode == Mode::Write)] += 1;
    }
    let totals: Vec<u64> = per_loop.values().map(|[r, w]| r + w).collect();
    let writes: Vec<u64> = per_loop.values().map(|[_, w]| *w).collect();
    let counted = a.recs.iter().filter(|r| in_window(r)).count();
    let mut fields = vec![
        ("front", J::from(front.name())),
        ("notifications", J::from(true)),
        ("processes", J::from(plan.processes)),
        ("loops_per_process", J::from(plan.waiters)),
        ("hold_us", J::from(plan.hold.as_micros() as u64)),
        (
            "write_every",
            J::from(match plan.kind {
                Kind::Rw { write_every } => u64::from(write_every),
                Kind::Lock | Kind::Semaphore(_) => 0,
            }),
        ),
        ("target_acquisitions", J::from(plan.total)),
        ("acquisitions", J::from(n)),
        ("acquisitions_counted_at_stop", J::from(a.counted_at_stop)),
        ("timed_out", J::from(a.timed_out)),
        ("window_s", J::round(window_s, 3)),
        ("acquisitions_per_s", J::round(counted as f64 / window_s, 1)),
        ("rtt", util::summary_us(&a.rtt)),
        ("rtt_after_2ms_idle", util::summary_us(&a.idle_rtt)),
        (
            "per_mode",
            J::obj([
                ("read", per_mode(Mode::Read)),
                ("write", per_mode(Mode::Write)),
            ]),
        ),
        (
            "pending_at_stop",
            J::obj([
                ("read", pending_of(Mode::Read)),
                ("write", pending_of(Mode::Write)),
            ]),
        ),
        (
            "max_concurrent_readers",
            J::from(max_concurrent_readers(&a.recs) as u64),
        ),
        (
            "starved_loops",
            J::from(totals.iter().filter(|&&c| c == 0).count()),
        ),
        (
            "loops_without_a_write",
            J::from(writes.iter().filter(|&&c| c == 0).count()),
        ),
        (
            "per_loop",
            J::obj([
                ("min", J::from(totals.iter().copied().min().unwrap_or(0))),
                ("max", J::from(totals.iter().copied().max().unwrap_or(0))),
                ("acquisitions", J::arr(totals.iter().copied().map(J::from))),
                ("writes", J::arr(writes.iter().copied().map(J::from))),
            ]),
        ),
        ("violations", violations(&a.recs)),
    ];
    fields.extend(contention::redis_per_acquisition(front, &a.commandstats, n));
    fields.push((
        "redis_cpu_us_per_acquisition",
        J::round(a.cpu.redis_s() * 1e6 / counted.max(1) as f64, 1),
    ));
    fields.push(("cpu_go_to_stop", a.cpu.to_json()));
    fields.extend(contention::locker_stats(&a.stats, n));
    fields.push((
        "errors",
        J::obj(a.errors.iter().map(|(k, v)| (k.as_str(), J::from(*v)))),
    ));
    J::obj(fields)
}

const COST_CYCLES: u64 = 200;

/// One kind of uncontended cycle, `COST_CYCLES` times on a blocking
/// locker: scripts and the calls inside them per cycle, by command.
fn cost_of(
    admin: &mut redis::Connection,
    mut cycle: impl FnMut() -> Result<(), redlease::Error>,
) -> BoxResult<J> {
    cycle()?; // creates the fence counter
    CommandStats::reset(admin)?;
    for _ in 0..COST_CYCLES {
        cycle()?;
    }
    let cs = CommandStats::read(admin)?;
    let per = |x: u64| J::round(x as f64 / COST_CYCLES as f64, 2);
    Ok(J::obj([
        ("cycles", J::from(COST_CYCLES)),
        ("scripts_per_cycle", per(cs.scripts())),
        ("calls_inside_scripts_per_cycle", per(cs.inside_scripts())),
        ("script_server_us_per_cycle", per(cs.script_usec())),
        ("redis_server_us_per_cycle", per(cs.total_usec())),
        (
            "by_command_per_cycle",
            J::obj(
                cs.0.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "info" | "ping") && !k.starts_with("config")
                    })
                    .map(|(k, (c, _, _))| (k.as_str(), per(*c))),
            ),
        ),
    ]))
}

fn script_costs(url: &str) -> BoxResult<J> {
    let mut admin = util::connect(url)?;
    let locker =
        redlease::blocking::Locker::connect(url, Config::new(util::fresh_namespace("rw-cost")))?;
    let rw = locker.rw_lock("cost")?;
    let read = cost_of(&mut admin, || rw.read().and_then(|r| r.release()).map(drop))?;
    let write = cost_of(&mut admin, || {
        rw.write().and_then(|w| w.release()).map(drop)
    })?;
    let lock = cost_of(&mut admin, || {
        locker
            .acquire("cost-lock")
            .and_then(|l| l.release())
            .map(drop)
    })?;
    locker.shutdown()?;
    Ok(J::obj([
        (
            "what",
            J::from("acquire + release, one blocking locker, no contention"),
        ),
        ("read", read),
        ("write", write),
        ("lock", lock),
    ]))
}

fn costs_headline(c: &J) -> String {
    let f = |kind: &str, what: &str| num(c, &[kind, what]);
    format!(
        "rw uncontended cycle: read {:.0} scripts, {:.0} calls inside ({:.0} µs server), write {:.0} \
         / {:.0} ({:.0} µs), lock {:.0} / {:.0} ({:.0} µs)",
        f("read", "scripts_per_cycle"),
        f("read", "calls_inside_scripts_per_cycle"),
        f("read", "script_server_us_per_cycle"),
        f("write", "scripts_per_cycle"),
        f("write", "calls_inside_scripts_per_cycle"),
        f("write", "script_server_us_per_cycle"),
        f("lock", "scripts_per_cycle"),
        f("lock", "calls_inside_scripts_per_cycle"),
        f("lock", "script_server_us_per_cycle"),
    )
}
