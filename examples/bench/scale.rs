//! Scale: how the cost grows with load, on the `contention` machinery
//! (worker processes re-executing this binary as `contention-worker`).
//!
//! - **distinct keys**: P processes (1, 2, 4, 8) × 16 waiter loops (threads
//!   of one blocking `Locker`, or futures of one async `Locker` joined on
//!   `smol::block_on`), each loop acquiring and releasing a key of its own
//!   without a hold, for a fixed time (`--duration-s`, 3 s). Acquisitions/s,
//!   Redis's work per acquisition, and the CPU Redis and the workers used
//!   in the window: which saturates first.
//! - **one key**: 4 processes × W waiters (1, 8, 32, 128) on one key, hold
//!   2 ms, `--total` grants (400): round trips, commands and Redis server
//!   time per acquisition and the hand-over to another waiter. By design
//!   these depend on the number of processes, not of waiters: a locker
//!   sends one attempt per release notification, whatever waits behind it.
//!
//! Both parts print their rows as a table (`columns`, then one array per
//! row) so that a column reads down; each row's full figures follow in
//! `details`. `--quick` shrinks everything for a smoke test.

use std::time::Duration;

use super::contention::{self, Kind, Plan};
use super::json::J;
use super::uncontended::num;
use super::util::{self, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let quick = args.get("quick").is_some_and(|v| v != "0");
    let part = args.get("part").unwrap_or("both");
    if !matches!(part, "both" | "distinct" | "one-key") {
        return Err(format!("--part: distinct, one-key or both, not {part:?}").into());
    }
    let fronts = args.fronts()?;
    let mut out = Vec::new();
    if part != "one-key" {
        let plan = DistinctPlan {
            processes: list(
                args,
                "processes-list",
                if quick { "1,2" } else { "1,2,4,8" },
            )?,
            loops: args.num("loops", 16)?,
            duration: Duration::from_secs_f64(
                args.num("duration-s", if quick { 1.0 } else { 3.0 })?,
            ),
        };
        out.push(("distinct_keys", distinct_keys(&url, &fronts, &plan)?));
    }
    if part != "distinct" {
        let plan = OneKeyPlan {
            processes: args.num("processes", 4)?,
            waiters: list(
                args,
                "waiters-list",
                if quick { "1,8" } else { "1,8,32,128" },
            )?,
            total: args.num("total", if quick { 100 } else { 400 })?,
            hold: Duration::from_micros(args.num("hold-us", 2_000)?),
            budget: Duration::from_secs(args.num("budget-s", 60)?),
            handover: args.get("handover").unwrap_or("on") != "off",
        };
        out.push(("one_key", one_key(&url, &fronts, &plan)?));
    }
    Ok(J::obj(out))
}

/// `--name 1,2,4` as numbers.
fn list(args: &Args, name: &str, default: &str) -> BoxResult<Vec<usize>> {
    args.get(name)
        .unwrap_or(default)
        .split(',')
        .map(|v| {
            v.trim()
                .parse()
                .map_err(|_| format!("--{name}: not a list of numbers: {v:?}").into())
        })
        .collect()
}

struct DistinctPlan {
    processes: Vec<usize>,
    loops: usize,
    duration: Duration,
}

const DISTINCT_COLUMNS: [&str; 17] = [
    "front",
    "processes",
    "loops_per_process",
    "acquisitions",
    "acquisitions_per_s",
    "acquisitions_per_s_per_process",
    "redis_server_us_per_acquisition",
    "redis_commands_with_script_calls_per_acquisition",
    "redis_round_trips_per_acquisition",
    "redis_cpu_cores",
    "redis_main_thread_cores",
    "clients_cpu_cores",
    "machine_busy_cores",
    "redis_cpu_us_per_acquisition",
    "clients_cpu_us_per_acquisition",
    "limited_by",
    "loadavg_after",
];

