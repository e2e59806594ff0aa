//! A transfer between two accounts under one multi-key lease: both keys at
//! once or neither, a fence for each, and both balances written through
//! the fenced store in one step, all or none.
//!
//! ```text
//! cargo run --example multi_key
//! ```
//!
//! Uses `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway
//! `redis-server` on a free loopback port (and stops it at the end).
#![allow(clippy::disallowed_methods)] // examples/common waits for the throwaway server

use std::error::Error;
use std::time::Duration;

use redlease::fenced::FencedStore;
use redlease::{blocking::Locker, Config};

mod common;
use common::ThrowawayServer;

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let config = Config::new("redlease-example").lease(Duration::from_secs(5));
    let locker = Locker::connect(url.as_str(), config)?;
    let store = FencedStore::new("redlease-example");
    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;

    // The order of the keys does not matter: a transfer the other way,
    // taking {account:9, account:7}, waits for this one and never deadlocks.
    let lease = locker.acquire_all(&["account:7", "account:9"])?;
    let fence = |key| lease.fence_of(key).ok_or("not a key of the lease");
    println!(
        "holding account:7 (fence {}) and account:9 (fence {})",
        fence("account:7")?,
        fence("account:9")?
    );
    // A single-key lease of either account is busy meanwhile.
    let busy = locker.try_acquire("account:9").err();
    println!(
        "a single-key try on account:9: {}",
        busy.map_or("granted", |e| e.code())
    );
    store.write_all(
        &mut conn,
        &[
            ("account:7", fence("account:7")?, "balance 60"),
            ("account:9", fence("account:9")?, "balance 140"),
        ],
    )?;
    println!("both balances written");
    lease.release()?;
    locker.shutdown()?;
    Ok(())
}
