//! What every scenario needs: clocks, percentiles, the machine and Redis
//! facts of a run, `INFO commandstats`, PING round trips, RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::json::J;
use super::{Args, BoxResult};

/// The namespace every scenario uses (each run adds its own suffix).
pub(crate) const NAMESPACE: &str = "redlease-bench";

/// Which front end a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Front {
    Blocking,
    Async,
}

impl Front {
    pub(crate) fn parse(s: &str) -> BoxResult<Front> {
        match s {
            "blocking" => Ok(Front::Blocking),
            "async" => Ok(Front::Async),
            other => Err(format!("--front: blocking, async or both, not {other:?}").into()),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Front::Blocking => "blocking",
            Front::Async => "async",
        }
    }
}

/// Microseconds since the Unix epoch: the clock all processes of a run
/// share (`Instant` cannot cross processes).
pub(crate) fn sys_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn ns_since(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// Nearest-rank percentile of sorted samples.
pub(crate) fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// n, min, p50, p90, p99, max and mean of samples in ns, reported in µs.
pub(crate) fn summary_us(samples_ns: &[u64]) -> J {
    let mut s = samples_ns.to_vec();
    s.sort_unstable();
    let us = |ns: u64| J::round(ns as f64 / 1000.0, 1);
    let mean = if s.is_empty() {
        0.0
    } else {
        s.iter().map(|&x| x as f64).sum::<f64>() / s.len() as f64
    };
    J::obj([
        ("n", J::from(s.len())),
        ("min_us", us(s.first().copied().unwrap_or(0))),
        ("p50_us", us(pct(&s, 50.0))),
        ("p90_us", us(pct(&s, 90.0))),
        ("p99_us", us(pct(&s, 99.0))),
        ("max_us", us(s.last().copied().unwrap_or(0))),
        ("mean_us", J::round(mean / 1000.0, 1)),
    ])
}

/// The p50 of samples in ns.
pub(crate) fn p50(samples_ns: &[u64]) -> u64 {
    let mut s = samples_ns.to_vec();
    s.sort_unstable();
    pct(&s, 50.0)
}

/// The p99 of samples in ns.
pub(crate) fn p99(samples_ns: &[u64]) -> u64 {
    let mut s = samples_ns.to_vec();
    s.sort_unstable();
    pct(&s, 99.0)
}

/// A duration in ns expressed in round trips of `rtt_ns`.
pub(crate) fn in_rtt(ns: u64, rtt_ns: u64) -> J {
    if rtt_ns == 0 {
        return J::Null;
    }
    J::round(ns as f64 / rtt_ns as f64, 2)
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// (VmRSS, VmHWM) of this process in KiB.
pub(crate) fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

pub(crate) fn connect(url: &str) -> BoxResult<redis::Connection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_connection_with_timeout(Duration::from_secs(5))?)
}

/// A client for the same server over RESP3, as the async locker opens its
/// command connection.
pub(crate) fn resp3_client(url: &str) -> BoxResult<redis::Client> {
    let client = redis::Client::open(url)?;
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    Ok(redis::Client::open(info.set_redis_settings(resp3))?)
}

pub(crate) fn info_field(conn: &mut redis::Connection, section: &str, name: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(conn)
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// The machine, the Redis server and the run, for every result file.
pub(crate) fn meta(args: &Args) -> BoxResult<J> {
    let mut conn = connect(&args.url()?)?;
    let version = info_field(&mut conn, "server", "redis_version");
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    Ok(J::obj([
        ("date", J::from(args.get("date").unwrap_or("").to_owned())),
        ("unix_time", J::from(sys_us() / 1_000_000)),
        ("nproc", J::from(nproc)),
        ("cpu", J::from(cpu)),
        ("loadavg_at_end", J::from(loadavg())),
        ("redis_version", J::from(version)),
        ("redlease_version", J::from(env!("CARGO_PKG_VERSION"))),
        ("profile", J::from(profile())),
        ("args", args.to_json()),
    ]))
}

fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug (figures are not meaningful: build with --release)"
    } else {
        "release"
    }
}

