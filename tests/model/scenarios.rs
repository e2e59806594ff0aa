//! Scripted sequences of script calls (and raw commands), run by the
//! cross-check on both the emulator and a real server, and by the
//! declared-keys audit on the emulator: each reaches the scripts' branches
//! (free, held, queued, granted, claimed, replayed, expired, deregistered)
//! for every kind of lease.

use super::calls::{token, Call, Hand, Names, QKind};

/// One step of a sequence.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// A script call.
    Eval(Call),
    /// One raw command, run through `redis.pcall(unpack(ARGV))`.
    Raw(Vec<String>),
    /// An inline script (keys declared).
    Inline(&'static str, Vec<String>, Vec<String>),
    /// Wait this many ms (the emulator's clock moves as much).
    Sleep(u64),
}

pub(crate) const RAW: &str = "return redis.pcall(unpack(ARGV))";

fn raw(words: &str) -> Step {
    Step::Raw(words.split(' ').map(str::to_owned).collect())
}

/// A named sequence.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) steps: Vec<Step>,
}

const LEASE: u64 = 10_000;
const SHORT: u64 = 150;
const PAST: u64 = 300;
const REG: u64 = 10_000;
const CLAIM: u64 = 5_000;

fn hand(entry: &str, grant: &str, registered: bool, keep: &'static str) -> Hand {
    Hand {
        entry: entry.to_owned(),
        reg_ms: REG,
        claim_ms: CLAIM,
        grant: grant.to_owned(),
        register: true,
        registered,
        keep,
        floor: None,
    }
}

/// The Redis semantics the scripts rely on, command by command.
pub(crate) fn raw_semantics() -> Scenario {
    let steps = vec![
        raw("SET a 1"),
        raw("PEXPIRE a 1000 GT"),
        raw("PEXPIRE a 1000 NX"),
        raw("PEXPIRE a 500 GT"),
        raw("PEXPIRE a 5000 GT"),
        raw("PEXPIRE a 7000 NX"),
        raw("SET a 2 KEEPTTL"),
        raw("SET a 3 GET"),
        raw("SET a 4 NX"),
        raw("SET a 5 XX PX 2000"),
        raw("SET b x NX GET"),
        raw("SET b y NX GET"),
        raw("SET b z PX 3000 GET"),
        raw("GETDEL a"),
        raw("GETDEL a"),
        raw("INCR c"),
        raw("INCR c"),
        raw("SET d abc"),
        raw("INCR d"),
        raw("SET c 9 KEEPTTL"),
        raw("RPUSH l x y z"),
        raw("LPUSH l w"),
        raw("LMOVE l l LEFT RIGHT"),
        raw("LMOVE l l RIGHT LEFT"),
        raw("LRANGE l 0 -1"),
        raw("LPOS l y"),
        raw("LPOS l q"),
        raw("LSET l 1 Y"),
        raw("LSET l 9 Y"),
        raw("LINDEX l -1"),
        raw("LINDEX l 7"),
        raw("LREM l 0 Y"),
        raw("LLEN l"),
        raw("PEXPIRE l 5000"),
        raw("LPOP l"),
        raw("RPOP l"),
        raw("LPOP l"),
        raw("EXISTS l"),
        raw("PTTL l"),
        raw("LSET l 0 x"),
        raw("LMOVE l l LEFT RIGHT"),
        raw("RPUSH l only"),
        raw("PTTL l"),
        raw("LREM l 0 only"),
        raw("EXISTS l"),
        raw("RPUSH d x"),
        raw("LPOS d x"),
        raw("GETDEL l"),
        raw("ZADD z 5 a 3 b"),
        raw("ZADD z XX 7 c"),
        raw("ZADD z XX 9 a"),
        raw("ZADD z 1 a"),
        raw("ZRANGE z -1 -1 WITHSCORES"),
        raw("ZRANGE z 0 -1"),
        raw("ZSCORE z a"),
        raw("ZSCORE z q"),
        raw("ZCARD z"),
        Step::Inline(
            "local t = redis.call('TIME') \
             local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
             return {redis.call('PEXPIREAT', KEYS[1], ms + 5000, 'GT'), \
                     redis.call('PEXPIREAT', KEYS[1], ms + 5000, 'NX'), \
                     redis.call('PEXPIREAT', KEYS[1], ms + 4000, 'GT'), \
                     redis.call('PEXPIREAT', KEYS[1], ms + 6000, 'GT')}",
            vec!["z".to_owned()],
            Vec::new(),
        ),
        raw("ZREMRANGEBYSCORE z -inf 3"),
        raw("ZRANGE z 0 -1 WITHSCORES"),
        raw("ZREM z a b"),
        raw("ZCARD z"),
        raw("EXISTS z"),
        raw("PTTL z"),
        raw("ZADD z 2 m"),
        raw("PTTL z"),
        raw("ZADD d 1 x"),
        raw("ZRANGE d 0 -1"),
        raw("ZSCORE d x"),
        raw("MSET m1 1 m2 2"),
        raw("MGET m1 d z m2 nothing"),
        raw("DEL m1 m2 nothing"),
        raw("EXISTS m1 z d"),
        raw("GET z"),
        raw("SET e v PX 100"),
        raw("PTTL e"),
        raw("PTTL nothing"),
        raw("PTTL d"),
        Step::Sleep(PAST),
        raw("GET e"),
        raw("EXISTS e"),
        raw("PTTL e"),
        raw("PUBLISH ch hello"),
        raw("SET f 1 PX 0"),
        raw("NOSUCHCOMMAND x"),
    ];
    Scenario {
        name: "raw commands",
        steps,
    }
}

