//! Random operation sequences over the contended hand-over
//! (docs/PROTOCOL.md): registrations, grants named in notices, claims,
//! lingering registrations and grants to other lockers, on a core with the
//! hand-over on and two keys. A small front end (`Front`) drives the core
//! the way `driver/ops/acquire.rs` and `blocking/front.rs` do: it drains
//! the events after every call, polls each waiter that was woken or whose
//! wait ended, and sends an attempt only when `poll_waiter` hands one out.
//! Redis is not modelled: replies and notices are drawn at random, so the
//! properties are the ones the core must keep whatever Redis says.
//!
//! Checked after every operation:
//! 1. at most one acquire per key in flight from this locker, counting an
//!    abandoned attempt until its reply can no longer come;
//! 2. every head that is not attempting has a retry instant within the
//!    design's bound (the safety interval, or a failure's backoff, or a
//!    grant's claim window: all within `backoff_bound()`; an abandoned
//!    attempt's reply bound while its line settles), and the front end
//!    wakes it no later than that instant (no missed wake-up);
//! 3. grants of a key come in arrival order, each with the fence of the
//!    acquired reply that produced it;
//! 4. a waiter whose wait ended, once it attempted (or when it is not the
//!    head), is done at its next poll;
//! 5. nothing panics, and no `Wait` names an instant already past (a spin);
//! 6. a grant to another locker wakes a waiting head exactly when it
//!    brings its retry earlier, and makes one without a registration
//!    attempt at once;
//! 7. a grant to this locker wakes its key's backing-off head (the claim
//!    goes out at once), and one that finds the registration lingering
//!    with no waiter is passed on, by the subscriber's calls (the
//!    deregistration, then the release by the grant token).

use proptest::prelude::*;

use super::*;
use crate::core::core::FAILURE_BACKOFF;
use crate::core::names::{LineKey, RegId};
use crate::error::Failure;

const REG: RegId = RegId(0x51);
const CLAIM_MS: u64 = 100;
const KEYS: [&str; 2] = ["k0", "k1"];
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after a grant's claim window a head checks whether it lapsed
/// (`line.rs`'s `CLAIM_MARGIN`).
const CLAIM_MARGIN: Duration = Duration::from_millis(2);
/// This locker's own claim window and that margin.
const CLAIM_CHECK: Duration = Duration::from_millis(CLAIM_MS).saturating_add(CLAIM_MARGIN);

/// The latest a backing-off head may be scheduled after the instant its
/// state was last set (never later than now): the safety interval with
/// notifications (without them it is shorter), the longest failure
/// backoff, and the check after a grant's claim window for a head that
/// came back to a lingering registration.
fn backoff_bound() -> Duration {
    NOTIFY
        .max(POLL)
        .max(FAILURE_BACKOFF[FAILURE_BACKOFF.len() - 1])
        .max(CLAIM_CHECK)
}

fn line_key(key: usize) -> LineKey {
    LineKey::lock(KeyId::of(KEYS[key]))
}

#[derive(Debug, Clone)]
enum AttemptReply {
    Acquired(u64),
    Busy(i64),
    /// `-1`, `-2` or nil: held, for how long unknown.
    BusyUnknown(i64),
    /// The acquire found the key free with another registration at the
    /// head of the queue and granted it there: the reply is the claim
    /// window (`ACQUIRE_LUA`), and the script published the grant, which
    /// this locker hears when `notice` is set.
    GrantedElsewhere {
        claim_ms: u64,
        other: u64,
        notice: bool,
    },
    TimedOut,
    NotSent,
    ServerError,
}

