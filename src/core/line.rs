//! One key's FIFO line of waiters inside one locker.
//!
//! Only the head talks to Redis, so a locker sends at most one acquire per
//! key at a time however many of its callers wait. The head's state carries
//! its own deadline:
//!
//! ```text
//!            poll                 busy reply / failure
//!  Ready ──────────▶ Attempting ─────────────────────▶ Backoff { retry_at }
//!    ▲                  │ notified meanwhile (busy)        │ retry_at reached
//!    │                  └──────▶ Ready ◀───────────────────┤ or notification
//!    └── new head after the old one left ◀─────────────────┘
//!
//!  head abandoned mid-attempt ──▶ Settling { until } ──until reached / settled──▶ Ready
//! ```
//!
//! `Settling` keeps the promise of one attempt per key at a time when a head
//! leaves with its attempt still unanswered (a dropped future): its reply
//! can come no later than the command timeout, so the next head waits until
//! then, or until the abandoned token's release was answered on the same
//! connection.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::core::earliest_of;
use super::lease::deadline_after;
use super::names::OwnerToken;
use super::outcome::Fence;
use super::slots::SlotId;

/// How long after a grant's claim window a registered head checks whether
/// the grant lapsed.
const CLAIM_MARGIN: Duration = Duration::from_millis(2);

/// Identifies one acquire in progress (a waiter) of a locker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WaiterId(pub(crate) SlotId);

/// The head's relation to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum HeadState {
    /// Should send an attempt now.
    #[default]
    Ready,
    /// An attempt is in flight; `notified` records a release notification
    /// that arrived meanwhile, so a busy reply is retried at once.
    Attempting { notified: bool },
    /// Waits for a notification or `retry_at`, whichever comes first.
    Backoff { retry_at: Option<Instant> },
    /// The previous head left with an attempt in flight; nobody attempts
    /// before `until` unless the line is settled earlier.
    Settling { until: Option<Instant> },
}

/// What the line tells one of its waiters to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineStep {
    /// Send an acquire attempt now.
    Attempt,
    /// Wait for a wake-up or until the instant.
    WaitUntil(Option<Instant>),
}

#[derive(Debug, Default)]
pub(crate) struct Line {
    queue: VecDeque<WaiterId>,
    head: HeadState,
    /// When the holder's lease ends, from the last busy reply.
    holder_until: Option<Instant>,
    /// The locker's grant token for this line (docs/PROTOCOL.md §4.3): the
    /// owner its registration in the key's hand-over queue names, to whom
    /// a grant is made out; drawn from the first head that attempted.
    grant: Option<OwnerToken>,
    /// Whether that registration is queued, as far as the replies told.
    registered: bool,
    /// Whether the attempt in flight keeps the registration queued if it
    /// holds the lease (the locker has a waiter after it).
    keeps: bool,
    /// Whether the attempt in flight also refreshes the registration's
    /// bound if it holds the lease.
    refreshing: bool,
    /// When the last attempt that registered or refreshed the locker was
    /// sent: its entry's bound runs from about then (docs/PROTOCOL.md §4.3).
    refreshed: Option<Instant>,
    /// The retry instant the head's last busy reply or failure set: a grant
    /// to another locker may bring the retry forward (to take over a grant
    /// nobody claims), never past this instant, and the next grant (or an
    /// older locker's claim notice) puts it back here, never later, so a
    /// registered locker still attempts (and refreshes its registration)
    /// at least every safety interval.
    scheduled: Option<Instant>,
    /// The head's grant said the next head is registered and has nothing
    /// free to take (a permit's reply): it waits for its grant.
    next_waits: bool,
    /// The line emptied as its last waiter took the lease, and the
    /// registration stays queued for a waiter that comes back soon
    /// (docs/PROTOCOL.md §4.4).
    lingering: Option<Linger>,
    /// The highest fence a waiter of this line was given (a lock's or a
    /// writer's; per slot for a semaphore's, in `given_slots`): a grant of
    /// a fence not above it is one data loss brought back
    /// (docs/PROTOCOL.md §4.3), never given twice. A lock's needs no
    /// allocation on the uncontended path.
    given: Option<Fence>,
    given_slots: HashMap<u32, Fence>,
}

/// How long a registration without waiters stays queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linger {
    /// While the lease its last waiter took is held.
    Holding,
    /// Until this instant, after that lease's release, which handed the
    /// key to another registration (`handed_over`: a waiter that comes
    /// back waits for its turn) or freed it.
    Until { until: Instant, handed_over: bool },
}

