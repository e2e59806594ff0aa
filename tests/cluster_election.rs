//! Leader election under faults on a real 3-primary / 3-replica Redis
//! Cluster, both front ends (docs/PROTOCOL.md §11): a
//! failover of the election's primary while a leader leads, candidates
//! wait and an observer watches; a leader *process* SIGKILLed, or
//! SIGSTOPped past its lease and resumed, on the cluster (its fenced store
//! on a standalone Redis); a forced failover that loses the last grant;
//! and candidates of three lockers checked on a
//! second Redis while the election's primary has its connections killed,
//! is paused and fails over. One cluster per test (startup is the
//! expensive part); every wait is bounded and no test asserts how long
//! something took.
#![allow(clippy::disallowed_methods)]
// The standalone suites' macros are not used here, only their helpers.
#![allow(unused_macros, unused_imports, dead_code)]

mod behaviour;
mod support;

#[path = "faults/candidates.rs"]
mod candidates;
#[path = "faults/child.rs"]
mod child;
#[path = "faults/election.rs"]
mod election_faults;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use behaviour::common::{
    cluster_config, config, connect_cluster, granted, key_sha, namespace, no_wait, spawn, waiting,
    BOUND,
};
use behaviour::election::{next_of, observed};
use behaviour::front::{ClusterFront, Front};
use redlease::fenced::{FencedStore, WriteError};
use redlease::{Fence, Observation, ReleaseOutcome, Version};
use support::cluster::{ClusterNode, FailoverMode, RedisCluster};
use support::{wait_until, RedisServer};

/// The election every test here campaigns for.
const NAME: &str = "scheduler";

/// Waits until `locker` has `waiters` candidates waiting with a confirmed
/// subscription, after busy replies (so each has attempted).
fn wait_until_campaigning<F: Front>(locker: &F, waiters: usize) {
    wait_until(BOUND, "the candidates wait subscribed", || {
        let s = locker.stats();
        s.waiters == waiters && s.subscribed && s.busy_replies >= 2
    });
}

/// `PUBSUB SHARDNUMSUB channel` on `node`: its sharded subscribers there.
fn shard_subscribers(node: &ClusterNode, channel: &str) -> u64 {
    let (_, count): (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("PUBSUB SHARDNUMSUB on node {}: {e}", node.port()));
    count
}

/// A change of an election: its version, and its leader's term and value
/// (`None`: vacant).
type Change = (Version, Option<(Fence, Vec<u8>)>);

/// Checks an observer's next items against the changes the election went
/// through, `expected` (in version order), of which it has yielded the
/// first `seen` already: each item is one of them (same version, same
/// leader term and value), later than the one before, and directly the
/// next one unless it is a `resync` (the state after a gap). So no item
/// reports a leader that no longer leads as current. Reads items until
/// the last expected change.
fn observed_in_order(rx: &mpsc::Receiver<Observation>, expected: &[Change], seen: usize) {
    let mut at = seen.checked_sub(1);
    let mut items = Vec::new();
    while at != Some(expected.len() - 1) {
        let item = next_of(rx, "the next change");
        let index = expected
            .iter()
            .position(|(version, _)| *version == item.version)
            .unwrap_or_else(|| panic!("{item:?} is no change of {expected:?}; seen {items:?}"));
        let leader = item.leader.as_ref().map(|l| (l.term, l.value.clone()));
        assert_eq!(leader, expected[index].1, "{item:?} at {index}");
        match at {
            Some(before) if item.resync => assert!(index > before, "{item:?} after {items:?}"),
            Some(before) => assert_eq!(index, before + 1, "{item:?} after {items:?}"),
            None => {}
        }
        at = Some(index);
        items.push(item);
    }
}

/// The grant and the vacancy (resign, or a lapse) of each leader in
/// `terms`, none of which proclaimed: the changes an observer must see.
fn grants_and_vacancies(terms: &[(Fence, &[u8])]) -> Vec<Change> {
    terms
        .iter()
        .flat_map(|(term, value)| {
            [
                (Version::new(term.get(), 0), Some((*term, value.to_vec()))),
                (Version::new(term.get(), 1), None),
            ]
        })
        .collect()
}