#[derive(Debug, Clone)]
enum ReleaseReply {
    Freed,
    HandedOver,
    Expired,
    Conflict,
    TimedOut,
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        key: usize,
        wait_ms: u64,
    },
    Cancel {
        pick: usize,
    },
    Abandon {
        pick: usize,
    },
    Reply {
        pick: usize,
        reply: AttemptReply,
    },
    OurGrant {
        key: usize,
        fence: u64,
        claim_ms: u64,
    },
    OtherGrant {
        key: usize,
        other: u64,
        claim_ms: u64,
    },
    Claimed {
        key: usize,
    },
    Released {
        key: usize,
    },
    Garbage {
        key: usize,
        prefixed: bool,
        bytes: Vec<u8>,
    },
    Advance {
        ms: u64,
    },
    AdvanceToNextWake,
    SubscriberLost,
    SubscriberConfirmed,
    SubscriptionFailed,
    PollSubscriber,
    Release {
        pick: usize,
        reply: ReleaseReply,
    },
    AbandonLease {
        pick: usize,
    },
}

fn wait_ms() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0), 1..500u64, 500..5_000u64, Just(60_000)]
}

fn attempt_reply() -> impl Strategy<Value = AttemptReply> {
    prop_oneof![
        3 => (1..1_000u64).prop_map(AttemptReply::Acquired),
        3 => (0..2_000i64).prop_map(AttemptReply::Busy),
        1 => prop_oneof![Just(-1i64), Just(-2), Just(i64::MIN)].prop_map(AttemptReply::BusyUnknown),
        3 => (1..300u64, 1..u64::MAX, any::<bool>()).prop_map(|(claim_ms, other, notice)| {
            AttemptReply::GrantedElsewhere { claim_ms, other, notice }
        }),
        1 => Just(AttemptReply::TimedOut),
        1 => Just(AttemptReply::NotSent),
        1 => Just(AttemptReply::ServerError),
    ]
}

fn release_reply() -> impl Strategy<Value = ReleaseReply> {
    prop_oneof![
        Just(ReleaseReply::Freed),
        Just(ReleaseReply::HandedOver),
        Just(ReleaseReply::Expired),
        Just(ReleaseReply::Conflict),
        Just(ReleaseReply::TimedOut),
    ]
}

/// The operations, weighted for a locker whose subscription comes and
/// goes (`steady`: false), or for one that stays subscribed, where grants
/// and short clock steps keep heads backing off between hand-overs.
fn op(steady: bool) -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let (replies, grants, long_steps, subscription) =
        if steady { (16, 10, 1, 1) } else { (8, 4, 4, 3) };
    prop_oneof![
        5 => (key.clone(), wait_ms()).prop_map(|(key, wait_ms)| Op::Join { key, wait_ms }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Abandon { pick }),
        replies => (any::<usize>(), attempt_reply()).prop_map(|(pick, reply)| Op::Reply { pick, reply }),
        4 => (key.clone(), 1..1_000u64, 1..300u64)
            .prop_map(|(key, fence, claim_ms)| Op::OurGrant { key, fence, claim_ms }),
        grants => (key.clone(), 1..u64::MAX, prop_oneof![1..300u64, 300..60_000u64])
            .prop_map(|(key, other, claim_ms)| Op::OtherGrant { key, other, claim_ms }),
        1 => key.clone().prop_map(|key| Op::Claimed { key }),
        1 => key.clone().prop_map(|key| Op::Released { key }),
        1 => (key.clone(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(key, prefixed, bytes)| Op::Garbage { key, prefixed, bytes }),
        4 => (0..150u64).prop_map(|ms| Op::Advance { ms }),
        long_steps => prop_oneof![150..400u64, 400..3_000u64].prop_map(|ms| Op::Advance { ms }),
        4 => Just(Op::AdvanceToNextWake),
        subscription => Just(Op::SubscriberLost),
        8 => Just(Op::SubscriberConfirmed),
        subscription => Just(Op::SubscriptionFailed),
        2 => Just(Op::PollSubscriber),
        3 => (any::<usize>(), release_reply()).prop_map(|(pick, reply)| Op::Release { pick, reply }),
        1 => any::<usize>().prop_map(|pick| Op::AbandonLease { pick }),
    ]
}

/// One acquire as its front end sees it.
#[derive(Debug)]
struct FrontWaiter {
    id: WaiterId,
    key: usize,
    /// Arrival order, across keys.
    seq: u64,
    try_once: bool,
    deadline: Option<Instant>,
    /// The instant its last `Wait` named (`None`: only a wake-up).
    wake_at: Option<Instant>,
    woken: bool,
    /// When its attempt in flight was sent.
    in_flight: Option<Instant>,
    attempts: u32,
    /// The fence of the acquired reply it was last given.
    acquired: Option<u64>,
}

