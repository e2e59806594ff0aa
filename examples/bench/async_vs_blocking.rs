//! `async-vs-blocking`: the async locker's uncontended cycle
//! (acquire + release of one key) against the blocking locker's, in one
//! process and one run, block by block, under each executor an
//! application might use and over each connection kind.
//!
//! Rows: for every connection kind (plain TCP to each `--hosts` name, and
//! where given a unix socket, TLS and a Cluster), one blocking row and one
//! async row per `--executors` entry. Each block runs `--cycles/--blocks`
//! cycles on every row of a kind in turn (the first row rotating from
//! block to block), so the rows see the same machine. Per row: p50/p99 of
//! the cycle, the context switches and CPU time of the whole process per
//! cycle (`/proc/self/task`), and each over the blocking row of its kind.
//! The per-block p50 ratio's median is given beside the pooled one: it
//! follows the machine's load less.
//!
//! Executors: `smol` (`smol::block_on`), `async-io` (`async_io::block_on`),
//! `futures` (`futures::executor::block_on`), `tokio-current` (a
//! current-thread runtime's `block_on`), `tokio-multi` (spawned on a
//! two-worker multi-thread runtime, as a server's task runs), `async-std`
//! (`async_std::task::block_on`). Each async locker is opened under its own
//! executor; `--warmup N` cycles per row come first (0: none).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use redlease::Config;

use super::json::J;
use super::util::{self, ns_since, process_counters};
use super::{Args, BoxResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Executor {
    Smol,
    AsyncIo,
    Futures,
    TokioCurrent,
    TokioMulti,
    AsyncStd,
}

impl Executor {
    const ALL: [Executor; 6] = [
        Executor::Smol,
        Executor::AsyncIo,
        Executor::Futures,
        Executor::TokioCurrent,
        Executor::TokioMulti,
        Executor::AsyncStd,
    ];

    fn name(self) -> &'static str {
        match self {
            Executor::Smol => "smol",
            Executor::AsyncIo => "async-io",
            Executor::Futures => "futures",
            Executor::TokioCurrent => "tokio-current",
            Executor::TokioMulti => "tokio-multi",
            Executor::AsyncStd => "async-std",
        }
    }

    fn parse(s: &str) -> BoxResult<Executor> {
        Executor::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("--executors: unknown executor {s:?}").into())
    }
}

/// The runtimes, built once.
struct Executors {
    tokio_current: tokio::runtime::Runtime,
    tokio_multi: tokio::runtime::Runtime,
}

impl Executors {
    fn new() -> BoxResult<Executors> {
        Ok(Executors {
            // IO on, as in `#[tokio::main]`: with feature `tokio` the
            // connections opened in them go on their reactor.
            tokio_current: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            tokio_multi: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        })
    }

    fn run<T: Send + 'static>(
        &self,
        ex: Executor,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> T {
        match ex {
            Executor::Smol => smol::block_on(fut),
            Executor::AsyncIo => async_io::block_on(fut),
            Executor::Futures => futures::executor::block_on(fut),
            Executor::TokioCurrent => self.tokio_current.block_on(fut),
            Executor::TokioMulti => {
                let task = self.tokio_multi.spawn(fut);
                self.tokio_multi
                    .block_on(task)
                    .expect("the benchmark task panicked")
            }
            Executor::AsyncStd => async_std::task::block_on(fut),
        }
    }
}

/// How to reach one connection kind.
#[derive(Clone)]
#[allow(clippy::large_enum_variant, reason = "a few, built once")]
enum Target {
    Url(String),
    #[cfg_attr(not(feature = "tls-rustls"), allow(dead_code))]
    Client(redis::Client),
    Cluster(Vec<String>),
}

enum Locker {
    Blocking(redlease::blocking::Locker),
    Async(Arc<redlease::aio::Locker>, Executor),
}

struct Row {
    kind: String,
    locker: Locker,
    key: Arc<str>,
    cycles: Vec<u64>,
    block_p50: Vec<u64>,
    switches: u64,
    cpu_ns: u64,
}

impl Row {
    fn front(&self) -> &'static str {
        match self.locker {
            Locker::Blocking(_) => "blocking",
            Locker::Async(_, ex) => ex.name(),
        }
    }
}

type Samples = Result<Vec<u64>, String>;

async fn async_cycles(locker: Arc<redlease::aio::Locker>, key: Arc<str>, n: usize) -> Samples {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let lease = locker.acquire(&key).await.map_err(|e| e.to_string())?;
        lease.release().await.map_err(|e| e.to_string())?;
        out.push(ns_since(t));
    }
    Ok(out)
}

