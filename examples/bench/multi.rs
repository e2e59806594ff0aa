//! Multi-key lease cost (docs/PROTOCOL.md §6): one client, uncontended
//! `acquire_all` + `release` of `--keys` keys (default 8) against the
//! single-key cycle of the same locker, interleaved block by block so both
//! see the same machine, for each front end. Reports each cycle's
//! latency, the ratio of the multi-key cycle to the single-key one (goal:
//! p50 ≤ 1.3×), and what the extra time is made of: Redis's server time
//! per cycle (`INFO commandstats`, commands with the calls inside scripts)
//! and this process's CPU per cycle. `--handover off` runs both cycles
//! with `Config::handover(false)` (the release then reads no queue).
//!
//! The async cycles are each driven by `smol::block_on` on this thread,
//! the single-key ones as the multi-key ones, so the ratio compares like
//! with like.

use std::time::Instant;

use redlease::Config;

use super::json::J;
use super::uncontended::{num, pipelined_pings, with_script_calls};
use super::util::{self, ns_since, CommandStats, Cycles, Front};
use super::{Args, BoxResult};

/// One timed cycle: its acquire's time and its whole time, ns.
type Cycle<'a> = Box<dyn FnMut() -> BoxResult<(u64, u64)> + 'a>;

/// The goal on the p50 cycle ratio.
const GOAL: f64 = 1.3;

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let cycles: usize = args.num("cycles", 10_000)?;
    let blocks: usize = args.num("blocks", 10)?;
    let keys: usize = args.num("keys", 8)?;
    let handover = args.get("handover").unwrap_or("on") != "off";
    let mut out = vec![
        ("keys", J::from(keys)),
        ("handover", J::from(handover)),
        ("goal_cycle_p50_ratio", J::from(GOAL)),
    ];
    for front in args.fronts()? {
        let config = Config::new(util::fresh_namespace("multi")).handover(handover);
        let r = one(front, &url, config, cycles, blocks, keys)?;
        eprintln!(
            "multi {:8}: {keys} keys p50 {:.1} µs p99 {:.1} µs vs 1 key p50 {:.1} µs p99 {:.1} µs: \
             {:.3}× p50 ({:.3}× p99), goal ≤ {GOAL}× {}; commands/cycle {:.1} vs {:.1}; Redis \
             {:.1} vs {:.1} µs/cycle; client CPU {:.1} vs {:.1} µs/cycle",
            front.name(),
            num(&r, &["multi", "cycle", "p50_us"]),
            num(&r, &["multi", "cycle", "p99_us"]),
            num(&r, &["single", "cycle", "p50_us"]),
            num(&r, &["single", "cycle", "p99_us"]),
            num(&r, &["ratio", "cycle_p50"]),
            num(&r, &["ratio", "cycle_p99"]),
            if num(&r, &["ratio", "cycle_p50"]) <= GOAL {
                "met"
            } else {
                "NOT met"
            },
            num(&r, &["multi", "redis_commands_with_script_calls_per_cycle"]),
            num(&r, &["single", "redis_commands_with_script_calls_per_cycle"]),
            num(&r, &["multi", "redis_server_us_per_cycle"]),
            num(&r, &["single", "redis_server_us_per_cycle"]),
            num(&r, &["multi", "client_cpu_us_per_cycle"]),
            num(&r, &["single", "client_cpu_us_per_cycle"]),
        );
        out.push((front.name(), r));
    }
    Ok(J::obj(out))
}

/// One kind of cycle's samples and what it cost Redis and this process.
struct Measured {
    cycles: Cycles,
    stats: CommandStats,
    /// This process's context switches and CPU ns over the timed blocks.
    client: (u64, u64),
}

impl Measured {
    fn new(n: usize) -> Self {
        Measured {
            cycles: Cycles::with_capacity(n),
            stats: CommandStats::default(),
            client: (0, 0),
        }
    }

    /// Times `n` cycles of `cycle` (which answers its acquire's and its
    /// whole time, ns) as one block.
    fn block(
        &mut self,
        admin: &mut redis::Connection,
        n: usize,
        cycle: &mut Cycle<'_>,
    ) -> BoxResult<()> {
        CommandStats::reset(admin)?;
        let (start, counters) = (Instant::now(), util::process_counters());
        for _ in 0..n {
            let (a, c) = cycle()?;
            self.cycles.push(a, c);
        }
        self.cycles.elapsed += start.elapsed();
        let now = util::process_counters();
        self.client.0 += now.0.saturating_sub(counters.0);
        self.client.1 += now.1.saturating_sub(counters.1);
        self.stats.add(&CommandStats::read(admin)?);
        Ok(())
    }

