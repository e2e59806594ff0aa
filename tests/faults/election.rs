//! Leader election under faults (docs/PROTOCOL.md §11), each row
//! written once for any front end: a leader process really SIGSTOPped past
//! its lease, and candidates checked on a second Redis while faults run
//! (the check, [`leaderships_never_overlap_under`], serves the Cluster's
//! row in `tests/cluster_election.rs` too). Waits are bounded; no row
//! asserts how long something took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redlease::fenced::FencedStore;
use redlease::ReleaseOutcome;

use crate::behaviour::common::{config, connect, granted, namespace, waiting, BOUND};
use crate::behaviour::front::Front;
use crate::candidates::{candidate_rounds, check_leaderships, Candidate};
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

/// Three child processes of four candidates each (threads of a blocking
/// locker, or tasks of an async locker on one executor thread) campaign,
/// lead briefly and resign or drop, in a loop, while the election's Redis
/// suffers the faults of the in-process row above (its `CLIENT KILL`s end
/// the children's connections) and the process of the current leader is
/// SIGSTOPped past the lease and SIGCONTed, twice over;
/// [`check_leaderships`] checks what they recorded on a second Redis, and
/// every process led at least once. Each process's own count of
/// leaderships agrees with what it recorded.
pub(crate) fn one_leader_at_a_time_across_three_processes_checked_on_a_second_redis<F: Front>() {
    let server = RedisServer::start();
    let checker = RedisServer::start();
    let ns = namespace("f-elect-procs");
    let mut children: Vec<child::ChildCandidates> = (0..3)
        .map(|process| {
            child::spawn_candidates::<F>(&server, &checker, &ns, "scheduler", process, 4)
        })
        .collect();
    // Reads which process leads (a candidate's value starts with its
    // process's number) and in which term.
    let observer: F = connect(
        &server,
        config(&ns).command_timeout(Duration::from_millis(200)),
    );
    let leading = || -> Option<(usize, u64)> {
        let leader = observer.leader("scheduler").ok()??;
        let value = String::from_utf8(leader.value).ok()?;
        Some((value.split('.').next()?.parse().ok()?, leader.term.get()))
    };
    let stops_on_a_leader = std::cell::Cell::new(0);
    let stop_the_leader = |round: usize| {
        // Stopped while one of its candidates leads, the process lets the
        // leadership lapse and, resumed, writes with its old term. A stop
        // that missed (the leadership moved on) is undone and tried again,
        // a bounded number of times; the last one stays.
        for attempt in 0..20 {
            let before = leading();
            let stopped = &children[before.map_or(round % children.len(), |(p, _)| p)];
            stopped.stop();
            let landed = before.is_some() && leading() == before;
            if landed || attempt == 19 {
                stops_on_a_leader.set(stops_on_a_leader.get() + u32::from(landed));
                crate::behaviour::common::let_pass(Duration::from_millis(600));
                stopped.resume();
                return;
            }
            stopped.resume();
        }
    };
    let faults: [&dyn Fn(usize); 6] = [
        &|_| {
            let _paused = server.pause_guard();
            crate::behaviour::common::let_pass(Duration::from_millis(600));
        },
        &stop_the_leader,
        &|_| server.restart(),
        &|_| {
            server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("normal"));
        },
        &|_| {
            server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
        },
        &|_| {
            server.query(redis::cmd("SCRIPT").arg("FLUSH"));
        },
    ];
    for round in 0..2 {
        for (i, fault) in faults.iter().enumerate() {
            // Contention between faults, longer than a lease now and then.
            crate::behaviour::common::let_pass(Duration::from_millis(
                150 + 100 * ((round + i) % 4) as u64,
            ));
            fault(round);
        }
    }
    crate::behaviour::common::let_pass(Duration::from_millis(500));

    for child in &mut children {
        child.finish();
    }
    let counts: Vec<_> = children
        .iter_mut()
        .map(|child| child.counts_within(BOUND * 3))
        .collect();
    let recorded = check_leaderships(&checker, &ns, 12, children.len());
    let led: Vec<u64> = counts.iter().map(|c| c.led).collect();
    assert_eq!(
        led, recorded,
        "each process's leaderships, all recorded: {counts:?}"
    );
    for c in &counts {
        assert_eq!(c.led, c.resigned + c.dropped, "{c:?}");
    }
    eprintln!(
        "processes: {counts:?}; {} of 2 stops landed on a leading process",
        stops_on_a_leader.get()
    );
}

/// `candidates_each` candidates on each of `lockers` campaign for the
/// election `scheduler`, lead briefly and resign or drop, in a loop,
/// while `inject` runs (the faults; the loop stops 500 ms after it
/// returns), recording their leaderships on `checker`, a second Redis that
/// is never faulted; [`check_leaderships`] checks them (at least
/// `min_spans` certain leaderships, and each locker led).
pub(crate) fn leaderships_never_overlap_under<F: Front>(
    lockers: &[Arc<F>],
    candidates_each: usize,
    checker: &RedisServer,
    ns: &str,
    min_spans: usize,
    inject: impl FnOnce(),
) {
    let faulting = Arc::new(AtomicBool::new(true));
    let candidates: Vec<_> = lockers
        .iter()
        .enumerate()
        .flat_map(|(l, locker)| (0..candidates_each).map(move |c| (l, c, locker.clone())))
        .map(|(l, c, locker)| {
            let faulting = faulting.clone();
            let (ns, url) = (ns.to_owned(), checker.url());
            crate::behaviour::common::spawn(&format!("candidate {l}.{c}"), move || {
                let tag = format!("{l}.{c}");
                let candidate = Candidate {
                    by: l,
                    tag: &tag,
                    checker_url: &url,
                    ns: &ns,
                    running: &faulting,
                };
                candidate_rounds(&*locker, "scheduler", candidate)
            })
        })
        .collect();

    inject();
    crate::behaviour::common::let_pass(Duration::from_millis(500));
    faulting.store(false, Ordering::SeqCst);
    for candidate in candidates {
        candidate.join_within(BOUND * 3);
    }
    check_leaderships(checker, ns, min_spans, lockers.len());
}
