//! A few tokio tasks contend for one key through one async locker and print
//! the fences they get. With feature `tokio`, the locker's connection goes
//! on this runtime's reactor (README "In a tokio program").
//!
//! ```text
//! cargo run --example tokio_app --features tokio
//! ```
//!
//! Uses the server named by `REDLEASE_EXAMPLE_URL` when set (never
//! `REDIS_URL`); otherwise starts a throwaway `redis-server`.
#![allow(clippy::disallowed_methods)] // an example may read the clock

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use redlease::{aio::Locker, Config};

mod common;
use common::ThrowawayServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let config = Config::new("redlease-tokio-example").lease(Duration::from_secs(5));
    let locker = Arc::new(Locker::connect(server.url(), config).await?);
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    let lease = locker.acquire("example:tokio").await?;
                    println!("task {task} holds the lock with fence {}", lease.fence());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    lease.release().await?;
                }
                Ok::<_, redlease::Error>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    println!("stats: {:?}", locker.stats());
    locker.shutdown().await?;
    Ok(())
}
