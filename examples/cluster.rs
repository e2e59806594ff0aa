//! Both lockers on Redis Cluster: keys spread over the primaries, a waiter
//! woken by a sharded release notification, and fences per key.
//!
//! ```text
//! cargo run --example cluster
//! ```
//!
//! Uses `REDLEASE_EXAMPLE_CLUSTER_NODES` (comma-separated node URLs) when
//! set (never `REDIS_URL`);
//! otherwise starts a throwaway 3-primary cluster with `redis-server` and
//! `redis-cli --cluster create`.
#![allow(clippy::disallowed_methods)] // an example may read the clock and sleep

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{blocking, AcquireOptions, Config};

mod common;
use common::ThrowawayCluster;

fn main() -> Result<(), Box<dyn Error>> {
    let cluster = ThrowawayCluster::start_unless_configured()?;
    let config = Config::new("redlease-cluster-example").lease(Duration::from_secs(10));

    // Blocking: one locker, keys whose hash tags land on different slots.
    let locker = Arc::new(blocking::Locker::connect_cluster(
        cluster.nodes(),
        config.clone(),
    )?);
    for key in ["invoice:1", "invoice:2", "invoice:3"] {
        let lease = locker.acquire(key)?;
        println!("blocking: {key} held with fence {}", lease.fence());
        lease.release()?;
    }

    // A waiter on another thread is woken by the release notification
    // (SSUBSCRIBE on the node that owns the key's slot).
    let held = locker.acquire("report")?;
    let waiter = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let lease = locker.acquire_with(
                "report",
                AcquireOptions::new().wait(Duration::from_secs(10)),
            );
            (lease.map(|l| l.fence()), started.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    println!("blocking: releasing report (fence {})", held.fence());
    held.release()?;
    let (fence, waited) = waiter.join().map_err(|_| "the waiter panicked")?;
    println!(
        "blocking: the waiter got report with fence {} after {} ms; notifications received: {}",
        fence?,
        waited.as_millis(),
        locker.stats().notifications
    );
    locker.shutdown()?;

    // Async: the same on the redis crate's async cluster connection.
    futures::executor::block_on(async {
        let locker = redlease::aio::Locker::connect_cluster(cluster.nodes(), config).await?;
        for key in ["invoice:1", "invoice:2", "invoice:3"] {
            let lease = locker.acquire(key).await?;
            println!("async: {key} held with fence {}", lease.fence());
            lease.release().await?;
        }
        locker.shutdown().await?;
        Ok::<_, redlease::Error>(())
    })?;
    Ok(())
}
