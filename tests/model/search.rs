//! What the explorers share: the events of a run (a client's script call
//! with its reply delivered or lost, the clock, a fault), the faults left
//! to inject, the script runs (memoised: a search meets the same call on
//! the same key space from many clients' states), and the breadth-first
//! search over states, memoised by hash, that turns a violated invariant
//! into the trace that leads to it.
//!
//! A failover to a replica that missed the last writes is modelled by the
//! key spaces before each of the last few script runs (kept only while that
//! fault is left, so states that differ in nothing else still merge): the
//! fault puts one of them back.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

use super::calls::{Call, Sources};
use super::emu::{Db, Entry, Reply};
use super::lua::Emulator;

/// A key space without its clock.
pub(crate) type Keys = BTreeMap<String, Entry>;

/// Faults left to inject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Faults {
    pub(crate) lose_reply: u8,
    pub(crate) lose_notice: u8,
    pub(crate) kill: u8,
    pub(crate) restart: u8,
    pub(crate) give_up: u8,
    /// Failovers to a replica that missed the last writes.
    pub(crate) failover: u8,
    /// How many of the last script runs a failover may lose (a bound, not
    /// a count left).
    pub(crate) unreplicated: u8,
}

impl Faults {
    /// One fault of each kind.
    pub(crate) fn one_of_each() -> Self {
        Faults {
            lose_reply: 1,
            lose_notice: 1,
            kill: 1,
            restart: 1,
            give_up: 1,
            failover: 1,
            unreplicated: 1,
        }
    }

    /// Those faults without the failover.
    pub(crate) fn without_failover() -> Self {
        Faults {
            failover: 0,
            ..Faults::one_of_each()
        }
    }
}

/// Records the key space a script run is about to change, while a
/// failover is left that could lose the run.
pub(crate) fn record_run(unreplicated: &mut Vec<Keys>, db: &Db, faults: &Faults) {
    if faults.failover == 0 || faults.unreplicated == 0 {
        return;
    }
    unreplicated.push(db.keys.clone());
    let keep = usize::from(faults.unreplicated);
    if unreplicated.len() > keep {
        unreplicated.remove(0);
    }
}

/// One event of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action<Op> {
    /// Client `client` sends `op`; Redis runs it, and its reply is
    /// delivered or (`lose`) lost, to be sent again as it was.
    Run {
        client: usize,
        op: Op,
        lose: bool,
    },
    /// The clock moves to the next deadline.
    Advance,
    LoseNotice(usize),
    Kill(usize),
    GiveUp(usize),
    Restart,
    /// A failover to a replica that missed the last `n` script runs.
    Failover(u8),
}

/// What the fault events need to know of a client.
pub(crate) trait Waiter {
    /// A grant notice or a wake-up waits for it.
    fn notified(&self) -> bool;
    /// It is neither dead nor done.
    fn alive(&self) -> bool;
    /// It waits registered with no reply lost, so it may give up.
    fn may_give_up(&self) -> bool;
    /// Its pending notices are lost.
    fn lose_notices(&mut self);
    /// It is killed: it sends nothing more.
    fn die(&mut self);
    /// Its wait ends: it deregisters, then releases by its grant token.
    fn give_up(&mut self);
}

/// [`Waiter`] for an explorer's `Client` of a kind that registers: it is
/// notified by a grant notice or a wake-up, may give up while waiting
/// registered with no reply lost, and gives up by deregistering first.
/// The client has `grant_notice`, `wake`, `registered`, `lost` and a
/// `phase` of its module's `Phase` with `Waiting`, `Dead`, `Done` and
/// `Leaving { deregistered }`.
macro_rules! registering_waiter {
    ($client:ty) => {
        impl search::Waiter for $client {
            fn notified(&self) -> bool {
                self.grant_notice || self.wake
            }

            fn alive(&self) -> bool {
                !matches!(self.phase, Phase::Dead | Phase::Done)
            }

            fn may_give_up(&self) -> bool {
                self.phase == Phase::Waiting && self.registered && self.lost.is_none()
            }

            fn lose_notices(&mut self) {
                (self.grant_notice, self.wake) = (false, false);
            }

            fn die(&mut self) {
                (self.phase, self.lost) = (Phase::Dead, None);
            }

            fn give_up(&mut self) {
                self.phase = Phase::Leaving {
                    deregistered: false,
                };
            }
        }
    };
}
pub(crate) use registering_waiter;