impl Line {
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(crate) fn head(&self) -> Option<WaiterId> {
        self.queue.front().copied()
    }

    pub(crate) fn head_state(&self) -> HeadState {
        self.head
    }

    /// The waiter after the head.
    pub(crate) fn second(&self) -> Option<WaiterId> {
        self.queue.get(1).copied()
    }

    /// Whether the locker's registration is queued, as far as the replies
    /// and notices told.
    pub(crate) fn is_registered(&self) -> bool {
        self.registered
    }

    /// A grant was made out to the locker's registration: the head claims
    /// it at once. Returns the head to wake.
    pub(crate) fn handle_our_grant(&mut self) -> Option<WaiterId> {
        self.registered = true;
        self.handle_wake()
    }

    /// The locker's grant token for this line, drawn from `head`'s token
    /// ([`OwnerToken::grant_token`]) the first time.
    pub(crate) fn grant_token(&mut self, head: OwnerToken) -> OwnerToken {
        *self.grant.get_or_insert_with(|| head.grant_token())
    }

    /// The line's grant token, if one was drawn.
    pub(crate) fn grant_token_drawn(&self) -> Option<OwnerToken> {
        self.grant
    }

    /// Forgets the locker's registration (its last waiter left); returns
    /// the grant token it named, if there was one to remove from Redis. A
    /// later registration draws a new one, so the release of this one can
    /// never meet a grant made out to the next.
    pub(crate) fn take_registration(&mut self) -> Option<OwnerToken> {
        self.lingering = None;
        self.keeps = false;
        self.refreshing = false;
        self.refreshed = None;
        let grant = self.grant.take();
        grant.filter(|_| std::mem::take(&mut self.registered))
    }

    /// The line emptied as its last waiter took the lease: the registration
    /// stays queued while the lease is held (docs/PROTOCOL.md §4.4).
    pub(crate) fn linger(&mut self) {
        self.lingering = Some(Linger::Holding);
    }

    /// How the registration lingers without waiters, if it does.
    pub(crate) fn lingering(&self) -> Option<Linger> {
        self.lingering
    }

    /// The lease the last waiter took was released at `now` (handed to
    /// another registration or not): the registration lingers `window`
    /// longer.
    pub(crate) fn handle_lease_released(
        &mut self,
        now: Instant,
        window: Duration,
        handed_over: bool,
    ) {
        if self.lingering == Some(Linger::Holding) {
            self.lingering =
                deadline_after(now, window).map(|until| Linger::Until { until, handed_over });
        }
    }

    /// When the registration's entry is surely past its bound in Redis
    /// (`bound` after the last attempt that registered or refreshed it,
    /// plus `reply_bound`, the latest that attempt ran): nothing is left
    /// to take out then.
    pub(crate) fn entry_gone_at(&self, bound: Duration, reply_bound: Duration) -> Option<Instant> {
        self.refreshed
            .and_then(|at| deadline_after(at, bound + reply_bound))
    }

    /// A waiter joined the lingering line: the registration has a waiter
    /// again. Returns whether its turn is still to come (the lease is held
    /// by the locker, or its release handed the key on), rather than the
    /// key left free.
    pub(crate) fn stop_lingering(&mut self) -> bool {
        !matches!(
            self.lingering.take(),
            Some(Linger::Until {
                handed_over: false,
                ..
            })
        )
    }

    /// The head that joined a lingering line at `now` waits for the grant
    /// to the registration that stayed queued rather than attempting: it
    /// checks once `claim` after a grant to another locker could have
    /// lapsed, and at least every `safety`, and at `deadline` at the
    /// latest. Not when the registration's entry, `bound` after its last
    /// refresh, could lapse before that first check: an attempt refreshes
    /// it (the claim of the grant refreshes it when due).
    pub(crate) fn await_grant(
        &mut self,
        now: Instant,
        bound: Duration,
        claim: Duration,
        safety: Duration,
        deadline: Option<Instant>,
    ) {
        let check = claim + CLAIM_MARGIN;
        let lives = self
            .refreshed
            .and_then(|at| deadline_after(at, bound.saturating_sub(check)))
            .is_some_and(|until| now < until);
        if self.queue.len() != 1 || !self.registered || !lives {
            return;
        }
        self.scheduled = deadline_after(now, safety);
        let lapsed = earliest_of(deadline_after(now, check), self.scheduled);
        self.head = HeadState::Backoff {
            retry_at: earliest_of(lapsed, deadline),
        };
    }

