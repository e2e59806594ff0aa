//! `aio::Locker`: construction, acquire, stats and shutdown, each a shared
//! operation driven inside the caller's future.

use std::sync::Arc;
use std::time::Duration;

use super::connection::{Commands, Source};
use super::drive::drive;
use super::lease::Lease;
use crate::clock::now;
use crate::config::{AcquireOptions, Config};
use crate::core::names::Want;
use crate::driver::ops::{Acquire, Shutdown};
use crate::driver::subscriber;
use crate::error::{is_auth_failure, url_error, Error, Failure};
use crate::eviction;
use crate::sentinel::{Resolver, SentinelOptions};
use crate::stats::Stats;
use crate::url::IntoConnectionInfo;

/// A lease client for one Redis server, for async code on any executor.
///
/// The same API and semantics as [`blocking::Locker`](crate::blocking::Locker),
/// with `.await`. It needs no tokio runtime: commands share one multiplexed
/// connection of the redis crate's smol runtime support, timers come from
/// `async-io`, wake-ups from `event-listener`. The redis crate runs each
/// connection's driver on smol's global executor, which starts one `smol-1`
/// thread (the `SMOL_THREADS` environment variable sets how many) plus the
/// `async-io` reactor thread, whatever executor your code runs on. While
/// anyone waits, a thread of this crate holds the release-notification
/// subscription.
///
/// Cancelling an acquire = dropping its future: a waiter leaves its line
/// without disturbing it, and an acquire Redis may have granted after the
/// drop is released by token. Dropping a held [`Lease`] never blocks: its
/// token goes back to the locker, which releases it within one round trip
/// when a waiter of the locker waits for that key, else at its next
/// operation or at shutdown.
///
/// # Fairness
///
/// Waiters of one locker for one key are served in arrival order.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), redlease::Error> {
/// use std::time::Duration;
/// use redlease::{aio::Locker, Config};
///
/// let locker = Locker::connect("redis://127.0.0.1:6379/0", Config::new("my-service")).await?;
/// let lease = locker.acquire("job:42").await?;
/// println!("fence {}", lease.fence());
/// lease.release().await?;
/// locker.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Locker {
    shared: Arc<Shared>,
}

// A panic in the caller's code never leaves a locker half-updated: the
// locker runs no user code while it holds its internal locks, and its
// parking_lot locks do not poison. So a locker (and `&Locker`) may cross
// `catch_unwind`, as `std::sync::Mutex` may (`tests/api_traits.rs`).
impl std::panic::UnwindSafe for Locker {}
impl std::panic::RefUnwindSafe for Locker {}

/// The locker's and its leases' shared state, over the shared connection.
pub(crate) type Shared = crate::driver::state::Shared<Commands>;

impl Locker {
    /// Connects to the Redis server at `url` (a `&str`, `String`,
    /// `&String`, `url::Url`, `(host, port)` or the redis crate's
    /// `ConnectionInfo`; see [`IntoConnectionInfo`]).
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or URL, `ProviderFailed` when the
    /// first connection cannot be opened.
    pub async fn connect(url: impl IntoConnectionInfo, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let client = url
            .into_connection_info()
            .and_then(redis::Client::open)
            .map_err(|e| url_error("url", "not a valid Redis connection URL", &e))?;
        Self::new(client, config).await
    }

    /// A locker over an existing client; it opens its own connections from
    /// it (one for commands, one for notifications while anyone waits).
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config, `ProviderFailed` when the first
    /// connection cannot be opened.
    pub async fn new(client: redis::Client, config: Config) -> Result<Self, Error> {
        config.validate()?;
        // RESP3, so that the command connection reports a server-side close
        // at once (a `Disconnection` push) instead of failing the next call.
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let commands_client = redis::Client::open(info.set_redis_settings(resp3))
            .map_err(|e| url_error("url", "not a valid Redis connection URL", &e))?;
        let commands = Commands::new(Source::Standalone(commands_client), config.command_timeout);
        let shared = Shared::new(commands, subscriber::Source::Standalone(client), config);
        check_eviction(&shared.commands).await?;
        Ok(Locker { shared })
    }

