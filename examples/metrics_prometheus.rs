//! The metrics of feature `metrics` through a Prometheus exporter, and
//! redlease's `log` records through `tracing`.
//!
//! ```text
//! cargo run --example metrics_prometheus --features metrics
//! ```
//!
//! The exporter is installed as the global recorder *before* the locker is
//! built (a locker registers its metrics then), without an HTTP listener:
//! the example prints the exposition text at the end, which a real service
//! would serve on its `/metrics` endpoint. Uses the server named by
//! `REDLEASE_EXAMPLE_URL` when set; otherwise starts a throwaway
//! `redis-server` on a free loopback port.
#![allow(clippy::disallowed_methods)] // an example may read the clock

use std::error::Error;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use redlease::{blocking::Locker, AcquireOptions, Config};

mod common;
use common::ThrowawayServer;

fn main() -> Result<(), Box<dyn Error>> {
    // redlease logs through `log`; `LogTracer` turns its records into
    // `tracing` events for whatever subscriber the application runs.
    tracing_log::LogTracer::init()?;
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .finish();
    tracing::subscriber::set_global_default(subscriber)?;

    let handle = PrometheusBuilder::new().install_recorder()?;

    let server = ThrowawayServer::start_unless_configured()?;
    let config = Config::new("example-metrics").metrics_label("billing");
    let locker = Locker::connect(server.url(), config)?;

    let lease = locker.acquire("invoice-run")?;
    // A second acquire that may not wait: `outcome="busy"`.
    let busy = locker.acquire_with("invoice-run", AcquireOptions::new().wait(Duration::ZERO));
    assert!(busy.is_err_and(|e| e.is_busy()));
    lease.release()?;
    let permit = locker.semaphore("exports", 4)?.acquire()?;
    permit.release()?;
    locker.shutdown()?;

    println!("{}", handle.render());
    Ok(())
}
