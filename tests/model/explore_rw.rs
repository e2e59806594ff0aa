//! An explorer of the read-write lease's interleavings (docs/PROTOCOL.md
//! §5.3), after `explore.rs`: the real RW_READ, RW_WRITE (with an intent),
//! RELEASE of a writer (with the readers' key and the hand-over),
//! RW_READ_RELEASE (with the hand-over), RENEW, RW_READ_RENEW and
//! DEREGISTER run on the emulator, driven by readers and writers that
//! mirror the crate's core in outline (attempt → busy and registered →
//! woken or granted → claim → held → release), each counting its lease
//! from the send of the answered attempt or of the first send whose reply
//! was lost. A reader may run without the hand-over (no queue keys or
//! arguments: it neither registers nor serves the queue, §10).
//!
//! Events and faults as in `explore.rs`: a script run (its reply
//! delivered, or lost and the call re-sent), a notification lost, the
//! clock advancing to the next deadline, a kill, a give-up (DEREGISTER,
//! then the release of the grant token: a writer's RELEASE, a reader's
//! RW_READ_RELEASE), a restart without data, a failover to a replica that
//! missed the last script run(s) (in its own run).
//!
//! Invariants, checked at every step:
//! 1. the server never holds a writer key beside a live reader (§9.1);
//! 2. no client whose writer lease is valid by its own clock beside one
//!    whose reader lease is, and at most one valid writer, leaving out a
//!    holder whose hold a restart or failover lost (§11: it may act until
//!    its deadline, and fences decide);
//! 3. every new write fence is above every fence and every epoch before
//!    it; every epoch a read answers is at least the latest write fence
//!    the key space still has (it equals it, or is a new floor above every
//!    earlier one): after a failover that lost a grant, an epoch may be
//!    below that lost fence, whose holder §11 leaves out;
//! 4. replays grant nothing twice: a write that finds its own token (or
//!    its registered grant token) in the writer key answers that fence, a
//!    read that finds its own live reader (or its registered grant's)
//!    answers an epoch, never busy;
//! 5. a writer's release never changes a lease another token holds;
//! 6. writers first: a read with the hand-over admits no new reader while
//!    a live writer's registration heads the queue (a claim of a grant the
//!    hand-over made, or a replay, is no new reader);
//! 7. FIFO across the queue's mixed entries: the hand-over grants a writer
//!    only as the head live registration, and admits a reader only with no
//!    writer's live registration ahead of it;
//! 8. (claimless) the release of a grant taken without its claim grants
//!    nothing to the releaser's own registration.
//!
//! With `Bounds::liveness` (k), also a bounded "no waiter stranded": while
//! nobody holds a lease valid by its own clock, every client waiting with
//! a live registration is served by some run of at most k fault-free
//! events.
//!
//! With `Bounds::claimless`, the hand-over without the claim round trip,
//! as `explore.rs`'s: a grantee (a writer granted the key, or a reader
//! admitted under its grant token for the claim window) takes the grant
//! as held from the grant's server time until that time plus the claim
//! window, and extends it with the claim (RW_WRITE's or RW_READ's
//! own-token path) off the critical path. Before that, it releases by its
//! grant token; neither a writer's RELEASE nor RW_READ_RELEASE can skip
//! the releaser's own registration (`rw_hand_over` is run with no entry of
//! its own, and the grant rotated the entry, so it is still queued), so
//! its release is DEREGISTER first, then the release by grant token (a
//! writer's RELEASE, a reader's RW_READ_RELEASE, each with the hand-over).

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::collections::BTreeMap;
use std::time::Instant;

use super::calls::{token, Call, Hand, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, owner_of, Counterexample, Faults, Keys, Scripts};

const START_MS: u64 = 1_700_000_000_000;
const LEASE: u64 = 100;
const CLAIM: u64 = 30;
/// The crate's bounds for a locker that polls every 30 ms and safety-polls
/// every 20 ms while notified: registration 3 × 30, intent 3 × 20. A
/// registration outlives its intent, so a writer that stops attempting
/// (paused, given up, dead) stays first in line with no intent.
const REG: u64 = 90;
const INTENT: u64 = 60;
const POLL: u64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    Reader,
    Writer,
}

