//! Memory: peak RSS of a process holding 10 000 tracked leases with 128
//! waiters blocked behind one of them, and RSS across a long run of
//! acquire + release cycles (no growth expected).
//!
//! Each front end runs in a fresh child process (`memory-child`), so its
//! VmHWM is its own; the child reports `M name value` lines and `C cycles
//! rss_kib` checkpoints (one per second of the cycle phase).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{AcquireOptions, CancelHandle, Config};

use super::json::J;
use super::util::{self, rss_kib, Front};
use super::{Args, BoxResult};

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let mut out = Vec::new();
    for front in args.fronts()? {
        let (target, min, budget, concurrency) = match front {
            Front::Async => (
                args.num("async-cycles", 1_000_000u64)?,
                args.num("async-min-cycles", 200_000u64)?,
                args.num("async-budget-s", 30u64)?,
                args.num("async-concurrency", 64usize)?,
            ),
            Front::Blocking => (
                args.num("blocking-cycles", 1_000_000u64)?,
                args.num("blocking-min-cycles", 50_000u64)?,
                args.num("blocking-budget-s", 15u64)?,
                args.num("blocking-threads", 4usize)?,
            ),
        };
        let child = Command::new(std::env::current_exe()?)
            .args(["memory-child", "--url", &url, "--front", front.name()])
            .args(["--leases", &args.num("leases", 10_000usize)?.to_string()])
            .args(["--waiters", &args.num("waiters", 128usize)?.to_string()])
            .args(["--cycles", &target.to_string()])
            .args(["--min-cycles", &min.to_string()])
            .args(["--budget-s", &budget.to_string()])
            .args(["--concurrency", &concurrency.to_string()])
            .args([
                "--acquire-batch",
                &args.num("acquire-batch", 64usize)?.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("memory-child for {} failed", front.name()).into());
        }
        let mut fields: Vec<(String, J)> = Vec::new();
        let mut checkpoints = Vec::new();
        for line in BufReader::new(output.stdout.as_slice()).lines() {
            let line = line?;
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["M", name, value] => {
                    let v = value
                        .parse::<u64>()
                        .map(J::from)
                        .or_else(|_| value.parse::<f64>().map(|x| J::round(x, 1)))
                        .unwrap_or_else(|_| J::from(*value));
                    fields.push(((*name).to_owned(), v));
                }
                ["C", cycles, rss] => checkpoints.push(J::arr([
                    J::from(cycles.parse::<u64>().unwrap_or(0)),
                    J::from(rss.parse::<u64>().unwrap_or(0)),
                ])),
                _ => {}
            }
        }
        let mut j = J::Obj(fields);
        j.set(
            "cycle_phase_checkpoints_cycles_rss_kib",
            J::Arr(checkpoints),
        );
        let f = |k: &str| j.get(k).and_then(J::as_f64).unwrap_or(f64::NAN);
        eprintln!(
            "memory {:8}: baseline {:.0} KiB, with {:.0} leases + {:.0} waiters {:.0} KiB \
             (VmHWM {:.0} KiB); {:.0} cycles in {:.1} s: RSS {:.0} -> {:.0} KiB",
            front.name(),
            f("rss_baseline_kib"),
            f("leases_held"),
            f("waiters_blocked"),
            f("rss_with_leases_and_waiters_kib"),
            f("vmhwm_after_leases_and_waiters_kib"),
            f("cycles_run"),
            f("cycle_phase_s"),
            f("rss_after_warmup_kib"),
            f("rss_after_cycles_kib"),
        );
        out.push((front.name(), j));
    }
    Ok(J::obj(out))
}

fn m(name: &str, value: impl std::fmt::Display) {
    println!("M {name} {value}");
}

struct Plan {
    leases: usize,
    waiters: usize,
    target: u64,
    min: u64,
    budget: Duration,
    concurrency: usize,
    /// Async: how many of the leases are acquired at once.
    acquire_batch: usize,
}

impl Plan {
    fn done(&self, count: u64, started: Instant) -> bool {
        count >= self.target || (count >= self.min && started.elapsed() >= self.budget)
    }
}

