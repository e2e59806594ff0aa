//! The release-notification subscription of one locker, as a state machine
//! inside the [`Core`]: when to start it, when it is confirmed, lost or
//! refused, when it has lingered long enough after the last waiter, and on
//! Redis Cluster which per-key channels are wanted.
//!
//! ```text
//!  Off ──busy reply of a waiter──▶ Starting ──confirmed──▶ Active
//!   ▲      (or an observer)         ▲   │ refused             │ connection lost
//!   │                               │   ▼                     ▼
//!   │                               │ Unavailable          Starting (reconnecting)
//!   └── 1 s after the last waiter ──┴── (waiters poll; retried after 5 s idle)
//!       (and observer)
//! ```
//!
//! The subscriber (a thread the front end starts on `StartSubscriber`)
//! asks [`Core::poll_subscriber`] whether to keep listening and, on a
//! cluster, [`Core::wanted_keys`] which channels to hold.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::core::{earliest_of, Core, CoreEvent};
use super::lease::deadline_after;
use super::line::Line;
use super::multi::multi_reg;
use super::names::{election_notice, Channel, GrantNotice, Handover, KeyId, Kind, LineKey};

/// How long the subscription outlives the last waiter (the crate docs' "How it works").
pub(crate) const SUBSCRIPTION_LINGER: Duration = Duration::from_secs(1);
/// How long after a failed subscription returning waiters try again.
pub(crate) const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);

/// What the subscriber should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscriberStep {
    /// Keep listening; ask again by the instant at the latest.
    Listen(Option<Instant>),
    /// Unsubscribe and close; the subscription is off.
    Stop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    #[default]
    Off,
    /// The subscriber is connecting or reconnecting.
    Starting,
    Active,
    /// Refused or failed: waiters poll at `poll_interval`.
    Unavailable,
}

#[derive(Debug, Default)]
pub(crate) struct SubscriptionState {
    mode: Mode,
    /// Since when no acquire is in progress; `None` while some are.
    idle_since: Option<Instant>,
    /// Keys whose per-key (cluster) channel is confirmed subscribed.
    channels: HashSet<KeyId>,
    /// Subscribed keys whose line emptied, and when: their channel lingers
    /// like the locker-wide subscription. Only subscribed keys are kept, so
    /// uncontended acquires never grow it.
    lingering: HashMap<KeyId, Instant>,
    /// The subscription was lost while active and is not back yet: the
    /// next confirmation's wake-ups are counted as `reconnect`.
    reconnecting: bool,
}

impl SubscriptionState {
    pub(crate) fn new(now: Instant) -> Self {
        SubscriptionState {
            idle_since: Some(now),
            ..Default::default()
        }
    }

    pub(crate) fn is_active(&self) -> bool {
        self.mode == Mode::Active
    }

    /// The first acquire after an idle spell: a refused subscription is
    /// tried again after `RESUBSCRIBE_AFTER`.
    pub(crate) fn handle_first_waiter(&mut self, now: Instant) {
        let idle_long = self
            .idle_since
            .is_some_and(|t| now.saturating_duration_since(t) >= RESUBSCRIBE_AFTER);
        if self.mode == Mode::Unavailable && idle_long {
            self.mode = Mode::Off;
        }
        self.idle_since = None;
    }

    pub(crate) fn handle_key_wanted(&mut self, key: KeyId) {
        self.lingering.remove(&key);
    }

    /// Entries held for the per-key channels (for tests of the bound).
    #[cfg(test)]
    pub(crate) fn tracked_keys(&self) -> usize {
        self.channels.len() + self.lingering.len()
    }
}