/// What the subscriber thread has told the core: started (on
/// `StartSubscriber`), and its subscription confirmed.
#[derive(Debug, Default)]
struct Subscriber {
    running: bool,
    confirmed: bool,
}

/// The front ends of one locker's operations, and its subscriber.
struct Front {
    core: Core,
    now: Instant,
    waiters: Vec<FrontWaiter>,
    /// Attempts of abandoned waiters: their key, and when their reply can
    /// no longer come.
    abandoned_in_flight: Vec<(usize, Instant)>,
    leases: Vec<LeaseId>,
    subscriber: Subscriber,
    next_seq: u64,
}

impl Front {
    /// A locker with the hand-over on; `subscribed`: its subscription is
    /// already confirmed, as after a first busy reply.
    fn new(now: Instant, subscribed: bool) -> Self {
        let mut s = settings(128, 10_000);
        s.command_timeout = COMMAND_TIMEOUT;
        s.handover = Some(HandoverSettings {
            reg: REG,
            reg_ms: 750,
            claim_ms: CLAIM_MS,
        });
        let mut front = Front {
            core: Core::new(s, now),
            now,
            waiters: Vec::new(),
            abandoned_in_flight: Vec::new(),
            leases: Vec::new(),
            subscriber: Subscriber::default(),
            next_seq: 0,
        };
        if subscribed {
            front.core.subscription_wanted_by_waiter();
            front.drain_events();
            front.core.handle_subscribed();
            front.subscriber.confirmed = true;
        }
        front
    }

    fn waiter(&mut self, id: WaiterId) -> Option<&mut FrontWaiter> {
        self.waiters.iter_mut().find(|w| w.id == id)
    }

    /// Hands the core's events to whom they are for.
    fn apply_events(&mut self, events: Vec<CoreEvent>) {
        for event in events {
            match event {
                CoreEvent::Wake(id) => {
                    if let Some(w) = self.waiter(id) {
                        w.woken = true;
                    }
                }
                CoreEvent::StartSubscriber => {
                    self.subscriber = Subscriber {
                        running: true,
                        confirmed: false,
                    };
                }
            }
        }
    }

    fn drain_events(&mut self) {
        let events = drain(&mut self.core);
        self.apply_events(events);
    }

    /// Polls every waiter that was woken or whose wait ended, until none
    /// is left, as the front ends' loops do.
    fn run_due(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10_000 {
            self.drain_events();
            let now = self.now;
            let due = self.waiters.iter().position(|w| {
                w.in_flight.is_none() && (w.woken || w.wake_at.is_some_and(|at| at <= now))
            });
            match due {
                Some(i) => self.poll(i)?,
                None => return Ok(()),
            }
        }
        Err(TestCaseError::fail("the waiters keep polling without end"))
    }

    fn poll(&mut self, i: usize) -> Result<(), TestCaseError> {
        let now = self.now;
        let (id, key) = (self.waiters[i].id, self.waiters[i].key);
        let is_head = head(&self.core, KEYS[key]) == Some(id);
        let w = &self.waiters[i];
        let ends =
            !w.try_once && w.deadline.is_some_and(|d| d <= now) && (w.attempts > 0 || !is_head);
        let step = self.core.poll_waiter(now, id);
        let w = &mut self.waiters[i];
        w.woken = false;
        match step {
            WaiterStep::Attempt(call) => {
                prop_assert!(!ends, "waiter {id:?} attempts past its wait (invariant 4)");
                prop_assert!(is_head, "only the head attempts");
                prop_assert_eq!(call.kind, ScriptKind::Acquire);
                w.in_flight = Some(now);
                w.attempts += 1;
                w.wake_at = None;
            }
            WaiterStep::Wait(at) => {
                prop_assert!(
                    !ends,
                    "waiter {id:?} still waits past its wait (invariant 4)"
                );
                prop_assert!(
                    at.is_none_or(|at| at > now),
                    "a wait until {at:?}, already past at {now:?}: a spin"
                );
                w.wake_at = at;
            }
            WaiterStep::Done(result) => {
                let w = self.waiters.remove(i);
                if let Ok(grant) = result {
                    self.check_grant(&w, &grant)?;
                    self.leases.push(grant.lease);
                }
            }
        }
        Ok(())
    }

