//! An explorer of the lock protocol's interleavings: the real ACQUIRE (with
//! the hand-over), RELEASE, RENEW and DEREGISTER scripts run on the
//! emulator, driven by 2–3 clients that mirror the crate's core in outline
//! (attempt → busy and registered → woken or granted → claim → held →
//! release), each counting its lease from the send of the answered attempt
//! or of the first send whose reply was lost.
//!
//! Events: a client's script run (atomic; its reply delivered, or lost and
//! the same call re-sent later), a notification lost, the clock advancing
//! to the next deadline (a lease, a claim window, a registration, a poll),
//! a client killed, a waiter giving up (DEREGISTER, then a release by its
//! grant token), a restart without data (keys gone, the clock 1 ms on), a
//! failover to a replica that missed the last script run(s) (their writes
//! gone, the clock 1 ms on).
//! Faults are bounded (one of each by default), and so is the depth.
//! Every interleaving is explored breadth-first, visited states memoised by
//! the hash of the key space, the clock, the clients and the faults left.
//!
//! Invariants (docs/PROTOCOL.md §9), checked at every step:
//! 1. at most one client whose own lease deadline has not passed, leaving
//!    out a holder whose hold a restart or failover lost (the key gone, or
//!    put back with an earlier expiry than its client counts): §11 says a
//!    lost grant's holder may act until its deadline, and fences decide;
//! 2. every new fence written to the lock is above every fence before it;
//! 3. a release never changes a lease another token holds;
//! 4. an acquire that finds its own token (or its registered grant token)
//!    in the lock answers that fence: nothing is granted twice on replay;
//! 5. FIFO: a new grant with live registrations queued goes to the first
//!    live one (a take only by the client whose registration that is), and
//!    with none queued there is no grant, only a take;
//! 6. a grant is made out only to a registration someone may still claim
//!    or pass on: its client waits (registered, or with an attempt in
//!    flight), gave up and has not deregistered yet, or died (its
//!    registration lapses); never to a client that holds, released or
//!    deregistered (§4.3: the attempt that gets the lease takes its
//!    registration out), unless a failover brought that registration back
//!    (the run that took it out was lost): that is a DEREGISTER that never
//!    arrived, and §4.4 lets such a grant lapse at its claim window.
//!
//! With `Bounds::liveness` (k), also a bounded "no waiter stranded" (§9.7):
//! wherever a waiter's registration is live and nobody holds the lock,
//! some run of at most k fault-free events gives it the lock.

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Hand, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, owner_of, Counterexample, Faults, Keys, Scripts};

pub(crate) const START_MS: u64 = 1_700_000_000_000;
pub(crate) const LEASE: u64 = 100;
pub(crate) const CLAIM: u64 = 30;
pub(crate) const REG: u64 = 90;
pub(crate) const POLL: u64 = 40;

/// Which call a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire,
    Release,
    Renew,
    Deregister,
    /// The release by grant token that follows a give-up's DEREGISTER.
    GrantRelease,
    /// Without the claim round trip: the client takes the grant its
    /// notice named as held from the grant's server time on, for the
    /// claim window (no script: a step of its own).
    TakeGrant,
    /// Without the claim round trip: the extension, sent after the client
    /// returned the lease, renews the hold itself (`<grant token>:<fence>`,
    /// which matches that grant only) to the full lease.
    Extend,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Waiting,
    Held {
        fence: String,
        deadline: u64,
        renewed: bool,
        /// Held under the grant token, from a grant taken without its
        /// claim (not extended yet).
        by_grant: bool,
    },
    Leaving {
        deregistered: bool,
    },
    Done,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Client {
    phase: Phase,
    round: u8,
    /// Whether its replies said its registration is queued.
    registered: bool,
    grant_notice: bool,
    /// The grant the last grant notice named: the server's time of the
    /// grant (which the notice carries) and its fence.
    granted: Option<(u64, String)>,
    wake: bool,
    next_poll: u64,
    /// A call whose reply was lost, re-sent as it was, and the time of its
    /// first send.
    lost: Option<(Op, u64)>,
    /// Its hold rests on a write a restart or failover lost.
    orphaned: bool,
    /// A failover brought back its registration after it was taken out.
    revived: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    clients: Vec<Client>,
    faults: Faults,
    max_fence: u128,
    /// The key spaces before the last runs, while a failover is left.
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// What to explore.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) clients: usize,
    pub(crate) rounds: u8,
    pub(crate) depth: usize,
    pub(crate) faults: Faults,
    /// The bounded liveness check: in every state reached where the lock
    /// is free and a waiting client's registration is live, some run of at
    /// most this many fault-free events (script runs answered, the clock)
    /// gives that client the lock.
    pub(crate) liveness: Option<usize>,
    /// The hand-over without the claim round trip: a client takes a grant
    /// from its notice, held until the grant's server time plus the claim
    /// window, and extends it (the claim) off the critical path.
    pub(crate) claimless: bool,
    /// A deliberate client bug for the claimless mutation test: the grant
    /// held from the notice's arrival, not from the grant's server time.
    pub(crate) counts_from_notice: bool,
}

