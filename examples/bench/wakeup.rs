//! Wake-up: one waiter (its own locker) blocked behind a holder (another
//! locker); the time from the holder calling release to the waiter's
//! acquire returning, in µs and in round trips.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Config, Stats};

use super::contention;
use super::json::J;
use super::uncontended::{num, rtt_connection, stats_delta};
use super::util::{self, CommandStats, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let samples: usize = args.num("samples", 300)?;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let mut r = one(front, &url, samples, false)?;
        // A second, shorter pass with a plain SUBSCRIBE connection on the
        // release channel splits the wake-up: when the notification reached
        // a client, and how long the locker took from there.
        let split = one(front, &url, (samples / 3).max(20), true)?;
        r.set("with_probe_subscriber", split);
        eprintln!(
            "wake-up {:8}: p50 {} µs = {} RTT, p99 {} µs (rtt p50 {} µs); Redis {} µs and {} \
             commands with script calls per acquisition",
            front.name(),
            r.get("wakeup")
                .and_then(|w| w.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("wakeup_p50_rtt")
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("wakeup")
                .and_then(|w| w.get("p99_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            r.get("rtt")
                .and_then(|w| w.get("p50_us"))
                .and_then(J::as_f64)
                .unwrap_or(f64::NAN),
            num(&r, &["redis_server_us_per_acquisition"]),
            num(&r, &["redis_commands_with_script_calls_per_acquisition"]),
        );
        out.push((front.name(), r));
    }
    Ok(J::obj(out))
}

/// Waits until the waiter got a busy reply (it is really waiting) and its
/// locker is subscribed, then lets it settle into its back-off.
pub(crate) fn until_waiting(stats: impl Fn() -> Stats, busy_before: u64) -> BoxResult<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = stats();
        if s.busy_replies > busy_before && s.subscribed {
            break;
        }
        if Instant::now() > deadline {
            return Err("the waiter never reported a busy reply".into());
        }
        util::sleep(Duration::from_micros(50));
    }
    // A first subscription makes the head check once more: let that land.
    util::sleep(Duration::from_millis(2));
    Ok(())
}

/// A plain `SUBSCRIBE` connection on `channel` (a thread of its own): the
/// instant each message reached a client that does nothing else. Returns
/// once the subscription is confirmed.
pub(crate) fn plain_subscriber(url: &str, channel: String) -> BoxResult<mpsc::Receiver<Instant>> {
    let mut conn = util::connect(url)?;
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut pubsub = conn.as_pubsub();
        if pubsub.subscribe(&channel).is_err() {
            return;
        }
        let _ = ready_tx.send(());
        while pubsub.get_message().is_ok() {
            if tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(5))?;
    Ok(rx)
}

/// A plain subscriber on the release channel: when each notification
/// reached a client that does nothing else.
struct Probe {
    pushes: mpsc::Receiver<Instant>,
    release_returned: Vec<u64>,
    push_arrived: Vec<u64>,
    reaction: Vec<u64>,
}

impl Probe {
    fn start(url: &str, channel: String) -> BoxResult<Probe> {
        Ok(Probe {
            pushes: plain_subscriber(url, channel)?,
            release_returned: Vec::new(),
            push_arrived: Vec::new(),
            reaction: Vec::new(),
        })
    }

    /// The push of the release called at `t0` (earlier ones are the
    /// waiter's own releases).
    fn record(&mut self, t0: Instant, returned: Instant, t1: Instant) -> BoxResult<()> {
        loop {
            let at = self.pushes.recv_timeout(Duration::from_secs(2))?;
            if at >= t0 {
                let ns = |a: Instant, b: Instant| b.saturating_duration_since(a).as_nanos() as u64;
                self.release_returned.push(ns(t0, returned));
                self.push_arrived.push(ns(t0, at));
                self.reaction.push(ns(at, t1));
                return Ok(());
            }
        }
    }
}

