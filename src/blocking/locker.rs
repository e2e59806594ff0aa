//! `blocking::Locker`: construction, acquire, stats and shutdown, each a
//! shared operation driven on the caller's thread.

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

/// A lease client for one Redis server, for std threads.
///
/// Share one locker (in an `Arc`) among all threads of a process: its waiters
/// for one key form a FIFO line and only the head sends attempts, so the
/// locker sends at most one acquire per key at a time however many threads
/// wait. While anyone waits, one subscriber thread listens for release
/// notifications, which wake the head at once; safety polls cover lost
/// notifications. A waiter whose attempt fails keeps waiting and tries
/// again with a short backoff while its wait lasts.
///
/// # Fairness
///
/// Waiters of one locker for one key are served in arrival order. Across
/// lockers and processes no order is promised.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use redlease::{blocking::Locker, Config};
///
/// let config = Config::new("my-service").lease(Duration::from_secs(10));
/// let locker = Locker::connect("redis://127.0.0.1:6379/0", config)?;
/// let lease = locker.acquire("job:42")?;
/// println!("holding job:42 with fence {}", lease.fence());
/// lease.release()?;
/// locker.shutdown()?;
/// # Ok::<(), redlease::Error>(())
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

/// The locker's and its leases' shared state, over the pooled connections.
pub(crate) type Shared = crate::driver::state::Shared<Commands>;