/// The numbers of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Releases that handed the lock over (reply 3), and claims of a grant
    /// (an acquire that found its grant token): the hand-over was reached.
    pub(crate) handovers: usize,
    pub(crate) claims: usize,
    /// States the liveness check searched from (a waiter, nobody holding).
    pub(crate) live_checks: usize,
}

fn tok(c: usize, round: u8) -> String {
    token(0x100 * (c as u64 + 1) + u64::from(round))
}
fn grant(c: usize) -> String {
    token(0x9000 + c as u64)
}
fn entry(c: usize) -> String {
    format!("{:016x}", 0xe0 + c)
}
/// The fence of a holder's lease.
fn cl_fence(cl: &Client) -> &str {
    match &cl.phase {
        Phase::Held { fence, .. } => fence,
        _ => "",
    }
}
/// What a grant's holder releases and extends by: the hold itself.
fn hold_of_grant(c: usize, cl: &Client) -> String {
    format!("{}:{}", grant(c), cl_fence(cl))
}
/// The token client `c`'s hold is under: its grant token while it holds a
/// grant taken without the claim.
fn holder_token(c: usize, cl: &Client) -> String {
    match cl.phase {
        Phase::Held { by_grant: true, .. } => grant(c),
        _ => tok(c, cl.round),
    }
}

/// The explorer: the scripts (maybe mutated) and the key's names.
pub(crate) struct Explorer {
    scripts: Scripts,
    names: Names,
    bounds: Bounds,
    handovers: usize,
    claims: usize,
    live_checks: usize,
}

impl std::fmt::Debug for Explorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explorer")
            .field("bounds", &self.bounds)
            .finish()
    }
}

impl Explorer {
    pub(crate) fn new(sources: Sources, bounds: Bounds) -> Explorer {
        Explorer {
            scripts: Scripts::new(sources),
            names: Names::new("ns", 1),
            bounds,
            handovers: 0,
            claims: 0,
            live_checks: 0,
        }
    }

