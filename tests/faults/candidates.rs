//! Candidates of one election checked on a second Redis, the checker: each
//! candidate campaigns, leads briefly and resigns or drops its leadership,
//! in a loop, and records every leadership on the checker, where
//! [`check_leaderships`] reads them. Written once for the candidates of
//! the fault rows: threads of this process (any front end), the threads of
//! a child process (blocking), or the tasks of a child process on one
//! executor thread (async).
//!
//! A leader writes twice with its term to a `FencedStore` on the checker
//! and brackets the writes with `INCR` of a logical clock there: a leader
//! whose two writes were both accepted *certainly led* between them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redlease::fenced::FencedStore;
use redlease::Fence;

use crate::behaviour::common::{let_pass, waiting, BOUND};
use crate::behaviour::front::Front;
use crate::support::RedisServer;

/// The checker's list of recorded leaderships, one [`Grant`] a line.
const GRANTS: &str = "grants";
/// The checker's logical clock.
const CLOCK: &str = "clock";
/// The fenced store's resource the leaders write.
const RESOURCE: &str = "leader";
/// How long a leader holds between its two writes.
const HOLD: Duration = Duration::from_millis(3);

/// One leadership, as the checker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grant {
    /// The locker (or process) whose candidate led.
    by: usize,
    term: u64,
    /// Whether the store accepted one of its writes.
    accepted: bool,
    /// When both were accepted: the clock after the first write and before
    /// the second, when it certainly led.
    span: Option<(u64, u64)>,
}

impl Grant {
    /// `by term accepted first last`, `first last` = `- -` without a span.
    fn line(&self) -> String {
        let (first, last) = self.span.map_or(("-".into(), "-".into()), |(a, b)| {
            (a.to_string(), b.to_string())
        });
        format!("{} {} {} {first} {last}", self.by, self.term, self.accepted)
    }

    fn parse(line: &str) -> Grant {
        let fields: Vec<&str> = line.split(' ').collect();
        let [by, term, accepted, first, last] = fields[..] else {
            panic!("a grant line: {line:?}");
        };
        Grant {
            by: by.parse().expect("by"),
            term: term.parse().expect("term"),
            accepted: accepted == "true",
            span: first.parse().ok().zip(last.parse().ok()),
        }
    }
}

/// What one candidate (or a process's candidates together) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Leaderships won.
    pub(crate) led: u64,
    /// Of those, resigned.
    pub(crate) resigned: u64,
    /// Of those, dropped.
    pub(crate) dropped: u64,
    /// Campaigns that ended without a leadership (a wait that ran out, an
    /// unknown outcome, Redis away).
    pub(crate) failed: u64,
}

impl Counts {
    /// Adds `other`'s counts.
    pub(crate) fn add(&mut self, other: Counts) {
        self.led += other.led;
        self.resigned += other.resigned;
        self.dropped += other.dropped;
        self.failed += other.failed;
    }

    /// `led=N resigned=N dropped=N failed=N`.
    pub(crate) fn line(&self) -> String {
        format!(
            "led={} resigned={} dropped={} failed={}",
            self.led, self.resigned, self.dropped, self.failed
        )
    }

    /// Reads [`line`](Self::line).
    pub(crate) fn parse(line: &str) -> Counts {
        let mut counts = Counts::default();
        for field in line.split(' ') {
            let (name, n) = field.split_once('=').expect("name=count");
            let n = n.parse().expect("a count");
            match name {
                "led" => counts.led = n,
                "resigned" => counts.resigned = n,
                "dropped" => counts.dropped = n,
                "failed" => counts.failed = n,
                _ => panic!("a count: {line:?}"),
            }
        }
        counts
    }
}

/// A candidate: who it is, where it records its leaderships, and how long
/// it goes on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    /// The number its leaderships are recorded under (its locker's or its
    /// process's).
    pub(crate) by: usize,
    /// What its values start with (`<tag>.<round>`).
    pub(crate) tag: &'a str,
    /// The checker's URL.
    pub(crate) checker_url: &'a str,
    /// The namespace of the fenced store on the checker.
    pub(crate) ns: &'a str,
    /// It campaigns again while this holds.
    pub(crate) running: &'a AtomicBool,
}

