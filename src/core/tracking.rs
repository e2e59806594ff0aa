//! What one locker must release by token: its tracked leases (the renew and
//! release commands of each), the orphans (acquires whose result nobody
//! will take, dropped leases) and, at shutdown, all of them at once.

use redis::Value;

use super::core::{Core, CoreEvent};
use super::election::resign_call;
use super::lease::RenewResult;
use super::line::Line;
use super::multi::multi_release_call;
#[cfg(test)]
use super::names::KeyId;
use super::names::{
    HeldNames, HeldTarget, LockNames, OwnerToken, QueueNames, RwNames, SemNames, Want,
};
use super::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use super::script::{classify_release, classify_renew, ReplyError, ScriptCall, ScriptKind};
use super::slots::SlotId;
use crate::error::{Error, Failure, Operation};

/// Identifies a lease tracked for cleanup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LeaseId(pub(super) SlotId);

/// A token to release: of a tracked lease, or an orphan (an acquire whose
/// result nobody will take: outcome unknown, abandoned, or late at shutdown).
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    pub(crate) target: HeldTarget,
    pub(crate) token: OwnerToken,
    /// The fence of a grant taken without its claim: the hold is the
    /// value `<token>:<fence>` (`token` the grant token), which its
    /// release and renew name whole (docs/PROTOCOL.md §4.3).
    pub(crate) hold: Option<Fence>,
}

impl Owned {
    pub(crate) fn new(target: HeldTarget, token: OwnerToken) -> Self {
        Owned {
            target,
            token,
            hold: None,
        }
    }

    /// What its release and renew send as the token.
    fn token_arg(&self) -> String {
        match self.hold {
            Some(fence) => format!("{}:{}", self.token.to_hex(), fence.get()),
            None => self.token.to_hex(),
        }
    }
}

/// The release commands of the orphans taken for one round trip; report
/// which were answered with [`Core::handle_sweep_answered`].
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    pub(crate) calls: Vec<ScriptCall>,
    orphans: Vec<Owned>,
    /// The index of the first orphan's release in `calls` (deregistrations
    /// come before).
    pub(crate) first_orphan: usize,
}

#[cfg(test)]
impl Sweep {
    /// The keys of the orphans, in the order of `calls`.
    pub(crate) fn keys(&self) -> Vec<KeyId> {
        self.orphans.iter().map(|o| o.target.line().id).collect()
    }
}