    fn initial(&self) -> State {
        State {
            db: Db::at_ms(START_MS),
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    round: 0,
                    registered: false,
                    grant_notice: false,
                    granted: None,
                    wake: false,
                    next_poll: 0,
                    lost: None,
                    orphaned: false,
                    revived: false,
                };
                self.bounds.clients
            ],
            faults: self.bounds.faults,
            max_fence: 0,
            unreplicated: Vec::new(),
        }
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let cl = &s.clients[c];
        let n = &self.names;
        let t = tok(c, cl.round);
        match op {
            Op::Acquire => {
                let h = Hand {
                    entry: entry(c),
                    reg_ms: REG,
                    claim_ms: CLAIM,
                    grant: grant(c),
                    register: true,
                    registered: cl.registered,
                    keep: "d",
                    floor: None,
                };
                Call::acquire(n, &t, LEASE, 0, Some(&h))
            }
            // The hold itself, `<grant token>:<fence>`, as the locker
            // sends it: it matches that grant only.
            Op::Extend => Call::renew(&n.lock(), &hold_of_grant(c, cl), LEASE),
            // A grant's holder never has it granted again: its release
            // skips its registration, which it then takes out.
            Op::Release if self.by_grant(cl) => {
                Call::lock_release(n, &hold_of_grant(c, cl), 0, Some(&entry(c)))
            }
            Op::Release => Call::lock_release(n, &t, 0, None),
            Op::TakeGrant => unreachable!("taking a grant sends nothing"),
            Op::Renew => Call::renew(&n.lock(), &t, LEASE),
            Op::Deregister => Call::deregister(n, QKind::Lock, &entry(c), &grant(c)),
            Op::GrantRelease => Call::lock_release(n, &grant(c), 0, None),
        }
    }

    /// The calls client `c` may send now.
    fn sends(&self, s: &State, c: usize) -> Vec<Op> {
        let cl = &s.clients[c];
        let now = s.db.now_ms();
        if let Some((op, _)) = cl.lost {
            return vec![op];
        }
        match &cl.phase {
            Phase::Idle => vec![Op::Acquire],
            Phase::Waiting
                if self.bounds.claimless
                    && cl.grant_notice
                    && cl.granted.as_ref().is_some_and(|(at, _)| now < at + CLAIM) =>
            {
                vec![Op::TakeGrant]
            }
            Phase::Waiting if cl.grant_notice || cl.wake || now >= cl.next_poll => {
                vec![Op::Acquire]
            }
            Phase::Held {
                deadline,
                renewed,
                by_grant,
                ..
            } => {
                let mut ops = vec![Op::Release];
                if !renewed && now < *deadline {
                    ops.push(if *by_grant { Op::Extend } else { Op::Renew });
                }
                ops
            }
            Phase::Leaving { deregistered } => vec![if *deregistered {
                Op::GrantRelease
            } else {
                Op::Deregister
            }],
            _ => Vec::new(),
        }
    }

    fn actions(&self, s: &State) -> Vec<Action> {
        search::actions(
            &s.clients,
            &s.faults,
            &s.unreplicated,
            |c| self.sends(s, c),
            self.next_deadline(s).is_some(),
        )
    }

    /// The next time anything changes by the clock alone.
    fn next_deadline(&self, s: &State) -> Option<u64> {
        let now = s.db.now_ms();
        let mut times = Vec::new();
        for (key, e) in &s.db.keys {
            if let Some(at) = e.expire_at {
                times.push(at + 1);
            }
            if key == &self.names.queue(QKind::Lock) {
                if let Value::List(l) = &e.value {
                    times.extend(
                        l.iter()
                            .filter_map(|v| v.split('|').nth(1)?.parse::<u64>().ok()),
                    );
                }
            }
        }
        for cl in &s.clients {
            match &cl.phase {
                Phase::Held { deadline, .. } => times.push(*deadline),
                Phase::Waiting => times.push(cl.next_poll),
                _ => {}
            }
            // A grant's notice may arrive late: halfway through the window.
            if let (true, true, Some((at, _))) =
                (self.bounds.claimless, cl.grant_notice, &cl.granted)
            {
                times.push(at + CLAIM / 2);
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    fn lock_value(&self, db: &Db) -> Option<String> {
        match db.peek(&self.names.lock()) {
            Some(e) => match &e.value {
                Value::Str(v) => Some(v.clone()),
                _ => None,
            },
            None => None,
        }
    }

    /// The live queue entries, in order: (registration id, owner).
    fn live_queue(&self, db: &Db) -> Vec<(String, String)> {
        let now = db.now_ms();
        let Some(Value::List(l)) = db.peek(&self.names.queue(QKind::Lock)).map(|e| &e.value) else {
            return Vec::new();
        };
        l.iter()
            .filter_map(|v| {
                let mut parts = v.splitn(3, '|');
                let reg = parts.next()?;
                let deadline: u64 = parts.next()?.parse().ok()?;
                let owner = owner_of(parts.next()?);
                (deadline > now).then(|| (reg.to_owned(), owner.to_owned()))
            })
            .collect()
    }

    /// Applies `a` to `s`: the next state and a label, or the violation.
    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        let mut n = s.clone();
        let now = s.db.now_ms();
        let label = match a {
            Action::Run {
                client,
                op: Op::TakeGrant,
                ..
            } => {
                let cl = &mut n.clients[client];
                let (at, fence) = cl.granted.take().expect("a grant notice");
                let at = if self.bounds.counts_from_notice {
                    now
                } else {
                    at
                };
                cl.grant_notice = false;
                cl.wake = false;
                cl.phase = Phase::Held {
                    fence,
                    deadline: at + CLAIM,
                    renewed: false,
                    by_grant: true,
                };
                // A grant a restart or failover lost after its notice was
                // published: held by its client's clock, backed by nothing
                // (docs/PROTOCOL.md §11: fences decide). A grant still in
                // Redis backs the hold only as long as its expiry does:
                // that is what the invariant checks.
                let ours = format!("{}:{}", grant(client), cl_fence(&n.clients[client]));
                n.clients[client].orphaned = self.lock_value(&n.db) != Some(ours);
                format!(
                    "c{client} takes its grant until {} (no claim sent)",
                    at + CLAIM
                )
            }
            Action::Run { client, op, lose } => {
                let call = self.call(s, client, op);
                let before = self.lock_value(&s.db);
                let mut queue = self.live_queue(&s.db);
                if op == Op::Release && self.by_grant(&s.clients[client]) {
                    // Its release skips its own registration by design.
                    queue.retain(|(reg, _)| *reg != entry(client));
                }
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.lock_value(&n.db);
                // DEREGISTER sends no token: its label shows its registration.
                let t = call
                    .args
                    .first()
                    .or(call.keys.last())
                    .cloned()
                    .unwrap_or_default();
                let label = format!(
                    "c{client} {op:?} (token …{}) → {reply:?}{}; lock {} → {}",
                    &t[t.len().saturating_sub(4)..],
                    if lose { " LOST" } else { "" },
                    before.as_deref().unwrap_or("free"),
                    after.as_deref().unwrap_or("free"),
                );
                if matches!(op, Op::Release) && reply == Reply::Int(3) {
                    self.handovers += 1;
                }
                if (op == Op::Acquire
                    && before.as_deref().map(owner_of) == Some(grant(client).as_str())
                    && matches!(reply, Reply::Bulk(_)))
                    || (op == Op::Extend && reply == Reply::Int(1))
                {
                    self.claims += 1;
                }
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                // 3. A release never changes another token's lease.
                if matches!(op, Op::Release | Op::GrantRelease) {
                    if let Some(v0) = &before {
                        // By token, or by the whole value (a grant's hold).
                        if owner_of(v0) != t && *v0 != t && after != before {
                            return Err(format!(
                                "{label}: a release by another token changed the lease"
                            ));
                        }
                    }
                }
                // 4. A replay gets its fence back.
                if op == Op::Acquire {
                    if let Some(v0) = &before {
                        let o = owner_of(v0);
                        let registered = s.clients[client].registered;
                        if o == t || (registered && o == grant(client)) {
                            let f = v0.rsplit_once(':').map(|(_, f)| f.to_owned());
                            if reply != Reply::Bulk(f.clone().unwrap_or_default()) {
                                return Err(format!(
                                    "{label}: an acquire that found its own lease did not get its fence {f:?} back"
                                ));
                            }
                        }
                    }
                }
                // 2. Fences strictly increase; 5. FIFO.
                let f0 = before.as_deref().and_then(fence_of);
                if let Some(v1) = &after {
                    if let Some(f1) = fence_of(v1).filter(|f1| Some(*f1) != f0) {
                        if f1 <= n.max_fence {
                            return Err(format!(
                                "{label}: new fence {f1} is not above {}",
                                n.max_fence
                            ));
                        }
                        n.max_fence = f1;
                        // 6. A grant only to a registration still waited on.
                        if let Some(g) = (0..s.clients.len()).find(|g| owner_of(v1) == grant(*g)) {
                            let cl = &s.clients[g];
                            let wants = match cl.phase {
                                Phase::Waiting | Phase::Dead => true,
                                Phase::Leaving { deregistered } => !deregistered,
                                Phase::Idle => matches!(cl.lost, Some((Op::Acquire, _))),
                                // Its registration stays queued until its
                                // claim or its release takes it out.
                                Phase::Held { by_grant, .. } => by_grant,
                                Phase::Done => false,
                            };
                            if !wants && !cl.revived {
                                return Err(format!(
                                    "{label}: granted to c{g}'s registration, which nobody waits on ({:?})",
                                    cl.phase
                                ));
                            }
                        }
                        let o1 = owner_of(v1);
                        match queue.first() {
                            Some((head_reg, head_owner)) => {
                                let own_head = o1 == t && *head_reg == entry(client);
                                if o1 != head_owner && !own_head {
                                    return Err(format!(
                                        "{label}: granted to {o1} past the live head registration {head_reg}"
                                    ));
                                }
                            }
                            // With no live registration, only a take.
                            None if o1 != t => {
                                return Err(format!(
                                    "{label}: granted to {o1}, whose registration is past its deadline"
                                ));
                            }
                            None => {}
                        }
                    }
                }
                // Notifications.
                for p in std::mem::take(&mut n.db.published) {
                    let parts: Vec<&str> = p.message.split(':').collect();
                    if parts.get(1) == Some(&"g") {
                        for (i, cl) in n.clients.iter_mut().enumerate() {
                            if Some(&entry(i).as_str()) == parts.get(2) && cl.phase != Phase::Dead {
                                cl.grant_notice = true;
                                let fence = parts.get(3).map(|f| (*f).to_owned());
                                cl.granted = fence.map(|f| (now, f));
                            }
                        }
                    } else {
                        for cl in &mut n.clients {
                            if cl.phase == Phase::Waiting {
                                cl.wake = true;
                            }
                        }
                    }
                }
                let cl = &mut n.clients[client];
                let first = cl.lost.map_or(now, |(_, at)| at);
                if lose {
                    n.faults.lose_reply -= 1;
                    // As the locker does: an attempt whose outcome is
                    // unknown may have registered it, so the next one
                    // names its grant token as its own.
                    cl.registered |= op == Op::Acquire;
                    cl.lost = Some((op, first));
                } else {
                    cl.lost = None;
                    self.answer(cl, op, reply, first, now, s.clients.len());
                }
                label
            }
            Action::Advance => {
                let t = self.next_deadline(s).expect("a deadline");
                n.db.advance_ms(t - now);
                format!("clock +{} ms", t - now)
            }
            fault => {
                let label = search::apply_fault(
                    fault,
                    &mut n.faults,
                    &mut n.clients,
                    &mut n.db,
                    &mut n.unreplicated,
                );
                self.orphan(&mut n);
                for (c, cl) in n.clients.iter_mut().enumerate() {
                    let reg = self.names.reg(QKind::Lock, &entry(c));
                    cl.revived |= s.db.peek(&reg).is_none() && n.db.peek(&reg).is_some();
                }
                label
            }
        };
        n.db.purge();
        // 1. At most one client whose lease is still valid by its clock.
        let now = n.db.now_ms();
        let valid: Vec<usize> = (0..n.clients.len())
            .filter(|c| {
                // A client that sent its release stops using the lease,
                // even while it does not know the release's outcome.
                let cl = &n.clients[*c];
                matches!(cl.phase, Phase::Held { deadline, .. } if now < deadline)
                    && !matches!(cl.lost, Some((Op::Release, _)))
                    && !cl.orphaned
            })
            .collect();
        if valid.len() > 1 {
            return Err(format!("{label}: clients {valid:?} all hold valid leases"));
        }
        Ok((n, label))
    }

    /// Marks every holder whose hold the key space no longer backs for as
    /// long as its client counts (its value gone or replaced, or put back
    /// with an earlier expiry): a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        let entry = n.db.peek(&self.names.lock()).cloned();
        for (c, cl) in n.clients.iter_mut().enumerate() {
            if let Phase::Held {
                fence, deadline, ..
            } = &cl.phase
            {
                let ours = format!("{}:{fence}", holder_token(c, cl));
                cl.orphaned |= !search::backs(entry.as_ref(), &ours, *deadline);
            }
        }
    }

    fn busy(&self, cl: &mut Client, ms: i64, now: u64) {
        cl.registered = true;
        cl.phase = Phase::Waiting;
        cl.next_poll = now + (ms.max(1) as u64).min(POLL);
    }

    fn by_grant(&self, cl: &Client) -> bool {
        matches!(cl.phase, Phase::Held { by_grant: true, .. })
    }

    fn answer(&self, cl: &mut Client, op: Op, reply: Reply, first: u64, now: u64, _n: usize) {
        let rounds = self.bounds.rounds;
        let finish = |cl: &mut Client| {
            cl.round += 1;
            cl.orphaned = false;
            cl.registered = false;
            cl.phase = if cl.round < rounds {
                Phase::Idle
            } else {
                Phase::Done
            };
        };
        match op {
            Op::Acquire => {
                cl.grant_notice = false;
                cl.granted = None;
                cl.wake = false;
                match reply {
                    Reply::Bulk(fence) => {
                        cl.registered = false;
                        cl.orphaned = false;
                        cl.phase = Phase::Held {
                            fence,
                            deadline: first + LEASE,
                            renewed: false,
                            by_grant: false,
                        };
                    }
                    // Busy: the PTTL, with the server's time when the
                    // attempt registered.
                    Reply::Int(ms) => self.busy(cl, ms, now),
                    Reply::Array(items) => match items.first() {
                        Some(Reply::Int(ms)) => self.busy(cl, *ms, now),
                        other => panic!("acquire answered {other:?}"),
                    },
                    other => panic!("acquire answered {other:?}"),
                }
            }
            Op::Renew => {
                if let Phase::Held {
                    deadline, renewed, ..
                } = &mut cl.phase
                {
                    *renewed = true;
                    if reply == Reply::Int(1) {
                        // The server's expiry is set from this run on: the
                        // hold is backed again.
                        cl.orphaned = false;
                        *deadline = first + LEASE;
                    } else {
                        *deadline = (*deadline).min(now);
                    }
                }
            }
            Op::Extend => {
                if let Phase::Held {
                    deadline,
                    renewed,
                    by_grant,
                    ..
                } = &mut cl.phase
                {
                    *renewed = true;
                    if reply == Reply::Int(1) {
                        // Extended: the full lease from the send on, still
                        // under the grant's value.
                        debug_assert!(*by_grant);
                        cl.orphaned = false;
                        *deadline = first + LEASE;
                    } else {
                        // The grant lapsed: the lease is lost.
                        *deadline = (*deadline).min(now);
                    }
                }
            }
            // A grant's holder then takes its registration out, and passes
            // on any grant made to it meanwhile.
            Op::Release if self.by_grant(cl) => {
                cl.phase = Phase::Leaving {
                    deregistered: false,
                }
            }
            Op::Release | Op::GrantRelease => finish(cl),
            Op::TakeGrant => unreachable!("taking a grant sends nothing"),
            Op::Deregister => {
                cl.phase = Phase::Leaving { deregistered: true };
            }
        }
    }

    /// Explores every interleaving up to the depth bound.
    pub(crate) fn run(&mut self) -> Result<Stats, Counterexample> {
        let init = self.initial();
        let searched = search::breadth_first(self, init, self.bounds.depth)?;
        Ok(Stats {
            states: searched.states,
            transitions: searched.transitions,
            depth: searched.depth,
            handovers: self.handovers,
            claims: self.claims,
            live_checks: self.live_checks,
        })
    }
}

