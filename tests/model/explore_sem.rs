//! An explorer of the semaphore's interleavings (docs/PROTOCOL.md §5.2),
//! after `explore.rs`: the real SEM_ACQUIRE (with the hand-over), RELEASE
//! of a permit's slot (served once), RENEW of a slot, DEREGISTER and
//! SEM_RELEASE_ANY (a give-up's release by grant token, of unknown slot)
//! run on the emulator, driven by 2–3 clients of one permit each, two
//! permits, that mirror the crate's core in outline (attempt → busy and
//! registered → woken or granted → claim → held → release), each counting
//! its lease from the send of the answered attempt or of the first send
//! whose reply was lost.
//!
//! Events and faults as in `explore.rs`: a script run (its reply
//! delivered, or lost and the call re-sent), a notification lost, the clock
//! advancing to the next deadline, a kill, a give-up, a restart without
//! data, a failover to a replica that missed the last script run(s).
//!
//! Invariants, checked at every step:
//! 1. per slot, at most one client whose lease of it is valid by its own
//!    clock, and at most `permits` such clients in all, leaving out a
//!    holder whose hold a restart or failover lost (§11);
//! 2. every new fence written to a slot is above every fence that slot had
//!    before;
//! 3. a release never changes a slot another token holds;
//! 4. nothing granted twice: an acquire that finds its own token (or its
//!    registered grant token) in a slot answers that slot and fence, and
//!    no token or grant token is ever in two slots at once;
//! 5. FIFO: the grants one run makes go to the first live registrations,
//!    in queue order, and a slot is taken only past registrations that
//!    run served (or by the head itself);
//! 6. a grant is made out only to a registration someone may still claim
//!    or pass on (as `explore.rs`, with the same failover exception).
//!
//! With `Bounds::liveness` (k), also a bounded "no waiter stranded"
//! (§9.7): wherever a waiter's registration is live and a slot is free
//! (no client holds it by its own clock), some run of at most k fault-free
//! events gives that waiter a slot.
//!
//! With `Bounds::claimless`, the hand-over without the claim round trip
//! as shipped (docs/PROTOCOL.md §4.3): a grantee takes the slot its notice
//! names (`…:g:<reg>:<fence>:<claim ms>:<ms>:<slot>`: a slot's fence comes
//! from its own counter and does not tell the slot) as held under
//! `<grant token>:<fence>` from the grant's server time until that time
//! plus the claim window, with half the window left; it extends the hold
//! by RENEW of that slot naming the whole value, and releases it by
//! RELEASE of that slot naming the whole value, with the hand-over. The
//! grant popped its registration (served once): the take forgets it, so
//! no DEREGISTER or release by grant token follows.

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Hand, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, owner_of, Counterexample, Faults, Keys, Scripts};

const START_MS: u64 = 1_700_000_000_000;
const LEASE: u64 = 100;
const CLAIM: u64 = 30;
const REG: u64 = 90;
const POLL: u64 = 40;
const PERMITS: u32 = 2;

