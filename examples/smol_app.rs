//! A few smol tasks contend for one key through one async locker and print
//! the fences they get.
//!
//! ```text
//! cargo run --example smol_app
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

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    smol::block_on(async {
        let config = Config::new("redlease-smol-example").lease(Duration::from_secs(5));
        let locker = Arc::new(Locker::connect(server.url(), config).await?);
        let tasks: Vec<_> = (0..4)
            .map(|task| {
                let locker = locker.clone();
                smol::spawn(async move {
                    for _ in 0..3 {
                        let lease = locker.acquire("example:smol").await?;
                        println!("task {task} holds the lock with fence {}", lease.fence());
                        async_io::Timer::after(Duration::from_millis(5)).await;
                        lease.release().await?;
                    }
                    Ok::<_, redlease::Error>(())
                })
            })
            .collect();
        for task in tasks {
            task.await?;
        }
        println!("stats: {:?}", locker.stats());
        locker.shutdown().await?;
        Ok(())
    })
}