impl search::Model for Explorer {
    type State = State;
    type Op = Op;

    fn actions(&self, s: &State) -> Vec<Action> {
        self.actions(s)
    }

    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        self.apply(s, a)
    }

    fn check(&mut self, s: &State) -> Option<String> {
        let c = self.stranded(s)?;
        Some(format!(
            "c{c} waits with a live registration on a lock nobody holds, \
             and no run of {} fault-free events gives it the lock",
            self.bounds.liveness.unwrap_or(0)
        ))
    }
}

search::registering_waiter!(Client);

impl Explorer {
    /// A client `s` strands: it waits (not given up, not dead) with its
    /// registration live in the queue while nobody holds the lock (it is
    /// free, or its value names no client whose lease is valid by its own
    /// clock: a grant, a lapsed holder's), and no run of at most
    /// `liveness` fault-free events gives it the lock.
    fn stranded(&mut self, s: &State) -> Option<usize> {
        let k = self.bounds.liveness?;
        let now = s.db.now_ms();
        if let Some(v) = self.lock_value(&s.db) {
            let held = (0..s.clients.len()).any(|c| {
                owner_of(&v) == holder_token(c, &s.clients[c])
                    && matches!(s.clients[c].phase, Phase::Held { deadline, .. } if now < deadline)
            });
            if held {
                return None;
            }
        }
        let queued = self.live_queue(&s.db);
        let waiting: Vec<usize> = (0..s.clients.len())
            .filter(|c| {
                s.clients[*c].phase == Phase::Waiting
                    && queued.iter().any(|(reg, _)| *reg == entry(*c))
            })
            .collect();
        if waiting.is_empty() {
            return None;
        }
        self.live_checks += 1;
        // The counts are of the exploration's own transitions.
        let counts = (self.handovers, self.claims);
        let unserved = search::unserved_within(self, s, k, waiting, |n: &State, c| {
            matches!(n.clients[c].phase, Phase::Held { .. })
        });
        (self.handovers, self.claims) = counts;
        unserved
    }
}

