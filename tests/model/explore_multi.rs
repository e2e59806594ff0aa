//! An explorer of the multi-key lease's interleavings (docs/PROTOCOL.md
//! §6), after `explore.rs`: the real MULTI_ACQUIRE (reserving, registering
//! in each busy key's queue), MULTI_RENEW and MULTI_RELEASE (handing keys
//! over as reservations) run on the emulator for two keys, driven by
//! multi-key clients that want both and, beside them, a single-key locker
//! of the first key without the hand-over (plain ACQUIRE and RELEASE: it
//! sees a multi-key holder as an ordinary one). Each client counts its
//! lease from the send of the answered attempt or of the first send whose
//! reply was lost.
//!
//! Events and faults as in `explore.rs`: a script run (its reply
//! delivered, or lost and the call re-sent), a notification lost, the
//! clock advancing to the next deadline, a kill, a multi-key waiter giving
//! up (as the crate's core leaves: DEREGISTER in each key's queue, then
//! MULTI_RELEASE of its token, which frees what it reserved), a restart
//! without data, a failover to a replica that missed the last script
//! run(s).
//!
//! Invariants, checked at every step:
//! 1. no partial hold (§9.6): a multi-key token holds (not reserves)
//!    either every key or none;
//! 2. per key, at most one client whose lease of it is valid by its own
//!    clock, leaving out a holder whose hold a restart or failover lost
//!    (§11);
//! 3. every new fence written to a key is above every fence it had before;
//! 4. a multi-key attempt that finds every key its own answers those
//!    fences (a replay grants nothing twice).
//!
//! With `Bounds::liveness` (k), also a bounded "no waiter stranded": while
//! no client holds a lease valid by its own clock, every multi-key client
//! waiting with a live registration is served by some run of at most k
//! fault-free events.

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Names, QKind, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, owner_of, Counterexample, Faults, Keys, Scripts};

const START_MS: u64 = 1_700_000_000_000;
const LEASE: u64 = 100;
/// The reservation window (3 × a 20 ms notified poll) and registration
/// bound.
const RESERVE: u64 = 60;
const REG: u64 = 90;
const POLL: u64 = 30;
const KEYS: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    /// Wants both keys.
    Multi,
    /// Wants the first key alone, without the hand-over.
    Single,
}

/// Which call a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Acquire,
    Renew,
    Release,
    /// A give-up's DEREGISTER in key `i`'s queue.
    Deregister(u8),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Waiting,
    Held {
        fences: Vec<String>,
        deadline: u64,
        renewed: bool,
    },
    /// It gave up: it deregisters from key `next` on, then releases.
    Leaving {
        next: u8,
    },
    Done,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Client {
    role: Role,
    phase: Phase,
    /// A multi-key waiter's age, from its first busy reply (`0`: none).
    since: String,
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
    /// Per key, the largest fence written to it.
    max_fence: Vec<u128>,
    /// The key spaces before the last runs, while a failover is left.
    unreplicated: Vec<Keys>,
}

type Action = search::Action<Op>;

/// What to explore.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(crate) clients: Vec<Role>,
    pub(crate) depth: usize,
    pub(crate) faults: Faults,
    /// The bounded liveness check (module docs).
    pub(crate) liveness: Option<usize>,
}

/// The numbers of a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Keys a release handed over as a reservation, and multi-key grants.
    pub(crate) handed: usize,
    pub(crate) grants: usize,
    /// States the liveness check searched from.
    pub(crate) live_checks: usize,
}

fn tok(c: usize) -> String {
    token(0x100 * (c as u64 + 1))
}
fn entry(c: usize) -> String {
    format!("{:016x}", 0xe0 + c)
}

