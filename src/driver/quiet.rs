//! The slots of a cluster whose orphans' releases went unanswered (a silent
//! node), and when an operation on another slot tries them again. Each try
//! holds the operation that carries it for up to a command timeout, so it
//! is not paid by every operation while the node stays silent: the tries
//! back off from the command timeout, doubling up to the lease. An
//! operation on the slot itself always takes the slot's orphans first (one
//! may be its own key's), and shutdown takes them all; the TTL is the
//! backstop.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// When each quiet slot is tried again, and the back-off after that.
#[derive(Debug, Default)]
pub(crate) struct QuietSlots(HashMap<u16, Backoff>);

#[derive(Debug, Clone, Copy)]
struct Backoff {
    retry_at: Instant,
    next: Duration,
}

impl QuietSlots {
    /// Whether an operation on `own` leaves the orphan in `slot` for later.
    /// Nothing is left when the operation's own slot is unknown.
    pub(crate) fn skips(&self, slot: Option<u16>, own: Option<u16>, now: Instant) -> bool {
        let (Some(slot), Some(own)) = (slot, own) else {
            return false;
        };
        slot != own && self.0.get(&slot).is_some_and(|b| now < b.retry_at)
    }

    /// Records whether an orphan's release to `slot` was answered: an
    /// answer makes the slot plain again, a miss (re)starts its back-off,
    /// `first`, then doubling up to `cap`.
    pub(crate) fn record(
        &mut self,
        slot: Option<u16>,
        answered: bool,
        now: Instant,
        first: Duration,
        cap: Duration,
    ) {
        let Some(slot) = slot else { return };
        if answered {
            self.0.remove(&slot);
            return;
        }
        let wait = self.0.get(&slot).map_or(first, |b| b.next);
        let (retry_at, next) = (now + wait, wait.saturating_mul(2).min(cap.max(first)));
        self.0.insert(slot, Backoff { retry_at, next });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: Duration = Duration::from_millis(300);
    const CAP: Duration = Duration::from_secs(1);

    #[test]
    fn a_missed_slot_is_left_by_other_slots_until_its_back_off_ends() {
        let (t0, mut quiet) = (crate::clock::now(), QuietSlots::default());
        assert!(!quiet.skips(Some(7), Some(1), t0), "nothing missed yet");
        quiet.record(Some(7), false, t0, FIRST, CAP);
        assert!(quiet.skips(Some(7), Some(1), t0));
        assert!(quiet.skips(Some(7), Some(1), t0 + FIRST - Duration::from_millis(1)));
        assert!(!quiet.skips(Some(7), Some(1), t0 + FIRST), "tried again");
        // Its own slot's operations and unknown slots always take it.
        assert!(!quiet.skips(Some(7), Some(7), t0));
        assert!(!quiet.skips(Some(7), None, t0));
        assert!(!quiet.skips(None, Some(1), t0));
        assert!(!quiet.skips(Some(8), Some(1), t0), "another slot");
    }

    #[test]
    fn misses_double_the_back_off_up_to_the_cap_and_an_answer_ends_it() {
        let (t0, mut quiet) = (crate::clock::now(), QuietSlots::default());
        let mut at = t0;
        for wait in [300, 600, 1000, 1000] {
            quiet.record(Some(7), false, at, FIRST, CAP);
            let wait = Duration::from_millis(wait);
            assert!(quiet.skips(Some(7), Some(1), at + wait - Duration::from_millis(1)));
            assert!(!quiet.skips(Some(7), Some(1), at + wait));
            at += wait;
        }
        quiet.record(Some(7), true, at, FIRST, CAP);
        assert!(!quiet.skips(Some(7), Some(1), at));
        quiet.record(Some(7), false, at, FIRST, CAP);
        assert!(
            !quiet.skips(Some(7), Some(1), at + FIRST),
            "back to the first"
        );
        quiet.record(None, false, at, FIRST, CAP);
    }
}