/// Which call a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// RW_READ or RW_WRITE, by role.
    Attempt,
    Release,
    Renew,
    Deregister,
    /// The release by grant token that follows a give-up's DEREGISTER.
    GrantRelease,
    /// Without the claim round trip: the client takes the grant its
    /// notice named (the writer key, or its reader admitted) as held from
    /// the grant's server time on, for the claim window (no script: a step
    /// of its own).
    TakeGrant,
    /// Without the claim round trip: the claim, sent after the client
    /// returned the lease, extends it to the full lease (RW_WRITE's or
    /// RW_READ's own-token path, as the claim).
    Extend,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Waiting,
    Held {
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
    role: Role,
    /// Whether it takes part in the hand-over.
    hand: bool,
    phase: Phase,
    /// Whether its replies said its registration is queued.
    registered: bool,
    grant_notice: bool,
    /// The grant the last grant notice named: the server's time of the
    /// grant (which a claimless notice would carry) and its fence (a
    /// writer's) or epoch (a reader's).
    granted: Option<(u64, String)>,
    wake: bool,
    next_poll: u64,
    lost: Option<(Op, u64)>,
    /// Its hold rests on a write a restart or failover lost.
    orphaned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    clients: Vec<Client>,
    faults: Faults,
    max_fence: u128,
    /// The latest write fence the key space still has: a restart or a
    /// failover that lost a grant puts it back (that writer is one of the
    /// holders §11 leaves out, and its fence one the next write is above).
    known_fence: u128,
    max_epoch: u128,
    /// The key spaces before the last runs, while a failover is left.
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// What to explore: each client's role and whether it has the hand-over.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) clients: Vec<(Role, bool)>,
    pub(crate) depth: usize,
    pub(crate) faults: Faults,
    /// Whether invariant 1 (the server's keys) is checked: off, a
    /// mutation must be caught by the clients' leases alone.
    pub(crate) server_check: bool,
    /// The bounded liveness check: in every state reached where nobody
    /// holds a valid lease and a client waits with its registration live,
    /// some run of at most this many fault-free events serves it.
    pub(crate) liveness: Option<usize>,
    /// The hand-over without the claim round trip, as `explore.rs`'s: a
    /// client takes a grant (the writer key, or its reader admitted) from
    /// its notice, held until the grant's server time plus the claim
    /// window, and extends it (the claim) off the critical path.
    pub(crate) claimless: bool,
    /// A deliberate client bug for the claimless mutation test: the grant
    /// held from the notice's arrival, not from the grant's server time.
    pub(crate) counts_from_notice: bool,
    /// The claimless release as the lock's and the semaphore's: by grant
    /// token first, then DEREGISTER (the scripts cannot skip the
    /// releaser's registration: its counterexample test).
    pub(crate) release_first: bool,
}

/// The numbers of a run, and how often the hand-over's paths were taken.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Grants of the writer key to a registration.
    pub(crate) writer_grants: usize,
    /// Readers admitted for a registration (a grant token in the set).
    pub(crate) reader_grants: usize,
    /// Attempts that claimed a grant (writer or reader).
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
fn entry(c: usize, role: Role) -> String {
    let kind = if role == Role::Reader { 'r' } else { 'w' };
    format!("{kind}{:016x}", 0xe0 + c)
}
/// The token client `c`'s hold is under: its grant token while it holds a
/// grant it has not claimed.
fn holder_token(c: usize, cl: &Client) -> String {
    match cl.phase {
        Phase::Held { by_grant: true, .. } => grant(c),
        _ => tok(c),
    }
}
fn by_grant(cl: &Client) -> bool {
    matches!(cl.phase, Phase::Held { by_grant: true, .. })
}

