//! Uncontended cycle: one client, sequential acquire + release of one key.
//! Reports cycles/s, cycle latency, and the same run's PING round trip on
//! an identical connection, so a cycle can be read in round trips; and,
//! interleaved block by block on the same kind of connection, the unfenced
//! baseline (`SET NX PX` + compare-and-delete by `EVALSHA`), so every
//! figure can be read as a ratio to it (`ratio_to_baseline`).

use std::time::{Duration, Instant};

use redlease::{Config, Stats};

use super::json::J;
use super::util::{self, ns_since, Baseline, CommandStats, Cycles, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let cycles: usize = args.num("cycles", 20_000)?;
    let pings: usize = args.num("pings", 2_000)?;
    let blocks: usize = args.num("blocks", 10)?;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let r = one(front, &url, cycles, pings, blocks)?;
        eprintln!(
            "uncontended {:8}: {:.0} cycles/s, cycle p50 {:.1} µs = {:.2} RTT = {:.2}× baseline \
             ({:.1} µs, {:.0} cycles/s); {:.1} commands/cycle with script calls (baseline {:.0}), \
             Redis {:.1} µs/cycle = {:.2}× baseline ({:.1} µs; Redis CPU {:.1} vs {:.1} µs/cycle); \
             rtt p50 {:.1} µs",
            front.name(),
            num(&r, &["cycles_per_s"]),
            num(&r, &["cycle", "p50_us"]),
            num(&r, &["cycle_p50_rtt"]),
            num(&r, &["ratio_to_baseline", "cycle_p50"]),
            num(&r, &["baseline", "cycle", "p50_us"]),
            num(&r, &["baseline", "cycles_per_s"]),
            num(&r, &["redis_commands_with_script_calls_per_cycle"]),
            num(
                &r,
                &["baseline", "redis_commands_with_script_calls_per_cycle"]
            ),
            num(&r, &["redis_server_us_per_cycle"]),
            num(&r, &["ratio_to_baseline", "redis_server_us_per_cycle"]),
            num(&r, &["baseline", "redis_server_us_per_cycle"]),
            num(&r, &["redis_cpu_us_per_cycle"]),
            num(&r, &["baseline", "redis_cpu_us_per_cycle"]),
            num(&r, &["rtt", "p50_us"]),
        );
        out.push((front.name(), r));
    }
    let both = (
        out.iter().find(|(f, _)| *f == "blocking"),
        out.iter().find(|(f, _)| *f == "async"),
    );
    if let (Some((_, b)), Some((_, a))) = both {
        let ratios = async_to_blocking(b, a);
        eprintln!(
            "uncontended async/blocking: cycle p50 {:.2}× (baseline {:.2}×), cycles/s {:.2}× \
             (baseline {:.2}×)",
            num(&ratios, &["cycle_p50"]),
            num(&ratios, &["baseline_cycle_p50"]),
            num(&ratios, &["cycles_per_s"]),
            num(&ratios, &["baseline_cycles_per_s"]),
        );
        out.push(("async_to_blocking", ratios));
    }
    Ok(J::obj(out))
}

const IDLE_SAMPLES: usize = 200;
const IDLE: Duration = util::IDLE_PAUSE;

#[derive(Default)]
struct Idle {
    acquire: Vec<u64>,
    release: Vec<u64>,
}

/// What one front end's interleaved run measured.
struct Run {
    ours: Cycles,
    stats: CommandStats,
    idle: Idle,
    base: Cycles,
    base_stats: CommandStats,
    base_idle: Idle,
    /// Redis's CPU (`INFO cpu`) over the timed blocks, s.
    redis_cpu_s: f64,
    base_redis_cpu_s: f64,
    /// This process's context switches and CPU ns over the timed blocks
    /// (`util::process_counters`): the client's side, which varies with
    /// the machine's load far less than latency does.
    client: (u64, u64),
    base_client: (u64, u64),
}

fn add_since(total: &mut (u64, u64), since: (u64, u64)) {
    let now = util::process_counters();
    total.0 += now.0.saturating_sub(since.0);
    total.1 += now.1.saturating_sub(since.1);
}

