//! `aio::Locker` (`Locker<Async>`). It opens its connection in
//! `Front::open` (`front.rs`); the constructors themselves are written
//! once in `src/handle/connect.rs`.

use crate::front::Async;

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
pub type Locker = crate::Locker<Async>;