/// `INFO commandstats`: command name -> (calls, failed + rejected calls,
/// µs of server time).
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandStats(pub(crate) BTreeMap<String, (u64, u64, u64)>);

impl CommandStats {
    pub(crate) fn read(conn: &mut redis::Connection) -> BoxResult<Self> {
        let info: String = redis::cmd("INFO").arg("commandstats").query(conn)?;
        let mut map = BTreeMap::new();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let mut calls = 0;
            let mut failed = 0;
            let mut usec = 0;
            for kv in fields.split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    let v: u64 = v.parse().unwrap_or(0);
                    match k {
                        "calls" => calls = v,
                        "failed_calls" | "rejected_calls" => failed += v,
                        "usec" => usec = v,
                        _ => {}
                    }
                }
            }
            map.insert(name.to_owned(), (calls, failed, usec));
        }
        Ok(CommandStats(map))
    }

    pub(crate) fn reset(conn: &mut redis::Connection) -> BoxResult<()> {
        redis::cmd("CONFIG").arg("RESETSTAT").query::<()>(conn)?;
        Ok(())
    }

    /// Calls plus rejected calls (a rejected SUBSCRIBE is still a round trip).
    pub(crate) fn calls(&self, name: &str) -> u64 {
        self.0.get(name).map_or(0, |(c, f, _)| c + f)
    }

    /// Commands the clients sent: every command but the harness' own
    /// (`config`, `info`, `acl`) and those only the crate's scripts run
    /// (`commandstats` counts the `redis.call`s inside a script too).
    pub(crate) fn total(&self) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| !is_harness_command(k) && !SCRIPT_INTERNAL.contains(&k.as_str()))
            .map(|(_, (c, f, _))| c + f)
            .sum()
    }

    /// The `redis.call`s inside the scripts.
    pub(crate) fn inside_scripts(&self) -> u64 {
        SCRIPT_INTERNAL.iter().map(|k| self.calls(k)).sum()
    }

    /// Server time of the scripts (their inner calls included), µs.
    pub(crate) fn script_usec(&self) -> u64 {
        ["evalsha", "eval"]
            .iter()
            .filter_map(|k| self.0.get(*k))
            .map(|(_, _, us)| us)
            .sum()
    }

    pub(crate) fn scripts(&self) -> u64 {
        self.calls("evalsha") + self.calls("eval")
    }

    pub(crate) fn to_json(&self) -> J {
        J::obj(
            self.0
                .iter()
                .filter(|(k, _)| !is_harness_command(k))
                .map(|(k, (c, f, us))| {
                    let per_call = if *c == 0 {
                        J::Null
                    } else {
                        J::round(*us as f64 / *c as f64, 2)
                    };
                    (
                        k.as_str(),
                        J::obj([
                            ("calls", J::from(*c)),
                            ("failed", J::from(*f)),
                            ("usec_per_call", per_call),
                        ]),
                    )
                }),
        )
    }
}

/// Commands the crate only runs inside its Lua scripts, never on their own
/// (the sorted-set ones, `pexpireat` and `zcard` in the read-write lease's).
const SCRIPT_INTERNAL: [&str; 18] = [
    "get",
    "mget",
    "set",
    "del",
    "exists",
    "incr",
    "pexpire",
    "pexpireat",
    "pttl",
    "publish",
    "spublish",
    "time",
    "zadd",
    "zcard",
    "zrange",
    "zrem",
    "zremrangebyscore",
    "zscore",
];

fn is_harness_command(name: &str) -> bool {
    name == "info" || name.starts_with("config") || name.starts_with("acl")
}