/// Which call a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire,
    Release,
    Renew,
    Deregister,
    /// The release by grant token (SEM_RELEASE_ANY: its slot is unknown)
    /// that follows a give-up's DEREGISTER.
    GrantRelease,
    /// Without the claim round trip: the client takes the slot its grant
    /// notice named as held from the grant's server time on, for the
    /// claim window (no script: a step of its own).
    TakeGrant,
    /// Without the claim round trip: RENEW of the slot, naming the whole
    /// value `<grant token>:<fence>`, sent after the client returned the
    /// permit: the full lease from its send on.
    Extend,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Waiting,
    Held {
        slot: u32,
        fence: String,
        deadline: u64,
        renewed: bool,
        /// Held under the whole value `<grant token>:<fence>`, from a
        /// grant taken without its claim (extended or not).
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
    /// Whether its replies said its registration is queued.
    registered: bool,
    grant_notice: bool,
    /// The grant the last grant notice named: the server's time of the
    /// grant, its slot and its fence, all from the notice.
    granted: Option<(u64, u32, String)>,
    wake: bool,
    next_poll: u64,
    /// A call whose reply was lost, re-sent as it was, and the time of its
    /// first send.
    lost: Option<(Op, u64)>,
    /// Its hold rests on a write a restart or failover lost.
    orphaned: bool,
    /// A failover brought back its registration after it was taken out
    /// (its key, or its queue entry: a grant pops the entry and leaves
    /// the key to lapse).
    revived: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    clients: Vec<Client>,
    faults: Faults,
    /// Per slot, the largest fence written to it.
    max_fence: Vec<u128>,
    /// The key spaces before the last runs, while a failover is left.
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// What to explore.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub(crate) clients: usize,
    pub(crate) depth: usize,
    pub(crate) faults: Faults,
    /// The bounded liveness check, as `explore.rs`'s, for a free slot.
    pub(crate) liveness: Option<usize>,
    /// The hand-over without the claim round trip, as shipped: a client
    /// takes a granted slot from its notice, held until the grant's server
    /// time plus the claim window, and extends it (RENEW by the whole
    /// value) off the critical path.
    pub(crate) claimless: bool,
    /// A deliberate client bug for the claimless mutation test: the grant
    /// held from the notice's arrival, not from the grant's server time.
    pub(crate) counts_from_notice: bool,
}

/// The numbers of a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Slots granted to a registration (by a release or an acquire).
    pub(crate) grants: usize,
    /// Acquires that claimed a grant.
    pub(crate) claims: usize,
    /// Grants taken without the claim (claimless mode).
    pub(crate) takes: usize,
    /// States the liveness check searched from.
    pub(crate) live_checks: usize,
}

fn tok(c: usize) -> String {
    token(0x100 * (c as u64 + 1))
}
fn grant(c: usize) -> String {
    token(0x9000 + c as u64)
}
fn entry(c: usize) -> String {
    format!("{:016x}", 0xe0 + c)
}
/// The token client `c`'s hold is under: its grant token while it holds a
/// grant taken without its claim.
fn holder_token(c: usize, cl: &Client) -> String {
    match cl.phase {
        Phase::Held { by_grant: true, .. } => grant(c),
        _ => tok(c),
    }
}
/// The grant a notice `sem:<sha>:g:<reg>:<fence>:<claim ms>:<ms>:<slot>`
/// (split at `:`) names: its server time, slot and fence; `None` without
/// a time or a slot (an older version's notice: claimed, not taken).
fn grant_notice(parts: &[&str]) -> Option<(u64, u32, String)> {
    let at = parts.get(6)?.parse().ok()?;
    let slot = parts.get(7)?.parse().ok()?;
    Some((at, slot, (*parts.get(4)?).to_owned()))
}

