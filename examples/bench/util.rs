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

    /// Adds another reading's counts (of another stretch of one run).
    pub(crate) fn add(&mut self, other: &CommandStats) {
        for (k, (c, f, us)) in &other.0 {
            let e = self.0.entry(k.clone()).or_default();
            e.0 += c;
            e.1 += f;
            e.2 += us;
        }
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

    /// Server time of one command, µs.
    pub(crate) fn usec(&self, name: &str) -> u64 {
        self.0.get(name).map_or(0, |(_, _, us)| *us)
    }

    /// Redis's server time for what the clients sent, µs: the `usec` of
    /// every command but the harness' own. A script's `usec` already holds
    /// the time of the `redis.call`s inside it (a script whose one call is
    /// a 74 ms `SORT` shows 74 ms on both `eval` and `sort`), so the calls
    /// only scripts make are left out rather than counted twice.
    pub(crate) fn total_usec(&self) -> u64 {
        self.0
            .iter()
            .filter(|(k, _)| !is_harness_command(k) && !SCRIPT_INTERNAL.contains(&k.as_str()))
            .map(|(_, (_, _, us))| us)
            .sum()
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
/// (the sorted-set ones, `pexpireat` and `zcard` in the read-write lease's;
/// the list ones and `getdel` in the hand-over).
const SCRIPT_INTERNAL: [&str; 28] = [
    "get",
    "getdel",
    "lmove",
    "rpop",
    "lpop",
    "lpush",
    "lpos",
    "lset",
    "lrem",
    "lindex",
    "rpush",
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

pub(crate) fn is_harness_command(name: &str) -> bool {
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

/// A multiplexed connection configured as the async locker's: no response
/// timer per command (the locker keeps its timeout without one).
pub(crate) async fn multiplexed(
    client: &redis::Client,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// PING round trips on a multiplexed RESP3 connection of the redis crate's
/// smol support (what the async locker uses for its commands).
pub(crate) fn ping_async(url: &str, n: usize) -> BoxResult<Vec<u64>> {
    let client = resp3_client(url)?;
    smol::block_on(async {
        let mut conn = multiplexed(&client).await?;
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

/// Latencies of sequential acquire + release cycles, in ns.
#[derive(Debug, Default)]
pub(crate) struct Cycles {
    pub(crate) cycle: Vec<u64>,
    pub(crate) acquire: Vec<u64>,
    pub(crate) release: Vec<u64>,
    /// Wall time of the timed cycles.
    pub(crate) elapsed: Duration,
}

impl Cycles {
    pub(crate) fn with_capacity(n: usize) -> Cycles {
        Cycles {
            cycle: Vec::with_capacity(n),
            acquire: Vec::with_capacity(n),
            release: Vec::with_capacity(n),
            elapsed: Duration::ZERO,
        }
    }

    /// One cycle: `acquire_ns` into it, `cycle_ns` in all.
    pub(crate) fn push(&mut self, acquire_ns: u64, cycle_ns: u64) {
        self.cycle.push(cycle_ns);
        self.acquire.push(acquire_ns);
        self.release.push(cycle_ns.saturating_sub(acquire_ns));
    }

    pub(crate) fn per_s(&self) -> f64 {
        self.cycle.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// The release of the unfenced baseline: compare-and-delete.
pub(crate) const BASELINE_RELEASE_LUA: &str =
    "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) end return 0";

/// The minimal unfenced lock cycle, `SET key token NX PX 30000` then the
/// compare-and-delete script by `EVALSHA`: no fence, no notification, no
/// replay safety. What a cycle costs at the least on the same connection.
#[derive(Debug)]
pub(crate) struct Baseline {
    pub(crate) warmup: usize,
    pub(crate) timed: Cycles,
    /// `INFO commandstats` over the timed cycles.
    pub(crate) stats: CommandStats,
    /// Each step after `IDLE` without traffic (acquire, release), if asked.
    pub(crate) idle: Option<(Vec<u64>, Vec<u64>)>,
    /// Redis's CPU over the timed cycles (`INFO cpu`), s.
    pub(crate) redis_cpu_s: f64,
}

impl Baseline {
    /// Commands Redis executes per cycle, the two inside the script included.
    pub(crate) fn commands_per_cycle(&self) -> f64 {
        let n = self.timed.cycle.len().max(1) as f64;
        ["set", "evalsha", "get", "del"]
            .iter()
            .map(|k| self.stats.calls(k))
            .sum::<u64>() as f64
            / n
    }

    pub(crate) fn round_trips_per_cycle(&self) -> f64 {
        let n = self.timed.cycle.len().max(1) as f64;
        (self.stats.calls("set") + self.stats.calls("evalsha")) as f64 / n
    }

    /// Redis server time per cycle, µs: `SET` and the script (whose `usec`
    /// holds its `GET` and `DEL`).
    pub(crate) fn server_us_per_cycle(&self) -> f64 {
        let n = self.timed.cycle.len().max(1) as f64;
        (self.stats.usec("set") + self.stats.usec("evalsha")) as f64 / n
    }

    pub(crate) fn to_json(&self, rtt_p50: u64) -> J {
        let t = &self.timed;
        let mut j = J::obj([
            (
                "what",
                J::from(
                    "SET key token NX PX 30000, then EVALSHA of compare-and-delete \
                     (GET == token -> DEL), same connection kind",
                ),
            ),
            ("cycles", J::from(t.cycle.len())),
            ("warmup_cycles", J::from(self.warmup)),
            ("cycles_per_s", J::round(t.per_s(), 0)),
            ("cycle", summary_us(&t.cycle)),
            ("acquire", summary_us(&t.acquire)),
            ("release", summary_us(&t.release)),
            ("cycle_p50_rtt", in_rtt(p50(&t.cycle), rtt_p50)),
            ("cycle_p99_rtt", in_rtt(p99(&t.cycle), rtt_p50)),
            (
                "redis_commands_with_script_calls_per_cycle",
                J::round(self.commands_per_cycle(), 3),
            ),
            (
                "redis_round_trips_per_cycle",
                J::round(self.round_trips_per_cycle(), 3),
            ),
            (
                "redis_server_us_per_cycle",
                J::round(self.server_us_per_cycle(), 2),
            ),
            (
                "redis_cpu_us_per_cycle",
                J::round(self.redis_cpu_s * 1e6 / t.cycle.len().max(1) as f64, 2),
            ),
            ("commandstats", self.stats.to_json()),
        ]);
        if let Some((acquire, release)) = &self.idle {
            j.set(
                "after_2ms_idle",
                J::obj([
                    ("acquire", summary_us(acquire)),
                    ("release", summary_us(release)),
                ]),
            );
        }
        j
    }
}

/// One baseline cycle at a time on `key`, on a connection of the caller's.
#[derive(Debug)]
pub(crate) struct BaselineCycle {
    key: String,
    sha: String,
    seq: u64,
}

impl BaselineCycle {
    /// Loads the release script (`SCRIPT LOAD`, before any `RESETSTAT`).
    pub(crate) fn new(admin: &mut redis::Connection, key: &str) -> BoxResult<BaselineCycle> {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(BASELINE_RELEASE_LUA)
            .query(admin)?;
        Ok(BaselineCycle {
            key: key.to_owned(),
            sha,
            seq: 0,
        })
    }

    /// A token of the size of a random one, different every cycle.
    fn next(&mut self) -> (redis::Cmd, redis::Cmd) {
        self.seq += 1;
        let token = format!("{:016x}{:016x}", sys_us(), self.seq);
        let mut set = redis::cmd("SET");
        set.arg(&self.key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(30_000);
        let mut del = redis::cmd("EVALSHA");
        del.arg(&self.sha).arg(1).arg(&self.key).arg(&token);
        (set, del)
    }

    fn check(&self, set: Option<String>, deleted: i64) -> BoxResult<()> {
        if set.is_none() || deleted != 1 {
            return Err(format!("baseline: the key {:?} was not free", self.key).into());
        }
        Ok(())
    }

    /// One cycle on a plain connection, each step after `pause`: (ns to
    /// the acquire's reply, ns of both steps, the pauses left out).
    pub(crate) fn blocking(
        &mut self,
        conn: &mut redis::Connection,
        pause: Duration,
    ) -> BoxResult<(u64, u64)> {
        let (set, del) = self.next();
        sleep(pause);
        let t = Instant::now();
        let ok: Option<String> = set.query(conn)?;
        let a = ns_since(t);
        sleep(pause);
        let t = Instant::now();
        let n: i64 = del.query(conn)?;
        let r = ns_since(t);
        self.check(ok, n)?;
        Ok((a, a + r))
    }

    /// The same on the multiplexed async connection.
    pub(crate) async fn run_async(
        &mut self,
        conn: &mut redis::aio::MultiplexedConnection,
        pause: Duration,
    ) -> BoxResult<(u64, u64)> {
        let (set, del) = self.next();
        if !pause.is_zero() {
            async_io::Timer::after(pause).await;
        }
        let t = Instant::now();
        let ok: Option<String> = set.query_async(conn).await?;
        let a = ns_since(t);
        if !pause.is_zero() {
            async_io::Timer::after(pause).await;
        }
        let t = Instant::now();
        let n: i64 = del.query_async(conn).await?;
        let r = ns_since(t);
        self.check(ok, n)?;
        Ok((a, a + r))
    }
}

/// The pause before each step of an "after idle" sample.
pub(crate) const IDLE_PAUSE: Duration = Duration::from_millis(2);

/// CPU time used so far by Redis (`INFO cpu`) and by some processes of
/// this machine (`/proc/<pid>/stat`), in s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    at: Instant,
    redis: f64,
    redis_main_thread: f64,
    processes: f64,
    /// Every CPU of the machine, busy (not idle or iowait), s.
    machine_busy: f64,
}

/// CPU use between two samples, in cores (CPU s per wall s).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuUse {
    pub(crate) wall_s: f64,
    /// All of Redis's threads.
    pub(crate) redis_cores: f64,
    /// Redis's main thread: 1.0 is a saturated Redis.
    pub(crate) redis_main_thread_cores: f64,
    /// The processes sampled, together.
    pub(crate) processes_cores: f64,
    /// The whole machine (other programs included), from `/proc/stat`.
    pub(crate) machine_busy_cores: f64,
}

/// The kernel's clock ticks in `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

impl CpuSample {
    pub(crate) fn take(admin: &mut redis::Connection, pids: &[u32]) -> CpuSample {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query(admin)
            .unwrap_or_default();
        let field = |name: &str| -> f64 {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        CpuSample {
            at: Instant::now(),
            redis: field("used_cpu_sys") + field("used_cpu_user"),
            redis_main_thread: field("used_cpu_sys_main_thread")
                + field("used_cpu_user_main_thread"),
            processes: pids.iter().map(|&pid| process_cpu_s(pid)).sum(),
            machine_busy: machine_busy_s(),
        }
    }

    pub(crate) fn until(&self, later: &CpuSample) -> CpuUse {
        let wall_s = later.at.saturating_duration_since(self.at).as_secs_f64();
        let cores = |a: f64, b: f64| if wall_s > 0.0 { (b - a) / wall_s } else { 0.0 };
        CpuUse {
            wall_s,
            redis_cores: cores(self.redis, later.redis),
            redis_main_thread_cores: cores(self.redis_main_thread, later.redis_main_thread),
            processes_cores: cores(self.processes, later.processes),
            machine_busy_cores: cores(self.machine_busy, later.machine_busy),
        }
    }
}

impl CpuUse {
    /// Redis's CPU between the samples, s.
    pub(crate) fn redis_s(self) -> f64 {
        self.redis_cores * self.wall_s
    }

    /// What bounds the throughput, by CPU: Redis's one thread, the
    /// machine's cores (Redis and the clients share them), or neither
    /// (round trips and waits).
    pub(crate) fn limited_by(self) -> &'static str {
        let nproc = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        if self.redis_main_thread_cores >= 0.9 {
            "redis: its main thread is 90 % busy or more"
        } else if self.redis_cores + self.processes_cores >= 0.9 * nproc {
            "machine CPU: Redis and the clients use 90 % of the cores or more"
        } else if self.machine_busy_cores >= 0.9 * nproc {
            "machine CPU: 90 % of the cores or more busy, other programs included"
        } else {
            "neither CPU: round trips and waits"
        }
    }

    pub(crate) fn to_json(self) -> J {
        J::obj([
            ("wall_s", J::round(self.wall_s, 3)),
            ("redis_cores", J::round(self.redis_cores, 3)),
            (
                "redis_main_thread_cores",
                J::round(self.redis_main_thread_cores, 3),
            ),
            ("clients_cores", J::round(self.processes_cores, 3)),
            ("machine_busy_cores", J::round(self.machine_busy_cores, 3)),
            ("limited_by", J::from(self.limited_by())),
        ])
    }
}

/// utime + stime of a process (all its threads), s; 0 if it is gone.
pub(crate) fn process_cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces: the fields start after its ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); `rest` starts at field 3.
    let ticks = |i: usize| -> f64 {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0) as f64
    };
    (ticks(11) + ticks(12)) / USER_HZ
}

/// Busy time of all CPUs of the machine so far (the `cpu` line of
/// `/proc/stat` less idle and iowait), s.
fn machine_busy_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let busy: u64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    busy as f64 / USER_HZ
}

/// Context switches (voluntary and not) and CPU time (ns) of this process
/// so far, summed over its threads.
pub(crate) fn process_counters() -> (u64, u64) {
    let (mut switches, mut cpu_ns) = (0, 0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    for task in tasks.flatten() {
        let path = task.path();
        if let Ok(status) = std::fs::read_to_string(path.join("status")) {
            for line in status.lines() {
                if let Some(v) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    switches += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
        if let Ok(sched) = std::fs::read_to_string(path.join("schedstat")) {
            cpu_ns += sched
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (switches, cpu_ns)
}

/// The source of the crate's script `const <name>` as Redis receives it,
/// read at build time so a comparison runs exactly what the crate sends.
pub(crate) fn crate_script(name: &str) -> BoxResult<String> {
    Ok(crate::script_source::script_source(name)?)
}
