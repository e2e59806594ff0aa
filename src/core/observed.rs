//! The elections this locker's observers follow (docs/PROTOCOL.md): an
//! observed name keeps the notification subscription wanted, as a waiter
//! does, and counts the changes its notifications announced, so that each
//! observer reads when the count moved past what its last read saw.
//!
//! ```text
//!  observer made ──▶ subscription wanted (its channel, on a cluster)
//!  e:<sha>:… notice, (re)subscription confirmed ──▶ changes += 1 ──▶ observers read
//!  last observer dropped ──▶ the subscription lingers, then stops (no waiter left)
//! ```

use std::time::{Duration, Instant};

use super::core::Core;
use super::election::{ReadReply, Version};
use super::names::KeyId;
use super::reader::{Cursor, Reader, ReaderStep};

/// One observed election.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    /// Live observers of the name in this locker.
    observers: usize,
    /// Notifications (and resubscriptions) that may announce a change.
    pub(super) changes: u64,
    /// The reads of the name, shared by its observers.
    reader: Reader,
}

impl Core {
    /// An observer of the election `id` starts: the subscription is wanted
    /// while it lives. Returns its cursor in the name's reader.
    pub(crate) fn handle_observer_started(&mut self, now: Instant, id: KeyId) -> Cursor {
        if !self.has_listeners() {
            self.subscription.handle_first_waiter(now);
        }
        let observed = self.observed.entry(id).or_default();
        observed.observers += 1;
        let cursor = Cursor::Starting(observed.reader.reads());
        self.subscription.handle_key_wanted(id.channel_id());
        self.subscription_wanted_by_waiter();
        cursor
    }

    /// The next step at `now` of an observer of `id` at `cursor`
    /// ([`Reader::step`]); `None` once nobody observes `id`.
    pub(crate) fn observer_step(
        &self,
        id: KeyId,
        cursor: Cursor,
        now: Instant,
    ) -> Option<ReaderStep> {
        let observed = self.observed.get(&id)?;
        Some(observed.reader.step(cursor, observed.changes, now))
    }

    /// An observer of `id` sends the read: the version to read after, or
    /// `None` when another's read is in flight ([`Reader::claim`]).
    pub(crate) fn claim_observer_read(&mut self, id: KeyId) -> Option<Option<Version>> {
        let observed = self.observed.get_mut(&id)?;
        observed
            .reader
            .claim(observed.changes)
            .then(|| observed.reader.after())
    }

    /// The claimed read of `id` was answered at `now` (`None`: it failed).
    pub(crate) fn handle_observer_read(
        &mut self,
        id: KeyId,
        now: Instant,
        reply: Option<&ReadReply>,
        poll: Duration,
    ) {
        if let Some(observed) = self.observed.get_mut(&id) {
            observed.reader.handle(now, reply, poll);
        }
    }

    /// The claimed read of `id` will not be answered.
    pub(crate) fn abandon_observer_read(&mut self, id: KeyId) {
        if let Some(observed) = self.observed.get_mut(&id) {
            observed.reader.abandon();
        }
    }

    /// An observer of `id` is dropped.
    pub(crate) fn handle_observer_stopped(&mut self, now: Instant, id: KeyId) {
        if let Some(observed) = self.observed.get_mut(&id) {
            observed.observers = observed.observers.saturating_sub(1);
            if observed.observers == 0 {
                self.observed.remove(&id);
            }
        }
        self.handle_listeners_left(now, [id]);
    }

    /// A notification or a (re)subscription may announce a change of `id`.
    /// A notification for the election `id`, or an event of the channel
    /// whose id is `id` (with hash tags, every election of the tag's).
    pub(super) fn handle_observed_change(&mut self, id: KeyId) {
        for (name, observed) in &mut self.observed {
            if *name == id || name.channel_id() == id {
                observed.changes += 1;
            }
        }
    }

    /// The subscription is (re)confirmed: a change may have gone unseen
    /// while it was down, so every observer reads.
    pub(super) fn handle_every_observed_change(&mut self) {
        for observed in self.observed.values_mut() {
            observed.changes += 1;
        }
    }
}
