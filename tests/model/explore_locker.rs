//! The hand-over without the claim (docs/PROTOCOL.md §4.3, §5.2) explored
//! with lockers that have more than one waiter, for a lock and for a
//! semaphore (`Kind`; the semaphore's runs are in `explore_sem_locker.rs`):
//! the real ACQUIRE or SEM_ACQUIRE, a release (RELEASE of the lock or of a
//! slot), RENEW, DEREGISTER and the release by grant token (RELEASE or
//! SEM_RELEASE_ANY) on the emulator, driven by lockers that mirror the
//! core's line in outline. A locker has one registration and one grant
//! token per line, shared by its waiters; the head attempts; a line left
//! empty is forgotten (unless a lock's lingers), and the next draws a new
//! grant token. A grant's notice names the owner's id (SHA-1 of the grant
//! token), and a semaphore's its slot; the head takes the grant as held
//! (under `<grant token>:<fence>`) or claims it. A lock's take keeps the
//! registration queued for the waiter that stays behind it (which becomes
//! the head); a slot's grant took it out: the line forgets it and draws a
//! new grant token, and its next waiter attempts at once. A holder extends,
//! releases or drops its lease (a dropped hold is released later, by the
//! core's orphan sweep); the last waiter in line gives up, and may acquire
//! again later; a line left empty deregisters, then releases by its grant
//! token.
//!
//! The line's rules (§4.3), each a `Rules` field that, turned off, gives a
//! counterexample:
//! 1. a lock's attempts name the line's grant token with a floor, the
//!    highest fence the line was given: the script claims a value under
//!    that token only above it, so never a hold a take left under it, and
//!    a later grant to the registration beside that hold is claimed;
//! 2. a leaving registration's release by its grant token waits until no
//!    hold is under that token (a release by token would end that hold);
//! 3. a dropped hold counts as a hold of its line until its release;
//! 4. a stale grant (its fence not above the line's, on its slot) is not
//!    taken, and its claim is released;
//! 5. a grant is taken only when its notice's owner id is the line's
//!    grant token's: a registration an earlier line left, its release by
//!    that token on its way, may be granted first;
//! 6. a semaphore's take redraws the grant token;
//! 7. the release of a lease a lock's line lingers on names its
//!    registration (RELEASE's last argument), which it never grants;
//! 8. a lingering registration's release by grant token waits, as rule
//!    2's, until no hold is under that token.
//!
//! A lock's registration lingers (§4.4, `core/linger.rs`; `Rules::linger`):
//! a line's lone head keeps it (`k`) and may take a grant without a waiter
//! behind; when the line's last waiter takes the lease with the
//! registration queued, the line is kept (its grant token, its fences) and
//! lingers while that lease is held, then `LINGER_WINDOW` after its
//! release (the clock's deadline). A waiter that comes back meanwhile (a
//! holder's next acquire, a give-up's return) waits for the grant, at most
//! the claim window, unless the release left the key free: then it
//! attempts at once. A grant notice naming the registration with no
//! waiter, or the window's end (a step of its own once the clock reached
//! it), passes it on: DEREGISTER and the release by grant token, which a
//! return does not drop and the line's next attempt does not wait for (the
//! subscriber sends them). A restart or failover, which loses the
//! subscription, ends it: the registration deregisters as a give-up's.
//!
//! The rule the floor replaced, that no attempt names a grant token a hold
//! is under (judged per token), is a `Rules` field too: turned on, a
//! lock's grant to the registration beside a hold that ended in Redis
//! (dropped and not yet swept, expired, lost to a failover) is passed
//! over and lapses, which fails the run.
//!
//! Invariants, at every step: a lingering registration is never granted
//! by its own line's release (rule 7's point: a worker loop's release
//! hands the lock on); per slot (the lock's key is one) at most one
//! waiter whose lease is valid by its own clock, at most the permits in
//! all (leaving out holds a restart or failover lost: §11); per slot every
//! new fence above those before; no slot and fence given to two waiters
//! (no grant taken twice); no grant passed over: an attempt that finds a
//! fresh grant to its line's grant token claims one (or its own slot, a
//! replay), else it queues the registration again beside a grant it will
//! not claim (a semaphore's is then served twice; a lock's grant lapses).
//!
//! Both kinds' lines follow the core's rules alike: a take is placed by the
//! anchor (the last registering busy reply's server time, forgotten on a
//! reply lost or a lost subscription); a notice is heard after the run's
//! reply, by a line with a head only (a lingering line hears its grant to
//! pass it on); a grant to another locker makes a head without a
//! registration attempt at once; a waiter whose lease ends joins the line
//! at its back; a waiter that gave up may acquire again, a step of its own,
//! which drops its line's deregistration if that was not sent yet (the
//! core's `join`: the registration stands); a forgotten line forgets the
//! fences it was given; a lost reply is one fault, and a lost attempt may
//! have registered the line. Two rules differ by kind, as in the core: a
//! lock's take keeps the registration (`Kind::take_keeps_registration`),
//! and a lock's next head backs off after its predecessor acquired
//! (`Kind::defers_next_head`). Not modelled: the core's refusal to take a
//! lock's grant when the registration's refresh is due (the model has no
//! refresh), so the lock's lines take in more states than the core does; a
//! registered head's retry brought forward to the end of a grant's claim
//! window when the grant goes to another locker (its polls stay at most
//! `POLL` apart); the holder's return after a release drops no
//! deregistration (it comes after the sweep sent it), where a give-up's
//! return may. Of lingering: its end when the registration's entry is past
//! its bound (the core forgets it, and checks that bound before a return
//! waits), so a line lingers on a dropped hold until a return, a grant or a
//! lost subscription; a lost notice of a grant to a lingering registration
//! (the pass-on is heard with the run); the subscription's reconnection (a
//! restart or failover's loss is over at once, and lines linger again); a
//! try-once acquire.

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Hand, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, owner_of, Counterexample, Faults, Keys, Scripts};

use super::explore::{CLAIM, LEASE, POLL, REG, START_MS};

/// How long after its lease's release a lingering registration stays (the
/// core's `LINGER_AFTER_RELEASE`).
const LINGER_WINDOW: u64 = 20;
/// How long a waiter that joined a lingering line waits for the grant
/// before it checks: the claim window and the core's 2 ms margin (below
/// the safety interval, `POLL`).
const AWAIT_GRANT: u64 = CLAIM + 2;

/// Which lease the lockers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// The lock: one key.
    Lock,
    /// A semaphore of `permits` slots.
    Semaphore { permits: u32 },
}

/// What an attempt's reply says.
enum Attempt {
    /// Busy (`server_ms`: a semaphore's registration's server time).
    Busy { ms: i64, server_ms: Option<u64> },
    /// The lease (`next_waits`: a semaphore's claim queued the
    /// registration again for the waiter behind, which waits).
    Got {
        slot: u32,
        fence: String,
        next_waits: bool,
    },
}

impl Kind {
    /// The slots (the lock's key is one).
    fn slots(self) -> u32 {
        match self {
            Kind::Lock => 1,
            Kind::Semaphore { permits } => permits,
        }
    }

    fn queue(self) -> QKind {
        match self {
            Kind::Lock => QKind::Lock,
            Kind::Semaphore { .. } => QKind::Sem,
        }
    }

    /// The key of slot `slot`.
    fn key(self, n: &Names, slot: u32) -> String {
        match self {
            Kind::Lock => n.lock(),
            Kind::Semaphore { .. } => format!("{}{slot}", n.sem_slot_prefix()),
        }
    }

    fn acquire(self, n: &Names, tok: &str, h: &Hand) -> Call {
        match self {
            Kind::Lock => Call::acquire(n, tok, LEASE, 0, Some(h)),
            Kind::Semaphore { permits } => Call::sem_acquire(n, permits, tok, LEASE, 0, Some(h)),
        }
    }

    /// The release of slot `slot` by `names` (a whole value or a token),
    /// naming the lock's lingering registration `own`, if any.
    fn release(self, n: &Names, slot: u32, names: &str, own: Option<&str>) -> Call {
        match self {
            Kind::Lock => Call::lock_release(n, names, 0, own),
            Kind::Semaphore { .. } => Call::slot_release(n, slot, names, 0),
        }
    }

