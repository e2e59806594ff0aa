//! Registrations that outlive their line (docs/PROTOCOL.md).
//!
//! A lock's line empties whenever its last waiter takes the lease, and a
//! process with one waiter per key (a worker loop) would otherwise leave
//! the key's hand-over queue at every claim and register again, with a busy
//! attempt, at its next acquire: a third round trip. Instead the
//! registration stays queued ("lingers") while that lease is held and a
//! short window after its release. A waiter that comes back meanwhile
//! waits for its grant without an attempt. A grant that finds nobody
//! waiting is passed on at once, and a window that ends takes the
//! registration out; the subscriber sends both ([`Core::take_pass_ons`])
//! on its own connection, since no operation of the locker may be running.

use std::time::{Duration, Instant};

use redis::Value;

use super::core::{earliest_of, Core};
use super::line::Linger;
use super::names::{HeldTarget, KeyId, Kind, LineKey, Want};
use super::script::ScriptCall;
use super::tracking::{LeaseId, Owned};

/// How long after the release of its lease a registration with no waiter
/// stays queued: a loop that acquires again within it keeps its place.
pub(crate) const LINGER_AFTER_RELEASE: Duration = Duration::from_millis(20);

impl Core {
    /// Whether a registration for `line` may stay queued once its line
    /// empties: a lock's (other kinds leave the queue as they are served),
    /// for a waiter that would register, while grants are heard on a live
    /// subscription (a grant nobody hears could only lapse).
    pub(super) fn may_linger(&self, line: LineKey, try_once: bool) -> bool {
        !try_once
            && line.kind == Kind::Lock
            && self.settings.handover.is_some()
            && self.subscription.is_active()
            && self.hears_grants(line.id)
    }

    /// A waiter joined `key`'s line at `now`: if the line lingered, its
    /// head waits for the grant ([`Line::await_grant`]), at most until its
    /// `deadline` (a wait makes at least one attempt, the crate docs' "How it works"); a try-once
    /// waiter attempts (and takes the registration out unless it stays).
    pub(super) fn handle_rejoin(
        &mut self,
        now: Instant,
        key: LineKey,
        deadline: Option<Instant>,
        try_once: bool,
    ) {
        let (lingered, safety) = (self.lingering.remove(&key), self.safety_interval());
        let (Some(h), true) = (self.settings.handover, lingered) else {
            return;
        };
        if let Some(line) = self.lines.get_mut(&key) {
            // A key left free is attempted at once.
            if line.stop_lingering() && !try_once {
                line.await_grant(
                    now,
                    Duration::from_millis(h.reg_ms),
                    Duration::from_millis(h.claim_ms),
                    safety,
                    deadline,
                );
            }
        }
    }

    /// Tracked lease `lease` was released at `now` with `reply`: if its
    /// line lingers, the registration stays [`LINGER_AFTER_RELEASE`]
    /// longer.
    pub(crate) fn handle_lease_released(
        &mut self,
        now: Instant,
        lease: LeaseId,
        reply: Option<&Value>,
    ) {
        // 3: handed to another registration (`RELEASE_LUA`).
        let handed_over = matches!(reply, Some(Value::Int(3)));
        let key = self.leases.get(lease.0).map(|o| o.target.line());
        let key = key.filter(|key| self.lingering.contains(key));
        if let Some(line) = key.and_then(|key| self.lines.get_mut(&key)) {
            line.handle_lease_released(now, LINGER_AFTER_RELEASE, handed_over);
        }
    }

    /// A grant made out to the registration of `key`'s line found no
    /// waiter: it is passed on (the registration taken out, the grant
    /// released), if the line lingers.
    pub(super) fn pass_on_grant(&mut self, now: Instant, key: LineKey) {
        if self.lingering.contains(&key) {
            self.stop_lingering(now, key, true);
        }
    }

    /// Ends the lingering registrations whose window is over at `now`
    /// (taken out), or whose entry is past its bound in Redis (forgotten).
    /// Returns the next instant one ends, if any.
    pub(crate) fn end_lingering_due(&mut self, now: Instant) -> Option<Instant> {
        let h = self.settings.handover?;
        let bound = Duration::from_millis(h.reg_ms);
        let reply_bound = self.settings.command_timeout;
        let mut next = None;
        let mut ended = Vec::new();
        for key in &self.lingering {
            let Some(line) = self.lines.get(key) else {
                ended.push((*key, false));
                continue;
            };
            let gone = line.entry_gone_at(bound, reply_bound);
            let until = match line.lingering() {
                Some(Linger::Until { until, .. }) => earliest_of(Some(until), gone),
                _ => gone,
            };
            match until {
                Some(at) if at > now => next = earliest_of(next, Some(at)),
                _ => ended.push((*key, gone.is_some_and(|at| at > now))),
            }
        }
        for (key, queued) in ended {
            self.stop_lingering(now, key, queued);
        }
        next
    }

    /// The registration id of `line`'s lingering registration while its
    /// lease is held: the lease's release must not grant it.
    pub(super) fn lingering_registration(&self, line: LineKey) -> Option<String> {
        let h = self.settings.handover?;
        let held = self.lingering.contains(&line)
            && self
                .lines
                .get(&line)
                .is_some_and(|l| l.lingering() == Some(Linger::Holding));
        held.then(|| line.queue_entry(h.reg))
    }

    /// Ends the lingering registrations of the lines `which` picks (all at
    /// shutdown; those a lost subscription no longer hears grants for):
    /// taken out by the next cleanup or operation.
    pub(super) fn end_lingering_of(&mut self, which: impl Fn(LineKey) -> bool) {
        let keys = self.lingering.iter().copied().filter(|k| which(*k));
        let keys: Vec<LineKey> = keys.collect();
        for key in keys {
            let owned = self.stop_lingering_owned(key);
            self.deregistrations.extend(owned);
        }
    }

    /// Whether [`take_pass_ons`](Self::take_pass_ons) has anything.
    pub(crate) fn has_pass_ons(&self) -> bool {
        !self.pass_ons.is_empty()
    }

    /// The commands that pass on grants nobody waits for and take out
    /// registrations whose window ended, each with the id of the key
    /// whose notification channel's connection should carry it, for the
    /// subscriber to send (replies ignored: what is not done lapses at the
    /// registration's bound and the grant's claim window).
    pub(crate) fn take_pass_ons(&mut self) -> Vec<(KeyId, Vec<ScriptCall>)> {
        let leaving = std::mem::take(&mut self.pass_ons);
        self.park_held(&leaving);
        leaving
            .iter()
            .map(|owned| {
                let calls = self.leaving_calls(std::slice::from_ref(owned));
                (owned.target.id.channel_id(), calls)
            })
            .collect()
    }

    fn stop_lingering(&mut self, now: Instant, key: LineKey, queued: bool) {
        let owned = self.stop_lingering_owned(key);
        self.pass_ons.extend(owned.filter(|_| queued));
        self.handle_listeners_left(now, [key.id]);
    }

    /// Forgets a lingering line; returns its registration to take out.
    fn stop_lingering_owned(&mut self, key: LineKey) -> Option<Owned> {
        self.lingering.remove(&key);
        let line = self.lines.get_mut(&key)?;
        let token = line.take_registration();
        if line.is_empty() {
            self.forget_line(key);
        }
        let target = HeldTarget {
            id: key.id,
            want: Want::Lock,
            slot: None,
            members: None,
        };
        token.map(|token| Owned::new(target, token))
    }
}