/// The lock with the hand-over: take, busy and register, grant on release,
/// replayed release, claim and replay, renew, deregister, a lapsed holder
/// handed over by an acquire, the lingering registration, and a plain lock.
pub(crate) fn lock() -> Scenario {
    let n = Names::new("ns", 1);
    let (a, b, c) = (token(0xa), token(0xb), token(0xc));
    let (ga, gb, gc) = (token(0x1a), token(0x1b), token(0x1c));
    let ha = |reg: bool, keep| hand("00000000000000a1", &ga, reg, keep);
    let hb = |reg: bool, keep| hand("00000000000000b1", &gb, reg, keep);
    let hc = |reg: bool, keep| hand("00000000000000c1", &gc, reg, keep);
    let acq = |t: &str, lease, h: Hand| Step::Eval(Call::acquire(&n, t, lease, 0, Some(&h)));
    let rel = |t: &str, linger: Option<&str>| Step::Eval(Call::lock_release(&n, t, 0, linger));
    let steps = vec![
        acq(&a, LEASE, ha(false, "d")),
        acq(&a, LEASE, ha(false, "d")),
        acq(&b, LEASE, hb(false, "d")),
        acq(&c, LEASE, hc(false, "d")),
        acq(&b, LEASE, hb(true, "d")),
        Step::Eval(Call::renew(&n.lock(), &a, LEASE)),
        Step::Eval(Call::renew(&n.lock(), &b, LEASE)),
        rel(&a, None),
        rel(&a, None),
        Step::Eval(Call::renew(&n.lock(), &gb, LEASE)),
        acq(&c, LEASE, hc(true, "d")),
        acq(&b, LEASE, hb(true, "k")),
        acq(&b, LEASE, hb(true, "r")),
        // Another grant token's removal leaves it; its own takes it out.
        Step::Eval(Call::deregister(&n, QKind::Lock, "00000000000000c1", &gb)),
        Step::Eval(Call::deregister(&n, QKind::Lock, "00000000000000c1", &gc)),
        Step::Eval(Call::deregister(&n, QKind::Lock, "00000000000000c1", &gc)),
        // B's registration lingers: its release never grants it.
        rel(&b, Some("00000000000000b1")),
        acq(&a, SHORT, ha(false, "d")),
        acq(&b, LEASE, hb(false, "d")),
        acq(&c, LEASE, hc(false, "d")),
        Step::Sleep(PAST),
        // A lapsed: C's attempt hands the lock to B, the head.
        acq(&c, LEASE, hc(true, "d")),
        Step::Eval(Call::renew(&n.lock(), &a, LEASE)),
        rel(&a, None),
        acq(&b, LEASE, hb(true, "d")),
        rel(&b, None),
        acq(&c, LEASE, hc(true, "d")),
        rel(&c, None),
        rel(&c, None),
        // The lock without the hand-over.
        Step::Eval(Call::acquire(&n, &a, LEASE, 60_000, None)),
        Step::Eval(Call::acquire(&n, &b, LEASE, 60_000, None)),
        Step::Eval(Call::release(&n, &n.lock(), QKind::Lock, &a)),
        Step::Eval(Call::release(&n, &n.lock(), QKind::Lock, &a)),
        // Another type under the lock's name.
        Step::Raw(vec!["RPUSH".into(), n.lock(), "x".into()]),
        Step::Eval(Call::release(&n, &n.lock(), QKind::Lock, &a)),
        Step::Eval(Call::acquire(&n, &a, LEASE, 0, None)),
        Step::Raw(vec!["DEL".into(), n.lock()]),
        // A registration whose bound passed is dropped by the next grant.
        acq(&a, LEASE, ha(false, "d")),
        acq(
            &b,
            LEASE,
            Hand {
                reg_ms: 100,
                ..hb(false, "d")
            },
        ),
        acq(&c, LEASE, hc(false, "d")),
        Step::Sleep(PAST),
        rel(&a, None),
        acq(&c, LEASE, hc(true, "d")),
        rel(&c, None),
    ];
    Scenario {
        name: "lock",
        steps,
    }
}