fn distinct_keys(url: &str, fronts: &[Front], plan: &DistinctPlan) -> BoxResult<J> {
    let mut rows = Vec::new();
    let mut details = Vec::new();
    for &front in fronts {
        for &processes in &plan.processes {
            let mut p = Plan::new(
                Kind::Lock,
                processes,
                plan.loops,
                usize::MAX,
                Duration::ZERO,
                plan.duration + Duration::from_secs(60),
            );
            p.distinct_keys = true;
            p.duration = Some(plan.duration);
            let raw = contention::gather(front, url, true, &p)?;
            let n: u64 = raw.counts.values().sum();
            let window_s = raw.window_us().max(1) as f64 / 1e6;
            let per_s = n as f64 / window_s;
            let cpu = raw.cpu;
            let cpu_us_per_acq = |cores: f64| J::round(cores * cpu.wall_s * 1e6 / n as f64, 1);
            let redis = contention::redis_per_acquisition(front, &raw.commandstats, n as usize);
            let redis = J::obj(redis);
            let row = J::obj([
                ("front", J::from(front.name())),
                ("processes", J::from(processes)),
                ("loops_per_process", J::from(plan.loops)),
                ("acquisitions", J::from(n)),
                ("acquisitions_per_s", J::round(per_s, 0)),
                (
                    "acquisitions_per_s_per_process",
                    J::round(per_s / processes as f64, 0),
                ),
                (
                    "redis_server_us_per_acquisition",
                    J::from(num(&redis, &["redis_server_us_per_acquisition"])),
                ),
                (
                    "redis_commands_with_script_calls_per_acquisition",
                    J::from(num(
                        &redis,
                        &["redis_commands_with_script_calls_per_acquisition"],
                    )),
                ),
                (
                    "redis_round_trips_per_acquisition",
                    J::from(num(&redis, &["redis_round_trips_per_acquisition"])),
                ),
                ("redis_cpu_cores", J::round(cpu.redis_cores, 3)),
                (
                    "redis_main_thread_cores",
                    J::round(cpu.redis_main_thread_cores, 3),
                ),
                ("clients_cpu_cores", J::round(cpu.processes_cores, 3)),
                ("machine_busy_cores", J::round(cpu.machine_busy_cores, 3)),
                (
                    "redis_cpu_us_per_acquisition",
                    cpu_us_per_acq(cpu.redis_cores),
                ),
                (
                    "clients_cpu_us_per_acquisition",
                    cpu_us_per_acq(cpu.processes_cores),
                ),
                ("limited_by", J::from(cpu.limited_by())),
                ("loadavg_after", J::from(util::loadavg())),
            ]);
            eprintln!(
                "scale distinct keys {:8} {processes} × {}: {per_s:.0} acq/s, Redis {:.1} µs/acq \
                 ({:.1} commands with script calls), Redis CPU {:.2} cores (main thread {:.2}), \
                 clients {:.2} cores, machine {:.2} busy cores: {}; load {}",
                front.name(),
                plan.loops,
                num(&row, &["redis_server_us_per_acquisition"]),
                num(&row, &["redis_commands_with_script_calls_per_acquisition"]),
                cpu.redis_cores,
                cpu.redis_main_thread_cores,
                cpu.processes_cores,
                cpu.machine_busy_cores,
                cpu.limited_by(),
                util::loadavg(),
            );
            let per_loop: Vec<u64> = raw.counts.values().copied().collect();
            let mut detail = row.clone();
            detail.extend(
                [
                    (
                        "note".to_owned(),
                        J::from(
                            "acquisitions = grants counted by the workers, including the last \
                             cycle each loop finished after STOP; per second over GO..STOP",
                        ),
                    ),
                    ("window_s".to_owned(), J::round(window_s, 3)),
                    ("rtt".to_owned(), util::summary_us(&raw.rtt)),
                    ("cpu".to_owned(), cpu.to_json()),
                    (
                        "per_loop_min".to_owned(),
                        J::from(per_loop.iter().copied().min().unwrap_or(0)),
                    ),
                    (
                        "per_loop_max".to_owned(),
                        J::from(per_loop.iter().copied().max().unwrap_or(0)),
                    ),
                    (
                        "errors".to_owned(),
                        J::obj(raw.errors.iter().map(|(k, v)| (k.as_str(), J::from(*v)))),
                    ),
                ]
                .into(),
            );
            detail.extend(
                contention::locker_stats(&raw.stats, n as usize)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
            );
            if let J::Obj(fields) = redis {
                detail.extend(fields);
            }
            rows.push(row);
            details.push(detail);
        }
    }
    Ok(J::obj([
        (
            "what",
            J::from(
                "P processes × loops acquiring and releasing keys of their own, no hold, for \
                 duration_s; CPU in cores = CPU s / wall s over GO..STOP (Redis: INFO cpu; \
                 clients: /proc/<pid>/stat of the workers)",
            ),
        ),
        ("duration_s", J::round(plan.duration.as_secs_f64(), 3)),
        ("table", table(&DISTINCT_COLUMNS, &rows)),
        ("details", J::arr(details)),
    ]))
}

struct OneKeyPlan {
    processes: usize,
    waiters: Vec<usize>,
    total: usize,
    hold: Duration,
    budget: Duration,
    /// The workers' `Config::handover` (`--handover on|off`, default on).
    handover: bool,
}

const ONE_KEY_COLUMNS: [&str; 21] = [
    "front",
    "processes",
    "waiters_per_process",
    "acquisitions",
    "acquisitions_per_s",
    "redis_round_trips_per_acquisition",
    "redis_scripts_per_acquisition",
    "redis_commands_with_script_calls_per_acquisition",
    "redis_pings_per_acquisition",
    "redis_server_us_per_acquisition",
    "redis_cpu_us_per_acquisition",
    "busy_replies_per_acquisition",
    "notifications_per_acquisition",
    "handover_other_waiter_p50_us",
    "handover_other_waiter_p99_us",
    "handover_other_waiter_p50_rtt",
    "handover_other_waiter_p50_in_rtt_after_idle",
    "releaser_process_retake_rate",
    "starved_waiters",
    "mutual_exclusion_violations",
    "loadavg_after",
];