/// A candidate's rounds: each campaign's value, and what came of it.
struct Rounds<'a> {
    tag: &'a str,
    running: &'a AtomicBool,
    round: u64,
    counts: Counts,
}

impl<'a> Rounds<'a> {
    fn new(tag: &'a str, running: &'a AtomicBool) -> Self {
        Rounds {
            tag,
            running,
            round: 0,
            counts: Counts::default(),
        }
    }

    /// The next campaign's value (`<tag>.<round>`), while running.
    fn next_value(&mut self) -> Option<String> {
        if !self.running.load(Ordering::SeqCst) {
            return None;
        }
        self.round += 1;
        Some(format!("{}.{}", self.tag, self.round))
    }

    /// A campaign that ended without a leadership: any error (a wait that
    /// ran out, an unknown outcome, Redis away) is such a round.
    fn failed(&mut self) {
        self.counts.failed += 1;
    }

    /// Counts this round's leadership and tells how it ends: resigned
    /// (even rounds) or dropped (odd ones).
    fn led_and_resigns(&mut self) -> bool {
        let resigns = self.round.is_multiple_of(2);
        self.counts.led += 1;
        if resigns {
            self.counts.resigned += 1;
        } else {
            self.counts.dropped += 1;
        }
        resigns
    }
}

/// `candidate` of `locker` for the election `name`: campaigns (waiting up
/// to [`BOUND`]), leads (records the leadership on the checker), resigns
/// or drops, while it runs.
pub(crate) fn candidate_rounds<F: Front>(
    locker: &F,
    name: &str,
    candidate: Candidate<'_>,
) -> Counts {
    let store = FencedStore::new(candidate.ns);
    let mut conn = redis::Client::open(candidate.checker_url)
        .and_then(|c| c.get_connection())
        .expect("the candidate's checker connection");
    let mut rounds = Rounds::new(candidate.tag, candidate.running);
    while let Some(value) = rounds.next_value() {
        let Ok(leadership) = locker.campaign(name, value.as_bytes(), waiting(BOUND)) else {
            rounds.failed();
            continue;
        };
        record(
            &mut conn,
            &store,
            candidate.by,
            F::term(&leadership),
            &value,
        );
        if rounds.led_and_resigns() {
            let _ = F::resign(leadership);
        } else {
            drop(leadership);
        }
    }
    rounds.counts
}

/// A leader's two writes with `term`, bracketed by the clock, recorded.
fn record(conn: &mut redis::Connection, store: &FencedStore, by: usize, term: Fence, value: &str) {
    let tick = |conn: &mut redis::Connection| -> u64 {
        redis::cmd("INCR").arg(CLOCK).query(conn).expect("INCR")
    };
    let first = store.write(conn, RESOURCE, term, value).is_ok();
    let after_first = tick(conn);
    let_pass(HOLD);
    let before_second = tick(conn);
    let second = store.write(conn, RESOURCE, term, value).is_ok();
    let grant = Grant::new(by, term, first, second, (after_first, before_second));
    let _: u64 = grant.push().query(conn).expect("RPUSH");
}

impl Grant {
    /// A leadership of `by` in `term` whose writes were accepted as told,
    /// with the clock `between` them.
    fn new(by: usize, term: Fence, first: bool, second: bool, between: (u64, u64)) -> Grant {
        Grant {
            by,
            term: term.get(),
            accepted: first || second,
            span: (first && second).then_some(between),
        }
    }

    /// `RPUSH` of the grant to the checker's list.
    fn push(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("RPUSH");
        cmd.arg(GRANTS).arg(self.line());
        cmd
    }
}

