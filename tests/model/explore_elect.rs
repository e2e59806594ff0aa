//! An explorer of the leader election's interleavings (docs/PROTOCOL.md
//! §7), after `explore.rs`: the real CAMPAIGN, RENEW (of the lease),
//! PROCLAIM and RESIGN run on the emulator (with its streams), driven by
//! 2–3 candidates that mirror the crate in outline (campaign → busy, retry
//! at the leader's expiry or on a resign notice → leader → renew, proclaim
//! once → resign), each counting its leadership from the send of the
//! answered campaign or of the first send whose reply was lost.
//! Candidates do not register (§7), so no hand-over and no give-up.
//!
//! Events and faults as in `explore.rs`: a script run (its reply
//! delivered, or lost and the call re-sent), a resign notice lost, the
//! clock advancing to the next deadline, a kill, a restart without data, a
//! failover to a replica that missed the last script run(s).
//!
//! Invariants, checked at every step:
//! 1. at most one candidate whose leadership is valid by its own clock,
//!    leaving out a leader whose lease a restart or failover lost (§11);
//! 2. every new term written to the lease is above every term before it
//!    (so one leader per term);
//! 3. replays grant nothing twice (§9.4): a campaign that finds its own
//!    token in the lease answers that term, a proclaim that finds its own
//!    entry on top answers that entry's id, and a proclaim or resign by a
//!    token the lease does not hold changes neither lease nor log;
//! 4. the log is well formed: each entry links to the one before it
//!    (`prev`, `0-0` first), a term's entries are `t-0` (its grant,
//!    leader `1`), then `t-1`, `t-2`, … with at most one vacancy (leader
//!    `0`), its last, and every term but the newest ends with its vacancy
//!    (a lapsed leader's is logged by the next grant);
//! 5. an observer's READ, run in every state reached, writes nothing and
//!    tells the state as it is: the lease's term (empty when vacant), its
//!    `PTTL`, the log's newest entry, and the entries after a given id
//!    (the first entry's), in order.

#![allow(clippy::disallowed_methods)] // Instant::now: the runs print their time

use std::time::Instant;

use super::calls::{token, Call, Names, Sources};
use super::emu::{Db, Reply, Value};
use super::search::{self, fence_of, owner_of, Counterexample, Faults, Keys, Scripts};

const START_MS: u64 = 1_700_000_000_000;
const LEASE: u64 = 100;
/// The safety poll of a waiting candidate.
const POLL: u64 = 40;

/// Which call a candidate sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Campaign,
    Renew,
    Proclaim,
    Resign,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Idle,
    Waiting,
    Leader {
        term: String,
        deadline: u64,
        /// The id of its last entry (its grant's, then its proclaim's).
        last: String,
        renewed: bool,
        proclaimed: bool,
    },
    Done,
    Dead,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Client {
    phase: Phase,
    /// A resign notice wakes it.
    wake: bool,
    next_poll: u64,
    lost: Option<(Op, u64)>,
    /// Its leadership rests on a write a restart or failover lost.
    orphaned: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    db: Db,
    clients: Vec<Client>,
    faults: Faults,
    max_term: u128,
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
}

/// The numbers of a run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Stats {
    pub(crate) states: usize,
    pub(crate) transitions: usize,
    pub(crate) depth: usize,
    /// Terms granted, proclaims logged, vacancies logged by a campaign (a
    /// lapsed leader's).
    pub(crate) terms: usize,
    pub(crate) proclaims: usize,
    pub(crate) lapses: usize,
}

fn tok(c: usize) -> String {
    token(0x100 * (c as u64 + 1))
}
/// A candidate's value, and the value it proclaims, in hex.
fn value(c: usize, proclaim: bool) -> String {
    format!("{:02x}{:02x}", 0x61 + c, if proclaim { 0x32 } else { 0x31 })
}

/// One log entry: id, `prev`, leader, value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogEntry {
    id: (u128, u64),
    prev: String,
    leader: bool,
    value: Option<String>,
}

impl LogEntry {
    fn id(&self) -> String {
        format!("{}-{}", self.id.0, self.id.1)
    }
}

