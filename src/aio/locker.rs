//! `aio::Locker`: construction, the acquire future, shutdown, and the state
//! its leases and push callback share.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use event_listener::Event;
use futures::future::{select, Either};

use super::connection::{Commands, Source};
use super::lease::Lease;
use super::subscription::{self, Subscription};
use crate::clock::now;
use crate::config::{AcquireOptions, Config};
use crate::core::core::{Core, CoreSettings, WaiterStep};
use crate::core::lease::deadline_after;
use crate::core::line::WaiterId;
use crate::core::names::{Channel, KeyId};
use crate::driver::{shutdown_verdict, CoreCell, StartSubscriber};
use crate::entropy::fresh_token;
use crate::error::{describe, Error, Failure, Operation};
use crate::eviction;
use crate::replication::Replication;
use crate::stats::{Counters, Stats};

/// A lease client for one Redis server, for async code on any executor.
///
/// The same API and semantics as [`blocking::Locker`](crate::blocking::Locker),
/// with `.await`. It needs no tokio runtime: commands share one multiplexed
/// connection of the redis crate's smol runtime support, timers come from
/// `async-io`, wake-ups from `event-listener`. The redis crate runs each
/// connection's driver on smol's global executor, which starts one `smol-1`
/// thread (the `SMOL_THREADS` environment variable sets how many) plus the
/// `async-io` reactor thread, whatever executor your code runs on.
///
/// Cancelling an acquire = dropping its future: a waiter leaves its line
/// without disturbing it, and an acquire Redis may have granted after the
/// drop is released by token at the locker's next operation. Dropping a
/// held [`Lease`] never blocks: its token goes back to the locker, which
/// releases it at its next operation or at shutdown.
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
    /// The same server over RESP3, which the push notifications (and the
    /// command connection's disconnection report) need; `None` on a cluster,
    /// whose command connection carries the per-key subscriptions.
    pub(crate) subscriber_client: Option<redis::Client>,
    /// Per-key channel subscriptions (Redis Cluster).
    pub(crate) channels: super::cluster::Channels,
    pub(crate) subscription: Subscription,
    pub(crate) counters: Counters,
    pub(crate) channel_name: String,
    pub(crate) replication: Option<Replication>,
    cell: CoreCell,
}

impl Shared {
    pub(crate) fn new(
        source: Source,
        subscriber_client: Option<redis::Client>,
        channels: super::cluster::Channels,
        config: Config,
    ) -> Self {
        let channel = if matches!(source, Source::Cluster(_)) {
            Channel::Sharded
        } else {
            Channel::Standalone
        };
        let settings = CoreSettings::new(&config, channel);
        let channel_name = settings.channel.name(&settings.namespace, KeyId::of(""));
        Shared {
            cell: CoreCell::new(Core::new(settings, now())),
            commands: Commands::new(source, config.command_timeout),
            subscriber_client,
            channels,
            subscription: Subscription::default(),
            counters: Counters::default(),
            channel_name,
            replication: Replication::of(&config),
            config,
        }
    }

    pub(crate) fn cell(&self) -> &CoreCell {
        &self.cell
    }

    /// Runs `f` on the core and starts the subscription when asked, inside
    /// the calling future (never spawned).
    pub(crate) async fn with_core<R>(self: &Arc<Self>, f: impl FnOnce(&mut Core) -> R) -> R {
        let (result, StartSubscriber(start)) = self.cell.with(f);
        if start {
            subscription::start(self).await;
        }
        result
    }

    /// Runs `f` on the core from a context that cannot start the
    /// subscription (callbacks, drops); `f` must not be an acquire reply.
    pub(crate) fn with_core_no_start<R>(&self, f: impl FnOnce(&mut Core) -> R) -> R {
        self.cell.with(f).0
    }