/// As [`candidate_rounds`], an async task on `election` of the async front
/// end: waits on `async_io` timers and writes with `write_async`, so that
/// the tasks of one executor thread campaign side by side.
pub(crate) async fn candidate_task(
    election: &redlease::aio::Election,
    candidate: Candidate<'_>,
) -> Counts {
    let store = FencedStore::new(candidate.ns);
    // No response timeout: a reply that arrives while this process is
    // SIGSTOPped is read after SIGCONT, not timed out by a timer that ran
    // out meanwhile, so the checker sees every write as it was.
    let unbounded = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn = redis::Client::open(candidate.checker_url)
        .expect("the checker's URL")
        .get_multiplexed_async_connection_with_config(&unbounded)
        .await
        .expect("the task's checker connection");
    let mut rounds = Rounds::new(candidate.tag, candidate.running);
    while let Some(value) = rounds.next_value() {
        let Ok(leadership) = election
            .campaign_with(value.as_bytes(), waiting(BOUND))
            .await
        else {
            rounds.failed();
            continue;
        };
        record_async(&mut conn, &store, candidate.by, leadership.term(), &value).await;
        if rounds.led_and_resigns() {
            let _ = leadership.resign().await;
        } else {
            drop(leadership);
        }
    }
    rounds.counts
}

/// As [`record`], on an async connection, waiting on an `async_io` timer.
async fn record_async(
    conn: &mut redis::aio::MultiplexedConnection,
    store: &FencedStore,
    by: usize,
    term: Fence,
    value: &str,
) {
    let first = store.write_async(conn, RESOURCE, term, value).await.is_ok();
    let after_first = tick_async(conn).await;
    async_io::Timer::after(HOLD).await;
    let before_second = tick_async(conn).await;
    let second = store.write_async(conn, RESOURCE, term, value).await.is_ok();
    let grant = Grant::new(by, term, first, second, (after_first, before_second));
    let _: u64 = grant.push().query_async(conn).await.expect("RPUSH");
}

async fn tick_async(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    redis::cmd("INCR")
        .arg(CLOCK)
        .query_async(conn)
        .await
        .expect("INCR")
}

/// Checks the leaderships recorded on `checker`: no term granted twice;
/// at least `min_spans` certain spans, none overlapping another, a later
/// one always with a larger term; every one of `leaders` lockers (or
/// processes) led at least once; the store ends at the largest term it
/// accepted. Returns each locker's count of leaderships.
pub(crate) fn check_leaderships(
    checker: &RedisServer,
    ns: &str,
    min_spans: usize,
    leaders: usize,
) -> Vec<u64> {
    let mut conn = checker.conn();
    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(GRANTS)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .expect("LRANGE");
    let grants: Vec<Grant> = lines.iter().map(|l| Grant::parse(l)).collect();

    let mut terms: Vec<u64> = grants.iter().map(|g| g.term).collect();
    terms.sort_unstable();
    let granted_count = terms.len();
    terms.dedup();
    assert_eq!(terms.len(), granted_count, "a term granted twice");
    let mut spans: Vec<(u64, u64, u64)> = grants
        .iter()
        .filter_map(|g| g.span.map(|(a, b)| (a, b, g.term)))
        .collect();
    spans.sort_unstable();
    assert!(
        spans.len() >= min_spans,
        "too few certain leaderships: {spans:?}"
    );
    for pair in spans.windows(2) {
        let ((_, end, term), (start, _, next)) = (pair[0], pair[1]);
        assert!(end < start, "two leaders at once: {pair:?}");
        assert!(term < next, "a later leader with a smaller term: {pair:?}");
    }
    let per_leader: Vec<u64> = (0..leaders)
        .map(|by| grants.iter().filter(|g| g.by == by).count() as u64)
        .collect();
    assert!(
        per_leader.iter().all(|&n| n > 0),
        "each of {leaders} leads at least once: {per_leader:?}"
    );
    eprintln!(
        "{granted_count} leaderships ({per_leader:?}), {} certain spans in order",
        spans.len()
    );
    let largest = grants.iter().filter(|g| g.accepted).map(|g| g.term).max();
    let stored = FencedStore::new(ns).read(&mut conn, RESOURCE).unwrap();
    assert_eq!(stored.map(|(fence, _)| fence.get()), largest);
    per_leader
}