/// The explorer: the scripts (maybe mutated) and the key's names.
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
            clients: self
                .bounds
                .clients
                .iter()
                .map(|&(role, hand)| Client {
                    role,
                    hand,
                    phase: Phase::Idle,
                    registered: false,
                    grant_notice: false,
                    granted: None,
                    wake: false,
                    next_poll: 0,
                    lost: None,
                    orphaned: false,
                })
                .collect(),
            faults: self.bounds.faults,
            max_fence: 0,
            known_fence: 0,
            max_epoch: 0,
            unreplicated: Vec::new(),
        }
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let cl = &s.clients[c];
        let n = &self.names;
        let t = tok(c);
        let reader = cl.role == Role::Reader;
        match op {
            Op::Attempt => {
                let h = Hand {
                    entry: entry(c, cl.role),
                    reg_ms: REG,
                    claim_ms: CLAIM,
                    grant: grant(c),
                    register: true,
                    registered: cl.registered,
                    keep: "d",
                    floor: None,
                };
                let intent = (!reader).then_some(INTENT);
                Call::rw_acquire(n, &t, LEASE, 0, intent, cl.hand.then_some(&h))
            }
            Op::Extend => self.call(s, c, Op::Attempt),
            // A grant's holder releases by its grant token, and neither
            // RELEASE's nor RW_READ_RELEASE's hand-over can skip the
            // releaser's own registration (`rw_hand_over` is called with
            // no entry of its own), which the grant rotated, not popped:
            // it would be granted the lease again. So its release starts
            // with the DEREGISTER, and the release by grant token follows.
            Op::Release if by_grant(cl) && self.bounds.release_first => {
                self.call(s, c, Op::GrantRelease)
            }
            Op::Release if by_grant(cl) => {
                Call::deregister(n, QKind::Rw, &entry(c, cl.role), &grant(c))
            }
            Op::TakeGrant => unreachable!("taking a grant sends nothing"),
            Op::Release if reader => Call::read_release(n, &t, cl.hand.then_some(0)),
            Op::Release => Call::write_release(n, &t, 0),
            Op::Renew if reader => Call::read_renew(n, &t, LEASE),
            Op::Renew => Call::renew(&n.rw("write"), &t, LEASE),
            Op::Deregister => Call::deregister(n, QKind::Rw, &entry(c, cl.role), &grant(c)),
            Op::GrantRelease if reader => Call::read_release(n, &grant(c), Some(0)),
            Op::GrantRelease => Call::write_release(n, &grant(c), 0),
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
            Phase::Idle => vec![Op::Attempt],
            Phase::Waiting
                if self.bounds.claimless
                    && cl.grant_notice
                    && cl.granted.as_ref().is_some_and(|(at, _)| now < at + CLAIM) =>
            {
                vec![Op::TakeGrant]
            }
            Phase::Waiting if cl.grant_notice || cl.wake || now >= cl.next_poll => {
                vec![Op::Attempt]
            }
            Phase::Held {
                deadline,
                renewed,
                by_grant,
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
            match &e.value {
                Value::List(l) if key == &self.names.queue(QKind::Rw) => times.extend(
                    l.iter()
                        .filter_map(|v| v.split('|').nth(1)?.parse::<u64>().ok()),
                ),
                // A reader is dead from its score on.
                Value::ZSet(z) => times.extend(z.values().map(|sc| sc.0 as u64)),
                _ => {}
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

    fn writer(&self, db: &Db) -> Option<String> {
        match db.peek(&self.names.rw("write")).map(|e| &e.value) {
            Some(Value::Str(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// The live readers: token → expiry.
    fn readers(&self, db: &Db) -> BTreeMap<String, u64> {
        let now = db.now_ms();
        match db.peek(&self.names.rw("read")).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z
                .iter()
                .map(|(m, sc)| (m.clone(), sc.0 as u64))
                .filter(|(_, at)| *at > now)
                .collect(),
            _ => BTreeMap::new(),
        }
    }

    /// The live queue entries' ids, in order.
    fn live_queue(&self, db: &Db) -> Vec<String> {
        let now = db.now_ms();
        let Some(Value::List(l)) = db.peek(&self.names.queue(QKind::Rw)).map(|e| &e.value) else {
            return Vec::new();
        };
        l.iter()
            .filter_map(|v| {
                let mut parts = v.splitn(3, '|');
                let reg = parts.next()?;
                let deadline: u64 = parts.next()?.parse().ok()?;
                (deadline > now).then(|| reg.to_owned())
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
                let (at, _) = cl.granted.take().expect("a grant notice");
                let at = if self.bounds.counts_from_notice {
                    now
                } else {
                    at
                };
                cl.grant_notice = false;
                cl.wake = false;
                cl.phase = Phase::Held {
                    deadline: at + CLAIM,
                    renewed: false,
                    by_grant: true,
                };
                // A grant a restart or failover lost after its notice was
                // published: held by its client's clock, backed by nothing
                // (docs/PROTOCOL.md §11: fences decide). A grant still in
                // Redis backs the hold only as long as its expiry does:
                // that is what the invariants check (the value alone, here).
                n.clients[client].orphaned = !self.backed(&n.db, client, &n.clients[client], 0);
                self.stats.takes += 1;
                format!(
                    "c{client} takes its grant until {} (no claim sent)",
                    at + CLAIM
                )
            }
            Action::Run { client, op, lose } => {
                let call = self.call(s, client, op);
                let cl0 = &s.clients[client];
                let role = cl0.role;
                let before = self.writer(&s.db);
                let readers0 = self.readers(&s.db);
                let queue = self.live_queue(&s.db);
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.writer(&n.db);
                let readers1 = self.readers(&n.db);
                let t = call
                    .args
                    .first()
                    .or(call.keys.last())
                    .cloned()
                    .unwrap_or_default();
                let short = |v: &str| v.get(28..).unwrap_or(v).to_owned();
                let fmt_readers = |r: &BTreeMap<String, u64>| {
                    r.keys().map(|m| short(m)).collect::<Vec<_>>().join(",")
                };
                let label = format!(
                    "c{client}:{} {op:?} (token …{}) → {reply:?}{}; writer {} → {}; readers [{}] → [{}]",
                    if role == Role::Reader { "R" } else { "W" },
                    &t[t.len().saturating_sub(4)..],
                    if lose { " LOST" } else { "" },
                    before.as_deref().map_or("none".to_owned(), &short),
                    after.as_deref().map_or("none".to_owned(), &short),
                    fmt_readers(&readers0),
                    fmt_readers(&readers1),
                );
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                // 8. A grant's holder's release grants nothing to its own
                // registration (it would hold the lease again, for nobody).
                if op == Op::Release && by_grant(cl0) {
                    let g = grant(client);
                    let writer =
                        after.as_deref().is_some_and(|v| owner_of(v) == g) && after != before;
                    let reader = readers1
                        .get(&g)
                        .is_some_and(|x| Some(x) != readers0.get(&g));
                    if writer || reader {
                        return Err(format!(
                            "{label}: a release by c{client}'s grant token granted its own registration again"
                        ));
                    }
                }
                let mine = |set: &BTreeMap<String, u64>| {
                    set.contains_key(&t) || (cl0.registered && set.contains_key(&grant(client)))
                };
                // Counts of the hand-over's paths; 7. FIFO: a writer is
                // granted only as the head live registration, a reader only
                // with no writer's registration ahead of it.
                if let Some(v1) = after.as_deref().filter(|v| Some(*v) != before.as_deref()) {
                    if let Some(g) = (0..s.clients.len()).find(|g| owner_of(v1) == grant(*g)) {
                        self.stats.writer_grants += 1;
                        if queue.first() != Some(&entry(g, Role::Writer)) {
                            return Err(format!(
                                "{label}: writer c{g} granted past the head registration {:?}",
                                queue.first()
                            ));
                        }
                    }
                }
                for g in 0..s.clients.len() {
                    if readers1.contains_key(&grant(g)) && !readers0.contains_key(&grant(g)) {
                        self.stats.reader_grants += 1;
                        let own = entry(g, Role::Reader);
                        let ahead = queue.iter().take_while(|e| **e != own);
                        if let Some(w) = ahead.clone().find(|e| e.starts_with('w')) {
                            return Err(format!(
                                "{label}: reader c{g} admitted past the writer's registration {w}"
                            ));
                        }
                    }
                }
                let attempt = matches!(op, Op::Attempt | Op::Extend);
                if attempt && matches!(reply, Reply::Bulk(_)) {
                    let g = grant(client);
                    if before.as_deref().map(owner_of) == Some(g.as_str())
                        || (role == Role::Reader && readers0.contains_key(&g))
                    {
                        self.stats.claims += 1;
                    }
                }
                // 5. A writer's release never changes another token's lease.
                if role == Role::Writer && matches!(op, Op::Release | Op::GrantRelease) {
                    if let Some(v0) = &before {
                        if owner_of(v0) != t && after != before {
                            return Err(format!(
                                "{label}: a release by another token changed the writer lease"
                            ));
                        }
                    }
                }
                // 4. A replay gets its grant back.
                if attempt && role == Role::Writer {
                    if let Some(v0) = &before {
                        let o = owner_of(v0);
                        if o == t || (cl0.registered && o == grant(client)) {
                            let f = v0.rsplit_once(':').map(|(_, f)| f.to_owned());
                            if reply != Reply::Bulk(f.clone().unwrap_or_default()) {
                                return Err(format!(
                                    "{label}: a write that found its own lease did not get its fence {f:?} back"
                                ));
                            }
                        }
                    }
                }
                if attempt
                    && role == Role::Reader
                    && mine(&readers0)
                    && !matches!(reply, Reply::Bulk(_))
                {
                    return Err(format!(
                        "{label}: a read that found its own live reader was not answered an epoch"
                    ));
                }
                // 3. Write fences above every fence and epoch; epochs at
                // least the latest write fence.
                let f0 = before.as_deref().and_then(fence_of);
                if let Some(f1) = after
                    .as_deref()
                    .and_then(fence_of)
                    .filter(|f1| Some(*f1) != f0)
                {
                    if f1 <= n.max_fence || f1 <= n.max_epoch {
                        return Err(format!(
                            "{label}: new write fence {f1} is not above fence {} and epoch {}",
                            n.max_fence, n.max_epoch
                        ));
                    }
                    n.max_fence = f1;
                    n.known_fence = f1;
                }
                if attempt && role == Role::Reader {
                    if let Reply::Bulk(e) = &reply {
                        let e: u128 = e.parse().map_err(|_| format!("{label}: epoch {e}"))?;
                        if e < n.known_fence {
                            return Err(format!(
                                "{label}: epoch {e} is below the latest write fence {}",
                                n.known_fence
                            ));
                        }
                        n.max_epoch = n.max_epoch.max(e);
                        // 6. Writers first.
                        let head_writer = queue.first().is_some_and(|r| r.starts_with('w'));
                        if cl0.hand && head_writer && !mine(&readers0) {
                            return Err(format!(
                                "{label}: a new reader let in past the writer {} first in line",
                                queue[0]
                            ));
                        }
                    }
                }
                // Notifications: `rw:<sha>` or `rw:<sha>:g:<reg>:…`.
                for p in std::mem::take(&mut n.db.published) {
                    let parts: Vec<&str> = p.message.split(':').collect();
                    if parts.get(2) == Some(&"g") {
                        for (i, cl) in n.clients.iter_mut().enumerate() {
                            if Some(&entry(i, cl.role).as_str()) == parts.get(3)
                                && cl.phase != Phase::Dead
                            {
                                cl.grant_notice = true;
                                cl.granted = parts.get(4).map(|f| (now, (*f).to_owned()));
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
                    cl.registered |= op == Op::Attempt && cl.hand;
                    cl.lost = Some((op, first));
                } else {
                    cl.lost = None;
                    answer(cl, op, reply, first, now, self.bounds.release_first);
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
                let counter =
                    n.db.peek(&self.names.rw("fence"))
                        .and_then(|e| match &e.value {
                            Value::Str(v) => v.parse().ok(),
                            _ => None,
                        });
                n.known_fence = n.known_fence.min(counter.unwrap_or(0));
                label
            }
        };
        n.db.purge();
        // 1. No writer key beside a live reader, on the server.
        if let Some(w) = self.writer(&n.db).filter(|_| self.bounds.server_check) {
            let live = self.readers(&n.db);
            if !live.is_empty() {
                return Err(format!(
                    "{label}: the writer key {w} lives beside live readers {:?}",
                    live.keys().collect::<Vec<_>>()
                ));
            }
        }
        // 2. Exclusion by the clients' own clocks.
        let now = n.db.now_ms();
        let valid = |role: Role| -> Vec<usize> {
            (0..n.clients.len())
                .filter(|c| {
                    let cl = &n.clients[*c];
                    cl.role == role
                        && matches!(cl.phase, Phase::Held { deadline, .. } if now < deadline)
                        && !matches!(cl.lost, Some((Op::Release, _)))
                        && !cl.orphaned
                })
                .collect()
        };
        let (writers, readers) = (valid(Role::Writer), valid(Role::Reader));
        if writers.len() > 1 || (!writers.is_empty() && !readers.is_empty()) {
            return Err(format!(
                "{label}: writers {writers:?} and readers {readers:?} all hold valid leases"
            ));
        }
        Ok((n, label))
    }

    /// Marks every holder whose hold the key space no longer backs for as
    /// long as its client counts (its writer value or reader gone, or put
    /// back with an earlier expiry): a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        for (c, cl) in n.clients.iter_mut().enumerate() {
            if let Phase::Held { deadline, .. } = cl.phase {
                cl.orphaned |= !self.backed(&n.db, c, cl, deadline);
            }
        }
    }

    /// Whether the key space backs holder `c`'s lease until `until`: its
    /// writer value or its reader (under the token it holds by), with an
    /// expiry no earlier.
    fn backed(&self, db: &Db, c: usize, cl: &Client, until: u64) -> bool {
        if !matches!(cl.phase, Phase::Held { .. }) {
            return false;
        }
        let t = holder_token(c, cl);
        let lasts = |e: &super::emu::Entry| e.expire_at.is_none_or(|at| at + 1 >= until);
        match cl.role {
            Role::Writer => db.peek(&self.names.rw("write")).is_some_and(|e| {
                matches!(&e.value, Value::Str(v) if owner_of(v) == t) && lasts(e)
            }),
            Role::Reader => db.peek(&self.names.rw("read")).is_some_and(|e| {
                matches!(&e.value, Value::ZSet(z) if z.get(&t).is_some_and(|sc| sc.0 as u64 >= until))
                    && lasts(e)
            }),
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
            ..self.stats
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
            "c{c} waits with a live registration while nobody holds, \
             and no run of {} fault-free events serves it",
            self.bounds.liveness.unwrap_or(0)
        ))
    }
}

impl Explorer {
    /// A client `s` strands: nobody holds a lease valid by its own clock,
    /// it waits with its registration live in the queue, and no run of at
    /// most `liveness` fault-free events gives it its lease.
    fn stranded(&mut self, s: &State) -> Option<usize> {
        let k = self.bounds.liveness?;
        let now = s.db.now_ms();
        let holds =
            |cl: &Client| matches!(cl.phase, Phase::Held { deadline, .. } if now < deadline);
        if s.clients.iter().any(holds) {
            return None;
        }
        let queued = self.live_queue(&s.db);
        let waiting: Vec<usize> = (0..s.clients.len())
            .filter(|c| {
                let cl = &s.clients[*c];
                cl.phase == Phase::Waiting && queued.contains(&entry(*c, cl.role))
            })
            .collect();
        if waiting.is_empty() {
            return None;
        }
        // The counts are of the exploration's own transitions.
        let stats = self.stats;
        let unserved = search::unserved_within(self, s, k, waiting, |n: &State, c| {
            matches!(n.clients[c].phase, Phase::Held { .. })
        });
        self.stats = Stats {
            live_checks: stats.live_checks + 1,
            ..stats
        };
        unserved
    }
}

search::registering_waiter!(Client);

fn answer(cl: &mut Client, op: Op, reply: Reply, first: u64, now: u64, release_first: bool) {
    match op {
        Op::Attempt => {
            cl.grant_notice = false;
            cl.granted = None;
            cl.wake = false;
            match reply {
                Reply::Bulk(_) => {
                    cl.registered = false;
                    cl.orphaned = false;
                    cl.phase = Phase::Held {
                        deadline: first + LEASE,
                        renewed: false,
                        by_grant: false,
                    };
                }
                Reply::Int(ms) => {
                    cl.registered = cl.hand;
                    cl.phase = Phase::Waiting;
                    cl.next_poll = now + (ms.max(1) as u64).min(POLL);
                }
                other => panic!("attempt answered {other:?}"),
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
            } = &mut cl.phase
            {
                *renewed = true;
                if let Reply::Bulk(_) = reply {
                    // Claimed: its own token's lease, from the send on.
                    (*by_grant, cl.registered, cl.orphaned) = (false, false, false);
                    *deadline = first + LEASE;
                } else {
                    // The grant lapsed: the lease is lost, and the attempt
                    // registered it again.
                    cl.registered = cl.hand;
                    *deadline = (*deadline).min(now);
                }
            }
        }
        // A grant's holder's release was its DEREGISTER: the release by
        // grant token follows (or, `release_first`, the other way round).
        Op::Release if by_grant(cl) => {
            cl.phase = Phase::Leaving {
                deregistered: !release_first,
            }
        }
        Op::Release | Op::GrantRelease => {
            cl.registered = false;
            cl.phase = Phase::Done;
        }
        Op::TakeGrant => unreachable!("taking a grant sends nothing"),
        Op::Deregister => cl.phase = Phase::Leaving { deregistered: true },
    }
}

/// Two readers and a writer, all with the hand-over (`hand_off`: the
/// second reader without it), at the CI depth or `REDLEASE_MODEL_DEPTH`,
/// every fault but the failover (see `rw_epochs_survive_a_failover`).
pub(crate) fn bounds(hand_off: bool) -> Bounds {
    let depth = std::env::var("REDLEASE_MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(6);
    Bounds {
        clients: vec![
            (Role::Reader, true),
            (Role::Writer, true),
            (Role::Reader, !hand_off),
        ],
        depth,
        faults: Faults::without_failover(),
        server_check: true,
        liveness: None,
        claimless: false,
        counts_from_notice: false,
        release_first: false,
    }
}

fn explore(name: &str, sources: Sources, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let roles: Vec<String> = b
        .clients
        .iter()
        .map(|(r, h)| {
            format!(
                "{}{}",
                if *r == Role::Reader { "R" } else { "W" },
                if *h { "" } else { "(no hand-over)" }
            )
        })
        .collect();
    let depth = b.depth;
    let result = Explorer::new(sources, b).run();
    match &result {
        Ok(st) => println!(
            "{name}: clients {}, depth {}: {} states, {} transitions \
             ({} writer grants, {} reader grants, {} claims, {} taken without the claim; \
             {} liveness checks), {:.1?}",
            roles.join(" "),
            st.depth,
            st.states,
            st.transitions,
            st.writer_grants,
            st.reader_grants,
            st.claims,
            st.takes,
            st.live_checks,
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: clients {}, depth bound {depth}: counterexample after {:.1?}\n{cx}",
            roles.join(" "),
            started.elapsed()
        ),
    }
    result
}

#[test]
fn rw_protocol_holds_for_two_readers_and_a_writer() {
    match explore("rw, real scripts", Sources::real(), bounds(false)) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.writer_grants > 0 && st.reader_grants > 0 && st.claims > 0,
            "the hand-over was not reached both ways: {st:?}"
        ),
    }
}

#[test]
fn rw_protocol_holds_with_a_reader_without_the_handover() {
    if let Err(cx) = explore("rw, real scripts", Sources::real(), bounds(true)) {
        panic!("{cx}");
    }
}

/// With a failover: a lost writer's grant puts `rw-fence` back, and the
/// next read answers that as its epoch, below the lost fence (invariant 3
/// says what still holds: the next write fence is above both).
#[test]
fn rw_protocol_holds_across_a_failover() {
    let b = Bounds {
        faults: Faults::one_of_each(),
        ..bounds(false)
    };
    if let Err(cx) = explore("rw with a failover, real scripts", Sources::real(), b) {
        panic!("{cx}");
    }
}

fn mutated(name: &str, server_check: bool, mutate: impl Fn(&mut Sources)) -> Counterexample {
    let mut sources = Sources::real();
    mutate(&mut sources);
    let b = Bounds {
        server_check,
        ..bounds(false)
    };
    match explore(name, sources, b) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => cx,
    }
}

#[test]
fn mutation_read_past_a_queued_writer_is_caught() {
    // RW_READ forgets to keep new readers behind a writer first in line:
    // no exclusion is lost (the writer still waits for every live reader),
    // but readers that keep coming starve it.
    let cx = mutated("mutation: a new read past the queued writer", true, |s| {
        s.mutate(
            "RW_READ_LUA",
            "if writer_next and not claim then",
            "if false then",
            1,
        );
    });
    assert!(cx.invariant.contains("past the writer"), "{cx}");
}

#[test]
fn mutation_writer_granted_beside_live_readers_is_caught() {
    // `rw_hand_over` grants a head writer without checking for live
    // readers: the server holds a writer key beside a live reader, and
    // the writer that claims it holds beside the reader.
    let mutate = |s: &mut Sources| {
        for script in [
            "RW_READ_LUA",
            "RW_WRITE_LUA",
            "RELEASE_LUA",
            "RW_READ_RELEASE_LUA",
        ] {
            s.mutate(script, "if readers_until(readers) then", "if false then", 1);
        }
    };
    let cx = mutated(
        "mutation: a writer granted beside live readers",
        true,
        mutate,
    );
    assert!(cx.invariant.contains("beside live readers"), "{cx}");
    let cx = mutated(
        "mutation: a writer granted beside live readers (the clients' view)",
        false,
        mutate,
    );
    assert!(cx.invariant.contains("all hold valid leases"), "{cx}");
}

/// The liveness bound: a waiter served within this many fault-free
/// events once nobody holds (a lapsed head's deadline, a poll, the grant,
/// the claim, and a holder's release ahead of it at worst).
const LIVENESS: usize = 10;

#[test]
fn rw_no_waiter_stranded_while_nobody_holds() {
    let ci = bounds(false);
    let b = Bounds {
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(6, |_| ci.depth),
        liveness: Some(LIVENESS),
        ..ci
    };
    match explore("rw liveness, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter while nobody holds: {st:?}"),
    }
}

#[test]
fn mutation_rw_grant_without_expiry_is_caught() {
    // A writer's grant written without its claim window (`PX`): a grant to
    // a writer that died holds the lease for ever, and the waiters behind
    // it strand.
    let mut sources = Sources::real();
    for script in [
        "RW_READ_LUA",
        "RW_WRITE_LUA",
        "RELEASE_LUA",
        "RW_READ_RELEASE_LUA",
    ] {
        sources.mutate(
            script,
            "or (owner .. ':' .. fence), 'PX', claim)",
            "or (owner .. ':' .. fence))",
            1,
        );
    }
    let ci = bounds(false);
    let b = Bounds {
        depth: 6,
        liveness: Some(LIVENESS),
        ..ci
    };
    match explore("mutation: a writer's grant without its window", sources, b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("fault-free events"), "{cx}"),
    }
}

/// Two writers and two readers: entries of both kinds queue behind a
/// holder in every order, the ground for FIFO across mixed entries.
fn mixed() -> Bounds {
    Bounds {
        clients: vec![
            (Role::Writer, true),
            (Role::Reader, true),
            (Role::Writer, true),
            (Role::Reader, true),
        ],
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(6, |d| d.parse().unwrap_or(6)),
        faults: Faults::default(),
        ..bounds(false)
    }
}

#[test]
fn rw_fifo_holds_across_mixed_entries() {
    match explore("rw mixed entries, real scripts", Sources::real(), mixed()) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.reader_grants > 0 && st.writer_grants > 0, "{st:?}"),
    }
}