/// Applies a fault event (not a send, not the clock) to the clients, the
/// faults left and the key space; the step's label. A restart without
/// data empties the key space, a failover puts back the key space before
/// the last runs it lost; either moves the clock 1 ms (§3 assumes a loss
/// takes over a millisecond) and keeps it otherwise: the new primary's
/// clock agrees with the old one's.
pub(crate) fn apply_fault<Op, C: Waiter>(
    fault: Action<Op>,
    faults: &mut Faults,
    clients: &mut [C],
    db: &mut Db,
    unreplicated: &mut Vec<Keys>,
) -> String {
    match fault {
        Action::LoseNotice(c) => {
            faults.lose_notice -= 1;
            clients[c].lose_notices();
            format!("c{c}'s notification lost")
        }
        Action::Kill(c) => {
            faults.kill -= 1;
            clients[c].die();
            format!("c{c} killed")
        }
        Action::GiveUp(c) => {
            faults.give_up -= 1;
            clients[c].give_up();
            format!("c{c} gives up")
        }
        Action::Restart => {
            faults.restart -= 1;
            db.keys.clear();
            db.advance_ms(1);
            "redis restarts without data (1 ms)".to_owned()
        }
        Action::Failover(lost) => {
            faults.failover -= 1;
            let at = unreplicated.len() - usize::from(lost);
            db.keys = unreplicated.swap_remove(at);
            unreplicated.clear();
            db.advance_ms(1);
            format!("failover to a replica without the last {lost} run(s) (1 ms)")
        }
        Action::Run { .. } | Action::Advance => {
            unreachable!("a send or the clock is the model's own step")
        }
    }
}

/// Every event enabled: each client's sends (each also with its reply
/// lost while that fault is left), the faults left, and the clock when
/// `clock_moves`.
pub(crate) fn actions<Op: Copy, C: Waiter>(
    clients: &[C],
    faults: &Faults,
    unreplicated: &[Keys],
    sends: impl Fn(usize) -> Vec<Op>,
    clock_moves: bool,
) -> Vec<Action<Op>> {
    let mut out = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        for op in sends(c) {
            out.push(Action::Run {
                client: c,
                op,
                lose: false,
            });
            if faults.lose_reply > 0 {
                out.push(Action::Run {
                    client: c,
                    op,
                    lose: true,
                });
            }
        }
        if faults.lose_notice > 0 && client.notified() {
            out.push(Action::LoseNotice(c));
        }
        if faults.kill > 0 && client.alive() {
            out.push(Action::Kill(c));
        }
        if faults.give_up > 0 && client.may_give_up() {
            out.push(Action::GiveUp(c));
        }
    }
    if faults.restart > 0 {
        out.push(Action::Restart);
    }
    if faults.failover > 0 {
        for lost in 1..=unreplicated.len() {
            out.push(Action::Failover(lost as u8));
        }
    }
    if clock_moves {
        out.push(Action::Advance);
    }
    out
}

/// The scripts (maybe mutated) run on the emulator, memoised: a call on a
/// key space (with its clock) always gives the same reply and key space,
/// and a search meets the same pair from many clients' states.
pub(crate) struct Scripts {
    sources: Sources,
    emu: Emulator,
    memo: HashMap<u64, (Reply, Db)>,
}

/// Runs remembered before the memo starts again (its memory is bounded).
const MEMO: usize = 40_000;

impl Scripts {
    pub(crate) fn new(sources: Sources) -> Scripts {
        Scripts {
            sources,
            emu: Emulator::new(Db::default()),
            memo: HashMap::new(),
        }
    }

    /// Runs `call` on `db`: the reply and the key space after.
    pub(crate) fn run(&mut self, call: &Call, db: Db) -> (Reply, Db) {
        let key = hash(&(call, &db));
        if let Some((reply, after)) = self.memo.get(&key) {
            return (reply.clone(), after.clone());
        }
        self.emu.db = db;
        let src = self.sources.get(call.script).to_owned();
        let reply = self
            .emu
            .eval_named(call.script, &src, &call.keys, &call.args);
        let after = std::mem::take(&mut self.emu.db);
        if self.memo.len() >= MEMO {
            self.memo.clear();
        }
        self.memo.insert(key, (reply.clone(), after.clone()));
        (reply, after)
    }
}

/// A violated invariant and the trace that leads to it.
#[derive(Debug, Clone)]
pub(crate) struct Counterexample {
    pub(crate) invariant: String,
    pub(crate) trace: Vec<String>,
}

impl std::fmt::Display for Counterexample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "violated: {}", self.invariant)?;
        for (i, step) in self.trace.iter().enumerate() {
            writeln!(f, "  {:>2}. {step}", i + 1)?;
        }
        Ok(())
    }
}

/// A model the search explores.
pub(crate) trait Model {
    type State: Hash;
    type Op: Copy;
    /// The events enabled in `s`.
    fn actions(&self, s: &Self::State) -> Vec<Action<Self::Op>>;
    /// `s` after `a`, with the step's label; `Err`: an invariant the step
    /// broke.
    fn apply(
        &mut self,
        s: &Self::State,
        a: Action<Self::Op>,
    ) -> Result<(Self::State, String), String>;
    /// A property of a state met for the first time; `Some`: violated.
    fn check(&mut self, _s: &Self::State) -> Option<String> {
        None
    }
}

