//! `blocking::Locker`: construction, acquire, shutdown and the shared state
//! its leases and subscriber thread use.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use event_listener::{Event, Listener};

use super::connection::{Commands, Source};
use super::lease::Lease;
use super::subscriber;
use crate::cancel::CancelHandle;
use crate::clock::now;
use crate::config::{AcquireOptions, Config};
use crate::core::core::{Core, CoreSettings, Grant, WaiterStep};
use crate::core::line::WaiterId;
use crate::core::names::Channel;
use crate::driver::{shutdown_verdict, CoreCell, StartSubscriber};
use crate::entropy::fresh_token;
use crate::error::{describe, Error, Failure, Operation};
use crate::eviction;
use crate::replication::Replication;
use crate::stats::{Counters, Stats};

/// A lease client for one Redis server, for std threads.
///
/// Share one locker (in an `Arc`) among all threads of a process: its waiters
/// for one key form a FIFO line and only the head sends attempts, so the
/// locker sends at most one acquire per key at a time however many threads
/// wait. While anyone waits, one subscriber thread listens for release
/// notifications, which wake the head at once; safety polls cover lost
/// notifications.
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
pub struct Locker {
    shared: Arc<Shared>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("namespace", &self.shared.config.namespace)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) commands: Commands,
    pub(crate) counters: Counters,
    pub(crate) channel_name: String,
    pub(crate) replication: Option<Replication>,
    /// How to reach a cluster node directly (credentials, protocol), for the
    /// per-node sharded subscriptions; `None` when not known.
    pub(crate) node_template: Option<redis::ConnectionInfo>,
    cell: CoreCell,
    subscribers_running: AtomicUsize,
}

impl Shared {
    pub(crate) fn new(
        source: Source,
        node_template: Option<redis::ConnectionInfo>,
        config: Config,
    ) -> Self {
        let channel = if matches!(source, Source::Cluster(_)) {
            Channel::Sharded
        } else {
            Channel::Standalone
        };
        let settings = CoreSettings::new(&config, channel);
        let channel_name = settings.channel.name(&settings.namespace, probe_id());
        Shared {
            cell: CoreCell::new(Core::new(settings, now())),
            subscribers_running: AtomicUsize::new(0),
            commands: Commands::new(source, config.command_timeout),
            node_template,
            counters: Counters::default(),
            channel_name,
            replication: Replication::of(&config),
            config,
        }
    }

    pub(crate) fn cell(&self) -> &CoreCell {
        &self.cell
    }

    /// Runs `f` on the core, wakes the waiters it named, and starts the
    /// subscriber thread when the core asked for it.
    pub(crate) fn with_core<R>(self: &Arc<Self>, f: impl FnOnce(&mut Core) -> R) -> R {
        let (result, StartSubscriber(start)) = self.cell.with(f);
        if start {
            self.subscribers_running.fetch_add(1, Ordering::SeqCst);
            if self.commands.is_cluster() {
                super::cluster::spawn_subscriber(self.clone());
            } else {
                subscriber::spawn(self.clone());
            }
        }
        result
    }

    pub(crate) fn subscriber_exited(&self) {
        self.subscribers_running.fetch_sub(1, Ordering::SeqCst);
        self.cell.notify_changed();
    }

    /// Releases orphaned tokens (acquires whose outcome was unknown or that
    /// nobody took) in one round trip, best effort: the TTL is the backstop.
    pub(crate) fn release_orphans(self: &Arc<Self>) {
        let calls = self.with_core(|core| core.take_orphans());
        if calls.is_empty() {
            return;
        }
        if let Err(f) = self
            .commands
            .run_releases(&calls, self.config.command_timeout)
        {
            let e = f.into_error(Operation::Release);
            log::warn!(
                target: "redlease",
                "LOCK_CLEANUP_FAILED: {} orphaned token(s) left to expire: {}",
                calls.len(),
                e.redis_error().map(describe).unwrap_or_default()
            );
        }
    }

    fn drive(
        self: &Arc<Self>,
        id: WaiterId,
        wake: &Event,
        cancel: Option<&CancelHandle>,
    ) -> (
        Result<Grant, Error>,
        Option<redis::RedisResult<redis::Value>>,
    ) {
        let wait_cmd = self.replication.map(|r| r.wait_cmd());
        let mut acks = None;
        loop {
            // Listen before looking, so a wake between the two is not lost.
            let listener = wake.listen();
            let step = self.with_core(|core| {
                if cancel.is_some_and(CancelHandle::is_cancelled) {
                    core.cancel(id);
                }
                core.poll_waiter(now(), id)
            });
            match step {
                WaiterStep::Attempt(call) => {
                    drop(listener);
                    let (reply, then) =
                        self.commands
                            .run_then(&call, &self.counters, wait_cmd.as_ref());
                    acks = then;
                    let summary =
                        self.with_core(|core| core.handle_acquire_reply(now(), id, reply));
                    if summary.is_busy() {
                        self.counters.busy_reply();
                    }
                }
                WaiterStep::Wait(Some(deadline)) => {
                    listener.wait_deadline(deadline);
                }
                WaiterStep::Wait(None) => listener.wait(),
                WaiterStep::Done(result) => return (result, acks),
            }
        }
    }
}

impl Locker {
    /// Connects to the Redis server at `url` (e.g. `redis://127.0.0.1:6379/0`).
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or URL, `ProviderFailed` when the
    /// first connection cannot be opened.
    pub fn connect(url: impl redis::IntoConnectionInfo, config: Config) -> Result<Self, Error> {
        config.validate()?;
        // The redis error would echo the URL, which may carry a password.
        let client = redis::Client::open(url)
            .map_err(|_| Error::invalid_config("url", "not a valid Redis connection URL"))?;
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
        let shared = Arc::new(Shared::new(Source::Standalone(client), None, config));
        check_eviction(&shared.commands)?;
        Ok(Locker { shared })
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Locker { shared }
    }