#[test]
fn mutation_readers_admitted_past_a_queued_writer_are_caught() {
    // The hand-over's batch of readers goes on past a writer's entry: a
    // reader queued behind the writer is let in ahead of it.
    let mut sources = Sources::real();
    for script in [
        "RW_READ_LUA",
        "RW_WRITE_LUA",
        "RELEASE_LUA",
        "RW_READ_RELEASE_LUA",
    ] {
        sources.mutate(
            script,
            "if not (head and string.sub(head, 1, 1) == 'r') then",
            "if not head then",
            1,
        );
    }
    match explore("mutation: a reader batch past the writer", sources, mixed()) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("past the writer"), "{cx}"),
    }
}

/// The hand-over without the claim round trip, as `explore.rs`'s: a
/// grantee (a writer granted the key, a reader admitted under its grant
/// token) holds from its notice until the grant's server time plus the
/// claim window, then extends (claims) off the critical path. Its release
/// before extending is its DEREGISTER, then the release by grant token: a
/// writer's RELEASE and a reader's RW_READ_RELEASE hand over with no entry
/// of the releaser's to skip, and its registration, rotated by the grant,
/// is still queued.
#[test]
fn rw_claimless_handover_holds_for_two_readers_and_a_writer() {
    // One step deeper than the CI depth: a take, its release's DEREGISTER
    // and the release by grant token come after the grant.
    let ci = bounds(false);
    let b = Bounds {
        claimless: true,
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(7, |_| ci.depth),
        ..ci
    };
    match explore("rw without the claim, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.writer_grants > 0 && st.reader_grants > 0 && st.takes > 0,
            "the claimless hand-over was not reached both ways: {st:?}"
        ),
    }
}