impl Run {
    fn new(cycles: usize) -> Run {
        Run {
            ours: Cycles::with_capacity(cycles),
            stats: CommandStats::default(),
            idle: Idle::default(),
            base: Cycles::with_capacity(cycles),
            base_stats: CommandStats::default(),
            base_idle: Idle::default(),
            redis_cpu_s: 0.0,
            base_redis_cpu_s: 0.0,
            client: (0, 0),
            base_client: (0, 0),
        }
    }
}

/// `cycles` split into `blocks` nearly equal parts.
fn block_sizes(cycles: usize, blocks: usize) -> Vec<usize> {
    let blocks = blocks.clamp(1, cycles.max(1));
    (0..blocks)
        .map(|b| cycles * (b + 1) / blocks - cycles * b / blocks)
        .collect()
}

fn one(front: Front, url: &str, cycles: usize, pings: usize, blocks: usize) -> BoxResult<J> {
    let mut admin = util::connect(url)?;
    let ns = util::fresh_namespace("uncontended");
    let key = "uncontended";
    let mut rtt = util::ping(front, url, pings)?;
    let warmup = (cycles / 20).max(100);
    // The unfenced baseline on a connection of the same kind, interleaved
    // with the locker's cycles block by block (and sample by sample after
    // idle), so that both see the same machine.
    let mut base = util::BaselineCycle::new(&mut admin, &format!("{ns}:baseline"))?;
    let sizes = block_sizes(cycles, blocks);
    let mut run = Run::new(cycles);
    let (before, after) = match front {
        Front::Blocking => {
            let locker = redlease::blocking::Locker::connect(url, Config::new(&ns))?;
            let mut conn = util::connect(url)?;
            for _ in 0..warmup {
                locker.acquire(key)?.release()?;
                base.blocking(&mut conn, Duration::ZERO)?;
            }
            let before = locker.stats();
            for &n in &sizes {
                CommandStats::reset(&mut admin)?;
                let cpu = util::CpuSample::take(&mut admin, &[]);
                let (start, counters) = (Instant::now(), util::process_counters());
                for _ in 0..n {
                    let (a, c) = base.blocking(&mut conn, Duration::ZERO)?;
                    run.base.push(a, c);
                }
                run.base.elapsed += start.elapsed();
                add_since(&mut run.base_client, counters);
                run.base_redis_cpu_s +=
                    cpu.until(&util::CpuSample::take(&mut admin, &[])).redis_s();
                run.base_stats.add(&CommandStats::read(&mut admin)?);
                CommandStats::reset(&mut admin)?;
                let cpu = util::CpuSample::take(&mut admin, &[]);
                let (start, counters) = (Instant::now(), util::process_counters());
                for _ in 0..n {
                    let t = Instant::now();
                    let lease = locker.acquire(key)?;
                    let a = ns_since(t);
                    lease.release()?;
                    run.ours.push(a, ns_since(t));
                }
                run.ours.elapsed += start.elapsed();
                add_since(&mut run.client, counters);
                run.redis_cpu_s += cpu.until(&util::CpuSample::take(&mut admin, &[])).redis_s();
                run.stats.add(&CommandStats::read(&mut admin)?);
            }
            let after = locker.stats();
            for _ in 0..IDLE_SAMPLES {
                util::sleep(IDLE);
                let t = Instant::now();
                let lease = locker.acquire(key)?;
                run.idle.acquire.push(ns_since(t));
                util::sleep(IDLE);
                let t = Instant::now();
                lease.release()?;
                run.idle.release.push(ns_since(t));
                let (a, c) = base.blocking(&mut conn, IDLE)?;
                run.base_idle.acquire.push(a);
                run.base_idle.release.push(c - a);
            }
            locker.shutdown()?;
            (before, after)
        }
        Front::Async => {
            let client = util::resp3_client(url)?;
            smol::block_on(async {
                let locker = redlease::aio::Locker::connect(url, Config::new(&ns)).await?;
                let mut conn = util::multiplexed(&client).await?;
                for _ in 0..warmup {
                    locker.acquire(key).await?.release().await?;
                    base.run_async(&mut conn, Duration::ZERO).await?;
                }
                let before = locker.stats();
                for &n in &sizes {
                    CommandStats::reset(&mut admin)?;
                    let cpu = util::CpuSample::take(&mut admin, &[]);
                    let (start, counters) = (Instant::now(), util::process_counters());
                    for _ in 0..n {
                        let (a, c) = base.run_async(&mut conn, Duration::ZERO).await?;
                        run.base.push(a, c);
                    }
                    run.base.elapsed += start.elapsed();
                    add_since(&mut run.base_client, counters);
                    run.base_redis_cpu_s +=
                        cpu.until(&util::CpuSample::take(&mut admin, &[])).redis_s();
                    run.base_stats.add(&CommandStats::read(&mut admin)?);
                    CommandStats::reset(&mut admin)?;
                    let cpu = util::CpuSample::take(&mut admin, &[]);
                    let (start, counters) = (Instant::now(), util::process_counters());
                    for _ in 0..n {
                        let t = Instant::now();
                        let lease = locker.acquire(key).await?;
                        let a = ns_since(t);
                        lease.release().await?;
                        run.ours.push(a, ns_since(t));
                    }
                    run.ours.elapsed += start.elapsed();
                    add_since(&mut run.client, counters);
                    run.redis_cpu_s += cpu.until(&util::CpuSample::take(&mut admin, &[])).redis_s();
                    run.stats.add(&CommandStats::read(&mut admin)?);
                }
                let after = locker.stats();
                for _ in 0..IDLE_SAMPLES {
                    async_io::Timer::after(IDLE).await;
                    let t = Instant::now();
                    let lease = locker.acquire(key).await?;
                    run.idle.acquire.push(ns_since(t));
                    async_io::Timer::after(IDLE).await;
                    let t = Instant::now();
                    lease.release().await?;
                    run.idle.release.push(ns_since(t));
                    let (a, c) = base.run_async(&mut conn, IDLE).await?;
                    run.base_idle.acquire.push(a);
                    run.base_idle.release.push(c - a);
                }
                locker.shutdown().await?;
                Ok::<_, Box<dyn std::error::Error>>((before, after))
            })?
        }
    };
    let Run {
        ours: samples,
        stats,
        idle,
        base: base_timed,
        base_stats,
        base_idle,
        redis_cpu_s,
        base_redis_cpu_s,
        client,
        base_client,
    } = run;
    let baseline = Baseline {
        warmup,
        timed: base_timed,
        stats: base_stats,
        idle: Some((base_idle.acquire, base_idle.release)),
        redis_cpu_s: base_redis_cpu_s,
    };
    rtt.extend(util::ping(front, url, pings)?);
    let idle_rtt = util::ping_after_idle(front, url, IDLE_SAMPLES, IDLE)?;
    let idle_rtt_p50 = util::p50(&idle_rtt);
    let rtt_p50 = util::p50(&rtt);
    let n = samples.cycle.len() as f64;
    let per = |x: u64| J::round(x as f64 / n, 3);
    let plain = util::plain_rtt_fields(front, url, "cycle_p50", util::p50(&samples.cycle))?;
    let mut j = J::obj([
        ("cycles", J::from(samples.cycle.len())),
        ("warmup_cycles", J::from(warmup)),
        ("blocks_interleaved_with_baseline", J::from(sizes.len())),
        (
            "cycles_per_s",
            J::round(n / samples.elapsed.as_secs_f64(), 0),
        ),
        ("cycle", util::summary_us(&samples.cycle)),
        ("acquire", util::summary_us(&samples.acquire)),
        ("release", util::summary_us(&samples.release)),
        ("rtt", util::summary_us(&rtt)),
        ("rtt_connection", J::from(rtt_connection(front))),
        (
            "cycle_p50_rtt",
            util::in_rtt(util::p50(&samples.cycle), rtt_p50),
        ),
        (
            "cycle_p99_rtt",
            util::in_rtt(util::p99(&samples.cycle), rtt_p50),
        ),
        (
            "acquire_p50_rtt",
            util::in_rtt(util::p50(&samples.acquire), rtt_p50),
        ),
        (
            "release_p50_rtt",
            util::in_rtt(util::p50(&samples.release), rtt_p50),
        ),
        (
            "after_2ms_idle",
            J::obj([
                (
                    "note",
                    J::from("each command sent after 2 ms without traffic, as after a hold"),
                ),
                ("rtt", util::summary_us(&idle_rtt)),
                ("acquire", util::summary_us(&idle.acquire)),
                ("release", util::summary_us(&idle.release)),
                (
                    "acquire_p50_rtt",
                    util::in_rtt(util::p50(&idle.acquire), idle_rtt_p50),
                ),
                (
                    "release_p50_rtt",
                    util::in_rtt(util::p50(&idle.release), idle_rtt_p50),
                ),
            ]),
        ),
        ("redis_commands_per_cycle", per(stats.total())),
        ("redis_scripts_per_cycle", per(stats.scripts())),
        (
            "redis_script_server_us_per_cycle",
            J::round(stats.script_usec() as f64 / n, 2),
        ),
        (
            "redis_calls_inside_scripts_per_cycle",
            per(stats.inside_scripts()),
        ),
        (
            "redis_round_trips_per_cycle",
            per(stats.total() - pipelined_pings(front, &stats)),
        ),
        (
            "redis_commands_with_script_calls_per_cycle",
            per(with_script_calls(front, &stats)),
        ),
        ("redis_pings_per_cycle", per(pipelined_pings(front, &stats))),
        (
            "redis_server_us_per_cycle",
            J::round(stats.total_usec() as f64 / n, 2),
        ),
        (
            "redis_server_us_pings_per_cycle",
            J::round(stats.usec("ping") as f64 / n, 2),
        ),
        ("redis_cpu_us_per_cycle", J::round(redis_cpu_s * 1e6 / n, 2)),
        ("commandstats", stats.to_json()),
        ("locker_stats_delta", stats_delta(&before, &after)),
    ]);
    j.extend(plain);
    let base_n = baseline.timed.cycle.len() as f64;
    let client_fields = |(switches, cpu_ns): (u64, u64), n: f64| {
        vec![
            (
                "client_context_switches_per_cycle".to_owned(),
                J::round(switches as f64 / n, 2),
            ),
            (
                "client_cpu_us_per_cycle".to_owned(),
                J::round(cpu_ns as f64 / n / 1000.0, 2),
            ),
        ]
    };
    j.extend(client_fields(client, n));
    let mut ratios = ratio_to_baseline(&j, &baseline, rtt_p50);
    let mut base_json = baseline.to_json(rtt_p50);
    base_json.extend(client_fields(base_client, base_n));
    for field in [
        "client_context_switches_per_cycle",
        "client_cpu_us_per_cycle",
    ] {
        let ratio = num(&j, &[field]) / num(&base_json, &[field]);
        ratios.set(field, J::round(ratio, 3));
    }
    j.set("baseline", base_json);
    j.set("ratio_to_baseline", ratios);
    Ok(j)
}

