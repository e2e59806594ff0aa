//! Lease bookkeeping: the local, conservative view of how long a lease lasts.
//!
//! Deadlines count from when a command was *submitted*, not from its reply,
//! so the local view never outlives the lease in Redis. Once a lease was seen
//! gone, in conflict, or its renew/release had an unknown outcome, it never
//! becomes valid again.
//!
//! ```text
//!  granted ──renew──▶ Renewing ──Renewed──▶ Held (valid_until = submitted + lease)
//!     │                  │ Expired / Conflict / unknown
//!     └──release─────────┴──────────────────▶ Ended (never valid again)
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::outcome::{ReleaseOutcome, RenewOutcome};

/// `now + d`, or `None` when the sum is beyond what `Instant` can hold (a
/// lease or wait so long it never ends within this process).
pub(crate) fn deadline_after(now: Instant, d: Duration) -> Option<Instant> {
    now.checked_add(d)
}

/// A lease's clock as its holder and the core share it.
pub(crate) type SharedClock = Arc<Mutex<LeaseClock>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Held {
        valid_until: Option<Instant>,
    },
    Renewing {
        valid_until: Option<Instant>,
        submitted_at: Instant,
    },
    /// Not valid for good: released, or found expired or taken by a
    /// release or a renew (`None`: one whose outcome is unknown).
    Ended(Option<ReleaseOutcome>),
}

/// One lease's deadline state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseClock {
    lease: Duration,
    state: State,
}

/// How a renew ended, as the front end saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewResult {
    Outcome(RenewOutcome),
    /// Redis certainly did not apply it.
    NotApplied,
    /// Timeout, dropped connection or an unexpected reply.
    Unknown,
}

impl LeaseClock {
    /// A lease granted by a command submitted at `submitted_at`.
    pub(crate) fn granted(submitted_at: Instant, lease: Duration) -> Self {
        LeaseClock::until(deadline_after(submitted_at, lease), lease)
    }

    /// A lease valid until `valid_until` (`None`: beyond any instant), then
    /// `lease` from each renew: for one taken from a grant's notice without
    /// its claim (docs/PROTOCOL.md §4.3), the lower bound of the grant's
    /// expiry on this clock.
    pub(crate) fn until(valid_until: Option<Instant>, lease: Duration) -> Self {
        let state = State::Held { valid_until };
        LeaseClock { lease, state }
    }

    /// This clock shared between the holder and the core, which extends a
    /// grant taken without its claim.
    pub(crate) fn shared(self) -> SharedClock {
        Arc::new(Mutex::new(self))
    }

    /// `None` once ended; otherwise the deadline (`None` inside: beyond any instant).
    pub(crate) fn valid_until(&self) -> Option<Option<Instant>> {
        match self.state {
            State::Held { valid_until } | State::Renewing { valid_until, .. } => Some(valid_until),
            State::Ended(_) => None,
        }
    }