/// Samples RSS once a second with the cycle count, until stopped.
fn sampler(count: Arc<AtomicU64>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut next = Instant::now() + Duration::from_secs(1);
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next {
                println!("C {} {}", count.load(Ordering::SeqCst), rss_kib().0);
                next += Duration::from_secs(1);
            }
            util::sleep(Duration::from_millis(20));
        }
    })
}

pub(crate) fn child(args: &Args) -> BoxResult<()> {
    let url = args.url()?;
    let front = Front::parse(args.get("front").ok_or("--front")?)?;
    let plan = Plan {
        leases: args.num("leases", 10_000)?,
        waiters: args.num("waiters", 128)?,
        target: args.num("cycles", 1_000_000)?,
        min: args.num("min-cycles", 200_000)?,
        budget: Duration::from_secs(args.num("budget-s", 30)?),
        concurrency: args.num("concurrency", 64)?,
        acquire_batch: args.num("acquire-batch", 64)?,
    };
    let ns = util::fresh_namespace("memory");
    let config = Config::new(ns)
        .max_tracked_leases(plan.leases + 1)
        .max_waiters(plan.leases.max(plan.waiters + plan.concurrency) + 1)
        .wait(Duration::from_secs(60));
    let keys: Vec<String> = (0..plan.leases).map(|i| format!("lease:{i}")).collect();
    m("rss_at_start_kib", rss_kib().0);
    m("leases_target", plan.leases);
    m("waiters_target", plan.waiters);
    match front {
        Front::Blocking => blocking_child(&url, config, &plan, &keys),
        Front::Async => async_child(&url, config, &plan, &keys),
    }
}

fn after_leases_and_waiters(tracked: usize, waiting: usize) {
    let (rss, hwm) = rss_kib();
    m("leases_held", tracked);
    m("waiters_blocked", waiting);
    m("rss_with_leases_and_waiters_kib", rss);
    m("vmhwm_after_leases_and_waiters_kib", hwm);
}

fn cycle_phase_report(count: u64, started: Instant, warm_rss: u64) {
    let elapsed = started.elapsed().as_secs_f64();
    let (rss, hwm) = rss_kib();
    m("cycles_run", count);
    m("cycle_phase_s", format!("{elapsed:.1}"));
    m("cycles_per_s", format!("{:.0}", count as f64 / elapsed));
    m("rss_after_warmup_kib", warm_rss);
    m("rss_after_cycles_kib", rss);
    m("rss_growth_kib", rss as i64 - warm_rss as i64);
    m("vmhwm_at_end_kib", hwm);
}

fn wait_for(what: &str, cond: impl Fn() -> bool) -> BoxResult<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        util::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn blocking_child(url: &str, config: Config, plan: &Plan, keys: &[String]) -> BoxResult<()> {
    let locker = Arc::new(redlease::blocking::Locker::connect(url, config)?);
    locker.acquire("warm")?.release()?;
    m("rss_baseline_kib", rss_kib().0);
    let mut leases = Vec::with_capacity(keys.len());
    for key in keys {
        leases.push(locker.acquire(key)?);
    }
    let cancel = CancelHandle::new();
    let threads: Vec<_> = (0..plan.waiters)
        .map(|_| {
            let locker = locker.clone();
            let cancel = cancel.clone();
            let key = keys[0].clone();
            std::thread::spawn(move || {
                let r = locker.acquire_with(&key, AcquireOptions::new().cancel(cancel));
                matches!(r, Err(ref e) if e.code() == "CANCELLED")
            })
        })
        .collect();
    wait_for("the waiters", || locker.stats().waiters == plan.waiters)?;
    util::sleep(Duration::from_millis(50));
    let s = locker.stats();
    after_leases_and_waiters(s.tracked_leases, s.waiters);
    cancel.cancel();
    let cancelled = threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .filter(|ok| *ok)
        .count();
    m("waiters_cancelled", cancelled);
    for lease in leases {
        lease.release()?;
    }
    m("rss_after_release_kib", rss_kib().0);
    m(
        "tracked_leases_after_release",
        locker.stats().tracked_leases,
    );

    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let warm_mark = (plan.min / 10).max(1);
    let warm_rss = Arc::new(AtomicU64::new(0));
    let sampler = sampler(count.clone(), stop.clone());
    let started = Instant::now();
    let workers: Vec<_> = (0..plan.concurrency)
        .map(|t| {
            let locker = locker.clone();
            let count = count.clone();
            let stop = stop.clone();
            let warm_rss = warm_rss.clone();
            let key = format!("cycle:{t}");
            std::thread::spawn(move || -> Result<(), redlease::Error> {
                while !stop.load(Ordering::SeqCst) {
                    locker.acquire(&key)?.release()?;
                    if count.fetch_add(1, Ordering::SeqCst) + 1 == warm_mark {
                        warm_rss.store(rss_kib().0, Ordering::SeqCst);
                    }
                }
                Ok(())
            })
        })
        .collect();
    while !plan.done(count.load(Ordering::SeqCst), started) {
        util::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.join().map_err(|_| "a cycle thread panicked")??;
    }
    let _ = sampler.join();
    m("cycle_concurrency", plan.concurrency);
    cycle_phase_report(
        count.load(Ordering::SeqCst),
        started,
        warm_rss.load(Ordering::SeqCst),
    );
    locker.shutdown()?;
    Ok(())
}