    /// The release by grant token that follows DEREGISTER.
    fn release_by_grant(self, n: &Names, grant: &str) -> Call {
        match self {
            Kind::Lock => Call::lock_release(n, grant, 0, None),
            Kind::Semaphore { permits } => Call::sem_release_any(n, permits, grant),
        }
    }

    fn attempt(self, reply: &Reply) -> Option<Attempt> {
        let items = match reply {
            Reply::Array(items) => items.as_slice(),
            _ => &[],
        };
        match (self, reply, items) {
            // Busy, registered at that server time (either kind's reply).
            (_, _, [Reply::Int(ms), Reply::Int(server_ms)]) => Some(Attempt::Busy {
                ms: *ms,
                server_ms: Some(*server_ms as u64),
            }),
            (Kind::Lock, Reply::Bulk(fence), _) => Some(Attempt::Got {
                slot: 0,
                fence: fence.clone(),
                next_waits: false,
            }),
            (Kind::Lock, Reply::Int(ms), _) => Some(Attempt::Busy {
                ms: *ms,
                server_ms: None,
            }),
            (Kind::Semaphore { .. }, _, [Reply::Int(slot), Reply::Bulk(fence), rest @ ..]) => {
                Some(Attempt::Got {
                    slot: *slot as u32,
                    fence: fence.clone(),
                    next_waits: rest.first() == Some(&Reply::Int(1)),
                })
            }
            _ => None,
        }
    }

    /// A lock's take needs a waiter staying behind the head, which keeps
    /// the registration queued (§4.3: a line left empty claims); a slot's
    /// grant took the registration out: the take forgets it, draws a new
    /// grant token (rule 6) and lets the next waiter attempt at once.
    fn take_keeps_registration(self) -> bool {
        self == Kind::Lock
    }

    /// After a head left its line holding the lease, a lock's next head
    /// backs off as after a busy reply (the locker itself holds the key:
    /// only the release's notice or its poll wakes it); a semaphore's
    /// attempts at once (a permit may be free), unless the reply said it
    /// waits for its grant. The core's `finish` defers the lock's only.
    fn defers_next_head(self) -> bool {
        self == Kind::Lock
    }
}

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
    /// The sweep's release of a dropped hold or a stale grant claimed.
    OrphanRelease,
    /// DEREGISTER of the leaving registration that names the grant token
    /// numbered.
    Deregister(u8),
    /// The release by that grant token that follows DEREGISTER.
    GrantRelease(u8),
    /// A waiter that gave up acquires again (no script).
    Rejoin(usize),
    /// The lingering registration's window ends (no script): it is passed
    /// on.
    LingerEnds,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Waiting,
    Held {
        slot: u32,
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
    /// Which waiter it is (its place in `Locker::waiters` is its place in
    /// line, among the waiting ones).
    id: u8,
    phase: Phase,
    /// Acquisitions left after this one.
    rounds_left: u8,
    /// The slots and fences it was given.
    got: Vec<(u32, String)>,
    /// Its hold rests on a write a restart or failover lost.
    orphaned: bool,
    /// Tokens it handed a stale grant back under (it goes on under a new
    /// one, which that lease's release cannot meet).
    tokens: u8,
}

/// A registration leaving the queue: DEREGISTER, then the release by the
/// grant token it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Leaving {
    /// The grant token, by number (a line's own: no two leave alike).
    grant: u8,
    /// DEREGISTER was answered: the release by the grant token is next.
    deregistered: bool,
    /// A lingering registration's pass-on, which the subscriber sends on
    /// its own connection (the core's `pass_ons`): a waiter's return does
    /// not drop it, nor does the line's next attempt wait for it.
    pass_on: bool,
    /// The registration lingered (a pass-on, or its end by a lost
    /// subscription).
    lingered: bool,
}

/// How a registration without waiters stays queued (the core's
/// `Linger`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Linger {
    /// While the lease its last waiter took is held.
    Holding,
    /// Until `until`, after that lease's release, which handed the key to
    /// another registration (`handed_over`) or freed it.
    Until { until: u64, handed_over: bool },
}

/// A lease to release that nobody uses: a dropped hold; a stale grant
/// claimed (rule 4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Orphan {
    slot: u32,
    /// What its release names: a whole value, or a token.
    names: String,
    /// The grant token (its number) a dropped hold is under.
    grant: Option<u8>,
}