    /// Releases orphaned tokens and closes a subscription that outlived its
    /// linger; runs at the start of every operation.
    pub(crate) async fn maintain(self: &Arc<Self>) {
        let (calls, stop) = self.cell.read_mut(|core| {
            let stop = matches!(
                core.poll_subscriber(now()),
                crate::core::core::SubscriberStep::Stop
            );
            (core.take_orphans(), stop)
        });
        if stop {
            self.subscription.close();
        }
        self.channels.drop_unwanted(self).await;
        if calls.is_empty() {
            return;
        }
        match self
            .commands
            .run_releases(&calls, self.config.command_timeout)
            .await
        {
            Some(Ok(_)) => {}
            Some(Err(f)) => {
                let e = f.into_error(Operation::Release);
                log::warn!(
                    target: "redlease",
                    "LOCK_CLEANUP_FAILED: {} orphaned token(s) left to expire: {}",
                    calls.len(),
                    e.redis_error().map(describe).unwrap_or_default()
                );
            }
            None => log::warn!(
                target: "redlease",
                "LOCK_CLEANUP_FAILED: {} orphaned token(s) left to expire: timeout",
                calls.len()
            ),
        }
    }
}

/// Leaves the line if the acquire future is dropped before it finished.
struct WaiterGuard<'a> {
    shared: &'a Shared,
    id: WaiterId,
    finished: bool,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.shared.cell.remove_waker(self.id);
        if !self.finished {
            self.shared
                .with_core_no_start(|core| core.abandon(now(), self.id));
        }
    }
}