/// The explorer: the scripts (maybe mutated) and the election's names.
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
                    wake: false,
                    next_poll: 0,
                    lost: None,
                    orphaned: false,
                };
                self.bounds.clients
            ],
            faults: self.bounds.faults,
            max_term: 0,
            unreplicated: Vec::new(),
        }
    }

    fn call(&self, s: &State, c: usize, op: Op) -> Call {
        let n = &self.names;
        let t = tok(c);
        match (op, &s.clients[c].phase) {
            (Op::Campaign, _) => Call::campaign(n, &t, LEASE, &value(c, false)),
            (Op::Renew, _) => Call::renew(&n.elect(), &t, LEASE),
            (Op::Proclaim, Phase::Leader { last, .. }) => {
                Call::proclaim(n, &t, &value(c, true), last)
            }
            (Op::Proclaim, _) => unreachable!("only a leader proclaims"),
            (Op::Resign, _) => Call::resign(n, &t),
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
            Phase::Idle => vec![Op::Campaign],
            Phase::Waiting if cl.wake || now >= cl.next_poll => vec![Op::Campaign],
            Phase::Leader {
                deadline,
                renewed,
                proclaimed,
                ..
            } => {
                let mut ops = vec![Op::Resign];
                if now < *deadline {
                    if !renewed {
                        ops.push(Op::Renew);
                    }
                    if !proclaimed {
                        ops.push(Op::Proclaim);
                    }
                }
                ops
            }
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
        let mut times: Vec<u64> =
            s.db.keys
                .values()
                .filter_map(|e| e.expire_at.map(|at| at + 1))
                .collect();
        for cl in &s.clients {
            match &cl.phase {
                Phase::Leader { deadline, .. } => times.push(*deadline),
                Phase::Waiting => times.push(cl.next_poll),
                _ => {}
            }
        }
        times.into_iter().filter(|t| *t > now).min()
    }

    fn lease(&self, db: &Db) -> Option<String> {
        match db.peek(&self.names.elect()).map(|e| &e.value) {
            Some(Value::Str(v)) => Some(v.clone()),
            _ => None,
        }
    }

    fn log(&self, db: &Db) -> Vec<LogEntry> {
        let Some(Value::Stream(st)) = db.peek(&self.names.elect_log()).map(|e| &e.value) else {
            return Vec::new();
        };
        st.entries
            .iter()
            .map(|(id, fields)| {
                let field = |name: &str| {
                    fields
                        .iter()
                        .find(|(f, _)| f == name)
                        .map(|(_, v)| v.clone())
                };
                LogEntry {
                    id: (u128::from(id.0), id.1),
                    prev: field("prev").unwrap_or_default(),
                    leader: field("leader").as_deref() == Some("1"),
                    value: field("value"),
                }
            })
            .collect()
    }

    /// Invariant 4 on the log as it stands.
    fn check_log(log: &[LogEntry]) -> Result<(), String> {
        let mut prev = "0-0".to_owned();
        for (i, e) in log.iter().enumerate() {
            if e.prev != prev {
                return Err(format!("entry {} links to {}, not {prev}", e.id(), e.prev));
            }
            let next = log.get(i + 1);
            let same_term_next = next.is_some_and(|n| n.id.0 == e.id.0);
            if e.id.1 == 0 && !e.leader {
                return Err(format!("entry {} opens its term with no leader", e.id()));
            }
            if e.id.1 > 0 && (i == 0 || log[i - 1].id.0 != e.id.0) {
                return Err(format!(
                    "term {} starts at {}, not its grant",
                    e.id.0,
                    e.id()
                ));
            }
            if let Some(n) = next.filter(|_| same_term_next) {
                if n.id.1 != e.id.1 + 1 {
                    return Err(format!("{} follows {}", n.id(), e.id()));
                }
                if !e.leader {
                    return Err(format!("{} follows the vacancy {}", n.id(), e.id()));
                }
            }
            if next.is_some() && !same_term_next && e.leader {
                return Err(format!(
                    "term {} ends without its vacancy ({} is its last entry)",
                    e.id.0,
                    e.id()
                ));
            }
            prev = e.id();
        }
        Ok(())
    }

    /// Applies `a` to `s`: the next state and a label, or the violation.
    fn apply(&mut self, s: &State, a: Action) -> Result<(State, String), String> {
        let mut n = s.clone();
        let now = s.db.now_ms();
        let label = match a {
            Action::Run { client, op, lose } => {
                let call = self.call(s, client, op);
                let before = self.lease(&s.db);
                let log0 = self.log(&s.db);
                search::record_run(&mut n.unreplicated, &s.db, &s.faults);
                let reply;
                (reply, n.db) = self.scripts.run(&call, n.db);
                let after = self.lease(&n.db);
                let log1 = self.log(&n.db);
                let t = tok(client);
                let short = |v: &Option<String>| {
                    v.as_deref()
                        .map_or("free".to_owned(), |v| v.get(28..).unwrap_or(v).to_owned())
                };
                let label = format!(
                    "c{client} {op:?} → {reply:?}{}; lease {} → {}; log top {} → {}",
                    if lose { " LOST" } else { "" },
                    short(&before),
                    short(&after),
                    log0.last().map_or("none".to_owned(), LogEntry::id),
                    log1.last().map_or("none".to_owned(), LogEntry::id),
                );
                if let Reply::Error(e) = &reply {
                    return Err(format!("{label}: script error {e}"));
                }
                let ours = before.as_deref().is_some_and(|v| owner_of(v) == t);
                // 2. New terms above every term before.
                let t0 = before.as_deref().and_then(fence_of);
                if let Some(t1) = after
                    .as_deref()
                    .filter(|v| Some(*v) != before.as_deref())
                    .and_then(fence_of)
                {
                    if t1 <= n.max_term && Some(t1) != t0 {
                        return Err(format!(
                            "{label}: new term {t1} is not above term {}",
                            n.max_term
                        ));
                    }
                    n.max_term = n.max_term.max(t1);
                    self.stats.terms += 1;
                }
                // 3. Replays.
                if op == Op::Campaign && ours {
                    let term = before.as_deref().and_then(|v| v.rsplit_once(':'));
                    if reply != Reply::Bulk(term.map(|(_, t)| t.to_owned()).unwrap_or_default()) {
                        return Err(format!(
                            "{label}: a campaign that found its own lease did not get its term back"
                        ));
                    }
                }
                if op == Op::Proclaim {
                    if let (Phase::Leader { last, .. }, Some(top)) =
                        (&s.clients[client].phase, log0.last())
                    {
                        let mine = top.prev == *last
                            && top.value.as_deref() == Some(unhex(&value(client, true)).as_str());
                        if ours && mine && reply != Reply::Bulk(top.id()) {
                            return Err(format!(
                                "{label}: a proclaim that found its own entry {} on top was not answered its id",
                                top.id()
                            ));
                        }
                    }
                    if reply_is_id(&reply) {
                        self.stats.proclaims += 1;
                    }
                }
                if matches!(op, Op::Proclaim | Op::Resign)
                    && !ours
                    && (before != after || log0 != log1)
                {
                    return Err(format!(
                        "{label}: a {op:?} by a token the lease does not hold changed the election"
                    ));
                }
                if op == Op::Campaign
                    && log1.len() >= log0.len() + 2
                    && log1.iter().rev().nth(1).is_some_and(|e| !e.leader)
                {
                    self.stats.lapses += 1;
                }
                // Notifications: a resign wakes the waiting candidates.
                for p in std::mem::take(&mut n.db.published) {
                    if p.message.ends_with(":r") {
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
        // 4. The log.
        Self::check_log(&self.log(&n.db)).map_err(|e| format!("{label}: {e}"))?;
        // 1. One valid leader.
        let now = n.db.now_ms();
        let valid: Vec<usize> = (0..n.clients.len())
            .filter(|c| {
                let cl = &n.clients[*c];
                matches!(cl.phase, Phase::Leader { deadline, .. } if now < deadline)
                    && !matches!(cl.lost, Some((Op::Resign, _)))
                    && !cl.orphaned
            })
            .collect();
        if valid.len() > 1 {
            return Err(format!("{label}: candidates {valid:?} all lead validly"));
        }
        Ok((n, label))
    }

    /// Marks every leader whose lease the key space no longer backs for as
    /// long as it counts: a restart or failover lost it.
    fn orphan(&self, n: &mut State) {
        let entry = n.db.peek(&self.names.elect()).cloned();
        for (c, cl) in n.clients.iter_mut().enumerate() {
            if let Phase::Leader { term, deadline, .. } = &cl.phase {
                let ours = format!("{}:{term}", tok(c));
                cl.orphaned |= !search::backs(entry.as_ref(), &ours, *deadline);
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

fn unhex(h: &str) -> String {
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_or('?', char::from))
        .collect()
}

fn reply_is_id(r: &Reply) -> bool {
    matches!(r, Reply::Bulk(id) if id.contains('-'))
}

fn answer(cl: &mut Client, op: Op, reply: Reply, first: u64, now: u64) {
    match op {
        Op::Campaign => {
            cl.wake = false;
            match reply {
                Reply::Bulk(term) => {
                    cl.orphaned = false;
                    cl.phase = Phase::Leader {
                        last: format!("{term}-0"),
                        term,
                        deadline: first + LEASE,
                        renewed: false,
                        proclaimed: false,
                    };
                }
                Reply::Array(us) => {
                    let ms = match us.first() {
                        Some(Reply::Int(us)) => (*us as u64).div_ceil(1000),
                        _ => POLL,
                    };
                    cl.phase = Phase::Waiting;
                    cl.next_poll = now + ms.clamp(1, POLL);
                }
                Reply::Int(_) => {
                    cl.phase = Phase::Waiting;
                    cl.next_poll = now + POLL;
                }
                other => panic!("campaign answered {other:?}"),
            }
        }
        Op::Renew => {
            if let Phase::Leader {
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
        Op::Proclaim => {
            if let Phase::Leader {
                deadline,
                last,
                proclaimed,
                ..
            } = &mut cl.phase
            {
                *proclaimed = true;
                match reply {
                    Reply::Bulk(id) => *last = id,
                    // The leadership is gone, or the log moved on.
                    _ => *deadline = (*deadline).min(now),
                }
            }
        }
        Op::Resign => {
            cl.orphaned = false;
            cl.phase = Phase::Done;
        }
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
        self.check_read(s).err()
    }
}

impl Explorer {
    /// Invariant 5: READ, after nothing and after the log's first entry.
    fn check_read(&mut self, s: &State) -> Result<(), String> {
        let log = self.log(&s.db);
        let term = self
            .lease(&s.db)
            .and_then(|v| v.split_once(':').map(|(_, t)| t.to_owned()))
            .unwrap_or_default();
        let now = s.db.now_ms();
        let pttl = match s.db.peek(&self.names.elect()) {
            None => -2,
            Some(e) => e.expire_at.map_or(-1, |at| (at - now) as i64),
        };
        let entry = |e: &LogEntry| {
            let mut fields = vec![Reply::Bulk("prev".to_owned()), Reply::Bulk(e.prev.clone())];
            fields.extend([
                Reply::Bulk("leader".to_owned()),
                Reply::Bulk(if e.leader { "1" } else { "0" }.to_owned()),
            ]);
            if let Some(v) = &e.value {
                fields.extend([Reply::Bulk("value".to_owned()), Reply::Bulk(v.clone())]);
            }
            (e.id(), fields)
        };
        let afters = std::iter::once(String::new()).chain(log.first().map(LogEntry::id));
        for after in afters {
            let call = Call::elect_read(&self.names, &after);
            let (reply, db) = self.scripts.run(&call, s.db.clone());
            if db != s.db {
                return Err(format!("READ after {after:?} wrote to the key space"));
            }
            let Reply::Array(r) = &reply else {
                return Err(format!("READ answered {reply:?}"));
            };
            let top_ok = match (r.get(2), log.last()) {
                (Some(Reply::Nil), None) => true,
                (Some(Reply::Array(t)), Some(last)) => {
                    let (id, fields) = entry(last);
                    *t == [Reply::Bulk(id), Reply::Array(fields)]
                }
                _ => false,
            };
            let ids: Vec<Reply> = match r.get(3) {
                Some(Reply::Array(es)) => es
                    .iter()
                    .filter_map(|e| match e {
                        Reply::Array(e) => e.first().cloned(),
                        _ => None,
                    })
                    .collect(),
                _ => return Err(format!("READ's entries: {reply:?}")),
            };
            let want: Vec<Reply> = if after.is_empty() {
                Vec::new()
            } else {
                log.iter()
                    .skip(1)
                    .take(64)
                    .map(|e| Reply::Bulk(e.id()))
                    .collect()
            };
            if r.first() != Some(&Reply::Bulk(term.clone()))
                || r.get(1) != Some(&Reply::Int(pttl))
                || !top_ok
                || ids != want
            {
                return Err(format!(
                    "READ after {after:?} answered {reply:?}: term {term:?}, pttl {pttl}, \
                     log {:?}",
                    log.iter().map(LogEntry::id).collect::<Vec<_>>()
                ));
            }
        }
        Ok(())
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
        // Candidates do not register: nothing to give up.
        false
    }

    fn lose_notices(&mut self) {
        self.wake = false;
    }

    fn die(&mut self) {
        (self.phase, self.lost) = (Phase::Dead, None);
    }

    fn give_up(&mut self) {
        unreachable!("candidates never give up")
    }
}

/// The CI-sized bounds for `clients` candidates (depth `ci`), every fault
/// once, or the depth `REDLEASE_MODEL_DEPTH`.
pub(crate) fn bounds(clients: usize, ci: usize) -> Bounds {
    Bounds {
        clients,
        depth: std::env::var("REDLEASE_MODEL_DEPTH")
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(ci),
        faults: Faults {
            give_up: 0,
            ..Faults::one_of_each()
        },
    }
}

fn explore(name: &str, sources: Sources, b: Bounds) -> Result<Stats, Counterexample> {
    let started = Instant::now();
    let result = Explorer::new(sources, b).run();
    match &result {
        Ok(st) => println!(
            "{name}: {} candidates, depth {}: {} states, {} transitions \
             ({} terms, {} proclaims, {} lapses logged), {:.1?}",
            b.clients,
            st.depth,
            st.states,
            st.transitions,
            st.terms,
            st.proclaims,
            st.lapses,
            started.elapsed()
        ),
        Err(cx) => println!(
            "{name}: {} candidates, depth bound {}: counterexample after {:.1?}\n{cx}",
            b.clients,
            b.depth,
            started.elapsed()
        ),
    }
    result
}

#[test]
fn election_holds_for_two_candidates() {
    match explore("election, real scripts", Sources::real(), bounds(2, 7)) {
        Err(cx) => panic!("{cx}"),
        Ok(st) => assert!(
            st.terms > 0 && st.proclaims > 0 && st.lapses > 0,
            "a path was never reached: {st:?}"
        ),
    }
}

#[test]
fn election_holds_for_three_candidates() {
    if let Err(cx) = explore("election, real scripts", Sources::real(), bounds(3, 5)) {
        panic!("{cx}");
    }
}

fn mutated(name: &str, mutate: impl FnOnce(&mut Sources)) -> Counterexample {
    let mut sources = Sources::real();
    mutate(&mut sources);
    match explore(name, sources, bounds(2, 8)) {
        Ok(st) => panic!("{name}: not caught in {} states", st.states),
        Err(cx) => cx,
    }
}

#[test]
fn mutation_campaign_without_time_floor_is_caught() {
    let cx = mutated("mutation: campaign without the TIME floor", |s| {
        s.mutate("CAMPAIGN_LUA", "math.max(last + 1, floor)", "last + 1", 1);
    });
    assert!(cx.invariant.contains("term"), "{cx}");
}

#[test]
fn mutation_campaign_without_the_lapsed_vacancy_is_caught() {
    let cx = mutated("mutation: a grant past a lapsed leader", |s| {
        s.mutate(
            "CAMPAIGN_LUA",
            "  if top and top.leader then",
            "  if false then",
            1,
        );
    });
    assert!(cx.invariant.contains("without its vacancy"), "{cx}");
}

#[test]
fn mutation_proclaim_without_replay_branch_is_caught() {
    let cx = mutated("mutation: proclaim without its replay", |s| {
        s.mutate(
            "PROCLAIM_LUA",
            "if top.prev == ARGV[3] and top.value == value then",
            "if false then",
            1,
        );
    });
    assert!(cx.invariant.contains("its id"), "{cx}");
}

#[test]
fn mutation_read_including_its_after_entry_is_caught() {
    // READ's range starts at the entry it was given, not after it: an
    // observer would see that entry twice.
    let cx = mutated("mutation: a read from its after entry on", |s| {
        s.mutate("ELECT_READ_LUA", "'(' .. ARGV[1]", "ARGV[1]", 1);
    });
    assert!(cx.invariant.contains("READ after"), "{cx}");
}