    /// Invariant 3: a grant comes from an acquired reply, with its fence,
    /// and nobody who arrived earlier for the same key still waits.
    fn check_grant(&self, w: &FrontWaiter, grant: &Grant) -> Result<(), TestCaseError> {
        let Some(fence) = w.acquired else {
            return Err(TestCaseError::fail(format!(
                "{:?} granted without an acquired reply",
                w.id
            )));
        };
        prop_assert_eq!(grant.fence, Fence::new(fence), "the reply's fence");
        let earlier: Vec<WaiterId> = self
            .waiters
            .iter()
            .filter(|o| o.key == w.key && o.seq < w.seq)
            .map(|o| o.id)
            .collect();
        prop_assert!(
            earlier.is_empty(),
            "{:?} granted ahead of {earlier:?}, who arrived first",
            w.id
        );
        Ok(())
    }

    fn pick_waiter(&self, pick: usize, in_flight: bool) -> Option<usize> {
        let candidates: Vec<usize> = (0..self.waiters.len())
            .filter(|&i| !in_flight || self.waiters[i].in_flight.is_some())
            .collect();
        (!candidates.is_empty()).then(|| candidates[pick % candidates.len()])
    }

    fn hears_notices(&self) -> bool {
        self.subscriber.running && self.subscriber.confirmed
    }

