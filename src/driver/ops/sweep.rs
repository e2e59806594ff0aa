//! Releasing orphaned tokens by token, in one round trip, from whichever
//! operation runs next (an acquire, a release): best effort, since the TTL
//! is the backstop. On a cluster, the orphans of a silent node's slots are
//! tried with a back-off (`driver::quiet`).

use std::sync::Arc;
use std::time::Instant;

use super::{Reply, Request};
use crate::core::lease::deadline_after;
use crate::core::script::{classify_release, ScriptCall};
use crate::core::tracking;
use crate::driver::state::LockerState;

/// A sweep sent and not yet answered.
pub(super) struct Sweep {
    taken: tracking::Sweep,
    sent: usize,
    /// The cluster slot of each orphan's release, in order.
    slots: Vec<Option<u16>>,
}

impl Sweep {
    /// Takes the orphans, if any, and the request that releases them. An
    /// operation on the cluster slot `own` leaves the orphans of quiet
    /// slots for later (`driver::quiet`).
    pub(super) fn start(
        state: &Arc<LockerState>,
        now: Instant,
        own: Option<u16>,
    ) -> Option<(Sweep, Request)> {
        let mut taken = state.with_core(|core| match &state.quiet {
            Some(quiet) => core.take_sweep_except(|call| quiet.lock().skips(call.slot(), own, now)),
            None => core.take_sweep(),
        });
        if taken.calls.is_empty() {
            return None;
        }
        let calls = std::mem::take(&mut taken.calls);
        let orphans = &calls[taken.first_orphan..];
        let slots = orphans.iter().map(ScriptCall::slot).collect();
        let sent = calls.len();
        let until = deadline_after(now, state.config.command_timeout);
        let request = Request::Releases { calls, until };
        Some((Sweep { taken, sent, slots }, request))
    }

    /// Gives back to the core what Redis did not answer (kept for the next
    /// sweep or shutdown), lets lines that settled behind an abandoned
    /// attempt go on, and logs releases Redis refused (left to their TTL).
    /// Returns whether Redis answered every release.
    pub(super) fn finish(self, state: &Arc<LockerState>, now: Instant, reply: Reply) -> bool {
        let n = self.sent;
        let replies = reply.into_releases(n).unwrap_or_default();
        let answered = |i: usize| match replies.get(i) {
            Some(Some(Ok(_))) => true,
            Some(Some(Err(f))) => f.is_server_reply(),
            _ => false,
        };
        let released = |i: usize| matches!(&replies[i], Some(Ok(v)) if classify_release(v).is_ok());
        let refused = (0..n).filter(|i| answered(*i) && !released(*i)).count();
        if refused > 0 {
            log::warn!(
                target: "redlease",
                "LOCK_CLEANUP_FAILED: {refused} orphaned token(s) left to expire"
            );
        }
        let all = (0..n).all(answered);
        if let Some(quiet) = &state.quiet {
            let (config, first) = (&state.config, self.taken.first_orphan);
            let mut quiet = quiet.lock();
            for (i, slot) in self.slots.iter().enumerate() {
                let answered = answered(first + i);
                quiet.record(*slot, answered, now, config.command_timeout, config.lease);
            }
        }
        state.with_core(|core| core.handle_sweep_answered(self.taken, answered));
        all
    }
}
