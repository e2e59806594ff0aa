//! Leader election against its goals, per front end, with the
//! baselines measured in the same run: the idle round trip (PING after
//! 2 ms without traffic) and a plain notification (`PUBLISH` sent → a
//! plain `SUBSCRIBE` connection has it).
//!
//! - **killed leader** replaced in ≤ TTL + 1 RTT: the lease a killed
//!   leader leaves (set by hand with `PX ttl`, never renewed: a leader's
//!   last renewal) and a candidate campaigning against it; the figure is
//!   the candidate's campaign returning minus the lease's expiry (the
//!   `SET`'s mid-point + TTL), in idle RTTs; and minus the instant Redis
//!   really expires it (its `PEXPIRETIME` + 1 ms: a key lives while
//!   Redis's millisecond clock is ≤ its expiry, so up to 1 ms past the
//!   nominal TTL), on the host clock both processes share. Also in round
//!   trips measured after a TTL without traffic (PING after 100 ms idle):
//!   the retry follows such a pause, and on these VMs waking Redis's and
//!   the client's idle vCPUs then costs 2–4× the round trip after 2 ms.
//! - **resigning leader** replaced in ≤ notification + 2 RTT: the leader
//!   calls `resign`, a candidate of another locker (subscribed, waiting)
//!   returns from its campaign; the figure less the notification, in RTTs.
//! - **observe** delivers a change in ≤ notification + 1 RTT: the leader
//!   calls `proclaim`, an observer on a third locker (safety polls 30 s,
//!   so only the notification can deliver) yields it; less the
//!   notification, in RTTs.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlease::{AcquireOptions, Config, Error, Observation, Stats};
use sha2::{Digest, Sha256};

use super::json::J;
use super::util::{self, Front};
use super::wakeup::{plain_subscriber, until_waiting};
use super::{Args, BoxResult};

