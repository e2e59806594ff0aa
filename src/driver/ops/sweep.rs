//! Releasing orphaned tokens by token, in one round trip, from whichever
//! operation runs next (an acquire, a release): best effort, since the TTL
//! is the backstop.

use std::sync::Arc;
use std::time::Instant;

use super::{Reply, Request};
use crate::core::lease::deadline_after;
use crate::core::names::KeyId;
use crate::core::script::classify_release;
use crate::driver::state::LockerState;

/// A sweep sent and not yet answered.
#[derive(Debug)]
pub(super) struct Sweep {
    keys: Vec<KeyId>,
}

impl Sweep {
    /// Takes the orphans, if any, and the request that releases them.
    pub(super) fn start(state: &Arc<LockerState>, now: Instant) -> Option<(Sweep, Request)> {
        let sweep = state.with_core(|core| core.take_sweep());
        if sweep.calls.is_empty() {
            return None;
        }
        let request = Request::Releases {
            calls: sweep.calls,
            until: deadline_after(now, state.config.command_timeout),
        };
        Some((Sweep { keys: sweep.keys }, request))
    }

    /// Logs what could not be released and lets lines that settled behind
    /// an abandoned attempt go on.
    pub(super) fn finish(self, state: &Arc<LockerState>, reply: Reply) {
        let n = self.keys.len();
        let unconfirmed = match reply.into_releases(n) {
            Ok(replies) => replies
                .iter()
                .filter(|r| !matches!(r, Some(Ok(v)) if classify_release(v).is_ok()))
                .count(),
            Err(_) => n,
        };
        if unconfirmed > 0 {
            log::warn!(
                target: "redlease",
                "LOCK_CLEANUP_FAILED: {unconfirmed} orphaned token(s) left to expire"
            );
        }
        state.with_core(|core| core.handle_sweep_answered(&self.keys));
    }
}
