//! `check_line`: the per-key FIFO lines and wait decisions against a
//! reference model of the core, driven the way a front end drives it.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use redis::Value;

use crate::core::core::{
    AttemptSummary, Core, CoreEvent, LeaseId, SubscriberStep, WaiterStep, FAILURE_BACKOFF,
};
use crate::core::election::ElectNames;
use crate::core::lease::RenewResult;
use crate::core::line::WaiterId;
use crate::core::names::{KeyId, LockNames, OwnerToken, Want};
use crate::core::outcome::{Fence, ReleaseOutcome};
use crate::core::script::{ScriptCall, ScriptKind};
use crate::core::subscription::{RESUBSCRIBE_AFTER, SUBSCRIPTION_LINGER};
use crate::error::{Error, Failure, Operation};

use super::{
    choose, clock_reading, command_args, fuzz_config, ms, new_core, options, releases, Input,
};

/// The names waited for: three locks and an election's candidates.
const KEYS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];
/// The key whose line is an election's candidates (`Want::Leader`).
const CANDIDATE: usize = 3;
/// The elections observed: one named as a lock is, and the candidates'.
const OBSERVED: [usize; 2] = [2, CANDIDATE];
const MAX_WAITERS: usize = 8;
const MAX_LEASES: usize = 5;
const LEASE_MS: u64 = 10_000;
/// The fuzz config's command timeout (the default).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// Operations per case: enough for long lines, short enough for speed.
const MAX_OPS: usize = 400;

#[derive(Debug, Clone, Copy)]
enum Reply {
    Acquired,
    Busy(i64),
    BusyUnknown,
    /// A campaign's busy reply timed to the microsecond (`{us}`); a lock's
    /// attempt gets the same time as a plain busy reply in milliseconds.
    BusyUs(u64),
    TimedOut,
    ServerError,
    NotSent,
    Unexpected,
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "t"))
}

fn server_error_reply() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Extension, "OOM", "x".to_string()))
}

impl Reply {
    fn decode(input: &mut Input<'_>) -> Self {
        match input.byte() % 16 {
            0..=3 => Reply::Acquired,
            4..=7 => Reply::Busy(i64::from(input.u16() % 3002) - 2),
            8 => Reply::Busy(0),
            9 => Reply::Busy((input.u64() >> 1) as i64),
            10 => Reply::BusyUnknown,
            11 => Reply::TimedOut,
            12 => Reply::ServerError,
            13 => Reply::NotSent,
            14 => Reply::Unexpected,
            _ => Reply::BusyUs(u64::from(input.u16()) * 50),
        }
    }

    fn value(self, fence: u64) -> Result<Value, Failure> {
        match self {
            Reply::Acquired => Ok(Value::BulkString(fence.to_string().into_bytes())),
            Reply::Busy(n) => Ok(Value::Int(n)),
            Reply::BusyUnknown => Ok(Value::Nil),
            Reply::BusyUs(us) => Ok(Value::Array(vec![Value::Int(us as i64)])),
            Reply::TimedOut => Err(Failure::Sent(timed_out())),
            Reply::ServerError => Err(Failure::Sent(server_error_reply())),
            Reply::NotSent => Err(Failure::NotSent(timed_out())),
            Reply::Unexpected => Ok(Value::Okay),
        }
    }

