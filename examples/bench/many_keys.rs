//! Many keys (async): one locker, 10 000 concurrent acquire + release
//! cycles on distinct keys over its one multiplexed connection, against
//! `redis-benchmark` running the crate's own acquire and release scripts
//! (EVALSHA) with pipelining in the same run.

use std::process::Command;
use std::time::{Duration, Instant};

use redlease::Config;

use super::json::J;
use super::uncontended::{stats_delta, with_script_calls};
use super::util::{self, ns_since, CommandStats, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let keys: usize = args.num("keys", 10_000)?;
    let rounds: usize = args.num("rounds", 6)?;
    let pipeline: usize = args.num("pipeline", 16)?;
    let requests: usize = args.num("requests", 100_000)?;
    let ours = locker_rounds(&url, keys, rounds)?;
    let theirs = redis_benchmark(&url, keys, pipeline, requests)?;
    let cycles_per_s = ours
        .get("warm_cycles_per_s_median")
        .and_then(J::as_f64)
        .unwrap_or(f64::NAN);
    let ceiling = theirs
        .get("c1")
        .and_then(|c| c.get("cycle_ceiling_per_s"))
        .and_then(J::as_f64)
        .unwrap_or(f64::NAN);
    eprintln!(
        "many keys async: {cycles_per_s:.0} cycles/s ({keys} concurrent), Redis {:.1} µs/cycle; \
         redis-benchmark acquire+release EVALSHA ceiling on one connection -P {pipeline}: \
         {ceiling:.0} cycles/s ({:.0}%)",
        ours.get("redis_server_us_per_cycle")
            .and_then(J::as_f64)
            .unwrap_or(f64::NAN),
        100.0 * cycles_per_s / ceiling
    );
    Ok(J::obj([
        ("locker", ours),
        ("redis_benchmark", theirs),
        (
            "locker_vs_redis_benchmark_ceiling",
            J::round(cycles_per_s / ceiling, 3),
        ),
    ]))
}

fn locker_rounds(url: &str, keys: usize, rounds: usize) -> BoxResult<J> {
    let mut admin = util::connect(url)?;
    let ns = util::fresh_namespace("many-keys");
    let config = Config::new(&ns)
        .max_waiters(keys)
        .max_tracked_leases(keys)
        .wait(Duration::from_secs(30));
    let names: Vec<String> = (0..keys).map(|i| format!("key:{i}")).collect();
    smol::block_on(async {
        let locker = redlease::aio::Locker::connect(url, config).await?;
        let before = locker.stats();
        let mut per_round = Vec::new();
        let mut latencies = Vec::new();
        let mut stats = CommandStats::default();
        for round in 0..rounds.max(2) {
            if round == 1 {
                // Round 0 also creates every fence counter (TIME + SET).
                CommandStats::reset(&mut admin)?;
            }
            let start = Instant::now();
            let cycles = names.iter().map(|key| {
                let locker = &locker;
                async move {
                    let t = Instant::now();
                    let lease = locker.acquire(key).await?;
                    lease.release().await?;
                    Ok::<_, redlease::Error>(ns_since(t))
                }
            });
            let results = futures::future::join_all(cycles).await;
            let elapsed = start.elapsed();
            let mut lat = Vec::with_capacity(results.len());
            for r in results {
                lat.push(r?);
            }
            per_round.push(keys as f64 / elapsed.as_secs_f64());
            if round >= 1 {
                latencies.extend(lat);
            }
        }
        stats = CommandStats::read(&mut admin).unwrap_or(stats);
        let after = locker.stats();
        locker.shutdown().await?;
        let warm: Vec<f64> = per_round[1..].to_vec();
        let mut sorted = warm.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let cycles = (keys * (rounds.max(2) - 1)) as f64;
        Ok(J::obj([
            ("concurrent_cycles", J::from(keys)),
            ("rounds", J::from(per_round.len())),
            (
                "cycles_per_s_per_round",
                J::arr(per_round.iter().map(|x| J::round(*x, 0))),
            ),
            ("cold_round_cycles_per_s", J::round(per_round[0], 0)),
            ("warm_cycles_per_s_median", J::round(median, 0)),
            (
                "warm_cycle_latency_within_a_round",
                util::summary_us(&latencies),
            ),
            (
                "redis_scripts_per_cycle",
                J::round(stats.scripts() as f64 / cycles, 3),
            ),
            (
                "redis_commands_per_cycle",
                J::round(stats.total() as f64 / cycles, 3),
            ),
            (
                "redis_commands_with_script_calls_per_cycle",
                J::round(with_script_calls(Front::Async, &stats) as f64 / cycles, 3),
            ),
            (
                "redis_server_us_per_cycle",
                J::round(stats.total_usec() as f64 / cycles, 2),
            ),
            ("commandstats", stats.to_json()),
            ("locker_stats_delta", stats_delta(&before, &after)),
        ]))
    })
}

