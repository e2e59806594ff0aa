//! Two candidates of one election on two lockers (two processes in real
//! use): the first leads; the second waits, takes over when the first
//! resigns, and leads in a higher term, which a store checks as a fence.
//!
//! ```text
//! cargo run --example election
//! ```
//!
//! Uses `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway
//! `redis-server` on a free loopback port (and stops it at the end).
#![allow(clippy::disallowed_methods)] // examples/common waits for the throwaway server

use std::error::Error;
use std::time::Duration;

use redlease::{blocking::Locker, Config};

mod common;
use common::ThrowawayServer;

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let config = Config::new("redlease-example")
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(30));
    let host_a = Locker::connect(url.as_str(), config.clone())?;
    let host_b = Locker::connect(url.as_str(), config)?;

    let a = host_a.election("scheduler")?;
    let leading = a.campaign(b"host-a:8080")?;
    println!("host-a leads in term {}", leading.term());

    std::thread::scope(|scope| -> Result<(), Box<dyn Error>> {
        let b = scope.spawn(|| -> Result<(), redlease::Error> {
            let election = host_b.election("scheduler")?;
            // Waits (up to 30 s) while host-a leads.
            let leading = election.campaign(b"host-b:8080")?;
            println!("host-b leads in term {}", leading.term());
            leading.resign()?;
            Ok(())
        });
        if let Some(leader) = a.leader()? {
            let value = String::from_utf8_lossy(&leader.value);
            println!("anyone reads the leader: {value} in term {}", leader.term);
        }
        // Resigning wakes host-b's campaign at once.
        leading.resign()?;
        b.join().map_err(|_| "host-b's thread panicked")??;
        Ok(())
    })?;
    host_a.shutdown()?;
    host_b.shutdown()?;
    Ok(())
}