impl Locker {
    /// Connects to the Redis server at `url`.
    ///
    /// # Errors
    ///
    /// `InvalidConfig` for a bad config or URL, `ProviderFailed` when the
    /// first connection cannot be opened.
    pub async fn connect(
        url: impl redis::IntoConnectionInfo,
        config: Config,
    ) -> Result<Self, Error> {
        config.validate()?;
        let client = redis::Client::open(url)
            .map_err(|_| Error::invalid_config("url", "not a valid Redis connection URL"))?;
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
        let info = client.get_connection_info().clone();
        let resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let subscriber_client = redis::Client::open(info.set_redis_settings(resp3))
            .map_err(|_| Error::invalid_config("url", "not a valid Redis connection URL"))?;
        let shared = Arc::new(Shared::new(
            Source::Standalone(subscriber_client.clone()),
            Some(subscriber_client),
            super::cluster::Channels::default(),
            config,
        ));
        check_eviction(&shared.commands).await?;
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
        let shared = &self.shared;
        let resolved = options.resolve(&shared.config)?;
        shared.maintain().await;
        let wake = Arc::new(Event::new());
        if let Some(cancel) = &options.cancel {
            cancel.register(&wake);
        }
        let id =
            shared.with_core_no_start(|core| core.acquire(now(), key, fresh_token(), resolved))?;
        shared.cell.set_waker(id, wake.clone());
        let mut guard = WaiterGuard {
            shared,
            id,
            finished: false,
        };
        let wait_cmd = shared.replication.map(|r| r.wait_cmd());
        let mut acks = None;
        loop {
            let listener = wake.listen();
            let step = shared.with_core_no_start(|core| {
                if options.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                    core.cancel(id);
                }
                core.poll_waiter(now(), id)
            });
            match step {
                WaiterStep::Attempt(call) => {
                    drop(listener);
                    let (reply, then) = shared
                        .commands
                        .run_then(&call, &shared.counters, wait_cmd.as_ref())
                        .await;
                    acks = then;
                    let summary = shared
                        .with_core(|core| core.handle_acquire_reply(now(), id, reply))
                        .await;
                    if summary.is_busy() {
                        shared.counters.busy_reply();
                        if !resolved.wait.is_zero() {
                            shared.channels.ensure(shared, KeyId::of(key)).await;
                        }
                    }
                }
                WaiterStep::Wait(Some(deadline)) => {
                    let timer = async_io::Timer::at(deadline);
                    let _ = select(listener, timer).await;
                }
                WaiterStep::Wait(None) => listener.await,
                WaiterStep::Done(result) => {
                    guard.finished = true;
                    drop(guard);
                    return match result {
                        Ok(grant) => {
                            shared.counters.acquired();
                            let lease = Lease::new(shared.clone(), grant);
                            if let Some(replication) = shared.replication {
                                let acks = acks.unwrap_or(Ok(redis::Value::Int(0)));
                                match replication.verdict(acks) {
                                    Ok(acked) => lease.set_replicas(acked),
                                    Err(e) => {
                                        // Not replicated enough to count as held.
                                        let _ = lease.release().await;
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
                            if shared.cell.read(|core| core.is_shutting_down()) {
                                shared.maintain().await;
                            }
                            Err(e)
                        }
                    };
                }
            }
        }
    }

    /// A snapshot of this locker's counters.
    pub fn stats(&self) -> Stats {
        self.shared
            .cell
            .stats(&self.shared.counters, self.shared.commands.is_connected())
    }

    /// Shuts the locker down, as
    /// [`blocking::Locker::shutdown`](crate::blocking::Locker::shutdown).
    ///
    /// # Errors
    ///
    /// `CleanupTimeout` when not every release was confirmed within
    /// `shutdown_timeout`; `ProviderFailed`/`OutcomeUnknown` when the cleanup
    /// could not be sent.
    pub async fn shutdown(&self) -> Result<(), Error> {
        let shared = &self.shared;
        let timeout = shared.config.shutdown_timeout;
        let deadline = deadline_after(now(), timeout);
        let first = shared.with_core_no_start(|core| {
            let first = !core.is_shutting_down();
            core.begin_shutdown();
            first
        });
        if !first {
            return Ok(());
        }
        wait_until(shared, deadline, |core| core.attempts_in_flight() == 0).await;
        let (in_flight, calls) =
            shared.with_core_no_start(|core| (core.attempts_in_flight(), core.take_cleanup()));
        let mut unconfirmed = in_flight;
        let mut failure = None;
        if !calls.is_empty() {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(now()));
            match shared.commands.run_releases(&calls, left).await {
                Some(Ok(confirmed)) => unconfirmed += calls.len() - confirmed,
                Some(Err(f)) => {
                    unconfirmed += calls.len();
                    failure = Some(f);
                }
                None => unconfirmed += calls.len(),
            }
        }
        shared.subscription.close();
        shared.commands.close();
        shutdown_verdict(unconfirmed, failure, timeout)
    }
}

/// Waits until `done` holds for the core or the deadline passes.
async fn wait_until(shared: &Shared, deadline: Option<Instant>, done: impl Fn(&Core) -> bool) {
    loop {
        let listener = shared.cell.listen_changed();
        if shared.cell.read(&done) {
            return;
        }
        match deadline {
            Some(d) if now() >= d => return,
            Some(d) => {
                if let Either::Right(_) = select(listener, async_io::Timer::at(d)).await {
                    return;
                }
            }
            None => listener.await,
        }
    }
}

/// Reads `maxmemory-policy` and logs an unsafe one.
async fn check_eviction(commands: &Commands) -> Result<(), Error> {
    commands.connection().await.map_err(Error::from_connect)?;
    let policy = match commands.query(&eviction::config_get_cmd()).await {
        Ok(value) => redis::from_redis_value::<HashMap<String, String>>(value)
            .ok()
            .and_then(|reply| eviction::policy_from_config(&reply).map(str::to_owned)),
        Err(Failure::Sent(e) | Failure::NotSent(e)) => {
            eviction::report_refused(&e);
            match commands.query(&eviction::info_cmd()).await {
                Ok(value) => redis::from_redis_value::<String>(value)
                    .ok()
                    .and_then(|info| eviction::policy_from_info(&info).map(str::to_owned)),
                Err(_) => None,
            }
        }
    };
    eviction::report(policy.as_deref());
    Ok(())
}