/// How far a search went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Searched {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
}

/// Explores every interleaving from `init` up to `bound` events deep.
pub(crate) fn breadth_first<M: Model>(
    model: &mut M,
    init: M::State,
    bound: usize,
) -> Result<Searched, Counterexample> {
    let mut seen: HashSet<u64> = HashSet::new();
    // (parent, label) of every state met, for the traces.
    let mut arena: Vec<(usize, String)> = vec![(usize::MAX, "start".to_owned())];
    let trace = |arena: &[(usize, String)], mut i: usize, violation: String| {
        let mut trace = vec![violation.clone()];
        while i != 0 {
            trace.push(arena[i].1.clone());
            i = arena[i].0;
        }
        trace.reverse();
        Counterexample {
            invariant: violation,
            trace,
        }
    };
    let mut frontier: VecDeque<(M::State, usize)> = VecDeque::new();
    seen.insert(hash(&init));
    frontier.push_back((init, 0));
    let (mut transitions, mut depth) = (0, 0);
    while depth < bound && !frontier.is_empty() {
        let mut next = VecDeque::new();
        while let Some((s, at)) = frontier.pop_front() {
            for a in model.actions(&s) {
                transitions += 1;
                let (n, label) = model.apply(&s, a).map_err(|v| trace(&arena, at, v))?;
                if seen.insert(hash(&n)) {
                    arena.push((at, label));
                    if let Some(violation) = model.check(&n) {
                        return Err(trace(&arena, arena.len() - 1, violation));
                    }
                    next.push_back((n, arena.len() - 1));
                }
            }
        }
        frontier = next;
        depth += 1;
    }
    Ok(Searched {
        states: seen.len(),
        transitions,
        depth,
    })
}

/// The bounded liveness check: the first of `pending` (clients waiting
/// while nobody holds) that no run of at most `k` fault-free events from
/// `s` (script runs answered, the clock) serves, as `served` says of a
/// state; `None`: each is served by some such run.
pub(crate) fn unserved_within<M: Model>(
    model: &mut M,
    s: &M::State,
    k: usize,
    mut pending: Vec<usize>,
    served: impl Fn(&M::State, usize) -> bool,
) -> Option<usize>
where
    M::State: Clone,
{
    let mut seen: HashSet<u64> = HashSet::from([hash(s)]);
    let mut frontier = vec![s.clone()];
    for _ in 0..k {
        let mut next = Vec::new();
        for st in &frontier {
            for a in model.actions(st) {
                if !matches!(a, Action::Advance | Action::Run { lose: false, .. }) {
                    continue;
                }
                let Ok((n, _)) = model.apply(st, a) else {
                    continue;
                };
                pending.retain(|c| !served(&n, *c));
                if pending.is_empty() {
                    return None;
                }
                if seen.insert(hash(&n)) {
                    next.push(n);
                }
            }
        }
        frontier = next;
    }
    pending.first().copied()
}

/// A state's hash, which memoises the searches.
pub(crate) fn hash(s: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

/// The fence of a lease value `<owner>:<fence>`.
pub(crate) fn fence_of(value: &str) -> Option<u128> {
    value.rsplit_once(':').and_then(|(_, f)| f.parse().ok())
}

/// Per key `i` (of `before` and `after`, the values of a run's keys before
/// and after it), a fence the run wrote is above every fence the key had,
/// `max[i]`, which it becomes; `what` names a key in the message ("slot",
/// "key"). The keys whose fence is new.
pub(crate) fn new_fences(
    before: &[Option<String>],
    after: &[Option<String>],
    max: &mut [u128],
    what: &str,
) -> Result<Vec<usize>, String> {
    let mut new = Vec::new();
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        let Some(f1) = a.as_deref().and_then(fence_of) else {
            continue;
        };
        if Some(f1) == b.as_deref().and_then(fence_of) {
            continue;
        }
        if f1 <= max[i] {
            return Err(format!(
                "new fence {f1} of {what} {i} is not above its fence {}",
                max[i]
            ));
        }
        max[i] = f1;
        new.push(i);
    }
    Ok(new)
}

/// The owner of a lease value `<owner>:<fence>`.
pub(crate) fn owner_of(value: &str) -> &str {
    value.split_once(':').map_or(value, |(o, _)| o)
}

/// Whether a key's entry backs a hold of `value` for as long as its holder
/// counts (until `deadline`): the value is there and lasts that long.
pub(crate) fn backs(entry: Option<&Entry>, value: &str, deadline: u64) -> bool {
    entry.is_some_and(|e| {
        e.value == super::emu::Value::Str(value.to_owned())
            && e.expire_at.is_none_or(|at| at + 1 >= deadline)
    })
}