    /// Connects to the primary that Redis Sentinel names `master_name`,
    /// asking the sentinels at `sentinel_urls`, as
    /// [`blocking::Locker::connect_sentinel`](crate::blocking::Locker::connect_sentinel).
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::connect_sentinel`](crate::blocking::Locker::connect_sentinel).
    pub async fn connect_sentinel<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        config: Config,
    ) -> Result<Self, Error> {
        Self::connect_sentinel_with(sentinel_urls, master_name, None, config).await
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with how to
    /// connect to the primary (the redis crate's
    /// `SentinelNodeConnectionInfo`: credentials, db, TLS).
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::connect_sentinel`](crate::blocking::Locker::connect_sentinel).
    pub async fn connect_sentinel_with<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        Self::through_sentinel(Resolver::new(sentinel_urls, master_name, node)?, config).await
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with the
    /// primary's credentials, db and TLS mode and (feature `tls-rustls`)
    /// the certificates of a private CA in a [`SentinelOptions`], as
    /// [`blocking::Locker::connect_sentinel_with_options`](crate::blocking::Locker::connect_sentinel_with_options).
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::connect_sentinel_with_options`](crate::blocking::Locker::connect_sentinel_with_options).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), redlease::Error> {
    /// use redlease::{aio::Locker, Config, SentinelOptions};
    ///
    /// let locker = Locker::connect_sentinel_with_options(
    ///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
    ///     "mymaster",
    ///     SentinelOptions::new().primary_password("primary-secret"),
    ///     Config::new("my-service"),
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_sentinel_with_options<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let resolver = Resolver::with_options(sentinel_urls, master_name, options)?;
        Self::through_sentinel(resolver, config).await
    }

    async fn through_sentinel(resolver: Resolver, config: Config) -> Result<Self, Error> {
        let commands = Commands::new(Source::Sentinel(resolver.clone()), config.command_timeout);
        let shared = Shared::new(commands, subscriber::Source::Sentinel(resolver), config);
        check_eviction(&shared.commands).await?;
        Ok(Locker { shared })
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Locker { shared }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The configuration this locker runs with.
    pub fn config(&self) -> &Config {
        &self.shared.state.config
    }

    /// Acquires `key`, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::acquire`](crate::blocking::Locker::acquire).
    pub async fn acquire(&self, key: &str) -> Result<Lease, Error> {
        self.acquire_with(key, AcquireOptions::new()).await
    }

    /// Acquires `key` with per-call options (wait, lease). To cancel, drop
    /// the future; a cancel handle in the options is honoured too.
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::acquire_with`](crate::blocking::Locker::acquire_with).
    pub async fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Lease, Error> {
        let op = Acquire::start(&self.shared.state, key, Want::Lock, options, now())?;
        let granted = drive(&self.shared, op).await?;
        Ok(Lease::new(self.shared.clone(), granted))
    }

    /// Tries once to acquire `key`, without waiting: the same as
    /// `acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))`.
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::try_acquire`](crate::blocking::Locker::try_acquire).
    pub async fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        self.acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))
            .await
    }

    /// A snapshot of this locker's counters.
    pub fn stats(&self) -> Stats {
        self.shared.state.stats(self.shared.commands.is_connected())
    }

    /// Shuts the locker down, as
    /// [`blocking::Locker::shutdown`](crate::blocking::Locker::shutdown).
    ///
    /// # Errors
    ///
    /// As [`blocking::Locker::shutdown`](crate::blocking::Locker::shutdown).
    pub async fn shutdown(&self) -> Result<(), Error> {
        let result = drive(&self.shared, Shutdown::new(&self.shared.state)).await;
        self.shared.commands.close();
        result
    }
}

/// Reads `maxmemory-policy` and logs an unsafe one.
async fn check_eviction(commands: &Commands) -> Result<(), Error> {
    commands.connection().await.map_err(Error::from_connect)?;
    let policy = match commands.query(&eviction::config_get_cmd()).await {
        Ok(value) => eviction::policy_from_config_reply(value),
        Err(Failure::Sent(e) | Failure::NotSent(e)) if is_auth_failure(&e) => {
            return Err(Error::from_connect(e));
        }
        Err(Failure::Sent(e) | Failure::NotSent(e)) => {
            eviction::report_refused(&e);
            match commands.query(&eviction::info_cmd()).await {
                Ok(value) => eviction::policy_from_info_reply(value),
                Err(_) => None,
            }
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