    /// `Some(holder's remaining time)` for a busy reply.
    fn busy_remaining(self) -> Option<Option<Duration>> {
        match self {
            Reply::Busy(n) if n >= 0 => Some(Some(ms(n.unsigned_abs()))),
            Reply::Busy(_) | Reply::BusyUnknown => Some(None),
            Reply::BusyUs(us) => Some(Some(Duration::from_micros(us))),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum OutcomeReply {
    Int(i64),
    TimedOut,
    ServerError,
    NotSent,
}

impl OutcomeReply {
    fn decode(input: &mut Input<'_>) -> Self {
        match input.byte() % 8 {
            n @ 0..=4 => OutcomeReply::Int(i64::from(n)),
            5 => OutcomeReply::TimedOut,
            6 => OutcomeReply::ServerError,
            _ => OutcomeReply::NotSent,
        }
    }

    fn value(self) -> Result<Value, Failure> {
        match self {
            OutcomeReply::Int(n) => Ok(Value::Int(n)),
            OutcomeReply::TimedOut => Err(Failure::Sent(timed_out())),
            OutcomeReply::ServerError => Err(Failure::Sent(server_error_reply())),
            OutcomeReply::NotSent => Err(Failure::NotSent(timed_out())),
        }
    }

    /// The error code a failed release or renew must report.
    fn failure_code(self) -> Option<&'static str> {
        match self {
            OutcomeReply::Int(0..=2) => None,
            OutcomeReply::Int(_) | OutcomeReply::TimedOut => Some("OUTCOME_UNKNOWN"),
            OutcomeReply::ServerError | OutcomeReply::NotSent => Some("PROVIDER_FAILED"),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        key: usize,
        wait: Duration,
    },
    /// An attempt in flight is answered; with `defer`, its waiter polls
    /// only later (its thread ran between the two calls into the core).
    Reply {
        pick: u8,
        reply: Reply,
        defer: bool,
    },
    /// A waiter whose reply was handled polls at last.
    Take(u8),
    Advance(Duration),
    Cancel(u8),
    Abandon {
        pick: u8,
        late: Reply,
    },
    /// A notification about `key`: for an election (`form` 1..=3) a
    /// vacancy, a new leader or a new value, else a release.
    Notify {
        key: usize,
        form: u8,
    },
    /// An observer of the election `OBSERVED[..]` starts.
    Observe(usize),
    /// An observer stops.
    Unobserve(u8),
    /// An observer of an observed name claims the read; one already in
    /// flight there is answered (`end` even: failed) or abandoned.
    ObserverRead {
        pick: u8,
        end: u8,
    },
    NotifyGarbage(Vec<u8>),
    Subscribed,
    SubscriptionFailed,
    SubscriberLost,
    PollSubscriber,
    GiveUp(u8),
    Release {
        pick: u8,
        reply: OutcomeReply,
    },
    Renew {
        pick: u8,
        reply: OutcomeReply,
    },
    AbandonLease(u8),
    TakeOrphans,
    Shutdown,
    /// Shutdown's cleanup (only once shutting down).
    Cleanup,
}

impl Op {
    fn decode(input: &mut Input<'_>) -> Self {
        // Weights out of 256, most for the operations that move lines.
        match input.byte() {
            0..=47 => Op::Join {
                key: input.below(KEYS.len()),
                wait: match input.byte() % 8 {
                    0 => Duration::ZERO,
                    1 => Duration::MAX,
                    _ => ms(1 + u64::from(input.u16()) % 3000),
                },
            },
            48..=89 => Op::Reply {
                pick: input.byte(),
                reply: Reply::decode(input),
                defer: input.byte() % 10 < 3,
            },
            90..=95 => Op::ObserverRead {
                pick: input.byte(),
                end: input.byte(),
            },
            96..=105 => Op::Take(input.byte()),
            106..=133 => Op::Advance(match input.byte() % 8 {
                0 => ms(900 + u64::from(input.u16()) % 6100),
                1 => Duration::from_nanos(u64::from(input.u16())),
                _ => ms(u64::from(input.u16()) % 400),
            }),
            134..=137 => Op::Observe(OBSERVED[input.below(OBSERVED.len())]),
            138..=141 => Op::Unobserve(input.byte()),
            142..=151 => Op::Cancel(input.byte()),
            152..=158 => Op::Abandon {
                pick: input.byte(),
                late: Reply::decode(input),
            },
            159..=173 => Op::Notify {
                key: input.below(KEYS.len()),
                form: input.byte() % 4,
            },
            174..=177 => Op::NotifyGarbage(garbage(input)),
            178..=184 => Op::Subscribed,
            185..=188 => Op::SubscriptionFailed,
            189..=192 => Op::SubscriberLost,
            193..=195 => Op::SubscriberLost,
            196..=202 => Op::PollSubscriber,
            203..=209 => Op::GiveUp(input.byte()),
            210..=227 => Op::Release {
                pick: input.byte(),
                reply: OutcomeReply::decode(input),
            },
            228..=238 => Op::Renew {
                pick: input.byte(),
                reply: OutcomeReply::decode(input),
            },
            239..=241 => Op::AbandonLease(input.byte()),
            242..=245 => Op::TakeOrphans,
            246..=247 => Op::Shutdown,
            _ => Op::Cleanup,
        }
    }
}

/// Notification payloads that name no waiting key: random bytes, random
/// hex, and near misses of the keys' hex (uppercase, short, long).
fn garbage(input: &mut Input<'_>) -> Vec<u8> {
    let hex = |k: usize| KeyId::of(KEYS[k]).to_hex();
    match input.byte() % 5 {
        0 => {
            let n = input.below(70);
            input.bytes(n).to_vec()
        }
        1 => (0..64)
            .map(|_| b"0123456789abcdef"[usize::from(input.byte() % 16)])
            .collect(),
        2 => hex(input.below(KEYS.len())).to_uppercase().into_bytes(),
        3 => hex(input.below(KEYS.len())).as_bytes()[1..].to_vec(),
        _ => format!("{}0", hex(input.below(KEYS.len()))).into_bytes(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    Off,
    Starting,
    Active,
    Unavailable,
}

/// What a waiter's stored outcome must be when its waiter takes it.
#[derive(Debug, Clone, Copy)]
enum Settled {
    Granted {
        fence: u64,
        submitted: Instant,
        /// Shutdown's cleanup released its token before it was taken.
        cleaned: bool,
    },
    ShuttingDown,
    TooManyLeases,
    OutcomeUnknown,
    UnexpectedReply,
    ProviderFailed,
    Busy(Option<Duration>),
}

/// One waiter as the model (and the front end driving it) sees it.
#[derive(Debug)]
struct ModelWaiter {
    seq: u64,
    key: usize,
    token: OwnerToken,
    started: Instant,
    deadline: Option<Instant>,
    try_once: bool,
    cancelled: bool,
    /// The submission instant of the attempt in flight.
    in_flight: Option<Instant>,
    /// The timer set from the last `Wait`.
    timer: Option<Instant>,
    /// The outcome the core stored for it, not taken yet.
    settled: Option<Settled>,
    /// Attempts sent: a wait of any length makes at least one.
    attempts: u32,
    /// The last attempt's failure while the waiter keeps waiting (its
    /// code, and since when the outcome is unknown), and when it retries.
    failure: Option<(&'static str, Option<Instant>)>,
    retry_at: Option<Instant>,
    failures: usize,
}

/// The core under test, a front end's driving loop around it, and the
/// reference model the core is checked against.
struct Harness {
    core: Core,
    now: Instant,
    poll: Duration,
    notify: Duration,
    waiters: BTreeMap<WaiterId, ModelWaiter>,
    lines: [VecDeque<WaiterId>; KEYS.len()],
    /// A notification (or a reason to check again) arrived while the key's
    /// head had its attempt in flight.
    notified: [bool; KEYS.len()],
    holder_until: [Option<Instant>; KEYS.len()],
    /// The arrival number of the last waiter granted each key.
    last_granted: [Option<u64>; KEYS.len()],
    /// Until when a key's line settles behind an abandoned attempt.
    settling: [Option<Instant>; KEYS.len()],
    held: Vec<(LeaseId, OwnerToken)>,
    /// Leases whose tokens shutdown's cleanup released.
    cleaned: Vec<LeaseId>,
    orphans: Vec<OwnerToken>,
    sub: Sub,
    subscriber_running: bool,
    /// A head was left waiting behind the locker's own grant while the
    /// subscriber was off: it starts now.
    start_behind_own_grant: bool,
    idle_since: Option<Instant>,
    shutting_down: bool,
    next_seq: u64,
    next_fence: u64,
    joined: usize,
    /// How each waiter that ended, ended.
    ended: HashMap<u64, &'static str>,
    /// Live observers per observed name, the changes announced to them
    /// since the first one started, and whether one's read is in flight.
    observers: [usize; KEYS.len()],
    changes: [u64; KEYS.len()],
    reading: [bool; KEYS.len()],
}

fn token_of(seq: u64) -> OwnerToken {
    let mut bytes = [0x5a; 16];
    bytes[..8].copy_from_slice(&seq.to_be_bytes());
    OwnerToken::from_bytes(bytes)
}

/// Each token is released by exactly one of the calls, and nothing else is.
#[track_caller]
fn assert_releases_exactly(calls: &[ScriptCall], tokens: &[OwnerToken]) {
    assert_eq!(calls.len(), tokens.len(), "one release per token");
    for t in tokens {
        assert_eq!(calls.iter().filter(|c| releases(c, *t)).count(), 1);
    }
}

fn drain(core: &mut Core) -> Vec<CoreEvent> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

impl Harness {
    fn new(poll: Duration, notify: Duration) -> Self {
        let now = clock_reading();
        let config = fuzz_config()
            .poll_interval(poll)
            .notify_poll_interval(notify)
            .max_waiters(MAX_WAITERS)
            .max_tracked_leases(MAX_LEASES);
        Harness {
            core: new_core(&config, now),
            now,
            poll,
            notify,
            waiters: BTreeMap::new(),
            lines: Default::default(),
            notified: [false; KEYS.len()],
            holder_until: [None; KEYS.len()],
            last_granted: [None; KEYS.len()],
            settling: [None; KEYS.len()],
            held: Vec::new(),
            cleaned: Vec::new(),
            orphans: Vec::new(),
            sub: Sub::Off,
            subscriber_running: false,
            start_behind_own_grant: false,
            idle_since: Some(now),
            shutting_down: false,
            next_seq: 0,
            next_fence: 1,
            joined: 0,
            ended: HashMap::new(),
            observers: [0; KEYS.len()],
            changes: [0; KEYS.len()],
            reading: [false; KEYS.len()],
        }
    }

    /// Whether anyone listens for notifications: a waiter or an observer.
    fn has_listeners(&self) -> bool {
        !self.waiters.is_empty() || self.observers.iter().any(|n| *n > 0)
    }

    /// The first listener after an idle spell: a refused subscription is
    /// tried again once the spell was long.
    fn first_listener(&mut self) {
        let idle_long = self
            .idle_since
            .is_some_and(|t| self.now.saturating_duration_since(t) >= RESUBSCRIBE_AFTER);
        if self.sub == Sub::Unavailable && idle_long {
            self.sub = Sub::Off;
        }
        self.idle_since = None;
    }

    fn safety(&self) -> Duration {
        if self.sub == Sub::Active {
            self.notify
        } else {
            self.poll
        }
    }

    fn ids_where(&self, f: impl Fn(&ModelWaiter) -> bool) -> Vec<WaiterId> {
        self.waiters
            .iter()
            .filter(|(_, w)| f(w))
            .map(|(id, _)| *id)
            .collect()
    }

    fn in_flight(&self) -> Vec<WaiterId> {
        self.ids_where(|w| w.in_flight.is_some())
    }

    fn is_settled(&self, id: &WaiterId) -> bool {
        self.waiters.get(id).is_some_and(|w| w.settled.is_some())
    }

    /// Whether `key`'s line still settles behind an abandoned attempt.
    fn is_settling(&self, key: usize) -> bool {
        self.settling[key].is_some_and(|u| self.now < u)
    }

    /// The latest a head of `key` may be told to wait until.
    fn head_bound(&self, w: &ModelWaiter) -> Instant {
        let mut bound = self.now + self.safety();
        if let Some(at) = w.retry_at {
            bound = bound.max(at);
        }
        if let Some(u) = self.settling[w.key].filter(|_| self.is_settling(w.key)) {
            bound = bound.max(u);
        }
        bound
    }

    fn key_in_flight(&self, key: usize) -> bool {
        self.waiters
            .values()
            .any(|w| w.key == key && w.in_flight.is_some())
    }

    /// Tokens of grants the core tracks that their waiters did not take yet.
    fn untaken_grants(&self) -> Vec<OwnerToken> {
        self.waiters
            .values()
            .filter(|w| matches!(w.settled, Some(Settled::Granted { cleaned: false, .. })))
            .map(|w| w.token)
            .collect()
    }

    /// Leases the core tracks, taken by their waiters or not.
    fn tracked(&self) -> usize {
        self.held.len() + self.untaken_grants().len()
    }

    /// The head of `key`'s line when it is neither talking to Redis nor
    /// holding an untaken outcome: it is backing off.
    fn backing_off_head(&self, key: usize) -> Option<WaiterId> {
        self.lines[key].front().copied().filter(|h| {
            let w = &self.waiters[h];
            w.in_flight.is_none() && w.settled.is_none() && !self.is_settling(key)
        })
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Join { key, wait } => self.join(*key, *wait),
            Op::Reply { pick, reply, defer } => {
                if let Some(id) = choose(*pick, &self.in_flight()) {
                    self.reply_to(id, *reply, *defer);
                    self.settle();
                }
            }
            Op::Take(pick) => {
                let settled = self.ids_where(|w| w.settled.is_some());
                if let Some(id) = choose(*pick, &settled) {
                    self.take(id);
                    self.settle();
                }
            }
            Op::Advance(d) => {
                self.now += *d;
                self.fire_timers();
            }
            Op::Cancel(pick) => self.cancel(*pick),
            Op::Abandon { pick, late } => self.abandon(*pick, *late),
            Op::Notify { key, form } => self.notify(*key, *form),
            Op::Observe(key) => self.observe(*key),
            Op::Unobserve(pick) => self.unobserve(*pick),
            Op::ObserverRead { pick, end } => self.observer_read(*pick, *end),
            Op::NotifyGarbage(payload) => self.notify_garbage(payload),
            Op::Subscribed => self.subscribed(),
            Op::SubscriptionFailed => self.subscription_failed(),
            Op::SubscriberLost => {
                if self.subscriber_running {
                    self.core.handle_subscriber_lost(self.now);
                    if self.sub == Sub::Active {
                        self.sub = Sub::Starting;
                    }
                    self.settle();
                }
            }
            Op::PollSubscriber => self.poll_subscriber(),
            Op::GiveUp(pick) => self.give_up(*pick),
            Op::Release { pick, reply } => self.release(*pick, *reply),
            Op::Renew { pick, reply } => self.renew(*pick, *reply),
            Op::AbandonLease(pick) => {
                if !self.held.is_empty() {
                    let i = usize::from(*pick) % self.held.len();
                    let (lease, token) = self.held.swap_remove(i);
                    self.core.abandon_lease(lease);
                    self.orphans.push(token);
                    assert!(self.core.release_call(lease).is_err());
                    // The key's head, if any, is woken to release it.
                    self.settle();
                }
            }
            Op::TakeOrphans => {
                let calls = self.core.take_orphans();
                assert_releases_exactly(&calls, &self.orphans);
                self.orphans.clear();
            }
            Op::Shutdown => {
                self.core.begin_shutdown();
                self.shutting_down = true;
                self.settle();
                assert!(
                    self.waiters
                        .values()
                        .all(|w| w.in_flight.is_some() || w.settled.is_some()),
                    "shutdown ends every wait"
                );
            }
            Op::Cleanup => {
                if self.shutting_down {
                    self.cleanup();
                }
            }
        }
        self.check();
    }

    // ----- the front end's loop -------------------------------------------

    /// Handles every queued event: a woken waiter is polled.
    fn settle(&mut self) {
        while let Some(event) = self.core.poll_event() {
            self.handle(event);
        }
    }

    fn handle(&mut self, event: CoreEvent) {
        match event {
            // A waiter between its reply and its next poll is not
            // listening; it polls when its thread resumes.
            CoreEvent::Wake(id) if self.is_settled(&id) => {}
            CoreEvent::Wake(id) => self.poll(id),
            // A busy reply's start is checked with its reply; this one is
            // a head left waiting behind the locker's own grant (the crate docs' "How it works").
            CoreEvent::StartSubscriber => {
                assert!(
                    std::mem::take(&mut self.start_behind_own_grant),
                    "only a busy reply or a head behind its locker's grant starts the subscriber"
                );
                assert_eq!(self.sub, Sub::Off);
                self.sub = Sub::Starting;
                self.subscriber_running = true;
            }
        }
    }

    /// Polls every waiter whose timer is due, earliest first.
    fn fire_timers(&mut self) {
        loop {
            let due = self
                .waiters
                .iter()
                .filter_map(|(id, w)| w.timer.filter(|t| *t <= self.now).map(|t| (t, *id)))
                .min();
            let Some((_, id)) = due else {
                break;
            };
            self.poll(id);
            self.settle();
        }
    }

    /// Polls a waiter that has no stored outcome and checks the step
    /// against the model.
    fn poll(&mut self, id: WaiterId) {
        let now = self.now;
        let Some(w) = self.waiters.get(&id) else {
            let before = self.core.counts();
            let step = self.core.poll_waiter(now, id);
            assert!(
                matches!(step, WaiterStep::Done(Err(Error::Cancelled))),
                "a stale id: {step:?}"
            );
            assert_eq!(self.core.counts(), before, "a stale id changes nothing");
            return;
        };
        assert!(w.settled.is_none(), "a settled waiter is taken, not polled");
        let (key, started, in_flight) = (w.key, w.started, w.in_flight.is_some());
        let is_head = self.lines[key].front() == Some(&id);
        let expected_end = if w.cancelled {
            Some("CANCELLED")
        } else if self.shutting_down {
            Some("SHUTTING_DOWN")
        } else if !w.try_once
            && w.deadline.is_some_and(|d| now >= d)
            && (w.attempts > 0 || !is_head)
        {
            Some(w.failure.map_or("WAIT_TIMEOUT", |(code, _)| code))
        } else {
            None
        };
        let orphaned =
            expected_end.is_some() && !in_flight && matches!(w.failure, Some((_, Some(_))));
        let step = self.core.poll_waiter(now, id);
        if in_flight {
            assert!(
                matches!(step, WaiterStep::Wait(None)),
                "an attempt in flight waits for its reply: {step:?}"
            );
            return;
        }
        match step {
            WaiterStep::Done(Ok(grant)) => panic!("a grant without an acquired reply: {grant:?}"),
            WaiterStep::Done(Err(e)) => {
                assert_eq!(Some(e.code()), expected_end, "{e:?}");
                if let Error::WaitTimeout { waited, remaining } = &e {
                    assert_eq!(*waited, now - started);
                    let holder = self.holder_until[key].map(|u| u.saturating_duration_since(now));
                    assert_eq!(*remaining, holder);
                }
                if orphaned {
                    // Its last attempt's outcome stayed unknown.
                    let token = self.waiters[&id].token;
                    self.orphans.push(token);
                }
                self.finish(id, e.code());
            }
            WaiterStep::Attempt(call) => {
                assert_eq!(expected_end, None);
                self.attempted(id, &call);
            }
            WaiterStep::Wait(at) => {
                assert_eq!(expected_end, None);
                self.waited(id, at);
            }
        }
    }

    fn attempted(&mut self, id: WaiterId, call: &ScriptCall) {
        let w = &self.waiters[&id];
        let key = w.key;
        let args = command_args(&call.evalsha());
        // The token follows the keys: a lock and its counter, or an
        // election's lease, term counter and log.
        let (kind, name, token_at) = if key == CANDIDATE {
            let names = ElectNames::new("fuzz", KeyId::of(KEYS[key]));
            (ScriptKind::Campaign, names.lease, 6)
        } else {
            let names = LockNames::new("fuzz", KeyId::of(KEYS[key]));
            (ScriptKind::Acquire, names.lock, 5)
        };
        assert_eq!(call.kind, kind);
        assert_eq!(
            args.get(token_at),
            Some(&w.token.to_hex().into_bytes()),
            "its own token"
        );
        assert_eq!(args.get(3), Some(&name.into_bytes()), "its own key");
        assert_eq!(self.lines[key].front(), Some(&id), "only the head attempts");
        assert!(!self.key_in_flight(key), "one attempt per key at a time");
        assert!(
            !self.is_settling(key),
            "no attempt while an abandoned one may still be answered"
        );
        self.settling[key] = None;
        let now = self.now;
        let w = self.waiters.get_mut(&id).expect("present");
        w.in_flight = Some(now);
        w.timer = None;
        w.attempts += 1;
        w.retry_at = None;
        self.notified[key] = false;
    }

    fn waited(&mut self, id: WaiterId, at: Option<Instant>) {
        let (now, safety) = (self.now, self.safety());
        let w = &self.waiters[&id];
        if let Some(at) = at {
            assert!(at > now, "a wait that ends in the past would spin");
        }
        if let Some(deadline) = w.deadline.filter(|d| *d > now) {
            let at = at.expect("a bounded waiter gets a wake-up time");
            assert!(at <= deadline, "no wait beyond the waiter's deadline");
        }
        if self.lines[w.key].front() == Some(&id) {
            let at = at.expect("a backing-off head has a retry time");
            let _ = safety;
            assert!(
                at <= self.head_bound(w),
                "the head retries within the safety interval (or its backoff)"
            );
        } else {
            assert_eq!(at, w.deadline, "behind the head: wait for the deadline");
        }
        self.waiters.get_mut(&id).expect("present").timer = at;
    }

    fn finish(&mut self, id: WaiterId, how: &'static str) {
        let w = self
            .waiters
            .remove(&id)
            .expect("finishing a present waiter");
        assert!(w.in_flight.is_none() && w.settled.is_none());
        assert!(
            self.ended.insert(w.seq, how).is_none(),
            "a waiter ended twice"
        );
        let line = &mut self.lines[w.key];
        let pos = line.iter().position(|x| *x == id).expect("in its line");
        line.remove(pos);
        if line.is_empty() {
            self.holder_until[w.key] = None;
            self.notified[w.key] = false;
        } else if pos == 0 && how == "GRANTED" {
            // The locker itself holds the key now: the next head backs off
            // as behind a busy reply that reported the whole lease, and
            // really waits: the subscriber starts if it is off.
            self.holder_until[w.key] = self.now.checked_add(ms(LEASE_MS));
            self.notified[w.key] = false;
            self.start_behind_own_grant = self.sub == Sub::Off && !self.shutting_down;
        }
        if !self.has_listeners() {
            self.idle_since = Some(self.now);
        }
    }

    // ----- operations -----------------------------------------------------

    fn join(&mut self, key: usize, wait: Duration) {
        let now = self.now;
        let seq = self.next_seq;
        self.next_seq += 1;
        let token = token_of(seq);
        let try_once = wait.is_zero();
        let want = if key == CANDIDATE {
            Want::Leader
        } else {
            Want::Lock
        };
        let options = options(wait, LEASE_MS);
        let result = self.core.acquire_for(now, KEYS[key], want, token, options);
        if self.shutting_down {
            assert!(matches!(result, Err(Error::ShuttingDown)), "{result:?}");
            return;
        }
        if self.waiters.len() >= MAX_WAITERS {
            assert!(
                matches!(result, Err(Error::QueueFull { limit: MAX_WAITERS })),
                "{result:?}"
            );
            return;
        }
        if self.tracked() >= MAX_LEASES {
            assert!(
                matches!(result, Err(Error::TooManyLeases { limit: MAX_LEASES })),
                "{result:?}"
            );
            return;
        }
        if try_once && !self.lines[key].is_empty() {
            let holder = self.holder_until[key].map(|u| u.saturating_duration_since(now));
            match result {
                Err(Error::Busy { remaining }) => assert_eq!(remaining, holder),
                other => panic!("a try-once never joins a line: {other:?}"),
            }
            return;
        }
        let id = result.expect("admitted");
        assert!(
            !self.waiters.contains_key(&id),
            "a live id handed out twice"
        );
        if !self.has_listeners() {
            self.first_listener();
        }
        self.joined += 1;
        self.waiters.insert(
            id,
            ModelWaiter {
                seq,
                key,
                token,
                started: now,
                deadline: now.checked_add(wait),
                try_once,
                cancelled: false,
                in_flight: None,
                timer: None,
                settled: None,
                attempts: 0,
                failure: None,
                retry_at: None,
                failures: 0,
            },
        );
        self.lines[key].push_back(id);
        let first = self.lines[key].len() == 1 && !self.is_settling(key);
        self.poll(id);
        self.settle();
        if first {
            assert!(
                self.waiters[&id].in_flight.is_some(),
                "a waiter joining an empty line tries at once"
            );
        }
    }

    /// Delivers the reply of `id`'s attempt. A busy reply of a waiting
    /// acquire is followed by its poll at once; every other reply stores an
    /// outcome, which the waiter takes now or, with `defer`, later.
    fn reply_to(&mut self, id: WaiterId, reply: Reply, defer: bool) {
        let now = self.now;
        let fence = self.next_fence;
        self.next_fence += 1;
        let safety = self.safety();
        let w = self.waiters.get_mut(&id).expect("present");
        let submitted = w.in_flight.take().expect("an attempt in flight");
        let (key, seq, token, try_once) = (w.key, w.seq, w.token, w.try_once);
        let reply = match reply {
            Reply::BusyUs(us) if key != CANDIDATE => Reply::Busy((us / 1000) as i64),
            other => other,
        };
        // A campaign's busy reply times its retry (docs/PROTOCOL.md §7).
        let timed_retry = match reply {
            Reply::BusyUs(us) => Some(campaign_retry(submitted, now, Duration::from_micros(us))),
            _ => None,
        };
        let busy = reply.busy_remaining();
        let expect_start =
            busy.is_some() && !try_once && self.sub == Sub::Off && !self.shutting_down;
        let unsettled_since = match w.failure {
            Some((_, since @ Some(_))) => since,
            _ => None,
        };
        let unsettled_before = unsettled_since.is_some();
        let failure = match reply {
            Reply::TimedOut | Reply::Unexpected => {
                Some(("OUTCOME_UNKNOWN", unsettled_since.or(Some(submitted))))
            }
            Reply::ServerError | Reply::NotSent => Some(("PROVIDER_FAILED", unsettled_since)),
            _ => None,
        };
        // the crate docs' "How it works": waiting survives faults.
        let retrying = failure.is_some()
            && !try_once
            && !w.cancelled
            && !self.shutting_down
            && w.deadline.is_none_or(|d| now < d);

        let summary = self.core.handle_acquire_reply(now, id, reply.value(fence));
        let expected_summary = match reply {
            Reply::Acquired => AttemptSummary::Acquired,
            Reply::Busy(_) | Reply::BusyUnknown | Reply::BusyUs(_) => AttemptSummary::Busy,
            _ if retrying => AttemptSummary::Retrying,
            _ => AttemptSummary::Failed,
        };
        assert_eq!(summary, expected_summary);
        if retrying {
            assert!(drain(&mut self.core).is_empty(), "a retry moves nobody");
            self.notified[key] = false;
            let w = self.waiters.get_mut(&id).expect("present");
            let delay = FAILURE_BACKOFF[w.failures.min(FAILURE_BACKOFF.len() - 1)];
            w.failures += 1;
            w.failure = failure;
            w.retry_at = Some(now + delay);
            let expected = w.deadline.map_or(now + delay, |d| d.min(now + delay));
            match self.core.poll_waiter(now, id) {
                WaiterStep::Wait(at) => {
                    assert_eq!(at, Some(expected), "it retries after the backoff");
                    self.waited(id, at);
                }
                other => panic!("a retrying waiter waits for its backoff: {other:?}"),
            }
            return;
        }
        // Any other reply ends the failure streak: a settled reply shows
        // the earlier unknown attempt left nothing, a final failure
        // accounts for it below.
        let w = self.waiters.get_mut(&id).expect("present");
        w.failure = None;
        if busy.is_some() {
            w.failures = 0;
        }

        let events = drain(&mut self.core);
        if expect_start {
            assert_eq!(events, vec![CoreEvent::StartSubscriber]);
            assert!(!self.subscriber_running);
            self.sub = Sub::Starting;
            self.subscriber_running = true;
        } else {
            assert!(events.is_empty(), "{events:?}");
        }
        let notified = std::mem::take(&mut self.notified[key]);
        self.holder_until[key] = busy.flatten().and_then(|r| now.checked_add(r));

        let settled = match (busy, reply) {
            (Some(remaining), _) if try_once => Settled::Busy(remaining),
            (Some(remaining), _) => {
                self.poll_after_busy(id, remaining, timed_retry, notified, safety);
                return;
            }
            (None, Reply::Acquired) if self.shutting_down => {
                self.orphans.push(token);
                Settled::ShuttingDown
            }
            (None, Reply::Acquired) if self.tracked() >= MAX_LEASES => {
                self.orphans.push(token);
                Settled::TooManyLeases
            }
            (None, Reply::Acquired) => {
                assert_eq!(self.lines[key].front(), Some(&id));
                assert!(
                    self.last_granted[key] < Some(seq),
                    "grants in arrival order"
                );
                self.last_granted[key] = Some(seq);
                // A re-sent attempt's grant counts from the first send
                // whose outcome was unknown.
                Settled::Granted {
                    fence,
                    submitted: unsettled_since.unwrap_or(submitted),
                    cleaned: false,
                }
            }
            (None, Reply::TimedOut) => {
                self.orphans.push(token);
                Settled::OutcomeUnknown
            }
            (None, Reply::Unexpected) => {
                self.orphans.push(token);
                Settled::UnexpectedReply
            }
            (None, Reply::ServerError | Reply::NotSent) => {
                if unsettled_before {
                    self.orphans.push(token);
                }
                Settled::ProviderFailed
            }
            (None, Reply::Busy(_) | Reply::BusyUnknown | Reply::BusyUs(_)) => unreachable!("busy"),
        };
        self.waiters.get_mut(&id).expect("present").settled = Some(settled);
        if !defer {
            self.take(id);
        }
    }

    /// The poll right after a busy reply of a waiting acquire.
    fn poll_after_busy(
        &mut self,
        id: WaiterId,
        remaining: Option<Duration>,
        timed_retry: Option<Instant>,
        notified: bool,
        safety: Duration,
    ) {
        let now = self.now;
        let w = &self.waiters[&id];
        let (started, deadline) = (w.started, w.deadline);
        let expected_end = if w.cancelled {
            Some("CANCELLED")
        } else if self.shutting_down {
            Some("SHUTTING_DOWN")
        } else if deadline.is_some_and(|d| now >= d) {
            Some("WAIT_TIMEOUT")
        } else {
            None
        };
        let retry = match timed_retry {
            Some(at) => at.min(now + safety),
            None => now + remaining.map_or(safety, |r| r.min(safety)),
        };
        match self.core.poll_waiter(now, id) {
            WaiterStep::Done(Err(e)) => {
                assert_eq!(Some(e.code()), expected_end, "{e:?}");
                if let Error::WaitTimeout {
                    waited,
                    remaining: r,
                } = &e
                {
                    assert_eq!(*waited, now - started);
                    assert_eq!(
                        *r,
                        remaining.and_then(|d| now.checked_add(d)).map(|u| u - now)
                    );
                }
                self.finish(id, e.code());
            }
            WaiterStep::Attempt(call) => {
                assert_eq!(expected_end, None);
                assert!(
                    notified || retry <= now,
                    "a busy reply retries at once only after a notification"
                );
                self.attempted(id, &call);
            }
            WaiterStep::Wait(at) => {
                assert_eq!(expected_end, None);
                assert!(
                    !notified,
                    "a notification during the attempt makes a busy reply retry at once"
                );
                assert_eq!(at, Some(deadline.map_or(retry, |d| d.min(retry))));
                self.waited(id, at);
            }
            WaiterStep::Done(Ok(grant)) => panic!("a busy reply granted {grant:?}"),
        }
    }

    /// The waiter takes the outcome the core stored for it.
    fn take(&mut self, id: WaiterId) {
        let now = self.now;
        let w = self.waiters.get_mut(&id).expect("present");
        let settled = w.settled.take().expect("an outcome to take");
        let token = w.token;
        let step = self.core.poll_waiter(now, id);
        let WaiterStep::Done(result) = step else {
            panic!("a stored outcome is taken at once, not {step:?}");
        };
        let how = match (settled, result) {
            (
                Settled::Granted {
                    fence,
                    submitted,
                    cleaned: false,
                },
                Ok(grant),
            ) => {
                assert_eq!(grant.fence, Fence::new(fence));
                assert_eq!(
                    grant.clock.lock().remaining(now),
                    ms(LEASE_MS).saturating_sub(now - submitted),
                    "the lease counts from the first unsettled submission"
                );
                self.held.push((grant.lease, token));
                "GRANTED"
            }
            (Settled::Granted { cleaned: true, .. }, Err(Error::ShuttingDown))
            | (Settled::ShuttingDown, Err(Error::ShuttingDown)) => "SHUTTING_DOWN",
            (Settled::TooManyLeases, Err(Error::TooManyLeases { limit: MAX_LEASES })) => {
                "TOO_MANY_LEASES"
            }
            (
                Settled::OutcomeUnknown,
                Err(Error::OutcomeUnknown {
                    op: Operation::Acquire,
                    ..
                }),
            )
            | (
                Settled::UnexpectedReply,
                Err(Error::UnexpectedReply {
                    op: Operation::Acquire,
                    ..
                }),
            ) => "OUTCOME_UNKNOWN",
            (
                Settled::ProviderFailed,
                Err(Error::ProviderFailed {
                    op: Operation::Acquire,
                    ..
                }),
            ) => "PROVIDER_FAILED",
            (Settled::Busy(expected), Err(Error::Busy { remaining })) => {
                assert_eq!(remaining, expected);
                "LOCK_BUSY"
            }
            (settled, result) => panic!("expected {settled:?}, got {result:?}"),
        };
        self.finish(id, how);
    }

    fn cancel(&mut self, pick: u8) {
        let Some(id) = choose(pick, &self.ids_where(|_| true)) else {
            return;
        };
        self.core.cancel(id);
        let w = self.waiters.get_mut(&id).expect("present");
        w.cancelled = true;
        let (seq, busy) = (w.seq, w.in_flight.is_some() || w.settled.is_some());
        self.settle();
        if !busy {
            assert_eq!(self.ended.get(&seq), Some(&"CANCELLED"));
        }
    }

    fn abandon(&mut self, pick: u8, late: Reply) {
        let Some(id) = choose(pick, &self.ids_where(|_| true)) else {
            return;
        };
        let w = self.waiters.get_mut(&id).expect("present");
        let in_flight = w.in_flight.take();
        let settled = w.settled.take();
        let unsettled = matches!(w.failure, Some((_, Some(_))));
        let (key, token) = (w.key, w.token);
        self.core.abandon(self.now, id);
        if let Some(submitted) = in_flight {
            // The attempt may still acquire: its token is released, and
            // the line settles until its reply can no longer come.
            self.orphans.push(token);
            self.notified[key] = false;
            self.settling[key] = Some(submitted + COMMAND_TIMEOUT);
        } else if unsettled || matches!(settled, Some(Settled::Granted { .. })) {
            // A grant nobody will take (or may have been made) is
            // released by token.
            self.orphans.push(token);
        }
        self.finish(id, "ABANDONED");
        // The abandoned attempt's late reply and a stale cancel change
        // nothing but the events already queued (the next head's wake-up).
        let events = drain(&mut self.core);
        let before = self.core.counts();
        let fence = self.next_fence;
        self.next_fence += 1;
        let summary = self
            .core
            .handle_acquire_reply(self.now, id, late.value(fence));
        assert_eq!(summary, AttemptSummary::Ignored);
        self.core.cancel(id);
        assert_eq!(self.core.counts(), before);
        assert!(
            self.core.poll_event().is_none(),
            "a stale id queues nothing"
        );
        for event in events {
            self.handle(event);
        }
        self.settle();
    }

    /// A notification about `key`: a release of a lock (`form` 0; for
    /// the candidates' name, a lock of the same name, which wakes none of
    /// them), or of an election (`form` 1..=3: a vacancy, which wakes its
    /// candidates, a new leader or a new value; for lock keys 0 and 1,
    /// always a release).
    fn notify(&mut self, key: usize, form: u8) {
        let sha = KeyId::of(KEYS[key]).to_hex();
        let (payload, wakes) = match form {
            1..=3 if OBSERVED.contains(&key) => {
                let what = ["r", "l", "v"][usize::from(form - 1)];
                (
                    format!("e:{sha}:1-0:{what}"),
                    key == CANDIDATE && what == "r",
                )
            }
            _ => (sha, key != CANDIDATE),
        };
        if payload.starts_with("e:") && self.observers[key] > 0 {
            self.changes[key] += 1;
        }
        let head = self.lines[key].front().copied().filter(|_| wakes);
        let backing_off = self.backing_off_head(key).filter(|_| wakes);
        if wakes && self.key_in_flight(key) {
            self.notified[key] = true;
        }
        self.core.handle_notification(payload.as_bytes());
        let events = drain(&mut self.core);
        match (backing_off, head) {
            (Some(h), _) => assert_eq!(events, vec![CoreEvent::Wake(h)]),
            // A head holding an untaken outcome may be woken; it polls anyway.
            (None, Some(h)) if self.is_settled(&h) => {
                assert!(events.is_empty() || events == vec![CoreEvent::Wake(h)]);
            }
            (None, _) => assert!(events.is_empty(), "{events:?}"),
        }
        for event in events {
            self.handle(event);
        }
        self.settle();
        if let Some(h) = backing_off {
            assert!(
                self.waiters[&h].in_flight.is_some(),
                "the head retries at once"
            );
        }
    }

    fn notify_garbage(&mut self, payload: &[u8]) {
        if KEYS
            .iter()
            .any(|k| KeyId::of(k).to_hex().as_bytes() == payload)
        {
            return;
        }
        let before = self.core.counts();
        self.core.handle_notification(payload);
        assert!(self.core.poll_event().is_none(), "garbage wakes nobody");
        assert_eq!(self.core.counts(), before);
    }

    fn subscribed(&mut self) {
        if !self.subscriber_running {
            return;
        }
        let backing_off: BTreeSet<WaiterId> = (0..KEYS.len())
            .filter_map(|k| self.backing_off_head(k))
            .collect();
        let settled_heads: BTreeSet<WaiterId> = self
            .lines
            .iter()
            .filter_map(|l| l.front().copied())
            .filter(|h| self.is_settled(h))
            .collect();
        for key in 0..KEYS.len() {
            if self.key_in_flight(key) {
                self.notified[key] = true;
            }
        }
        self.core.handle_subscribed();
        for (changes, observers) in self.changes.iter_mut().zip(self.observers) {
            if observers > 0 {
                *changes += 1;
            }
        }
        if self.sub == Sub::Starting {
            self.sub = Sub::Active;
        }
        let events = drain(&mut self.core);
        let woken: BTreeSet<WaiterId> = events
            .iter()
            .map(|e| match e {
                CoreEvent::Wake(id) => *id,
                CoreEvent::StartSubscriber => panic!("subscribed, not starting"),
            })
            .collect();
        assert_eq!(woken.len(), events.len(), "each head woken once");
        assert!(
            woken.is_superset(&backing_off),
            "every backing-off head checks once more"
        );
        assert!(woken.is_subset(&backing_off.union(&settled_heads).copied().collect()));
        for event in events {
            self.handle(event);
        }
        self.settle();
        for h in backing_off {
            assert!(
                self.waiters[&h].in_flight.is_some(),
                "the head checks once more"
            );
        }
    }

    /// An observer starts: the subscription is wanted at once, as for a
    /// waiter that really waits (docs/PROTOCOL.md §7).
    fn observe(&mut self, key: usize) {
        if !self.has_listeners() {
            self.first_listener();
        }
        let _cursor = self
            .core
            .handle_observer_started(self.now, KeyId::of(KEYS[key]));
        self.observers[key] += 1;
        let events = drain(&mut self.core);
        if self.sub == Sub::Off && !self.shutting_down {
            assert_eq!(events, vec![CoreEvent::StartSubscriber]);
            self.sub = Sub::Starting;
            self.subscriber_running = true;
        } else {
            assert!(events.is_empty(), "{events:?}");
        }
    }

    /// An observer stops; with the last listener gone the subscription
    /// lingers (checked by `poll_subscriber`).
    fn unobserve(&mut self, pick: u8) {
        let Some(key) = choose(pick, &self.observed_names()) else {
            return;
        };
        self.core
            .handle_observer_stopped(self.now, KeyId::of(KEYS[key]));
        self.observers[key] -= 1;
        if self.observers[key] == 0 {
            self.changes[key] = 0;
            self.reading[key] = false;
        }
        if !self.has_listeners() {
            self.idle_since = Some(self.now);
        }
        assert!(self.core.poll_event().is_none(), "a stop wakes nobody");
    }

    /// One read per name at a time: a claim while one is in flight is
    /// refused; the one in flight ends (failed or abandoned).
    fn observer_read(&mut self, pick: u8, end: u8) {
        let Some(key) = choose(pick, &self.observed_names()) else {
            return;
        };
        let id = KeyId::of(KEYS[key]);
        let claimed = self.core.claim_observer_read(id);
        if !self.reading[key] {
            assert!(
                claimed.is_some(),
                "a read is claimed when none is in flight"
            );
            self.reading[key] = true;
            return;
        }
        assert_eq!(claimed, None, "one read in flight per name");
        if end.is_multiple_of(2) {
            self.core
                .handle_observer_read(id, self.now, None, self.notify);
        } else {
            self.core.abandon_observer_read(id);
        }
        self.reading[key] = false;
        assert!(self.core.poll_event().is_none(), "a read wakes nobody");
    }

    fn observed_names(&self) -> Vec<usize> {
        (0..KEYS.len()).filter(|k| self.observers[*k] > 0).collect()
    }

    fn subscription_failed(&mut self) {
        if !self.subscriber_running {
            return;
        }
        assert!(
            self.core.handle_subscription_failed(self.now),
            "the first failure in a row is reported"
        );
        assert!(
            !self.core.handle_subscription_failed(self.now),
            "a repeated failure is not"
        );
        self.sub = Sub::Unavailable;
        self.settle();
        assert_eq!(self.core.poll_subscriber(self.now), SubscriberStep::Stop);
        self.subscriber_running = false;
    }

    fn poll_subscriber(&mut self) {
        if !self.subscriber_running {
            return;
        }
        let step = self.core.poll_subscriber(self.now);
        let expected = if self.shutting_down {
            SubscriberStep::Stop
        } else {
            match self.idle_since {
                None => SubscriberStep::Listen(None),
                Some(t) if self.now < t + SUBSCRIPTION_LINGER => {
                    SubscriberStep::Listen(Some(t + SUBSCRIPTION_LINGER))
                }
                Some(_) => SubscriberStep::Stop,
            }
        };
        assert_eq!(step, expected);
        if step == SubscriberStep::Stop {
            self.sub = Sub::Off;
            self.subscriber_running = false;
        }
    }

    fn give_up(&mut self, pick: u8) {
        let candidates = self.ids_where(|w| {
            !w.try_once
                && w.in_flight.is_none()
                && w.settled.is_none()
                && w.deadline.is_some()
                && (w.attempts > 0
                    || self.lines[w.key].front().map(|h| self.waiters[h].seq) != Some(w.seq))
        });
        let Some(id) = choose(pick, &candidates) else {
            return;
        };
        let w = &self.waiters[&id];
        let (seq, deadline) = (w.seq, w.deadline.expect("bounded"));
        let expected = w.failure.map_or("WAIT_TIMEOUT", |(code, _)| code);
        self.now = self.now.max(deadline);
        self.fire_timers();
        if !self.ended.contains_key(&seq) {
            // It became the head at its deadline without having asked
            // Redis: a wait of any length makes at least one attempt.
            let w = &self.waiters[&id];
            assert!(
                w.in_flight.is_some() && w.attempts == 1,
                "stranded at its deadline"
            );
            return;
        }
        assert_eq!(self.ended.get(&seq), Some(&expected));
    }

    fn release(&mut self, pick: u8, reply: OutcomeReply) {
        if self.held.is_empty() {
            return;
        }
        let i = usize::from(pick) % self.held.len();
        let (lease, token) = self.held[i];
        let call = self.core.release_call(lease).expect("a tracked lease");
        assert!(releases(&call, token));
        let result = self.core.handle_release_reply(lease, reply.value());
        // A release also answers 3: released and handed over.
        let code = match reply {
            OutcomeReply::Int(3) => None,
            other => other.failure_code(),
        };
        match (code, result) {
            (None, Ok(outcome)) => {
                let OutcomeReply::Int(n) = reply else {
                    unreachable!("a settled reply is an integer")
                };
                let expected = [
                    ReleaseOutcome::Expired,
                    ReleaseOutcome::Released,
                    ReleaseOutcome::Conflict,
                    ReleaseOutcome::Released,
                ][n.unsigned_abs() as usize];
                assert_eq!(outcome, expected);
                self.held.swap_remove(i);
                assert!(self.core.release_call(lease).is_err(), "no longer tracked");
            }
            (Some(code), Err(e)) => {
                assert_eq!(e.code(), code, "{e:?}");
                assert!(self.core.release_call(lease).is_ok(), "still tracked");
            }
            (expected, result) => panic!("{reply:?}: expected {expected:?}, got {result:?}"),
        }
    }

    fn renew(&mut self, pick: u8, reply: OutcomeReply) {
        if self.held.is_empty() {
            return;
        }
        let (lease, token) = self.held[usize::from(pick) % self.held.len()];
        let call = self
            .core
            .renew_call(lease, LEASE_MS)
            .expect("a tracked lease");
        assert_eq!(call.kind, ScriptKind::Renew);
        assert_eq!(
            command_args(&call.evalsha()).get(4),
            Some(&token.to_hex().into_bytes())
        );
        let (result, outcome) = self.core.handle_renew_reply(lease, reply.value());
        match (reply.failure_code(), outcome) {
            (None, Ok(o)) => assert_eq!(result, RenewResult::Outcome(o)),
            (Some("PROVIDER_FAILED"), Err(e)) => {
                assert_eq!(e.code(), "PROVIDER_FAILED");
                assert_eq!(result, RenewResult::NotApplied);
            }
            (Some(code), Err(e)) => {
                assert_eq!(e.code(), code);
                assert_eq!(result, RenewResult::Unknown);
            }
            (expected, outcome) => panic!("{reply:?}: expected {expected:?}, got {outcome:?}"),
        }
        assert!(
            self.core.release_call(lease).is_ok(),
            "a renew never untracks"
        );
    }

    /// Shutdown's cleanup: one release per tracked lease (taken by its
    /// waiter or not) and per orphan, after which the core forgets them.
    fn cleanup(&mut self) {
        let calls = self.core.take_cleanup();
        let mut tokens: Vec<OwnerToken> = self.held.iter().map(|(_, t)| *t).collect();
        tokens.extend(self.untaken_grants());
        tokens.extend(self.orphans.iter().copied());
        assert_releases_exactly(&calls, &tokens);
        self.orphans.clear();
        self.cleaned
            .extend(self.held.drain(..).map(|(lease, _)| lease));
        for w in self.waiters.values_mut() {
            if let Some(Settled::Granted { cleaned, .. }) = &mut w.settled {
                *cleaned = true;
            }
        }
        for lease in &self.cleaned {
            assert!(matches!(
                self.core.release_call(*lease),
                Err(Error::ShuttingDown)
            ));
        }
    }

    /// Shuts down, lets every waiter take its outcome, answers every
    /// attempt still in flight, and checks that nobody was stranded and
    /// every token is released exactly once.
    fn finish_all(&mut self, cleanup_before_takes: bool) {
        self.core.begin_shutdown();
        self.shutting_down = true;
        self.settle();
        if cleanup_before_takes {
            self.cleanup();
        }
        for id in self.ids_where(|w| w.settled.is_some()) {
            self.take(id);
            self.settle();
        }
        for id in self.in_flight() {
            self.reply_to(id, Reply::Acquired, false);
            self.settle();
        }
        self.check();
        assert!(self.waiters.is_empty(), "shutdown strands nobody");
        assert_eq!(self.ended.len(), self.joined, "every waiter ended once");
        self.cleanup();
        let counts = self.core.counts();
        assert_eq!(
            (
                counts.waiters,
                counts.tracked_leases,
                counts.attempts_in_flight,
                counts.orphans
            ),
            (0, 0, 0, 0)
        );
        if self.subscriber_running {
            assert_eq!(self.core.poll_subscriber(self.now), SubscriberStep::Stop);
        }
    }

    // ----- invariants -----------------------------------------------------

    /// Checks the core against the model after a step. Every waiter that
    /// neither talks to Redis nor holds an untaken outcome is polled once
    /// more (spurious polls are harmless): it must wait until exactly the
    /// timer it was given, which no head may lack.
    fn check(&mut self) {
        assert!(self.core.poll_event().is_none(), "every event was handled");
        let counts = self.core.counts();
        assert_eq!(counts.waiters, self.waiters.len());
        assert_eq!(counts.attempts_in_flight, self.in_flight().len());
        assert_eq!(counts.tracked_leases, self.tracked());
        assert_eq!(counts.orphans, self.orphans.len());
        assert_eq!(self.core.is_subscribed(), self.sub == Sub::Active);
        assert_eq!(self.core.is_shutting_down(), self.shutting_down);
        assert_eq!(
            self.subscriber_running,
            matches!(self.sub, Sub::Starting | Sub::Active)
        );
        assert_eq!(
            self.joined,
            self.ended.len() + self.waiters.len(),
            "no waiter lost or duplicated"
        );
        let in_lines: usize = self.lines.iter().map(VecDeque::len).sum();
        assert_eq!(in_lines, self.waiters.len());
        for key in OBSERVED {
            let changes = self.core.observed_changes(KeyId::of(KEYS[key]));
            assert_eq!(changes, self.changes[key], "changes announced to observers");
        }
        if self.observers.iter().any(|n| *n > 0) && !self.shutting_down {
            assert_ne!(
                self.sub,
                Sub::Off,
                "an observed name keeps the subscription"
            );
        }

        let (now, safety) = (self.now, self.safety());
        for k in 0..KEYS.len() {
            let line: Vec<WaiterId> = self.lines[k].iter().copied().collect();
            for (pos, id) in line.iter().enumerate() {
                let w = &self.waiters[id];
                assert_eq!(w.key, k);
                if let Some(t) = w.timer {
                    assert!(t > now, "a due timer was left unfired");
                }
                if pos > 0 {
                    assert!(w.in_flight.is_none(), "only the head attempts");
                    assert!(w.settled.is_none(), "only the head gets an outcome");
                    assert_eq!(w.timer, w.deadline, "behind the head: its deadline");
                } else if w.in_flight.is_none() && w.settled.is_none() {
                    let t = w.timer.expect("a backing-off head has a timer");
                    let _ = safety;
                    assert!(
                        t <= self.head_bound(w),
                        "retry within the safety interval (or its backoff)"
                    );
                }
                if w.in_flight.is_some() || w.settled.is_some() {
                    continue;
                }
                let timer = w.timer;
                match self.core.poll_waiter(now, *id) {
                    WaiterStep::Wait(at) => assert_eq!(at, timer, "a stale or missing wake-up"),
                    other => panic!("stranded waiter (position {pos}): {other:?}"),
                }
            }
        }
        assert!(
            self.core.poll_event().is_none(),
            "a spurious poll queues nothing"
        );
    }
}

/// When a campaign whose attempt, sent at `submitted` and answered at
/// `received`, found the leader's lease ending in `remaining` retries
/// (docs/PROTOCOL.md §7): as it would reach Redis at the lease's end, so
/// `remaining` after the attempt less half the round trip; at once when the
/// lease ends within a round trip.
fn campaign_retry(submitted: Instant, received: Instant, remaining: Duration) -> Instant {
    let round_trip = received - submitted;
    if remaining <= round_trip {
        received
    } else {
        submitted + (remaining - round_trip / 2)
    }
}

/// The FIFO lines and wait decisions under an arbitrary operation sequence.
///
/// # Panics
///
/// When the core and the reference model disagree: a waiter lost,
/// duplicated or served out of order, two attempts on one key, a wait past
/// a deadline or beyond the safety interval, a head left without a wake-up,
/// a token neither tracked, orphaned nor released exactly once.
pub fn check_line(data: &[u8]) {
    let mut input = Input::new(data);
    // Safety intervals (poll, notify), including notify < poll.
    let (poll, notify) = match input.byte() % 4 {
        0 => (ms(100), ms(30)),
        1 => (ms(1), ms(1)),
        _ => (ms(25), ms(250)),
    };
    let cleanup_before_takes = input.byte() & 1 == 1;
    let mut harness = Harness::new(poll, notify);
    let mut ops = 0;
    while !input.is_empty() && ops < MAX_OPS {
        let op = Op::decode(&mut input);
        harness.apply(&op);
        ops += 1;
    }
    harness.finish_all(cleanup_before_takes);
}
