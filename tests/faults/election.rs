//! Leader election under faults (docs/ELECTION.md §8, §12), each row
//! written once for any front end: a leader process really SIGSTOPped past
//! its lease, and candidates checked on a second Redis while faults run
//! (the check, [`leaderships_never_overlap_under`], serves the Cluster's
//! row in `tests/cluster_election.rs` too). Waits are bounded; no row
//! asserts how long something took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlease::fenced::FencedStore;
use redlease::ReleaseOutcome;

use crate::behaviour::common::{config, connect, granted, namespace, waiting, BOUND};
use crate::behaviour::front::Front;
use crate::child::{self, LEADER_RESOURCE};
use crate::support::RedisServer;

/// A leader process SIGSTOPped past its lease: a candidate of this process
/// leads in a larger term and writes; the stopped leader, SIGCONTed, writes
/// with its old term first thing (as a leader that still believes it
/// leads) and the fenced store refuses it; its `lost` fires and it reads
/// the new leader's term.
pub(crate) fn a_sigstopped_leader_is_replaced_and_after_sigcont_its_old_terms_write_is_refused<
    F: Front,
>() {
    let server = RedisServer::start();
    let ns = namespace("f-stopped-leader");
    let mut leader =
        child::spawn_leader::<F>(&server, &ns, "scheduler", Duration::from_millis(600));
    let candidate: F = connect(&server, config(&ns));
    let store = FencedStore::new(&ns);
    the_stopped_leaders_old_term_is_refused(
        &mut leader,
        &candidate,
        "scheduler",
        &store,
        &mut server.conn(),
    );
}

/// The SIGSTOP row's course, on a standalone server or a cluster: the
/// leader `leader` wrote with its term to `store`; stopped past its lease,
/// `candidate` leads `name` in a larger term and writes; the stopped
/// leader, SIGCONTed, writes with its old term first thing (as a leader
/// that still believes it leads) and the store refuses it; its `lost`
/// fires and it reads the new leader's term. `conn` reaches the store.
pub(crate) fn the_stopped_leaders_old_term_is_refused<F: Front>(
    leader: &mut child::ChildLeader,
    candidate: &F,
    name: &str,
    store: &FencedStore,
    conn: &mut redis::Connection,
) {
    assert_eq!(
        store
            .read(conn, LEADER_RESOURCE)
            .unwrap()
            .map(|(f, v)| (f.get(), v)),
        Some((leader.term(), b"from child".to_vec())),
        "the leader wrote with its term"
    );

    leader.stop();
    let next = granted(
        candidate.campaign(name, b"next", waiting(BOUND)),
        "the candidate leads once the stopped leader's lease ran out",
    );
    let term = F::term(&next);
    assert!(term.get() > leader.term(), "a larger term");
    store
        .write(conn, LEADER_RESOURCE, term, "from next")
        .unwrap();

    // Buffered while it is stopped: the first thing it reads once resumed.
    leader.write_again();
    leader.resume();
    assert_eq!(
        leader.report_within(BOUND),
        format!("write=stale lost=true leader={term}")
    );
    assert_eq!(
        store.read(conn, LEADER_RESOURCE).unwrap(),
        Some((term, b"from next".to_vec())),
        "the new leader's write stands"
    );
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);
}

/// Three lockers (each with its own connections, subscriber and keeper)
/// of four candidates each campaign, lead briefly and resign or drop, in
/// a loop, while the election's Redis is SIGSTOPped past the leases,
/// restarted without its data, has its connections killed and its
/// scripts flushed; [`leaderships_never_overlap_under`] checks them on a
/// second Redis.
pub(crate) fn one_leader_at_a_time_under_faults_checked_on_a_second_redis<F: Front>() {
    let server = RedisServer::start();
    let checker = RedisServer::start();
    let ns = namespace("f-elect-matrix");
    let lockers: Vec<Arc<F>> = (0..3)
        .map(|_| {
            Arc::new(connect::<F>(
                &server,
                config(&ns)
                    .lease(Duration::from_millis(400))
                    .command_timeout(Duration::from_millis(200)),
            ))
        })
        .collect();
    let faults: [&dyn Fn(); 5] = [
        &|| {
            let _paused = server.pause_guard();
            crate::behaviour::common::let_pass(Duration::from_millis(600));
        },
        &|| server.restart(),
        &|| {
            server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"));
        },
        &|| {
            server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
        },
        &|| {
            server.query(redis::cmd("SCRIPT").arg("FLUSH"));
        },
    ];
    leaderships_never_overlap_under(&lockers, 4, &checker, &ns, 12, || {
        for round in 0..3 {
            for (i, fault) in faults.iter().enumerate() {
                // Contention between faults, longer than a lease now and then.
                crate::behaviour::common::let_pass(Duration::from_millis(
                    150 + 100 * ((round + i) % 4) as u64,
                ));
                fault();
            }
        }
    });
}