    /// Whether an attempt sent at `now` that keeps the registration should
    /// also refresh its bound: the locker is registered and its last
    /// refresh is `every` old (a locker served by grants makes no busy
    /// attempt, the other refresh).
    pub(crate) fn refresh_due(&self, now: Instant, every: Duration) -> bool {
        self.registered
            && self
                .refreshed
                .is_none_or(|at| now.saturating_duration_since(at) >= every)
    }

    /// The head's attempt goes out; if it holds the lease by it, the
    /// registration stays queued when `keeps` (a waiter follows), and is
    /// refreshed when `refreshing`, else the script takes it out.
    pub(crate) fn attempt_registers(&mut self, keeps: bool, refreshing: bool) {
        self.keeps = keeps;
        self.refreshing = keeps && refreshing;
    }

    /// The head's attempt, sent at `submitted`, found the lease held and
    /// registered (or refreshed) the locker.
    pub(crate) fn handle_registered(&mut self, submitted: Instant) {
        self.registered = true;
        self.refreshed = Some(submitted);
        self.keeps = false;
        self.refreshing = false;
    }

    /// The head's attempt, sent at `submitted`, got the lease: the
    /// registration stays if the attempt kept it (or made one for the next
    /// waiter: `next_waits`), refreshed if the attempt said so.
    pub(crate) fn handle_granted(&mut self, submitted: Instant, next_waits: bool) {
        let keeps = std::mem::take(&mut self.keeps);
        self.registered = (self.registered || next_waits) && keeps;
        let refreshed = std::mem::take(&mut self.refreshing) && self.registered;
        if refreshed || next_waits {
            self.refreshed = Some(submitted);
        }
        self.next_waits = next_waits;
    }

    /// Whether a grant of `fence` (on semaphore slot `slot`) is one a
    /// waiter of this line was given before, or an older one: a failover
    /// that lost writes brought it back under the line's grant token.
    pub(crate) fn is_stale(&self, slot: Option<u32>, fence: Fence) -> bool {
        let given = match slot {
            Some(slot) => self.given_slots.get(&slot).copied(),
            None => self.given,
        };
        given.is_some_and(|given| fence <= given)
    }

    /// The highest fence a waiter of this line was given (a lock's or a
    /// writer's).
    pub(crate) fn given(&self) -> Option<Fence> {
        self.given
    }

    /// A waiter of this line was given `fence` (on slot `slot`).
    pub(crate) fn handle_given(&mut self, slot: Option<u32>, fence: Fence) {
        let given = match slot {
            Some(slot) => self.given_slots.entry(slot).or_insert(fence),
            None => self.given.get_or_insert(fence),
        };
        *given = (*given).max(fence);
    }

    /// Whether the grant's reply said the next head is registered with
    /// nothing free for it (a permit's): it waits for its own grant.
    pub(crate) fn take_next_waits(&mut self) -> bool {
        std::mem::take(&mut self.next_waits)
    }

    /// Another locker was handed the lease. A head without a registration
    /// has no grant to wait for: it attempts now, which queues it (moving
    /// its retry past each grant's window instead would keep it out of
    /// the queue for as long as grants come faster than the window). A
    /// registered head waits for its grant; the grantee has `claim` to
    /// claim it: if it does not, the head must be ready to take over just
    /// after (the next attempt of a registered locker hands the lapsed
    /// grant on).
    /// A grant also settles the one before it (claimed and released, or
    /// lapsed and handed on: claims publish nothing), so the retry an
    /// earlier grant brought forward goes back to the last reply's first.
    /// Returns the head to wake when its retry instant moved earlier (it
    /// sleeps toward the old one).
    pub(crate) fn handle_grant_elsewhere(
        &mut self,
        now: Instant,
        claim: Duration,
    ) -> Option<WaiterId> {
        if let HeadState::Backoff { retry_at } = self.head {
            if !self.registered {
                return self.handle_wake();
            }
            // Just after the window, so the lapsed grant is gone.
            let after = deadline_after(now, claim + CLAIM_MARGIN);
            let sooner = earliest_of(self.scheduled, after);
            if sooner != retry_at {
                self.head = HeadState::Backoff { retry_at: sooner };
                // Woken at its old retry, a head waits again for the new
                // one: only a sooner retry is worth a wake-up (under
                // contention every hand-over brings a grant elsewhere).
                if earliest_of(sooner, retry_at) != retry_at {
                    return self.head();
                }
            }
        }
        None
    }