/// The CI-sized bounds, every fault once (depth 8 for 2 clients, 5 for 3),
/// or the depth `REDLEASE_MODEL_DEPTH` for both.
pub(crate) fn bounds(clients: usize) -> Bounds {
    let depth = std::env::var("REDLEASE_MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(if clients == 2 { 8 } else { 5 });
    Bounds {
        clients,
        rounds: 1,
        depth,
        faults: Faults::one_of_each(),
        liveness: None,
        claimless: false,
        counts_from_notice: false,
    }
}

fn explore(name: &str, sources: Sources, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let result = Explorer::new(sources, b).run();
    match &result {
        Ok(st) => println!(
            "{name}: {} clients, depth {}: {} states, {} transitions \
             ({} hand-overs, {} claims{}), {:.1?}",
            b.clients,
            st.depth,
            st.states,
            st.transitions,
            st.handovers,
            st.claims,
            b.liveness.map_or(String::new(), |k| format!(
                "; {} states with a waiter on a lock nobody holds, each served within {k}",
                st.live_checks
            )),
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: {} clients, depth bound {}: counterexample after {:.1?}\n{cx}",
            b.clients,
            b.depth,
            started.elapsed()
        ),
    }
    result
}

#[test]
fn lock_protocol_holds_for_two_clients() {
    match explore("lock, real scripts", Sources::real(), bounds(2)) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.handovers > 0 && st.claims > 0,
            "the hand-over was never reached: {st:?}"
        ),
    }
}

