//! Uncontended cycle: one client, sequential acquire + release of one key.
//! Reports cycles/s, cycle latency, and the same run's PING round trip on
//! an identical connection, so a cycle can be read in round trips.

use std::time::{Duration, Instant};

use redlease::{Config, Stats};

use super::json::J;
use super::util::{self, ns_since, CommandStats, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let cycles: usize = args.num("cycles", 20_000)?;
    let pings: usize = args.num("pings", 2_000)?;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let r = one(front, &url, cycles, pings)?;
        eprintln!(
            "uncontended {:8}: {:>8} cycles/s, cycle p50 {} µs = {} RTT (rtt p50 {} µs)",
            front.name(),
            r.get("cycles_per_s").and_then(J::as_f64).unwrap_or(0.0),
            r.get("cycle")
                .and_then(|c| c.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(0.0),
            r.get("cycle_p50_rtt").and_then(J::as_f64).unwrap_or(0.0),
            r.get("rtt")
                .and_then(|c| c.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(0.0),
        );
        out.push((front.name(), r));
    }
    Ok(J::obj(out))
}

const IDLE_SAMPLES: usize = 200;
const IDLE: Duration = Duration::from_millis(2);

#[derive(Default)]
struct Idle {
    acquire: Vec<u64>,
    release: Vec<u64>,
}

struct Samples {
    cycle: Vec<u64>,
    acquire: Vec<u64>,
    release: Vec<u64>,
    elapsed: Duration,
}

fn one(front: Front, url: &str, cycles: usize, pings: usize) -> BoxResult<J> {
    let mut admin = util::connect(url)?;
    let ns = util::fresh_namespace("uncontended");
    let key = "uncontended";
    let mut rtt = util::ping(front, url, pings)?;
    let warmup = (cycles / 20).max(100);
    let (samples, before, after, stats, idle) = match front {
        Front::Blocking => {
            let locker = redlease::blocking::Locker::connect(url, Config::new(&ns))?;
            for _ in 0..warmup {
                locker.acquire(key)?.release()?;
            }
            CommandStats::reset(&mut admin)?;
            let before = locker.stats();
            let samples = measure(cycles, || {
                let t = Instant::now();
                let lease = locker.acquire(key)?;
                let a = ns_since(t);
                lease.release()?;
                Ok((a, ns_since(t)))
            })?;
            let after = locker.stats();
            let stats = CommandStats::read(&mut admin)?;
            let mut idle = Idle::default();
            for _ in 0..IDLE_SAMPLES {
                util::sleep(IDLE);
                let t = Instant::now();
                let lease = locker.acquire(key)?;
                idle.acquire.push(ns_since(t));
                util::sleep(IDLE);
                let t = Instant::now();
                lease.release()?;
                idle.release.push(ns_since(t));
            }
            locker.shutdown()?;
            (samples, before, after, stats, idle)
        }
        Front::Async => smol::block_on(async {
            let locker = redlease::aio::Locker::connect(url, Config::new(&ns)).await?;
            for _ in 0..warmup {
                locker.acquire(key).await?.release().await?;
            }
            CommandStats::reset(&mut admin)?;
            let before = locker.stats();
            let mut s = Samples {
                cycle: Vec::with_capacity(cycles),
                acquire: Vec::with_capacity(cycles),
                release: Vec::with_capacity(cycles),
                elapsed: Duration::ZERO,
            };
            let start = Instant::now();
            for _ in 0..cycles {
                let t = Instant::now();
                let lease = locker.acquire(key).await?;
                let a = ns_since(t);
                lease.release().await?;
                let c = ns_since(t);
                s.cycle.push(c);
                s.acquire.push(a);
                s.release.push(c - a);
            }
            s.elapsed = start.elapsed();
            let after = locker.stats();
            let stats = CommandStats::read(&mut admin)?;
            let mut idle = Idle::default();
            for _ in 0..IDLE_SAMPLES {
                async_io::Timer::after(IDLE).await;
                let t = Instant::now();
                let lease = locker.acquire(key).await?;
                idle.acquire.push(ns_since(t));
                async_io::Timer::after(IDLE).await;
                let t = Instant::now();
                lease.release().await?;
                idle.release.push(ns_since(t));
            }
            locker.shutdown().await?;
            Ok::<_, Box<dyn std::error::Error>>((s, before, after, stats, idle))
        })?,
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
        ("commandstats", stats.to_json()),
        ("locker_stats_delta", stats_delta(&before, &after)),
    ]);
    j.extend(plain);
    Ok(j)
}

fn measure(cycles: usize, mut cycle: impl FnMut() -> BoxResult<(u64, u64)>) -> BoxResult<Samples> {
    let mut s = Samples {
        cycle: Vec::with_capacity(cycles),
        acquire: Vec::with_capacity(cycles),
        release: Vec::with_capacity(cycles),
        elapsed: Duration::ZERO,
    };
    let start = Instant::now();
    for _ in 0..cycles {
        let (a, c) = cycle()?;
        s.cycle.push(c);
        s.acquire.push(a);
        s.release.push(c - a);
    }
    s.elapsed = start.elapsed();
    Ok(s)
}

pub(crate) fn rtt_connection(front: Front) -> &'static str {
    match front {
        Front::Blocking => "redis::Connection (RESP2), as in the blocking locker's pool",
        Front::Async => "redis MultiplexedConnection over RESP3 (smol), as the async locker's",
    }
}

/// The blocking front end writes a `PING` in front of every command it sends
/// on a reused pooled connection (in the same write, one round trip), to
/// tell a connection the server closed from a command that failed. Those
/// PINGs are commands, not round trips.
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