/// The one-key column of a `contention::analyse` result.
fn one_key_path(column: &str) -> Vec<&str> {
    match column {
        "busy_replies_per_acquisition" => vec!["locker_stats_per_acquisition", "busy_replies"],
        "notifications_per_acquisition" => vec!["locker_stats_per_acquisition", "notifications"],
        "handover_other_waiter_p50_us" => vec!["handover_other_waiter", "p50_us"],
        "handover_other_waiter_p99_us" => vec!["handover_other_waiter", "p99_us"],
        "starved_waiters" => vec!["fairness", "starved_waiters"],
        other => vec![other],
    }
}

fn one_key(url: &str, fronts: &[Front], plan: &OneKeyPlan) -> BoxResult<J> {
    let mut rows = Vec::new();
    let mut details = Vec::new();
    let mut spread = Vec::new();
    for &front in fronts {
        let first_row = rows.len();
        for &waiters in &plan.waiters {
            let mut p = Plan::new(
                Kind::Lock,
                plan.processes,
                waiters,
                plan.total,
                plan.hold,
                plan.budget,
            );
            p.handover = plan.handover;
            let raw = contention::gather(front, url, true, &p)?;
            let mut j = contention::analyse(front, true, &p, raw);
            let row = J::obj(ONE_KEY_COLUMNS.iter().map(|&c| {
                let v = match c {
                    "front" => J::from(front.name()),
                    "loadavg_after" => J::from(util::loadavg()),
                    _ => J::from(num(&j, &one_key_path(c))),
                };
                (c, v)
            }));
            eprintln!(
                "scale one key {:8} {} × {waiters:3}: {:.0} acq/s, {:.2} round trips/acq, {:.1} \
                 commands with script calls/acq, Redis {:.1} µs/acq, hand-over to another waiter \
                 p50 {:.0} µs p99 {:.0} µs, starved {:.0}, violations {:.0}; load {}",
                front.name(),
                plan.processes,
                num(&row, &["acquisitions_per_s"]),
                num(&row, &["redis_round_trips_per_acquisition"]),
                num(&row, &["redis_commands_with_script_calls_per_acquisition"]),
                num(&row, &["redis_server_us_per_acquisition"]),
                num(&row, &["handover_other_waiter_p50_us"]),
                num(&row, &["handover_other_waiter_p99_us"]),
                num(&row, &["starved_waiters"]),
                num(&row, &["mutual_exclusion_violations"]),
                util::loadavg(),
            );
            // The per-waiter arrays of 512 waiters say little here.
            if let Some(J::Obj(fairness)) = j.get("fairness").cloned() {
                let keep = fairness
                    .into_iter()
                    .filter(|(k, _)| k != "per_waiter")
                    .collect();
                j.set("fairness", J::Obj(keep));
            }
            rows.push(row);
            details.push(j);
        }
        spread.push((front.name(), spread_of(&rows[first_row..])));
    }
    Ok(J::obj([
        (
            "what",
            J::from(
                "processes × waiters on one key, hold_us, target_acquisitions grants, \
                 notifications on; analysed as the contention scenario",
            ),
        ),
        ("processes", J::from(plan.processes)),
        ("hold_us", J::from(plan.hold.as_micros() as u64)),
        ("target_acquisitions", J::from(plan.total)),
        ("table", table(&ONE_KEY_COLUMNS, &rows)),
        ("max_over_min_across_waiters", J::obj(spread)),
        ("details", J::arr(details)),
    ]))
}

/// Max / min over the rows of one front end, for the figures that should
/// not grow with the waiters.
fn spread_of(rows: &[J]) -> J {
    let figures = [
        "redis_round_trips_per_acquisition",
        "redis_commands_with_script_calls_per_acquisition",
        "redis_server_us_per_acquisition",
        "handover_other_waiter_p50_us",
        "handover_other_waiter_p99_us",
    ];
    J::obj(figures.iter().map(|&f| {
        let values: Vec<f64> = rows
            .iter()
            .map(|r| num(r, &[f]))
            .filter(|v| v.is_finite())
            .collect();
        let max = values.iter().copied().fold(f64::NAN, f64::max);
        let min = values.iter().copied().fold(f64::NAN, f64::min);
        (f, J::round(max / min, 2))
    }))
}

/// Rows as a table: the column names once, then one array per row (each
/// printed on one line).
fn table(columns: &[&str], rows: &[J]) -> J {
    J::obj([
        ("columns", J::arr(columns.iter().map(|&c| J::from(c)))),
        (
            "rows",
            J::arr(
                rows.iter()
                    .map(|r| J::arr(columns.iter().map(|c| r.get(c).cloned().unwrap_or(J::Null)))),
            ),
        ),
    ])
}
