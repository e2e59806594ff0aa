//! A document rendered by readers while an editor saves it: readers share
//! a read lease and fill a cache with what they rendered, carrying the
//! read's epoch; the editor takes the write lease and saves with its fence.
//! A slow reader that started before the save fills the cache too late,
//! and `redlease::fenced` refuses its stale fill.
//!
//! ```text
//! cargo run --example rw_cache
//! ```
//!
//! Uses `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway
//! `redis-server` on a free loopback port (and stops it at the end).
#![allow(clippy::disallowed_methods)] // an example may read the clock and sleep

use std::error::Error;
use std::time::Duration;

use redlease::fenced::{FencedStore, WriteError};
use redlease::{blocking::Locker, AcquireOptions, Config};

mod common;
use common::ThrowawayServer;

const DOC: &str = "example:doc:7";

fn main() -> Result<(), Box<dyn Error>> {
    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let config = Config::new("redlease-example")
        .lease(Duration::from_secs(5))
        .wait(Duration::from_secs(10));
    let editor = Locker::connect(url.as_str(), config.clone())?;
    let renderer = Locker::connect(url.as_str(), config)?;
    let store = FencedStore::new("redlease-example");
    let mut conn = redis::Client::open(url.as_str())?.get_connection()?;

    // The editor saves version 1.
    let doc = editor.rw_lock(DOC)?;
    let save = doc.write()?;
    store.write(&mut conn, "doc:7", save.fence(), "version 1")?;
    println!("editor saved version 1 with fence {}", save.fence());
    save.release()?;

    // A fast reader renders version 1 and fills the cache: current.
    let rendering = renderer.rw_lock(DOC)?;
    let fast = rendering.read()?;
    store.write_derived(&mut conn, "doc:7:html", fast.epoch(), "<p>version 1</p>")?;
    println!("a reader at epoch {} filled the cache", fast.epoch());
    fast.release()?;

    // A slow reader starts rendering version 1 ...
    let slow = rendering.read_with(AcquireOptions::new().lease(Duration::from_millis(300)))?;
    let slow_epoch = slow.epoch();
    println!("a slow reader starts at epoch {slow_epoch}");
    // ... its read lease runs out while it works; the editor gets in and
    // saves version 2, and invalidates the cache with its fence.
    std::thread::sleep(Duration::from_millis(400));
    let save = doc.write()?;
    store.write(&mut conn, "doc:7", save.fence(), "version 2")?;
    store.write(&mut conn, "doc:7:html", save.fence(), "")?;
    println!("editor saved version 2 with fence {}", save.fence());
    save.release()?;

    // The slow reader's fill of version 1 comes too late.
    match store.write_derived(&mut conn, "doc:7:html", slow_epoch, "<p>version 1</p>") {
        Err(WriteError::Stale(stale)) => println!(
            "the slow reader's fill (epoch {slow_epoch}) was refused: the cache is at fence {}",
            stale.current
        ),
        other => return Err(format!("expected a stale fill, got {other:?}").into()),
    }
    drop(slow);
    editor.shutdown()?;
    renderer.shutdown()?;
    Ok(())
}
