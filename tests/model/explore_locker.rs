//! The lock's hand-over without the claim, explored with lockers that have
//! more than one waiter (docs/PROTOCOL.md §4.3): the real ACQUIRE,
//! RELEASE, RENEW and DEREGISTER scripts on the emulator, driven by lockers
//! that mirror the core's line in outline. A locker has one registration
//! and one grant token per line, shared by its waiters; a line left empty
//! is forgotten, and the next draws a new grant token. The head attempts;
//! a grant's notice (naming the owner's id, SHA-1 of the grant token) lets
//! the head take the grant as held (under `<grant token>:<fence>`) when a
//! waiter stays behind it, which then becomes the head; a holder extends,
//! releases or drops its lease (a dropped hold is released later, by the
//! core's orphan sweep); the last waiter in line gives up (acquiring again
//! at once if it has acquisitions left: in a new line if its own emptied),
//! and a line left empty deregisters, then releases by its grant token.
//!
//! What `explore.rs` cannot see with one waiter per client, this checks:
//! the locker's rules for a hold under its grant token (§4.3):
//! 1. while a hold of the line is under the grant token (tracked or
//!    orphaned), the line's attempts do not name that token as theirs;
//! 2. a leaving registration's release by its grant token waits until no
//!    hold is under that token (a release by token would end that hold);
//! 3. an orphaned hold counts as a hold of its line until its release;
//! 4. a stale grant is not taken, and its claim is released;
//! 5. a grant is taken only when its notice's owner id is the line's
//!    grant token's: a registration an earlier line left, its release by
//!    that token on its way, may be granted first (eight events).
//!
//! Each rule, turned off (`Rules`), gives a counterexample.
//!
//! Invariants, at every step: at most one waiter whose lease is valid by
//! its own clock (leaving out holds a restart or failover lost: §11);
//! every new fence above every fence before it; no fence given to two
//! waiters (no grant taken twice).

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Hand, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, Counterexample, Faults, Keys, Scripts};

use super::explore::{CLAIM, LEASE, POLL, REG, START_MS};