/// With a failover as well: a grant taken from its notice that the
/// failover lost is a hold §11 leaves out (fences decide).
#[test]
fn rw_claimless_handover_holds_across_a_failover() {
    let b = Bounds {
        claimless: true,
        faults: Faults::one_of_each(),
        ..bounds(false)
    };
    match explore("rw without the claim, with a failover", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.takes > 0, "{st:?}"),
    }
}

#[test]
fn rw_claimless_handover_holds_across_mixed_entries() {
    let b = Bounds {
        claimless: true,
        ..mixed()
    };
    match explore("rw mixed entries without the claim", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.takes > 0, "{st:?}"),
    }
}

#[test]
fn rw_claimless_no_waiter_stranded_while_nobody_holds() {
    let ci = bounds(false);
    let b = Bounds {
        depth: std::env::var("REDLEASE_MODEL_DEPTH").map_or(6, |_| ci.depth),
        liveness: Some(LIVENESS),
        claimless: true,
        ..ci
    };
    match explore("rw without the claim, liveness", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter while nobody holds: {st:?}"),
    }
}

#[test]
fn mutation_rw_claimless_counting_from_the_notice_is_caught() {
    // A grantee that counts its hold from the notice's arrival: a notice
    // that arrives late has it hold past the grant's expiry in Redis, and
    // the next in line gets in beside it. No faults, 9 steps: a reader
    // holds, a writer and a reader wait; the reader's release grants the
    // writer, whose notice comes late, and the waiting reader is let in
    // once the grant lapsed.
    let b = Bounds {
        claimless: true,
        counts_from_notice: true,
        depth: 9,
        faults: Faults::default(),
        ..bounds(false)
    };
    match explore(
        "mutation: an rw grant held from its notice",
        Sources::real(),
        b,
    ) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("all hold valid leases"), "{cx}"),
    }
}

/// Why the claimless release here starts with the DEREGISTER: sent first,
/// as the lock's and the semaphore's are, the release by grant token (a
/// writer's RELEASE, a reader's RW_READ_RELEASE) runs `rw_hand_over` with
/// no entry of the releaser's to skip, and the releaser's registration,
/// which its grant rotated to the tail, is still queued: with nobody else
/// queued ahead of it, the writer key is granted to it again (a new
/// fence, for a client that is leaving). Not unsafe: its DEREGISTER and
/// release by grant token then pass that grant on; but a fence is spent on
/// nobody, and the key is held for nobody until then (a reader without
/// the hand-over, or a locker not yet queued, waits that long).
#[test]
fn rw_claimless_release_by_grant_first_grants_itself_again() {
    let b = Bounds {
        claimless: true,
        release_first: true,
        faults: Faults::default(),
        depth: 5,
        ..bounds(false)
    };
    match explore(
        "rw without the claim, grant release first",
        Sources::real(),
        b,
    ) {
        Ok(st) => panic!("not shown in {} states", st.states),
        Err(cx) => {
            assert!(
                cx.invariant.contains("granted its own registration again"),
                "{cx}"
            );
            assert_eq!(cx.trace.len(), 5, "{cx}");
        }
    }
}
