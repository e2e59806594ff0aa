//! The benchmark harness: what the crate costs a user and Redis.
//!
//! ```text
//! benchmarks/run.sh                      # every scenario, own redis-server
//! cargo run --release --example bench -- SCENARIO --url redis://127.0.0.1:PORT/0 [--out FILE]
//! ```
//!
//! Scenarios (each prints a short summary on stderr and its JSON on stdout,
//! or to `--out`): `uncontended`, `contention`, `semaphore` (contention on
//! a fenced semaphore, `--permits 3`), `rw` (read-mostly contention on a
//! read-write lease, with a lock baseline), `wakeup`, `many-keys`,
//! `scale` (distinct keys over 1..8 processes, one key over 1..128 waiters
//! per process), `election` (the failover and observe goals against
//! the idle round trip and a plain notification), `async-vs-blocking` (the async cycle under each executor
//! and connection kind against the blocking one), `multi` (an
//! uncontended multi-key cycle of `--keys 8` against the single-key one,
//! docs/PROTOCOL.md §6), `memory`, `core` (micro-benchmarks of the sans-IO core;
//! needs `--features bench-hooks`). `contention`, `semaphore`, `rw`,
//! `scale` and `memory` re-execute this binary as worker processes
//! (`contention-worker`, `memory-child`). `free-port` prints a free
//! loopback port (for `benchmarks/run.sh`).
//!
//! A flag without a value (`--quick`) is a switch. The result file holds
//! the load average before and after the scenario.
//!
//! `--metrics noop` (built with `--features bench-hooks,metrics`) installs a
//! no-op `metrics` recorder first: compare its `uncontended` figures with a
//! build without the feature, in one run (see BENCHMARKS.md).
//!
//! Never point it at a Redis that holds data you care about: it runs
//! `CONFIG RESETSTAT`, `ACL SETUSER` and writes keys under `redlease-bench`.
//! See BENCHMARKS.md for what each figure means.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock and sleeps

use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;

#[path = "bench/async_hops.rs"]
mod async_hops;
#[path = "bench/async_vs_blocking.rs"]
mod async_vs_blocking;
#[path = "bench/contention.rs"]
mod contention;
#[path = "bench/core.rs"]
mod core_micro;
#[path = "bench/election.rs"]
mod election;
#[path = "bench/handover_steps.rs"]
mod handover_steps;
#[path = "bench/json.rs"]
mod json;
#[path = "bench/many_keys.rs"]
mod many_keys;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/multi.rs"]
mod multi;
#[path = "bench/rw.rs"]
mod rw;
#[path = "bench/scale.rs"]
mod scale;
#[path = "bench/script_floor.rs"]
mod script_floor;
#[allow(unreachable_pub, reason = "shared with the tests, where it is `pub`")]
#[path = "../tests/support/script_source.rs"]
mod script_source;
#[path = "bench/uncontended.rs"]
mod uncontended;
#[path = "bench/util.rs"]
mod util;
#[path = "bench/wakeup.rs"]
mod wakeup;

use json::J;

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// `--flag value` pairs after the scenario name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Args {
    scenario: String,
    flags: BTreeMap<String, String>,
}

impl Args {
    fn parse() -> BoxResult<Self> {
        let mut it = std::env::args().skip(1).peekable();
        let scenario = it
            .next()
            .ok_or("usage: bench SCENARIO --url URL [--flag value]...")?;
        let mut flags = BTreeMap::new();
        while let Some(flag) = it.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --flag, got {flag:?}"))?;
            // A flag without a value (`--quick`) is a switch.
            let value = match it.next_if(|v| !v.starts_with("--")) {
                Some(v) => v,
                None => "1".to_owned(),
            };
            flags.insert(name.to_owned(), value);
        }
        Ok(Args { scenario, flags })
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.flags.get(name).map(String::as_str)
    }

    pub(crate) fn url(&self) -> BoxResult<String> {
        Ok(self.get("url").ok_or("--url is required")?.to_owned())
    }

    pub(crate) fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> BoxResult<T> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: not a number: {v:?}").into()),
        }
    }

    /// `--front blocking|async|both` (default both).
    pub(crate) fn fronts(&self) -> BoxResult<Vec<util::Front>> {
        match self.get("front").unwrap_or("both") {
            "both" => Ok(vec![util::Front::Blocking, util::Front::Async]),
            other => Ok(vec![util::Front::parse(other)?]),
        }
    }

    /// The flags as given, for the JSON record of the run.
    pub(crate) fn to_json(&self) -> J {
        J::obj(
            self.flags
                .iter()
                .filter(|(k, _)| k.as_str() != "out")
                .map(|(k, v)| (k.as_str(), J::from(v.as_str()))),
        )
    }
}

/// `--metrics noop` (a binary built with the feature `metrics`): installs
/// the facade's no-op recorder before any locker is built, to measure what
/// recording costs when the application records nothing.
fn install_metrics_recorder(args: &Args) -> BoxResult<()> {
    match args.get("metrics") {
        None | Some("off") => Ok(()),
        #[cfg(feature = "metrics")]
        Some("noop") => metrics::set_global_recorder(metrics::NoopRecorder)
            .map_err(|e| format!("--metrics noop: {e}").into()),
        Some(other) => Err(format!(
            "--metrics {other}: only `noop`, in a build with the feature `metrics`"
        )
        .into()),
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run() -> BoxResult<()> {
    let args = Args::parse()?;
    install_metrics_recorder(&args)?;
    let load_before = util::loadavg();
    let result = match args.scenario.as_str() {
        "free-port" => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            println!("{port}");
            return Ok(());
        }
        "contention-worker" => return contention::worker(&args),
        "memory-child" => return memory::child(&args),
        "async-hops-row" => return async_hops::row(&args),
        "uncontended" => uncontended::run(&args)?,
        "async-hops" => async_hops::run(&args)?,
        "async-vs-blocking" => async_vs_blocking::run(&args)?,
        "script-floor" => script_floor::run(&args)?,
        "contention" | "semaphore" => contention::run(&args)?,
        "rw" => rw::run(&args)?,
        "wakeup" => wakeup::run(&args)?,
        "election" => election::run(&args)?,
        "scale" => scale::run(&args)?,
        "many-keys" => many_keys::run(&args)?,
        "multi" => multi::run(&args)?,
        "memory" => memory::run(&args)?,
        "core" => core_micro::run(&args)?,
        other => return Err(format!("unknown scenario {other:?}").into()),
    };
    let load_after = util::loadavg();
    eprintln!(
        "{}: load average {load_before} before, {load_after} after",
        args.scenario
    );
    let meta = util::meta(&args)?;
    let doc = J::obj([
        ("scenario", J::from(args.scenario.as_str())),
        ("meta", meta),
        ("loadavg_before", J::from(load_before)),
        ("loadavg_after", J::from(load_after)),
        ("results", result),
    ]);
    let text = doc.pretty();
    match args.get("out") {
        Some(path) => {
            std::fs::write(path, format!("{text}\n"))?;
            eprintln!("wrote {path}");
        }
        None => {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{text}")?;
        }
    }
    Ok(())
}
