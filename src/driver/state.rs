//! What every operation of one locker shares, whatever front end drives it:
//! the configuration, the core, the counters, the replication check and the
//! subscriber thread that feeds release notifications into the core.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::cell::{CoreCell, StartSubscriber};
use super::metrics::LockerMetrics;
use super::quiet::QuietSlots;
use super::subscriber;
use super::target::Source;
use crate::clock::now;
use crate::config::Config;
use crate::core::core::{Core, CoreSettings};
use crate::core::names::{Channel, KeyId};
use crate::entropy::fresh_reg;
use crate::replication::Replication;
use crate::stats::{Counters, Stats};

pub(crate) struct LockerState {
    pub(crate) config: Config,
    pub(crate) counters: Counters,
    pub(crate) metrics: LockerMetrics,
    pub(crate) replication: Option<Replication>,
    /// The standalone release channel's name (cluster channels are per key).
    pub(crate) channel_name: String,
    /// On a cluster: the slots whose orphans other operations leave for a
    /// while (a silent node).
    pub(crate) quiet: Option<Mutex<QuietSlots>>,
    pub(crate) cell: CoreCell,
    pub(crate) notifications: Source,
    subscribers_running: AtomicUsize,
}

impl LockerState {
    pub(crate) fn new(config: Config, notifications: Source) -> Arc<Self> {
        let channel = if notifications.is_cluster() {
            Channel::Sharded
        } else {
            Channel::Standalone
        };
        let settings = CoreSettings::new(&config, channel).with_registration(fresh_reg());
        // Any key: the standalone channel name does not depend on it.
        let channel_name = channel.name(&settings.namespace, KeyId::of(""));
        let metrics = LockerMetrics::new(config.metrics_label_value());
        Arc::new(LockerState {
            cell: CoreCell::new(Core::new(settings, now()), metrics.cell()),
            counters: Counters::default(),
            metrics,
            replication: Replication::of(&config),
            channel_name,
            quiet: (channel == Channel::Sharded).then(Mutex::default),
            notifications,
            subscribers_running: AtomicUsize::new(0),
            config,
        })
    }

    /// Runs `f` on the core, wakes the waiters it named, and starts the
    /// subscriber thread when the core asked for it.
    pub(crate) fn with_core<R>(self: &Arc<Self>, f: impl FnOnce(&mut Core) -> R) -> R {
        let (result, StartSubscriber(start)) = self.cell.with(f);
        if start {
            self.subscribers_running.fetch_add(1, Ordering::SeqCst);
            subscriber::spawn(self.clone());
        }
        result
    }

    pub(crate) fn subscriber_exited(&self) {
        self.subscribers_running.fetch_sub(1, Ordering::SeqCst);
        self.cell.notify_changed();
    }

    pub(crate) fn subscribers_running(&self) -> usize {
        self.subscribers_running.load(Ordering::SeqCst)
    }

    /// The counters plus the core's gauges.
    pub(crate) fn stats(&self, connected: bool) -> Stats {
        let (counts, subscribed) = self.cell.read(|core| (core.counts(), core.is_subscribed()));
        Stats {
            waiters: counts.waiters,
            tracked_leases: counts.tracked_leases,
            subscribed,
            connected,
            safety_polls: counts.safety_polls,
            ..self.counters.snapshot()
        }
    }
}

/// What the handles ask of a front end's connections besides sending.
pub(crate) trait Connections: Send + Sync + 'static {
    /// Whether the command connection is open, as far as it knows.
    fn is_connected(&self) -> bool;
    /// Closes the connections the locker opened (shutdown).
    fn close(&self);
}

/// What a front end's locker and its leases share: the operations' state
/// and the connections (`C`) they are sent on.
pub(crate) struct Shared<C> {
    pub(crate) state: Arc<LockerState>,
    pub(crate) commands: C,
    /// When the locker was made: its first command connects.
    created: Instant,
}

impl<C> Shared<C> {
    pub(crate) fn new(commands: C, notifications: Source, config: Config) -> Arc<Self> {
        Arc::new(Shared {
            state: LockerState::new(config, notifications),
            commands,
            created: now(),
        })
    }

    /// The locker's first command at connect (which opened its connection)
    /// was answered: the time since it was made sets the default claim
    /// window.
    pub(crate) fn connected(&self) {
        let took = now().saturating_duration_since(self.created);
        let _ = self.state.cell.with(|core| core.handle_connected(took));
    }
}

/// A locker's `Debug`: its namespace, never an address.
impl<C> std::fmt::Debug for Shared<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("namespace", &self.state.config.namespace)
            .finish_non_exhaustive()
    }
}
