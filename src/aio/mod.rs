//! The async front end: plain futures on any executor (smol, async-std,
//! `futures::executor`, or inside a tokio program) drive the shared
//! operations (`src/driver/ops/`).
//!
//! Its types are the crate's handles on [`Async`](crate::front::Async)
//! (see [`front`](crate::front)): each call returns a `Send` future that
//! runs the operation through one loop (`front.rs`): it awaits what the
//! operation asks on the shared multiplexed connection and otherwise
//! awaits the operation's `event_listener` raced against an
//! `async_io::Timer`. Nothing is spawned on the caller's executor: on one
//! server over TCP or a unix socket the connection is driven by the
//! commands waiting on it
//! (`driven.rs`), and release notifications arrive on the driver layer's
//! subscriber thread, which also drops the subscription after its linger
//! without any call from the program. With feature `tokio` a plain TCP or
//! unix connection opened inside a tokio runtime goes on that runtime's reactor
//! (`tokio_reactor.rs`).
//!
//! ```text
//!   acquire futures ──drive(op)──▶ one multiplexed connection ──▶ Redis
//!         ▲ wake                                                   │
//!         └── Core (Mutex, never held across .await) ◀── subscriber thread
//! ```
//!
//! Requires the `aio` feature (on by default).

mod connection;
mod deadline;
pub(crate) mod driven;
mod election;
mod front;
#[cfg(all(feature = "tokio", panic = "unwind"))]
mod tokio_reactor;
mod with_lock;

pub(crate) use front::{wait, within};

/// A lease client for async code on any executor: `Locker<Async>` (see
/// [`Locker`](crate::Locker) for what every locker does). Each call returns
/// a `Send` future, which does nothing until polled.
///
/// It needs no tokio runtime: timers come from `async-io`, wake-ups from
/// `event-listener`. On one server over TCP or a unix socket the command
/// connection is driven by the futures waiting on it; over TLS or on a
/// Cluster the redis crate drives it on smol's global executor (one
/// `smol-1` thread, `SMOL_THREADS` sets how many). With feature `tokio`, a
/// plain TCP connection opened inside a tokio runtime goes on that
/// runtime's reactor (README "In a tokio program"). While anyone waits, a
/// thread of this crate holds the release-notification subscription.
/// Cancelling an acquire is dropping its future; dropping a held lease
/// never blocks (see [`Lease`](crate::Lease)).
///
/// ```no_run
/// # async fn run() -> Result<(), redlease::Error> {
/// use redlease::{aio::Locker, Config};
///
/// let locker = Locker::connect("redis://127.0.0.1:6379/0", Config::new("my-service")).await?;
/// let lease = locker.acquire("job:42").await?;
/// println!("fence {}", lease.fence());
/// lease.release().await?;
/// locker.shutdown().await?;
/// # Ok(()) }
/// ```
pub type Locker = crate::Locker<crate::front::Async>;

crate::front::aliases!(Async);