/// Commands Redis executes per cycle or acquisition, the `redis.call`s
/// inside scripts included, the blocking front end's PINGs not.
pub(crate) fn with_script_calls(front: Front, stats: &CommandStats) -> u64 {
    (stats.total() + stats.inside_scripts()).saturating_sub(pipelined_pings(front, stats))
}

/// A number at `path` in `j`, NaN if there is none.
pub(crate) fn num(j: &J, path: &[&str]) -> f64 {
    let mut v = j;
    for p in path {
        match v.get(p) {
            Some(x) => v = x,
            None => return f64::NAN,
        }
    }
    v.as_f64().unwrap_or(f64::NAN)
}

/// Every figure of the redlease cycle over the same figure of the
/// baseline (above 1: redlease costs more; for cycles/s, below 1: fewer).
fn ratio_to_baseline(j: &J, b: &Baseline, rtt_p50: u64) -> J {
    let base = b.to_json(rtt_p50);
    let r = |path: &[&str]| J::round(num(j, path) / num(&base, path), 3);
    let pairs: [(&str, &[&str]); 17] = [
        ("cycle_p50", &["cycle", "p50_us"]),
        ("cycle_p90", &["cycle", "p90_us"]),
        ("cycle_p99", &["cycle", "p99_us"]),
        ("cycle_mean", &["cycle", "mean_us"]),
        ("acquire_p50", &["acquire", "p50_us"]),
        ("acquire_p99", &["acquire", "p99_us"]),
        ("release_p50", &["release", "p50_us"]),
        ("release_p99", &["release", "p99_us"]),
        ("cycles_per_s", &["cycles_per_s"]),
        (
            "redis_commands_with_script_calls_per_cycle",
            &["redis_commands_with_script_calls_per_cycle"],
        ),
        (
            "redis_round_trips_per_cycle",
            &["redis_round_trips_per_cycle"],
        ),
        ("redis_server_us_per_cycle", &["redis_server_us_per_cycle"]),
        ("redis_cpu_us_per_cycle", &["redis_cpu_us_per_cycle"]),
        (
            "after_2ms_idle_acquire_p50",
            &["after_2ms_idle", "acquire", "p50_us"],
        ),
        (
            "after_2ms_idle_acquire_p99",
            &["after_2ms_idle", "acquire", "p99_us"],
        ),
        (
            "after_2ms_idle_release_p50",
            &["after_2ms_idle", "release", "p50_us"],
        ),
        (
            "after_2ms_idle_release_p99",
            &["after_2ms_idle", "release", "p99_us"],
        ),
    ];
    J::obj(pairs.iter().map(|(name, path)| (*name, r(path))))
}