    /// The grant was claimed: a head that moved its retry for the claim
    /// window goes back to the retry its last reply set.
    pub(crate) fn handle_claimed(&mut self) {
        if let HeadState::Backoff { .. } = self.head {
            self.head = HeadState::Backoff {
                retry_at: self.scheduled,
            };
        }
    }

    /// The holder's remaining time as of `now`, when a busy reply told it.
    pub(crate) fn holder_remaining(&self, now: Instant) -> Option<Duration> {
        self.holder_until
            .map(|until| until.saturating_duration_since(now))
    }

    /// Appends a waiter; returns true when it is the head.
    pub(crate) fn join(&mut self, id: WaiterId) -> bool {
        self.queue.push_back(id);
        if self.queue.len() == 1 {
            // An empty line kept while it settles stays settling.
            if !matches!(self.head, HeadState::Settling { .. }) {
                self.head = HeadState::Ready;
            }
            return true;
        }
        false
    }

    /// Removes a waiter from anywhere in the line. Returns the new head when
    /// the head changed, which must then be woken: it is `Ready`.
    #[cfg(test)]
    pub(crate) fn leave(&mut self, id: WaiterId) -> Option<WaiterId> {
        self.leave_settling(id, None)
    }

    /// Like [`leave`](Self::leave); `in_flight_until` is set when the
    /// waiter leaves with an attempt unanswered, whose reply can come no
    /// later than that instant: the line then settles before anyone attempts.
    pub(crate) fn leave_settling(
        &mut self,
        id: WaiterId,
        in_flight_until: Option<Instant>,
    ) -> Option<WaiterId> {
        let pos = self.queue.iter().position(|w| *w == id)?;
        self.queue.remove(pos);
        if pos != 0 {
            return None;
        }
        if self.queue.is_empty() {
            self.holder_until = None;
        }
        self.head = match (in_flight_until, self.head) {
            (Some(until), _) => HeadState::Settling { until: Some(until) },
            // A head that leaves while the line settles leaves it settling.
            (None, settling @ HeadState::Settling { .. }) => settling,
            (None, _) => HeadState::Ready,
        };
        self.head()
    }

    /// Whether an abandoned attempt may still be answered: the line is kept,
    /// even empty, so that a waiter joining it does not attempt at once.
    pub(crate) fn is_settling(&self, now: Instant) -> bool {
        matches!(self.head, HeadState::Settling { until } if until.is_none_or(|u| now < u))
    }

    /// The abandoned attempt that made the line settle is answered for (its
    /// token's release came back on the same connection). Returns the head
    /// to wake.
    pub(crate) fn settle(&mut self) -> Option<WaiterId> {
        if matches!(self.head, HeadState::Settling { .. }) {
            self.head = HeadState::Ready;
            return self.head();
        }
        None
    }

    /// A new head whose predecessor just acquired the key: the lock is held
    /// by the same locker for `lease`, so the head backs off as after a busy
    /// reply instead of trying at once.
    pub(crate) fn defer_head(&mut self, now: Instant, lease: Duration, safety: Duration) {
        if self.head == HeadState::Ready {
            self.handle_busy(now, Some(lease), None, safety);
        }
    }

    /// The step for waiter `id` at `now`.
    pub(crate) fn poll(&mut self, id: WaiterId, now: Instant) -> LineStep {
        if self.head() != Some(id) {
            return LineStep::WaitUntil(None);
        }
        match self.head {
            HeadState::Attempting { .. } => LineStep::WaitUntil(None),
            HeadState::Backoff { retry_at: at } | HeadState::Settling { until: at }
                if at.is_none_or(|at| now < at) =>
            {
                LineStep::WaitUntil(at)
            }
            // Ready, or its instant came.
            _ => {
                self.head = HeadState::Attempting { notified: false };
                LineStep::Attempt
            }
        }
    }