/// The killed leader's lease.
const TTL: Duration = Duration::from_millis(100);
/// The pause before each timed step: what a change costs after idle.
const IDLE: Duration = Duration::from_millis(2);

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let samples: usize = args.num("samples", 100)?;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let r = match front {
            Front::Blocking => one::<redlease::blocking::Locker>(front, &url, samples)?,
            Front::Async => one::<Async>(front, &url, samples)?,
        };
        let f = |k: &str| {
            r.get(k)
                .and_then(|g| g.get("excess_p50_rtt"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN)
        };
        eprintln!(
            "election {:8}: killed leader replaced TTL + {} RTT (Redis's expiry + {} RTT, {} RTT \
             after a TTL idle, {} busy replies each), \
             resign + notification + {} RTT, observe notification + {} RTT (p50; idle rtt p50 {} \
             µs, {} µs after a TTL idle, notification p50 {} µs)",
            front.name(),
            f("killed_leader"),
            f("killed_leader_after_redis_expiry"),
            r.get("killed_leader_after_redis_expiry")
                .and_then(|g| g.get("excess_p50_rtt_after_ttl_idle"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("killed_leader_busy_replies_per_replacement")
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            f("resigning_leader"),
            f("observe"),
            r.get("idle_rtt")
                .and_then(|g| g.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("idle_rtt_after_ttl")
                .and_then(|g| g.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("notification")
                .and_then(|g| g.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
        );
        out.push((front.name(), r));
    }
    Ok(J::obj(out))
}

/// What the scenario asks of a front end's locker.
trait Candidate: Send + Sync + Sized + 'static {
    type Leadership: Send + 'static;
    fn connect(url: &str, config: Config) -> Result<Self, Error>;
    fn campaign(&self, name: &str, value: &[u8], wait: Duration)
        -> Result<Self::Leadership, Error>;
    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<(), Error>;
    fn resign(leadership: Self::Leadership) -> Result<(), Error>;
    fn observe(&self, name: &str) -> Result<Box<dyn Iterator<Item = Observation> + Send>, Error>;
    fn stats(&self) -> Stats;
    fn shutdown(&self) -> Result<(), Error>;
}

impl Candidate for redlease::blocking::Locker {
    type Leadership = redlease::blocking::Leadership;

    fn connect(url: &str, config: Config) -> Result<Self, Error> {
        redlease::blocking::Locker::connect(url, config)
    }

    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        wait: Duration,
    ) -> Result<Self::Leadership, Error> {
        self.election(name)?
            .campaign_with(value, AcquireOptions::new().wait(wait))
    }

    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<(), Error> {
        leadership.proclaim(value).map(drop)
    }

    fn resign(leadership: Self::Leadership) -> Result<(), Error> {
        leadership.resign().map(drop)
    }

    fn observe(&self, name: &str) -> Result<Box<dyn Iterator<Item = Observation> + Send>, Error> {
        Ok(Box::new(self.election(name)?.observe()))
    }

    fn stats(&self) -> Stats {
        redlease::blocking::Locker::stats(self)
    }

    fn shutdown(&self) -> Result<(), Error> {
        redlease::blocking::Locker::shutdown(self)
    }
}

/// The async locker, each call driven to completion on the caller's thread.
struct Async(redlease::aio::Locker);

impl Candidate for Async {
    type Leadership = redlease::aio::Leadership;

    fn connect(url: &str, config: Config) -> Result<Self, Error> {
        smol::block_on(redlease::aio::Locker::connect(url, config)).map(Async)
    }

    fn campaign(
        &self,
        name: &str,
        value: &[u8],
        wait: Duration,
    ) -> Result<Self::Leadership, Error> {
        smol::block_on(
            self.0
                .election(name)?
                .campaign_with(value, AcquireOptions::new().wait(wait)),
        )
    }

    fn proclaim(leadership: &Self::Leadership, value: &[u8]) -> Result<(), Error> {
        smol::block_on(leadership.proclaim(value)).map(drop)
    }

    fn resign(leadership: Self::Leadership) -> Result<(), Error> {
        smol::block_on(leadership.resign()).map(drop)
    }

    fn observe(&self, name: &str) -> Result<Box<dyn Iterator<Item = Observation> + Send>, Error> {
        Ok(Box::new(futures::executor::block_on_stream(
            self.0.election(name)?.observe(),
        )))
    }

    fn stats(&self) -> Stats {
        self.0.stats()
    }

    fn shutdown(&self) -> Result<(), Error> {
        smol::block_on(self.0.shutdown())
    }
}

fn one<C: Candidate>(front: Front, url: &str, samples: usize) -> BoxResult<J> {
    let ns = util::fresh_namespace("election");
    let config = || {
        Config::new(&ns)
            .lease(Duration::from_secs(10))
            .wait(Duration::from_secs(10))
    };
    let leader = C::connect(url, config())?;
    let candidate = Arc::new(C::connect(url, config())?);
    // Only a notification can deliver the observer's changes in time.
    let reader = C::connect(url, config().notify_poll_interval(Duration::from_secs(30)))?;

    let idle_rtt = util::ping_after_idle(front, url, 200, IDLE)?;
    // The killed leader's candidate sends its retry after a TTL without
    // traffic, when waking Redis's and this process's idle CPUs costs more
    // than after 2 ms (a VM's halted vCPUs): its own baseline.
    let ttl_idle_rtt = util::ping_after_idle(front, url, 30, TTL)?;
    let notification = notification_latency(url, &ns, samples)?;
    let (killed, killed_after_expiry, busy_replies) =
        killed_leader(url, &ns, &*candidate, samples.min(40))?;
    let resigned = resigning_leader(&leader, &candidate, samples)?;
    let observed = observe_latency(&leader, &reader, samples)?;
    leader.shutdown()?;
    candidate.shutdown()?;

    let (rtt, notice) = (util::p50(&idle_rtt), util::p50(&notification));
    let ttl_rtt = util::p50(&ttl_idle_rtt);
    let goal = |what: &str, samples: &[i64], base: u64, allowed: f64, term: &str| {
        let excess_ns: Vec<i64> = samples.iter().map(|&s| s - base as i64).collect();
        let p50 = median(&excess_ns) as f64 / rtt.max(1) as f64;
        let after_ttl_idle = median(&excess_ns) as f64 / ttl_rtt.max(1) as f64;
        J::obj([
            ("excess_p50_rtt_after_ttl_idle", J::round(after_ttl_idle, 2)),
            ("what", J::from(what)),
            ("n", J::from(samples.len())),
            ("samples_us", signed_summary_us(samples)),
            ("excess_over_base_us", signed_summary_us(&excess_ns)),
            ("excess_p50_rtt", J::round(p50, 2)),
            ("goal_rtt", J::round(allowed, 1)),
            ("met_at_p50", J::Bool(p50 <= allowed)),
            ("term_holding_it", J::from(term)),
        ])
    };
    Ok(J::obj([
        ("idle_rtt", util::summary_us(&idle_rtt)),
        ("idle_rtt_after_ttl", util::summary_us(&ttl_idle_rtt)),
        ("notification", util::summary_us(&notification)),
        (
            "notification_note",
            J::from("PUBLISH sent (after 2 ms idle) → a plain SUBSCRIBE connection has the push"),
        ),
        ("ttl_ms", J::from(TTL.as_millis() as u64)),
        (
            "killed_leader_busy_replies_per_replacement",
            J::round(busy_replies as f64 / killed.len().max(1) as f64, 2),
        ),
        (
            "killed_leader",
            goal(
                "campaign returned − (the killed leader's last renewal + TTL); base = 0",
                &killed,
                0,
                1.0,
                "Redis keeps the key until its millisecond clock passes the expiry (up to 1 ms \
                 past the nominal TTL); then the candidate's next attempt and its reply",
            ),
        ),
        (
            "killed_leader_after_redis_expiry",
            goal(
                "campaign returned − the instant Redis expired the lease (PEXPIRETIME + 1 ms); \
                 base = 0",
                &killed_after_expiry,
                0,
                1.0,
                "the attempt after the last busy reply in the lease's final millisecond, then \
                 its reply",
            ),
        ),
        (
            "resigning_leader",
            goal(
                "resign called → the waiting candidate's campaign returned; base = notification",
                &resigned,
                notice,
                2.0,
                "notification + the candidate's campaign (1 RTT) + the waiter's wake-up",
            ),
        ),
        (
            "observe",
            goal(
                "proclaim called → the observer yielded it; base = notification",
                &observed,
                notice,
                1.0,
                "notification + one read (1 RTT) + the observer's wake-up",
            ),
        ),
    ]))
}

/// `PUBLISH` sent → a plain subscriber has it, each after [`IDLE`].
fn notification_latency(url: &str, ns: &str, samples: usize) -> BoxResult<Vec<u64>> {
    let channel = format!("{ns}:bench-probe");
    let rx = plain_subscriber(url, channel.clone())?;
    let mut publisher = util::connect(url)?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples + 10 {
        util::sleep(IDLE);
        let t0 = Instant::now();
        redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("x")
            .query::<i64>(&mut publisher)?;
        let at = rx.recv_timeout(Duration::from_secs(2))?;
        out.push(at.saturating_duration_since(t0).as_nanos() as u64);
    }
    Ok(out.split_off(10))
}

/// The lease a killed leader leaves (its last renewal set `PX` TTL) and a
/// candidate campaigning against it: ns from the lease's nominal expiry
/// (the `SET`'s mid-point + TTL) and from Redis's own expiry of it to the
/// campaign's return (negative: before it, which would be a bug), and the
/// busy replies the candidate had on the way.
fn killed_leader<C: Candidate>(
    url: &str,
    ns: &str,
    candidate: &C,
    samples: usize,
) -> BoxResult<(Vec<i64>, Vec<i64>, u64)> {
    let mut admin = util::connect(url)?;
    let mut busy_replies = 0;
    let mut nominal = Vec::with_capacity(samples);
    let mut real = Vec::with_capacity(samples);
    for i in 0..samples + 3 {
        let name = format!("killed-{i}");
        let lease = format!("{ns}:elect:{{{}}}", sha_hex(&name));
        util::sleep(IDLE);
        let sent = Instant::now();
        redis::cmd("SET")
            .arg(&lease)
            .arg(format!("{}:1", "d".repeat(32)))
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query::<()>(&mut admin)?;
        let answered = Instant::now();
        let expiry = sent + (answered - sent) / 2 + TTL;
        let expires_at_ms: u64 = redis::cmd("PEXPIRETIME").arg(&lease).query(&mut admin)?;
        let redis_expiry = UNIX_EPOCH + Duration::from_millis(expires_at_ms + 1);
        let busy_before = candidate.stats().busy_replies;
        let leadership = candidate.campaign(&name, b"next", Duration::from_secs(5))?;
        let (returned, returned_wall) = (Instant::now(), SystemTime::now());
        let busy = candidate.stats().busy_replies - busy_before;
        C::resign(leadership)?;
        if i >= 3 {
            busy_replies += busy;
            nominal.push(signed_ns(expiry, returned));
            real.push(match returned_wall.duration_since(redis_expiry) {
                Ok(d) => d.as_nanos() as i64,
                Err(e) => -(e.duration().as_nanos() as i64),
            });
        }
    }
    Ok((nominal, real, busy_replies))
}

/// `resign` called → a candidate of another locker, waiting, leads.
fn resigning_leader<C: Candidate>(
    leader: &C,
    candidate: &Arc<C>,
    samples: usize,
) -> BoxResult<Vec<i64>> {
    let name = "resign";
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<Result<Instant, String>>();
    let c = candidate.clone();
    let thread = std::thread::spawn(move || {
        while go_rx.recv().is_ok() {
            let r = c
                .campaign(name, b"candidate", Duration::from_secs(10))
                .and_then(|l| {
                    let at = Instant::now();
                    C::resign(l).map(|()| at)
                });
            let _ = done_tx.send(r.map_err(|e| e.to_string()));
        }
    });
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples + 10 {
        let leadership = leader.campaign(name, b"leader", Duration::from_secs(10))?;
        let busy = candidate.stats().busy_replies;
        go_tx.send(())?;
        until_waiting(|| candidate.stats(), busy)?;
        let t0 = Instant::now();
        C::resign(leadership)?;
        let at = done_rx.recv_timeout(Duration::from_secs(10))??;
        if i >= 10 {
            out.push(signed_ns(t0, at));
        }
    }
    drop(go_tx);
    thread.join().map_err(|_| "the candidate thread panicked")?;
    Ok(out)
}

/// `proclaim` called → an observer on another locker yields the change.
fn observe_latency<C: Candidate>(leader: &C, reader: &C, samples: usize) -> BoxResult<Vec<i64>> {
    let name = "observed";
    let leadership = leader.campaign(name, b"v", Duration::from_secs(10))?;
    let (tx, rx) = mpsc::channel::<(Instant, Observation)>();
    let observer = reader.observe(name)?;
    let thread = std::thread::spawn(move || {
        for item in observer {
            if tx.send((Instant::now(), item)).is_err() {
                return;
            }
        }
    });
    let wait = Duration::from_secs(10);
    // The current state first; then the subscription's confirmation read.
    rx.recv_timeout(wait)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reader.stats().subscribed {
        if Instant::now() > deadline {
            return Err("the observer's locker never subscribed".into());
        }
        util::sleep(Duration::from_micros(50));
    }
    util::sleep(Duration::from_millis(20));
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples + 10 {
        let value = format!("v{i}");
        util::sleep(IDLE);
        let t0 = Instant::now();
        C::proclaim(&leadership, value.as_bytes())?;
        let (at, item) = rx.recv_timeout(wait)?;
        let seen = item.leader.map(|l| l.value);
        if seen.as_deref() != Some(value.as_bytes()) {
            return Err(format!("the observer yielded another change ({:?})", item.version).into());
        }
        if i >= 10 {
            out.push(signed_ns(t0, at));
        }
    }
    C::resign(leadership)?;
    reader.shutdown()?;
    thread.join().map_err(|_| "the observer thread panicked")?;
    Ok(out)
}

fn sha_hex(name: &str) -> String {
    Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `to − from` in ns, negative when `to` came first.
fn signed_ns(from: Instant, to: Instant) -> i64 {
    match to.checked_duration_since(from) {
        Some(d) => d.as_nanos() as i64,
        None => -(from.duration_since(to).as_nanos() as i64),
    }
}

fn median(samples: &[i64]) -> i64 {
    let mut s = samples.to_vec();
    s.sort_unstable();
    s.get(s.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// min, p50, p90, p99, max of signed ns samples, in µs.
fn signed_summary_us(samples: &[i64]) -> J {
    let mut s = samples.to_vec();
    s.sort_unstable();
    let at = |p: f64| {
        let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
        s.get(rank.clamp(1, s.len().max(1)) - 1)
            .copied()
            .unwrap_or(0)
    };
    let us = |ns: i64| J::round(ns as f64 / 1000.0, 1);
    J::obj([
        ("n", J::from(s.len())),
        ("min_us", us(s.first().copied().unwrap_or(0))),
        ("p50_us", us(at(50.0))),
        ("p90_us", us(at(90.0))),
        ("p99_us", us(at(99.0))),
        ("max_us", us(s.last().copied().unwrap_or(0))),
    ])
}