    /// Notices reach the core only through a confirmed subscription.
    fn notice(&mut self, payload: &[u8]) {
        if self.hears_notices() {
            self.core.handle_notice(self.now, payload);
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let now = self.now;
        match op {
            Op::Join { key, wait_ms } => {
                let token = OwnerToken::from_bytes(
                    [self.next_seq.to_le_bytes(), [0xee; 8]]
                        .concat()
                        .try_into()
                        .expect("16 bytes"),
                );
                let wait = ms(*wait_ms);
                if let Ok(id) = self.core.acquire(now, KEYS[*key], token, waiting(wait)) {
                    self.waiters.push(FrontWaiter {
                        id,
                        key: *key,
                        seq: self.next_seq,
                        try_once: wait.is_zero(),
                        deadline: Some(now + wait),
                        wake_at: None,
                        // An operation polls as it starts.
                        woken: true,
                        in_flight: None,
                        attempts: 0,
                        acquired: None,
                    });
                }
                self.next_seq += 1;
            }
            Op::Cancel { pick } => {
                if let Some(i) = self.pick_waiter(*pick, false) {
                    self.core.cancel(self.waiters[i].id);
                }
            }
            Op::Abandon { pick } => {
                if let Some(i) = self.pick_waiter(*pick, false) {
                    let w = self.waiters.remove(i);
                    if let Some(sent) = w.in_flight {
                        self.abandoned_in_flight
                            .push((w.key, sent + COMMAND_TIMEOUT));
                    }
                    self.core.abandon(now, w.id);
                }
            }
            Op::Reply { pick, reply } => {
                if let Some(i) = self.pick_waiter(*pick, true) {
                    self.reply(i, reply)?;
                }
            }
            Op::OurGrant {
                key,
                fence,
                claim_ms,
            } => self.our_grant(*key, *fence, *claim_ms)?,
            Op::OtherGrant {
                key,
                other,
                claim_ms,
            } => self.grant_elsewhere(*key, *other, *claim_ms)?,
            Op::Claimed { key } => {
                let payload = format!("{}:c:7", line_key(*key).message());
                self.notice(payload.as_bytes());
            }
            Op::Released { key } => {
                let payload = line_key(*key).message();
                self.notice(payload.as_bytes());
            }
            Op::Garbage {
                key,
                prefixed,
                bytes,
            } => {
                let mut payload = if *prefixed {
                    format!("{}:", line_key(*key).message()).into_bytes()
                } else {
                    Vec::new()
                };
                payload.extend_from_slice(bytes);
                self.notice(&payload);
            }
            Op::Advance { ms: n } => self.now += ms(*n),
            Op::AdvanceToNextWake => {
                let next = self
                    .waiters
                    .iter()
                    .filter(|w| w.in_flight.is_none())
                    .filter_map(|w| w.wake_at)
                    .min();
                if let Some(at) = next {
                    self.now = self.now.max(at);
                }
            }
            Op::SubscriberLost => {
                if self.hears_notices() {
                    self.subscriber.confirmed = false;
                    self.core.handle_subscriber_lost(now);
                }
            }
            Op::SubscriberConfirmed => {
                if self.subscriber.running && !self.subscriber.confirmed {
                    self.subscriber.confirmed = true;
                    self.core.handle_subscribed();
                }
            }
            Op::SubscriptionFailed => {
                if self.subscriber.running && !self.subscriber.confirmed {
                    self.subscriber.running = false;
                    self.core.handle_subscription_failed(now);
                }
            }
            Op::PollSubscriber => {
                if self.subscriber.running {
                    if self.core.poll_subscriber(now) == SubscriberStep::Stop {
                        self.subscriber = Subscriber::default();
                    }
                    // Sent by the subscriber; their replies are skipped.
                    for (channel, calls) in self.core.take_pass_ons() {
                        prop_assert!(KEYS.iter().any(|k| KeyId::of(k).channel_id() == channel));
                        let kinds: Vec<ScriptKind> = calls.iter().map(|c| c.kind).collect();
                        prop_assert_eq!(kinds, [ScriptKind::Deregister, ScriptKind::Release]);
                    }
                }
            }
            Op::Release { pick, reply } => {
                if !self.leases.is_empty() {
                    let lease = self.leases.remove(pick % self.leases.len());
                    let call = self
                        .core
                        .release_call(lease)
                        .map_err(|e| TestCaseError::fail(format!("no release call: {e:?}")))?;
                    prop_assert_eq!(call.kind, ScriptKind::Release);
                    let reply = match reply {
                        ReleaseReply::Freed => ok(Value::Int(1)),
                        ReleaseReply::HandedOver => ok(Value::Int(3)),
                        ReleaseReply::Expired => ok(Value::Int(0)),
                        ReleaseReply::Conflict => ok(Value::Int(2)),
                        ReleaseReply::TimedOut => timed_out(),
                    };
                    self.core
                        .handle_lease_released(now, lease, reply.as_ref().ok());
                    let _ = self.core.handle_release_reply(lease, reply);
                }
            }
            Op::AbandonLease { pick } => {
                if !self.leases.is_empty() {
                    let lease = self.leases.remove(pick % self.leases.len());
                    self.core.abandon_lease(lease);
                }
            }
        }
        self.run_due()
    }

    /// Answers waiter `i`'s attempt; its operation polls it right after.
    fn reply(&mut self, i: usize, reply: &AttemptReply) -> Result<(), TestCaseError> {
        let now = self.now;
        let w = &mut self.waiters[i];
        w.in_flight = None;
        w.woken = true;
        let (id, key) = (w.id, w.key);
        let value = match reply {
            AttemptReply::Acquired(fence) => {
                w.acquired = Some(*fence);
                acquired(*fence)
            }
            AttemptReply::Busy(remaining) => busy(*remaining),
            AttemptReply::BusyUnknown(-1) => busy(-1),
            AttemptReply::BusyUnknown(-2) => busy(-2),
            AttemptReply::BusyUnknown(_) => busy_unknown(),
            AttemptReply::GrantedElsewhere { claim_ms, .. } => {
                busy(i64::try_from(*claim_ms).expect("small"))
            }
            AttemptReply::TimedOut => timed_out(),
            AttemptReply::ServerError => server_error(),
            AttemptReply::NotSent => {
                let refused = RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "refused",
                ));
                self.core
                    .handle_acquire_reply(now, id, Err::<Value, _>(Failure::NotSent(refused)));
                return Ok(());
            }
        };
        self.core.handle_acquire_reply(now, id, value);
        if let AttemptReply::GrantedElsewhere {
            claim_ms,
            other,
            notice: true,
        } = reply
        {
            self.grant_elsewhere(key, *other, *claim_ms)?;
        }
        Ok(())
    }

    /// Invariant 7: a grant to this locker's registration wakes the
    /// backing-off head of its key to claim it at once, makes a busy reply
    /// in flight retry at once, and with nobody waiting is passed on.
    fn our_grant(&mut self, key: usize, fence: u64, claim_ms: u64) -> Result<(), TestCaseError> {
        if !self.hears_notices() {
            return Ok(());
        }
        self.drain_events();
        let line = line_key(key);
        let before = head_state(&self.core, KEYS[key]);
        let head_before = head(&self.core, KEYS[key]);
        let lingering = self.core.lingering.contains(&line);
        let payload = format!(
            "{}:g:{}:{fence}:{claim_ms}",
            line.message(),
            line.queue_entry(REG)
        );
        self.core.handle_notice(self.now, payload.as_bytes());
        let events = drain(&mut self.core);
        let after = head_state(&self.core, KEYS[key]);
        if lingering {
            prop_assert!(events.is_empty(), "woke {events:?}");
            prop_assert!(
                self.core.has_pass_ons(),
                "a grant nobody waits for is passed on"
            );
            prop_assert!(!self.core.lingering.contains(&line));
        } else if let (Some(head_id), Some(state)) = (head_before, before) {
            match state {
                HeadState::Backoff { .. } => {
                    prop_assert_eq!(&events, &vec![CoreEvent::Wake(head_id)]);
                    prop_assert_eq!(after, Some(HeadState::Ready));
                }
                HeadState::Attempting { .. } => {
                    prop_assert!(events.is_empty(), "woke {events:?}");
                    prop_assert_eq!(after, Some(HeadState::Attempting { notified: true }));
                }
                HeadState::Ready | HeadState::Settling { .. } => {
                    prop_assert!(events.is_empty(), "woke {events:?}");
                    prop_assert_eq!(after, before);
                }
            }
        }
        self.apply_events(events);
        Ok(())
    }

    /// Invariant 6: a grant to another locker wakes the waiting head of
    /// its key exactly when it brings the head's retry earlier, or makes
    /// it attempt at once when its locker is not registered, and wakes
    /// nobody else.
    fn grant_elsewhere(
        &mut self,
        key: usize,
        other: u64,
        claim_ms: u64,
    ) -> Result<(), TestCaseError> {
        if !self.hears_notices() || other == REG.0 {
            return Ok(());
        }
        self.drain_events();
        let before = head_state(&self.core, KEYS[key]);
        let head_before = head(&self.core, KEYS[key]);
        let registered = (self.core.lines.get(&LineKey::lock(KeyId::of(KEYS[key]))))
            .is_some_and(Line::is_registered);
        let line = line_key(key);
        let payload = format!(
            "{}:g:{}:5:{claim_ms}",
            line.message(),
            line.queue_entry(RegId(other))
        );
        let now = self.now;
        self.core.handle_notice(now, payload.as_bytes());
        let events = drain(&mut self.core);
        let after = head_state(&self.core, KEYS[key]);
        match (before, after) {
            (Some(HeadState::Backoff { .. }), _) if !registered => {
                prop_assert_eq!(after, Some(HeadState::Ready), "attempts at once");
                let expected: Vec<CoreEvent> =
                    head_before.into_iter().map(CoreEvent::Wake).collect();
                prop_assert_eq!(&events, &expected, "the head woken (invariant 6)");
            }
            (
                Some(HeadState::Backoff { retry_at: old }),
                Some(HeadState::Backoff { retry_at: new }),
            ) => {
                // The newest grant's window bounds the retry (the last
                // reply's instant may bound it sooner).
                prop_assert!(
                    new.is_some_and(|at| at <= now + ms(claim_ms) + CLAIM_MARGIN),
                    "retry {new:?} after the grant's window (invariant 6)"
                );
                let sooner = earliest_of(new, old) != old;
                let expected: Vec<CoreEvent> = if sooner {
                    head_before.into_iter().map(CoreEvent::Wake).collect()
                } else {
                    Vec::new()
                };
                prop_assert_eq!(
                    &events,
                    &expected,
                    "retry {:?} -> {:?} (invariant 6)",
                    old,
                    new
                );
            }
            _ => {
                prop_assert_eq!(before, after, "only a backing-off head is rescheduled");
                prop_assert!(events.is_empty(), "woke {events:?} (invariant 6)");
            }
        }
        self.apply_events(events);
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let now = self.now;
        let bound = backoff_bound();
        for (key, name) in KEYS.iter().enumerate() {
            // Invariant 1.
            let live = self
                .waiters
                .iter()
                .filter(|w| w.key == key && w.in_flight.is_some())
                .count();
            let abandoned = self
                .abandoned_in_flight
                .iter()
                .filter(|(k, until)| *k == key && *until > now)
                .count();
            prop_assert!(
                live + abandoned <= 1,
                "{name}: {live} attempts in flight and {abandoned} abandoned ones (invariant 1)"
            );

            let ours: BTreeSet<WaiterId> = self
                .waiters
                .iter()
                .filter(|w| w.key == key)
                .map(|w| w.id)
                .collect();
            prop_assert_eq!(members(&self.core, name), ours, "{} waiters", name);

            // Invariant 2.
            let Some(head_id) = head(&self.core, name) else {
                continue;
            };
            let Some(w) = self.waiters.iter().find(|w| w.id == head_id) else {
                return Err(TestCaseError::fail("a head no front end drives"));
            };
            if w.in_flight.is_some() {
                continue;
            }
            let next = match head_state(&self.core, name) {
                Some(HeadState::Backoff { retry_at: Some(at) }) => {
                    prop_assert!(
                        at <= now + bound,
                        "{name}: retry {:?} after now, beyond {bound:?} (invariant 2)",
                        at - now
                    );
                    at
                }
                Some(HeadState::Settling { until: Some(until) }) => {
                    prop_assert!(until <= now + COMMAND_TIMEOUT, "{name}: settles too long");
                    until
                }
                other => {
                    return Err(TestCaseError::fail(format!(
                    "{name}: head {head_id:?} waits in {other:?} with no wake-up due (invariant 2)"
                )))
                }
            };
            prop_assert!(
                w.wake_at.is_some_and(|at| at <= next),
                "{name}: the head sleeps until {:?}, its retry is {:?} (invariant 2)",
                w.wake_at.map(|at| at.saturating_duration_since(now)),
                next.saturating_duration_since(now)
            );
        }
        // Invariant 4: whoever could end has ended.
        for w in &self.waiters {
            let is_head = head(&self.core, KEYS[w.key]) == Some(w.id);
            let ended = !w.try_once
                && w.in_flight.is_none()
                && w.deadline.is_some_and(|d| d <= now)
                && (w.attempts > 0 || !is_head);
            prop_assert!(!ended, "{:?} still waits past its wait (invariant 4)", w.id);
        }
        prop_assert_eq!(
            self.core.attempts_in_flight(),
            self.waiters
                .iter()
                .filter(|w| w.in_flight.is_some())
                .count()
        );
        Ok(())
    }
}

fn run(subscribed: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut front = Front::new(t0(), subscribed);
    for op in ops {
        front.apply(op)?;
        front.check()?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn contended_hand_over_keeps_lines_fifo_and_heads_scheduled(
        ops in proptest::collection::vec(op(false), 1..120)
    ) {
        run(false, &ops)?;
    }

    #[test]
    fn grants_elsewhere_reschedule_subscribed_heads_without_stranding_them(
        ops in proptest::collection::vec(op(true), 1..120)
    ) {
        run(true, &ops)?;
    }
}
