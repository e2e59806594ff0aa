//! The hand-over without the claim round trip (docs/PROTOCOL.md §4.3) of
//! a lock or a semaphore's slot: where a grant's notice names this
//! locker (and a slot's, its slot), its head waiter takes the grant as
//! held from the notice, until a lower bound of the grant's expiry on this
//! process's clock, and the subscriber extends the hold to the full lease
//! off the waiter's path (or its release makes that moot). A writer still
//! claims: its claim also deletes its intent, which would otherwise keep
//! readers out until it lapses; readers' grants carry no server time.
//!
//! The bound: a registering attempt sent at `sent` ran at server time `S`
//! (its reply says so), so `S` happened at `sent` or later here. A grant at
//! server time `T ≥ S` with claim window `W` expires at `T + W` by the
//! server's clock (at the earliest: `PX` counts from the script's start,
//! and both times are whole ms), which is at `sent + (T − S) + W` here or
//! later, as lease deadlines already assume clocks that run at one rate; a
//! margin of 2 ms for the rounding and 1 ms per second of `T − S` is taken
//! off. A grant from before the attempt ran (`T < S`), a notice without a
//! time (an older version), no anchor (none yet; a failure or a lost
//! subscription may mean another server and clock) or less than half the
//! window left: the waiter claims as before.

use std::time::{Duration, Instant};

use redis::Value;

use super::core::{Core, LeaseId};
use super::lease::{RenewResult, SharedClock};
use super::script::{classify_renew, ScriptCall};

/// Taken off the bound for the whole-ms times.
const MARGIN: Duration = Duration::from_millis(2);

/// When a registering attempt was sent and the server time it ran at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Anchor {
    sent: Instant,
    server_ms: u64,
}

impl Anchor {
    pub(crate) fn new(sent: Instant, server_ms: u64) -> Self {
        Anchor { sent, server_ms }
    }

    /// The latest instant here by which a grant made at server time
    /// `at_ms` for `claim` surely still holds; `None` when this anchor
    /// cannot place the grant (made before the attempt ran).
    pub(crate) fn grant_deadline(self, at_ms: u64, claim: Duration) -> Option<Instant> {
        let since = Duration::from_millis(at_ms.checked_sub(self.server_ms)?);
        let drift = since / 1000;
        self.sent
            .checked_add(since + claim)?
            .checked_sub(MARGIN + drift)
    }
}

/// A grant taken without its claim, to extend to its full lease at `due`.
#[derive(Debug)]
pub(crate) struct Extension {
    pub(crate) lease: LeaseId,
    pub(crate) due: Instant,
    pub(crate) lease_ms: u64,
    pub(crate) clock: SharedClock,
}

impl Core {
    /// When the next extension is due, if one is pending.
    pub(crate) fn next_extension_due(&self) -> Option<Instant> {
        self.extensions.iter().map(|e| e.due).min()
    }

    /// The extensions due at `now`, each the renew of its hold, recorded as
    /// submitted now; holds released or ended meanwhile are dropped.
    pub(crate) fn take_due_extensions(&mut self, now: Instant) -> Vec<(ScriptCall, SharedClock)> {
        let due: Vec<Extension> = self.extensions.extract_if(.., |e| e.due <= now).collect();
        due.into_iter()
            .filter_map(|e| {
                let call = self.renew_call(e.lease, e.lease_ms).ok()?;
                let mut clock = e.clock.lock();
                clock
                    .ended()
                    .is_none()
                    .then(|| clock.renew_submitted(now))?;
                drop(clock);
                Some((call, e.clock))
            })
            .collect()
    }
}

/// An extension's reply (`None`: the connection was lost first), as a
/// renew's, where an unknown outcome keeps the hold's deadline (a renew
/// only ever extends it).
pub(crate) fn handle_extension_reply(clock: &SharedClock, reply: Option<&Value>) {
    let outcome = reply.and_then(|reply| classify_renew(reply).ok());
    let result = outcome.map_or(RenewResult::Unknown, RenewResult::Outcome);
    clock.lock().handle_renew_retrying(result);
}