#[test]
fn lock_protocol_holds_for_three_clients() {
    if let Err(cx) = explore("lock, real scripts", Sources::real(), bounds(3)) {
        panic!("{cx}");
    }
}

#[test]
fn lock_protocol_holds_with_a_failover_losing_two_runs() {
    // A replica further behind: the failover may lose the last two runs.
    let ci = bounds(2);
    let b = Bounds {
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(7, |_| ci.depth),
        faults: Faults {
            unreplicated: 2,
            ..ci.faults
        },
        ..ci
    };
    if let Err(cx) = explore("lock, failover losing 2 runs", Sources::real(), b) {
        panic!("{cx}");
    }
}

fn mutated(name: &str, mutate: impl FnOnce(&mut Sources)) -> Counterexample {
    let mut sources = Sources::real();
    mutate(&mut sources);
    match explore(name, sources, bounds(2)) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => cx,
    }
}

#[test]
fn mutation_release_without_token_check_is_caught() {
    let cx = mutated("mutation: release without its token check", |s| {
        s.mutate(
            "RELEASE_LUA",
            "if held ~= ARGV[1] and not (sep and string.sub(held, 1, sep - 1) == ARGV[1]) then",
            "if false then",
            1,
        );
    });
    assert!(cx.invariant.contains("release"), "{cx}");
}