/// PING round trips on a plain blocking connection (what the blocking
/// locker's pool holds).
pub(crate) fn ping_blocking(url: &str, n: usize) -> BoxResult<Vec<u64>> {
    let mut conn = connect(url)?;
    for _ in 0..n / 10 {
        redis::cmd("PING").query::<String>(&mut conn)?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        redis::cmd("PING").query::<String>(&mut conn)?;
        samples.push(ns_since(t));
    }
    Ok(samples)
}

/// PING round trips each after `idle` without traffic: what a command costs
/// when Redis and the client were idle (as in a hand-over after a hold),
/// rather than in a tight loop.
pub(crate) fn ping_after_idle(
    front: Front,
    url: &str,
    n: usize,
    idle: Duration,
) -> BoxResult<Vec<u64>> {
    let mut samples = Vec::with_capacity(n);
    match front {
        Front::Blocking => {
            let mut conn = connect(url)?;
            redis::cmd("PING").query::<String>(&mut conn)?;
            for _ in 0..n {
                sleep(idle);
                let t = Instant::now();
                redis::cmd("PING").query::<String>(&mut conn)?;
                samples.push(ns_since(t));
            }
        }
        Front::Async => {
            let client = resp3_client(url)?;
            smol::block_on(async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                redis::cmd("PING").query_async::<String>(&mut conn).await?;
                for _ in 0..n {
                    async_io::Timer::after(idle).await;
                    let t = Instant::now();
                    redis::cmd("PING").query_async::<String>(&mut conn).await?;
                    samples.push(ns_since(t));
                }
                Ok::<_, redis::RedisError>(())
            })?;
        }
    }
    Ok(samples)
}

/// PING round trips on a multiplexed RESP3 connection of the redis crate's
/// smol support (what the async locker uses for its commands).
pub(crate) fn ping_async(url: &str, n: usize) -> BoxResult<Vec<u64>> {
    let client = resp3_client(url)?;
    smol::block_on(async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        for _ in 0..n / 10 {
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
        }
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            redis::cmd("PING").query_async::<String>(&mut conn).await?;
            samples.push(ns_since(t));
        }
        Ok(samples)
    })
}

/// For the async front end, the same figure in round trips of a plain
/// (blocking, RESP2) connection, the cheapest a client can get; `None`
/// for the blocking front end, whose connection is that one.
pub(crate) fn plain_rtt_fields(
    front: Front,
    url: &str,
    what: &str,
    ns: u64,
) -> BoxResult<Vec<(String, J)>> {
    if front == Front::Blocking {
        return Ok(Vec::new());
    }
    let plain = ping_blocking(url, 2_000)?;
    Ok(vec![
        ("plain_rtt".to_owned(), summary_us(&plain)),
        (format!("{what}_plain_rtt"), in_rtt(ns, p50(&plain))),
    ])
}

pub(crate) fn ping(front: Front, url: &str, n: usize) -> BoxResult<Vec<u64>> {
    match front {
        Front::Blocking => ping_blocking(url, n),
        Front::Async => ping_async(url, n),
    }
}

/// Host and port of a `redis://[user:pass@]host:port[/db]` URL.
pub(crate) fn host_port(url: &str) -> BoxResult<(String, u16)> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or("only redis:// URLs are supported")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority
        .rsplit_once(':')
        .map_or((authority, "6379"), |(h, p)| (h, p));
    Ok((host.to_owned(), port.parse()?))
}

/// The same URL with `user:password@` put in front of the host.
pub(crate) fn with_user(url: &str, user: &str, password: &str) -> BoxResult<String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or("only redis:// URLs are supported")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    Ok(format!("redis://{user}:{password}@{rest}"))
}

/// A namespace of its own for one run, so runs never see each other's keys.
pub(crate) fn fresh_namespace(what: &str) -> String {
    format!("{NAMESPACE}-{what}-{}", sys_us())
}

pub(crate) fn sleep(d: Duration) {
    std::thread::sleep(d);
}
