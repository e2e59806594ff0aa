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
use crate::util::{host_port, loadavg, ns_since, process_counters, resp3_client, summary_us};
use crate::{Args, BoxResult};

/// The samples `run` takes (warm-up first, then `n` timed PINGs, in one
/// loop on one executor), with the process's switches and CPU per PING
/// over the whole call.
fn measured<F>(name: &str, n: usize, run: F) -> BoxResult<J>
where
    F: FnOnce(usize) -> BoxResult<Vec<u64>>,
{
    let (s0, c0) = process_counters();
    let samples = run(n)?;
    let (s1, c1) = process_counters();
    let pings = (n + n / 10) as f64;
    let switches = s1.saturating_sub(s0) as f64 / pings;
    let cpu_us = c1.saturating_sub(c0) as f64 / pings / 1000.0;
    eprintln!(
        "async-hops {name:>70}: ping p50 {:>6.1} µs | switches/ping {switches:.2} | cpu µs/ping {cpu_us:.1}",
        crate::util::p50(&samples) as f64 / 1000.0
    );
    Ok(J::obj([
        ("connection", J::from(name)),
        ("ping_us", summary_us(&samples)),
        ("context_switches_per_ping", J::round(switches, 2)),
        ("cpu_us_per_ping", J::round(cpu_us, 2)),
    ]))
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

pub(crate) fn run(args: &Args) -> BoxResult<J> {
    let url = args.url()?;
    let n: usize = args.num("pings", 5_000)?;
    let rounds: usize = args.num("rounds", 3)?;
    let load_before = loadavg();
    let client = resp3_client(&url)?;
    let info: &'static redis::RedisConnectionInfo = Box::leak(Box::new(
        client.get_connection_info().redis_settings().clone(),
    ));
    let mut rows = Vec::new();
    for _ in 0..rounds {
        let mut plain = redis::Client::open(url.as_str())?.get_connection()?;
        rows.push(measured("blocking redis::Connection", n, |n| {
            let ping = || {
                let reply = redis::cmd("PING").query::<String>(&mut plain);
                std::future::ready(reply.map(drop).map_err(Into::into))
            };
            futures::executor::block_on(pings(n, ping))
        })?);
        for timeout in [Some(Duration::from_secs(2)), None] {
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(timeout);
            let name = match timeout {
                Some(_) => "multiplexed, driver on smol-1, response timer per command",
                None => "multiplexed, driver on smol-1, no response timer",
            };
            rows.push(measured(name, n, |n| {
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
            })?);
        }
        for on_smol in [true, false] {
            let name = if on_smol {
                "multiplexed, driver polled by the caller, smol::block_on"
            } else {
                "multiplexed, driver polled by the caller, futures::executor::block_on"
            };
            rows.push(measured(name, n, |n| {
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
                if on_smol {
                    smol::block_on(work)
                } else {
                    futures::executor::block_on(work)
                }
            })?);
        }
    }
    Ok(J::obj([
        ("pings_per_row", J::from(n as u64)),
        ("rows", J::Arr(rows)),
        ("load_before", J::from(load_before.as_str())),
        ("load_after", J::from(loadavg().as_str())),
    ]))
}