impl Core {
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscription.is_active()
    }

    /// A waiter got a busy reply and waits: listen for releases.
    pub(super) fn subscription_wanted_by_waiter(&mut self) {
        if self.subscription.mode == Mode::Off && !self.shutting_down {
            self.subscription.mode = Mode::Starting;
            self.events.push_back(CoreEvent::StartSubscriber);
        }
    }

    /// A release notification arrived; its payload names the lines (the
    /// key's sha, `sem:<sha>` for a semaphore, `rw:<sha>` for both lines
    /// of a read-write lease).
    /// A notification's payload at `now`: a hand-over's grant or claim
    /// (docs/PROTOCOL.md §4), or a release. Returns whether it counts as a
    /// release notification (a claim, which only older lockers publish,
    /// only tells the other waiters).
    pub(crate) fn handle_notice(&mut self, now: Instant, payload: &[u8]) -> bool {
        let Some((line, handover)) = Handover::parse(payload) else {
            self.handle_notification(payload);
            return true;
        };
        let ours = self.settings.handover.map(|h| h.reg);
        match handover {
            // Ours: the head takes it (`core/claimless.rs`) or claims it
            // at once.
            Handover::Granted(grant) if Some(grant.reg) == ours => {
                if self.take_grant(now, line, &grant).is_some()
                    || self.wake_head_of(line, Line::handle_our_grant)
                {
                    self.wakeups.notification += 1;
                } else {
                    // Nobody came back for it: on to the next.
                    self.pass_on_grant(now, line);
                }
            }
            Handover::Granted(GrantNotice { reg, claim, .. }) => {
                // A key reserved for one of our multi-key lines: its head
                // attempts at once (docs/PROTOCOL.md §6).
                let sets: Vec<LineKey> = match (line.kind, ours) {
                    (Kind::Lock, Some(h)) => self
                        .set_lines_with(line.id)
                        .filter(|set| multi_reg(h, set.id) == reg)
                        .collect(),
                    _ => Vec::new(),
                };
                let for_sets = !sets.is_empty();
                self.wakeups.notification += self.wake_lines(sets);
                // A read-write lease's grant or claim concerns its readers
                // and its writers alike.
                for line in line.freed_by_release().filter(|_| !for_sets) {
                    self.wake_head_of(line, |line| line.handle_grant_elsewhere(now, claim));
                }
            }
            Handover::Claimed => {
                for line in line.freed_by_release() {
                    if let Some(line) = self.lines.get_mut(&line) {
                        line.handle_claimed();
                    }
                }
                return false;
            }
        }
        true
    }

    pub(crate) fn handle_notification(&mut self, payload: &[u8]) {
        if let Some((id, _)) = election_notice(payload) {
            self.handle_observed_change(id);
        }
        for line in LineKey::from_message(payload) {
            if self.wake_head_of(line, Line::handle_wake) {
                self.wakeups.notification += 1;
            }
            if line.kind == Kind::Lock {
                let sets = self.set_lines_with(line.id).collect();
                self.wakeups.notification += self.wake_lines(sets);
            }
        }
    }

    /// Listeners of the keys `ids` left at `now`: a channel nobody listens
    /// on any more lingers, and so does the subscription once nobody
    /// listens at all.
    pub(super) fn handle_listeners_left(
        &mut self,
        now: Instant,
        ids: impl IntoIterator<Item = KeyId>,
    ) {
        for id in ids {
            let channel = id.channel_id();
            // Only subscribed channels linger.
            if self.subscription.channels.contains(&channel) && !self.is_channel_wanted(channel) {
                self.subscription.lingering.insert(channel, now);
            }
        }
        if !self.has_listeners() {
            self.subscription.idle_since = Some(now);
        }
    }

    /// Whether a line with waiters listens on the channel of id `channel`
    /// ([`KeyId::channel_id`]): a key's own, or with hash tags its tag's.
    pub(super) fn is_channel_wanted(&self, channel: KeyId) -> bool {
        // A lingering registration's grants come on its key's channel.
        if self
            .lingering
            .iter()
            .any(|key| key.id.channel_id() == channel)
        {
            return true;
        }
        if !self.settings.key_hash_tags {
            return self.is_wanted(channel);
        }
        self.observed.keys().any(|id| id.channel_id() == channel)
            || self
                .lines
                .iter()
                .any(|(key, line)| !line.is_empty() && self.listens_on(*key, channel))
    }

    /// Whether line `key` hears its releases on the channel `channel`.
    fn listens_on(&self, key: LineKey, channel: KeyId) -> bool {
        self.channel_keys(key)
            .iter()
            .any(|id| id.channel_id() == channel)
    }

    /// Wakes the head of every line on the channel of id `id` (with hash
    /// tags, every line of every key of the tag); returns how many.
    fn wake_lines_of(&mut self, id: KeyId) -> u64 {
        let lines: Vec<LineKey> = if self.settings.key_hash_tags {
            let lines = self.lines.keys().copied();
            lines.filter(|key| self.listens_on(*key, id)).collect()
        } else {
            // On a cluster this runs for every channel confirmed, so a scan
            // of every line would grow with the keys.
            self.lines_of(id).collect()
        };
        self.wake_lines(lines)
    }

    /// The subscription is confirmed (first time or after a reconnect): a
    /// release or a change may have gone unseen before it, so every head
    /// checks again and every observer reads.
    pub(crate) fn handle_subscribed(&mut self) {
        if self.subscription.mode == Mode::Starting {
            self.subscription.mode = Mode::Active;
        }
        self.handle_every_observed_change();
        let woken = self.wake_heads(Line::handle_wake);
        if std::mem::take(&mut self.subscription.reconnecting) {
            self.wakeups.reconnect += woken;
        }
    }

    /// The subscriber lost its connection and is reconnecting: heads poll
    /// at `poll_interval` until it is back.
    pub(crate) fn handle_subscriber_lost(&mut self, now: Instant) {
        // The server may have changed (a failover): its clock too.
        self.anchor = None;
        if self.subscription.mode == Mode::Active {
            self.subscription.mode = Mode::Starting;
            self.subscription.reconnecting = true;
        }
        // Their grants could go unheard meanwhile.
        self.end_lingering_of(|_| true);
        self.clamp_heads(now);
    }

    /// Subscribing was refused (or cannot work). Returns true the first
    /// time in a row, when `LOCK_NOTIFY_UNAVAILABLE` should be logged.
    pub(crate) fn handle_subscription_failed(&mut self, now: Instant) -> bool {
        let first = self.subscription.mode != Mode::Unavailable;
        self.subscription.mode = Mode::Unavailable;
        self.subscription.reconnecting = false;
        self.subscription.channels.clear();
        self.subscription.lingering.clear();
        self.end_lingering_of(|_| true);
        self.clamp_heads(now);
        first
    }

    fn clamp_heads(&mut self, now: Instant) {
        let safety = self.settings.poll_interval;
        // Rescheduled, not woken for a reason of their own: not counted.
        let _ = self.wake_heads(|line| line.clamp_retry(now, safety));
    }

    /// Whether the subscriber should keep listening.
    pub(crate) fn poll_subscriber(&mut self, now: Instant) -> SubscriberStep {
        let lingering_ends = self.end_lingering_due(now);
        let sub = &mut self.subscription;
        if matches!(sub.mode, Mode::Off | Mode::Unavailable) {
            return SubscriberStep::Stop;
        }
        if self.shutting_down {
            sub.mode = Mode::Off;
            sub.reconnecting = false;
            return SubscriberStep::Stop;
        }
        let extension_due = self.next_extension_due();
        if extension_due.is_some() {
            // A grant taken without its claim is still to extend.
            return SubscriberStep::Listen(earliest_of(lingering_ends, extension_due));
        }
        let sub = &mut self.subscription;
        match sub.idle_since {
            None => SubscriberStep::Listen(lingering_ends),
            Some(t) => match deadline_after(t, SUBSCRIPTION_LINGER) {
                Some(until) if now < until => SubscriberStep::Listen(Some(until)),
                _ => {
                    sub.mode = Mode::Off;
                    sub.reconnecting = false;
                    sub.channels.clear();
                    sub.lingering.clear();
                    SubscriberStep::Stop
                }
            },
        }
    }

    /// The keys whose release channel a per-key (Redis Cluster) subscriber
    /// should hold at `now`: every key with a line, every observed
    /// election, and subscribed keys
    /// whose line emptied less than the linger ago. Keys dropped from the
    /// set are forgotten as subscribed: the subscriber unsubscribes them.
    pub(crate) fn wanted_keys(&mut self, now: Instant) -> Vec<KeyId> {
        let sub = &mut self.subscription;
        sub.lingering.retain(|key, since| {
            let keep = deadline_after(*since, SUBSCRIPTION_LINGER).is_some_and(|until| now < until);
            if !keep {
                sub.channels.remove(key);
            }
            keep
        });
        let mut keys: HashSet<KeyId> = self
            .lines
            .iter()
            .filter(|(_, line)| !line.is_empty())
            .flat_map(|(key, _)| self.channel_keys(*key))
            .map(KeyId::channel_id)
            .collect();
        // Lingering registrations hear their grants there.
        keys.extend(self.lingering.iter().map(|key| key.id.channel_id()));
        let sub = &mut self.subscription;
        keys.extend(sub.lingering.keys().copied());
        keys.extend(self.observed.keys().map(|id| id.channel_id()));
        sub.channels.retain(|key| keys.contains(key));
        keys.into_iter().collect()
    }

    /// Whether a grant for `key` would reach this locker now: its
    /// notifications for the key are confirmed, or unavailable (then its
    /// heads poll every `poll_interval` and find a grant by its token). A
    /// locker registers in a hand-over queue only then, so that a grant
    /// never goes to a locker that cannot hear of it; confirming the
    /// subscription makes the head check (and register) at once.
    pub(crate) fn hears_grants(&self, key: KeyId) -> bool {
        let sub = &self.subscription;
        match sub.mode {
            Mode::Active => {
                self.settings.channel == Channel::Standalone
                    || sub.channels.contains(&key.channel_id())
            }
            Mode::Unavailable => true,
            Mode::Off | Mode::Starting => false,
        }
    }

    /// One key's channel subscription is confirmed (Redis Cluster): the
    /// subscription counts as active and that key's head checks once more.
    pub(crate) fn handle_channel_subscribed(&mut self, key: KeyId) {
        let sub = &mut self.subscription;
        if matches!(sub.mode, Mode::Starting | Mode::Off) {
            sub.mode = Mode::Active;
        }
        if self.settings.channel == Channel::Sharded {
            sub.channels.insert(key);
        }
        self.handle_observed_change(key);
        let _ = self.wake_lines_of(key);
    }

    /// A key's channel went away on the node's side (its slot moved): its
    /// head checks at once (a `reconnect` wake-up), and the subscriber
    /// subscribes it again.
    pub(crate) fn handle_channel_lost(&mut self, key: KeyId) {
        self.subscription.channels.remove(&key);
        self.end_lingering_of(|line| line.id.channel_id() == key);
        self.handle_observed_change(key);
        self.wakeups.reconnect += self.wake_lines_of(key);
    }
}