/// A leader on one locker, candidates of two others waiting, an observer
/// on a fourth: the primary owning the election's slot fails over to its
/// replica (coordinated). The leader still leads there (no acknowledged
/// write lost); once the shard's nodes count the three sharded
/// subscriptions again, its resign, sent to the new primary, wakes a candidate
/// through the sharded notification on the new primary (polls and lease
/// 30 s, bound 10 s: only a re-subscription explains it), which leads in
/// a larger term, as `leader()` of a locker connected after the failover
/// reports; its resign wakes the last candidate likewise. The observer,
/// which reported the grant before the failover (so its channel has to
/// move to the new primary: its polls are 30 s too), reports every change
/// after it in order and never a resigned leader as current.
fn a_failover_of_the_elections_primary_keeps_one_leader_and_observers_in_order<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let ns = namespace("cluster-elect-failover");
    let config = cluster_config(&ns);
    let [a, b, c, reader]: [Arc<F>; 4] =
        std::array::from_fn(|_| connect_cluster(&cluster, config.clone()));
    let rx = observed(&*reader, NAME);
    let first = next_of(&rx, "the current state");
    assert!(first.resync && first.leader.is_none(), "{first:?}");
    wait_until(BOUND, "the observer's channel", || {
        reader.stats().subscribed
    });

    let leading = granted(a.campaign(NAME, b"a", no_wait()), "a leads");
    let term_a = F::term(&leading);
    let grant = next_of(&rx, "a's grant");
    assert_eq!(
        (grant.version, grant.leader.map(|l| l.value), grant.resync),
        (Version::new(term_a.get(), 0), Some(b"a".to_vec()), false)
    );
    let (tx, leaders) = mpsc::channel();
    let candidates: Vec<_> = [(b.clone(), "b"), (c.clone(), "c")]
        .into_iter()
        .map(|(locker, value)| {
            let tx = tx.clone();
            spawn(&format!("candidate {value}"), move || {
                let leadership = granted(
                    locker.campaign(NAME, value.as_bytes(), waiting(BOUND * 3)),
                    "a waiting candidate",
                );
                tx.send((value, leadership)).unwrap();
            })
        })
        .collect();
    wait_until_campaigning(&*b, 1);
    wait_until_campaigning(&*c, 1);

    let primary = cluster.primary_for_lock(NAME);
    let replica = cluster.replica_of(primary);
    cluster.failover(replica);
    assert_eq!(cluster.primary_for_lock(NAME).port(), replica.port());
    // The old primary ended the three sharded subscriptions (`sunsubscribe`)
    // and the lockers subscribe again. A resign inside that gap would be
    // seen only by a safety poll (README, Cluster: "the safety polls cover
    // the gap"; here 30 s), so the resign waits until the shard's nodes
    // count the three again: what follows is delivered by notifications.
    let channel = format!("{ns}:lock-released:{{{}}}", key_sha(NAME));
    wait_until(BOUND, "the three subscriptions back on the shard", || {
        [primary, replica]
            .iter()
            .map(|node| shard_subscribers(node, &channel))
            .sum::<u64>()
            == 3
    });
    let fresh: Arc<F> = connect_cluster(&cluster, config);
    let leader = fresh.leader(NAME).unwrap().expect("a still leads");
    assert_eq!((leader.term, leader.value), (term_a, b"a".to_vec()));

    assert_eq!(F::resign(leading).unwrap(), ReleaseOutcome::Released);
    let mut terms: Vec<(Fence, &[u8])> = vec![(term_a, b"a")];
    for _ in 0..2 {
        let (value, leadership) = leaders
            .recv_timeout(BOUND)
            .expect("a waiting candidate leads after the resign");
        let term = F::term(&leadership);
        let last = terms.last().map(|(t, _)| *t);
        assert!(Some(term) > last, "{term} after {last:?}");
        let leader = fresh.leader(NAME).unwrap().expect("the candidate leads");
        assert_eq!(
            (leader.term, leader.value),
            (term, value.as_bytes().to_vec())
        );
        assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
        terms.push((term, value.as_bytes()));
    }
    for candidate in candidates {
        candidate.join_within(BOUND);
    }
    assert_eq!(fresh.leader(NAME).unwrap(), None, "vacant");
    observed_in_order(&rx, &grants_and_vacancies(&terms), 1);
    for locker in [a, b, c, reader, fresh] {
        locker.shutdown().unwrap();
    }
}