/// The async front end's figures over the blocking one's, for the
/// redlease cycle and for the baseline, when both ran.
fn async_to_blocking(blocking: &J, asynch: &J) -> J {
    let r = |path: &[&str]| J::round(num(asynch, path) / num(blocking, path), 3);
    J::obj([
        ("cycle_p50", r(&["cycle", "p50_us"])),
        ("cycle_p99", r(&["cycle", "p99_us"])),
        ("cycles_per_s", r(&["cycles_per_s"])),
        (
            "redis_server_us_per_cycle",
            r(&["redis_server_us_per_cycle"]),
        ),
        ("baseline_cycle_p50", r(&["baseline", "cycle", "p50_us"])),
        ("baseline_cycle_p99", r(&["baseline", "cycle", "p99_us"])),
        ("baseline_cycles_per_s", r(&["baseline", "cycles_per_s"])),
        ("rtt_p50", r(&["rtt", "p50_us"])),
        ("client_cpu_us_per_cycle", r(&["client_cpu_us_per_cycle"])),
        (
            "client_context_switches_per_cycle",
            r(&["client_context_switches_per_cycle"]),
        ),
    ])
}

pub(crate) fn rtt_connection(front: Front) -> &'static str {
    match front {
        Front::Blocking => "redis::Connection (RESP2): one write and one read per request, as the blocking locker's own",
        Front::Async => "redis MultiplexedConnection over RESP3 (smol), as the async locker's",
    }
}