fn blocking_cycles(locker: &redlease::blocking::Locker, key: &str, n: usize) -> Samples {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let lease = locker.acquire(key).map_err(|e| e.to_string())?;
        lease.release().map_err(|e| e.to_string())?;
        out.push(ns_since(t));
    }
    Ok(out)
}

fn cycles(ex: &Executors, row: &Row, n: usize) -> Samples {
    match &row.locker {
        Locker::Blocking(l) => blocking_cycles(l, &row.key, n),
        Locker::Async(l, e) => ex.run(*e, async_cycles(l.clone(), row.key.clone(), n)),
    }
}

fn open_blocking(target: &Target, config: Config) -> BoxResult<redlease::blocking::Locker> {
    Ok(match target {
        Target::Url(url) => redlease::blocking::Locker::connect(url.as_str(), config)?,
        Target::Client(client) => redlease::blocking::Locker::new(client.clone(), config)?,
        Target::Cluster(nodes) => {
            redlease::blocking::Locker::connect_cluster(nodes.iter().map(String::as_str), config)?
        }
    })
}

fn open_async(
    ex: &Executors,
    e: Executor,
    target: &Target,
    config: Config,
) -> BoxResult<redlease::aio::Locker> {
    let target = target.clone();
    let opened = ex.run(e, async move {
        match target {
            Target::Url(url) => redlease::aio::Locker::connect(url, config).await,
            Target::Client(client) => redlease::aio::Locker::new(client, config).await,
            Target::Cluster(nodes) => redlease::aio::Locker::connect_cluster(nodes, config).await,
        }
    });
    Ok(opened?)
}

/// `url` with its host replaced by `host`.
fn with_host(url: &str, host: &str) -> BoxResult<String> {
    let (old, port) = util::host_port(url)?;
    Ok(url.replacen(&format!("{old}:{port}"), &format!("{host}:{port}"), 1))
}