/// What a locker does next; `usize` is the waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire(usize),
    /// The head takes the grant its notice named (no script).
    TakeGrant(usize),
    /// RENEW of a hold taken without the claim, by its whole value.
    Extend(usize),
    Release(usize),
    /// The holder drops its lease: its release is left to the sweep.
    Drop(usize),
    /// The sweep's release of a dropped hold, by its whole value.
    OrphanRelease,
    Deregister,
    /// The release by grant token that follows DEREGISTER.
    GrantRelease,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Waiting,
    Held {
        fence: String,
        deadline: u64,
        extended: bool,
        /// The grant token (its number) of a hold taken without the claim.
        by_grant: Option<u8>,
    },
    Gone,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Waiter {
    phase: Phase,
    /// Acquisitions left after this one.
    rounds_left: u8,
    /// The fences it was given.
    got: Vec<String>,
    /// Its hold rests on a write a restart or failover lost.
    orphaned: bool,
    /// Tokens it handed a stale grant back under (it goes on under a new
    /// one, which that lease's release cannot meet).
    tokens: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Leaving {
    No,
    /// DEREGISTER, then the release by the grant token numbered.
    Deregister(u8),
    GrantRelease(u8),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Locker {
    /// In line order.
    waiters: Vec<Waiter>,
    registered: bool,
    /// The line's grant token, by number: a new one after the line was
    /// forgotten (it emptied).
    grant: u8,
    /// The last grant notice naming it: when it was heard, its fence, the
    /// owner id it names.
    notice: Option<(u64, String, Option<String>)>,
    wake: bool,
    next_poll: u64,
    /// A call whose reply was lost, re-sent, and its first send's time.
    lost: Option<(Op, u64)>,
    /// Leases to release that nobody uses: (what the release names, the
    /// grant token, by number, of a hold under one). A dropped hold; a
    /// stale grant claimed (rule 4).
    orphans: Vec<(String, Option<u8>)>,
    leaving: Leaving,
    dead: bool,
}

impl Locker {
    fn head(&self) -> Option<usize> {
        self.waiters.iter().position(|w| w.phase == Phase::Waiting)
    }

    /// A waiter waits in line behind `w`.
    fn behind(&self, w: usize) -> bool {
        self.waiters[w + 1..]
            .iter()
            .any(|x| x.phase == Phase::Waiting)
    }

    /// The line emptied: the core forgets it (its registration and grant
    /// token; a notice for it is dropped).
    fn forget_line(&mut self) {
        self.registered = false;
        self.grant += 1;
        (self.notice, self.wake) = (None, false);
    }

    fn hold(&self, w: usize) -> Option<(&str, Option<u8>)> {
        match &self.waiters[w].phase {
            Phase::Held {
                fence, by_grant, ..
            } => Some((fence, *by_grant)),
            _ => None,
        }
    }
}

impl search::Waiter for Locker {
    fn notified(&self) -> bool {
        self.notice.is_some() || self.wake
    }
    fn alive(&self) -> bool {
        !self.dead
    }
    fn may_give_up(&self) -> bool {
        !self.dead && self.registered && self.lost.is_none() && self.head().is_some()
    }
    fn lose_notices(&mut self) {
        (self.notice, self.wake) = (None, false);
    }
    fn die(&mut self) {
        (self.dead, self.lost) = (true, None);
    }
    /// The last waiter in line gives up this acquisition; a line left
    /// empty is forgotten and deregisters. A waiter with acquisitions left
    /// acquires again at once: in a new line if its own was forgotten.
    fn give_up(&mut self) {
        let Some(last) = self.waiters.iter().rposition(|w| w.phase == Phase::Waiting) else {
            return;
        };
        self.waiters[last].phase = Phase::Gone;
        if self.head().is_none() {
            self.leaving = Leaving::Deregister(self.grant);
            self.forget_line();
        }
        let x = &mut self.waiters[last];
        if x.rounds_left > 0 {
            x.rounds_left -= 1;
            x.phase = Phase::Waiting;
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    lockers: Vec<Locker>,
    faults: Faults,
    drops: u8,
    max_fence: u128,
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// The locker's rules for a hold under its grant token; `false` turns one
/// off, for the mutation tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// 1: no attempt names the grant token while a hold is under it.
    pub(crate) no_claim_of_a_hold: bool,
    /// 2: the leaving release by grant token waits for the hold's release.
    pub(crate) park_leaving_release: bool,
    /// 3: a dropped hold counts as a hold until its release.
    pub(crate) orphans_hold: bool,
    /// 4: a grant whose fence is not above every fence the line was given
    /// is stale (data loss brought it back): not taken, and claimed only
    /// to be released, its waiter waiting on.
    pub(crate) stale_grants_refused: bool,
    /// 5: a grant is taken only when its notice's owner id is the line's
    /// grant token's; off, any grant to the registration is taken (the
    /// notice before the owner id).
    pub(crate) owner_checked: bool,
}

impl Rules {
    pub(crate) const ALL: Rules = Rules {
        no_claim_of_a_hold: true,
        park_leaving_release: true,
        orphans_hold: true,
        stale_grants_refused: true,
        owner_checked: true,
    };
}

/// What to explore: each locker's waiters, with their acquisitions.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) rounds: Vec<Vec<u8>>,
    pub(crate) depth: usize,
    pub(crate) faults: Faults,
    pub(crate) drops: u8,
    pub(crate) rules: Rules,
}

/// The numbers of a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Grants taken without the claim with a waiter behind.
    pub(crate) takes: usize,
    /// Attempts of a line sent while a hold was under its grant token.
    pub(crate) attempts_beside_a_hold: usize,
    /// Waiters that gave up while a hold was under the grant token.
    pub(crate) give_ups_beside_a_hold: usize,
    /// Stale grants claimed and handed back (rule 4).
    pub(crate) stale_handed_back: usize,
    /// Grant notices a line's head heard whose owner id is not its grant
    /// token's (a registration of an earlier line of the locker granted).
    pub(crate) notices_of_another_token: usize,
}

/// Waiter `w` of locker `c`'s token: one per acquisition, and a new one
/// after it handed back a stale grant (`Waiter::tokens`).
fn tok(c: usize, w: usize, x: &Waiter) -> String {
    let n = 0x1000 * (c as u64 + 1) + 0x100 * w as u64 + 0x10 * u64::from(x.tokens);
    token(n + u64::from(x.rounds_left))
}
/// Locker `c`'s grant token number `g` (the core draws it from the
/// head's token; any value no waiter's token is will do).
fn grant(c: usize, g: u8) -> String {
    token(0x9000 + 0x100 * c as u64 + u64::from(g))
}

/// A token's id in a grant's notice, as the scripts compute it: the first
/// 16 hex digits of `redis.sha1hex(<token>)`.
fn owner_id(token: &str) -> String {
    sha1_smol::Sha1::from(token).digest().to_string()[..16].to_owned()
}

/// A token or value, short: the token's last 4 digits, and the fence.
fn short(v: &str) -> String {
    let o = search::owner_of(v);
    format!("{}{}", &o[o.len().saturating_sub(4)..], &v[o.len()..])
}
fn entry(c: usize) -> String {
    format!("{:016x}", 0xe0 + c)
}

pub(crate) struct Explorer {
    scripts: Scripts,
    names: Names,
    bounds: Bounds,
    stats: Stats,
}

impl Explorer {
    pub(crate) fn new(sources: Sources, bounds: Bounds) -> Explorer {
        Explorer {
            scripts: Scripts::new(sources),
            names: Names::new("ns", 1),
            bounds,
            stats: Stats::default(),
        }
    }

    fn initial(&self) -> State {
        let lockers = self.bounds.rounds.iter().map(|waiters| Locker {
            waiters: waiters
                .iter()
                .map(|r| Waiter {
                    phase: Phase::Waiting,
                    rounds_left: r.saturating_sub(1),
                    got: Vec::new(),
                    orphaned: false,
                    tokens: 0,
                })
                .collect(),
            registered: false,
            grant: 0,
            notice: None,
            wake: false,
            next_poll: 0,
            lost: None,
            orphans: Vec::new(),
            leaving: Leaving::No,
            dead: false,
        });
        State {
            db: Db::at_ms(START_MS),
            lockers: lockers.collect(),
            faults: self.bounds.faults,
            drops: self.bounds.drops,
            max_fence: 0,
            unreplicated: Vec::new(),
        }
    }

    /// Whether a hold of locker `l`'s is under its grant token `g`
    /// (tracked, or dropped and not released).
    fn holds_under(&self, l: &Locker, g: u8) -> bool {
        let held = (0..l.waiters.len()).any(|w| l.hold(w).is_some_and(|(_, h)| h == Some(g)));
        held || (self.bounds.rules.orphans_hold && l.orphans.iter().any(|(_, h)| *h == Some(g)))
    }

    /// Whether a hold of locker `l`'s is under its line's grant token.
    fn holds_under_grant(&self, l: &Locker) -> bool {
        self.holds_under(l, l.grant)
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let l = &s.lockers[c];
        let n = &self.names;
        let hold = |w: usize| match l.hold(w) {
            Some((f, g)) => format!("{}:{f}", grant(c, g.unwrap_or_default())),
            None => unreachable!("a hold's call is sent while held"),
        };
        let token_of = |w: usize| tok(c, w, &l.waiters[w]);
        match op {
            Op::Acquire(w) => {
                let beside = self.holds_under_grant(l);
                let h = Hand {
                    entry: entry(c),
                    reg_ms: REG,
                    claim_ms: CLAIM,
                    grant: grant(c, l.grant),
                    register: true,
                    registered: l.registered && !(beside && self.bounds.rules.no_claim_of_a_hold),
                    keep: if l.behind(w) { "k" } else { "d" },
                };
                Call::acquire(n, &token_of(w), LEASE, 0, Some(&h))
            }
            Op::Extend(w) => Call::renew(&n.lock(), &hold(w), LEASE),
            Op::Release(w) => match l.hold(w) {
                Some((_, Some(_))) => Call::lock_release(n, &hold(w), 0, None),
                _ => Call::lock_release(n, &token_of(w), 0, None),
            },
            Op::OrphanRelease => Call::lock_release(n, &l.orphans[0].0, 0, None),
            Op::Deregister => Call::deregister(n, QKind::Lock, &entry(c)),
            Op::GrantRelease => match l.leaving {
                Leaving::GrantRelease(g) => Call::lock_release(n, &grant(c, g), 0, None),
                _ => unreachable!("sent while leaving"),
            },
            Op::TakeGrant(_) | Op::Drop(_) => unreachable!("sends nothing"),
        }
    }

    /// Whether locker `l`'s head may take the grant its notice names: at
    /// most half the window gone, a waiter staying behind it (which keeps
    /// the registration queued), nothing of the line of unknown outcome,
    /// the notice's owner id its line's grant token's (rule 5).
    fn may_take(&self, c: usize, l: &Locker, now: u64) -> Option<usize> {
        let (at, fence, owner) = l.notice.as_ref()?;
        let head = l.head()?;
        let fresh = !self.bounds.rules.stale_grants_refused || !self.stale(l, fence);
        let ours = !self.bounds.rules.owner_checked
            || owner.as_deref() == Some(owner_id(&grant(c, l.grant)).as_str());
        let free = l.lost.is_none() && fresh && ours;
        (now <= at + CLAIM / 2 && l.behind(head) && free).then_some(head)
    }

    /// Whether `fence` is not above every fence the locker's line was given.
    fn stale(&self, l: &Locker, fence: &str) -> bool {
        let given = l
            .waiters
            .iter()
            .flat_map(|w| &w.got)
            .filter_map(|f| f.parse::<u128>().ok());
        let fence = fence.parse::<u128>().unwrap_or(0);
        given.max().is_some_and(|top| fence <= top)
    }

    fn sends(&self, s: &State, c: usize) -> Vec<Op> {
        let l = &s.lockers[c];
        let now = s.db.now_ms();
        if l.dead {
            return Vec::new();
        }
        if let Some((op, _)) = l.lost {
            return vec![op];
        }
        let mut ops = Vec::new();
        // A head that may take the grant may also claim it (the core
        // claims where it cannot place the grant on its clock).
        if let Some(head) = self.may_take(c, l, now) {
            ops.push(Op::TakeGrant(head));
        }
        // A leaving registration is taken out before the line's next
        // attempt registers again (the same registration key).
        let deregistering = matches!(l.leaving, Leaving::Deregister(_));
        if let (Some(head), false) = (l.head(), deregistering) {
            if l.notice.is_some() || l.wake || now >= l.next_poll {
                ops.push(Op::Acquire(head));
            }
        }
        for w in 0..l.waiters.len() {
            if let Phase::Held {
                deadline,
                extended,
                by_grant,
                ..
            } = l.waiters[w].phase
            {
                ops.push(Op::Release(w));
                if by_grant.is_some() && !extended && now < deadline {
                    ops.push(Op::Extend(w));
                }
                if by_grant.is_some() && s.drops > 0 {
                    ops.push(Op::Drop(w));
                }
            }
        }
        if !l.orphans.is_empty() {
            ops.push(Op::OrphanRelease);
        }
        match l.leaving {
            Leaving::Deregister(_) => ops.push(Op::Deregister),
            Leaving::GrantRelease(g)
                if !self.bounds.rules.park_leaving_release || !self.holds_under(l, g) =>
            {
                ops.push(Op::GrantRelease)
            }
            _ => {}
        }
        ops
    }

    fn next_deadline(&self, s: &State) -> Option<u64> {
        let now = s.db.now_ms();
        let mut times = Vec::new();
        for (key, e) in &s.db.keys {
            times.extend(e.expire_at.map(|at| at + 1));
            if key == &self.names.queue(QKind::Lock) {
                if let Value::List(list) = &e.value {
                    let deadlines = list
                        .iter()
                        .filter_map(|v| v.split('|').nth(1)?.parse::<u64>().ok());
                    times.extend(deadlines);
                }
            }
        }
        for l in s.lockers.iter().filter(|l| !l.dead) {
            if l.head().is_some() {
                times.push(l.next_poll);
            }
            if let Some((at, ..)) = &l.notice {
                times.push(at + CLAIM / 2 + 1);
            }
            for w in &l.waiters {
                if let Phase::Held { deadline, .. } = w.phase {
                    times.push(deadline);
                }
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    fn lock_value(&self, db: &Db) -> Option<String> {
        match db.peek(&self.names.lock()).map(|e| &e.value) {
            Some(Value::Str(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// A fence given to waiter (c, w): never one another waiter was given.
    fn give(n: &mut State, c: usize, w: usize, fence: &str) -> Result<(), String> {
        let other = n.lockers.iter().enumerate().find_map(|(c2, l)| {
            l.waiters
                .iter()
                .enumerate()
                .find(|(w2, x)| (c2, *w2) != (c, w) && x.got.iter().any(|f| f == fence))
                .map(|(w2, _)| (c2, w2))
        });
        if let Some((c2, w2)) = other {
            return Err(format!(
                "fence {fence} given to waiter {w} of c{c}, and before to waiter {w2} of c{c2}"
            ));
        }
        let got = &mut n.lockers[c].waiters[w].got;
        if !got.iter().any(|f| f == fence) {
            got.push(fence.to_owned());
        }
        Ok(())
    }

    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        let mut n = s.clone();
        let now = s.db.now_ms();
        let label = match a {
            Action::Run {
                client: c,
                op: Op::TakeGrant(w),
                ..
            } => {
                self.stats.takes += 1;
                let l = &mut n.lockers[c];
                let (at, fence, _) = l.notice.take().expect("a notice");
                l.wake = false;
                let g = l.grant;
                // A fence names one grant of the lock, whoever's token it
                // names.
                let value = self.lock_value(&n.db);
                let backed = value.as_deref().and_then(fence_of) == fence.parse().ok();
                let waiter = &mut n.lockers[c].waiters[w];
                waiter.orphaned = !backed;
                waiter.phase = Phase::Held {
                    fence: fence.clone(),
                    deadline: at + CLAIM,
                    extended: false,
                    by_grant: Some(g),
                };
                Self::give(&mut n, c, w, &fence)
                    .map_err(|e| format!("c{c} waiter {w} takes its grant: {e}"))?;
                format!(
                    "c{c} waiter {w} takes grant {fence} as {}:{fence} until {}",
                    short(&grant(c, g)),
                    at + CLAIM
                )
            }
            Action::Run {
                client: c,
                op: Op::Drop(w),
                ..
            } => {
                n.drops -= 1;
                let l = &mut n.lockers[c];
                let (fence, g) = l
                    .hold(w)
                    .map(|(f, g)| (f.to_owned(), g.unwrap_or_default()))
                    .unwrap_or_default();
                l.orphans
                    .push((format!("{}:{fence}", grant(c, g)), Some(g)));
                self.finish(&mut n.lockers[c].waiters[w]);
                format!("c{c} waiter {w} drops its hold {fence}")
            }
            Action::Run {
                client: c,
                op,
                lose,
            } => {
                let call = self.call(s, c, op);
                let l = &s.lockers[c];
                if matches!(op, Op::Acquire(_)) && self.holds_under_grant(l) {
                    self.stats.attempts_beside_a_hold += 1;
                }
                let before = self.lock_value(&s.db);
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.lock_value(&n.db);
                let label = format!(
                    "c{c} {op:?} → {reply:?}{}; lock {} → {}",
                    if lose { " LOST" } else { "" },
                    before.as_deref().unwrap_or("free"),
                    after.as_deref().unwrap_or("free"),
                );
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                if let (Op::Acquire(w), Reply::Bulk(f), false) = (op, &reply, lose) {
                    let mine = l.waiters[w].got.contains(f);
                    if self.bounds.rules.stale_grants_refused && !mine && self.stale(l, f) {
                        self.stats.stale_handed_back += 1;
                    }
                }
                let f0 = before.as_deref().and_then(fence_of);
                if let Some(f1) = after.as_deref().and_then(fence_of) {
                    if Some(f1) != f0 {
                        if f1 <= n.max_fence {
                            return Err(format!(
                                "{label}: new fence {f1} is not above {}",
                                n.max_fence
                            ));
                        }
                        n.max_fence = f1;
                    }
                }
                self.notify(&mut n, now);
                let l = &mut n.lockers[c];
                let first = l.lost.map_or(now, |(_, t)| t);
                if lose {
                    l.lost = Some((op, first));
                } else {
                    l.lost = None;
                    self.answer(&mut n, c, op, &reply, first, now)
                        .map_err(|e| format!("{label}: {e}"))?;
                }
                label
            }
            Action::Advance => {
                let t = self.next_deadline(s).expect("a deadline");
                n.db.advance_ms(t - now);
                format!("clock +{} ms", t - now)
            }
            fault => {
                if let Action::GiveUp(c) = fault {
                    if self.holds_under_grant(&s.lockers[c]) {
                        self.stats.give_ups_beside_a_hold += 1;
                    }
                }
                let label = search::apply_fault(
                    fault,
                    &mut n.faults,
                    &mut n.lockers,
                    &mut n.db,
                    &mut n.unreplicated,
                );
                self.orphan(&mut n);
                label
            }
        };
        n.db.purge();
        let now = n.db.now_ms();
        let mut valid = Vec::new();
        for (c, l) in n.lockers.iter().enumerate() {
            for (w, x) in l.waiters.iter().enumerate() {
                // A waiter that sent its release stops using the lease.
                let releasing = matches!(l.lost, Some((Op::Release(v), _)) if v == w);
                if matches!(x.phase, Phase::Held { deadline, .. } if now < deadline)
                    && !releasing
                    && !x.orphaned
                {
                    valid.push((c, w));
                }
            }
        }
        if valid.len() > 1 {
            return Err(format!("{label}: waiters {valid:?} all hold valid leases"));
        }
        Ok((n, label))
    }

    /// The notices of the last run: a grant names its registration; any
    /// other wakes every locker with a waiter in line.
    fn notify(&mut self, n: &mut State, now: u64) {
        for p in std::mem::take(&mut n.db.published) {
            let parts: Vec<&str> = p.message.split(':').collect();
            for (c, l) in n.lockers.iter_mut().enumerate() {
                if l.dead {
                    continue;
                }
                // `<sha>:g:<reg>:<fence>:<claim ms>:<ms>:<slot>:<owner id>`.
                if parts.get(1) == Some(&"g") {
                    if parts.get(2) == Some(&entry(c).as_str()) {
                        let owner = parts.get(7).map(|id| (*id).to_owned());
                        let ours = owner_id(&grant(c, l.grant));
                        if l.head().is_some() && owner.as_ref() != Some(&ours) {
                            self.stats.notices_of_another_token += 1;
                        }
                        l.notice = parts.get(3).map(|f| (now, (*f).to_owned(), owner));
                    }
                } else if l.head().is_some() {
                    l.wake = true;
                }
            }
        }
    }

    fn finish(&self, w: &mut Waiter) {
        w.orphaned = false;
        if w.rounds_left > 0 {
            w.rounds_left -= 1;
            w.phase = Phase::Waiting;
        } else {
            w.phase = Phase::Gone;
        }
    }

    fn answer(
        &self,
        n: &mut State,
        c: usize,
        op: Op,
        reply: &Reply,
        first: u64,
        now: u64,
    ) -> Result<(), String> {
        let l = &mut n.lockers[c];
        match op {
            Op::Acquire(w) => {
                (l.notice, l.wake) = (None, false);
                match reply {
                    Reply::Bulk(fence)
                        if self.bounds.rules.stale_grants_refused
                            && !l.waiters[w].got.contains(fence)
                            && self.stale(l, fence) =>
                    {
                        // A stale grant claimed: released by the sweep; the
                        // waiter waits on, registered.
                        let t = tok(c, w, &l.waiters[w]);
                        l.orphans.push((t, None));
                        l.waiters[w].tokens += 1;
                        l.registered = true;
                    }
                    Reply::Bulk(fence) => {
                        // `k` leaves the registration queued; `d` took it
                        // out, and the line, left empty, is forgotten.
                        l.registered = l.behind(w);
                        if !l.behind(w) {
                            l.forget_line();
                        }
                        l.waiters[w].orphaned = false;
                        l.waiters[w].phase = Phase::Held {
                            fence: fence.clone(),
                            deadline: first + LEASE,
                            extended: true,
                            by_grant: None,
                        };
                        let fence = fence.clone();
                        return Self::give(n, c, w, &fence);
                    }
                    Reply::Int(ms) => self.busy(l, *ms, now),
                    Reply::Array(items) => match items.first() {
                        Some(Reply::Int(ms)) => self.busy(l, *ms, now),
                        other => return Err(format!("acquire answered {other:?}")),
                    },
                    other => return Err(format!("acquire answered {other:?}")),
                }
            }
            Op::Extend(w) => {
                let x = &mut l.waiters[w];
                if let Phase::Held {
                    deadline, extended, ..
                } = &mut x.phase
                {
                    *extended = true;
                    if *reply == Reply::Int(1) {
                        *deadline = first + LEASE;
                        x.orphaned = false;
                    } else {
                        *deadline = (*deadline).min(now);
                    }
                }
            }
            Op::Release(w) => self.finish(&mut l.waiters[w]),
            Op::OrphanRelease => {
                l.orphans.remove(0);
            }
            Op::Deregister => {
                if let Leaving::Deregister(g) = l.leaving {
                    l.leaving = Leaving::GrantRelease(g);
                }
            }
            Op::GrantRelease => l.leaving = Leaving::No,
            Op::TakeGrant(_) | Op::Drop(_) => unreachable!("sends nothing"),
        }
        Ok(())
    }

    fn busy(&self, l: &mut Locker, ms: i64, now: u64) {
        l.registered = true;
        l.next_poll = now + (ms.max(1) as u64).min(POLL);
    }

    /// Marks every holder whose hold the key space no longer backs for as
    /// long as its waiter counts: a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        let entry = n.db.peek(&self.names.lock()).cloned();
        for (c, l) in n.lockers.iter_mut().enumerate() {
            for w in 0..l.waiters.len() {
                let by_grant = match l.hold(w) {
                    Some((_, g)) => g.is_some(),
                    None => continue,
                };
                let owner = tok(c, w, &l.waiters[w]);
                let x = &mut l.waiters[w];
                if let Phase::Held {
                    fence, deadline, ..
                } = &x.phase
                {
                    // A hold under a grant token, by its fence: a fence
                    // names one grant, whoever's token it names.
                    let backed = if by_grant {
                        entry.as_ref().is_some_and(|e| {
                            matches!(&e.value, Value::Str(v) if fence_of(v) == fence.parse().ok())
                                && e.expire_at.is_none_or(|at| at + 1 >= *deadline)
                        })
                    } else {
                        search::backs(entry.as_ref(), &format!("{owner}:{fence}"), *deadline)
                    };
                    x.orphaned |= !backed;
                }
            }
        }
    }

    pub(crate) fn run(&mut self) -> Result<Stats, Counterexample> {
        let init = self.initial();
        let searched = search::breadth_first(self, init, self.bounds.depth)?;
        Ok(Stats {
            states: searched.states,
            transitions: searched.transitions,
            depth: searched.depth,
            ..self.stats
        })
    }
}

impl search::Model for Explorer {
    type State = State;
    type Op = Op;

    fn actions(&self, s: &State) -> Vec<Action> {
        search::actions(
            &s.lockers,
            &s.faults,
            &s.unreplicated,
            |c| self.sends(s, c),
            self.next_deadline(s).is_some(),
        )
    }

    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        self.apply(s, a)
    }
}

/// `REDLEASE_LOCKER_MODEL_DEPTH`, or `depth`: a safety run's bound. Its
/// own variable, as this explorer's states grow faster with depth than the
/// others' (depth 9 in a release build: about 40 s for both runs; 10:
/// 18 s without data loss, over 2 minutes with it).
fn depth_or_env(depth: usize) -> usize {
    std::env::var("REDLEASE_LOCKER_MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(depth)
}

/// Locker 0 with two waiters, locker 1 with one that acquires twice.
fn bounds(depth: usize, faults: Faults, rules: Rules) -> Bounds {
    Bounds {
        rounds: vec![vec![1, 1], vec![2]],
        depth,
        faults,
        drops: 1,
        rules,
    }
}

fn explore(name: &str, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let result = Explorer::new(Sources::real(), b.clone()).run();
    match &result {
        Ok(st) => println!(
            "{name}: waiters {:?}, depth {}: {} states, {} transitions ({} grants taken \
             with a waiter behind, {} attempts and {} give-ups beside a hold, {} stale grants \
             handed back, {} notices of another grant token), {:.1?}",
            b.rounds,
            st.depth,
            st.states,
            st.transitions,
            st.takes,
            st.attempts_beside_a_hold,
            st.give_ups_beside_a_hold,
            st.stale_handed_back,
            st.notices_of_another_token,
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: depth bound {}: counterexample after {:.1?}\n{cx}",
            b.depth,
            started.elapsed()
        ),
    }
    result
}

/// Every fault but data loss: the faults of a locker's own making.
fn no_data_loss() -> Faults {
    Faults {
        restart: 0,
        failover: 0,
        unreplicated: 0,
        ..Faults::one_of_each()
    }
}

/// Data lost (a restart, a failover losing the last run), replies lost,
/// a give-up.
fn data_loss() -> Faults {
    Faults {
        lose_notice: 0,
        kill: 0,
        ..Faults::one_of_each()
    }
}

#[test]
fn a_locker_with_two_waiters_keeps_the_lock_safe() {
    match explore(
        "lockers with two waiters",
        bounds(depth_or_env(8), no_data_loss(), Rules::ALL),
    ) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.takes > 0 && st.attempts_beside_a_hold > 0 && st.give_ups_beside_a_hold > 0,
            "a grant taken with a waiter behind was never reached: {st:?}"
        ),
    }
}

#[test]
fn a_locker_with_two_waiters_survives_a_restart_and_a_failover() {
    let b = bounds(depth_or_env(7), data_loss(), Rules::ALL);
    match explore("lockers with two waiters, data lost", b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.stale_handed_back > 0, "no stale grant met: {st:?}"),
    }
}

/// Locker 0 with two waiters that acquire twice: a give-up empties the
/// line, whose registration (grant token G0) is queued until its
/// DEREGISTER and release by G0 run, and the waiter acquires again in a new
/// line (G1); the holder's release grants the lock to G0 and joins that
/// line behind it. Taking the grant as held under `G1:<fence>`, the
/// release by G0 would free the lock under the new head for locker 1:
///
/// 1. c0 waiter 0 takes the lock (`k`: waiter 1 is behind it);
/// 2. c0 waiter 1 is busy, registers G0 (9000);
/// 3. c0 waiter 1 gives up and acquires again: a new line, G1;
/// 4. c0 waiter 0 releases, granted to G0; it joins the line behind
///    waiter 1, which hears the grant before its first attempt;
/// 5. c0 waiter 1 takes it as `9001:<fence>`;
/// 6. c0 DEREGISTER; 7. c0 release by G0 frees the lock;
/// 8. c1 takes the lock, beside c0 waiter 1.
///
/// With the owner id (rule 5), step 5 is not taken.
fn new_line_bounds(depth: usize, rules: Rules) -> Bounds {
    Bounds {
        rounds: vec![vec![2, 2], vec![1]],
        ..bounds(depth, no_data_loss(), rules)
    }
}

#[test]
fn a_new_line_beside_a_leaving_registration_keeps_the_lock_safe() {
    let b = new_line_bounds(depth_or_env(8), Rules::ALL);
    match explore("lockers, a new line beside a leaving one", b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.notices_of_another_token > 0 && st.takes > 0,
            "no line heard a grant to another grant token: {st:?}"
        ),
    }
}

#[test]
fn mutation_take_of_another_tokens_grant_is_caught() {
    let rules = Rules {
        owner_checked: false,
        ..Rules::ALL
    };
    let name = "mutation: a line takes a grant to its locker's older grant token";
    match explore(name, new_line_bounds(8, rules)) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("valid leases"), "{cx}"),
    }
}

fn broken(name: &str, depth: usize, faults: Faults, rules: Rules) -> Counterexample {
    match explore(name, bounds(depth, faults, rules)) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => cx,
    }
}