/// A leader process on the cluster (lease 1 s), an observer and a waiting
/// candidate of this process; the leader is SIGKILLed, so it never
/// resigns: the candidate leads once the lease ran out (its wait: the
/// lease + 10 s) in a larger term, `leader()` of another locker reports
/// it, the fenced store takes its write and refuses the killed leader's
/// term, and the observer reports the grant, the lapse's vacancy and the
/// new grant in order.
fn a_killed_leader_process_is_replaced_within_its_ttl_on_a_cluster<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let store_server = RedisServer::start();
    let ns = namespace("cluster-elect-killed");
    let lease = Duration::from_secs(1);
    let leader =
        child::spawn_cluster_leader::<F>(&cluster.nodes(), &store_server, &ns, NAME, lease);
    let killed = Fence::new(leader.term());
    let config = cluster_config(&ns);
    let [candidate, reader]: [Arc<F>; 2] =
        std::array::from_fn(|_| connect_cluster(&cluster, config.clone()));
    let rx = observed(&*reader, NAME);
    let first = next_of(&rx, "the current state");
    assert_eq!(
        first.leader.map(|l| (l.term, l.value)),
        Some((killed, b"child".to_vec())),
        "the child leads"
    );
    let waiter = {
        let candidate = candidate.clone();
        spawn("candidate", move || {
            granted(
                candidate.campaign(NAME, b"next", waiting(lease + BOUND)),
                "the candidate leads once the killed leader's lease ran out",
            )
        })
    };
    wait_until_campaigning(&*candidate, 1);

    leader.kill();
    let next = waiter.join_within(lease + BOUND * 2);
    let term = F::term(&next);
    assert!(term > killed, "{term} after {killed}");
    assert_eq!(reader.leader(NAME).unwrap().map(|l| l.term), Some(term));
    let store = FencedStore::new(&ns);
    let mut conn = store_server.conn();
    store
        .write(&mut conn, child::LEADER_RESOURCE, term, "from next")
        .unwrap();
    assert!(matches!(
        store.write(&mut conn, child::LEADER_RESOURCE, killed, "late child"),
        Err(WriteError::Stale(_))
    ));
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);
    observed_in_order(
        &rx,
        &grants_and_vacancies(&[(killed, b"child"), (term, b"next")]),
        1,
    );
    candidate.shutdown().unwrap();
    reader.shutdown().unwrap();
}

/// `tests/faults/election.rs`'s SIGSTOP row on a cluster: a leader process
/// (lease 1 s) SIGSTOPped past its lease; a candidate of this process
/// leads in a larger term and writes to the fenced store (a standalone
/// Redis); the stopped leader, SIGCONTed, writes with its old term first
/// thing and the store refuses it; its `lost` fires and it reads the new
/// leader's term from the cluster.
fn a_sigstopped_leader_is_replaced_and_after_sigcont_its_old_terms_write_is_refused_on_a_cluster<
    F: ClusterFront,
>() {
    let cluster = RedisCluster::start();
    let store_server = RedisServer::start();
    let ns = namespace("cluster-elect-stopped");
    let mut leader = child::spawn_cluster_leader::<F>(
        &cluster.nodes(),
        &store_server,
        &ns,
        NAME,
        Duration::from_secs(1),
    );
    let candidate: Arc<F> = connect_cluster(&cluster, cluster_config(&ns));
    let store = FencedStore::new(&ns);
    election_faults::the_stopped_leaders_old_term_is_refused(
        &mut leader,
        &*candidate,
        NAME,
        &store,
        &mut store_server.conn(),
    );
    candidate.shutdown().unwrap();
}

