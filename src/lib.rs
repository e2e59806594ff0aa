//! Leases on Redis with fencing tokens: a distributed mutex whose every grant
//! carries a strictly increasing number that downstream stores can check.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease::{blocking::Locker, Config};
//!
//! let config = Config::new("my-service")          // namespace: required
//!     .lease(Duration::from_secs(10))             // default lease
//!     .wait(Duration::from_secs(5));              // default wait; ZERO = try once
//! let locker = Locker::connect("redis://127.0.0.1:6379/0", config)?;
//!
//! let lease = locker.acquire("job:42")?;
//! // Hand the fence to every store the lease protects.
//! let fence = lease.fence();
//! # let _ = fence;
//! lease.release()?;
//! locker.shutdown()?;
//! # Ok::<(), redlease::Error>(())
//! ```
//!
//! # How it works
//!
//! An acquire is one Lua script (one round trip): `SET NX PX` of the lock and,
//! only if that succeeded, the next fence, `max(counter + 1, Redis TIME in
//! ms × 1000)`, so fences keep increasing even after Redis lost its data or
//! failed over to a replica that missed the last grants. Release and renew are one script each and compare the owner token.
//! Inside one locker, waiters for a key form a FIFO line and only the head
//! talks to Redis; a release publishes a notification that wakes the head at
//! once, and safety polls cover notifications lost in transit.
//!
//! The logic lives in a sans-IO core (no I/O, no clock reads, no threads)
//! and in operations written once above it (acquire-and-wait, renew,
//! release, the `with_lock` renewer, shutdown), each a small state value
//! that says what to send next and what to wait for. Two thin front ends
//! with the same API drive them: [`blocking`] for std threads and `aio` for
//! futures on any executor (smol, async-std, `futures::executor`, or inside
//! a tokio program, without a tokio runtime). A waiter whose attempt fails
//! while its wait lasts keeps its place and tries again.
//!
//! A locker talks to one server (`Locker::connect`), a Redis Cluster
//! (`connect_cluster`) or the primary that Redis Sentinel names
//! ([`blocking::Locker::connect_sentinel`]: the primary is asked for again
//! after a connection error, `READONLY` or `MASTERDOWN`, and the
//! notification subscriber follows it).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `aio` | yes | the async front end `redlease::aio` (redis `smol-comp`, `futures`, `async-io`) |
//! | `cli` | yes | the `redlease` command-line tool (a binary; the library does not use it) |
//! | `tls-rustls` | no | `rediss://` URLs on both front ends (redis `tls-rustls` and `smol-rustls-comp`, rustls with `ring`); custom roots through `redis::Client::build_with_tls` and `Locker::new`, behind Sentinel through [`SentinelOptions`] |
//!
//! # Guarantees and their limits
//!
//! One Redis server decides who holds a lease: there is no Redlock and no
//! global FIFO (order is kept only inside one locker). A lease's validity
//! ([`blocking::Lease::is_valid`]) is a conservative local estimate counted
//! from when the acquire was sent. A process can still be paused (GC, swap,
//! a stopped VM) past its lease and act on a lock it lost; only a store that
//! checks the fence atomically turns that into a rejected write, also
//! across a failover that lost the last grants: every fence is floored at
//! the server's clock (README's limits list the conditions).
//!
//! # When not to use this
//!
//! If your store can do the mutual exclusion itself (a database row lock, a
//! compare-and-set on a version), prefer it. If you need locks that survive
//! the loss of a Redis primary without a fencing store behind them, use a
//! consensus system (etcd, ZooKeeper) instead.
//!
//! # Errors
//!
//! One [`Error`] type with a stable [`Error::code`] per kind. A command that
//! certainly did not take effect is `PROVIDER_FAILED`; one that may have
//! (timeout, dropped connection, unexpected reply) is `OUTCOME_UNKNOWN` and is
//! never retried automatically. Keys, owner tokens and server addresses never
//! appear in `Display`, `Debug` or log lines.

#[cfg(feature = "aio")]
pub mod aio;
pub mod blocking;
mod cancel;
mod clock;
mod cluster;
mod config;
pub(crate) mod core;
mod driver;
mod entropy;
mod error;
mod eviction;
pub mod fenced;
/// The property checks behind the fuzz targets in `fuzz/` (only under
/// `--cfg fuzzing`, which cargo-fuzz passes; hidden: not an API).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::core::model::{check_line, check_names, check_replies};
}
mod lost;
#[cfg(any(test, feature = "bench-hooks"))]
#[doc(hidden)]
pub mod micro;
mod replication;
mod sentinel;
mod stats;

pub use crate::cancel::CancelHandle;
pub use crate::config::{AcquireOptions, Config, WithLock};
pub use crate::core::{Fence, ReleaseOutcome, RenewOutcome, ReplyError};
pub use crate::error::{Error, LostCause, Operation};
pub use crate::lost::Lost;
pub use crate::sentinel::SentinelOptions;
pub use crate::stats::Stats;

/// Compiles the README's Rust examples as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
