//! The router: every acquire in progress, every key's line, the tracked
//! leases, the release-notification subscription and shutdown, for one
//! locker. See the [module docs](super) for the driving contract.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use redis::Value;

use super::lease::{deadline_after, LeaseClock, RenewResult};
use super::line::{HeadState, Line, LineStep, WaiterId};
use super::names::{validate_key, Channel, KeyId, LockNames, OwnerToken};
use super::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use super::script::{classify_acquire, classify_release, classify_renew, AcquireReply, ScriptCall};
use super::slots::{SlotId, Slots};
use crate::config::{Config, ResolvedOptions};
use crate::error::{Error, Failure, Operation};

/// How long the subscription outlives the last waiter (SPEC §5).
pub(crate) const SUBSCRIPTION_LINGER: Duration = Duration::from_secs(1);
/// How long after a failed subscription returning waiters try again.
pub(crate) const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);

/// Identifies a lease tracked for cleanup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LeaseId(SlotId);

/// The core's fixed settings, taken from a validated [`Config`].
#[derive(Debug, Clone)]
pub(crate) struct CoreSettings {
    pub(crate) namespace: String,
    pub(crate) channel: Channel,
    pub(crate) poll_interval: Duration,
    pub(crate) notify_poll_interval: Duration,
    pub(crate) max_waiters: usize,
    pub(crate) max_tracked_leases: usize,
    pub(crate) max_key_bytes: usize,
    /// Fence counter TTL in ms; 0: counters never expire.
    pub(crate) fence_counter_ttl_ms: u64,
}

impl CoreSettings {
    pub(crate) fn new(config: &Config, channel: Channel) -> Self {
        CoreSettings {
            namespace: config.namespace.clone(),
            channel,
            poll_interval: config.poll_interval,
            notify_poll_interval: config.notify_poll_interval,
            max_waiters: config.max_waiters,
            max_tracked_leases: config.max_tracked_leases,
            max_key_bytes: config.max_key_bytes,
            // Validated to fit the lease bounds.
            fence_counter_ttl_ms: config
                .fence_counter_ttl
                .map_or(0, |ttl| ttl.as_millis() as u64),
        }
    }
}

/// A granted lease as the core hands it to a front end.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) lease: LeaseId,
    pub(crate) fence: Fence,
    pub(crate) clock: LeaseClock,
}

/// What a waiter must do next.
#[derive(Debug)]
pub(crate) enum WaiterStep {
    /// Send this acquire now, then report with `handle_acquire_reply`.
    Attempt(ScriptCall),
    /// Wait for a wake-up of this waiter, or until the instant.
    Wait(Option<Instant>),
    /// The acquire is over; the waiter id is no longer valid.
    Done(Result<Grant, Error>),
}

/// Outputs of the core that are not answers to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoreEvent {
    /// This waiter has something to do; wake it.
    Wake(WaiterId),
    /// A waiter started waiting and nobody is subscribed: start the
    /// subscriber, then report `handle_subscribed` or
    /// `handle_subscription_failed`.
    StartSubscriber,
}

/// What an acquire reply did, for statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptSummary {
    Acquired,
    Busy,
    Failed,
    /// The waiter was gone or had no attempt in flight.
    Ignored,
}

impl AttemptSummary {
    pub(crate) fn is_busy(self) -> bool {
        self == AttemptSummary::Busy
    }
}

/// What the subscriber should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscriberStep {
    /// Keep listening; ask again by the instant at the latest.
    Listen(Option<Instant>),
    /// Unsubscribe and close; the subscription is off.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscription {
    Off,
    /// The subscriber is connecting or reconnecting.
    Starting,
    Active,
    /// Refused or failed: waiters poll at `poll_interval`.
    Unavailable,
}

/// A token to release: of a tracked lease, or an orphan (an acquire whose
/// result nobody will take: outcome unknown, abandoned, or late at shutdown).
#[derive(Debug, Clone)]
struct Owned {
    names: LockNames,
    token: OwnerToken,
}

#[derive(Debug)]
struct Waiter {
    names: LockNames,
    token: OwnerToken,
    lease_ms: u64,
    started: Instant,
    deadline: Option<Instant>,
    try_once: bool,
    cancelled: bool,
    attempt_submitted: Option<Instant>,
    outcome: Option<Result<Grant, Error>>,
}