    /// The head's attempt found the lock busy. It retries at `retry_at`
    /// when the reply timed the expiry to the microsecond, else after
    /// `min(remaining, safety)` (either way within the safety interval; the
    /// waiter's own deadline bounds it further), or at once if a
    /// notification arrived while the attempt was in flight.
    pub(crate) fn handle_busy(
        &mut self,
        now: Instant,
        remaining: Option<Duration>,
        retry_at: Option<Instant>,
        safety: Duration,
    ) {
        self.holder_until = remaining.and_then(|r| deadline_after(now, r));
        self.head = match self.head {
            HeadState::Attempting { notified: true } => HeadState::Ready,
            _ => {
                let safety_at = deadline_after(now, safety);
                self.scheduled = match retry_at {
                    Some(at) => earliest_of(Some(at), safety_at),
                    None => deadline_after(now, remaining.map_or(safety, |r| r.min(safety))),
                };
                HeadState::Backoff {
                    retry_at: self.scheduled,
                }
            }
        };
    }

    /// The head's attempt ended without a busy reply (acquired or failed);
    /// the head leaves next, so nothing to keep.
    pub(crate) fn handle_attempt_done(&mut self) {
        self.holder_until = None;
        self.head = HeadState::Ready;
    }

    /// The head's attempt failed and the head keeps waiting (the crate docs' "How it works":
    /// waiting survives faults): it tries again after `delay`. A release
    /// notification meanwhile brings the retry forward, which is harmless.
    pub(crate) fn handle_failed(&mut self, now: Instant, delay: Duration) {
        self.scheduled = deadline_after(now, delay);
        self.head = HeadState::Backoff {
            retry_at: self.scheduled,
        };
    }

    /// A release notification for this key, or a reason to check at once
    /// (subscription confirmed, subscriber reconnected). Returns the head to
    /// wake when it should retry now.
    pub(crate) fn handle_wake(&mut self) -> Option<WaiterId> {
        match self.head {
            HeadState::Backoff { .. } => {
                self.head = HeadState::Ready;
                self.head()
            }
            HeadState::Attempting { .. } => {
                self.head = HeadState::Attempting { notified: true };
                None
            }
            HeadState::Ready | HeadState::Settling { .. } => None,
        }
    }