fn redis_benchmark(url: &str, keys: usize, pipeline: usize, requests: usize) -> BoxResult<J> {
    let mut conn = util::connect(url)?;
    let (host, port) = util::host_port(url)?;
    let (acquire, from) = (util::crate_script("ACQUIRE_LUA")?, "src/core/script.rs");
    let release = util::crate_script("RELEASE_LUA")?;
    let load = |conn: &mut redis::Connection, src: &str| -> BoxResult<String> {
        Ok(redis::cmd("SCRIPT").arg("LOAD").arg(src).query(conn)?)
    };
    let acquire_sha = load(&mut conn, &acquire)?;
    let release_sha = load(&mut conn, &release)?;
    let token = "0123456789abcdef0123456789abcdef";
    // Lease 1 ms: a key comes round again long after its lease ended, so
    // (nearly) every acquire succeeds, as in the locker's cycles.
    let acquire_cmd: Vec<String> = [
        "EVALSHA",
        &acquire_sha,
        "2",
        "redlease-bench-rb:lock:__rand_int__",
        "redlease-bench-rb:lock-fence:__rand_int__",
        token,
        "1",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The key is gone by then: the script reads it and returns 0, a lower
    // bound on a real release's cost.
    let release_cmd: Vec<String> = [
        "EVALSHA",
        &release_sha,
        "1",
        "redlease-bench-rb:lock:__rand_int__",
        token,
        "PUBLISH",
        "redlease-bench-rb:lock-released",
        "0000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let ping_cmd = vec!["PING".to_owned()];
    let mut by_clients = Vec::new();
    for clients in [1usize, 50] {
        let run = |cmd: &[String]| -> BoxResult<f64> {
            let out = Command::new("redis-benchmark")
                .args(["-h", &host, "-p", &port.to_string()])
                .args(["-c", &clients.to_string(), "-n", &requests.to_string()])
                .args(["-P", &pipeline.to_string(), "-r", &keys.to_string(), "-q"])
                .args(cmd)
                .output()
                .map_err(|e| format!("redis-benchmark could not run: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            rps(&text).ok_or_else(|| format!("no rate in redis-benchmark output: {text:?}").into())
        };
        let acq = run(&acquire_cmd)?;
        let rel = run(&release_cmd)?;
        let ping = run(&ping_cmd)?;
        let ceiling = 1.0 / (1.0 / acq + 1.0 / rel);
        by_clients.push((
            if clients == 1 { "c1" } else { "c50" },
            J::obj([
                ("clients", J::from(clients)),
                ("acquire_evalsha_per_s", J::round(acq, 0)),
                ("release_evalsha_per_s", J::round(rel, 0)),
                ("ping_per_s", J::round(ping, 0)),
                ("cycle_ceiling_per_s", J::round(ceiling, 0)),
            ]),
        ));
    }
    let mut j = J::obj([
        ("pipeline", J::from(pipeline)),
        ("requests", J::from(requests)),
        ("random_keys", J::from(keys)),
        ("script_source", J::from(from)),
        (
            "command",
            J::from(format!(
                "redis-benchmark -h {host} -p {port} -c 1 -n {requests} -P {pipeline} -r {keys} -q {}",
                acquire_cmd.join(" ")
            )),
        ),
        (
            "note",
            J::from(
                "cycle_ceiling_per_s = 1 / (1/acquire + 1/release): what Redis alone does for \
                 one acquire script plus one release script per cycle with this pipelining",
            ),
        ),
    ]);
    for (k, v) in by_clients {
        j.set(k, v);
    }
    Ok(j)
}

/// The last "N requests per second" figure of `redis-benchmark -q` output.
fn rps(text: &str) -> Option<f64> {
    let at = text.rfind(" requests per second")?;
    text[..at].split_whitespace().last()?.parse().ok()
}