impl Locker {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`
    /// as a `&str`, `String` or `&String`; also a `url::Url`, a
    /// `(host, port)` or the redis crate's `ConnectionInfo`; see
    /// [`IntoConnectionInfo`]).
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or URL, `ProviderFailed` when the
    /// first connection cannot be opened.
    pub fn connect(url: impl IntoConnectionInfo, config: Config) -> Result<Self, Error> {
        config.validate()?;
        // The redis error would echo the URL, which may carry a password.
        let client = url
            .into_connection_info()
            .and_then(redis::Client::open)
            .map_err(|e| url_error("url", "not a valid Redis connection URL", &e))?;
        Self::new(client, config)
    }

    /// A locker over an existing client. The locker opens its own
    /// connections from it and closes them at shutdown.
    ///
    /// Opens one connection at once and reads `maxmemory-policy`; a policy
    /// that may evict keys is logged as `REDIS_EVICTION_UNSAFE`.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config, `ProviderFailed` when the first
    /// connection cannot be opened.
    pub fn new(client: redis::Client, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let commands = Commands::new(Source::Standalone(client.clone()), config.command_timeout);
        let shared = Shared::new(commands, subscriber::Source::Standalone(client), config);
        check_eviction(&shared.commands)?;
        Ok(Locker { shared })
    }

    /// Connects to the primary that Redis Sentinel names `master_name`,
    /// asking the sentinels at `sentinel_urls` (e.g.
    /// `redis://127.0.0.1:26379`, or `redis://:sentinel-password@host:26379`
    /// where the sentinels want a password). The primary is connected to
    /// without credentials, db 0; see
    /// [`connect_sentinel_with`](Self::connect_sentinel_with) for those.
    ///
    /// The locker asks the sentinels for the primary at connect and again
    /// whenever it opens a new connection: after a connection error, or
    /// after a `READONLY` or `MASTERDOWN` reply (which drops the pooled
    /// connections to that server). The subscriber follows the primary the
    /// same way, and waiters ride out a failover with the usual retry
    /// backoff while their wait lasts.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config, no or bad sentinel URLs, or an
    /// empty master name; `ProviderFailed` when no sentinel names a
    /// reachable primary.
    pub fn connect_sentinel<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        config: Config,
    ) -> Result<Self, Error> {
        Self::connect_sentinel_with(sentinel_urls, master_name, None, config)
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with how to
    /// connect to the primary: its username and password, db, TLS and
    /// protocol (`node`, the redis crate's `SentinelNodeConnectionInfo`).
    ///
    /// # Errors
    ///
    /// As [`connect_sentinel`](Self::connect_sentinel).
    pub fn connect_sentinel_with<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        node: Option<redis::sentinel::SentinelNodeConnectionInfo>,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        Self::through_sentinel(Resolver::new(sentinel_urls, master_name, node)?, config)
    }

    /// As [`connect_sentinel`](Self::connect_sentinel), with the
    /// primary's credentials, db and TLS mode and (feature `tls-rustls`)
    /// the certificates of a private CA in a [`SentinelOptions`]; the
    /// sentinels' own password stays in their URLs.
    ///
    /// # Errors
    ///
    /// As [`connect_sentinel`](Self::connect_sentinel); a wrong sentinel or
    /// primary password is `ProviderFailed` with
    /// `could not connect to redis: authentication failed`, a
    /// certificate or key whose PEM does not parse is `InvalidConfig`
    /// (option `certificates`). With
    /// certificates for the primary, every sentinel URL must carry the
    /// same username and password (`InvalidConfig` otherwise).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use redlease::{blocking::Locker, Config, SentinelOptions};
    ///
    /// let locker = Locker::connect_sentinel_with_options(
    ///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
    ///     "mymaster",
    ///     SentinelOptions::new().primary_password("primary-secret"),
    ///     Config::new("my-service"),
    /// )?;
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn connect_sentinel_with_options<T: redis::IntoConnectionInfo>(
        sentinel_urls: impl IntoIterator<Item = T>,
        master_name: &str,
        options: SentinelOptions,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let resolver = Resolver::with_options(sentinel_urls, master_name, options)?;
        Self::through_sentinel(resolver, config)
    }

    fn through_sentinel(resolver: Resolver, config: Config) -> Result<Self, Error> {
        let commands = Commands::new(Source::Sentinel(resolver.clone()), config.command_timeout);
        let shared = Shared::new(commands, subscriber::Source::Sentinel(resolver), config);
        check_eviction(&shared.commands)?;
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
    /// `InvalidKey`; `Busy` (wait zero) or `WaitTimeout`, both with the
    /// holder's remaining time when known; `QueueFull`; `TooManyLeases`;
    /// `ShuttingDown`; `ProviderFailed` or `OutcomeUnknown` when Redis
    /// failed until the wait ended (or at once with wait zero). After an
    /// unknown outcome the token is released by token at the next
    /// operation.
    pub fn acquire(&self, key: &str) -> Result<Lease, Error> {
        self.acquire_with(key, AcquireOptions::new())
    }

    /// Acquires `key` with per-call options (wait, lease, cancel handle).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), plus `Cancelled` and `InvalidConfig`
    /// for a lease out of bounds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// use std::time::Duration;
    /// use redlease::AcquireOptions;
    ///
    /// match locker.acquire_with("report", AcquireOptions::new().wait(Duration::ZERO)) {
    ///     Ok(lease) => { /* do the work */ lease.release()?; }
    ///     Err(e) if e.code() == "LOCK_BUSY" => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn acquire_with(&self, key: &str, options: AcquireOptions) -> Result<Lease, Error> {
        let op = Acquire::start(&self.shared.state, key, Want::Lock, options, now())?;
        let granted = drive(&self.shared, op)?;
        Ok(Lease::new(self.shared.clone(), granted))
    }

    /// Tries once to acquire `key`, without waiting (like `flock -n`):
    /// the same as `acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))`.
    ///
    /// # Errors
    ///
    /// `Busy` when someone else holds the lock ([`Error::is_busy`], with
    /// the holder's remaining time when known); otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(locker: &redlease::blocking::Locker) -> Result<(), redlease::Error> {
    /// match locker.try_acquire("report") {
    ///     Ok(lease) => { /* do the work */ lease.release()?; }
    ///     Err(e) if e.is_busy() => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self, key: &str) -> Result<Lease, Error> {
        self.acquire_with(key, AcquireOptions::new().wait(Duration::ZERO))
    }

    /// A snapshot of this locker's counters.
    pub fn stats(&self) -> Stats {
        self.shared.state.stats(self.shared.commands.is_connected())
    }

    /// Shuts the locker down: refuses new acquires and ends waits with
    /// `ShuttingDown`, waits for attempts in flight, releases every tracked
    /// lease at once (one round trip on a single server, in parallel on a
    /// cluster), stops the subscriber and closes the connections the locker
    /// opened, all within `shutdown_timeout`. Later calls return `Ok` at once.
    ///
    /// # Errors
    ///
    /// `CleanupTimeout` when not every release was confirmed within
    /// `shutdown_timeout` (late acquire replies are still released by token);
    /// `CleanupFailed` when Redis refused or failed some releases;
    /// `ProviderFailed`/`OutcomeUnknown` when the cleanup could not be sent.
    pub fn shutdown(&self) -> Result<(), Error> {
        let result = drive(&self.shared, Shutdown::new(&self.shared.state));
        self.shared.commands.close();
        result
    }
}

/// Reads `maxmemory-policy` on a fresh connection and logs an unsafe one.
pub(crate) fn check_eviction(commands: &Commands) -> Result<(), Error> {
    let policy = match commands.query_fresh(&eviction::config_get_cmd()) {
        Ok(value) => eviction::policy_from_config_reply(value),
        Err(Failure::NotSent(e)) => return Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) if is_auth_failure(&e) => return Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => {
            eviction::report_refused(&e);
            commands
                .query_fresh(&eviction::info_cmd())
                .ok()
                .and_then(eviction::policy_from_info_reply)
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