/// The explorer: the scripts (maybe mutated) and the two keys' names.
pub(crate) struct Explorer {
    scripts: Scripts,
    names: Vec<Names>,
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
            names: (1..=KEYS as u64).map(|i| Names::new("ns", i)).collect(),
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
                .map(|&role| Client {
                    role,
                    phase: Phase::Idle,
                    since: "0".to_owned(),
                    wake: false,
                    next_poll: 0,
                    lost: None,
                    orphaned: false,
                })
                .collect(),
            faults: self.bounds.faults,
            max_fence: vec![0; KEYS],
            unreplicated: Vec::new(),
        }
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let cl = &s.clients[c];
        let t = tok(c);
        let n = &self.names;
        match (cl.role, op) {
            (Role::Multi, Op::Acquire) => {
                let since = cl.since.parse().unwrap_or(0);
                let reg = entry(c);
                Call::multi_acquire(n, &t, LEASE, 0, since, RESERVE, Some((&reg, REG)))
            }
            (Role::Multi, Op::Renew) => Call::multi_renew(n, &t, LEASE),
            (Role::Multi, Op::Release) => Call::multi_release(n, &t, Some(0)),
            (Role::Multi, Op::Deregister(i)) => {
                Call::deregister(&n[usize::from(i)], QKind::Lock, &entry(c), &t)
            }
            (Role::Single, Op::Deregister(_)) => {
                unreachable!("a single-key locker never registers")
            }
            (Role::Single, Op::Acquire) => Call::acquire(&n[0], &t, LEASE, 0, None),
            (Role::Single, Op::Renew) => Call::renew(&n[0].lock(), &t, LEASE),
            (Role::Single, Op::Release) => Call::release(&n[0], &n[0].lock(), QKind::Lock, &t),
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
            Phase::Waiting if cl.wake || now >= cl.next_poll => vec![Op::Acquire],
            Phase::Held {
                deadline, renewed, ..
            } => {
                let mut ops = vec![Op::Release];
                if !renewed && now < *deadline {
                    ops.push(Op::Renew);
                }
                ops
            }
            Phase::Leaving { next } if usize::from(*next) < KEYS => vec![Op::Deregister(*next)],
            Phase::Leaving { .. } => vec![Op::Release],
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
        for e in s.db.keys.values() {
            if let Some(at) = e.expire_at {
                times.push(at + 1);
            }
            if let Value::List(l) = &e.value {
                times.extend(
                    l.iter()
                        .filter_map(|v| v.split('|').nth(1)?.parse::<u64>().ok()),
                );
            }
        }
        for cl in &s.clients {
            match &cl.phase {
                Phase::Held { deadline, .. } => times.push(*deadline),
                Phase::Waiting => times.push(cl.next_poll),
                _ => {}
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    /// Each key's value (`None`: free).
    fn values(&self, db: &Db) -> Vec<Option<String>> {
        self.names
            .iter()
            .map(|n| match db.peek(&n.lock()).map(|e| &e.value) {
                Some(Value::Str(v)) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    /// Applies `a` to `s`: the next state and a label, or the violation.
    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        let mut n = s.clone();
        let now = s.db.now_ms();
        let label = match a {
            Action::Run { client, op, lose } => {
                let call = self.call(s, client, op);
                let before = self.values(&s.db);
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.values(&n.db);
                let t = tok(client);
                let short = |v: &Option<String>| {
                    v.as_deref()
                        .map_or("free".to_owned(), |v| v.get(28..).unwrap_or(v).to_owned())
                };
                let role = s.clients[client].role;
                let label = format!(
                    "c{client}:{} {op:?} → {reply:?}{}; keys [{}] → [{}]",
                    if role == Role::Multi { "M" } else { "S" },
                    if lose { " LOST" } else { "" },
                    before.iter().map(short).collect::<Vec<_>>().join(", "),
                    after.iter().map(short).collect::<Vec<_>>().join(", "),
                );
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                // 4. A replay gets its fences back.
                let held_by = |v: &Option<String>, who: &str| {
                    v.as_deref()
                        .is_some_and(|v| owner_of(v) == who && fence_of(v).is_some())
                };
                if role == Role::Multi && op == Op::Acquire && before.iter().all(|v| held_by(v, &t))
                {
                    let fences: Vec<Reply> = before
                        .iter()
                        .flatten()
                        .filter_map(|v| v.rsplit_once(':').map(|(_, f)| Reply::Bulk(f.to_owned())))
                        .collect();
                    let want = Reply::Array(
                        std::iter::once(Reply::Bulk("ok".to_owned()))
                            .chain(fences)
                            .collect(),
                    );
                    if reply != want {
                        return Err(format!(
                            "{label}: an attempt that found every key its own was not answered their fences"
                        ));
                    }
                }
                // 3. Fences per key strictly increase.
                search::new_fences(&before, &after, &mut n.max_fence, "key")
                    .map_err(|e| format!("{label}: {e}"))?;
                if role == Role::Multi && op == Op::Release {
                    self.stats.handed += after
                        .iter()
                        .filter(|v| v.as_deref().is_some_and(|v| v.contains(":r")))
                        .count();
                }
                if role == Role::Multi
                    && matches!(&reply, Reply::Array(r) if r.first() == Some(&Reply::Bulk("ok".to_owned())))
                {
                    self.stats.grants += 1;
                }
                // Notifications wake every waiter.
                if !std::mem::take(&mut n.db.published).is_empty() {
                    for cl in &mut n.clients {
                        if cl.phase == Phase::Waiting {
                            cl.wake = true;
                        }
                    }
                }
                let cl = &mut n.clients[client];
                let first = cl.lost.map_or(now, |(_, at)| at);
                if lose {
                    n.faults.lose_reply -= 1;
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
                label
            }
        };
        n.db.purge();
        // 1. No partial hold on the server.
        let values = self.values(&n.db);
        for (c, cl) in n.clients.iter().enumerate() {
            let t = tok(c);
            let held = values
                .iter()
                .filter(|v| {
                    v.as_deref()
                        .is_some_and(|v| owner_of(v) == t && fence_of(v).is_some())
                })
                .count();
            if cl.role == Role::Multi && held != 0 && held != KEYS {
                return Err(format!(
                    "{label}: c{c} holds {held} of its {KEYS} keys {values:?}"
                ));
            }
        }
        // 2. Per key one valid holder.
        let now = n.db.now_ms();
        for key in 0..KEYS {
            let valid: Vec<usize> = (0..n.clients.len())
                .filter(|c| {
                    let cl = &n.clients[*c];
                    (cl.role == Role::Multi || key == 0)
                        && matches!(cl.phase, Phase::Held { deadline, .. } if now < deadline)
                        && !matches!(cl.lost, Some((Op::Release, _)))
                        && !cl.orphaned
                })
                .collect();
            if valid.len() > 1 {
                return Err(format!(
                    "{label}: clients {valid:?} all hold key {key} validly"
                ));
            }
        }
        Ok((n, label))
    }

    /// Marks every holder whose keys the key space no longer backs for as
    /// long as it counts: a restart or failover lost them.
    fn orphan(&self, n: &mut State) {
        let entries: Vec<_> = self
            .names
            .iter()
            .map(|k| n.db.peek(&k.lock()).cloned())
            .collect();
        for (c, cl) in n.clients.iter_mut().enumerate() {
            if let Phase::Held {
                fences, deadline, ..
            } = &cl.phase
            {
                let backed = fences.iter().zip(&entries).all(|(f, e)| {
                    e.as_ref().is_some_and(|e| {
                        e.value == Value::Str(format!("{}:{f}", tok(c)))
                            && e.expire_at.is_none_or(|at| at + 1 >= *deadline)
                    })
                });
                cl.orphaned |= !backed;
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
            ..self.stats
        })
    }
}

fn answer(cl: &mut Client, op: Op, reply: Reply, first: u64, now: u64) {
    let busy = |cl: &mut Client, ms: i64| {
        cl.phase = Phase::Waiting;
        cl.next_poll = now + (ms.max(1) as u64).min(POLL);
    };
    match op {
        Op::Acquire => {
            cl.wake = false;
            match reply {
                // A single key's fence.
                Reply::Bulk(fence) => {
                    cl.orphaned = false;
                    cl.phase = Phase::Held {
                        fences: vec![fence],
                        deadline: first + LEASE,
                        renewed: false,
                    };
                }
                Reply::Int(ms) => busy(cl, ms),
                Reply::Array(r) => match (r.first(), r.get(1), r.get(2)) {
                    (Some(Reply::Bulk(ok)), _, _) if ok == "ok" => {
                        cl.orphaned = false;
                        cl.phase = Phase::Held {
                            fences: r[1..]
                                .iter()
                                .map(|f| match f {
                                    Reply::Bulk(f) => f.clone(),
                                    other => panic!("a fence {other:?}"),
                                })
                                .collect(),
                            deadline: first + LEASE,
                            renewed: false,
                        };
                    }
                    (Some(Reply::Bulk(b)), Some(Reply::Int(ms)), Some(Reply::Bulk(age)))
                        if b == "busy" =>
                    {
                        cl.since = age.clone();
                        busy(cl, *ms);
                    }
                    _ => panic!("attempt answered {r:?}"),
                },
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
                    cl.orphaned = false;
                    *deadline = first + LEASE;
                } else {
                    *deadline = (*deadline).min(now);
                }
            }
        }
        Op::Release => {
            cl.orphaned = false;
            cl.phase = Phase::Done;
        }
        Op::Deregister(i) => cl.phase = Phase::Leaving { next: i + 1 },
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
    /// A multi-key client `s` strands: no client holds a lease valid by
    /// its own clock, it waits with its registration live in a key's
    /// queue, and no run of at most `liveness` fault-free events gives it
    /// both keys.
    fn stranded(&mut self, s: &State) -> Option<usize> {
        let k = self.bounds.liveness?;
        let now = s.db.now_ms();
        let holds =
            |cl: &Client| matches!(cl.phase, Phase::Held { deadline, .. } if now < deadline);
        if s.clients.iter().any(holds) {
            return None;
        }
        let queued = |c: usize| {
            self.names.iter().any(|n| {
                let Some(Value::List(l)) = s.db.peek(&n.queue(QKind::Lock)).map(|e| &e.value)
                else {
                    return false;
                };
                l.iter().any(|v| {
                    let mut parts = v.splitn(3, '|');
                    parts.next() == Some(entry(c).as_str())
                        && parts
                            .next()
                            .and_then(|d| d.parse::<u64>().ok())
                            .is_some_and(|d| d > now)
                })
            })
        };
        let waiting: Vec<usize> = (0..s.clients.len())
            .filter(|c| s.clients[*c].phase == Phase::Waiting && queued(*c))
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

impl search::Waiter for Client {
    fn notified(&self) -> bool {
        self.wake
    }

    fn alive(&self) -> bool {
        !matches!(self.phase, Phase::Dead | Phase::Done)
    }

    fn may_give_up(&self) -> bool {
        self.role == Role::Multi && self.phase == Phase::Waiting && self.lost.is_none()
    }

    fn lose_notices(&mut self) {
        self.wake = false;
    }

    fn die(&mut self) {
        (self.phase, self.lost) = (Phase::Dead, None);
    }

    fn give_up(&mut self) {
        self.phase = Phase::Leaving { next: 0 };
    }
}

/// Two multi-key clients and a single-key locker of the first key, every
/// fault once, at depth `ci` or `REDLEASE_MODEL_DEPTH`.
pub(crate) fn bounds(ci: usize) -> Bounds {
    Bounds {
        clients: vec![Role::Multi, Role::Multi, Role::Single],
        depth: std::env::var("REDLEASE_MODEL_DEPTH")
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(ci),
        faults: Faults::one_of_each(),
        liveness: None,
    }
}

fn explore(name: &str, sources: Sources, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let depth = b.depth;
    let result = Explorer::new(sources, b).run();
    match &result {
        Ok(st) => println!(
            "{name}: M M S, depth {}: {} states, {} transitions \
             ({} multi-key grants, {} keys handed over as reservations; \
             {} liveness checks), {:.1?}",
            st.depth,
            st.states,
            st.transitions,
            st.grants,
            st.handed,
            st.live_checks,
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: M M S, depth bound {depth}: counterexample after {:.1?}\n{cx}",
            started.elapsed()
        ),
    }
    result
}

#[test]
fn multi_key_lease_holds() {
    match explore("multi-key, real scripts", Sources::real(), bounds(6)) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.grants > 0 && st.handed > 0,
            "the hand-over was never reached: {st:?}"
        ),
    }
}

#[test]
fn mutation_multi_grant_past_a_busy_key_is_caught() {
    // The attempt never sees a busy key: it takes every key, held or not.
    let mut sources = Sources::real();
    sources.mutate(
        "MULTI_ACQUIRE_LUA",
        "busy = busy or s == 'busy'",
        "busy = false",
        1,
    );
    match explore(
        "mutation: a multi-key grant past a busy key",
        sources,
        bounds(4),
    ) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("validly"), "{cx}"),
    }
}

#[test]
fn mutation_reservation_written_as_a_hold_is_caught() {
    // A waiter's reservation of a free key is written as a hold while
    // another key stays busy: a partial hold.
    let mut sources = Sources::real();
    sources.mutate(
        "MULTI_ACQUIRE_LUA",
        "token .. ':r' .. age_text, 'PX', res_ms",
        "token .. ':' .. age_text, 'PX', res_ms",
        1,
    );
    match explore(
        "mutation: a reservation written as a hold",
        sources,
        bounds(4),
    ) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("of its 2 keys"), "{cx}"),
    }
}

#[test]
fn multi_key_no_waiter_stranded_while_nobody_holds() {
    let b = Bounds {
        liveness: Some(10),
        ..bounds(5)
    };
    match explore("multi-key liveness, real scripts", Sources::real(), b) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(st.live_checks > 0, "no waiter while nobody holds: {st:?}"),
    }
}

#[test]
fn mutation_multi_reservation_without_expiry_is_caught() {
    // A waiter's reservation written without its window: a waiter killed
    // while waiting keeps the key reserved for ever, and the other
    // waiter, younger, strands behind it.
    let mut sources = Sources::real();
    sources.mutate(
        "MULTI_ACQUIRE_LUA",
        "token .. ':r' .. age_text, 'PX', res_ms)",
        "token .. ':r' .. age_text)",
        1,
    );
    let b = Bounds {
        liveness: Some(10),
        ..bounds(5)
    };
    match explore("mutation: a reservation without its window", sources, b) {
        Ok(st) => panic!("not caught in {} states", st.states),
        Err(cx) => assert!(cx.invariant.contains("fault-free events"), "{cx}"),
    }
}
