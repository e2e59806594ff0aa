//! The router: every acquire in progress and every key's line, for one
//! locker. The subscription machine lives in [`subscription`](super::subscription)
//! and the tracked leases, orphans and shutdown in
//! [`tracking`](super::tracking); all three are `impl Core` blocks over the
//! same state. See the [module docs](super) for the driving contract.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::claimless::{Anchor, Extension};
use super::election::{campaign_call, LeaderValue};
use super::lease::{deadline_after, LeaseClock, SharedClock};
use super::line::{HeadState, Line, LineStep, WaiterId};
use super::multi::{classify_multi, KeyFences};
use super::names::{
    validate_key, validate_permits, Channel, GrantNotice, KeyId, Kind, LineKey, OwnerToken, RegId,
    Target, Want,
};
use super::observed::Observed;
use super::outcome::Fence;
use super::script::{
    classify_acquire, classify_campaign, classify_permit, AcquireHandover, AcquireReply,
    PermitReply, ReplyError, ScriptCall,
};
use super::slots::Slots;
use super::subscription::SubscriptionState;
pub(crate) use super::tracking::LeaseId;
use super::tracking::{classify_reply, Owned};
use crate::config::{Config, ResolvedOptions};
use crate::error::{Error, Failure, Operation};

pub(crate) use super::subscription::SubscriberStep;

/// Pauses before a waiter retries after a failed attempt (the crate docs' "How it works": waiting
/// survives faults); the last one repeats.
pub(crate) const FAILURE_BACKOFF: [Duration; 4] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
];

/// The core's fixed settings, taken from a validated [`Config`].
#[derive(Debug, Clone, Default)]
pub(crate) struct CoreSettings {
    pub(crate) namespace: String,
    pub(crate) channel: Channel,
    pub(crate) poll_interval: Duration,
    pub(crate) notify_poll_interval: Duration,
    pub(crate) max_waiters: usize,
    pub(crate) max_tracked_leases: usize,
    pub(crate) max_key_bytes: usize,
    /// Whether keys' hash tags decide their names (`Config::key_hash_tags`).
    pub(crate) key_hash_tags: bool,
    /// Fence counter TTL in ms; 0: counters never expire.
    pub(crate) fence_counter_ttl_ms: u64,
    /// The longest an attempt's reply can take: after it, an abandoned
    /// attempt cannot be answered any more.
    pub(crate) command_timeout: Duration,
    /// The lock's hand-over (docs/PROTOCOL.md §4); `None`: off.
    pub(crate) handover: Option<HandoverSettings>,
    handover_wanted: bool,
    /// `None`: the default, tied to the round trip measured at connect.
    claim_window: Option<Duration>,
    /// Whether a lock's grant may be taken from its notice without the
    /// claim (`core/claimless.rs`): with one server's clock for every
    /// reply and notice, not on Redis Cluster.
    pub(crate) claimless: bool,
}

/// A locker's part in the lock's hand-over queues.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandoverSettings {
    pub(crate) reg: RegId,
    /// The liveness bound of a registration: three safety polls.
    pub(crate) reg_ms: u64,
    pub(crate) claim_ms: u64,
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
            key_hash_tags: config.key_hash_tags,
            // Validated to fit the lease bounds.
            fence_counter_ttl_ms: config
                .fence_counter_ttl
                .map_or(0, |ttl| ttl.as_millis() as u64),
            command_timeout: config.command_timeout,
            handover: None,
            handover_wanted: config.handover,
            claim_window: config.claim_window,
            claimless: channel == Channel::Standalone,
        }
    }

    /// Registers waiting lockers as `reg` in the hand-over queues, when the
    /// config asks for the hand-over.
    pub(crate) fn with_registration(mut self, reg: RegId) -> Self {
        let safety = self.notify_poll_interval.max(self.poll_interval);
        // Both bounded by the config validation (at most 15 digits of ms).
        let claim_ms = self.claim_window.map(|w| w.as_millis() as u64);
        self.handover = self.handover_wanted.then(|| HandoverSettings {
            reg,
            reg_ms: (safety.as_millis() as u64).saturating_mul(3).max(1),
            claim_ms: claim_ms.unwrap_or(MIN_DEFAULT_CLAIM_MS),
        });
        self
    }
}

/// The least default claim window (`Config::claim_window`), in ms.
const MIN_DEFAULT_CLAIM_MS: u64 = 100;

/// A granted lease as the core hands it to a front end.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) lease: LeaseId,
    pub(crate) fence: Fence,
    /// The semaphore slot of a permit; `None` for a lock.
    pub(crate) slot: Option<u32>,
    /// A multi-key lease's keys and their fences, in its caller's order.
    pub(crate) multi: Option<KeyFences>,
    /// Shared with the core while it extends a grant taken without its
    /// claim (`core/claimless.rs`).
    pub(crate) clock: SharedClock,
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
    /// Failed, and the waiter keeps waiting (it retries after a backoff).
    Retrying,
    Failed,
    /// The waiter was gone or had no attempt in flight.
    Ignored,
    /// Nothing applied, and the waiter tries again at once (a
    /// semaphore's attempt declaring more slots).
    Again,
    /// Redis refused the hand-over's keys (an ACL without them): the
    /// locker waits without the hand-over from now on, and the waiter
    /// tries again at once (log `LOCK_HANDOVER_UNAVAILABLE` once).
    HandoverRefused,
}