    pub(crate) fn is_valid(&self, now: Instant) -> bool {
        !self.remaining(now).is_zero()
    }

    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        match self.valid_until() {
            Some(Some(until)) => until.saturating_duration_since(now),
            Some(None) => Duration::MAX,
            None => Duration::ZERO,
        }
    }

    pub(crate) fn lease(&self) -> Duration {
        self.lease
    }

    /// `None` while not ended; once ended, what ended it ([`State::Ended`]).
    pub(crate) fn ended(&self) -> Option<Option<ReleaseOutcome>> {
        match self.state {
            State::Ended(end) => Some(end),
            _ => None,
        }
    }

    /// Records that a renew was submitted at `now`.
    pub(crate) fn renew_submitted(&mut self, now: Instant) {
        if let State::Held { valid_until } = self.state {
            self.state = State::Renewing {
                valid_until,
                submitted_at: now,
            };
        }
    }

    pub(crate) fn handle_renew(&mut self, result: RenewResult) {
        let State::Renewing {
            valid_until,
            submitted_at,
        } = self.state
        else {
            return;
        };
        let found = |outcome| State::Ended(Some(outcome));
        self.state = match result {
            RenewResult::Outcome(RenewOutcome::Renewed) => State::Held {
                valid_until: deadline_after(submitted_at, self.lease),
            },
            RenewResult::Outcome(RenewOutcome::Expired) => found(ReleaseOutcome::Expired),
            RenewResult::Outcome(RenewOutcome::Conflict) => found(ReleaseOutcome::Conflict),
            RenewResult::NotApplied => State::Held { valid_until },
            RenewResult::Unknown => State::Ended(None),
        };
    }

    /// Like [`handle_renew`](Self::handle_renew), for a renewer that sends
    /// again after a failure (`with_lock`'s docs): an unknown outcome keeps the old
    /// deadline, which is conservative whether or not it was applied, since
    /// a renew only ever extends the caller's own token.
    pub(crate) fn handle_renew_retrying(&mut self, result: RenewResult) {
        self.handle_renew(match result {
            RenewResult::Unknown => RenewResult::NotApplied,
            other => other,
        });
    }

    /// What a release that already happened found, if one did.
    pub(crate) fn released_as(&self) -> Option<ReleaseOutcome> {
        self.ended().flatten()
    }

    /// A release ended (or failed); the lease is never valid afterwards.
    pub(crate) fn handle_release(&mut self, outcome: Option<ReleaseOutcome>) {
        self.state = State::Ended(outcome);
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_millis(1000);

    #[test]
    fn deadline_counts_from_submission_not_reply() {
        let submitted = Instant::now();
        let clock = LeaseClock::granted(submitted, LEASE);
        let reply_at = submitted + Duration::from_millis(300);
        assert_eq!(clock.remaining(reply_at), Duration::from_millis(700));
        assert!(clock.is_valid(submitted + Duration::from_millis(999)));
        assert!(!clock.is_valid(submitted + LEASE));
        assert_eq!(clock.remaining(submitted + LEASE * 2), Duration::ZERO);
    }

    #[test]
    fn renewed_lease_lasts_a_full_lease_from_the_renew_submission() {
        let t0 = Instant::now();
        let mut clock = LeaseClock::granted(t0, LEASE);
        let t1 = t0 + Duration::from_millis(500);
        clock.renew_submitted(t1);
        assert!(
            clock.is_valid(t1),
            "still valid while the renew is in flight"
        );
        clock.handle_renew(RenewResult::Outcome(RenewOutcome::Renewed));
        assert_eq!(clock.remaining(t1), LEASE);
    }

    #[test]
    fn a_lease_seen_expired_conflicting_or_unknown_never_becomes_valid_again() {
        for result in [
            RenewResult::Outcome(RenewOutcome::Expired),
            RenewResult::Outcome(RenewOutcome::Conflict),
            RenewResult::Unknown,
        ] {
            let t0 = Instant::now();
            let mut clock = LeaseClock::granted(t0, LEASE);
            clock.renew_submitted(t0);
            clock.handle_renew(result);
            assert!(!clock.is_valid(t0));
            // A later successful-looking reply cannot revive it.
            clock.renew_submitted(t0);
            clock.handle_renew(RenewResult::Outcome(RenewOutcome::Renewed));
            assert!(!clock.is_valid(t0));
            assert_eq!(clock.remaining(t0), Duration::ZERO);
        }
    }

    #[test]
    fn a_renew_that_redis_refused_keeps_the_old_deadline() {
        let t0 = Instant::now();
        let mut clock = LeaseClock::granted(t0, LEASE);
        clock.renew_submitted(t0 + Duration::from_millis(100));
        clock.handle_renew(RenewResult::NotApplied);
        assert_eq!(clock.remaining(t0), LEASE);
    }

    #[test]
    fn release_ends_the_lease_whatever_its_outcome() {
        for outcome in [Some(ReleaseOutcome::Released), None] {
            let t0 = Instant::now();
            let mut clock = LeaseClock::granted(t0, LEASE);
            clock.handle_release(outcome);
            assert!(!clock.is_valid(t0));
        }
    }

    #[test]
    fn an_enormous_lease_does_not_overflow() {
        let t0 = Instant::now();
        let clock = LeaseClock::granted(t0, Duration::from_millis(999_999_999_999_999));
        assert!(clock.is_valid(t0));
        assert!(clock.remaining(t0) > Duration::from_secs(1_000_000));
    }

    #[test]
    fn a_retrying_renewer_keeps_the_old_deadline_after_an_unknown_outcome() {
        let t0 = Instant::now();
        let mut clock = LeaseClock::granted(t0, LEASE);
        clock.renew_submitted(t0 + Duration::from_millis(500));
        clock.handle_renew_retrying(RenewResult::Unknown);
        assert_eq!(clock.valid_until(), Some(Some(t0 + LEASE)));
        clock.renew_submitted(t0 + Duration::from_millis(600));
        clock.handle_renew_retrying(RenewResult::Outcome(RenewOutcome::Renewed));
        assert_eq!(
            clock.valid_until(),
            Some(Some(t0 + Duration::from_millis(600) + LEASE))
        );
    }
}