/// What a grant's notice says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Notice {
    /// The grant's server time.
    at: u64,
    slot: u32,
    fence: String,
    /// The owner's id (`None`: not published).
    owner: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Locker {
    kind: Kind,
    /// In line order, for the waiting ones.
    waiters: Vec<Waiter>,
    registered: bool,
    /// The line's grant token, by number: a new one after the line was
    /// forgotten, and after a slot's take.
    grant: u8,
    /// Per slot, the highest fence a waiter of the line was given.
    given: Vec<u128>,
    /// The last grant notice naming it.
    notice: Option<Notice>,
    wake: bool,
    next_poll: u64,
    /// The server time of the last registering attempt's busy reply, which
    /// places a grant on the locker's clock (kept per locker, not per
    /// line, as the core's; forgotten on an attempt of unknown outcome or
    /// a lost subscription).
    anchor: Option<u64>,
    /// A call whose reply was lost, re-sent, and its first send's time.
    lost: Option<(Op, u64)>,
    orphans: Vec<Orphan>,
    /// The registrations leaving the queue.
    leaving: Vec<Leaving>,
    /// The line emptied as its last waiter took the lease, and its
    /// registration lingers.
    linger: Option<Linger>,
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

    /// The line emptied: the core forgets it (its registration, its grant
    /// token, the fences it was given; a notice for it is dropped).
    fn forget_line(&mut self) {
        self.registered = false;
        self.grant += 1;
        self.given = vec![0; self.given.len()];
        (self.notice, self.wake) = (None, false);
    }

    /// Waiter `w` left the line holding a lease (`now`): the next head
    /// attempts at once, unless it defers (a lock's, or the reply said it
    /// waits for its grant: it polls after the lease or the safety
    /// interval, the shorter); with none, the registration lingers if it
    /// may (`may_linger`) and is queued, else the line is forgotten.
    fn head_left(&mut self, w: usize, now: u64, next_waits: bool, may_linger: bool) {
        if !self.behind(w) && may_linger && self.registered {
            self.linger = Some(Linger::Holding);
        } else if !self.behind(w) {
            self.forget_line();
        } else if next_waits || self.kind.defers_next_head() {
            self.next_poll = now + LEASE.min(POLL);
        } else {
            self.next_poll = now;
        }
    }

    /// Waiter `w`, which gave up, acquires again, joining the line at its
    /// back: as the core's `join`, it drops the line's deregistration not
    /// sent yet (the registration stands; the line is a new one, with a
    /// new grant token), not a pass-on. Returns whether it dropped one.
    fn rejoin(&mut self, w: usize, now: u64) -> bool {
        let before = self.leaving.len();
        self.leaving.retain(|x| x.pass_on || x.deregistered);
        let dropped = self.leaving.len() < before;
        self.finish(w, now);
        dropped
    }

    /// Waiter `w`'s lease ended: it acquires again, joining the line at
    /// its back (a line without a head: at once), or it is gone. Joining a
    /// lingering line (the core's `handle_rejoin`), it waits for the grant
    /// to the registration that stayed, unless the lease's release left
    /// the key free.
    fn finish(&mut self, w: usize, now: u64) {
        let mut x = self.waiters.remove(w);
        x.orphaned = false;
        if x.rounds_left > 0 {
            x.rounds_left -= 1;
            x.phase = Phase::Waiting;
            if self.head().is_none() {
                self.next_poll = now;
            }
            match self.linger.take() {
                Some(Linger::Until {
                    handed_over: false, ..
                })
                | None => {}
                Some(_) => self.next_poll = now + AWAIT_GRANT,
            }
        } else {
            x.phase = Phase::Gone;
        }
        self.waiters.push(x);
    }

    /// A lease of the line was released (`handed_over`: RELEASE answered
    /// `3`): a lingering registration stays [`LINGER_WINDOW`] longer.
    fn lease_released(&mut self, now: u64, handed_over: bool) {
        if self.linger == Some(Linger::Holding) {
            self.linger = Some(Linger::Until {
                until: now + LINGER_WINDOW,
                handed_over,
            });
        }
    }

    /// The lingering registration ends: it leaves the queue (`pass_on`:
    /// the subscriber's pass-on; else a deregistration, as a lost
    /// subscription makes), and the line, empty, is forgotten.
    fn end_lingering(&mut self, pass_on: bool) {
        if self.linger.take().is_some() {
            if self.registered {
                self.leaving.push(Leaving {
                    grant: self.grant,
                    deregistered: false,
                    pass_on,
                    lingered: true,
                });
            }
            self.forget_line();
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
    /// empty is forgotten and deregisters.
    fn give_up(&mut self) {
        let Some(last) = self.waiters.iter().rposition(|w| w.phase == Phase::Waiting) else {
            return;
        };
        // This acquisition ends; one left may start later (`Op::Rejoin`).
        self.waiters[last].phase = Phase::Gone;
        if self.head().is_none() {
            self.leaving.push(Leaving {
                grant: self.grant,
                deregistered: false,
                pass_on: false,
                lingered: false,
            });
            self.forget_line();
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    lockers: Vec<Locker>,
    faults: Faults,
    drops: u8,
    /// Per slot, the largest fence written to it.
    max_fence: Vec<u128>,
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// The line's rules for holds under grant tokens; `false` turns one off,
/// for the mutation tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// 1: a lock's attempts send the line's highest fence given as the
    /// floor.
    pub(crate) floor: bool,
    /// The rule the floor replaced (off in [`Rules::ALL`]): no attempt
    /// names a grant token a hold is under.
    pub(crate) no_claim_of_a_hold: bool,
    /// That rule judged per token; off, per line: no attempt names the
    /// line's grant token while any hold of the line is under a grant
    /// token.
    pub(crate) per_token: bool,
    /// 2: the leaving release by grant token waits for the hold's release.
    pub(crate) park_leaving_release: bool,
    /// 3: a dropped hold counts as a hold until its release.
    pub(crate) orphans_hold: bool,
    /// 4: a grant whose fence is not above every fence the line was given
    /// (on its slot) is stale (data loss brought it back): not taken, and
    /// claimed only to be released, its waiter waiting on.
    pub(crate) stale_grants_refused: bool,
    /// 5: a grant is taken only when its notice's owner id is the line's
    /// grant token's; off, any grant to the registration is taken (the
    /// notice before the owner id).
    pub(crate) owner_checked: bool,
    /// 6: a semaphore's take redraws the line's grant token (and forgets
    /// the registration the grant popped); off, the line keeps both, as a
    /// lock's take does.
    pub(crate) redraw_at_take: bool,
    /// A lock's registration lingers when the line's last waiter takes
    /// the lease (docs/PROTOCOL.md §4.4); off, the line is forgotten and
    /// its lone head's attempt takes the registration out (`d`).
    pub(crate) linger: bool,
    /// 7: the release of a lease its line lingers on names the
    /// registration, which it never grants.
    pub(crate) release_names_lingering: bool,
    /// 8: a lingering registration's release by grant token (its pass-on,
    /// or its end by a lost subscription) waits, as rule 2's, for the
    /// hold under that token.
    pub(crate) park_pass_on: bool,
}

impl Rules {
    pub(crate) const ALL: Rules = Rules {
        floor: true,
        no_claim_of_a_hold: false,
        per_token: true,
        park_leaving_release: true,
        orphans_hold: true,
        stale_grants_refused: true,
        owner_checked: true,
        redraw_at_take: true,
        linger: true,
        release_names_lingering: true,
        park_pass_on: true,
    };
}

/// What to explore: each locker's waiters, with their acquisitions.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) kind: Kind,
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
    /// Grants taken without the claim, and of those with a waiter behind.
    pub(crate) takes: usize,
    pub(crate) takes_with_a_waiter_behind: usize,
    /// Grants claimed by an attempt.
    pub(crate) claims: usize,
    /// Attempts of a line sent while a hold was under its grant token.
    pub(crate) attempts_beside_a_hold: usize,
    /// Attempts of a line sent while a hold was under an older grant
    /// token of the line, and of those, attempts that named the line's
    /// (new) grant token.
    pub(crate) attempts_beside_an_older_hold: usize,
    pub(crate) named_beside_a_hold: usize,
    /// Attempts of a lock's line that found a grant to its grant token
    /// (or a hold under it) at a fence not above the floor they sent, and
    /// of those, a value no hold of the line is (a stale grant).
    pub(crate) below_the_floor: usize,
    pub(crate) stale_below_the_floor: usize,
    /// Waiters that gave up and acquired again before their line's
    /// deregistration was sent, which they dropped.
    pub(crate) deregistrations_dropped: usize,
    /// Waiters that gave up while a hold was under the grant token.
    pub(crate) give_ups_beside_a_hold: usize,
    /// Extensions answered `1`.
    pub(crate) extended: usize,
    /// Stale grants claimed and handed back (rule 4).
    pub(crate) stale_handed_back: usize,
    /// Steps after which a waiter's token, or a grant token, was in two
    /// slots (a permit unused until it lapses).
    pub(crate) tokens_in_two_slots: usize,
    pub(crate) grant_tokens_in_two_slots: usize,
    /// Grant notices a line's head heard whose owner id is not its grant
    /// token's (a registration of an earlier line of the locker granted).
    pub(crate) notices_of_another_token: usize,
    /// Lines whose registration lingered; waiters that joined a lingering
    /// line and waited for the grant, or attempted (the key left free);
    /// lingering registrations passed on at a grant, at the window's end,
    /// and ended by a lost subscription; releases that named one.
    pub(crate) lingered: usize,
    pub(crate) linger_awaits: usize,
    pub(crate) linger_returns_to_a_free_key: usize,
    pub(crate) pass_ons_at_a_grant: usize,
    pub(crate) pass_ons_at_the_window_end: usize,
    pub(crate) lingering_lost: usize,
    pub(crate) releases_naming_it: usize,
}

/// Waiter `x` of locker `c`'s token: one per acquisition, and a new one
/// after it handed back a stale grant (`Waiter::tokens`).
fn tok(c: usize, x: &Waiter) -> String {
    let n = 0x1000 * (c as u64 + 1) + 0x100 * u64::from(x.id) + 0x10 * u64::from(x.tokens);
    token(n + u64::from(x.rounds_left))
}
/// Locker `c`'s grant token number `g` (the core draws it from the
/// head's token; any value no waiter's token is will do).
fn grant(c: usize, g: u8) -> String {
    token(0x9000 + 0x100 * c as u64 + u64::from(g))
}
fn entry(c: usize) -> String {
    format!("{:016x}", 0xe0 + c)
}

/// Whether `o` is a grant token (`grant`), not a waiter's (`tok`).
fn is_grant_token(o: &str) -> bool {
    u128::from_str_radix(o, 16).is_ok_and(|t| t >= 0x9000)
}

/// A token's id in a grant's notice, as the scripts compute it: the first
/// 16 hex digits of `redis.sha1hex(<token>)`.
fn owner_id(token: &str) -> String {
    sha1_smol::Sha1::from(token).digest().to_string()[..16].to_owned()
}

/// A token or value, short: the token's last 4 digits, and the fence.
fn short(v: &str) -> String {
    let o = owner_of(v);
    format!("{}{}", &o[o.len().saturating_sub(4)..], &v[o.len()..])
}

pub(crate) struct Explorer {
    scripts: Scripts,
    names: Names,
    kind: Kind,
    bounds: Bounds,
    stats: Stats,
}

impl Explorer {
    pub(crate) fn new(sources: Sources, bounds: Bounds) -> Explorer {
        Explorer {
            scripts: Scripts::new(sources),
            names: Names::new("ns", 1),
            kind: bounds.kind,
            bounds,
            stats: Stats::default(),
        }
    }

    fn initial(&self) -> State {
        let slots = self.kind.slots() as usize;
        let lockers = self.bounds.rounds.iter().map(|waiters| Locker {
            kind: self.kind,
            waiters: waiters
                .iter()
                .enumerate()
                .map(|(id, r)| Waiter {
                    id: id as u8,
                    phase: Phase::Waiting,
                    rounds_left: r.saturating_sub(1),
                    got: Vec::new(),
                    orphaned: false,
                    tokens: 0,
                })
                .collect(),
            registered: false,
            grant: 0,
            given: vec![0; slots],
            notice: None,
            wake: false,
            next_poll: 0,
            anchor: None,
            lost: None,
            orphans: Vec::new(),
            leaving: Vec::new(),
            linger: None,
            dead: false,
        });
        State {
            db: Db::at_ms(START_MS),
            lockers: lockers.collect(),
            faults: self.bounds.faults,
            drops: self.bounds.drops,
            max_fence: vec![0; slots],
            unreplicated: Vec::new(),
        }
    }

    fn slot_key(&self, slot: u32) -> String {
        self.kind.key(&self.names, slot)
    }

    /// Every slot's value (`None`: free).
    fn slots(&self, db: &Db) -> Vec<Option<String>> {
        (0..self.kind.slots())
            .map(|i| match db.peek(&self.slot_key(i)).map(|e| &e.value) {
                Some(Value::Str(v)) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether a hold of locker `l`'s is under its grant token `g`
    /// (tracked, or dropped and not released).
    fn holds_under(&self, l: &Locker, g: u8) -> bool {
        let held = l
            .waiters
            .iter()
            .any(|x| matches!(x.phase, Phase::Held { by_grant: Some(h), .. } if h == g));
        held || (self.bounds.rules.orphans_hold && l.orphans.iter().any(|o| o.grant == Some(g)))
    }

    /// Whether a hold of locker `l`'s is under a grant token older than
    /// the line's.
    fn holds_under_older(&self, l: &Locker) -> bool {
        (0..l.grant).any(|g| self.holds_under(l, g))
    }

    /// The floor the line's attempts send: a lock's highest fence given.
    fn floor(&self, l: &Locker) -> Option<u128> {
        let floor = self.kind == Kind::Lock && self.bounds.rules.floor;
        l.given.first().copied().filter(|f| floor && *f > 0)
    }

    /// Whether a line of this run's lockers lingers (the core's
    /// `may_linger`: a lock's, with its subscription live).
    fn may_linger(&self) -> bool {
        self.bounds.rules.linger && self.kind == Kind::Lock
    }

    /// The registration the release of a lease of locker `l`'s line names:
    /// its own while it lingers on that lease (rule 7).
    fn own_registration(&self, c: usize, l: &Locker) -> Option<String> {
        let lingers = l.linger == Some(Linger::Holding);
        (lingers && self.bounds.rules.release_names_lingering).then(|| entry(c))
    }

    /// Whether the line's attempts name its grant token as theirs.
    fn names_grant(&self, l: &Locker) -> bool {
        let r = self.bounds.rules;
        let beside = if r.per_token {
            self.holds_under(l, l.grant)
        } else {
            self.holds_under(l, l.grant) || self.holds_under_older(l)
        };
        l.registered && !(beside && r.no_claim_of_a_hold)
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let l = &s.lockers[c];
        let n = &self.names;
        let held = |w: usize| match &l.waiters[w].phase {
            Phase::Held {
                slot,
                fence,
                by_grant,
                ..
            } => (*slot, fence.clone(), *by_grant),
            _ => unreachable!("a hold's call is sent while held"),
        };
        match op {
            Op::Acquire(w) => {
                let h = Hand {
                    entry: entry(c),
                    reg_ms: REG,
                    claim_ms: CLAIM,
                    grant: grant(c, l.grant),
                    register: true,
                    registered: self.names_grant(l),
                    keep: if l.behind(w) || self.may_linger() {
                        "k"
                    } else {
                        "d"
                    },
                    floor: self.floor(l),
                };
                self.kind.acquire(n, &tok(c, &l.waiters[w]), &h)
            }
            Op::Extend(w) => {
                let (slot, fence, g) = held(w);
                let whole = format!("{}:{fence}", grant(c, g.unwrap_or_default()));
                Call::renew(&self.slot_key(slot), &whole, LEASE)
            }
            Op::Release(w) => {
                let own = self.own_registration(c, l);
                let (slot, names) = match held(w) {
                    (slot, fence, Some(g)) => (slot, format!("{}:{fence}", grant(c, g))),
                    (slot, _, None) => (slot, tok(c, &l.waiters[w])),
                };
                self.kind.release(n, slot, &names, own.as_deref())
            }
            Op::OrphanRelease => {
                let own = self.own_registration(c, l);
                let o = &l.orphans[0];
                self.kind.release(n, o.slot, &o.names, own.as_deref())
            }
            Op::Deregister(g) => Call::deregister(n, self.kind.queue(), &entry(c), &grant(c, g)),
            Op::GrantRelease(g) => self.kind.release_by_grant(n, &grant(c, g)),
            Op::TakeGrant(_) | Op::Drop(_) | Op::Rejoin(_) | Op::LingerEnds => {
                unreachable!("sends nothing")
            }
        }
    }

    /// Whether locker `l`'s head may take the grant its notice names: the
    /// anchor places it (a grant no earlier than the anchor's server time),
    /// at most half the window gone, for a lock a waiter staying behind
    /// the head, nothing of the line of unknown outcome, the fence above
    /// every fence the line was given on that slot, the notice's owner id
    /// its line's grant token's (rule 5).
    fn may_take(&self, c: usize, l: &Locker, now: u64) -> Option<usize> {
        let Notice {
            at,
            slot,
            fence,
            owner,
        } = l.notice.as_ref()?;
        let head = l.head()?;
        let placed = l.anchor.is_some_and(|s| *at >= s);
        let kept = !self.kind.take_keeps_registration() || l.behind(head) || self.may_linger();
        let fresh = !self.bounds.rules.stale_grants_refused || !Self::stale(l, *slot, fence);
        let ours = !self.bounds.rules.owner_checked
            || owner.as_deref() == Some(owner_id(&grant(c, l.grant)).as_str());
        let free = l.lost.is_none() && fresh && ours;
        (placed && kept && now <= at + CLAIM / 2 && free).then_some(head)
    }

    /// Whether `fence` is not above every fence locker `l`'s line was
    /// given on `slot`.
    fn stale(l: &Locker, slot: u32, fence: &str) -> bool {
        let top = l.given.get(slot as usize).copied().unwrap_or(0);
        top > 0 && fence.parse::<u128>().unwrap_or(0) <= top
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
        // attempt registers again (the same registration key); a pass-on
        // goes on the subscriber's connection, in its own time.
        let deregistering = l.leaving.iter().any(|x| !x.deregistered && !x.pass_on);
        if let (Some(head), false) = (l.head(), deregistering) {
            if l.notice.is_some() || l.wake || now >= l.next_poll {
                ops.push(Op::Acquire(head));
            }
        }
        for (w, x) in l.waiters.iter().enumerate() {
            if let Phase::Held {
                deadline,
                extended,
                by_grant,
                ..
            } = x.phase
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
        for (w, x) in l.waiters.iter().enumerate() {
            if x.phase == Phase::Gone && x.rounds_left > 0 {
                ops.push(Op::Rejoin(w));
            }
        }
        if !l.orphans.is_empty() {
            ops.push(Op::OrphanRelease);
        }
        let r = self.bounds.rules;
        for x in &l.leaving {
            let parks = if x.lingered {
                r.park_pass_on
            } else {
                r.park_leaving_release
            };
            if !x.deregistered {
                ops.push(Op::Deregister(x.grant));
            } else if !parks || !self.holds_under(l, x.grant) {
                ops.push(Op::GrantRelease(x.grant));
            }
        }
        if matches!(l.linger, Some(Linger::Until { until, .. }) if now >= until) {
            ops.push(Op::LingerEnds);
        }
        ops
    }

    fn next_deadline(&self, s: &State) -> Option<u64> {
        let now = s.db.now_ms();
        let mut times = Vec::new();
        for (key, e) in &s.db.keys {
            times.extend(e.expire_at.map(|at| at + 1));
            if key == &self.names.queue(self.kind.queue()) {
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
            if let Some(Notice { at, .. }) = &l.notice {
                times.push(at + CLAIM / 2 + 1);
            }
            if let Some(Linger::Until { until, .. }) = l.linger {
                times.push(until);
            }
            for w in &l.waiters {
                if let Phase::Held { deadline, .. } = w.phase {
                    times.push(deadline);
                }
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    /// Slot `slot` and `fence` given to waiter `w` of locker `c`: never to
    /// another waiter before.
    fn give(n: &mut State, c: usize, w: usize, slot: u32, fence: &str) -> Result<(), String> {
        let id = n.lockers[c].waiters[w].id;
        let other = n.lockers.iter().enumerate().find_map(|(c2, l)| {
            l.waiters
                .iter()
                .find(|x| {
                    (c2, x.id) != (c, id) && x.got.iter().any(|(s, f)| *s == slot && f == fence)
                })
                .map(|x| (c2, x.id))
        });
        if let Some((c2, w2)) = other {
            return Err(format!(
                "slot {slot} fence {fence} given to waiter {id} of c{c}, and before to waiter {w2} of c{c2}"
            ));
        }
        let l = &mut n.lockers[c];
        let f = fence.parse::<u128>().unwrap_or(0);
        l.given[slot as usize] = l.given[slot as usize].max(f);
        let got = &mut l.waiters[w].got;
        if !got.iter().any(|(s, f)| *s == slot && f == fence) {
            got.push((slot, fence.to_owned()));
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
                let Notice {
                    at, slot, fence, ..
                } = l.notice.take().expect("a notice");
                l.wake = false;
                let g = l.grant;
                let id = l.waiters[w].id;
                let behind = l.behind(w);
                if behind {
                    self.stats.takes_with_a_waiter_behind += 1;
                }
                let backed = self.backed(&n.db, slot, &fence, 0);
                let l = &mut n.lockers[c];
                l.waiters[w].orphaned = !backed;
                l.waiters[w].phase = Phase::Held {
                    slot,
                    fence: fence.clone(),
                    deadline: at + CLAIM,
                    extended: false,
                    by_grant: Some(g),
                };
                if !self.kind.take_keeps_registration() && self.bounds.rules.redraw_at_take {
                    // The grant popped the registration: the line forgets
                    // it, and its next registration names a new token.
                    l.registered = false;
                    l.grant += 1;
                }
                l.head_left(w, now, false, self.may_linger());
                Self::give(&mut n, c, w, slot, &fence)
                    .map_err(|e| format!("c{c} waiter {id} takes its grant: {e}"))?;
                format!(
                    "c{c} waiter {id} takes grant {}:{fence} of slot {slot} until {}{}",
                    short(&grant(c, g)),
                    at + CLAIM,
                    if behind { ", a waiter behind" } else { "" }
                )
            }
            Action::Run {
                client: c,
                op: Op::Drop(w),
                ..
            } => {
                n.drops -= 1;
                let l = &mut n.lockers[c];
                let id = l.waiters[w].id;
                let Phase::Held {
                    slot,
                    ref fence,
                    by_grant: Some(g),
                    ..
                } = l.waiters[w].phase
                else {
                    unreachable!("a hold under a grant token is dropped")
                };
                let names = format!("{}:{fence}", grant(c, g));
                let label = format!("c{c} waiter {id} drops its hold {}", short(&names));
                l.orphans.push(Orphan {
                    slot,
                    names,
                    grant: Some(g),
                });
                l.finish(w, now);
                label
            }
            Action::Run {
                client: c,
                op: Op::Rejoin(w),
                ..
            } => {
                let l = &mut n.lockers[c];
                let id = l.waiters[w].id;
                if l.rejoin(w, now) {
                    self.stats.deregistrations_dropped += 1;
                    format!("c{c} waiter {id} acquires again: the deregistration is dropped")
                } else {
                    format!("c{c} waiter {id} acquires again")
                }
            }
            Action::Run {
                client: c,
                op: Op::LingerEnds,
                ..
            } => {
                n.lockers[c].end_lingering(true);
                self.stats.pass_ons_at_the_window_end += 1;
                format!("c{c}'s lingering registration's window ends: it is passed on")
            }
            Action::Run {
                client: c,
                op,
                lose,
            } => self.send(s, &mut n, c, op, lose)?,
            Action::Advance => {
                let t = self.next_deadline(s).expect("a deadline");
                n.db.advance_ms(t - now);
                format!("clock +{} ms", t - now)
            }
            fault => {
                if let Action::GiveUp(c) = fault {
                    let l = &s.lockers[c];
                    if self.holds_under(l, l.grant) {
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
                if matches!(fault, Action::Restart | Action::Failover(_)) {
                    // The subscription is lost with the server: so are
                    // the anchors, and lingering ends (its grants could go
                    // unheard): the registration deregisters.
                    for l in &mut n.lockers {
                        l.anchor = None;
                        if l.linger.is_some() && !l.dead {
                            self.stats.lingering_lost += 1;
                            l.end_lingering(false);
                        }
                    }
                }
                label
            }
        };
        n.db.purge();
        self.count_lingering(s, &n);
        self.violation(&n).map_err(|e| format!("{label}: {e}"))?;
        Ok((n, label))
    }

    /// Counts the lines that began to linger from `s` to `n`, and the
    /// waiters that joined a lingering line.
    fn count_lingering(&mut self, s: &State, n: &State) {
        for (l, m) in s.lockers.iter().zip(&n.lockers) {
            match (l.linger, m.linger) {
                (None, Some(_)) => self.stats.lingered += 1,
                // The head that joined polls at once, unless it waits.
                (Some(_), None) if m.head().is_some() && l.head().is_none() => {
                    if m.next_poll > n.db.now_ms() {
                        self.stats.linger_awaits += 1;
                    } else {
                        self.stats.linger_returns_to_a_free_key += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Locker `c` sends `op` from state `s` (its reply lost if `lose`),
    /// the script's run and its reply taken into `n`; the step's label.
    fn send(
        &mut self,
        s: &State,
        n: &mut State,
        c: usize,
        op: Op,
        lose: bool,
    ) -> Result<String, String> {
        let now = s.db.now_ms();
        let call = self.call(s, c, op);
        let l = &s.lockers[c];
        if matches!(op, Op::Acquire(_)) {
            if self.holds_under(l, l.grant) {
                self.stats.attempts_beside_a_hold += 1;
            }
            let g = grant(c, l.grant);
            let floor = self.floor(l);
            let below = |v: &String| {
                owner_of(v) == g && fence_of(v).is_some_and(|f| floor.is_some_and(|t| f <= t))
            };
            let held = |v: &String| {
                let by_waiter = l.waiters.iter().any(|x| {
                    matches!(&x.phase, Phase::Held { fence, by_grant: Some(h), .. }
                        if *h == l.grant && v == &format!("{g}:{fence}"))
                });
                by_waiter || l.orphans.iter().any(|o| &o.names == v)
            };
            let slots = self.slots(&s.db);
            if slots.iter().flatten().any(below) {
                self.stats.below_the_floor += 1;
            }
            if slots.iter().flatten().any(|v| below(v) && !held(v)) {
                self.stats.stale_below_the_floor += 1;
            }
            if self.holds_under_older(l) {
                self.stats.attempts_beside_an_older_hold += 1;
                if self.names_grant(l) {
                    self.stats.named_beside_a_hold += 1;
                }
            }
        }
        let before = self.slots(&s.db);
        search::record_run(&mut n.unreplicated, &s.db, &s.faults);
        let reply;
        (reply, n.db) = self.scripts.run(&call, std::mem::take(&mut n.db));
        let after = self.slots(&n.db);
        let show = |v: &[Option<String>]| {
            v.iter()
                .map(|v| v.as_deref().map_or("free".to_owned(), short))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let who = match op {
            Op::Acquire(w) | Op::Extend(w) | Op::Release(w) => {
                format!(" waiter {}", l.waiters[w].id)
            }
            _ => String::new(),
        };
        let op_name = format!("{op:?}");
        let label = format!(
            "c{c}{who} {} {} → {reply:?}{}; slots [{}] → [{}]",
            op_name.split('(').next().unwrap_or_default(),
            short(call.args.first().map_or("", String::as_str)),
            if lose { " LOST" } else { "" },
            show(&before),
            show(&after),
        );
        if let Reply::Error(e) = &reply {
            return Err(format!("{label}: script error {e}"));
        }
        if matches!(op, Op::Release(_) | Op::OrphanRelease) && l.linger == Some(Linger::Holding) {
            self.stats.releases_naming_it += 1;
            let g = grant(c, l.grant);
            let granted = |v: &Option<String>| v.as_deref().is_some_and(|v| owner_of(v) == g);
            if after.iter().zip(&before).any(|(a, b)| a != b && granted(a)) {
                return Err(format!(
                    "{label}: the release granted its line's lingering registration"
                ));
            }
        }
        if let Op::Acquire(w) = op {
            let got = self.kind.attempt(&reply);
            self.no_grant_passed_over(l, c, w, &before, got.as_ref())
                .map_err(|e| format!("{label}: {e}"))?;
            // A grant claimed: the slot named the line's token.
            if let Some(Attempt::Got { slot, .. }) = got {
                let v = before.get(slot as usize).cloned().flatten();
                if v.is_some_and(|v| owner_of(&v) == grant(c, l.grant)) {
                    self.stats.claims += 1;
                }
            }
        }
        search::new_fences(&before, &after, &mut n.max_fence, "slot")
            .map_err(|e| format!("{label}: {e}"))?;
        let l = &mut n.lockers[c];
        let first = l.lost.map_or(now, |(_, t)| t);
        if lose {
            // As the core does: an attempt whose outcome is unknown may
            // have registered the line (a replay's claim with `k` does),
            // so the next one names the grant token as its own; its
            // server may have changed.
            if matches!(op, Op::Acquire(_)) {
                (l.registered, l.anchor) = (true, None);
            }
            l.lost = Some((op, first));
            n.faults.lose_reply -= 1;
        } else {
            l.lost = None;
            self.answer(n, c, op, &reply, first, now)
                .map_err(|e| format!("{label}: {e}"))?;
        }
        self.notify(n);
        Ok(label)
    }

    /// An attempt of waiter `w` of locker `c` (`l`), run on `slots`, with
    /// the reply `got`: where a slot held a fresh grant to the line's grant
    /// token, it claimed one such grant, or its own slot.
    fn no_grant_passed_over(
        &mut self,
        l: &Locker,
        c: usize,
        w: usize,
        slots: &[Option<String>],
        got: Option<&Attempt>,
    ) -> Result<(), String> {
        let g = grant(c, l.grant);
        let fresh =
            |i: usize, v: &str| owner_of(v) == g && fence_of(v).is_some_and(|f| f > l.given[i]);
        let Some((i, v)) = slots
            .iter()
            .enumerate()
            .find_map(|(i, v)| v.as_deref().filter(|v| fresh(i, v)).map(|v| (i, v)))
        else {
            return Ok(());
        };
        let t = tok(c, &l.waiters[w]);
        let claimed = match got {
            Some(Attempt::Got { slot: k, .. }) => slots
                .get(*k as usize)
                .cloned()
                .flatten()
                .is_some_and(|u| fresh(*k as usize, &u) || owner_of(&u) == t),
            _ => false,
        };
        if claimed {
            return Ok(());
        }
        Err(format!(
            "the attempt passed over the grant {} of slot {i} to its line's grant token",
            short(v)
        ))
    }

    /// The invariants of a state: per slot one valid holder, at most the
    /// permits in all.
    ///
    /// A token in two slots is counted, not refused: a re-sent attempt of
    /// unknown outcome can leave one. Its first send took a slot with `k`
    /// (or the last free one: the line registered for its next waiter); a
    /// grant to that registration follows; the re-sent attempt, which
    /// names the grant token, either claims the grant (the script checks
    /// the slots in order), leaving its first slot to its token, which
    /// nobody tracks, until the lease ends; or finds its own slot first
    /// and, as a claim with `k` does, queues the registration again beside
    /// its grant, which the next release serves a second slot. A grant or
    /// a lease goes unused until it lapses (a permit lost for a while, as
    /// §10's delayed duplicate); no two waiters hold a slot.
    fn violation(&mut self, n: &State) -> Result<(), String> {
        let slots = self.slots(&n.db);
        for (i, v) in slots.iter().enumerate() {
            let Some(o) = v.as_deref().map(owner_of) else {
                continue;
            };
            if slots[i + 1..]
                .iter()
                .any(|w| w.as_deref().map(owner_of) == Some(o))
            {
                if is_grant_token(o) {
                    self.stats.grant_tokens_in_two_slots += 1;
                } else {
                    self.stats.tokens_in_two_slots += 1;
                }
            }
        }
        let now = n.db.now_ms();
        let mut valid = Vec::new();
        for (c, l) in n.lockers.iter().enumerate() {
            for (w, x) in l.waiters.iter().enumerate() {
                // A waiter that sent its release stops using the lease.
                let releasing = matches!(l.lost, Some((Op::Release(v), _)) if v == w);
                if let Phase::Held { slot, deadline, .. } = x.phase {
                    if now < deadline && !releasing && !x.orphaned {
                        valid.push((c, x.id, slot));
                    }
                }
            }
        }
        for (k, (c, w, slot)) in valid.iter().enumerate() {
            if let Some((c2, w2, _)) = valid[k + 1..].iter().find(|(.., s2)| s2 == slot) {
                return Err(format!(
                    "waiter {w} of c{c} and waiter {w2} of c{c2} both hold slot {slot} \
                     validly: two valid leases"
                ));
            }
        }
        let permits = self.kind.slots();
        if valid.len() > permits as usize {
            return Err(format!(
                "{} valid holders {valid:?} for {permits} permits",
                valid.len()
            ));
        }
        Ok(())
    }

    /// The notices of the last run: a grant names its registration; any
    /// other wakes every locker with a waiter in line.
    fn notify(&mut self, n: &mut State) {
        // `<message>:g:<reg>:<fence>:<claim ms>:<ms>:<slot>:<owner id>`,
        // the message `<sha>` or `sem:<sha>`.
        let g = self.names.message(self.kind.queue()).split(':').count();
        for p in std::mem::take(&mut n.db.published) {
            let parts: Vec<&str> = p.message.split(':').collect();
            let part = |i: usize| parts.get(g + i).copied();
            for (c, l) in n.lockers.iter_mut().enumerate() {
                let ours = part(0) == Some("g") && part(1) == Some(entry(c).as_str());
                if !l.dead && l.head().is_none() && l.linger.is_some() && ours {
                    // Nobody came back for it: on to the next (the core's
                    // `pass_on_grant`).
                    self.stats.pass_ons_at_a_grant += 1;
                    l.end_lingering(true);
                }
                if l.dead || l.head().is_none() {
                    continue;
                }
                if part(0) != Some("g") {
                    if l.head().is_some() {
                        l.wake = true;
                    }
                    continue;
                }
                if part(1) != Some(entry(c).as_str()) {
                    // A grant elsewhere: a head without a registration has
                    // no grant to wait for and attempts at once (the
                    // core's `handle_grant_elsewhere`).
                    l.wake |= !l.registered;
                    continue;
                }
                let owner = part(6).map(str::to_owned);
                let ours = owner_id(&grant(c, l.grant));
                if l.head().is_some() && owner.as_ref() != Some(&ours) {
                    self.stats.notices_of_another_token += 1;
                }
                // `None` without a time or a slot (claimed, not taken);
                // a lock's grant names no slot.
                let at = part(4).and_then(|t| t.parse().ok());
                let slot = match self.kind {
                    Kind::Lock => Some(0),
                    Kind::Semaphore { .. } => part(5).and_then(|i| i.parse().ok()),
                };
                l.notice = match (at, slot, part(2)) {
                    (Some(at), Some(slot), Some(f)) => Some(Notice {
                        at,
                        slot,
                        fence: f.to_owned(),
                        owner,
                    }),
                    _ => None,
                };
            }
        }
    }

    fn answer(
        &mut self,
        n: &mut State,
        c: usize,
        op: Op,
        reply: &Reply,
        first: u64,
        now: u64,
    ) -> Result<(), String> {
        let rules = self.bounds.rules;
        let kind = self.kind;
        let may_linger = self.may_linger();
        let l = &mut n.lockers[c];
        match op {
            Op::Acquire(w) => {
                (l.notice, l.wake) = (None, false);
                match kind.attempt(reply) {
                    Some(Attempt::Busy { ms, server_ms }) => {
                        // A reply that did not register leaves the anchor.
                        if server_ms.is_some() {
                            l.anchor = server_ms;
                        }
                        l.registered = true;
                        l.next_poll = now + (ms.max(1) as u64).min(POLL);
                    }
                    Some(Attempt::Got {
                        slot,
                        fence,
                        next_waits,
                    }) => {
                        let x = &l.waiters[w];
                        let mine = x.got.iter().any(|(s, f)| *s == slot && *f == fence);
                        // `k` kept a registration that was queued (a
                        // semaphore's reply says when it made one for the
                        // next waiter); `d` took it out.
                        let kept = l.registered || next_waits;
                        l.registered = kept && (l.behind(w) || may_linger);
                        if rules.stale_grants_refused && !mine && Self::stale(l, slot, &fence) {
                            // A stale grant claimed: released by the sweep;
                            // the waiter waits on under a new token and
                            // attempts again at once.
                            self.stats.stale_handed_back += 1;
                            let names = tok(c, &l.waiters[w]);
                            l.orphans.push(Orphan {
                                slot,
                                names,
                                grant: None,
                            });
                            l.waiters[w].tokens += 1;
                            l.next_poll = now;
                            return Ok(());
                        }
                        let x = &mut l.waiters[w];
                        x.orphaned = false;
                        x.phase = Phase::Held {
                            slot,
                            fence: fence.clone(),
                            deadline: first + LEASE,
                            extended: true,
                            by_grant: None,
                        };
                        l.head_left(w, now, next_waits, may_linger);
                        return Self::give(n, c, w, slot, &fence);
                    }
                    None => return Err(format!("acquire answered {reply:?}")),
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
                        self.stats.extended += 1;
                        *deadline = first + LEASE;
                        x.orphaned = false;
                    } else {
                        *deadline = (*deadline).min(now);
                    }
                }
            }
            Op::Release(w) => {
                // The core's `handle_lease_released`, then the waiter's
                // return.
                l.lease_released(now, *reply == Reply::Int(3));
                l.finish(w, now);
            }
            Op::OrphanRelease => {
                l.orphans.remove(0);
            }
            Op::Deregister(g) => {
                for x in l.leaving.iter_mut().filter(|x| x.grant == g) {
                    x.deregistered = true;
                }
            }
            Op::GrantRelease(g) => l.leaving.retain(|x| x.grant != g),
            Op::TakeGrant(_) | Op::Drop(_) | Op::Rejoin(_) | Op::LingerEnds => {
                unreachable!("sends nothing")
            }
        }
        Ok(())
    }

    /// Whether slot `slot` holds `fence` (a fence names one grant of its
    /// slot, whoever's token it names) until `until`.
    fn backed(&self, db: &Db, slot: u32, fence: &str, until: u64) -> bool {
        db.peek(&self.slot_key(slot)).is_some_and(|e| {
            matches!(&e.value, Value::Str(v) if v.rsplit_once(':').map(|(_, f)| f) == Some(fence))
                && e.expire_at.is_none_or(|at| at + 1 >= until)
        })
    }

    /// Marks every holder whose hold the key space no longer backs for as
    /// long as its waiter counts: a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        let db = n.db.clone();
        for l in &mut n.lockers {
            for x in &mut l.waiters {
                if let Phase::Held {
                    slot,
                    ref fence,
                    deadline,
                    ..
                } = x.phase
                {
                    x.orphaned |= !self.backed(&db, slot, fence, deadline);
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

/// The variable `var`, or `depth`: a safety run's bound. Each kind has its
/// own, as these explorers' states grow faster with depth than the
/// others' (the lock's, depth 9 in a release build: about 40 s for both
/// runs; 10: 18 s without data loss, over 2 minutes with it).
pub(crate) fn depth_or_env(var: &str, depth: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(depth)
}

/// The run `name` of `b`, its numbers printed.
pub(crate) fn explore(name: &str, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let result = Explorer::new(Sources::real(), b.clone()).run();
    match &result {
        Ok(st) => println!(
            "{name}: {:?}, waiters {:?}, depth {}: {} states, {} transitions \
             ({} grants taken, {} with a waiter behind, {} claimed, {} extended; {} attempts \
             and {} give-ups beside a hold under the grant token; {} attempts beside a hold \
             under an older grant token, {} of them naming the new one; {} stale grants \
             handed back; {} notices of another grant token; {} deregistrations dropped; {} attempts \
             beside a grant or hold below their floor ({} a stale grant); a token in two slots after {} steps, a grant token \
             after {}; {} lines lingered, {} returns waited for the grant, {} attempted a free key, {} pass-ons \
             at a grant, {} at the window's end, {} ended by a lost subscription, {} releases named it), {:.1?}",
            b.kind,
            b.rounds,
            st.depth,
            st.states,
            st.transitions,
            st.takes,
            st.takes_with_a_waiter_behind,
            st.claims,
            st.extended,
            st.attempts_beside_a_hold,
            st.give_ups_beside_a_hold,
            st.attempts_beside_an_older_hold,
            st.named_beside_a_hold,
            st.stale_handed_back,
            st.notices_of_another_token,
            st.deregistrations_dropped,
            st.below_the_floor,
            st.stale_below_the_floor,
            st.tokens_in_two_slots,
            st.grant_tokens_in_two_slots,
            st.lingered,
            st.linger_awaits,
            st.linger_returns_to_a_free_key,
            st.pass_ons_at_a_grant,
            st.pass_ons_at_the_window_end,
            st.lingering_lost,
            st.releases_naming_it,
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

/// The run `name` of `b`, with every rule: its numbers (a counterexample
/// fails the test).
pub(crate) fn safe(name: &str, b: Bounds) -> Stats {
    explore(name, b).unwrap_or_else(|cx| panic!("{cx}"))
}

/// The run `name` of `b`, with a rule off: a counterexample that breaks
/// the invariant whose message says `invariant`.
pub(crate) fn caught(name: &str, b: Bounds, invariant: &str) {
    match explore(name, b) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains(invariant), "{cx}"),
    }
}

/// Every fault but data loss: the faults of a locker's own making.
pub(crate) fn no_data_loss() -> Faults {
    Faults {
        restart: 0,
        failover: 0,
        unreplicated: 0,
        ..Faults::one_of_each()
    }
}

/// Data lost (a restart, a failover losing the last run), replies lost,
/// a give-up.
pub(crate) fn data_loss() -> Faults {
    Faults {
        lose_notice: 0,
        kill: 0,
        ..Faults::one_of_each()
    }
}

/// `REDLEASE_LOCKER_MODEL_DEPTH`, or `depth`.
fn lock_depth(depth: usize) -> usize {
    depth_or_env("REDLEASE_LOCKER_MODEL_DEPTH", depth)
}

/// Locker 0 with two waiters, locker 1 with one that acquires twice.
fn bounds(depth: usize, faults: Faults, rules: Rules) -> Bounds {
    Bounds {
        kind: Kind::Lock,
        rounds: vec![vec![1, 1], vec![2]],
        depth,
        faults,
        drops: 1,
        rules,
    }
}

#[test]
fn a_locker_with_two_waiters_keeps_the_lock_safe() {
    let b = bounds(lock_depth(8), no_data_loss(), Rules::ALL);
    let st = safe("lockers with two waiters", b);
    assert!(
        st.takes > 0 && st.attempts_beside_a_hold > 0 && st.give_ups_beside_a_hold > 0,
        "a grant taken with a waiter behind was never reached: {st:?}"
    );
    assert!(st.below_the_floor > 0, "no attempt beside its hold: {st:?}");
}

#[test]
fn a_locker_with_two_waiters_survives_a_restart_and_a_failover() {
    let b = bounds(lock_depth(7), data_loss(), Rules::ALL);
    let st = safe("lockers with two waiters, data lost", b);
    // The floor keeps a lock's attempts from claiming a stale grant.
    assert!(st.stale_below_the_floor > 0, "no stale grant met: {st:?}");
}

/// Locker 0 with two waiters that acquire twice: a give-up empties the
/// line, whose registration (grant token G0) is queued until its
/// DEREGISTER and release by G0 run; the holder's release grants the lock
/// to G0, and the holder acquires again in a new line (G1), which the
/// waiter that gave up joins after the DEREGISTER was sent (before, its
/// return would drop the deregistration). Taking the grant as held under
/// `G1:<fence>`, the release by G0 frees the lock under the new head (ten
/// events):
///
/// 1. c0 waiter 0 takes the lock (`k`: waiter 1 is behind it);
/// 2. the clock moves to waiter 1's poll (its head backs off);
/// 3. c0 waiter 1 is busy, registers G0 (9000), the anchor;
/// 4. c0 waiter 1 gives up: the line is forgotten, G0 to deregister;
/// 5. c0 waiter 0 releases, granted to G0; it acquires again (a new
///    line, G1), and hears the grant before its first attempt;
/// 6. c0 DEREGISTER;
/// 7. c0 waiter 1 acquires again, behind waiter 0;
/// 8. c0 waiter 0 takes the grant as `9001:<fence>`;
/// 9. c0 release by G0 frees the lock;
/// 10. c0 waiter 1 takes the lock, beside waiter 0.
///
/// With the owner id (rule 5), step 8 is not taken.
fn new_line_bounds(depth: usize, rules: Rules) -> Bounds {
    Bounds {
        rounds: vec![vec![2, 2], vec![1]],
        ..bounds(depth, no_data_loss(), rules)
    }
}

#[test]
fn a_new_line_beside_a_leaving_registration_keeps_the_lock_safe() {
    let b = new_line_bounds(lock_depth(8), Rules::ALL);
    let st = safe("lockers, a new line beside a leaving one", b);
    assert!(
        st.notices_of_another_token > 0 && st.takes > 0,
        "no line heard a grant to another grant token: {st:?}"
    );
}

#[test]
fn mutation_take_of_another_tokens_grant_is_caught() {
    let rules = Rules {
        owner_checked: false,
        ..Rules::ALL
    };
    caught(
        "mutation: a line takes a grant to its locker's older grant token",
        new_line_bounds(10, rules),
        "valid leases",
    );
}

#[test]
fn mutation_floor_dropped_is_caught() {
    let rules = Rules {
        floor: false,
        ..Rules::ALL
    };
    caught(
        "mutation: the floor dropped",
        bounds(9, no_data_loss(), rules),
        "valid leases",
    );
}

/// The rule the floor replaced: no attempt names a grant token a hold is
/// under. A grant to the registration beside a hold that ended in Redis
/// is passed over, and lapses.
#[test]
fn mutation_no_claim_beside_a_hold_is_caught() {
    let rules = Rules {
        no_claim_of_a_hold: true,
        ..Rules::ALL
    };
    caught(
        "mutation: the next waiter does not name the grant token beside a hold",
        bounds(9, no_data_loss(), rules),
        "passed over",
    );
}

#[test]
fn mutation_leaving_release_ending_the_hold_is_caught() {
    let rules = Rules {
        park_leaving_release: false,
        ..Rules::ALL
    };
    caught(
        "mutation: the leaving release by grant token is not parked",
        bounds(8, no_data_loss(), rules),
        "valid leases",
    );
}

#[test]
fn mutation_dropped_hold_claimed_again_is_caught() {
    // Under the floor a dropped hold is below it, never claimed: rule 3
    // then only parks the leaving release (off, the floor's runs stay
    // safe). It guarded the rule the floor replaced, which this restores;
    // rule 4 alone keeps this safe too (the claim of the dropped hold is
    // stale, and released): both are off.
    let rules = Rules {
        floor: false,
        no_claim_of_a_hold: true,
        orphans_hold: false,
        stale_grants_refused: false,
        ..Rules::ALL
    };
    caught(
        "mutation: a dropped hold is not a hold of its line",
        bounds(8, no_data_loss(), rules),
        "before to waiter",
    );
}

#[test]
fn mutation_stale_grant_after_data_loss_is_caught() {
    // A failover that lost a release (or a claim) brings back a grant this
    // locker's waiter was given: the next waiter would be given its fence.
    // Under the floor a lock's attempts never claim it (rule 4 off alone:
    // no counterexample in 659,854 states at depth 9), so the floor is off
    // too, and the rule it replaced on.
    let rules = Rules {
        floor: false,
        no_claim_of_a_hold: true,
        stale_grants_refused: false,
        ..Rules::ALL
    };
    caught(
        "mutation: a stale grant is taken or claimed",
        bounds(7, data_loss(), rules),
        "before to waiter",
    );
}

/// The floor compares fences as decimal numbers of any size, past 2^53
/// and 2^64: a value under the grant token is claimed only above it; a
/// missing floor is none.
#[test]
fn the_floor_compares_fences_as_numbers() {
    let n = Names::new("ns", 1);
    let mut scripts = Scripts::new(Sources::real());
    let g = grant(0, 0);
    let cases: [(&str, Option<u128>, bool); 9] = [
        ("18", Some(17), true),
        ("17", Some(17), false),
        ("9", Some(17), false),
        ("100", Some(99), true),
        ("9007199254740993", Some(9_007_199_254_740_992), true),
        ("9007199254740992", Some(9_007_199_254_740_993), false),
        (
            "100000000000000000000",
            Some(99_999_999_999_999_999_999),
            true,
        ),
        (
            "99999999999999999999",
            Some(100_000_000_000_000_000_000),
            false,
        ),
        ("17", None, true),
    ];
    for (fence, floor, claimed) in cases {
        let mut db = Db::at_ms(START_MS);
        db.command(&["SET".to_owned(), n.lock(), format!("{g}:{fence}")]);
        let h = Hand {
            entry: entry(0),
            reg_ms: REG,
            claim_ms: CLAIM,
            grant: g.clone(),
            register: true,
            registered: true,
            keep: "k",
            floor,
        };
        let call = Call::acquire(&n, &token(0x42), LEASE, 0, Some(&h));
        let (reply, _) = scripts.run(&call, db);
        assert_eq!(
            reply == Reply::Bulk(fence.to_owned()),
            claimed,
            "{fence} over the floor {floor:?}: {reply:?}"
        );
    }
}

/// Lingering (docs/PROTOCOL.md §4.4): two worker loops, one waiter each,
/// locker 0 acquiring three times, locker 1 twice. A loop's line lingers
/// when its waiter takes the lease after a busy attempt registered it;
/// its release names the registration, and its next acquire waits for the
/// grant, or attempts a key left free; a grant with no waiter, or the
/// window's end, passes it on.
fn linger_bounds(depth: usize, faults: Faults, rules: Rules) -> Bounds {
    Bounds {
        rounds: vec![vec![3], vec![2]],
        ..bounds(depth, faults, rules)
    }
}

#[test]
fn lingering_registrations_keep_the_lock_safe() {
    let b = linger_bounds(lock_depth(9), no_data_loss(), Rules::ALL);
    let st = safe("worker loops, lingering", b);
    assert!(
        st.lingered > 0 && st.linger_awaits > 0 && st.pass_ons_at_a_grant > 0,
        "lingering was not reached: {st:?}"
    );
}

#[test]
fn lingering_registrations_survive_a_restart_and_a_failover() {
    let b = linger_bounds(lock_depth(8), data_loss(), Rules::ALL);
    let st = safe("worker loops, lingering, data lost", b);
    assert!(
        st.lingering_lost > 0,
        "no lingering ended by a lost subscription: {st:?}"
    );
}

#[test]
fn mutation_release_granting_its_lingering_registration_is_caught() {
    let rules = Rules {
        release_names_lingering: false,
        ..Rules::ALL
    };
    caught(
        "mutation: the release does not name its lingering registration",
        linger_bounds(9, no_data_loss(), rules),
        "lingering registration",
    );
}

/// A failover that lost a later run keeps a hold taken without the claim
/// under the grant token of a lingering registration, and ends the
/// lingering (the subscription is lost): its release by that grant token,
/// not parked, frees the lock under the holder, and the other locker takes
/// it (nine events):
///
/// 1. c0 takes the lock;
/// 2. c1 is busy and registers (G, 9100);
/// 3. c0 releases, granted to G;
/// 4. c0 is busy (its next acquire) and registers;
/// 5. c1 takes the grant as `9100:<fence>`, its line empty: the
///    registration lingers;
/// 6. a failover loses step 4: the hold stays, the lingering ends;
/// 7. c1 DEREGISTER;
/// 8. c1 release by G frees the lock;
/// 9. c0 takes it, beside c1.
#[test]
fn mutation_pass_on_ending_the_hold_is_caught() {
    let rules = Rules {
        park_pass_on: false,
        ..Rules::ALL
    };
    // The failover alone: the other faults only widen the search.
    let faults = Faults {
        failover: 1,
        unreplicated: 1,
        ..Faults::default()
    };
    caught(
        "mutation: the lingering registration's release by grant token is not parked",
        linger_bounds(9, faults, rules),
        "valid leases",
    );
}
