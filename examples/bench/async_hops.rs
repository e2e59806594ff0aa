//! `async-hops`: where the async front end's extra time per command goes.
//!
//! PING round trips, in one process and one run, on: a plain blocking
//! connection; the redis crate's multiplexed connection as the crate opens
//! it (driver spawned on smol's global executor, the `smol-1` thread),
//! with and without the redis crate's per-command response timer; and the
//! same connection driven by the caller's own future (the driver polled
//! beside the command, no `smol-1` thread) under `smol::block_on` and
//! under `futures::executor::block_on`. Beside the latency, the context
//! switches and the CPU time of the whole process per PING (summed over
//! its threads from `/proc/self/task/*/`), which depend far less on the
//! machine's load than the latency does.
//!
//! The self-driven rows are not how the library runs (see BENCHMARKS.md):
//! they show what the hop to the driver thread costs.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::compat::FuturesAsyncReadCompatExt;

use crate::json::J;
use crate::util::{host_port, loadavg, ns_since, pct, process_counters, resp3_client};
use crate::{Args, BoxResult};

/// The samples `run` takes (warm-up first, then `n` timed PINGs, in one
/// loop on one executor), with the process's context switches and CPU µs
/// per PING over the whole call.
fn measured<F>(n: usize, run: F) -> BoxResult<(Vec<u64>, f64, f64)>
where
    F: FnOnce(usize) -> BoxResult<Vec<u64>>,
{
    let (s0, c0) = process_counters();
    let samples = run(n)?;
    let (s1, c1) = process_counters();
    let pings = (n + n / 10) as f64;
    let switches = s1.saturating_sub(s0) as f64 / pings;
    let cpu_us = c1.saturating_sub(c0) as f64 / pings / 1000.0;
    Ok((samples, switches, cpu_us))
}

/// `n / 10` untimed then `n` timed runs of `ping`.
async fn pings<F, Fut>(n: usize, mut ping: F) -> BoxResult<Vec<u64>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = BoxResult<()>>,
{
    for _ in 0..n / 10 {
        ping().await?;
    }
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        ping().await?;
        samples.push(ns_since(t));
    }
    Ok(samples)
}

type Driver = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A multiplexed connection whose driver the caller polls.
async fn self_driven(
    url: &str,
    info: &'static redis::RedisConnectionInfo,
) -> BoxResult<(redis::aio::MultiplexedConnection, Driver)> {
    let (host, port) = host_port(url)?;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))?
        .next()
        .ok_or("no address")?;
    let tcp = async_io::Async::<std::net::TcpStream>::connect(addr).await?;
    tcp.get_ref().set_nodelay(true)?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let (conn, driver) =
        redis::aio::MultiplexedConnection::new_with_config(info, tcp.compat(), config).await?;
    Ok((conn, Box::pin(driver)))
}

async fn ping_beside(
    conn: &mut redis::aio::MultiplexedConnection,
    mut driver: &mut futures::future::Fuse<Driver>,
) -> BoxResult<()> {
    let cmd = redis::cmd("PING");
    let mut reply = cmd.query_async::<String>(conn).boxed().fuse();
    futures::select! {
        r = reply => { r?; Ok(()) }
        () = driver => Err("the connection's driver ended".into()),
    }
}

/// The rows, each measured in a fresh process (`async-hops-row`): a
/// process that once ran the redis crate's spawned connection keeps the
/// `smol-1` executor thread, which changes how async-io's reactor thread
/// behaves for every later row.
const ROWS: [&str; 5] = [
    "blocking redis::Connection",
    "multiplexed, driver on smol-1, response timer per command",
    "multiplexed, driver on smol-1, no response timer",
    "multiplexed, driven by the caller, smol::block_on",
    "multiplexed, driven by the caller, futures::executor::block_on",
];

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let n: usize = args.num("pings", 5_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let load_before = loadavg();
    let mut rows = Vec::new();
    for _ in 0..rounds {
        for (index, name) in ROWS.iter().enumerate() {
            let out = std::process::Command::new(std::env::current_exe()?)
                .args(["async-hops-row", "--url", &url])
                .args(["--row", &index.to_string(), "--pings", &n.to_string()])
                .output()?;
            if !out.status.success() {
                return Err(format!(
                    "async-hops-row {index}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
                .into());
            }
            let text = String::from_utf8(out.stdout)?;
            let fields: Vec<f64> = text
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()?;
            let [p50, p90, p99, switches, cpu_us] = fields[..] else {
                return Err(format!("async-hops-row {index} printed {text:?}").into());
            };
            eprintln!(
                "async-hops {name:>62}: ping p50 {p50:>6.1} µs | switches/ping {switches:.2} | cpu µs/ping {cpu_us:.1}"
            );
            rows.push(J::obj([
                ("connection", J::from(*name)),
                ("ping_p50_us", J::round(p50, 1)),
                ("ping_p90_us", J::round(p90, 1)),
                ("ping_p99_us", J::round(p99, 1)),
                ("context_switches_per_ping", J::round(switches, 2)),
                ("cpu_us_per_ping", J::round(cpu_us, 2)),
            ]));
        }
    }
    Ok(J::obj([
        ("pings_per_row", J::from(n as u64)),
        ("each_row_in_a_fresh_process", J::from(true)),
        ("rows", J::Arr(rows)),
        ("load_before", J::from(load_before.as_str())),
        ("load_after", J::from(loadavg().as_str())),
    ]))
}

/// One row of [`ROWS`] (`--row`), printed as `p50 p90 p99` (µs),
/// switches and CPU µs per PING on one line.
pub(crate) fn row(args: &Args) -> BoxResult<()> {
    let url = args.url()?;
    let n: usize = args.num("pings", 5_000)?;
    let index: usize = args.num("row", 0)?;
    let client = resp3_client(&url)?;
    let info: &'static redis::RedisConnectionInfo = Box::leak(Box::new(
        client.get_connection_info().redis_settings().clone(),
    ));
    let (samples, switches, cpu_us) = match index {
        0 => {
            let mut plain = redis::Client::open(url.as_str())?.get_connection()?;
            measured(n, |n| {
                let ping = || {
                    let reply = redis::cmd("PING").query::<String>(&mut plain);
                    std::future::ready(reply.map(drop).map_err(Into::into))
                };
                futures::executor::block_on(pings(n, ping))
            })?
        }
        1 | 2 => {
            let timeout = (index == 1).then_some(Duration::from_secs(2));
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(timeout);
            measured(n, |n| {
                smol::block_on(async {
                    let conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    pings(n, || {
                        let mut conn = conn.clone();
                        async move {
                            redis::cmd("PING").query_async::<String>(&mut conn).await?;
                            Ok(())
                        }
                    })
                    .await
                })
            })?
        }
        3 | 4 => measured(n, |n| {
            let work = async {
                let (mut conn, driver) = self_driven(&url, info).await?;
                let mut driver = driver.fuse();
                for _ in 0..n / 10 {
                    ping_beside(&mut conn, &mut driver).await?;
                }
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    ping_beside(&mut conn, &mut driver).await?;
                    samples.push(ns_since(t));
                }
                Ok::<_, Box<dyn std::error::Error>>(samples)
            };
            if index == 3 {
                smol::block_on(work)
            } else {
                futures::executor::block_on(work)
            }
        })?,
        other => return Err(format!("no async-hops row {other}").into()),
    };
    let mut sorted = samples;
    sorted.sort_unstable();
    let us = |p: f64| pct(&sorted, p) as f64 / 1000.0;
    println!("{} {} {} {switches} {cpu_us}", us(50.0), us(90.0), us(99.0));
    Ok(())
}