/// `tests/faults/election.rs`'s one-leader row on a cluster, short: three
/// lockers of two candidates each (lease 400 ms, command timeout 300 ms)
/// campaign, lead briefly and resign or drop, in a loop, while the
/// election's primary (whichever node it is at the time), twice over, has
/// its normal and then its pubsub connections killed, is paused for
/// 600 ms (under the node timeout: no automatic failover) and fails over
/// to its replica. Checked on a second, standalone Redis: no two certain
/// leaderships overlap, terms increase, none is granted twice; a leader
/// writes after the last failover.
fn one_leader_at_a_time_under_cluster_faults_checked_on_a_second_redis<F: ClusterFront>() {
    let cluster = RedisCluster::start();
    let checker = RedisServer::start();
    let ns = namespace("cluster-elect-matrix");
    let lockers: Vec<Arc<F>> = (0..3)
        .map(|_| {
            connect_cluster(
                &cluster,
                config(&ns)
                    .lease(Duration::from_millis(400))
                    .command_timeout(Duration::from_millis(300)),
            )
        })
        .collect();
    let primary = || cluster.primary_for_lock(NAME);
    let kill = |kind: &str| {
        primary().query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg(kind));
    };
    let faults: [&dyn Fn(); 4] = [
        &|| kill("normal"),
        &|| kill("pubsub"),
        &|| {
            let _paused = primary().pause_guard();
            behaviour::common::let_pass(Duration::from_millis(600));
        },
        &|| {
            cluster.failover(cluster.replica_of(primary()));
            // The old primary in sync as a replica: the next failover can
            // be coordinated.
            cluster.wait_healthy();
        },
    ];
    election_faults::leaderships_never_overlap_under(&lockers, 2, &checker, &ns, 6, || {
        for round in 0..2 {
            for (i, fault) in faults.iter().enumerate() {
                // Contention between faults, longer than a lease now and then.
                behaviour::common::let_pass(Duration::from_millis(
                    150 + 100 * ((round + i) % 4) as u64,
                ));
                fault();
            }
        }
        // The election goes on after the last failover: a new leader
        // writes.
        let stored = || {
            FencedStore::new(&ns)
                .read(&mut checker.conn(), "leader")
                .unwrap()
                .map(|(term, _)| term)
        };
        let before = stored();
        wait_until(BOUND, "a leader after the faults", || stored() > before);
    });
    for locker in lockers {
        let _ = locker.shutdown();
    }
}

/// A failover that loses the last grant (docs/PROTOCOL.md §10's case on a cluster):
/// the election's primary has its replication link killed (and the
/// replica's reconnections refused), `a` is
/// granted a term there (lease 2 s) that never reaches the replica, and
/// the primary is paused and its replica promoted (`CLUSTER FAILOVER
/// FORCE`). On the new primary the election is vacant: `b` leads in a
/// term larger than the lost one (the term rule's `TIME` part), which
/// `leader()` of a locker connected after the failover reports; the fenced store (a standalone Redis) refuses `a`'s
/// late write with the lost term; `a`'s `lost` fires and its resign
/// releases nothing. The observer, which reported `a`'s grant, reports the
/// gap as a `resync` and never `a` as the leader after the failover.
fn a_forced_failover_that_lost_the_last_grant_still_gives_a_larger_term_and_a_resync<
    F: ClusterFront,