impl AttemptSummary {
    pub(crate) fn is_busy(self) -> bool {
        self == AttemptSummary::Busy
    }
}

/// Where one acquire in progress stands; the one place that says whether
/// an attempt is in flight.
#[derive(Debug)]
enum Phase {
    /// In its line; the line's head state says when it may attempt.
    Queued,
    /// An attempt submitted at this instant is unanswered; `registers`:
    /// it asked to register the locker (only one sent while the locker
    /// hears the key's grants does), so a busy reply means it is queued.
    Attempting { submitted: Instant, registers: bool },
    /// Over; the result waits for `poll_waiter`.
    Finished(Result<Grant, Error>),
}

#[derive(Debug)]
struct Waiter {
    target: Target,
    token: OwnerToken,
    lease_ms: u64,
    started: Instant,
    deadline: Option<Instant>,
    try_once: bool,
    cancelled: bool,
    phase: Phase,
    /// Attempts submitted so far: a wait of any length makes at least one.
    attempts: u32,
    /// The failure of the last attempt, while the waiter keeps waiting: it
    /// is the result if the wait ends without a grant. With the instant the
    /// first attempt whose outcome is unknown was sent, while no settled
    /// reply came after it: the token may hold the key since then.
    failure: Option<(Error, Option<Instant>)>,
    /// Failed attempts in a row, for the backoff.
    failures: usize,
}

impl Waiter {
    fn owned(&self) -> Owned {
        Owned::new(self.target.held(), self.token)
    }

    /// Whether its attempts may have left reservations: a multi-key
    /// waiter's that waits.
    fn reserves(&self) -> bool {
        self.target.line().kind == Kind::Multi && self.attempts > 0 && !self.try_once
    }
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

/// Waiters woken since the last [`Core::poll_wakeups`], by what woke them
/// (for the `redlease_wakeups_total` metric). Hand-overs inside the locker
/// (a waiter leaving its line to the next) are not counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wakeups {
    /// Heads woken by a release notification.
    pub(crate) notification: u64,
    /// Attempts sent because a waiting head's retry instant came (the
    /// safety polls).
    pub(crate) poll: u64,
    /// Heads woken because the subscription came back after it was lost
    /// (a release may have gone unseen meanwhile).
    pub(crate) reconnect: u64,
}

/// One locker's sans-IO state.
#[derive(Debug, Default)]
pub(crate) struct Core {
    pub(super) settings: CoreSettings,
    waiters: Slots<Waiter>,
    pub(super) lines: HashMap<LineKey, Line>,
    pub(super) leases: Slots<Owned>,
    pub(super) orphans: Vec<Owned>,
    /// Lines whose last waiter left while the locker was registered in the
    /// key's hand-over queue: their registrations are to be removed, and
    /// a grant made out to the token they named (not claimed) released.
    pub(super) deregistrations: Vec<Owned>,
    /// Lines kept with no waiter while their registration stays queued
    /// (`core/linger.rs`).
    pub(super) lingering: HashSet<LineKey>,
    /// Registrations of lingering lines to take out, by the subscriber.
    pub(super) pass_ons: Vec<Owned>,
    pub(super) subscription: SubscriptionState,
    /// The keys of each multi-key lease's line (by the set's id), while
    /// the line exists: their notifications wake it.
    pub(super) sets: HashMap<KeyId, Arc<[KeyId]>>,
    /// The elections this locker's observers follow.
    pub(super) observed: HashMap<KeyId, Observed>,
    pub(super) shutting_down: bool,
    /// Shutdown took its cleanup (`take_cleanup`).
    pub(super) cleaned_up: bool,
    attempts_in_flight: usize,
    safety_polls: u64,
    pub(super) wakeups: Wakeups,
    pub(super) events: VecDeque<CoreEvent>,
    /// The last registering attempt's send and the server's time it ran
    /// at (`core/claimless.rs`).
    pub(super) anchor: Option<Anchor>,
    /// Grants taken without their claim, to extend.
    pub(super) extensions: Vec<Extension>,
    /// Registrations taken out whose grant token is to be released once
    /// no hold taken without its claim is under it (`park_held`).
    pub(super) parked: Vec<Owned>,
}

impl Core {
    pub(crate) fn new(settings: CoreSettings, now: Instant) -> Self {
        Core {
            settings,
            subscription: SubscriptionState::new(now),
            ..Default::default()
        }
    }