fn list(args: &Args, name: &str, default: &str) -> Vec<String> {
    args.get(name)
        .unwrap_or(default)
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let total: usize = args.num("cycles", 10_000)?;
    let blocks: usize = args.num("blocks", 10)?.max(1);
    let warmup: usize = args.num("warmup", 500)?;
    let executors = list(
        args,
        "executors",
        "smol,futures,tokio-current,tokio-multi,async-std",
    )
    .iter()
    .map(|s| Executor::parse(s))
    .collect::<BoxResult<Vec<_>>>()?;
    // Where the other kinds are slower to set up, fewer executors.
    let other_executors = match args.get("other-executors") {
        Some(_) => list(args, "other-executors", "")
            .iter()
            .map(|s| Executor::parse(s))
            .collect::<BoxResult<Vec<_>>>()?,
        None => executors.clone(),
    };
    let mut kinds: Vec<(String, Target, &[Executor])> = Vec::new();
    for host in list(args, "hosts", "127.0.0.1,localhost") {
        kinds.push((
            format!("tcp {host}"),
            Target::Url(with_host(&url, &host)?),
            &executors,
        ));
    }
    if let Some(unix) = args.get("unix-url") {
        kinds.push((
            "unix".into(),
            Target::Url(unix.to_owned()),
            &other_executors,
        ));
    }
    #[cfg(feature = "tls-rustls")]
    if let Some(tls) = args.get("tls-url") {
        let ca = std::fs::read(args.get("tls-ca").ok_or("--tls-url needs --tls-ca FILE")?)?;
        let client = redis::Client::build_with_tls(
            tls,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            },
        )?;
        kinds.push(("tls".into(), Target::Client(client), &other_executors));
    }
    #[cfg(not(feature = "tls-rustls"))]
    if args.get("tls-url").is_some() {
        return Err("--tls-url needs a build with --features tls-rustls".into());
    }
    if let Some(nodes) = args.get("cluster-urls") {
        let nodes = nodes.split(',').map(str::to_owned).collect();
        kinds.push(("cluster".into(), Target::Cluster(nodes), &other_executors));
    }

    let ex = Executors::new()?;
    let ns = util::fresh_namespace("async-vs-blocking");
    let mut rows: Vec<Vec<Row>> = Vec::new();
    for (k, (kind, target, kind_executors)) in kinds.iter().enumerate() {
        let config = || Config::new(format!("{ns}:{k}"));
        let row = |locker, i: usize| Row {
            kind: kind.clone(),
            locker,
            key: Arc::from(format!("key-{i}")),
            cycles: Vec::with_capacity(total),
            block_p50: Vec::new(),
            switches: 0,
            cpu_ns: 0,
        };
        let mut of_kind = vec![row(Locker::Blocking(open_blocking(target, config())?), 0)];
        for (i, &e) in kind_executors.iter().enumerate() {
            let locker = open_async(&ex, e, target, config())?;
            of_kind.push(row(Locker::Async(Arc::new(locker), e), i + 1));
        }
        for row in &of_kind {
            if warmup > 0 {
                cycles(&ex, row, warmup)?;
            }
        }
        rows.push(of_kind);
    }

    let mut loads = Vec::new();
    for b in 0..blocks {
        let n = total * (b + 1) / blocks - total * b / blocks;
        loads.push(J::from(util::loadavg()));
        for of_kind in &mut rows {
            let len = of_kind.len();
            for i in 0..len {
                let row = &mut of_kind[(i + b) % len];
                let (s0, c0) = process_counters();
                let mut samples = cycles(&ex, row, n)?;
                let (s1, c1) = process_counters();
                row.switches += s1.saturating_sub(s0);
                row.cpu_ns += c1.saturating_sub(c0);
                row.cycles.extend_from_slice(&samples);
                samples.sort_unstable();
                row.block_p50.push(util::pct(&samples, 50.0));
            }
        }
    }
    loads.push(J::from(util::loadavg()));

    let mut out = Vec::new();
    for of_kind in &rows {
        let blocking = &of_kind[0];
        let figures = |row: &Row| {
            let n = row.cycles.len() as f64;
            (
                util::p50(&row.cycles) as f64,
                util::p99(&row.cycles) as f64,
                row.switches as f64 / n,
                row.cpu_ns as f64 / n / 1000.0,
            )
        };
        let (b50, b99, bsw, bcpu) = figures(blocking);
        for row in of_kind {
            let (p50, p99, sw, cpu) = figures(row);
            let mut block_ratios: Vec<f64> = row
                .block_p50
                .iter()
                .zip(&blocking.block_p50)
                .map(|(a, b)| *a as f64 / *b as f64)
                .collect();
            block_ratios.sort_by(f64::total_cmp);
            let median_block_ratio = block_ratios[block_ratios.len() / 2];
            eprintln!(
                "async-vs-blocking {:12} {:13}: p50 {:6.1} µs ({:.2}×, per-block median {:.2}×), \
                 p99 {:7.1} µs ({:.2}×), {:.2} switches/cycle ({:.2}×), CPU {:5.1} µs/cycle ({:.2}×)",
                row.kind,
                row.front(),
                p50 / 1000.0,
                p50 / b50,
                median_block_ratio,
                p99 / 1000.0,
                p99 / b99,
                sw,
                sw / bsw,
                cpu,
                cpu / bcpu,
            );
            out.push(J::obj([
                ("kind", J::from(row.kind.as_str())),
                ("front", J::from(row.front())),
                ("cycles", J::from(row.cycles.len())),
                ("cycle", util::summary_us(&row.cycles)),
                (
                    "block_p50_us",
                    J::Arr(
                        row.block_p50
                            .iter()
                            .map(|v| J::round(*v as f64 / 1000.0, 1))
                            .collect(),
                    ),
                ),
                ("client_context_switches_per_cycle", J::round(sw, 2)),
                ("client_cpu_us_per_cycle", J::round(cpu, 2)),
                (
                    "to_blocking",
                    J::obj([
                        ("cycle_p50", J::round(p50 / b50, 3)),
                        (
                            "cycle_p50_median_of_blocks",
                            J::round(median_block_ratio, 3),
                        ),
                        ("cycle_p99", J::round(p99 / b99, 3)),
                        ("client_context_switches_per_cycle", J::round(sw / bsw, 3)),
                        ("client_cpu_us_per_cycle", J::round(cpu / bcpu, 3)),
                    ]),
                ),
            ]));
        }
    }
    for of_kind in rows {
        for row in of_kind {
            match row.locker {
                Locker::Blocking(l) => l.shutdown()?,
                Locker::Async(l, e) => ex.run(e, async move { l.shutdown().await })?,
            }
        }
    }
    Ok(J::obj([
        ("warmup_cycles_per_row", J::from(warmup)),
        ("blocks", J::from(blocks)),
        ("loadavg_at_each_block", J::Arr(loads)),
        ("rows", J::Arr(out)),
    ]))
}