impl Core {
    /// The release command of a tracked lease.
    ///
    /// # Errors
    ///
    /// `ShuttingDown` when shutdown already released it.
    pub(crate) fn release_call(&self, lease: LeaseId) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        Ok(self.release_of(owned, self.settings.handover.is_some()))
    }

    /// The release of `lease` without the hand-over, its lease key alone
    /// declared: what a release sends again after Redis Cluster answered
    /// `TRYAGAIN` (a slot migration moved some of the hand-over's keys and
    /// not the others). Its waiters hear the plain release.
    ///
    /// # Errors
    ///
    /// `ShuttingDown` when shutdown already released it.
    pub(crate) fn plain_release_call(&self, lease: LeaseId) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        Ok(self.release_of(owned, false))
    }

    fn release_of(&self, owned: &Owned, handover: bool) -> ScriptCall {
        let (namespace, channel) = (&self.settings.namespace, self.settings.channel);
        let (line, token, id) = (owned.target.line(), owned.token, owned.target.id);
        let ttl = self.settings.fence_counter_ttl_ms;
        let release = |kind, keys| {
            ScriptCall::release(kind, keys, line, owned.token_arg(), namespace, channel)
        };
        match (owned.target.names(namespace), owned.target.want) {
            (HeldNames::Key(key), Want::Lock) if handover => {
                let names = LockNames::new(namespace, id);
                release(ScriptKind::Release, vec![key])
                    .handing_over(names.fence, &names.queue, ttl)
                    .skipping(self.lingering_registration(line))
            }
            (HeldNames::Key(key), Want::Permit { .. }) if handover => {
                let names = SemNames::new(namespace, id);
                let slot = owned.target.slot.unwrap_or_default();
                release(ScriptKind::Release, vec![key])
                    .handing_over(format!("{}{slot}", names.fence_prefix), &names.queue, ttl)
                    .serving_slot(slot)
            }
            (HeldNames::Key(key), Want::Write) if handover => {
                let names = RwNames::new(namespace, id);
                release(ScriptKind::Release, vec![key])
                    .handing_over(names.fence, &names.queue, ttl)
                    .with_rw_key(names.read)
            }
            (HeldNames::Key(key), _) => release(ScriptKind::Release, vec![key]),
            (HeldNames::Reader(names), _) if handover => {
                release(ScriptKind::RwReadRelease, vec![names.read.clone()])
                    .handing_over(names.fence.clone(), &names.queue, ttl)
                    .with_rw_key(names.write)
            }
            (HeldNames::Reader(names), _) => release(ScriptKind::RwReadRelease, vec![names.read]),
            (HeldNames::AnySlot(names, permits), _) => {
                release(ScriptKind::SemReleaseAny, names.slots(permits).collect())
            }
            (HeldNames::Election(names), _) => resign_call(&names, token, namespace, channel),
            (HeldNames::Multi(names), _) => {
                multi_release_call(names, token, namespace, channel, handover.then_some(ttl))
            }
        }
    }

    /// Whether a tracked lease holds a grant taken without its claim under
    /// the grant token `token` (tracked or orphaned, until its release is
    /// taken: it still holds the lease key under that token): a release by
    /// that token, which matches its token part, would end that hold.
    pub(super) fn holds_under(&self, token: OwnerToken) -> bool {
        let leases = self.leases.iter().map(|(_, l)| l);
        let mut holds = leases.chain(&self.orphans).filter(|l| l.hold.is_some());
        holds.any(|l| l.token == token)
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
        self.unpark();
        Ok(outcome)
    }

    /// The renew command of a tracked lease.
    pub(crate) fn renew_call(&self, lease: LeaseId, lease_ms: u64) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        let (kind, keys) = match owned.target.names(&self.settings.namespace) {
            HeldNames::Reader(names) => (ScriptKind::RwReadRenew, vec![names.read]),
            HeldNames::Multi(names) => {
                let locks = names.into_iter().map(|(_, lock)| lock).collect();
                (ScriptKind::MultiRenew, locks)
            }
            // Only grants are tracked, and a permit's grant names its slot.
            names => (
                ScriptKind::Renew,
                vec![names.lease_key().ok_or(Error::ShuttingDown)?],
            ),
        };
        Ok(ScriptCall::renew(kind, keys, owned.token_arg(), lease_ms))
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
    /// released with the orphans, promptly when a waiter of this locker
    /// waits for what its release frees (the head of each such line is
    /// woken to send the release: for a read-write lease, readers and
    /// writers alike).
    pub(crate) fn abandon_lease(&mut self, lease: LeaseId) {
        if let Some(owned) = self.leases.remove(lease.0) {
            let freed = owned.target.line().freed_by_release();
            self.orphans.push(owned);
            self.unpark();
            let heads = freed.filter_map(|key| self.lines.get(&key).and_then(Line::head));
            self.events.extend(heads.map(CoreEvent::Wake));
        }
    }

    /// Release commands for the orphaned tokens, which are forgotten: a
    /// failed cleanup is left to the TTL.
    pub(crate) fn take_orphans(&mut self) -> Vec<ScriptCall> {
        self.take_sweep().calls
    }

    /// Like [`take_orphans`](Self::take_orphans), but the orphans come back
    /// unless [`handle_sweep_answered`](Self::handle_sweep_answered) says
    /// Redis answered their release: nothing is forgotten while Redis is
    /// out of reach.
    pub(crate) fn take_sweep(&mut self) -> Sweep {
        self.take_sweep_except(|_| false)
    }

    /// Like [`take_sweep`](Self::take_sweep), but the orphans whose release
    /// `skip` names stay for a later sweep.
    pub(crate) fn take_sweep_except(&mut self, skip: impl Fn(&ScriptCall) -> bool) -> Sweep {
        // The deregistrations go first, so that no release in the same
        // sweep hands its key to a registration of ours nobody waits on.
        let mut calls = self.take_deregistrations();
        let first_orphan = calls.len();
        let mut orphans = Vec::new();
        for orphan in std::mem::take(&mut self.orphans) {
            let call = self.release_of(&orphan, self.settings.handover.is_some());
            if skip(&call) {
                self.orphans.push(orphan);
            } else {
                calls.push(call);
                orphans.push(orphan);
            }
        }
        Sweep {
            calls,
            orphans,
            first_orphan,
        }
    }

    /// Which releases of a sweep Redis answered (an outcome, or an error
    /// reply: it processed them). The others are orphans again, for the
    /// next sweep or shutdown. An answered release came back on the
    /// connection that also carried any abandoned attempt of that key
    /// before it, so a line settling behind such an attempt goes on at once.
    pub(crate) fn handle_sweep_answered(&mut self, sweep: Sweep, answered: impl Fn(usize) -> bool) {
        for (i, orphan) in sweep.orphans.into_iter().enumerate() {
            if !answered(sweep.first_orphan + i) {
                self.orphans.push(orphan);
                continue;
            }
            let key = orphan.target.line();
            self.wake_head_of(key, Line::settle);
            if self.lines.get(&key).is_some_and(Line::is_empty) {
                self.forget_line(key);
            }
        }
    }

    /// The commands that take the locker out of the queues of lines whose
    /// last waiter left (docs/PROTOCOL.md §4.4): the removal of each
    /// registration, then the release of the token it named, so that a
    /// grant made out to it and not claimed goes on to the next
    /// registration at once (nothing, when there was none). They are
    /// forgotten: a registration left behind lapses at its bound, a grant
    /// at its claim window.
    pub(crate) fn take_deregistrations(&mut self) -> Vec<ScriptCall> {
        let leaving = std::mem::take(&mut self.deregistrations);
        self.park_held(&leaving);
        self.leaving_calls(&leaving)
    }

    /// The registrations of `leaving` whose grant token's release
    /// `leaving_calls` leaves out (a hold taken without its claim is under
    /// it): that release goes once the hold is released or forgotten.
    pub(super) fn park_held(&mut self, leaving: &[Owned]) {
        let held = leaving.iter().filter(|o| self.holds_under(o.token));
        let held: Vec<Owned> = held.cloned().collect();
        self.parked.extend(held);
    }

    /// A hold taken without its claim ended: the parked releases of its
    /// grant token go with the next deregistrations.
    fn unpark(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        let (held, free): (Vec<_>, Vec<_>) =
            parked.into_iter().partition(|o| self.holds_under(o.token));
        self.parked = held;
        self.deregistrations.extend(free);
    }

    /// The commands that take `leaving`'s registrations out and release
    /// the tokens they named ([`take_deregistrations`](Self::take_deregistrations)).
    pub(super) fn leaving_calls(&self, leaving: &[Owned]) -> Vec<ScriptCall> {
        let Some(h) = self.settings.handover else {
            // Without queues only a multi-key waiter's reservations remain.
            return leaving
                .iter()
                .filter(|o| o.target.want == Want::Multi)
                .map(|o| self.release_of(o, false))
                .collect();
        };
        let namespace = &self.settings.namespace;
        let mut calls = Vec::with_capacity(2 * leaving.len());
        for owned in leaving {
            let line = owned.target.line();
            let (entry, owner) = (line.queue_entry(h.reg), owned.token.to_hex());
            let deregister =
                |queue: &QueueNames| ScriptCall::deregister(queue, entry.clone(), owner.clone());
            match &owned.target.members {
                // A set's registration may stand in each of its keys' queues.
                Some(members) => calls.extend(
                    members
                        .iter()
                        .map(|id| deregister(&LockNames::new(namespace, *id).queue)),
                ),
                None => calls.push(deregister(&QueueNames::of(namespace, line))),
            }
            // The grant token's release passes on a grant nobody claims; not
            // while a grant taken without its claim holds under that token.
            if !self.holds_under(owned.token) {
                calls.push(self.release_of(owned, true));
            }
        }
        calls
    }

    /// Refuses new acquires and ends every wait; attempts in flight finish
    /// and their tokens become orphans if they acquired.
    pub(crate) fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        self.end_lingering_of(|_| true);
        let ids = self.waiter_ids();
        for &id in &ids {
            self.release_reservations_of(id);
        }
        self.events.extend(ids.into_iter().map(CoreEvent::Wake));
    }

    /// Release commands for every tracked lease and orphan; all are
    /// forgotten by the core, so later releases of those leases report
    /// `ShuttingDown`.
    pub(crate) fn take_cleanup(&mut self) -> Vec<ScriptCall> {
        self.cleaned_up = true;
        // What the subscriber was to pass on goes too: it may have stopped.
        let mut leaving = std::mem::take(&mut self.deregistrations);
        leaving.append(&mut self.pass_ons);
        leaving.append(&mut self.parked);
        let mut calls = self.leaving_calls(&leaving);
        // The grant token's releases `leaving_calls` left out for a hold
        // taken without its claim go after that hold's own release.
        let held = leaving.into_iter().filter(|o| self.holds_under(o.token));
        let held: Vec<Owned> = held.collect();
        let handover = self.settings.handover.is_some();
        let leases = self.leases.drain();
        let ending = leases.iter().chain(&held);
        calls.extend(ending.map(|o| self.release_of(o, handover)));
        calls.extend(self.take_orphans());
        calls
    }
}

/// Turns a release or renew reply into its outcome or the public error.
pub(crate) fn classify_reply<T>(
    reply: Result<Value, impl Into<Failure>>,
    op: Operation,
    classify: impl FnOnce(&Value) -> Result<T, ReplyError>,
) -> Result<T, Error> {
    match reply {
        Ok(value) => classify(&value).map_err(|source| Error::UnexpectedReply { op, source }),
        Err(e) => Err(e.into().into_error(op)),
    }
}