#[test]
fn mutation_next_waiter_claiming_the_hold_is_caught() {
    let rules = Rules {
        no_claim_of_a_hold: false,
        ..Rules::ALL
    };
    let name = "mutation: the next waiter names the grant token beside a hold";
    let cx = broken(name, 8, no_data_loss(), rules);
    assert!(cx.invariant.contains("valid leases"), "{cx}");
}

#[test]
fn mutation_leaving_release_ending_the_hold_is_caught() {
    let rules = Rules {
        park_leaving_release: false,
        ..Rules::ALL
    };
    let name = "mutation: the leaving release by grant token is not parked";
    let cx = broken(name, 8, no_data_loss(), rules);
    assert!(cx.invariant.contains("valid leases"), "{cx}");
}

#[test]
fn mutation_dropped_hold_claimed_again_is_caught() {
    // Rule 4 alone keeps this safe too (the claim of the dropped hold is
    // stale, and released): both are off.
    let rules = Rules {
        orphans_hold: false,
        stale_grants_refused: false,
        ..Rules::ALL
    };
    let name = "mutation: a dropped hold is not a hold of its line";
    let cx = broken(name, 7, no_data_loss(), rules);
    assert!(cx.invariant.contains("before to waiter"), "{cx}");
}

#[test]
fn mutation_stale_grant_after_data_loss_is_caught() {
    // A failover that lost a release (or a claim) brings back a grant this
    // locker's waiter was given: the next waiter would be given its fence.
    let rules = Rules {
        stale_grants_refused: false,
        ..Rules::ALL
    };
    let name = "mutation: a stale grant is taken or claimed";
    let cx = broken(name, 7, data_loss(), rules);
    assert!(cx.invariant.contains("before to waiter"), "{cx}");
}
