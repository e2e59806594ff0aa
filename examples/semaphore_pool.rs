//! A pool of K permits shared by N workers on two lockers: at most K
//! workers hold a permit at once, and every holder writes through
//! `redlease::fenced` with its permit's (slot, fence), so a holder whose
//! permit ran out while it stalled cannot overwrite its slot's successor.
//!
//! ```text
//! cargo run --example semaphore_pool
//! ```
//!
//! Uses `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway `redis-server`
//! on a free loopback port (and stops it at the end). `WORKERS` (default 8),
//! `PERMITS` (default 3) and `ROUNDS` (default 4) size the run. At the end
//! the example shows the most holders it saw at once, and a stale write
//! (a permit that outlived its lease) being refused.
#![allow(clippy::disallowed_methods)] // an example may read the clock and sleep

use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::fenced::{FencedStore, WriteError};
use redlease::{blocking::Locker, AcquireOptions, Config, WithLock};

mod common;
use common::ThrowawayServer;

const POOL: &str = "example:db-pool";

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let workers: usize = env_or("WORKERS", 8);
    let permits: u32 = env_or("PERMITS", 3);
    let rounds: usize = env_or("ROUNDS", 4);

    let config = Config::new("redlease-example")
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(60));
    let lockers = [
        Locker::connect(url.as_str(), config.clone())?,
        Locker::connect(url.as_str(), config)?,
    ];
    let pools = [
        lockers[0].semaphore(POOL, permits)?,
        lockers[1].semaphore(POOL, permits)?,
    ];
    let store = FencedStore::new("redlease-example");
    let client = redis::Client::open(url.as_str())?;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();

    std::thread::scope(|scope| -> Result<(), Box<dyn Error + Send + Sync>> {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let pool = pools[worker % 2].clone();
                let (store, client) = (store.clone(), client.clone());
                let (holding, most) = (holding.clone(), most.clone());
                scope.spawn(move || -> Result<(), Box<dyn Error + Send + Sync>> {
                    let mut conn = client.get_connection()?;
                    for round in 0..rounds {
                        pool.with_permit(WithLock::new().extend(true), |permit, _lost| {
                            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            println!(
                                "{:>7.1} ms  worker {worker} holds slot {} (fence {}), {now} holding",
                                started.elapsed().as_secs_f64() * 1000.0,
                                permit.slot(),
                                permit.fence(),
                            );
                            let value = format!("worker {worker}, round {round}");
                            let written = store.write_permit(
                                &mut conn,
                                "example:table",
                                permit.slot(),
                                permit.fence(),
                                value,
                            );
                            std::thread::sleep(Duration::from_millis(20));
                            holding.fetch_sub(1, Ordering::SeqCst);
                            written.map_err(|e| format!("worker {worker}: {e}"))?;
                            Ok::<_, Box<dyn Error + Send + Sync>>(())
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for handle in handles {
            handle.join().map_err(|_| "a worker panicked")??;
        }
        Ok(())
    })
    .map_err(|e| -> Box<dyn Error> { e.to_string().into() })?;
    println!(
        "{} workers × {rounds} rounds through {permits} permits: at most {} held at once",
        workers,
        most.load(Ordering::SeqCst)
    );

    // A holder that stalls past its lease: its slot goes to someone else,
    // whose write wins; the stalled holder's late write is refused.
    let mut conn = client.get_connection()?;
    let short = AcquireOptions::new().lease(Duration::from_millis(200));
    let stalled = pools[0].acquire_with(short)?;
    std::thread::sleep(Duration::from_millis(300));
    let fresh = pools[1].acquire()?;
    let mut successor = fresh;
    let mut others = Vec::new();
    while successor.slot() != stalled.slot() {
        others.push(successor);
        successor = pools[1].acquire()?;
    }
    store.write_permit(
        &mut conn,
        "example:table",
        successor.slot(),
        successor.fence(),
        "successor",
    )?;
    match store.write_permit(
        &mut conn,
        "example:table",
        stalled.slot(),
        stalled.fence(),
        "stalled",
    ) {
        Err(WriteError::Stale(stale)) => println!(
            "the stalled holder of slot {} (fence {}) was refused: slot's fence is {}",
            stalled.slot(),
            stalled.fence(),
            stale.current
        ),
        other => return Err(format!("expected a stale write, got {other:?}").into()),
    }
    drop(stalled);
    drop(others);
    successor.release()?;
    for locker in &lockers {
        locker.shutdown()?;
    }
    Ok(())
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