#[test]
fn mutation_fence_without_time_floor_is_caught() {
    let cx = mutated("mutation: fence without the TIME floor", |s| {
        for script in ["ACQUIRE_LUA", "RELEASE_LUA"] {
            s.mutate(script, "math.max(last + 1, floor)", "last + 1", 1);
        }
    });
    assert!(cx.invariant.contains("fence"), "{cx}");
}

#[test]
fn mutation_acquire_without_replay_branch_is_caught() {
    let cx = mutated("mutation: acquire without the own-token path", |s| {
        s.mutate(
            "ACQUIRE_LUA",
            "return owner == ARGV[1] or (H and H.other ~= '' and owner == H.other)",
            "return H and H.other ~= '' and owner == H.other",
            1,
        );
    });
    assert!(cx.invariant.contains("own lease"), "{cx}");
}

#[test]
fn mutation_settle_without_getdel_is_caught() {
    // The attempt that gets the lease leaves its registration queued:
    // the next release grants the lock to a locker that no longer waits.
    let cx = mutated("mutation: settle leaves the registration queued", |s| {
        s.mutate(
            "ACQUIRE_LUA",
            "local entry = redis.call('GETDEL', H.reg_key)",
            "local entry = false",
            1,
        );
    });
    assert!(cx.invariant.contains("nobody waits on"), "{cx}");
}