/// The semaphore (2 permits) with the hand-over.
pub(crate) fn semaphore() -> Scenario {
    let n = Names::new("ns", 2);
    let (a, b, c, d) = (token(0xa), token(0xb), token(0xc), token(0xd));
    let h = |id: &str, g: u64, reg: bool, keep| hand(id, &token(g), reg, keep);
    let acq = |t: &str, permits, hd: Hand| {
        Step::Eval(Call::sem_acquire(&n, permits, t, LEASE, 0, Some(&hd)))
    };
    let steps = vec![
        acq(&a, 2, h("a1", 0x1a, false, "d")),
        acq(&a, 2, h("a1", 0x1a, false, "d")),
        acq(&b, 2, h("b1", 0x1b, false, "k")),
        acq(&c, 2, h("c1", 0x1c, false, "d")),
        acq(&d, 2, h("d1", 0x1d, false, "d")),
        acq(&c, 3, h("c1", 0x1c, true, "d")),
        Step::Eval(Call::slot_release(&n, 0, &a, 0)),
        Step::Eval(Call::slot_release(&n, 0, &a, 0)),
        Step::Eval(Call::renew(&format!("{}0", n.sem_slot_prefix()), &a, LEASE)),
        acq(&c, 2, h("c1", 0x1c, true, "k")),
        Step::Eval(Call::sem_release_any(&n, 2, &b)),
        Step::Eval(Call::sem_release_any(&n, 2, &b)),
        acq(&a, 2, h("a1", 0x1a, false, "d")),
        Step::Eval(Call::slot_release(&n, 0, &c, 0)),
        acq(&d, 2, h("d1", 0x1d, true, "d")),
        Step::Eval(Call::slot_release(&n, 1, &a, 0)),
        Step::Eval(Call::slot_release(&n, 0, &d, 0)),
        Step::Eval(Call::sem_acquire(&n, 3, &a, LEASE, 0, None)),
        Step::Eval(Call::sem_release_any(&n, 3, &a)),
    ];
    Scenario {
        name: "semaphore",
        steps,
    }
}

