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
//! # Where to look
//!
//! - Acquire, work, always release, with the lease kept alive while the
//!   work runs: [`blocking::Locker::with_lock`] with [`WithLock`] (loss
//!   reported through [`Lost`]).
//! - Redis Cluster: [`blocking::Locker::connect_cluster`] (keys spread
//!   over the primaries; sharded release notifications).
//! - The protected resource: [`fenced::FencedStore`], a store in Redis that
//!   refuses a write whose fence is lower than one it already accepted.
//! - Options: [`Config`] (per locker) and [`AcquireOptions`] (per call):
//!
//! | [`Config`] method | default | what it does |
//! |---|---|---|
//! | [`lease`](Config::lease) | 10 s | lease of acquires |
//! | [`wait`](Config::wait) | 5 s | how long an acquire waits; `ZERO` tries once ([`blocking::Locker::try_acquire`]) |
//! | [`poll_interval`](Config::poll_interval) | 25 ms | safety poll while notifications are unavailable |
//! | [`notify_poll_interval`](Config::notify_poll_interval) | 250 ms | safety poll while subscribed |
//! | [`max_waiters`](Config::max_waiters) | 128 | acquires in progress per locker |
//! | [`max_tracked_leases`](Config::max_tracked_leases) | 10 000 | leases tracked for cleanup at shutdown |
//! | [`shutdown_timeout`](Config::shutdown_timeout) | 5 s | bound on `shutdown()` |
//! | [`max_key_bytes`](Config::max_key_bytes) | 1024 | longest key |
//! | [`command_timeout`](Config::command_timeout) | 2 s | bound on connecting and on each command |
//! | [`min_replicas`](Config::min_replicas) | off | `WAIT n timeout` after acquire and renew |
//! | [`fence_counter_ttl`](Config::fence_counter_ttl) | never | let unused fence counters expire |
//!
//! - Errors: [`Error`], one stable [`Error::code`] per kind (stable across
//!   minor versions), and [`Error::is_busy`], [`Error::is_timeout`],
//!   [`Error::is_outcome_unknown`], [`Error::is_retryable`]:
//!
//! | code | meaning |
//! |---|---|
//! | `LOCK_BUSY` | held by someone else and the acquire may not wait ([`Error::Busy`]) |
//! | `WAIT_TIMEOUT` | the wait ran out ([`Error::WaitTimeout`]) |
//! | `QUEUE_FULL` | `max_waiters` acquires in progress ([`Error::QueueFull`]) |
//! | `TOO_MANY_LEASES` | `max_tracked_leases` leases held ([`Error::TooManyLeases`]) |
//! | `CANCELLED` | the acquire's [`CancelHandle`] was cancelled |
//! | `SHUTTING_DOWN` | the locker is shutting down |
//! | `PROVIDER_FAILED` | Redis certainly did not apply the command ([`Error::ProviderFailed`]) |
//! | `OUTCOME_UNKNOWN` | the command may have been applied ([`Error::OutcomeUnknown`], [`Error::UnexpectedReply`]) |
//! | `CLEANUP_TIMEOUT`, `CLEANUP_FAILED` | shutdown could not confirm every release |
//! | `INVALID_KEY`, `INVALID_CONFIG` | bad input; the message says why |
//! | `REPLICATION_FAILED` | fewer than `min_replicas` acknowledged ([`Error::ReplicationFailed`]) |
//! | `LOCK_LOST` | a lease kept alive by `with_lock` was lost ([`Error::LockLost`]) |
//!
//! # Semaphores
//!
//! [`blocking::Locker::semaphore`] (and `aio::Locker::semaphore`) gives at
//! most N holders at once. Each [`blocking::Permit`] is a slot with its own
//! lease key and fence counter, so a store checks `(slot, fence)` (see
//! [`fenced::FencedStore::write_permit`]); waiting, notifications, retries
//! and shutdown are the leases' own.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let pool = locker.semaphore("db-pool", 4)?;
//! let permit = pool.acquire()?;
//! println!("slot {} fence {}", permit.slot(), permit.fence());
//! permit.release()?;
//! # Ok(()) }
//! ```
//!
//! # Read-write leases
//!
//! [`blocking::Locker::rw_lock`] (and `aio::Locker::rw_lock`) gives many
//! readers at once or one writer, writers preferred. A
//! [`blocking::WriteLease`] has a fence; a [`blocking::ReadLease`] has an
//! epoch, the latest writer fence at its grant, which writes derived from
//! the read carry ([`fenced::FencedStore::write_derived`]).
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let doc = locker.rw_lock("doc:7")?;
//! let read = doc.read()?;
//! println!("epoch {}", read.epoch());
//! read.release()?;
//! # Ok(()) }
//! ```
//!
//! # Leader election
//!
//! [`blocking::Locker::election`] (and `aio::Locker::election`) elects one
//! leader per name across lockers and processes. A
//! [`blocking::Leadership`]'s term is a fence, its value (bytes) anyone
//! reads with [`Election::leader`]; a keeper thread renews it until it is
//! resigned or dropped.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let election = locker.election("billing-scheduler")?;
//! let leadership = election.campaign(b"host-a:4242")?;
//! println!("term {}", leadership.term());
//! leadership.resign()?;
//! # Ok(()) }
//! ```
//!
//! # Multi-key leases
//!
//! [`blocking::Locker::acquire_all`] (and `aio::Locker::acquire_all`)
//! takes up to 64 keys in one script, all or none, with a fence per key
//! from that key's own counter; waiting holds nothing, so two callers
//! taking `{a, b}` and `{b, a}` never deadlock.
//! [`fenced::FencedStore::write_all`] writes their resources all or none.
//!
//! ```no_run
//! # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
//! let lease = locker.acquire_all(&["account:7", "account:9"])?;
//! println!("fence of account:7: {:?}", lease.fence_of("account:7"));
//! lease.release()?;
//! # Ok(()) }
//! ```
//!
//! # Which to use
//!
//! | you need | use | the store checks |
//! |---|---|---|
//! | one holder at a time | a lease: [`blocking::Locker::acquire`], [`blocking::Locker::with_lock`] | its fence |
//! | at most N holders | a semaphore: [`blocking::Locker::semaphore`] | `(slot, fence)` |
//! | many readers or one writer | a read-write lease: [`blocking::Locker::rw_lock`] | the writers' fence, and the epoch for writes derived from a read |
//! | one leader whose value others read | an election: [`blocking::Locker::election`] | the term |
//! | several keys together | a multi-key lease: [`blocking::Locker::acquire_all`] | each key's fence, `fence_of(key)` |
//!
//! Leases are not reentrant: a key held by a lease is held for its own
//! locker and thread too. Acquiring it again while the lease is held is
//! `LOCK_BUSY` at once with `try_acquire`, and otherwise waits for that
//! lease to end (`WAIT_TIMEOUT`, or the key once the first lease expired,
//! which is then lost): pass the lease (or its fence) down instead of
//! acquiring again.
//!
//! The store outside Redis checks the fence itself: a SQL database keeps
//! it in a `BIGINT` column and writes only when the new fence is not
//! lower, checked and written in one transaction
//! (`examples/postgres_fencing.rs`, with the semaphore's and the
//! read-write lease's variants in the README's "Fencing the protected
//! resource").
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `aio` | yes | the async front end `redlease::aio` (redis `smol-comp`, `futures`, `async-io`), and the blocking front end's own plain TCP and unix connection (without it: the redis crate's, with a `PING` in front of each request on a reused one) |
//! | `cli` | no | the `redlease` command-line tool (a binary; the library does not use it): `cargo install redlease --features cli` |
//! | `tls-rustls` | no | `rediss://` URLs on both front ends (redis `tls-rustls` and `smol-rustls-comp`, rustls with `ring`); custom roots through `redis::Client::build_with_tls` and `Locker::new`, behind Sentinel through [`SentinelOptions`] |
//! | `tokio` | no | implies `aio`; a plain TCP or unix socket connection opened inside a tokio runtime (with its IO driver) uses that runtime's reactor, one context switch per round trip instead of two; never starts a runtime (README "In a tokio program") |
//! | `metrics` | no | the metrics of the README's "Metrics" section through the `metrics` facade 0.24 (the application installs the exporter before building a locker); label `locker` from [`Config::metrics_label`] |
//! | `test-server` | no | `redlease::testing`: a throwaway `redis-server` on a free loopback port for the tests of programs that use the crate |
//!
//! # Guarantees and their limits
//!
//! One Redis server decides who holds a lease: there is no Redlock. Order
//! is kept inside one locker and, with
//! [`Config::handover`] (the default), among waiting lockers in the order
//! they registered in the key's queue in Redis (docs/HANDOVER.md). A lease's validity
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

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "aio")]
#[cfg_attr(docsrs, doc(cfg(feature = "aio")))]
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
pub mod front;
mod handle;
mod key_names;
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
#[doc(hidden)]
pub mod probe;
mod replication;
mod sentinel;
mod server_version;
mod stats;
#[cfg(feature = "test-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-server")))]
pub mod testing;
mod url;

pub use crate::cancel::CancelHandle;
pub use crate::config::{AcquireOptions, Config, WithLock};
pub use crate::core::{
    Fence, Leader, Observation, ReleaseOutcome, RenewOutcome, ReplyError, Version,
};
pub use crate::error::{Error, LostCause, Operation};
pub use crate::handle::{kind, Election, Leadership, Lease, Locker, Observer, RwLock, Semaphore};
pub use crate::lost::Lost;
pub use crate::sentinel::SentinelOptions;
pub use crate::stats::Stats;
pub use crate::url::IntoConnectionInfo;

/// Compiles the README's Rust examples as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