/// The blocking front end writes a `PING` in front of every command it sends
/// on a reused redis crate connection (TLS, or a build without `aio`; in
/// the same write, one round trip), to tell a connection the server closed
/// from a command that failed; over plain TCP and unix sockets its own
/// connection sees a close without one (src/driver/wire.rs). Those PINGs
/// are commands, not round trips.
pub(crate) fn pipelined_pings(front: Front, stats: &CommandStats) -> u64 {
    match front {
        Front::Blocking => stats.calls("ping"),
        Front::Async => 0,
    }
}

pub(crate) fn stats_delta(before: &Stats, after: &Stats) -> J {
    J::obj([
        ("acquires", J::from(after.acquires - before.acquires)),
        (
            "busy_replies",
            J::from(after.busy_replies - before.busy_replies),
        ),
        (
            "wait_timeouts",
            J::from(after.wait_timeouts - before.wait_timeouts),
        ),
        (
            "notifications",
            J::from(after.notifications - before.notifications),
        ),
        (
            "safety_polls",
            J::from(after.safety_polls - before.safety_polls),
        ),
        (
            "scripts_sent",
            J::from(after.scripts_sent - before.scripts_sent),
        ),
        (
            "noscript_reloads",
            J::from(after.noscript_reloads - before.noscript_reloads),
        ),
        ("subscribed_at_end", J::from(after.subscribed)),
    ])
}