/// The read-write lease with the hand-over: readers, a writer waiting with
/// its intent, hand-over to the writer by the last reader, to the readers by
/// the writer, renew, and try-once writes.
pub(crate) fn read_write() -> Scenario {
    let n = Names::new("ns", 3);
    let (r1, r2, r3, w1, w2) = (token(0x1), token(0x2), token(0x3), token(0x4), token(0x5));
    let h = |id: &str, g: u64, reg: bool, keep| hand(id, &token(g), reg, keep);
    let read = |t: &str, hd: Hand| Step::Eval(Call::rw_acquire(&n, t, LEASE, 0, None, Some(&hd)));
    let write = |t: &str, intent: u64, hd: Hand| {
        Step::Eval(Call::rw_acquire(&n, t, LEASE, 0, Some(intent), Some(&hd)))
    };
    let steps = vec![
        read(&r1, h("ra1", 0x11, false, "d")),
        read(&r2, h("rb1", 0x12, false, "d")),
        read(&r1, h("ra1", 0x11, false, "d")),
        write(&w1, 3000, h("wc1", 0x13, false, "d")),
        read(&r3, h("rd1", 0x14, false, "d")),
        write(&w2, 3000, h("we1", 0x15, false, "d")),
        Step::Eval(Call::read_renew(&n, &r1, LEASE)),
        Step::Eval(Call::read_release(&n, &r1, Some(0))),
        Step::Eval(Call::read_release(&n, &r1, Some(0))),
        Step::Eval(Call::read_release(&n, &r2, Some(0))),
        write(&w1, 3000, h("wc1", 0x13, true, "d")),
        write(&w1, 3000, h("wc1", 0x13, true, "d")),
        Step::Eval(Call::renew(&n.rw("write"), &w1, LEASE)),
        read(&r3, h("rd1", 0x14, true, "d")),
        Step::Eval(Call::write_release(&n, &w1, 0)),
        Step::Eval(Call::write_release(&n, &w1, 0)),
        read(&r3, h("rd1", 0x14, true, "d")),
        write(&w2, 3000, h("we1", 0x15, true, "d")),
        Step::Eval(Call::read_release(&n, &r3, Some(0))),
        write(&w2, 3000, h("we1", 0x15, true, "d")),
        Step::Eval(Call::write_release(&n, &w2, 0)),
        // Without the hand-over; a reader lapses; a try-once write.
        Step::Eval(Call::rw_acquire(&n, &r1, SHORT, 0, None, None)),
        Step::Eval(Call::rw_acquire(&n, &w1, LEASE, 0, Some(0), None)),
        Step::Sleep(PAST),
        Step::Eval(Call::read_renew(&n, &r1, LEASE)),
        Step::Eval(Call::read_release(&n, &r1, None)),
        Step::Eval(Call::rw_acquire(&n, &w1, LEASE, 60_000, Some(0), None)),
        Step::Eval(Call::rw_acquire(&n, &r2, LEASE, 0, None, None)),
        Step::Eval(Call::release(&n, &n.rw("write"), QKind::Rw, &w1)),
        Step::Eval(Call::rw_acquire(&n, &r2, LEASE, 60_000, None, None)),
        Step::Eval(Call::read_release(&n, &r2, None)),
    ];
    Scenario {
        name: "read-write",
        steps,
    }
}

/// The multi-key lease (2 keys): grant, busy with reservations and
/// registrations, release handing over as a reservation, renew, try once.
pub(crate) fn multi() -> Scenario {
    let keys = [Names::new("ns", 4), Names::new("ns", 5)];
    let single = &keys[1];
    let (a, b, c) = (token(0xa), token(0xb), token(0xc));
    let acq = |t: &str, since: u64, reserve: u64, reg: Option<&str>| {
        Step::Eval(Call::multi_acquire(
            &keys,
            t,
            LEASE,
            0,
            since,
            reserve,
            reg.map(|r| (r, REG)),
        ))
    };
    let steps = vec![
        acq(&a, 0, 3000, Some("00000000000000a2")),
        acq(&a, 0, 3000, Some("00000000000000a2")),
        acq(&b, 0, 3000, Some("00000000000000b2")),
        Step::Eval(Call::multi_renew(&keys, &a, LEASE)),
        Step::Eval(Call::multi_release(&keys, &a, Some(0))),
        Step::Eval(Call::multi_release(&keys, &a, Some(0))),
        acq(&b, 1, 3000, Some("00000000000000b2")),
        Step::Eval(Call::multi_renew(&keys, &b, LEASE)),
        // A single-key holder of one key, and a try-once attempt.
        Step::Eval(Call::multi_release(&keys, &b, Some(0))),
        Step::Eval(Call::acquire(single, &c, LEASE, 0, None)),
        acq(&a, 0, 0, None),
        acq(&a, 0, 3000, None),
        Step::Eval(Call::multi_renew(&keys, &a, LEASE)),
        Step::Eval(Call::release(single, &single.lock(), QKind::Lock, &c)),
        acq(&a, 5, 3000, None),
        Step::Eval(Call::multi_release(&keys, &a, None)),
        Step::Eval(Call::multi_renew(&keys, &a, LEASE)),
    ];
    Scenario {
        name: "multi-key",
        steps,
    }
}