/// Counters a front end can show as statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CoreCounts {
    pub(crate) waiters: usize,
    pub(crate) tracked_leases: usize,
    pub(crate) attempts_in_flight: usize,
    pub(crate) orphans: usize,
    /// Attempts sent because a backing-off head's retry instant came (not
    /// because of a notification or a hand-over).
    pub(crate) safety_polls: u64,
}

/// One locker's sans-IO state.
#[derive(Debug)]
pub(crate) struct Core {
    settings: CoreSettings,
    waiters: Slots<Waiter>,
    lines: HashMap<KeyId, Line>,
    leases: Slots<Owned>,
    orphans: Vec<Owned>,
    subscription: Subscription,
    /// Since when no acquire is in progress; `None` while some are.
    idle_since: Option<Instant>,
    /// Keys whose line emptied, and when: their per-key (cluster)
    /// subscription lingers like the locker-wide one.
    recently_idle: HashMap<KeyId, Instant>,
    shutting_down: bool,
    attempts_in_flight: usize,
    safety_polls: u64,
    events: VecDeque<CoreEvent>,
}

impl Core {
    pub(crate) fn new(settings: CoreSettings, now: Instant) -> Self {
        Core {
            settings,
            waiters: Slots::default(),
            lines: HashMap::new(),
            leases: Slots::default(),
            orphans: Vec::new(),
            subscription: Subscription::Off,
            idle_since: Some(now),
            recently_idle: HashMap::new(),
            shutting_down: false,
            attempts_in_flight: 0,
            safety_polls: 0,
            events: VecDeque::new(),
        }
    }

    pub(crate) fn counts(&self) -> CoreCounts {
        CoreCounts {
            waiters: self.waiters.len(),
            tracked_leases: self.leases.len(),
            attempts_in_flight: self.attempts_in_flight,
            orphans: self.orphans.len(),
            safety_polls: self.safety_polls,
        }
    }

    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscription == Subscription::Active
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    // ----- application commands -------------------------------------------

    /// Starts an acquire of `key`. The waiter joins the key's line; drive it
    /// with [`poll_waiter`](Self::poll_waiter).
    pub(crate) fn acquire(
        &mut self,
        now: Instant,
        key: &str,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        validate_key(key, self.settings.max_key_bytes)?;
        if self.shutting_down {
            return Err(Error::ShuttingDown);
        }
        if self.waiters.len() >= self.settings.max_waiters {
            return Err(Error::QueueFull {
                limit: self.settings.max_waiters,
            });
        }
        if self.leases.len() >= self.settings.max_tracked_leases {
            return Err(Error::TooManyLeases {
                limit: self.settings.max_tracked_leases,
            });
        }
        let id = KeyId::of(key);
        let try_once = options.wait.is_zero();
        if try_once {
            if let Some(line) = self.lines.get(&id).filter(|l| !l.is_empty()) {
                // Never jump the line: a waiter of ours is already ahead.
                return Err(Error::Busy {
                    remaining: line.holder_remaining(now),
                });
            }
        }
        if self.waiters.len() == 0 {
            let idle_long = self
                .idle_since
                .is_some_and(|t| now.saturating_duration_since(t) >= RESUBSCRIBE_AFTER);
            if self.subscription == Subscription::Unavailable && idle_long {
                self.subscription = Subscription::Off;
            }
            self.idle_since = None;
        }
        let waiter = Waiter {
            names: LockNames::new(&self.settings.namespace, id),
            token,
            lease_ms: options.lease_ms,
            started: now,
            deadline: deadline_after(now, options.wait),
            try_once,
            cancelled: false,
            attempt_submitted: None,
            outcome: None,
        };
        let waiter_id = WaiterId(self.waiters.insert(waiter));
        self.recently_idle.remove(&id);
        self.lines
            .entry(id)
            .or_insert_with(Line::new)
            .join(waiter_id);
        Ok(waiter_id)
    }