fn async_child(url: &str, config: Config, plan: &Plan, keys: &[String]) -> BoxResult<()> {
    smol::block_on(async {
        let locker = redlease::aio::Locker::connect(url, config).await?;
        locker.acquire("warm").await?.release().await?;
        m("rss_baseline_kib", rss_kib().0);
        let mut leases = Vec::with_capacity(keys.len());
        // At most `acquire_batch` acquires in flight (as many as the cycle
        // phase runs): the figure is what 10 000 held leases cost, not what
        // 1 000 acquire futures and their requests in flight at once do.
        for chunk in keys.chunks(plan.acquire_batch.max(1)) {
            for r in futures::future::join_all(chunk.iter().map(|k| locker.acquire(k))).await {
                leases.push(r?);
            }
        }
        let cancel = CancelHandle::new();
        let waiters =
            futures::future::join_all((0..plan.waiters).map(|_| {
                locker.acquire_with(&keys[0], AcquireOptions::new().cancel(cancel.clone()))
            }));
        let measure = async {
            let deadline = Instant::now() + Duration::from_secs(30);
            while locker.stats().waiters < plan.waiters && Instant::now() < deadline {
                async_io::Timer::after(Duration::from_millis(1)).await;
            }
            async_io::Timer::after(Duration::from_millis(50)).await;
            let s = locker.stats();
            after_leases_and_waiters(s.tracked_leases, s.waiters);
            cancel.cancel();
        };
        let (results, ()) = futures::join!(waiters, measure);
        let cancelled = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.code() == "CANCELLED"))
            .count();
        m("waiters_cancelled", cancelled);
        for lease in leases {
            lease.release().await?;
        }
        m("rss_after_release_kib", rss_kib().0);
        m(
            "tracked_leases_after_release",
            locker.stats().tracked_leases,
        );

        let count = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let warm_mark = (plan.min / 10).max(1);
        let warm_rss = AtomicU64::new(0);
        let sampler = sampler(count.clone(), stop.clone());
        let started = Instant::now();
        let tasks = (0..plan.concurrency).map(|t| {
            let locker = &locker;
            let count = &count;
            let warm_rss = &warm_rss;
            let key = format!("cycle:{t}");
            async move {
                while !plan.done(count.load(Ordering::SeqCst), started) {
                    locker.acquire(&key).await?.release().await?;
                    if count.fetch_add(1, Ordering::SeqCst) + 1 == warm_mark {
                        warm_rss.store(rss_kib().0, Ordering::SeqCst);
                    }
                }
                Ok::<_, redlease::Error>(())
            }
        });
        for r in futures::future::join_all(tasks).await {
            r?;
        }
        stop.store(true, Ordering::SeqCst);
        let _ = sampler.join();
        m("cycle_concurrency", plan.concurrency);
        cycle_phase_report(
            count.load(Ordering::SeqCst),
            started,
            warm_rss.load(Ordering::SeqCst),
        );
        locker.shutdown().await?;
        Ok(())
    })
}