/// The stream commands the election scripts use, raw: explicit ids, the
/// top id rule, `MAXLEN ~`, ranges with `COUNT` and exclusive starts.
pub(crate) fn stream_semantics() -> Scenario {
    let steps = vec![
        raw("XRANGE s - +"),
        raw("XREVRANGE s + - COUNT 1"),
        raw("XADD s MAXLEN ~ 64 5-0 prev 0-0 leader 1 value a"),
        raw("XADD s MAXLEN ~ 64 5-1 prev 5-0 leader 1 value b"),
        raw("XADD s MAXLEN ~ 64 5-1 prev 5-0 leader 1 value c"),
        raw("XADD s MAXLEN ~ 64 4-9 prev 5-1 leader 0"),
        raw("XADD s MAXLEN ~ 64 5-2 prev 5-1 leader 0"),
        raw("XADD s MAXLEN ~ 64 1700000000000000-0 prev 5-2 leader 1 value d"),
        raw("XADD s 0-0 a 1"),
        raw("XADD t 7 a 1"),
        raw("XADD s MAXLEN 2 1700000000000000-1 a 1"),
        raw("XRANGE s - +"),
        raw("XRANGE s (5-2 + COUNT 64"),
        raw("XRANGE s (1700000000000000-0 + COUNT 64"),
        raw("XRANGE s (1700000000000000-1 +"),
        raw("XRANGE s 5 5"),
        raw("XREVRANGE s + - COUNT 1"),
        raw("XREVRANGE s + - COUNT 5"),
        raw("XREVRANGE s (1700000000000000-1 -"),
        raw("XRANGE s - + COUNT 0"),
        raw("XRANGE s x +"),
        raw("SET str 1"),
        raw("XADD str 1-0 a 1"),
        raw("XRANGE str - +"),
    ];
    Scenario {
        name: "stream semantics",
        steps,
    }
}

/// An election: a campaign, its replay, a rival's busy campaign, proclaims
/// (new, replayed, stale), a resign, a campaign after the vacancy, a
/// leader that lapses and the next campaign logging its vacancy, reads, a
/// counter of another type. The term counter starts above the clock's
/// floor, so terms and ids do not depend on the clock.
pub(crate) fn election() -> Scenario {
    let n = Names::new("ns", 6);
    let (a, b) = (token(0xa), token(0xb));
    let read = |after: &str| Step::Eval(Call::elect_read(&n, after));
    let t1 = "8000000000000001";
    let steps = vec![
        read(""),
        Step::Raw(vec![
            "SET".into(),
            n.elect_term(),
            "8000000000000000".into(),
        ]),
        Step::Eval(Call::campaign(&n, &a, LEASE, "6161")),
        Step::Eval(Call::campaign(&n, &a, LEASE, "6161")),
        Step::Eval(Call::campaign(&n, &b, LEASE, "6262")),
        Step::Eval(Call::proclaim(&n, &a, "6162", &format!("{t1}-0"))),
        Step::Eval(Call::proclaim(&n, &a, "6162", &format!("{t1}-0"))),
        Step::Eval(Call::proclaim(&n, &a, "6163", "0-0")),
        Step::Eval(Call::proclaim(&n, &b, "6262", &format!("{t1}-1"))),
        read(&format!("{t1}-0")),
        Step::Eval(Call::resign(&n, &b)),
        Step::Eval(Call::resign(&n, &a)),
        Step::Eval(Call::resign(&n, &a)),
        Step::Eval(Call::proclaim(&n, &a, "6164", &format!("{t1}-2"))),
        Step::Eval(Call::campaign(&n, &b, SHORT, "6262")),
        Step::Sleep(PAST),
        read(""),
        Step::Eval(Call::campaign(&n, &a, LEASE, "6161")),
        Step::Eval(Call::renew(&n.elect(), &a, LEASE)),
        Step::Eval(Call::renew(&n.elect(), &b, LEASE)),
        read("0-0"),
        Step::Eval(Call::resign(&n, &a)),
        Step::Raw(vec!["DEL".into(), n.elect_term()]),
        Step::Eval(Call::campaign(&n, &b, LEASE, "6262")),
        Step::Eval(Call::resign(&n, &b)),
        Step::Raw(vec!["DEL".into(), n.elect_term()]),
        Step::Raw(vec!["RPUSH".into(), n.elect_term(), "x".into()]),
        Step::Eval(Call::campaign(&n, &b, LEASE, "6262")),
    ];
    Scenario {
        name: "election",
        steps,
    }
}

/// Every scenario.
pub(crate) fn all() -> Vec<Scenario> {
    vec![
        raw_semantics(),
        lock(),
        semaphore(),
        read_write(),
        multi(),
        stream_semantics(),
        election(),
    ]
}
