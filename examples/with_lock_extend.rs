//! A job that runs three times longer than its lease, kept alive by
//! `with_lock(.., WithLock::new().extend(true), ..)`, while a second process
//! keeps trying the same key and sees `LOCK_BUSY` until the job is done.
//!
//! ```text
//! cargo run --example with_lock_extend
//! ```
//!
//! Uses the server named by `REDLEASE_EXAMPLE_URL` when set (never
//! `REDIS_URL`); otherwise starts a throwaway `redis-server`.
#![allow(clippy::disallowed_methods)] // an example may read the clock and sleep

use std::error::Error;
use std::process::Command;
use std::time::{Duration, Instant};

use redlease::{blocking::Locker, AcquireOptions, Config, WithLock};

mod common;
use common::ThrowawayServer;

const KEY: &str = "example:long-job";
const LEASE: Duration = Duration::from_millis(1000);
const JOB: Duration = Duration::from_millis(3000);

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some("--observe") {
        let url = args.next().ok_or("--observe needs a URL")?;
        return observe(&url);
    }

    let server = ThrowawayServer::start_unless_configured()?;
    let url = server.url();
    let config = Config::new("redlease-example").lease(LEASE);
    let locker = Locker::connect(url.as_str(), config)?;

    let report = locker.with_lock(KEY, WithLock::new().extend(true), |lease, lost| {
        println!(
            "job: holding {KEY} with fence {} and a {LEASE:?} lease",
            lease.fence()
        );
        let observer = Command::new(std::env::current_exe()?)
            .args(["--observe", &url])
            .spawn()?;
        let started = Instant::now();
        while started.elapsed() < JOB {
            if lost.wait_timeout(Duration::from_millis(500)) {
                return Err(lost.cause().map_or_else(|| "lease lost".into(), Into::into));
            }
            println!(
                "job: {:>4} ms in, lease valid for another {:>4} ms (renewed every {} ms)",
                started.elapsed().as_millis(),
                lease.remaining().as_millis(),
                LEASE.as_millis() / 2
            );
        }
        Ok::<_, Box<dyn Error>>((observer, started.elapsed()))
    });
    let (mut observer, took) = report?;
    println!(
        "job: done after {} ms (lease {} ms), released",
        took.as_millis(),
        LEASE.as_millis()
    );
    let status = observer.wait()?;
    locker.shutdown()?;
    if !status.success() {
        return Err("the observer did not see the lock change hands".into());
    }
    Ok(())
}

/// The second process: tries the key without waiting until it gets it.
fn observe(url: &str) -> Result<(), Box<dyn Error>> {
    let locker = Locker::connect(url, Config::new("redlease-example").lease(LEASE))?;
    let deadline = Instant::now() + JOB * 3;
    let mut busy = 0;
    while Instant::now() < deadline {
        match locker.acquire_with(KEY, AcquireOptions::new().wait(Duration::ZERO)) {
            Ok(lease) => {
                println!(
                    "observer: got {KEY} (fence {}) after {busy} LOCK_BUSY replies",
                    lease.fence()
                );
                lease.release()?;
                locker.shutdown()?;
                return if busy > 0 {
                    Ok(())
                } else {
                    Err("never saw the job hold the lock".into())
                };
            }
            Err(e) if e.code() == "LOCK_BUSY" => {
                busy += 1;
                if busy % 4 == 1 {
                    println!(
                        "observer: LOCK_BUSY, holder has {} ms left",
                        e.holder_remaining().unwrap_or_default().as_millis()
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err("the job never released the lock".into())
}
