//! Worker threads on two lockers contend for one key; every holder writes
//! through a fenced store kept in Redis (`redlease::fenced::FencedStore`),
//! which rejects a write whose fence is lower than one it already accepted.
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

use redlease::fenced::{FencedStore, WriteError};
use redlease::{blocking::Locker, Config, Fence};

mod common;
use common::ThrowawayServer;

const KEY: &str = "example:nightly-report";

type WorkerError = Box<dyn Error + Send + Sync>;

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
    let client = redis::Client::open(url.as_str())?;
    let store = FencedStore::new("redlease-example");
    let rejected = Arc::new(AtomicU64::new(0));
    let started = Instant::now();

    let handles: Vec<_> = (0..workers)
        .map(|worker| {
            let locker = lockers[worker % 2].clone();
            let client = client.clone();
            let store = store.clone();
            let rejected = rejected.clone();
            std::thread::spawn(move || -> Result<Vec<Fence>, WorkerError> {
                let mut conn = client.get_connection()?;
                let mut fences = Vec::new();
                for round in 0..rounds {
                    let lease = locker.acquire(KEY)?;
                    let fence = lease.fence();
                    println!(
                        "{:>6.1} ms  worker {worker} (locker {}) holds the lock, fence {fence}",
                        started.elapsed().as_secs_f64() * 1000.0,
                        worker % 2
                    );
                    let report = format!("worker {worker} round {round}");
                    match store.write(&mut conn, "nightly-report", fence, report) {
                        Ok(()) => {}
                        // A newer holder wrote already: this one lost its
                        // lease without knowing it.
                        Err(WriteError::Stale(_)) => {
                            rejected.fetch_add(1, Ordering::SeqCst);
                        }
                        // Redis failed: not a stale write, and not to be
                        // counted as one.
                        Err(e) => return Err(e.into()),
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
            Ok(Err(e)) => return Err(e),
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