>() {
    let cluster = RedisCluster::start();
    let store_server = RedisServer::start();
    let ns = namespace("cluster-elect-lost");
    let config = cluster_config(&ns);
    let [a, b, reader]: [Arc<F>; 3] =
        std::array::from_fn(|_| connect_cluster(&cluster, config.clone()));
    let rx = observed(&*reader, NAME);
    assert!(next_of(&rx, "the current state").resync);
    wait_until(BOUND, "the observer's channel", || {
        reader.stats().subscribed
    });
    let store = FencedStore::new(&ns);
    let mut conn = store_server.conn();

    let primary = cluster.primary_for_lock(NAME);
    let replica = cluster.replica_of(primary);
    // The replica cut off: a password the primary does not have makes
    // every reconnection fail at `AUTH`, so the grant below stays in the
    // primary's backlog.
    replica.query(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("masterauth")
            .arg("not-the-primarys"),
    );
    primary.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"));
    let lost = granted(
        a.campaign(NAME, b"a", no_wait().lease(Duration::from_secs(2))),
        "a leads on the primary",
    );
    // Yielded before the pause: read later, on the new primary, the
    // grant would not be there to see.
    let grant = next_of(&rx, "a's grant");
    let paused = primary.pause_guard();
    let link = replica.info("replication");
    assert!(link.contains("master_link_status:down"), "{link}");
    let lost_term = F::term(&lost);
    store
        .write(&mut conn, child::LEADER_RESOURCE, lost_term, "from a")
        .unwrap();
    assert_eq!(grant.version, Version::new(lost_term.get(), 0));

    cluster.failover_with(replica, FailoverMode::Force);
    assert_eq!(cluster.primary_for_lock(NAME).port(), replica.port());
    let next = granted(
        b.campaign(NAME, b"b", waiting(BOUND)),
        "b leads on the new primary",
    );
    let term = F::term(&next);
    assert!(term > lost_term, "{term} after the lost {lost_term}");
    // A locker connected now reads the new slot map (an older one's first
    // call may still time out on the paused node: `OUTCOME_UNKNOWN`). Its
    // seeds are the nodes that answer: with the paused one among them, a
    // blocking connect takes several command timeouts.
    let answering: Vec<String> = cluster
        .all()
        .iter()
        .filter(|node| !node.is_paused())
        .map(|node| node.url())
        .collect();
    let fresh = Arc::new(F::connect_cluster(&answering, config).unwrap());
    let leader = fresh.leader(NAME).unwrap().expect("b leads");
    assert_eq!((leader.term, leader.value), (term, b"b".to_vec()));
    store
        .write(&mut conn, child::LEADER_RESOURCE, term, "from b")
        .unwrap();
    assert!(matches!(
        store.write(&mut conn, child::LEADER_RESOURCE, lost_term, "late a"),
        Err(WriteError::Stale(_))
    ));

    // After the failover: a gap (the log lost `a`'s grant), so a resync,
    // then nothing but `b`'s leadership; `a` never again.
    let first = next_of(&rx, "the first change after the failover");
    assert!(first.resync, "{first:?}");
    let mut item = first;
    loop {
        match &item.leader {
            Some(leader) if leader.term == term => break,
            Some(_) => panic!("a leader other than b after the failover: {item:?}"),
            None => assert!(item.version < Version::new(term.get(), 0), "{item:?}"),
        }
        item = next_of(&rx, "b's grant");
    }
    wait_until(BOUND, "a learns it lost", || F::leadership_is_lost(&lost));
    // Its resign may still go to the paused node (`OUTCOME_UNKNOWN`):
    // anything but a release of a leadership it no longer has.
    let resigned = F::resign(lost);
    assert!(
        !matches!(resigned, Ok(ReleaseOutcome::Released)),
        "{resigned:?}"
    );
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);

    drop(paused);
    cluster.wait_healthy();
    for locker in [a, b, reader, fresh] {
        locker.shutdown().unwrap();
    }
}

/// One `#[test]` per body for the front end `$front`.
macro_rules! cluster_election_suite {
    ($module:ident, $front:ty) => {
        mod $module {
            #[test]
            fn a_failover_of_the_elections_primary_keeps_one_leader_and_observers_in_order() {
                super::a_failover_of_the_elections_primary_keeps_one_leader_and_observers_in_order::<$front>();
            }

            #[test]
            fn a_forced_failover_that_lost_the_last_grant_still_gives_a_larger_term_and_a_resync() {
                super::a_forced_failover_that_lost_the_last_grant_still_gives_a_larger_term_and_a_resync::<$front>();
            }

            #[test]
            fn a_killed_leader_process_is_replaced_within_its_ttl_on_a_cluster() {
                super::a_killed_leader_process_is_replaced_within_its_ttl_on_a_cluster::<$front>();
            }

            #[test]
            fn a_sigstopped_leader_is_replaced_and_after_sigcont_its_old_terms_write_is_refused_on_a_cluster(
            ) {
                super::a_sigstopped_leader_is_replaced_and_after_sigcont_its_old_terms_write_is_refused_on_a_cluster::<$front>();
            }

            #[test]
            fn one_leader_at_a_time_under_cluster_faults_checked_on_a_second_redis() {
                super::one_leader_at_a_time_under_cluster_faults_checked_on_a_second_redis::<$front>();
            }
        }
    };
}

cluster_election_suite!(blocking, crate::behaviour::Blocking);
cluster_election_suite!(aio, crate::behaviour::Async);

/// Child-process helper of the leader-process rows: leads the election on
/// the cluster until it is killed (see `tests/faults/child.rs`).
#[test]
#[ignore = "a helper the leader-process rows start as a child process"]
fn holder_child_process() {
    child::run_holder_if_asked();
}
