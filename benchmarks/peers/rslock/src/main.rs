//! A contention worker of `examples/bench` (the peer) on rslock
//! 0.10: Redlock, here on one server, with the crate's default retries.
//! Each waiter loops `lock()` (rslock's `acquire` is that loop: 3 tries,
//! a random pause below 200 ms between them), holds, and `unlock`s.
//!
//! Protocol (the same as `bench contention-worker`): flags `--url`, `--ns`,
//! `--key`, `--waiters`, `--hold-us` (others are ignored); prints `READY`,
//! waits for `GO` on stdin, prints `A` per grant, stops at `STOP`, then
//! prints one `R waiter slot fence mode called acquired release_called
//! released` line per grant (µs of the shared clock), an `S` line of
//! zeros and `END`. rslock has no fence: a grant's "fence" is the µs it
//! was acquired at, so the analysis orders grants by time.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// rslock's lease: as long as redlease's workers' (5 s).
const TTL: Duration = Duration::from_secs(5);

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

struct Rec {
    waiter: usize,
    called: u64,
    acquired: u64,
    release_called: u64,
    released: u64,
}

fn sys_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn flag(args: &[String], name: &str) -> Option<String> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).cloned()
}

fn main() -> BoxResult<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = flag(&args, "--url").ok_or("--url")?;
    let ns = flag(&args, "--ns").ok_or("--ns")?;
    let key = flag(&args, "--key").ok_or("--key")?;
    let waiters: usize = flag(&args, "--waiters").map_or(Ok(8), |w| w.parse())?;
    let hold = Duration::from_micros(flag(&args, "--hold-us").map_or(Ok(2_000), |h| h.parse())?);
    let resource = format!("{ns}:rslock:{key}");
    let out = Mutex::new(std::io::stdout());
    let line = |s: &str| {
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    };
    let stop = AtomicBool::new(false);
    let (go_tx, go_rx) = mpsc::channel();
    std::thread::scope(|scope| -> BoxResult<()> {
        scope.spawn(|| {
            for input in std::io::stdin().lock().lines() {
                match input.as_deref().map(str::trim) {
                    Ok("GO") => {
                        let _ = go_tx.send(());
                    }
                    Ok("STOP") | Err(_) => break,
                    Ok(_) => {}
                }
            }
            stop.store(true, Ordering::SeqCst);
        });
        let manager = rslock::LockManager::new(vec![url.as_str()]);
        line("READY");
        go_rx.recv()?;
        let loops = (0..waiters).map(|waiter| {
            let (manager, resource, stop, line) = (&manager, &resource, &stop, &line);
            async move {
                let mut recs = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let called = sys_us();
                    let Ok(lock) = manager.lock(resource.as_str(), TTL).await else {
                        continue;
                    };
                    let acquired = sys_us();
                    line("A");
                    smol::Timer::after(hold).await;
                    let release_called = sys_us();
                    manager.unlock(&lock).await;
                    recs.push(Rec {
                        waiter,
                        called,
                        acquired,
                        release_called,
                        released: sys_us(),
                    });
                }
                recs
            }
        });
        let recs = smol::block_on(futures::future::join_all(loops));
        for r in recs.iter().flatten() {
            line(&format!(
                "R {} 0 {} 0 {} {} {} {}",
                r.waiter, r.acquired, r.called, r.acquired, r.release_called, r.released
            ));
        }
        line("S 0 0 0 0 0 0 0");
        line("END");
        Ok(())
    })
}