fn one(front: Front, url: &str, samples: usize, probe: bool) -> BoxResult<J> {
    let ns = util::fresh_namespace("wakeup");
    let mut probe = if probe {
        Some(Probe::start(url, format!("{ns}:lock-released"))?)
    } else {
        None
    };
    let key = "wakeup";
    let warmup = 20;
    let config = || Config::new(&ns).wait(Duration::from_secs(10));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<BoxResultSend<Instant>>();
    let mut wake = Vec::with_capacity(samples);
    let mut admin = util::connect(url)?;
    let commandstats;
    let (before, after) = match front {
        Front::Blocking => {
            let holder = redlease::blocking::Locker::connect(url, config())?;
            let waiter = Arc::new(redlease::blocking::Locker::connect(url, config())?);
            let w = waiter.clone();
            let thread = std::thread::spawn(move || {
                while go_rx.recv().is_ok() {
                    let r = w.acquire(key).and_then(|lease| {
                        let t1 = Instant::now();
                        lease.release().map(|_| t1)
                    });
                    let _ = done_tx.send(r.map_err(|e| e.to_string()));
                }
            });
            let mut before = waiter.stats();
            for i in 0..samples + warmup {
                if i == warmup {
                    before = waiter.stats();
                    CommandStats::reset(&mut admin)?;
                }
                let lease = holder.acquire(key)?;
                let busy = waiter.stats().busy_replies;
                go_tx.send(())?;
                until_waiting(|| waiter.stats(), busy)?;
                let t0 = Instant::now();
                lease.release()?;
                let returned = Instant::now();
                let t1 = done_rx.recv()??;
                if i >= warmup {
                    wake.push(t1.duration_since(t0).as_nanos() as u64);
                    if let Some(p) = &mut probe {
                        p.record(t0, returned, t1)?;
                    }
                }
            }
            let after = waiter.stats();
            commandstats = CommandStats::read(&mut admin)?;
            drop(go_tx);
            thread.join().map_err(|_| "the waiter thread panicked")?;
            holder.shutdown()?;
            waiter.shutdown()?;
            (before, after)
        }
        Front::Async => {
            let holder = smol::block_on(redlease::aio::Locker::connect(url, config()))?;
            let waiter = Arc::new(smol::block_on(redlease::aio::Locker::connect(
                url,
                config(),
            ))?);
            let w = waiter.clone();
            let thread = std::thread::spawn(move || {
                while go_rx.recv().is_ok() {
                    let r = smol::block_on(async {
                        let lease = w.acquire(key).await?;
                        let t1 = Instant::now();
                        lease.release().await.map(|_| t1)
                    });
                    let _ = done_tx.send(r.map_err(|e| e.to_string()));
                }
            });
            let mut before = waiter.stats();
            for i in 0..samples + warmup {
                if i == warmup {
                    before = waiter.stats();
                    CommandStats::reset(&mut admin)?;
                }
                let lease = smol::block_on(holder.acquire(key))?;
                let busy = waiter.stats().busy_replies;
                go_tx.send(())?;
                until_waiting(|| waiter.stats(), busy)?;
                let t0 = Instant::now();
                smol::block_on(lease.release())?;
                let returned = Instant::now();
                let t1 = done_rx.recv()??;
                if i >= warmup {
                    wake.push(t1.duration_since(t0).as_nanos() as u64);
                    if let Some(p) = &mut probe {
                        p.record(t0, returned, t1)?;
                    }
                }
            }
            let after = waiter.stats();
            commandstats = CommandStats::read(&mut admin)?;
            drop(go_tx);
            thread.join().map_err(|_| "the waiter thread panicked")?;
            smol::block_on(holder.shutdown())?;
            smol::block_on(waiter.shutdown())?;
            (before, after)
        }
    };
    let rtt = util::ping(front, url, 2_000)?;
    let rtt_p50 = util::p50(&rtt);
    let idle_rtt = util::ping_after_idle(front, url, 200, Duration::from_millis(2))?;
    let plain = util::plain_rtt_fields(front, url, "wakeup_p50", util::p50(&wake))?;
    let mut j = J::obj([
        ("samples", J::from(wake.len())),
        ("warmup_samples", J::from(warmup)),
        ("wakeup", util::summary_us(&wake)),
        ("wakeup_p50_rtt", util::in_rtt(util::p50(&wake), rtt_p50)),
        ("wakeup_p99_rtt", util::in_rtt(util::p99(&wake), rtt_p50)),
        ("rtt", util::summary_us(&rtt)),
        ("rtt_connection", J::from(rtt_connection(front))),
        ("rtt_after_2ms_idle", util::summary_us(&idle_rtt)),
        (
            "wakeup_p50_in_rtt_after_idle",
            util::in_rtt(util::p50(&wake), util::p50(&idle_rtt)),
        ),
        ("waiter_stats_delta", stats_delta(&before, &after)),
        (
            "redis_per_acquisition_note",
            J::from(
                "INFO commandstats over the timed samples; each sample is two acquisitions \
                 (the holder's and the waiter's) and their releases",
            ),
        ),
    ]);
    j.extend(
        contention::redis_per_acquisition(front, &commandstats, 2 * wake.len())
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    );
    j.extend(plain);
    if let Some(p) = probe {
        j.set(
            "split",
            J::obj([
                (
                    "release_call_returned",
                    util::summary_us(&p.release_returned),
                ),
                (
                    "notification_reached_plain_subscriber",
                    util::summary_us(&p.push_arrived),
                ),
                ("from_that_push_to_acquired", util::summary_us(&p.reaction)),
                (
                    "note",
                    J::from(
                        "µs from the holder calling release; the plain subscriber is a \
                         redis::Connection in SUBSCRIBE mode on the same channel",
                    ),
                ),
            ]),
        );
    }
    Ok(j)
}

type BoxResultSend<T> = Result<T, String>;