/// `candidates_each` candidates on each of `lockers` campaign for the
/// election `scheduler`, lead briefly and resign or drop, in a loop,
/// while `inject` runs (the faults; the loop stops 500 ms after it
/// returns). Every leader writes twice with its term to a `FencedStore`
/// on `checker`, a second Redis that is never faulted, and brackets the
/// writes with `INCR` of a logical clock there: a leader whose two writes
/// were both accepted *certainly led* between them. No two such spans
/// overlap, and a later one always has a larger term; no term is granted
/// twice; at least `min_spans` spans; the store ends at the largest term
/// it accepted.
pub(crate) fn leaderships_never_overlap_under<F: Front>(
    lockers: &[Arc<F>],
    candidates_each: usize,
    checker: &RedisServer,
    ns: &str,
    min_spans: usize,
    inject: impl FnOnce(),
) {
    let faulting = Arc::new(AtomicBool::new(true));
    let grants: Arc<Mutex<Vec<Grant>>> = Arc::default();
    let candidates: Vec<_> = lockers
        .iter()
        .enumerate()
        .flat_map(|(l, locker)| (0..candidates_each).map(move |c| (l, c, locker.clone())))
        .map(|(l, c, locker)| {
            let (faulting, grants) = (faulting.clone(), grants.clone());
            let (ns, url) = (ns.to_owned(), checker.url());
            crate::behaviour::common::spawn(&format!("candidate {l}.{c}"), move || {
                let store = FencedStore::new(&ns);
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                let tick = |conn: &mut redis::Connection| -> u64 {
                    redis::cmd("INCR").arg("clock").query(conn).unwrap()
                };
                let mut round = 0u64;
                while faulting.load(Ordering::SeqCst) {
                    round += 1;
                    let value = format!("{l}.{c}.{round}");
                    let Ok(leadership) = candidate_campaign::<F>(&locker, value.as_bytes()) else {
                        continue;
                    };
                    let term = F::term(&leadership);
                    let first = store.write(&mut conn, "leader", term, &value).is_ok();
                    let after_first = tick(&mut conn);
                    crate::behaviour::common::let_pass(Duration::from_millis(3));
                    let before_second = tick(&mut conn);
                    let second = store.write(&mut conn, "leader", term, &value).is_ok();
                    grants.lock().unwrap().push(Grant {
                        term: term.get(),
                        accepted: first || second,
                        span: (first && second).then_some((after_first, before_second)),
                    });
                    if round.is_multiple_of(2) {
                        let _ = F::resign(leadership);
                    } else {
                        drop(leadership);
                    }
                }
            })
        })
        .collect();

    inject();
    crate::behaviour::common::let_pass(Duration::from_millis(500));
    faulting.store(false, Ordering::SeqCst);
    for candidate in candidates {
        candidate.join_within(BOUND * 3);
    }

    let grants = grants.lock().unwrap();
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
    eprintln!(
        "{granted_count} leaderships, {} certain spans in order",
        spans.len()
    );
    let largest = grants.iter().filter(|g| g.accepted).map(|g| g.term).max();
    let mut conn = checker.conn();
    let stored = FencedStore::new(ns).read(&mut conn, "leader").unwrap();
    assert_eq!(stored.map(|(fence, _)| fence.get()), largest);
}

/// One leadership of the fault-matrix row, as the checker saw it.
#[derive(Debug, Clone, Copy)]
struct Grant {
    term: u64,
    /// Whether the store accepted one of its writes.
    accepted: bool,
    /// When both were accepted: the clock after the first write and before
    /// the second, when it certainly led.
    span: Option<(u64, u64)>,
}

/// One campaign of a candidate under faults: waits up to [`BOUND`]; any
/// error (the wait ran out, an outcome unknown, Redis away) is a round
/// without a leadership.
fn candidate_campaign<F: Front>(
    locker: &F,
    value: &[u8],
) -> Result<F::Leadership, redlease::Error> {
    locker.campaign("scheduler", value, waiting(BOUND))
}