#[test]
fn mutation_dead_head_served_is_caught() {
    // `rotate_head` no longer tells a dead entry by its deadline: a grant
    // goes to a registration whose locker gave up or died.
    let cx = mutated("mutation: a dead registration served", |s| {
        for script in ["ACQUIRE_LUA", "RELEASE_LUA"] {
            s.mutate(
                script,
                "(tonumber(deadline or '') or 0) > now_ms()",
                "true",
                1,
            );
        }
    });
    assert!(cx.invariant.contains("past its deadline"), "{cx}");
}

/// The liveness bound: every waiter the lock is free for gets it within
/// this many fault-free events (its grant, its claim; a lapsed head's
/// deadline and a poll first at worst).
const LIVENESS: usize = 8;

#[test]
fn lock_no_waiter_stranded_while_nobody_holds() {
    let depth = std::env::var("REDLEASE_MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(7);
    let b = Bounds {
        depth,
        liveness: Some(LIVENESS),
        ..bounds(2)
    };
    match explore("lock liveness, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.live_checks > 0,
            "no waiter on a lock nobody holds: {st:?}"
        ),
    }
}

#[test]
fn mutation_grant_without_expiry_is_caught() {
    // A grant written without its claim window (`PX`): a grant to a locker
    // that died holds the lock for ever, and the waiters behind it strand.
    let mut sources = Sources::real();
    for script in ["ACQUIRE_LUA", "RELEASE_LUA"] {
        sources.mutate(
            script,
            "or (owner .. ':' .. fence), 'PX', claim)",
            "or (owner .. ':' .. fence))",
            1,
        );
    }
    let b = Bounds {
        rounds: 2,
        depth: 6,
        liveness: Some(LIVENESS),
        ..bounds(2)
    };
    match explore("mutation: a grant without its claim window", sources, b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("fault-free events"), "{cx}"),
    }
}

/// The hand-over without the claim round trip, as shipped: a grantee
/// holds from its notice until the grant's server time plus the claim
/// window, then extends the hold itself (RENEW of `<grant token>:<fence>`)
/// off the critical path; its release by that value skips its own
/// registration, which it then takes out.
#[test]
fn lock_claimless_handover_holds_for_two_clients() {
    let b = Bounds {
        claimless: true,
        ..bounds(2)
    };
    match explore("lock without the claim, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.handovers > 0, "the hand-over was never reached: {st:?}"),
    }
}

#[test]
fn lock_claimless_handover_holds_over_two_rounds() {
    let ci = bounds(2);
    let b = Bounds {
        claimless: true,
        rounds: 2,
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(7, |_| ci.depth),
        ..ci
    };
    if let Err(cx) = explore("lock without the claim, 2 rounds", Sources::real(), b) {
        panic!("{cx}");
    }
}

#[test]
fn lock_claimless_handover_holds_for_three_clients() {
    let b = Bounds {
        claimless: true,
        ..bounds(3)
    };
    if let Err(cx) = explore("lock without the claim, 3 clients", Sources::real(), b) {
        panic!("{cx}");
    }
}

#[test]
fn lock_claimless_no_waiter_stranded_while_nobody_holds() {
    let ci = bounds(2);
    let b = Bounds {
        claimless: true,
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(7, |_| ci.depth),
        liveness: Some(LIVENESS),
        ..ci
    };
    match explore("lock without the claim, liveness", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter on a free lock: {st:?}"),
    }
}

#[test]
fn mutation_claimless_counting_from_the_notice_is_caught() {
    // A grantee that counts its hold from the notice's arrival: a notice
    // that arrives late has it hold past the grant's expiry in Redis.
    // Three clients, no faults: the one behind the grantee takes the lock
    // once the grant lapsed in Redis.
    let b = Bounds {
        claimless: true,
        counts_from_notice: true,
        depth: 9,
        faults: Faults::default(),
        ..bounds(3)
    };
    match explore("mutation: a grant held from its notice", Sources::real(), b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("valid leases"), "{cx}"),
    }
}
