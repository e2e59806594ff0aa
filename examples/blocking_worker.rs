//! Worker threads on two lockers contend for one key; every holder writes
//! through a fenced store kept in Redis, which rejects a write whose fence is
//! lower than one it already accepted.
//!
//! ```text
//! cargo run --example blocking_worker
//! ```
//!
//! Uses the server named by `REDLEASE_EXAMPLE_URL` when set (never
//! `REDIS_URL`); otherwise starts a throwaway `redis-server`
//! on a free loopback port (and stops it at the end). `WORKERS` (default 6)
//! and `ROUNDS` (default 5) size the run.
#![allow(clippy::disallowed_methods)] // an example may read the clock and sleep

use std::error::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{blocking::Locker, Config, Fence};

mod common;
use common::ThrowawayServer;

/// The fenced store: accepts a write only if its fence is not lower than the
/// last accepted one. Fences stay below 2^53, so Lua's doubles compare them
/// exactly.
const FENCED_WRITE: &str = r#"
local last = redis.call('HGET', KEYS[1], 'fence')
if last and tonumber(last) > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
"#;

const KEY: &str = "example:nightly-report";

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let workers: usize = env_or("WORKERS", 6);
    let rounds: usize = env_or("ROUNDS", 5);

    let config = Config::new("redlease-example")
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(30));
    let lockers = [
        Arc::new(Locker::connect(url.as_str(), config.clone())?),
        Arc::new(Locker::connect(url.as_str(), config)?),
    ];
    let store = redis::Client::open(url.as_str())?;
    let script = redis::Script::new(FENCED_WRITE);
    let rejected = Arc::new(AtomicU64::new(0));
    let started = Instant::now();

    let handles: Vec<_> = (0..workers)
        .map(|worker| {
            let locker = lockers[worker % 2].clone();
            let store = store.clone();
            let script = script.clone();
            let rejected = rejected.clone();
            std::thread::spawn(move || -> Result<Vec<Fence>, redlease::Error> {
                let mut conn =
                    store
                        .get_connection()
                        .map_err(|source| redlease::Error::ProviderFailed {
                            op: redlease::Operation::Connect,
                            source,
                        })?;
                let mut fences = Vec::new();
                for round in 0..rounds {
                    let lease = locker.acquire(KEY)?;
                    let fence = lease.fence();
                    println!(
                        "{:>6.1} ms  worker {worker} (locker {}) holds the lock, fence {fence}",
                        started.elapsed().as_secs_f64() * 1000.0,
                        worker % 2
                    );
                    let accepted: i64 = script
                        .key("redlease-example:store")
                        .arg(fence.get())
                        .arg(format!("worker {worker} round {round}"))
                        .invoke(&mut conn)
                        .unwrap_or(0);
                    if accepted == 0 {
                        rejected.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                    fences.push(fence);
                    lease.release()?;
                }
                Ok(fences)
            })
        })
        .collect();

    let mut all = Vec::new();
    for handle in handles {
        match handle.join() {
            Ok(Ok(fences)) => all.extend(fences),
            Ok(Err(e)) => return Err(Box::new(e)),
            Err(_) => return Err("a worker thread panicked".into()),
        }
    }
    for locker in &lockers {
        locker.shutdown()?;
    }
    all.sort();
    all.dedup();
    println!(
        "{} acquisitions by {workers} workers on 2 lockers, {} distinct fences, \
         stale writes rejected: {}",
        workers * rounds,
        all.len(),
        rejected.load(Ordering::SeqCst)
    );
    Ok(())
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