    /// The locker's first command at connect took `took` (a connect and a
    /// round trip): unless the config sets it, the claim window is four
    /// times that, and at least 100 ms.
    pub(crate) fn handle_connected(&mut self, took: Duration) {
        let by_default = self.settings.claim_window.is_none();
        if let Some(h) = self.settings.handover.as_mut().filter(|_| by_default) {
            let measured = u64::try_from(took.as_millis().saturating_mul(4)).unwrap_or(u64::MAX);
            // Bounded like a lease (at most 15 digits of ms).
            h.claim_ms = measured.clamp(MIN_DEFAULT_CLAIM_MS, 999_999_999_999_999);
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

    /// The wake-ups since the last call (a drain, like `poll_event`).
    pub(crate) fn poll_wakeups(&mut self) -> Wakeups {
        std::mem::take(&mut self.wakeups)
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Shutdown began and has not taken its cleanup yet: what is left to
    /// release goes with it, whose replies it waits for.
    pub(crate) fn awaits_cleanup(&self) -> bool {
        self.shutting_down && !self.cleaned_up
    }

    pub(crate) fn attempts_in_flight(&self) -> usize {
        self.attempts_in_flight
    }

    /// How long the intent (or a multi-key waiter's reservations) of an
    /// attempt lives: none for a try-once attempt, else three safety
    /// polls, so the waiting head refreshes it in time, and a dead
    /// waiter's intent keeps others out only briefly (docs/PROTOCOL.md §5.3).
    pub(super) fn intent_ms(&self, try_once: bool) -> u64 {
        if try_once {
            return 0;
        }
        // Bounded by the config validation of the poll interval.
        let polls = (self.settings.notify_poll_interval.as_millis() as u64).saturating_mul(3);
        polls.max(1)
    }

    /// A waiter's token, lease length and target.
    pub(super) fn waiter_target(&self, id: WaiterId) -> Option<(OwnerToken, u64, &Target)> {
        self.waiters
            .get(id.0)
            .map(|w| (w.token, w.lease_ms, &w.target))
    }

    /// Whether anyone listens for notifications: a waiter, an observer or
    /// a lingering registration.
    pub(super) fn has_listeners(&self) -> bool {
        self.waiters.len() > 0 || !self.observed.is_empty() || !self.lingering.is_empty()
    }

    /// The ids of every waiter, for shutdown's wake-up.
    pub(super) fn waiter_ids(&self) -> Vec<WaiterId> {
        self.waiters.iter().map(|(id, _)| WaiterId(id)).collect()
    }

    /// Queues the release of waiter `id`'s multi-key reservations, once
    /// (docs/PROTOCOL.md §6: they go with the waiter, not at their expiry).
    /// At shutdown this happens as waiting ends, not when the waiter's own
    /// thread or task ends: that may be after the cleanup was taken.
    pub(super) fn release_reservations_of(&mut self, id: WaiterId) {
        if let Some(w) = self.waiters.get(id.0).filter(|w| w.reserves()) {
            deregister_once(&mut self.deregistrations, w.owned());
        }
    }

    // ----- application commands -------------------------------------------

    /// Starts an acquire of what `want` names on `key` (its lock, one
    /// permit of its semaphore, a side of its read-write lease, its
    /// leadership, each kind in a line of its own), for a candidate of an
    /// election campaigning with `value` (`None` for the other kinds). The
    /// waiter joins the line; drive it with [`poll_waiter`](Self::poll_waiter).
    pub(crate) fn acquire_valued(
        &mut self,
        now: Instant,
        key: &str,
        want: Want,
        value: Option<LeaderValue>,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        validate_key(key, self.settings.max_key_bytes)?;
        if let Want::Permit { permits } = want {
            validate_permits(permits)?;
        }
        let id = KeyId::named(key, self.settings.key_hash_tags);
        let mut target = Target::new(&self.settings.namespace, want, id);
        // A candidate campaigns with its value; other targets carry none.
        if let (Target::Leader { value: slot, .. }, Some(value)) = (&mut target, value) {
            *slot = value;
        }
        self.join(now, target, token, options)
    }

    /// Puts a waiter for `target` in its line, unless a limit or the
    /// never-jump-the-line rule of a try-once acquire refuses it.
    pub(super) fn join(
        &mut self,
        now: Instant,
        target: Target,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        let (max_waiters, max_leases) =
            (self.settings.max_waiters, self.settings.max_tracked_leases);
        if self.shutting_down {
            return Err(Error::ShuttingDown);
        }
        if self.waiters.len() >= max_waiters {
            return Err(Error::QueueFull { limit: max_waiters });
        }
        if self.leases.len() >= max_leases {
            return Err(Error::TooManyLeases { limit: max_leases });
        }
        let line_key = target.line();
        let try_once = options.wait.is_zero();
        if try_once {
            if let Some(line) = self.lines.get(&line_key).filter(|l| !l.is_empty()) {
                // Never jump the line: a waiter of ours is already ahead.
                return Err(Error::Busy {
                    remaining: line.holder_remaining(now),
                });
            }
            if let Target::Multi { keys, .. } = &target {
                if keys.members.iter().any(|&id| self.is_wanted(id)) {
                    // Nor a line of one of its keys.
                    return Err(Error::Busy { remaining: None });
                }
            }
        }
        if !self.has_listeners() {
            self.subscription.handle_first_waiter(now);
        }
        if let Target::Multi { keys, .. } = &target {
            self.sets.insert(keys.set, keys.members.clone());
        }
        let waiter = Waiter {
            target,
            token,
            lease_ms: options.lease_ms,
            started: now,
            deadline: deadline_after(now, options.wait),
            try_once,
            cancelled: false,
            phase: Phase::Queued,
            attempts: 0,
            failure: None,
            failures: 0,
        };
        let waiter_id = WaiterId(self.waiters.insert(waiter));
        // Waiting again before the registration was removed: it stands.
        self.deregistrations.retain(|d| d.target.line() != line_key);
        for id in self.channel_keys(line_key) {
            self.subscription.handle_key_wanted(id.channel_id());
        }
        self.lines.entry(line_key).or_default().join(waiter_id);
        self.handle_rejoin(now, line_key, deadline_after(now, options.wait), try_once);
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
    /// token at the next cleanup; an attempt still in flight keeps the line
    /// settling, so the next head does not send a second attempt at once.
    pub(crate) fn abandon(&mut self, now: Instant, id: WaiterId) {
        let Some(w) = self.waiters.get_mut(id.0) else {
            return;
        };
        let mut orphan = matches!(w.failure, Some((_, Some(_))));
        let mut in_flight_until = None;
        match std::mem::replace(&mut w.phase, Phase::Queued) {
            Phase::Attempting { submitted, .. } => {
                self.attempts_in_flight -= 1;
                orphan = true;
                // `Some(None)` (beyond any instant) cannot happen for a
                // validated command timeout; settle at once then.
                in_flight_until = deadline_after(submitted, self.settings.command_timeout);
            }
            Phase::Finished(Ok(grant)) => {
                // A grant taken without its claim is released as its hold.
                if let Some(held) = self
                    .leases
                    .remove(grant.lease.0)
                    .filter(|o| o.hold.is_some())
                {
                    self.orphans.push(held);
                } else {
                    orphan = true;
                }
            }
            Phase::Finished(Err(_)) | Phase::Queued => {}
        }
        if orphan {
            self.orphans.push(w.owned());
        }
        self.finish(now, id, Leaving::Abandoned { in_flight_until });
    }

    // ----- driving waiters ------------------------------------------------

    /// The next step of waiter `id`. Spurious calls are harmless.
    pub(crate) fn poll_waiter(&mut self, now: Instant, id: WaiterId) -> WaiterStep {
        let Some(w) = self.waiters.get_mut(id.0) else {
            return WaiterStep::Done(Err(Error::Cancelled));
        };
        match std::mem::replace(&mut w.phase, Phase::Queued) {
            Phase::Finished(outcome) => {
                let (outcome, leaving) = match outcome {
                    Ok(grant) => match self.leases.get(grant.lease.0) {
                        Some(o) => {
                            let lease = grant.clock.lock().lease();
                            (Ok(grant), Leaving::Acquired(lease, o.hold.is_some()))
                        }
                        // Shutdown's cleanup may have released a grant before
                        // its waiter took it: the waiter ends with
                        // `ShuttingDown`, not a lost lease.
                        None => (Err(Error::ShuttingDown), Leaving::Ended),
                    },
                    Err(e) => (Err(e), Leaving::Ended),
                };
                self.finish(now, id, leaving);
                return WaiterStep::Done(outcome);
            }
            attempting @ Phase::Attempting { .. } => {
                w.phase = attempting;
                return WaiterStep::Wait(None);
            }
            Phase::Queued => {}
        }
        let line_key = w.target.line();
        let is_head = self.lines.get(&line_key).and_then(Line::head) == Some(id);
        let timed_out = !w.try_once
            && w.deadline.is_some_and(|d| now >= d)
            // A wait of any length makes at least one attempt (the crate docs' "How it works").
            && (w.attempts > 0 || !is_head);
        if w.cancelled || self.shutting_down || timed_out {
            let failure = w.failure.take();
            if let Some((_, Some(_))) = failure {
                self.orphans.push(w.owned());
            }
            let err = if w.cancelled {
                Error::Cancelled
            } else if self.shutting_down {
                Error::ShuttingDown
            } else if let Some((e, _)) = failure {
                // The wait ends on a failure: it is the result (the crate docs' "How it works").
                e
            } else {
                let line = self.lines.get(&line_key);
                Error::WaitTimeout {
                    waited: now.saturating_duration_since(w.started),
                    remaining: line.and_then(|l| l.holder_remaining(now)),
                }
            };
            self.finish(now, id, Leaving::Ended);
            return WaiterStep::Done(Err(err));
        }
        let deadline = w.deadline;
        let Some(line) = self.lines.get_mut(&line_key) else {
            return WaiterStep::Done(Err(Error::Cancelled));
        };
        let backing_off = matches!(line.head_state(), HeadState::Backoff { .. });
        match line.poll(id, now) {
            LineStep::Attempt => {
                if backing_off && w.failure.is_none() {
                    self.safety_polls += 1;
                    self.wakeups.poll += 1;
                }
                w.phase = Phase::Attempting {
                    submitted: now,
                    registers: false,
                };
                w.attempts += 1;
                self.attempts_in_flight += 1;
                let (try_once, token, lease_ms) = (w.try_once, w.token, w.lease_ms);
                let second = line.second();
                let settings = &self.settings;
                match &w.target {
                    Target::Multi { .. } => {
                        let registers = self.hears_set_grants(line_key, try_once);
                        self.mark_registering(id, registers);
                        return self.multi_attempt(id, line_key, try_once);
                    }
                    // Candidates of an election wait without the hand-over
                    // (docs/PROTOCOL.md §7).
                    Target::Leader { names, value } => {
                        let (namespace, channel) = (&settings.namespace, settings.channel);
                        let call = campaign_call(names, value, token, lease_ms, namespace, channel);
                        return WaiterStep::Attempt(call);
                    }
                    _ => {}
                }
                // The registration stays queued for the locker's next
                // waiter (docs/PROTOCOL.md §4.3), or lingers for one that
                // comes back (§13).
                let keep = second.is_some() || self.may_linger(line_key, try_once);
                let register = !try_once && self.hears_grants(line_key.id);
                self.mark_registering(id, register);
                let settings = &self.settings;
                let handover = match (settings.handover, self.lines.get_mut(&line_key)) {
                    (Some(h), Some(line)) => {
                        // Half the bound: a waiter that is not served
                        // meanwhile refreshes by its busy attempt, at least
                        // every safety interval (a third of the bound).
                        let refresh =
                            keep && line.refresh_due(now, Duration::from_millis(h.reg_ms / 2));
                        line.attempt_registers(keep, refresh);
                        Some(AcquireHandover {
                            entry: line_key.queue_entry(h.reg),
                            register,
                            reg_ms: h.reg_ms,
                            claim_ms: h.claim_ms.min(lease_ms),
                            channel: settings.channel,
                            channel_name: settings.channel.name(&settings.namespace, line_key.id),
                            message: line_key.message(),
                            grant_token: line.grant_token(token),
                            registered: line.is_registered(),
                            // A lock's take leaves its hold under the grant
                            // token, still registered: the floor tells that
                            // hold from a later grant (a slot's take draws
                            // a new token, a writer's is always claimed).
                            floor: line.given().filter(|_| line_key.kind == Kind::Lock),
                            keep,
                            refresh,
                        })
                    }
                    _ => None,
                };
                // Only a writer that will wait keeps readers out
                // (docs/PROTOCOL.md §5.3).
                let intent = self.intent_ms(try_once);
                let ttl = settings.fence_counter_ttl_ms;
                self.waiters
                    .get(id.0)
                    .and_then(|w| {
                        ScriptCall::acquire(&w.target, token, lease_ms, ttl, intent, handover)
                    })
                    .map_or(WaiterStep::Wait(None), WaiterStep::Attempt)
            }
            // A head past its deadline that has not attempted yet (its line
            // settles) waits for its first attempt, not for the past.
            LineStep::WaitUntil(at) => {
                WaiterStep::Wait(earliest_of(at, deadline.filter(|d| *d > now)))
            }
        }
    }

    /// A grant to this locker's registration in `key`'s line (a lock's,
    /// or a semaphore's whose notice names the slot): its head waiter
    /// takes it without the claim where that is safe (`core/claimless.rs`),
    /// and the grant is extended later. Returns `Some` when it was taken.
    pub(super) fn take_grant(
        &mut self,
        now: Instant,
        key: LineKey,
        grant: &GrantNotice,
    ) -> Option<()> {
        let (fence, h, claim) = (grant.fence?, self.settings.handover?, grant.claim);
        let (lock, slot) = match (key.kind, grant.slot) {
            (Kind::Lock, _) => (true, None),
            (Kind::Semaphore, Some(slot)) => (false, Some(slot)),
            _ => return None,
        };
        let usable = self.settings.claimless
            && !self.shutting_down
            && self.leases.len() < self.settings.max_tracked_leases;
        let deadline = self
            .anchor?
            .grant_deadline(grant.at_ms?, claim)
            .filter(|d| usable && d.saturating_duration_since(now) >= claim / 2)?;
        let may_linger = self.may_linger(key, false);
        let line = self.lines.get_mut(&key)?;
        // Only a grant to the line's own grant token: the registration of
        // an earlier line of this key (gone, its release by that token on
        // its way) may have been granted the lease before it left.
        let owner = line.grant_token_drawn();
        let owner = owner.filter(|o| Some(o.notice_id()) == grant.owner)?;
        let id = line.head()?;
        // A lock's claim takes the registration out or refreshes it;
        // without it, it stays as it is: queued for the next waiter, or
        // lingering. A semaphore's grant took it out of the queue (served
        // once): the line's next attempt queues it again.
        let keeps = line.second().is_some() || may_linger;
        let refresh = line.refresh_due(now, Duration::from_millis(h.reg_ms / 2));
        let w = self.waiters.get_mut(id.0)?;
        // No attempt of this line may be in flight, nor an earlier send
        // of unknown outcome: run after the grant, it would claim it.
        let quiet = !line.is_settling(now) && w.failure.is_none();
        if lock && (!keeps || refresh) || !quiet || w.cancelled || w.try_once {
            return None;
        }
        if !matches!(w.phase, Phase::Queued) || line.is_stale(slot, fence) {
            return None;
        }
        line.handle_given(slot, fence);
        let mut owned = w.owned();
        owned.token = owner;
        owned.hold = Some(fence);
        owned.target.slot = slot;
        if lock {
            line.attempt_registers(true, false);
            line.handle_granted(now, false);
        } else {
            // The grant token stays with this hold; the line's next
            // registration draws a new one, which no attempt of the line
            // can mistake for this hold (nor a release of it end it).
            line.take_registration();
        }
        let lease = LeaseId(self.leases.insert(owned));
        let clock = LeaseClock::until(Some(deadline), Duration::from_millis(w.lease_ms)).shared();
        self.extensions.push(Extension {
            lease,
            // An eighth of the way: most of the bound is left for the renew
            // to arrive through a pause, and a short hold's release comes
            // before it (and makes it moot).
            due: now + deadline.saturating_duration_since(now) / 8,
            lease_ms: w.lease_ms,
            clock: clock.clone(),
        });
        w.phase = Phase::Finished(Ok(Grant {
            lease,
            fence,
            slot,
            multi: None,
            clock,
        }));
        self.events.push_back(CoreEvent::Wake(id));
        Some(())
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
        let Phase::Attempting {
            submitted,
            registers,
        } = w.phase
        else {
            return AttemptSummary::Ignored;
        };
        w.phase = Phase::Queued;
        self.attempts_in_flight -= 1;
        let result = classify_reply(reply, Operation::Acquire, |value| {
            Attempted::classify(&w.target, value)
        });
        // Candidates of an election wait without the hand-over.
        let handover =
            self.settings.handover.is_some() && !matches!(w.target, Target::Leader { .. });
        let registers = handover && registers;
        let line_key = w.target.line();
        let mut line = self.lines.get_mut(&line_key);
        let (e, unsettled) = match result {
            Err(e) if handover && is_refusal_of_handover(&e) => {
                // An ACL written before the hand-over: wait as without it
                // from now on, and send this attempt again at once that way.
                self.settings.handover = None;
                if let Some(line) = line {
                    line.handle_attempt_done();
                }
                self.events.push_back(CoreEvent::Wake(id));
                return AttemptSummary::HandoverRefused;
            }
            Ok(Attempted::Again { slots: more }) => {
                if let Target::Permit { slots, .. } = &mut w.target {
                    *slots = more;
                }
                if let Some(line) = line {
                    line.handle_attempt_done();
                }
                self.events.push_back(CoreEvent::Wake(id));
                return AttemptSummary::Again;
            }
            Ok(Attempted::Granted(fence, slot, fences, next_waits)) => {
                // Readers share epochs, and a multi-key lease holds no
                // registration's grant.
                let granted_once =
                    matches!(line_key.kind, Kind::Lock | Kind::Semaphore | Kind::Write);
                let stale = granted_once && line.as_ref().is_some_and(|l| l.is_stale(slot, fence));
                if let Some(line) = line {
                    line.handle_attempt_done();
                    line.handle_granted(submitted, next_waits);
                    if granted_once && !stale {
                        line.handle_given(slot, fence);
                    }
                }
                if stale {
                    // A grant a waiter of this line was given, which a
                    // failover that lost writes brought back under the
                    // grant token (docs/PROTOCOL.md §4.3): its fence is not
                    // given twice. The lease goes back with the orphans; the
                    // waiter waits on under a new token, which that lease's
                    // release cannot meet.
                    let mut owned = w.owned();
                    owned.target.slot = slot;
                    self.orphans.push(owned);
                    w.token = w.token.successor();
                    w.failure = None;
                    self.events.push_back(CoreEvent::Wake(id));
                    return AttemptSummary::Retrying;
                }
                // A re-sent attempt's grant may be the first send's, which
                // Redis may have run long before this one: the lease counts
                // from the first send whose outcome is unknown.
                let first_sent = w.failure.take().and_then(|(_, since)| since);
                let first_sent = first_sent.unwrap_or(submitted);
                let outcome = if self.shutting_down {
                    self.orphans.push(w.owned());
                    Err(Error::ShuttingDown)
                } else if self.leases.len() >= self.settings.max_tracked_leases {
                    self.orphans.push(w.owned());
                    Err(Error::TooManyLeases {
                        limit: self.settings.max_tracked_leases,
                    })
                } else {
                    let mut owned = w.owned();
                    owned.target.slot = slot;
                    let multi = owned.target.members.clone().zip(fences);
                    let lease = LeaseId(self.leases.insert(owned));
                    let lease_len = Duration::from_millis(w.lease_ms);
                    Ok(Grant {
                        lease,
                        fence,
                        slot,
                        multi,
                        clock: LeaseClock::granted(first_sent, lease_len).shared(),
                    })
                };
                w.phase = Phase::Finished(outcome);
                return AttemptSummary::Acquired;
            }
            Ok(Attempted::Busy(remaining, age, precise, registered_at)) => {
                if let (Target::Multi { since, .. }, Some(age)) = (&mut w.target, age) {
                    *since = age;
                }
                if let Some(server_ms) = registered_at.filter(|_| registers) {
                    self.anchor = Some(Anchor::new(submitted, server_ms));
                }
                if let Some(line) = line {
                    let expiry = remaining
                        .filter(|_| precise)
                        .and_then(|r| arrives_at_expiry(submitted, now, r));
                    line.handle_busy(now, remaining, expiry, safety);
                    if registers {
                        line.handle_registered(submitted);
                    }
                }
                // A settled reply for our token: an earlier unknown attempt
                // did not leave it holding the key.
                w.failure = None;
                w.failures = 0;
                if w.try_once {
                    w.phase = Phase::Finished(Err(Error::Busy { remaining }));
                } else if self.shutting_down {
                    // Its wait ends at its next poll; what this attempt
                    // reserved goes with the cleanup.
                    self.release_reservations_of(id);
                } else {
                    self.subscription_wanted_by_waiter();
                }
                return AttemptSummary::Busy;
            }
            // Settled: Redis applied nothing, and waiting cannot help.
            Ok(Attempted::Refused(e)) => (e, None),
            Err(e) => {
                // The server may have changed (a failover): its clock too.
                self.anchor = None;
                // Sticky until a settled reply: an earlier attempt of this
                // token whose outcome is unknown may hold the key.
                let earlier = w.failure.as_ref().and_then(|(_, since)| *since);
                let unsettled = earlier.or(e.is_outcome_unknown().then_some(submitted));
                // An attempt whose outcome is unknown may have registered
                // the locker: the next one names the grant token as its
                // own, or a grant made out to it meanwhile reads as
                // another's and the locker registers beside it (a
                // semaphore then grants that registration a second slot).
                let unknown = registers && e.is_outcome_unknown();
                if let Some(line) = line.as_mut().filter(|_| unknown) {
                    line.handle_registered(submitted);
                }
                let keeps_waiting = !w.try_once
                    && !w.cancelled
                    && !self.shutting_down
                    && w.deadline.is_none_or(|d| now < d)
                    && is_retryable(&e);
                if keeps_waiting {
                    let delay = FAILURE_BACKOFF[w.failures.min(FAILURE_BACKOFF.len() - 1)];
                    w.failures += 1;
                    w.failure = Some((e, unsettled));
                    if let Some(line) = line {
                        line.handle_failed(now, delay);
                    }
                    return AttemptSummary::Retrying;
                }
                (e, unsettled)
            }
        };
        if let Some(line) = line {
            line.handle_attempt_done();
        }
        if unsettled.is_some() {
            self.orphans.push(w.owned());
        }
        w.failure = None;
        w.phase = Phase::Finished(Err(e));
        AttemptSummary::Failed
    }

    /// Removes a finished waiter and hands its line to the next one.
    ///
    /// A waiter that leaves because it acquired makes this locker the
    /// holder, so the next waiter would only hear "busy": instead of trying
    /// at once it backs off until the release notification (the crate docs' "How it works": a
    /// release by the same locker wakes its waiters only through the
    /// notification) or its safety poll.
    fn finish(&mut self, now: Instant, id: WaiterId, leaving: Leaving) {
        let safety = self.safety_interval();
        let Some(w) = self.waiters.remove(id.0) else {
            return;
        };
        let key = w.target.line();
        let may_linger =
            matches!(leaving, Leaving::Acquired(..)) && self.may_linger(key, w.try_once);
        let (mut deferred, mut idle) = (false, Vec::new());
        if let Some(line) = self.lines.get_mut(&key) {
            let in_flight_until = match leaving {
                Leaving::Abandoned { in_flight_until } => in_flight_until,
                _ => None,
            };
            let next_waits = line.take_next_waits();
            if let Some(next) = line.leave_settling(id, in_flight_until) {
                // A semaphore may have more permits free, and readers share:
                // their next head tries at once (docs/PROTOCOL.md §5.2, §5.3), unless the
                // permit's reply said it is registered with nothing free.
                let defers = next_waits || !matches!(key.kind, Kind::Semaphore | Kind::Read);
                if let (Leaving::Acquired(lease, _), true) = (leaving, defers) {
                    line.defer_head(now, lease, safety);
                    deferred = true;
                }
                // Woken either way: a deferred head must trade the deadline
                // it slept toward behind the old head for its retry instant.
                self.events.push_back(CoreEvent::Wake(next));
            }
            let lingers = line.is_empty() && may_linger && line.is_registered();
            if lingers {
                // Kept for a waiter that comes back (`core/linger.rs`).
                line.linger();
                self.lingering.insert(key);
            } else if line.is_empty() {
                // A claim took it out of the queue; a grant taken without
                // one left it there.
                let claimed = !matches!(leaving, Leaving::Acquired(_, false));
                if let Some(token) = line.take_registration().filter(|_| claimed) {
                    self.deregistrations
                        .push(Owned::new(w.target.held(), token));
                }
            }
            // A multi-key waiter's reservations stop blocking others as it
            // leaves, not at their expiry (docs/PROTOCOL.md §6).
            if w.reserves() && !matches!(leaving, Leaving::Acquired(..)) && !self.shutting_down {
                deregister_once(&mut self.deregistrations, w.owned());
            }
            if line.is_empty() && !lingers {
                if !line.is_settling(now) {
                    self.forget_line(key);
                }
                idle = self.channel_keys(key);
            }
        }
        if deferred {
            // The next head waits behind this locker's own grant without a
            // busy reply: it really waits (the crate docs' "How it works"), and only the release's
            // notification can wake it before its safety poll.
            self.subscription_wanted_by_waiter();
        }
        self.handle_listeners_left(now, idle);
    }

    /// Whether any line of `id` (of any kind) has waiters, or an election
    /// of that id observers: they share the key's notification channel.
    pub(super) fn is_wanted(&self, id: KeyId) -> bool {
        // Not a scan of every line: this runs each time a line empties.
        let waits = |key| self.lines.get(&key).is_some_and(|line| !line.is_empty());
        self.observed.contains_key(&id) || self.lines_of(id).any(waits)
    }

    pub(super) fn safety_interval(&self) -> Duration {
        if self.subscription.is_active() {
            self.settings.notify_poll_interval
        } else {
            self.settings.poll_interval
        }
    }

    /// Wakes the heads that should check at once, as `wake` says per line;
    /// returns how many.
    pub(super) fn wake_heads(&mut self, wake: impl FnMut(&mut Line) -> Option<WaiterId>) -> u64 {
        let before = self.events.len();
        let heads = self.lines.values_mut().filter_map(wake);
        self.events.extend(heads.map(CoreEvent::Wake));
        (self.events.len() - before) as u64
    }

    /// Wakes the head of each of `lines` that should check at once (a
    /// notification, a reason to check); returns how many.
    pub(super) fn wake_lines(&mut self, lines: Vec<LineKey>) -> u64 {
        let woken = lines
            .into_iter()
            .filter(|key| self.wake_head_of(*key, Line::handle_wake));
        woken.count() as u64
    }

    /// Records whether waiter `id`'s attempt in flight registers.
    fn mark_registering(&mut self, id: WaiterId, registers: bool) {
        if let Some(Waiter {
            phase: Phase::Attempting { registers: r, .. },
            ..
        }) = self.waiters.get_mut(id.0)
        {
            *r = registers;
        }
    }

    /// Wakes the head of `key`'s line if `wake` says so; returns whether.
    pub(super) fn wake_head_of(
        &mut self,
        key: LineKey,
        wake: impl FnOnce(&mut Line) -> Option<WaiterId>,
    ) -> bool {
        let head = self.lines.get_mut(&key).and_then(wake);
        self.events.extend(head.map(CoreEvent::Wake));
        head.is_some()
    }

    /// The next output event, if any. Drain after every call.
    pub(crate) fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }
}

/// An acquire reply of any kind, as the waiter acts on it.
#[derive(Debug)]
pub(super) enum Attempted {
    /// The fence, a permit's slot, a multi-key lease's fences (in its
    /// keys' order), and whether the next waiter is registered with
    /// nothing else free, so it waits for its grant (a permit's reply
    /// says so).
    Granted(Fence, Option<u32>, Option<Box<[Fence]>>, bool),
    /// Held: the holder's remaining time if known (to the microsecond:
    /// `true`), for a multi-key lease the waiter's age, and for a lock's
    /// attempt that registered the server's time it ran at (ms).
    Busy(Option<Duration>, Option<u64>, bool, Option<u64>),
    /// Settled, and no retry can succeed.
    Refused(Error),
    /// Nothing applied: a semaphore's record is larger than the slots the
    /// attempt declared; it goes again at once declaring `slots`.
    Again { slots: u32 },
}

impl Attempted {
    fn classify(target: &Target, value: &Value) -> Result<Self, ReplyError> {
        let acquire = match target {
            Target::Leader { .. } => classify_campaign(value)?,
            Target::Multi { names, .. } => return classify_multi(value, names.len()),
            Target::Permit { permits, .. } => {
                return Ok(match classify_permit(value)? {
                    PermitReply::Acquired {
                        slot,
                        fence,
                        next_waits,
                    } => Attempted::Granted(fence, Some(slot), None, next_waits),
                    PermitReply::Busy(remaining, at) => Attempted::Busy(remaining, None, false, at),
                    PermitReply::MoreSlots(n) => Attempted::Again { slots: n },
                    PermitReply::OtherCount(stored) => Attempted::Refused(Error::invalid_config(
                        "permits",
                        format!(
                            "the semaphore is in use with {stored} permits, not {permits}; \
                             a new count applies once every permit is released"
                        ),
                    )),
                })
            }
            _ => classify_acquire(value)?,
        };
        Ok(match acquire {
            AcquireReply::Acquired(fence) => Attempted::Granted(fence, None, None, false),
            AcquireReply::Busy(remaining) => Attempted::Busy(remaining, None, false, None),
            AcquireReply::BusyFor(remaining) => Attempted::Busy(Some(remaining), None, true, None),
            AcquireReply::Registered(remaining, at) => {
                Attempted::Busy(remaining, None, false, Some(at))
            }
        })
    }
}

/// Why a waiter leaves its line.
#[derive(Debug, Clone, Copy)]
enum Leaving {
    /// It acquired a lease of this length; by a grant taken without its
    /// claim (`true`), which leaves the registration queued.
    Acquired(Duration, bool),
    /// Timed out, failed, cancelled or shut down.
    Ended,
    /// Its caller went away; an attempt may still be in flight until then.
    Abandoned { in_flight_until: Option<Instant> },
}

/// Queues `owned`'s removal from the queues, unless it is queued.
fn deregister_once(deregistrations: &mut Vec<Owned>, owned: Owned) {
    if !deregistrations.iter().any(|d| d.token == owned.token) {
        deregistrations.push(owned);
    }
}

/// Whether Redis refused an attempt for want of rights (`NOPERM`): with
/// the hand-over on, the queue's keys or commands an older ACL lacks.
fn is_refusal_of_handover(e: &Error) -> bool {
    matches!(e, Error::ProviderFailed { .. })
        && e.redis_error()
            .is_some_and(|r| r.code() == Some("NOPERM") || r.to_string().contains("NOPERM"))
}

/// Whether a failed attempt may be sent again while the wait lasts: every
/// Redis failure (not applied, or unknown, which the replay-safe script
/// makes idempotent), but not the locker's own limits.
fn is_retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::ProviderFailed { .. } | Error::OutcomeUnknown { .. } | Error::UnexpectedReply { .. }
    )
}

/// When to send the retry of an attempt submitted at `submitted` and
/// answered at `received` that found the key held for `remaining` (to the
/// microsecond) after Redis read it. Redis read it about one way after
/// `submitted`, and a retry takes the same way, so one sent at
/// `submitted + remaining` would reach Redis as the key expires, if its
/// thread woke on time; a timer wakes it later than asked (timer slack,
/// scheduling: 100–500 µs on a loaded machine, `bench election`), so it is
/// sent half a round trip earlier. One that arrives early is busy for less
/// than a round trip, which is retried at once, as no timer would wake
/// sooner than the answer to that retry comes: at most two busy replies
/// after the first, where retrying at `PTTL`'s whole milliseconds took one
/// per round trip through the lease's last millisecond.
pub(crate) fn arrives_at_expiry(
    submitted: Instant,
    received: Instant,
    remaining: Duration,
) -> Option<Instant> {
    let round_trip = received.saturating_duration_since(submitted);
    if remaining <= round_trip {
        return Some(received);
    }
    submitted.checked_add(remaining - round_trip / 2)
}

/// The earlier of two optional instants (`None`: no bound).
pub(crate) fn earliest_of(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.into_iter().chain(b).min()
}

#[cfg(test)]
#[path = "core_tests/mod.rs"]
mod tests;