    /// The configuration this locker runs with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Acquires `key`, waiting up to the config's `wait`.
    ///
    /// # Errors
    ///
    /// `InvalidKey`; `Busy` (wait zero) or `WaitTimeout`, both with the
    /// holder's remaining time when known; `QueueFull`; `ShuttingDown`;
    /// `ProviderFailed` or `OutcomeUnknown` when Redis failed. After an
    /// unknown outcome the token is released by token at the next operation.
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
        let shared = &self.shared;
        let resolved = options.resolve(&shared.config)?;
        shared.release_orphans();
        let wake = Arc::new(Event::new());
        if let Some(cancel) = &options.cancel {
            cancel.register(&wake);
        }
        let id = shared.with_core(|core| core.acquire(now(), key, fresh_token(), resolved))?;
        shared.cell.set_waker(id, wake.clone());
        let (result, acks) = shared.drive(id, &wake, options.cancel.as_ref());
        shared.cell.remove_waker(id);
        let late_at_shutdown = shared
            .cell
            .read(|core| core.is_shutting_down() && core.counts().orphans > 0);
        if late_at_shutdown {
            shared.release_orphans();
        }
        match result {
            Ok(grant) => {
                shared.counters.acquired();
                let lease = Lease::new(shared.clone(), grant);
                if let Some(replication) = shared.replication {
                    let acks = acks.unwrap_or(Ok(redis::Value::Int(0)));
                    match replication.verdict(acks) {
                        Ok(acked) => lease.set_replicas(acked),
                        Err(e) => {
                            // Not replicated enough to count as held.
                            let _ = lease.release();
                            return Err(e);
                        }
                    }
                }
                Ok(lease)
            }
            Err(e) => {
                if matches!(e, Error::WaitTimeout { .. }) {
                    shared.counters.wait_timeout();
                }
                Err(e)
            }
        }
    }

    /// A snapshot of this locker's counters.
    pub fn stats(&self) -> Stats {
        self.shared
            .cell
            .stats(&self.shared.counters, self.shared.commands.is_connected())
    }

    /// Shuts the locker down: refuses new acquires and ends waits with
    /// `ShuttingDown`, waits for attempts in flight, releases every tracked
    /// lease in one round trip, stops the subscriber and closes the
    /// connections the locker opened. Later calls return `Ok` at once.
    ///
    /// # Errors
    ///
    /// `CleanupTimeout` when not every release was confirmed within
    /// `shutdown_timeout` (late acquire replies are still released by token);
    /// `ProviderFailed`/`OutcomeUnknown` when the cleanup could not be sent.
    pub fn shutdown(&self) -> Result<(), Error> {
        let shared = &self.shared;
        let timeout = shared.config.shutdown_timeout;
        let deadline = crate::core::lease::deadline_after(now(), timeout);
        let first = shared.with_core(|core| {
            let first = !core.is_shutting_down();
            core.begin_shutdown();
            first
        });
        if !first {
            return Ok(());
        }
        self.wait_for(deadline, |shared| {
            shared.cell.read(|core| core.attempts_in_flight()) == 0
        });
        let (in_flight, calls) =
            shared.with_core(|core| (core.attempts_in_flight(), core.take_cleanup()));
        let mut unconfirmed = in_flight;
        let mut failure = None;
        if !calls.is_empty() {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(now()));
            if left.is_zero() {
                unconfirmed += calls.len();
            } else {
                match shared.commands.run_releases(&calls, left) {
                    Ok(confirmed) => unconfirmed += calls.len() - confirmed,
                    Err(f) => {
                        unconfirmed += calls.len();
                        failure = Some(f);
                    }
                }
            }
        }
        self.wait_for(deadline, |shared| {
            shared.subscribers_running.load(Ordering::SeqCst) == 0
        });
        shared.commands.close();
        shutdown_verdict(unconfirmed, failure, timeout)
    }

    /// Waits until `done` holds or the deadline passes.
    fn wait_for(&self, deadline: Option<Instant>, done: impl Fn(&Shared) -> bool) {
        loop {
            let listener = self.shared.cell.listen_changed();
            if done(&self.shared) {
                return;
            }
            match deadline {
                Some(d) if now() >= d => return,
                Some(d) => {
                    listener.wait_deadline(d);
                }
                None => listener.wait(),
            }
        }
    }
}

/// Any key id: the standalone channel name does not depend on the key.
fn probe_id() -> crate::core::names::KeyId {
    crate::core::names::KeyId::of("")
}

/// Reads `maxmemory-policy` on a fresh connection and logs an unsafe one.
fn check_eviction(commands: &Commands) -> Result<(), Error> {
    let policy = match commands.query_fresh(&eviction::config_get_cmd()) {
        Ok(value) => redis::from_redis_value::<HashMap<String, String>>(value)
            .ok()
            .and_then(|reply| eviction::policy_from_config(&reply).map(str::to_owned)),
        Err(Failure::NotSent(e)) => return Err(Error::from_connect(e)),
        Err(Failure::Sent(e)) => {
            eviction::report_refused(&e);
            commands
                .query_fresh(&eviction::info_cmd())
                .ok()
                .and_then(|v| redis::from_redis_value::<String>(v).ok())
                .and_then(|info| eviction::policy_from_info(&info).map(str::to_owned))
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