    /// Brings a backing-off head's retry forward to at most `now + safety`
    /// (notifications just became unavailable). Returns the head to wake.
    pub(crate) fn clamp_retry(&mut self, now: Instant, safety: Duration) -> Option<WaiterId> {
        if let HeadState::Backoff { retry_at } = self.head {
            let sooner = earliest_of(retry_at, deadline_after(now, safety));
            if sooner != retry_at {
                self.scheduled = sooner;
                self.head = HeadState::Backoff { retry_at: sooner };
                return self.head();
            }
        }
        None
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
mod tests {
    use super::*;
    use crate::core::slots::Slots;

    /// A line of `n` waiters whose head polled at `now` (attempting).
    fn polled_line(n: usize, now: Instant) -> (Vec<WaiterId>, Line) {
        let w = ids(n);
        let mut line = Line::default();
        for id in &w {
            line.join(*id);
        }
        line.poll(w[0], now);
        (w, line)
    }

    fn ids(n: usize) -> Vec<WaiterId> {
        let mut slots = Slots::default();
        (0..n).map(|i| WaiterId(slots.insert(i))).collect()
    }

    const SAFETY: Duration = Duration::from_millis(250);

    #[test]
    fn only_the_head_attempts() {
        let now = Instant::now();
        let w = ids(2);
        let mut line = Line::default();
        assert!(line.join(w[0]));
        assert!(!line.join(w[1]));
        assert_eq!(line.poll(w[1], now), LineStep::WaitUntil(None));
        assert_eq!(line.poll(w[0], now), LineStep::Attempt);
        assert_eq!(
            line.poll(w[0], now),
            LineStep::WaitUntil(None),
            "one attempt at a time"
        );
    }

    #[test]
    fn busy_head_retries_after_the_smaller_of_remaining_and_safety() {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        line.handle_busy(now, Some(Duration::from_millis(40)), None, SAFETY);
        let at = now + Duration::from_millis(40);
        assert_eq!(line.poll(w[0], now), LineStep::WaitUntil(Some(at)));
        assert_eq!(line.poll(w[0], at), LineStep::Attempt);
        line.handle_busy(at, Some(Duration::from_secs(9)), None, SAFETY);
        assert_eq!(line.poll(w[0], at), LineStep::WaitUntil(Some(at + SAFETY)));
        assert_eq!(line.holder_remaining(at), Some(Duration::from_secs(9)));
    }

    #[test]
    fn head_retries_at_once_when_release_notification_arrives() {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        line.handle_busy(now, Some(Duration::from_secs(5)), None, SAFETY);
        assert_eq!(line.handle_wake(), Some(w[0]));
        assert_eq!(line.poll(w[0], now), LineStep::Attempt);
    }

    #[test]
    fn a_notification_during_the_attempt_makes_a_busy_reply_retry_at_once() {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        assert_eq!(line.handle_wake(), None);
        line.handle_busy(now, Some(Duration::from_secs(5)), None, SAFETY);
        assert_eq!(line.poll(w[0], now), LineStep::Attempt);
    }

    #[test]
    fn leaving_from_the_middle_does_not_disturb_the_head() {
        let now = Instant::now();
        let w = ids(3);
        let mut line = Line::default();
        for id in &w {
            line.join(*id);
        }
        line.poll(w[0], now);
        line.handle_busy(now, None, None, SAFETY);
        assert_eq!(line.leave(w[1]), None);
        assert_eq!(
            line.head_state(),
            HeadState::Backoff {
                retry_at: Some(now + SAFETY)
            }
        );
        assert_eq!(line.leave(w[0]), Some(w[2]));
        assert_eq!(line.poll(w[2], now), LineStep::Attempt);
    }

    #[test]
    fn clamping_brings_a_long_retry_forward_only() {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        line.handle_busy(now, Some(Duration::from_secs(5)), None, SAFETY);
        let fast = Duration::from_millis(25);
        assert_eq!(line.clamp_retry(now, fast), Some(w[0]));
        assert_eq!(line.poll(w[0], now), LineStep::WaitUntil(Some(now + fast)));
        assert_eq!(line.clamp_retry(now, SAFETY), None);
    }

    #[test]
    fn a_head_abandoned_mid_attempt_makes_the_next_head_wait_until_the_line_settles() {
        let now = Instant::now();
        let w = ids(2);
        let mut line = Line::default();
        line.join(w[0]);
        line.join(w[1]);
        assert_eq!(line.poll(w[0], now), LineStep::Attempt);
        let until = now + Duration::from_secs(2);
        assert_eq!(line.leave_settling(w[0], Some(until)), Some(w[1]));
        assert_eq!(line.poll(w[1], now), LineStep::WaitUntil(Some(until)));
        assert_eq!(
            line.handle_wake(),
            None,
            "a notification does not settle it"
        );
        assert_eq!(line.settle(), Some(w[1]));
        assert_eq!(line.poll(w[1], now), LineStep::Attempt);
    }

    #[test]
    fn a_settling_line_lets_the_next_head_attempt_once_the_reply_can_no_longer_come() {
        let now = Instant::now();
        let (w, mut line) = polled_line(2, now);
        let until = now + Duration::from_secs(2);
        line.leave_settling(w[0], Some(until));
        assert_eq!(line.poll(w[1], until), LineStep::Attempt);
    }

    #[test]
    fn a_failed_attempt_backs_off_and_keeps_the_head() {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        line.handle_failed(now, Duration::from_millis(10));
        let at = now + Duration::from_millis(10);
        assert_eq!(line.poll(w[0], now), LineStep::WaitUntil(Some(at)));
        assert_eq!(line.poll(w[0], at), LineStep::Attempt);
    }

    #[test]
    fn a_grant_elsewhere_brings_the_retry_to_its_claim_window_and_the_next_grant_moves_it_without_a_wake_up(
    ) {
        let now = Instant::now();
        let w = ids(1);
        let mut line = Line::default();
        line.join(w[0]);
        line.poll(w[0], now);
        line.handle_busy(now, Some(Duration::from_secs(5)), None, SAFETY);
        line.handle_registered(now);
        let regular = LineStep::WaitUntil(Some(now + SAFETY));
        let claim = Duration::from_millis(100);
        assert_eq!(line.handle_grant_elsewhere(now, claim), Some(w[0]));
        assert_eq!(
            line.poll(w[0], now),
            LineStep::WaitUntil(Some(now + claim + CLAIM_MARGIN))
        );
        // A second grant settled the first: the retry follows its window,
        // later than the one the head waits for, so it is not woken (it
        // wakes at the first and waits again).
        let later = now + Duration::from_millis(50);
        assert_eq!(line.handle_grant_elsewhere(later, claim), None);
        assert_eq!(
            line.poll(w[0], now + claim + CLAIM_MARGIN),
            LineStep::WaitUntil(Some(later + claim + CLAIM_MARGIN))
        );
        assert_eq!(
            line.poll(w[0], later),
            LineStep::WaitUntil(Some(later + claim + CLAIM_MARGIN))
        );
        // Never past the retry the last reply set, whatever the grants.
        let long = Duration::from_secs(60);
        line.handle_grant_elsewhere(later, long);
        assert_eq!(line.poll(w[0], later), regular);
        // An older locker's claim notice puts it back there too.
        line.handle_grant_elsewhere(later, claim);
        line.handle_claimed();
        assert_eq!(
            line.poll(w[0], now),
            regular,
            "at least every safety interval"
        );
    }

    /// A head left without a registration (the waiter before it took the
    /// lease by an attempt that kept none) attempts at the first grant to
    /// another locker, which queues it, rather than waiting past each
    /// grant's claim window until its safety poll.
    #[test]
    fn a_grant_elsewhere_makes_a_head_without_a_registration_attempt_at_once() {
        let now = Instant::now();
        let (w, mut line) = polled_line(2, now);
        line.attempt_registers(false, false);
        line.handle_granted(now, false);
        line.handle_attempt_done();
        assert_eq!(line.leave(w[0]), Some(w[1]));
        line.defer_head(now, Duration::from_secs(60), SAFETY);
        assert!(!line.is_registered());
        let claim = Duration::from_millis(100);
        let later = now + Duration::from_millis(3);
        assert_eq!(line.handle_grant_elsewhere(later, claim), Some(w[1]));
        assert_eq!(line.poll(w[1], later), LineStep::Attempt);
    }

    /// The registration names one grant token for the line, whoever is
    /// head, drawn from the first head's token and never equal to a
    /// waiter's; the line draws a new one once its registration is gone
    /// (docs/PROTOCOL.md §4.3).
    #[test]
    fn the_grant_token_outlives_head_changes_and_is_drawn_anew_after_leaving() {
        let now = Instant::now();
        let (first, second) = (
            OwnerToken::from_bytes([1; 16]),
            OwnerToken::from_bytes([2; 16]),
        );
        let mut line = Line::default();
        let grant = line.grant_token(first);
        assert_ne!(grant, first, "never a waiter's own token");
        assert_eq!(grant, first.grant_token());
        assert_eq!(
            line.grant_token(second),
            grant,
            "the head changed, not the token"
        );
        assert!(!line.is_registered());
        assert_eq!(line.take_registration(), None, "nothing queued to remove");
        line.grant_token(first);
        line.handle_registered(now);
        assert!(line.is_registered());
        assert_eq!(
            line.take_registration(),
            Some(grant),
            "removed with its token"
        );
        assert_eq!(line.grant_token(second), second.grant_token(), "a new one");
    }

    /// A claim keeps the registration when a waiter follows, and takes it
    /// out when none does; a locker served by grants refreshes it with the
    /// claim that is due (half the bound after the last refresh).
    #[test]
    fn a_claim_keeps_or_drops_the_registration_and_refreshes_it_when_due() {
        let now = Instant::now();
        let half = Duration::from_millis(375);
        let mut line = Line::default();
        line.grant_token(OwnerToken::from_bytes([3; 16]));
        assert!(
            !line.refresh_due(now, half),
            "not registered: nothing to refresh"
        );
        line.handle_registered(now);
        assert!(!line.refresh_due(now + half / 2, half));
        let due = now + half;
        assert!(line.refresh_due(due, half));

        line.attempt_registers(true, true);
        line.handle_granted(due, false);
        assert!(line.is_registered(), "kept for the next waiter");
        assert!(
            !line.refresh_due(due + half / 2, half),
            "the claim refreshed it"
        );
        line.attempt_registers(true, false);
        line.handle_granted(due + half / 2, false);
        assert!(
            line.refresh_due(due + half, half),
            "a claim without refresh did not"
        );

        line.attempt_registers(false, true);
        line.handle_granted(due + half, false);
        assert!(!line.is_registered(), "no waiter followed: taken out");
        assert_eq!(line.take_registration(), None);

        // A permit's take of the last free slot registers the next waiter.
        let mut line = Line::default();
        line.attempt_registers(true, false);
        line.handle_granted(now, true);
        assert!(line.is_registered());
        assert!(!line.refresh_due(now, half), "registered just now");
    }
}