    fn to_json(&self, front: Front) -> J {
        let n = self.cycles.cycle.len() as f64;
        let per = |x: u64| J::round(x as f64 / n, 3);
        let s = &self.stats;
        J::obj([
            ("cycles", J::from(self.cycles.cycle.len())),
            ("cycles_per_s", J::round(self.cycles.per_s(), 0)),
            ("cycle", util::summary_us(&self.cycles.cycle)),
            ("acquire", util::summary_us(&self.cycles.acquire)),
            ("release", util::summary_us(&self.cycles.release)),
            ("redis_commands_per_cycle", per(s.total())),
            ("redis_scripts_per_cycle", per(s.scripts())),
            (
                "redis_commands_with_script_calls_per_cycle",
                per(with_script_calls(front, s)),
            ),
            (
                "redis_round_trips_per_cycle",
                per(s.total() - pipelined_pings(front, s)),
            ),
            (
                "redis_server_us_per_cycle",
                J::round(s.total_usec() as f64 / n, 2),
            ),
            (
                "client_cpu_us_per_cycle",
                J::round(self.client.1 as f64 / n / 1000.0, 2),
            ),
            (
                "client_context_switches_per_cycle",
                J::round(self.client.0 as f64 / n, 2),
            ),
            ("commandstats", s.to_json()),
        ])
    }
}

/// `cycle` timed: its acquire's time and its whole time, ns.
fn timed(
    acquire: impl FnOnce() -> BoxResult<Box<dyn FnOnce() -> BoxResult<()>>>,
) -> BoxResult<(u64, u64)> {
    let t = Instant::now();
    let release = acquire()?;
    let a = ns_since(t);
    release()?;
    Ok((a, ns_since(t)))
}

fn one(
    front: Front,
    url: &str,
    config: Config,
    cycles: usize,
    blocks: usize,
    n_keys: usize,
) -> BoxResult<J> {
    let mut admin = util::connect(url)?;
    let names: Vec<String> = (0..n_keys).map(|i| format!("multi-{i}")).collect();
    let keys: Vec<&str> = names.iter().map(String::as_str).collect();
    let key = "single";
    let blocking;
    let asynch;
    let (mut single, mut multi): (Cycle<'_>, Cycle<'_>) = match front {
        Front::Blocking => {
            blocking = redlease::blocking::Locker::connect(url, config)?;
            let (l1, l2) = (&blocking, &blocking);
            let keys = keys.clone();
            (
                Box::new(move || {
                    timed(|| {
                        let lease = l1.acquire(key)?;
                        Ok(Box::new(move || {
                            lease.release().map(drop).map_err(Into::into)
                        }))
                    })
                }),
                Box::new(move || {
                    timed(|| {
                        let lease = l2.acquire_all(&keys)?;
                        Ok(Box::new(move || {
                            lease.release().map(drop).map_err(Into::into)
                        }))
                    })
                }),
            )
        }
        Front::Async => {
            asynch = smol::block_on(redlease::aio::Locker::connect(url, config))?;
            let (l1, l2) = (&asynch, &asynch);
            let keys = keys.clone();
            (
                Box::new(move || {
                    timed(|| {
                        let lease = smol::block_on(l1.acquire(key))?;
                        Ok(Box::new(move || {
                            smol::block_on(lease.release())
                                .map(drop)
                                .map_err(Into::into)
                        }))
                    })
                }),
                Box::new(move || {
                    timed(|| {
                        let lease = smol::block_on(l2.acquire_all(&keys))?;
                        Ok(Box::new(move || {
                            smol::block_on(lease.release())
                                .map(drop)
                                .map_err(Into::into)
                        }))
                    })
                }),
            )
        }
    };
    let warmup = (cycles / 20).max(100);
    for _ in 0..warmup {
        single()?;
        multi()?;
    }
    let per_block = (cycles / blocks.max(1)).max(1);
    let (mut one_key, mut all_keys) = (Measured::new(cycles), Measured::new(cycles));
    for _ in 0..blocks.max(1) {
        one_key.block(&mut admin, per_block, &mut single)?;
        all_keys.block(&mut admin, per_block, &mut multi)?;
    }
    drop((single, multi));
    let (s, m) = (one_key.to_json(front), all_keys.to_json(front));
    let ratio = |path: &[&str]| J::round(num(&m, path) / num(&s, path), 3);
    let extra = |path: &[&str]| J::round(num(&m, path) - num(&s, path), 2);
    let p50_ratio = num(&m, &["cycle", "p50_us"]) / num(&s, &["cycle", "p50_us"]);
    Ok(J::obj([
        ("warmup_cycles_each", J::from(warmup)),
        ("blocks_interleaved", J::from(blocks.max(1))),
        ("single", s.clone()),
        ("multi", m.clone()),
        (
            "ratio",
            J::obj([
                ("cycle_p50", ratio(&["cycle", "p50_us"])),
                ("cycle_p99", ratio(&["cycle", "p99_us"])),
                ("acquire_p50", ratio(&["acquire", "p50_us"])),
                ("release_p50", ratio(&["release", "p50_us"])),
                ("cycles_per_s", ratio(&["cycles_per_s"])),
                (
                    "redis_commands_with_script_calls_per_cycle",
                    ratio(&["redis_commands_with_script_calls_per_cycle"]),
                ),
                (
                    "redis_server_us_per_cycle",
                    ratio(&["redis_server_us_per_cycle"]),
                ),
                (
                    "client_cpu_us_per_cycle",
                    ratio(&["client_cpu_us_per_cycle"]),
                ),
            ]),
        ),
        (
            "extra_us_per_cycle",
            J::obj([
                ("cycle_p50", extra(&["cycle", "p50_us"])),
                ("redis_server", extra(&["redis_server_us_per_cycle"])),
                ("client_cpu", extra(&["client_cpu_us_per_cycle"])),
            ]),
        ),
        ("goal_met", J::from(p50_ratio <= GOAL)),
    ]))
}