/// The explorer: the scripts (maybe mutated) and the semaphore's names.
pub(crate) struct Explorer {
    scripts: Scripts,
    names: Names,
    bounds: Bounds,
    stats: Stats,
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
            stats: Stats::default(),
        }
    }

    fn initial(&self) -> State {
        State {
            db: Db::at_ms(START_MS),
            clients: vec![
                Client {
                    phase: Phase::Idle,
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
            max_fence: vec![0; PERMITS as usize],
            unreplicated: Vec::new(),
        }
    }

    fn slot_key(&self, i: u32) -> String {
        format!("{}{i}", self.names.sem_slot_prefix())
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let cl = &s.clients[c];
        let n = &self.names;
        let t = tok(c);
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
                Call::sem_acquire(n, PERMITS, &t, LEASE, 0, Some(&h))
            }
            Op::Extend => {
                let Phase::Held {
                    slot, ref fence, ..
                } = cl.phase
                else {
                    unreachable!("an extension is sent while held")
                };
                Call::renew(
                    &self.slot_key(slot),
                    &format!("{}:{fence}", grant(c)),
                    LEASE,
                )
            }
            Op::Release => {
                let Phase::Held {
                    slot,
                    ref fence,
                    by_grant,
                    ..
                } = cl.phase
                else {
                    unreachable!("a release is sent while held")
                };
                if by_grant {
                    // A grant's holder names the whole value: it matches
                    // that grant only. Its registration is gone (the grant
                    // popped it), so nothing is skipped.
                    Call::slot_release(n, slot, &format!("{}:{fence}", grant(c)), 0)
                } else {
                    Call::slot_release(n, slot, &t, 0)
                }
            }
            Op::TakeGrant => unreachable!("taking a grant sends nothing"),
            Op::Renew => {
                let Phase::Held { slot, .. } = cl.phase else {
                    unreachable!("a renew is sent while held")
                };
                Call::renew(&self.slot_key(slot), &t, LEASE)
            }
            Op::Deregister => Call::deregister(n, QKind::Sem, &entry(c), &grant(c)),
            Op::GrantRelease => Call::sem_release_any(n, PERMITS, &grant(c)),
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
            // Taken with half the window left, as the locker does; later
            // the notice makes it claim.
            Phase::Waiting
                if self.bounds.claimless
                    && cl.grant_notice
                    && cl
                        .granted
                        .as_ref()
                        .is_some_and(|(at, ..)| now <= at + CLAIM / 2) =>
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
            if key == &self.names.queue(QKind::Sem) {
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
            // A grant's notice may be acted on late: at the last instant
            // it is taken, and past half the window, when it is claimed.
            if let (true, true, Some((at, ..))) =
                (self.bounds.claimless, cl.grant_notice, &cl.granted)
            {
                times.extend([at + CLAIM / 2, at + CLAIM / 2 + 1]);
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    /// Every slot's value (`None`: free).
    fn slots(&self, db: &Db) -> Vec<Option<String>> {
        (0..PERMITS)
            .map(|i| match db.peek(&self.slot_key(i)).map(|e| &e.value) {
                Some(Value::Str(v)) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    /// The live queue entries, in order: (registration id, owner).
    fn live_queue(&self, db: &Db) -> Vec<(String, String)> {
        let now = db.now_ms();
        let Some(Value::List(l)) = db.peek(&self.names.queue(QKind::Sem)).map(|e| &e.value) else {
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
                let (at, slot, fence) = cl.granted.take().expect("a grant notice");
                let at = if self.bounds.counts_from_notice {
                    now
                } else {
                    at
                };
                cl.grant_notice = false;
                cl.wake = false;
                // The grant popped the registration (served once): the
                // client forgets it.
                cl.registered = false;
                cl.phase = Phase::Held {
                    slot,
                    fence,
                    deadline: at + CLAIM,
                    renewed: false,
                    by_grant: true,
                };
                // A grant a restart or failover lost after its notice was
                // published: held by its client's clock, backed by nothing
                // (docs/PROTOCOL.md §11: fences decide). A grant still in
                // Redis backs the hold only as long as its expiry does:
                // that is what the invariant checks (the value alone, here).
                n.clients[client].orphaned = !self.backed(&n.db, client, &n.clients[client], 0);
                self.stats.takes += 1;
                format!(
                    "c{client} takes its grant of slot {slot} until {} (no claim sent)",
                    at + CLAIM
                )
            }
            Action::Run { client, op, lose } => {
                let call = self.call(s, client, op);
                let before = self.slots(&s.db);
                let queue = self.live_queue(&s.db);
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.slots(&n.db);
                let t = call
                    .args
                    .first()
                    .or(call.keys.last())
                    .cloned()
                    .unwrap_or_default();
                let short = |v: &Option<String>| {
                    v.as_deref()
                        .map_or("free".to_owned(), |v| v.get(28..).unwrap_or(v).to_owned())
                };
                let named = owner_of(&t);
                let label = format!(
                    "c{client} {op:?} (token …{}{}) → {reply:?}{}; slots [{}] → [{}]",
                    &named[named.len().saturating_sub(4)..],
                    t.get(named.len()..).unwrap_or_default(),
                    if lose { " LOST" } else { "" },
                    before.iter().map(short).collect::<Vec<_>>().join(", "),
                    after.iter().map(short).collect::<Vec<_>>().join(", "),
                );
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                let cl0 = &s.clients[client];
                let ours = |o: &str| o == t || (cl0.registered && o == grant(client));
                // 3. A release never changes a slot another token holds
                // (nor, naming a whole value, another value).
                if matches!(op, Op::Release | Op::GrantRelease) {
                    let names = |v: &str| v == t || owner_of(v) == t;
                    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
                        if b.as_deref().is_some_and(|v| !names(v)) && a != b {
                            return Err(format!(
                                "{label}: a release by another token changed slot {i}"
                            ));
                        }
                    }
                }
                // 4. A replay (or claim) gets its slot and fence back.
                if matches!(op, Op::Acquire | Op::Extend) {
                    let found = before.iter().enumerate().find_map(|(i, v)| {
                        let v = v.as_deref()?;
                        ours(owner_of(v))
                            .then(|| (i, v.rsplit_once(':').map(|(_, f)| f.to_owned())))
                    });
                    if let Some((i, f)) = found {
                        let answered = match &reply {
                            Reply::Array(a) => {
                                a.first() == Some(&Reply::Int(i as i64))
                                    && a.get(1) == f.clone().map(Reply::Bulk).as_ref()
                            }
                            _ => false,
                        };
                        if !answered {
                            return Err(format!(
                                "{label}: an acquire that found its own slot {i} did not get it and its fence {f:?} back"
                            ));
                        }
                        if before[i].as_deref().map(owner_of) == Some(grant(client).as_str()) {
                            self.stats.claims += 1;
                        }
                    }
                }
                // 2. Fences per slot strictly increase.
                let mut granted: Vec<(usize, String)> = Vec::new();
                let mut took = false;
                let new = search::new_fences(&before, &after, &mut n.max_fence, "slot")
                    .map_err(|e| format!("{label}: {e}"))?;
                for i in new {
                    let o1 = after[i].as_deref().map_or("", owner_of);
                    if o1 == t {
                        took = true;
                    } else {
                        granted.push((i, o1.to_owned()));
                    }
                }
                // 5. FIFO: this run's grants go to the first live
                // registrations, in order; a take comes after them.
                self.stats.grants += granted.len();
                for (k, (i, o)) in granted.iter().enumerate() {
                    let head = queue.get(k).map(|(_, owner)| owner.as_str());
                    if head != Some(o.as_str()) {
                        return Err(format!(
                            "{label}: slot {i} granted to {o} out of turn (live queue {queue:?})"
                        ));
                    }
                }
                if took {
                    let ahead = queue
                        .iter()
                        .position(|(reg, _)| *reg == entry(client))
                        .unwrap_or(queue.len());
                    if ahead > granted.len() {
                        return Err(format!(
                            "{label}: a slot taken past live registrations {:?}",
                            &queue[granted.len()..ahead]
                        ));
                    }
                }
                // 6. A grant only to a registration still waited on.
                for (_, o) in &granted {
                    if let Some(g) = (0..s.clients.len()).find(|g| *o == grant(*g)) {
                        let cl = &s.clients[g];
                        let wants = match cl.phase {
                            Phase::Waiting | Phase::Dead => true,
                            Phase::Leaving { deregistered } => !deregistered,
                            Phase::Idle => matches!(cl.lost, Some((Op::Acquire, _))),
                            // A holder's registration is gone: its claim
                            // took it out (`d`), or its grant popped it.
                            // Only a failover brings it back (`revived`:
                            // nobody claims that grant, which lapses).
                            Phase::Held { .. } | Phase::Done => false,
                        };
                        if !wants && !cl.revived {
                            return Err(format!(
                                "{label}: granted to c{g}'s registration, which nobody waits on ({:?})",
                                cl.phase
                            ));
                        }
                    }
                }
                // Notifications: `sem:<sha>` or
                // `sem:<sha>:g:<reg>:<fence>:<claim ms>:<ms>:<slot>`.
                for p in std::mem::take(&mut n.db.published) {
                    let parts: Vec<&str> = p.message.split(':').collect();
                    if parts.get(2) == Some(&"g") {
                        for (i, cl) in n.clients.iter_mut().enumerate() {
                            if Some(&entry(i).as_str()) == parts.get(3) && cl.phase != Phase::Dead {
                                cl.grant_notice = true;
                                cl.granted = grant_notice(&parts);
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
                    answer(cl, op, reply, first, now);
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
                let (queued, requeued) = (self.live_queue(&s.db), self.live_queue(&n.db));
                for (c, cl) in n.clients.iter_mut().enumerate() {
                    let reg = self.names.reg(QKind::Sem, &entry(c));
                    let ours = |q: &[(String, String)]| q.iter().any(|(r, _)| *r == entry(c));
                    cl.revived |= s.db.peek(&reg).is_none() && n.db.peek(&reg).is_some()
                        || !ours(&queued) && ours(&requeued);
                }
                label
            }
        };
        n.db.purge();
        // 4. No token or grant token in two slots.
        let slots = self.slots(&n.db);
        for (i, v) in slots.iter().enumerate() {
            let Some(o) = v.as_deref().map(owner_of) else {
                continue;
            };
            if slots[i + 1..]
                .iter()
                .any(|w| w.as_deref().map(owner_of) == Some(o))
            {
                return Err(format!("{label}: {o} is in two slots {slots:?}"));
            }
        }
        // 1. Per slot one valid holder; at most `permits` in all.
        let now = n.db.now_ms();
        let valid: Vec<(usize, u32)> = (0..n.clients.len())
            .filter_map(|c| {
                // A client that sent its release stops using the lease,
                // even while it does not know the release's outcome.
                let cl = &n.clients[c];
                match cl.phase {
                    Phase::Held { slot, deadline, .. }
                        if now < deadline
                            && !matches!(cl.lost, Some((Op::Release, _)))
                            && !cl.orphaned =>
                    {
                        Some((c, slot))
                    }
                    _ => None,
                }
            })
            .collect();
        for (k, (c, slot)) in valid.iter().enumerate() {
            if let Some((d, _)) = valid[k + 1..].iter().find(|(_, s2)| s2 == slot) {
                return Err(format!(
                    "{label}: clients c{c} and c{d} both hold slot {slot} validly"
                ));
            }
        }
        if valid.len() > PERMITS as usize {
            return Err(format!(
                "{label}: {} valid holders {valid:?} for {PERMITS} permits",
                valid.len()
            ));
        }
        Ok((n, label))
    }

    /// Marks every holder whose slot the key space no longer backs for as
    /// long as its client counts (its value gone or replaced, or put back
    /// with an earlier expiry): a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        for (c, cl) in n.clients.iter_mut().enumerate() {
            if let Phase::Held { deadline, .. } = cl.phase {
                cl.orphaned |= !self.backed(&n.db, c, cl, deadline);
            }
        }
    }

    /// Whether the key space backs holder `c`'s slot until `until`: its
    /// value, with an expiry no earlier.
    fn backed(&self, db: &Db, c: usize, cl: &Client, until: u64) -> bool {
        let Phase::Held { slot, fence, .. } = &cl.phase else {
            return false;
        };
        let ours = Value::Str(format!("{}:{fence}", holder_token(c, cl)));
        db.peek(&self.slot_key(*slot))
            .is_some_and(|e| e.value == ours && e.expire_at.is_none_or(|at| at + 1 >= until))
    }

    /// Explores every interleaving up to the depth bound.
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

    /// A client `s` strands: it waits (not given up, not dead) with its
    /// registration live in the queue while a slot is free (no client
    /// whose lease is valid by its own clock holds it), and no run of at
    /// most `liveness` fault-free events gives it a slot.
    fn stranded(&mut self, s: &State) -> Option<usize> {
        let k = self.bounds.liveness?;
        let now = s.db.now_ms();
        let slots = self.slots(&s.db);
        let held = slots
            .iter()
            .filter(|v| {
                v.as_deref().is_some_and(|v| {
                    (0..s.clients.len()).any(|c| {
                        owner_of(v) == holder_token(c, &s.clients[c])
                            && matches!(s.clients[c].phase, Phase::Held { deadline, .. } if now < deadline)
                    })
                })
            })
            .count();
        if held == PERMITS as usize {
            return None;
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
        self.stats.live_checks += 1;
        // The counts are of the exploration's own transitions.
        let counts = self.stats;
        let unserved = search::unserved_within(self, s, k, waiting, |n: &State, c| {
            matches!(n.clients[c].phase, Phase::Held { .. })
        });
        self.stats = counts;
        unserved
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
            "c{c} waits with a live registration while a slot is free, \
             and no run of {} fault-free events gives it a slot",
            self.bounds.liveness.unwrap_or(0)
        ))
    }
}

search::registering_waiter!(Client);

/// A busy reply of `ms`: the client waits, registered.
fn waits(cl: &mut Client, ms: i64, now: u64) {
    cl.registered = true;
    cl.phase = Phase::Waiting;
    cl.next_poll = now + (ms.max(1) as u64).min(POLL);
}

fn answer(cl: &mut Client, op: Op, reply: Reply, first: u64, now: u64) {
    match op {
        Op::Acquire => {
            cl.grant_notice = false;
            cl.granted = None;
            cl.wake = false;
            match reply {
                Reply::Array(a) => match a.as_slice() {
                    // Busy, and registered at that server time.
                    [Reply::Int(ms), Reply::Int(_)] => waits(cl, *ms, now),
                    [Reply::Int(slot), Reply::Bulk(fence), ..] => {
                        cl.registered = false;
                        cl.orphaned = false;
                        cl.phase = Phase::Held {
                            slot: *slot as u32,
                            fence: fence.clone(),
                            deadline: first + LEASE,
                            renewed: false,
                            by_grant: false,
                        };
                    }
                    _ => panic!("acquire answered {a:?}"),
                },
                Reply::Int(ms) => waits(cl, ms, now),
                other => panic!("acquire answered {other:?}"),
            }
        }
        // As a renew: the hold stays under its whole value.
        Op::Renew | Op::Extend => {
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
        Op::Release | Op::GrantRelease => {
            cl.registered = false;
            cl.orphaned = false;
            cl.phase = Phase::Done;
        }
        Op::TakeGrant => unreachable!("taking a grant sends nothing"),
        Op::Deregister => cl.phase = Phase::Leaving { deregistered: true },
    }
}

fn depth_or(ci: usize) -> usize {
    std::env::var("REDLEASE_MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(ci)
}

/// The CI-sized bounds for `clients` clients (depth `ci`), or the depth
/// `REDLEASE_MODEL_DEPTH`.
pub(crate) fn bounds(clients: usize, ci: usize) -> Bounds {
    Bounds {
        clients,
        depth: depth_or(ci),
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
            "{name}: {} clients, {PERMITS} permits, depth {}: {} states, {} transitions \
             ({} grants, {} claims, {} taken without the claim{}), {:.1?}",
            b.clients,
            st.depth,
            st.states,
            st.transitions,
            st.grants,
            st.claims,
            st.takes,
            b.liveness.map_or(String::new(), |k| format!(
                "; {} states with a waiter and a free slot, each served within {k}",
                st.live_checks
            )),
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: {} clients, {PERMITS} permits, depth bound {}: counterexample after {:.1?}\n{cx}",
            b.clients,
            b.depth,
            started.elapsed()
        ),
    }
    result
}

/// The CI depths: 2 clients never wait for a permit, 3 do.
const DEPTH_2: usize = 6;
const DEPTH_3: usize = 7;

#[test]
fn semaphore_holds_for_two_clients() {
    if let Err(cx) = explore(
        "semaphore, real scripts",
        Sources::real(),
        bounds(2, DEPTH_2),
    ) {
        panic!("{cx}");
    }
}

/// Three clients with every fault. A waiter whose busy reply was lost
/// sends its attempt again naming its grant token as its own (it may have
/// registered); meanwhile a release may have popped its registration and
/// granted it a slot, which the attempt then claims. Were it not named,
/// the waiter would register again (`RPUSH`: the entry was popped) and the
/// next release grant that registration a second slot, what the pop
/// (docs/PROTOCOL.md §4.2) is there to prevent.
#[test]
fn semaphore_holds_for_three_clients() {
    let b = bounds(3, DEPTH_3);
    match explore("semaphore, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.grants > 0 && st.claims > 0,
            "the hand-over was never reached: {st:?}"
        ),
    }
}

/// As `explore.rs`'s: a grant, its claim, a lapse and a poll at worst.
const LIVENESS: usize = 8;

#[test]
fn semaphore_no_waiter_stranded_while_a_slot_is_free() {
    let b = Bounds {
        liveness: Some(LIVENESS),
        ..bounds(3, 6)
    };
    match explore("semaphore liveness, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter with a free slot: {st:?}"),
    }
}

#[test]
fn mutation_served_registration_rotated_is_caught() {
    // The served registration rotates instead of leaving the queue: a
    // second free slot goes to it before it claimed the first.
    let mut sources = Sources::real();
    sources.mutate("RELEASE_LUA", "slot ~= nil", "false", 2);
    sources.mutate(
        "SEM_ACQUIRE_LUA",
        "next_registration(H.queue, seen, true, H.flag)",
        "next_registration(H.queue, seen, false, H.flag)",
        1,
    );
    let b = Bounds {
        faults: Faults::default(),
        ..bounds(3, 6)
    };
    match explore("mutation: a served registration rotated", sources, b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("two slots"), "{cx}"),
    }
}

#[test]
fn mutation_replay_without_own_slot_is_caught() {
    // An acquire that no longer looks for its own token in the slots: a
    // replay after a lost reply takes a second slot.
    let mut sources = Sources::real();
    sources.mutate(
        "SEM_ACQUIRE_LUA",
        "fence = fence or our_fence(j > n and H, held[i])",
        "fence = false",
        1,
    );
    match explore(
        "mutation: an acquire blind to its own slot",
        sources,
        bounds(2, 4),
    ) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("own slot"), "{cx}"),
    }
}

/// The hand-over without the claim round trip, as shipped: a grantee
/// holds the slot its notice names under `<grant token>:<fence>` from the
/// grant's server time until that time plus the claim window, extends it
/// by RENEW of that whole value off the critical path, and releases it by
/// RELEASE of that slot naming the whole value, with the hand-over; the
/// grant popped its registration, so nothing is deregistered.
#[test]
fn semaphore_claimless_handover_holds_for_three_clients() {
    // One step below the plain run's depth, to stay within CI's time
    // (release build: depth 7, 469,071 states, 9.5 s; depth 8, 1,600,156
    // states, 37 s; no violation).
    let b = Bounds {
        claimless: true,
        ..bounds(3, DEPTH_3 - 1)
    };
    match explore(
        "semaphore without the claim, real scripts",
        Sources::real(),
        b,
    ) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.grants > 0 && st.takes > 0,
            "the claimless hand-over was never reached: {st:?}"
        ),
    }
}

#[test]
fn semaphore_claimless_no_waiter_stranded_while_a_slot_is_free() {
    let b = Bounds {
        claimless: true,
        liveness: Some(LIVENESS),
        ..bounds(3, 6)
    };
    match explore("semaphore without the claim, liveness", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter with a free slot: {st:?}"),
    }
}

#[test]
fn mutation_sem_claimless_counting_from_the_notice_is_caught() {
    // A grantee that counts its hold from the notice's arrival: a notice
    // that arrives late has it hold past the grant's expiry in Redis.
    // Four clients, no faults, 8 steps: two hold the permits, a third
    // waits; the first release grants its slot to the waiter, whose notice
    // comes late, and a fourth client takes that slot once the grant
    // lapsed.
    let b = Bounds {
        claimless: true,
        counts_from_notice: true,
        faults: Faults::default(),
        ..bounds(4, 8)
    };
    match explore("mutation: a slot held from its notice", Sources::real(), b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("validly"), "{cx}"),
    }
}