    /// Asks a waiter to stop waiting ([`Error::Cancelled`]). An attempt
    /// already in flight is still answered: if it acquired, the lease is
    /// the waiter's result.
    pub(crate) fn cancel(&mut self, id: WaiterId) {
        if let Some(w) = self.waiters.get_mut(id.0) {
            w.cancelled = true;
            self.events.push_back(CoreEvent::Wake(id));
        }
    }

    /// Forgets a waiter whose caller went away (a dropped future). A token
    /// that may have been granted meanwhile becomes an orphan, released by
    /// token at the next cleanup.
    #[cfg_attr(
        not(feature = "aio"),
        allow(dead_code, reason = "driven by the async front end")
    )]
    pub(crate) fn abandon(&mut self, now: Instant, id: WaiterId) {
        let Some(w) = self.waiters.get_mut(id.0) else {
            return;
        };
        let mut orphan = false;
        if w.attempt_submitted.take().is_some() {
            self.attempts_in_flight -= 1;
            orphan = true;
        }
        if let Some(Ok(grant)) = w.outcome.take() {
            self.leases.remove(grant.lease.0);
            orphan = true;
        }
        if orphan {
            let owned = Owned {
                names: w.names.clone(),
                token: w.token,
            };
            self.orphans.push(owned);
        }
        self.finish(now, id);
    }

    // ----- driving waiters ------------------------------------------------

    /// The next step of waiter `id`. Spurious calls are harmless.
    pub(crate) fn poll_waiter(&mut self, now: Instant, id: WaiterId) -> WaiterStep {
        let Some(w) = self.waiters.get_mut(id.0) else {
            return WaiterStep::Done(Err(Error::Cancelled));
        };
        if let Some(outcome) = w.outcome.take() {
            // Shutdown's cleanup may have released a grant before its waiter
            // took it: the waiter ends with `ShuttingDown`, not a lost lease.
            let outcome = match outcome {
                Ok(grant) if self.leases.get(grant.lease.0).is_none() => Err(Error::ShuttingDown),
                other => other,
            };
            let held_for = outcome.as_ref().ok().map(|grant| grant.clock.lease());
            self.finish_holding(now, id, held_for);
            return WaiterStep::Done(outcome);
        }
        if w.attempt_submitted.is_some() {
            return WaiterStep::Wait(None);
        }
        let ended = if w.cancelled {
            Some(Error::Cancelled)
        } else if self.shutting_down {
            Some(Error::ShuttingDown)
        } else if !w.try_once && w.deadline.is_some_and(|d| now >= d) {
            let remaining = self
                .lines
                .get(&w.names.id)
                .and_then(|l| l.holder_remaining(now));
            Some(Error::WaitTimeout {
                waited: now.saturating_duration_since(w.started),
                remaining,
            })
        } else {
            None
        };
        if let Some(err) = ended {
            self.finish(now, id);
            return WaiterStep::Done(Err(err));
        }
        let Some(w) = self.waiters.get_mut(id.0) else {
            return WaiterStep::Done(Err(Error::Cancelled));
        };
        let deadline = w.deadline;
        let Some(line) = self.lines.get_mut(&w.names.id) else {
            return WaiterStep::Done(Err(Error::Cancelled));
        };
        let backing_off = matches!(line.head_state(), HeadState::Backoff { .. });
        match line.poll(id, now) {
            LineStep::Attempt => {
                if backing_off {
                    self.safety_polls += 1;
                }
                w.attempt_submitted = Some(now);
                self.attempts_in_flight += 1;
                WaiterStep::Attempt(ScriptCall::acquire(
                    &w.names,
                    w.token,
                    w.lease_ms,
                    self.settings.fence_counter_ttl_ms,
                ))
            }
            LineStep::WaitUntil(at) => WaiterStep::Wait(earliest(at, deadline)),
        }
    }

    /// Reports the reply (or the failure) of waiter `id`'s attempt.
    pub(crate) fn handle_acquire_reply(
        &mut self,
        now: Instant,
        id: WaiterId,
        reply: Result<Value, impl Into<Failure>>,
    ) -> AttemptSummary {
        let safety = self.safety_interval();
        let Some(w) = self.waiters.get_mut(id.0) else {
            return AttemptSummary::Ignored;
        };
        let Some(submitted) = w.attempt_submitted.take() else {
            return AttemptSummary::Ignored;
        };
        self.attempts_in_flight -= 1;
        let result = match reply {
            Ok(value) => classify_acquire(&value).map_err(|source| Error::UnexpectedReply {
                op: Operation::Acquire,
                source,
            }),
            Err(e) => Err(e.into().into_error(Operation::Acquire)),
        };
        let line = self.lines.get_mut(&w.names.id);
        let owned = Owned {
            names: w.names.clone(),
            token: w.token,
        };
        match result {
            Ok(AcquireReply::Acquired(fence)) => {
                if let Some(line) = line {
                    line.handle_attempt_done();
                }
                let outcome = if self.shutting_down {
                    self.orphans.push(owned);
                    Err(Error::ShuttingDown)
                } else if self.leases.len() >= self.settings.max_tracked_leases {
                    self.orphans.push(owned);
                    Err(Error::TooManyLeases {
                        limit: self.settings.max_tracked_leases,
                    })
                } else {
                    let lease = LeaseId(self.leases.insert(owned));
                    let lease_len = Duration::from_millis(w.lease_ms);
                    Ok(Grant {
                        lease,
                        fence,
                        clock: LeaseClock::granted(submitted, lease_len),
                    })
                };
                w.outcome = Some(outcome);
                AttemptSummary::Acquired
            }
            Ok(AcquireReply::Busy(remaining)) => {
                if let Some(line) = line {
                    line.handle_busy(now, remaining, safety);
                }
                if w.try_once {
                    w.outcome = Some(Err(Error::Busy { remaining }));
                } else if self.subscription == Subscription::Off && !self.shutting_down {
                    // The waiter really waits now: listen for releases.
                    self.subscription = Subscription::Starting;
                    self.events.push_back(CoreEvent::StartSubscriber);
                }
                AttemptSummary::Busy
            }
            Err(e) => {
                if let Some(line) = line {
                    line.handle_attempt_done();
                }
                if e.is_outcome_unknown() {
                    self.orphans.push(owned);
                }
                w.outcome = Some(Err(e));
                AttemptSummary::Failed
            }
        }
    }

    /// Removes a finished waiter and hands its line to the next one.
    fn finish(&mut self, now: Instant, id: WaiterId) {
        self.finish_holding(now, id, None);
    }

    /// Like [`finish`](Self::finish); `held_for` is the lease of a waiter
    /// that leaves because it acquired. This locker then holds the key, so
    /// the next waiter would only hear "busy": instead of trying at once it
    /// backs off until the release notification (SPEC §5: a release by the
    /// same locker wakes its waiters only through the notification) or its
    /// safety poll.
    fn finish_holding(&mut self, now: Instant, id: WaiterId, held_for: Option<Duration>) {
        let safety = self.safety_interval();
        let Some(w) = self.waiters.remove(id.0) else {
            return;
        };
        if let Some(line) = self.lines.get_mut(&w.names.id) {
            if let Some(next) = line.leave(id) {
                if let Some(lease) = held_for {
                    line.defer_head(now, lease, safety);
                }
                // Woken either way: a deferred head must trade the deadline
                // it slept toward behind the old head for its retry instant.
                self.events.push_back(CoreEvent::Wake(next));
            }
            if line.is_empty() {
                self.lines.remove(&w.names.id);
                // Only per-key subscriptions linger per key; tracking it in
                // standalone mode would only grow the map.
                if self.settings.channel == Channel::Sharded {
                    self.recently_idle.insert(w.names.id, now);
                }
            }
        }
        if self.waiters.len() == 0 {
            self.idle_since = Some(now);
        }
    }

    fn safety_interval(&self) -> Duration {
        match self.subscription {
            Subscription::Active => self.settings.notify_poll_interval,
            _ => self.settings.poll_interval,
        }
    }

    // ----- notifications --------------------------------------------------

    /// A release notification arrived; its payload is the key's sha.
    pub(crate) fn handle_notification(&mut self, payload: &[u8]) {
        let Some(id) = KeyId::from_hex(payload) else {
            return;
        };
        if let Some(head) = self.lines.get_mut(&id).and_then(Line::handle_wake) {
            self.events.push_back(CoreEvent::Wake(head));
        }
    }

    /// The subscription is confirmed (first time or after a reconnect): a
    /// release may have gone unseen before it, so every head checks again.
    pub(crate) fn handle_subscribed(&mut self) {
        if self.subscription == Subscription::Starting {
            self.subscription = Subscription::Active;
        }
        let heads: Vec<WaiterId> = self
            .lines
            .values_mut()
            .filter_map(Line::handle_wake)
            .collect();
        self.events.extend(heads.into_iter().map(CoreEvent::Wake));
    }

    /// The subscriber lost its connection and is reconnecting.
    pub(crate) fn handle_subscriber_lost(&mut self, now: Instant) {
        if self.subscription == Subscription::Active {
            self.subscription = Subscription::Starting;
        }
        self.clamp_heads(now);
    }

    /// The subscription ended without a failure to report (its connection
    /// dropped, or its start was abandoned): it is off, heads poll at
    /// `poll_interval`, and the next waiter that waits starts it again.
    ///
    /// Every backing-off head retries at once: a release may have gone
    /// unseen, and a busy reply is what starts the subscription again.
    #[cfg_attr(
        not(feature = "aio"),
        allow(dead_code, reason = "driven by the async front end")
    )]
    pub(crate) fn handle_subscriber_stopped(&mut self) {
        if self.subscription != Subscription::Unavailable {
            self.subscription = Subscription::Off;
        }
        let heads: Vec<WaiterId> = self
            .lines
            .values_mut()
            .filter_map(Line::handle_wake)
            .collect();
        self.events.extend(heads.into_iter().map(CoreEvent::Wake));
    }

    /// Subscribing failed or was refused. Returns true the first time in a
    /// row, when the front end should log `LOCK_NOTIFY_UNAVAILABLE`.
    pub(crate) fn handle_subscription_failed(&mut self, now: Instant) -> bool {
        let first = self.subscription != Subscription::Unavailable;
        self.subscription = Subscription::Unavailable;
        self.clamp_heads(now);
        first
    }

    fn clamp_heads(&mut self, now: Instant) {
        let safety = self.settings.poll_interval;
        let heads: Vec<WaiterId> = self
            .lines
            .values_mut()
            .filter_map(|l| l.clamp_retry(now, safety))
            .collect();
        self.events.extend(heads.into_iter().map(CoreEvent::Wake));
    }

    /// Whether the subscriber should keep listening.
    pub(crate) fn poll_subscriber(&mut self, now: Instant) -> SubscriberStep {
        if matches!(
            self.subscription,
            Subscription::Off | Subscription::Unavailable
        ) {
            return SubscriberStep::Stop;
        }
        if self.shutting_down {
            self.subscription = Subscription::Off;
            return SubscriberStep::Stop;
        }
        match self.idle_since {
            None => SubscriberStep::Listen(None),
            Some(t) => match deadline_after(t, SUBSCRIPTION_LINGER) {
                Some(until) if now < until => SubscriberStep::Listen(Some(until)),
                _ => {
                    self.subscription = Subscription::Off;
                    SubscriberStep::Stop
                }
            },
        }
    }

    /// The keys whose release channel a per-key (Redis Cluster) subscriber
    /// should be subscribed to at `now`: every key with a line, and keys
    /// whose line emptied less than the linger ago.
    pub(crate) fn wanted_keys(&mut self, now: Instant) -> Vec<KeyId> {
        self.recently_idle.retain(|_, since| {
            deadline_after(*since, SUBSCRIPTION_LINGER).is_some_and(|until| now < until)
        });
        let mut keys: Vec<KeyId> = self.lines.keys().copied().collect();
        keys.extend(self.recently_idle.keys().copied());
        keys
    }

    /// One key's channel subscription is confirmed (Redis Cluster): the
    /// subscription counts as active and that key's head checks once more.
    pub(crate) fn handle_channel_subscribed(&mut self, key: KeyId) {
        if matches!(
            self.subscription,
            Subscription::Starting | Subscription::Off
        ) {
            self.subscription = Subscription::Active;
        }
        if let Some(head) = self.lines.get_mut(&key).and_then(Line::handle_wake) {
            self.events.push_back(CoreEvent::Wake(head));
        }
    }

    /// The next output event, if any. Drain after every call.
    pub(crate) fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }

    // ----- leases -----------------------------------------------------------

    /// The release command of a tracked lease.
    ///
    /// # Errors
    ///
    /// `ShuttingDown` when shutdown already released it.
    pub(crate) fn release_call(&self, lease: LeaseId) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        Ok(self.release_of(owned))
    }

    fn release_of(&self, owned: &Owned) -> ScriptCall {
        ScriptCall::release(
            &owned.names,
            owned.token,
            &self.settings.namespace,
            self.settings.channel,
        )
    }

    /// Reports a release's reply. A settled outcome stops tracking the
    /// lease; a failure keeps its token for the cleanup at shutdown.
    pub(crate) fn handle_release_reply(
        &mut self,
        lease: LeaseId,
        reply: Result<Value, impl Into<Failure>>,
    ) -> Result<ReleaseOutcome, Error> {
        let outcome = classify_reply(reply, Operation::Release, classify_release)?;
        self.leases.remove(lease.0);
        Ok(outcome)
    }

    /// The renew command of a tracked lease.
    pub(crate) fn renew_call(&self, lease: LeaseId, lease_ms: u64) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        Ok(ScriptCall::renew(&owned.names, owned.token, lease_ms))
    }

    /// Reports a renew's reply. The lease stays tracked whatever the
    /// outcome, so that its release can still report what it finds.
    pub(crate) fn handle_renew_reply(
        &mut self,
        _lease: LeaseId,
        reply: Result<Value, impl Into<Failure>>,
    ) -> (RenewResult, Result<RenewOutcome, Error>) {
        let outcome = classify_reply(reply, Operation::Renew, classify_renew);
        let result = match &outcome {
            Ok(o) => RenewResult::Outcome(*o),
            Err(Error::ProviderFailed { .. }) => RenewResult::NotApplied,
            Err(_) => RenewResult::Unknown,
        };
        (result, outcome)
    }

    /// Hands a lease nobody will release back to the core: its token is
    /// released with the orphans at the next cleanup.
    #[cfg_attr(
        not(feature = "aio"),
        allow(dead_code, reason = "driven by the async front end")
    )]
    pub(crate) fn abandon_lease(&mut self, lease: LeaseId) {
        if let Some(owned) = self.leases.remove(lease.0) {
            self.orphans.push(owned);
        }
    }

    /// Release commands for the orphaned tokens, which are forgotten: a
    /// failed cleanup is left to the TTL.
    pub(crate) fn take_orphans(&mut self) -> Vec<ScriptCall> {
        let orphans = std::mem::take(&mut self.orphans);
        orphans.iter().map(|o| self.release_of(o)).collect()
    }

    // ----- shutdown -------------------------------------------------------

    /// Refuses new acquires and ends every wait; attempts in flight finish
    /// and their tokens become orphans if they acquired.
    pub(crate) fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        let ids: Vec<WaiterId> = self.waiters.iter().map(|(id, _)| WaiterId(id)).collect();
        self.events.extend(ids.into_iter().map(CoreEvent::Wake));
    }

    pub(crate) fn attempts_in_flight(&self) -> usize {
        self.attempts_in_flight
    }

    /// Release commands for every tracked lease and orphan; all are
    /// forgotten by the core, so later releases of those leases report
    /// `ShuttingDown`.
    pub(crate) fn take_cleanup(&mut self) -> Vec<ScriptCall> {
        let mut calls: Vec<ScriptCall> = self
            .leases
            .drain()
            .iter()
            .map(|o| self.release_of(o))
            .collect();
        calls.extend(self.take_orphans());
        calls
    }
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Turns a release or renew reply into its outcome or the public error.
pub(crate) fn classify_reply<T>(
    reply: Result<Value, impl Into<Failure>>,
    op: Operation,
    classify: impl FnOnce(&Value) -> Result<T, super::script::ReplyError>,
) -> Result<T, Error> {
    match reply {
        Ok(value) => classify(&value).map_err(|source| Error::UnexpectedReply { op, source }),
        Err(e) => Err(e.into().into_error(op)),
    }
}

#[cfg(test)]
#[path = "core_tests/mod.rs"]
mod tests;
