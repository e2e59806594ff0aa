//! Leader election (docs/PROTOCOL.md §7): one leader at a time with strictly
//! increasing terms, the leader's value for anyone to read, proclaim,
//! resign and drop handing over, a lapsed leader replaced, values bounded
//! and never shown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;
use redlease::{Error, Observation, ReleaseOutcome, Version};

use super::common::{
    config, connect, exists, granted, key_sha, namespace, no_wait, refused, server_time_ms, spawn,
    waiting, BOUND,
};
use super::front::Front;
use crate::support::{wait_until, RedisServer};

/// `<ns>:elect:{<sha>}`
fn lease_name(ns: &str, name: &str) -> String {
    format!("{ns}:elect:{{{}}}", key_sha(name))
}

/// `<ns>:elect-log:{<sha>}`
fn log_name(ns: &str, name: &str) -> String {
    format!("{ns}:elect-log:{{{}}}", key_sha(name))
}

/// The change log as `(id, leader, value)`, oldest first.
fn log_of(server: &RedisServer, ns: &str, name: &str) -> Vec<(String, bool, Vec<u8>)> {
    let Value::Array(entries) = server.query(
        redis::cmd("XRANGE")
            .arg(log_name(ns, name))
            .arg("-")
            .arg("+"),
    ) else {
        panic!("XRANGE answers an array");
    };
    entries
        .into_iter()
        .map(|entry| {
            let Value::Array(mut parts) = entry else {
                panic!("an entry is [id, fields]")
            };
            let (Value::Array(fields), Value::BulkString(id)) =
                (parts.pop().unwrap(), parts.pop().unwrap())
            else {
                panic!("an entry is [id, fields]")
            };
            let mut leader = false;
            let mut value = Vec::new();
            for pair in fields.chunks(2) {
                if let [Value::BulkString(k), Value::BulkString(v)] = pair {
                    match k.as_slice() {
                        b"leader" => leader = v.as_slice() == b"1",
                        b"value" => value = v.clone(),
                        _ => {}
                    }
                }
            }
            (String::from_utf8(id).unwrap(), leader, value)
        })
        .collect()
}

/// Candidates of three lockers, two threads each, campaign and resign in
/// a loop: never two leaders at once, and every term is larger than the
/// one before.
pub(crate) fn one_leader_at_a_time_under_contention_and_terms_strictly_increase<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-contend");
    let lockers: Vec<Arc<F>> = (0..3)
        .map(|_| Arc::new(connect(&server, config(&ns))))
        .collect();
    // (whether someone leads now, the terms in the order they led)
    let seen = Arc::new(Mutex::new((false, Vec::new())));
    let mut threads = Vec::new();
    for (i, locker) in lockers.iter().enumerate() {
        for j in 0..2 {
            let (locker, seen) = (locker.clone(), seen.clone());
            threads.push(spawn(&format!("candidate {i}.{j}"), move || {
                for _ in 0..5 {
                    let value = format!("candidate {i}.{j}");
                    let leadership = granted(
                        locker.campaign("scheduler", value.as_bytes(), waiting(BOUND)),
                        "a campaign",
                    );
                    {
                        let mut seen = seen.lock().unwrap();
                        assert!(!seen.0, "two leaders at once");
                        seen.0 = true;
                        seen.1.push(F::term(&leadership).get());
                    }
                    let leader = locker.leader("scheduler").unwrap().expect("a leader");
                    assert_eq!(leader.term, F::term(&leadership));
                    assert_eq!(leader.value, value.as_bytes());
                    seen.lock().unwrap().0 = false;
                    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
                }
            }));
        }
    }
    for t in threads {
        t.join_within(BOUND * 3);
    }
    let terms = seen.lock().unwrap().1.clone();
    assert_eq!(terms.len(), 30);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms strictly increase: {terms:?}"
    );
    // Every grant and every vacancy is in the log, in order (capped at 64).
    let log = log_of(&server, &ns, "scheduler");
    assert_eq!(log.len(), 60);
    assert!(log.chunks(2).all(|pair| pair[0].1 && !pair[1].1));
}

/// A locker that never campaigns reads the leader's term and value; a
/// resigned election reads as vacant.
pub(crate) fn a_non_candidate_sees_the_leader_and_its_value<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-read");
    let (candidate, reader): (F, F) =
        (connect(&server, config(&ns)), connect(&server, config(&ns)));
    assert_eq!(reader.leader("scheduler").unwrap(), None, "nobody yet");

    let leadership = granted(
        candidate.campaign("scheduler", b"host-a:4242", no_wait()),
        "the first campaign",
    );
    let leader = reader.leader("scheduler").unwrap().expect("a leader");
    assert_eq!(leader.term, F::term(&leadership));
    assert_eq!(leader.value, b"host-a:4242");
    assert_eq!(leader.version, Version::new(leader.term.get(), 0));
    assert!(leader
        .remaining
        .is_some_and(|r| r > Duration::ZERO && r <= Duration::from_secs(5)));
    // An election and a lock of the same name are unrelated.
    assert_eq!(reader.leader("other").unwrap(), None);
    granted(reader.acquire_with("scheduler", no_wait()), "the lock");

    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    assert_eq!(reader.leader("scheduler").unwrap(), None, "resigned");
    assert!(!exists(&server, &lease_name(&ns, "scheduler")));
}

/// A proclaim logs a new value in the same term; the reader sees it.
pub(crate) fn proclaim_changes_the_value_and_keeps_the_term<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-proclaim");
    let (candidate, reader): (F, F) =
        (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let leadership = granted(
        candidate.campaign("scheduler", b"v1", no_wait()),
        "a campaign",
    );
    let term = F::term(&leadership);
    assert_eq!(
        F::proclaim(&leadership, b"v2").unwrap(),
        Version::new(term.get(), 1)
    );
    assert_eq!(
        F::proclaim(&leadership, b"v3").unwrap(),
        Version::new(term.get(), 2)
    );
    let leader = reader.leader("scheduler").unwrap().expect("a leader");
    assert_eq!(
        (leader.term, leader.value.as_slice(), leader.version),
        (term, &b"v3"[..], Version::new(term.get(), 2))
    );
    assert!(F::leadership_is_valid(&leadership));
    let values: Vec<Vec<u8>> = log_of(&server, &ns, "scheduler")
        .into_iter()
        .map(|(_, _, value)| value)
        .collect();
    assert_eq!(values, [b"v1".to_vec(), b"v2".to_vec(), b"v3".to_vec()]);
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
}

/// A resign hands the leadership to a candidate waiting on another locker
/// through the notification (safety polls are 30 s), in a larger term.
pub(crate) fn a_resign_hands_over_to_a_waiting_candidate<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-resign");
    let slow = |ns: &str| {
        config(ns)
            .notify_poll_interval(Duration::from_secs(30))
            .poll_interval(Duration::from_secs(30))
    };
    let a: F = connect(&server, slow(&ns));
    let b = Arc::new(connect::<F>(&server, slow(&ns)));
    let first = granted(a.campaign("scheduler", b"a", no_wait()), "a leads");
    let first_term = F::term(&first);

    let waiter = b.clone();
    let second = spawn("candidate b", move || {
        waiter.campaign("scheduler", b"b", waiting(BOUND))
    });
    wait_until(BOUND, "b waits", || b.stats().waiters == 1);
    // Only a notification can wake b within the bound (its polls are 30 s
    // apart and the lease lasts 5 s): the first one, at its start, is done.
    crate::behaviour::common::let_pass(Duration::from_millis(300));
    assert_eq!(F::resign(first).unwrap(), ReleaseOutcome::Released);
    let second = second.join_within(Duration::from_secs(4)).unwrap();
    let second_term = F::term(&second).get();
    assert!(second_term > first_term.get());
    let leader = a.leader("scheduler").unwrap().expect("b leads");
    assert_eq!(
        (leader.term.get(), leader.value),
        (second_term, b"b".to_vec())
    );
    let log = log_of(&server, &ns, "scheduler");
    let leaders: Vec<bool> = log.iter().map(|(_, leader, _)| *leader).collect();
    assert_eq!(leaders, [true, false, true], "grant, vacancy, grant");
    assert_eq!(F::resign(second).unwrap(), ReleaseOutcome::Released);
}

/// A dropped leadership is resigned by its keeper without any further
/// call; a leader that lapsed (killed: its lease is never renewed) is
/// never reported, and a waiting candidate takes over once it expires,
/// logging the lapsed term's vacancy.
pub(crate) fn a_dropped_or_killed_leader_is_replaced<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-drop");
    let (a, b): (F, F) = (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let dropped = granted(a.campaign("scheduler", b"a", no_wait()), "a leads");
    drop(dropped);
    wait_until(BOUND, "the dropped leadership is resigned", || {
        !exists(&server, &lease_name(&ns, "scheduler"))
    });
    assert_eq!(b.leader("scheduler").unwrap(), None);
    let next = granted(b.campaign("scheduler", b"b", no_wait()), "b leads");
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);

    // A killed leader: the state its campaign left, never renewed.
    let dead = server_time_ms(&server) * 1000 + 999;
    server.query(
        redis::cmd("SET")
            .arg(lease_name(&ns, "scheduler"))
            .arg(format!("{}:{dead}", "d".repeat(32)))
            .arg("PX")
            .arg(400),
    );
    let prev = log_of(&server, &ns, "scheduler").last().unwrap().0.clone();
    server.query(
        redis::cmd("XADD")
            .arg(log_name(&ns, "scheduler"))
            .arg(format!("{dead}-0"))
            .arg("prev")
            .arg(prev)
            .arg("leader")
            .arg("1")
            .arg("value")
            .arg("dead"),
    );
    assert_eq!(
        b.leader("scheduler").unwrap().map(|l| l.term.get()),
        Some(dead)
    );
    match refused(a.campaign("scheduler", b"a", no_wait()), "a try") {
        // Timed to the microsecond within the lease's last millisecond:
        // at most the 400 ms just set plus the one Redis rounds up to.
        Error::Busy { remaining } => assert!(
            remaining.is_some_and(|r| !r.is_zero() && r <= Duration::from_millis(401)),
            "{remaining:?}"
        ),
        other => panic!("expected LOCK_BUSY, got {other:?}"),
    }
    let replacement = granted(
        a.campaign("scheduler", b"a", waiting(BOUND)),
        "a replaces the killed leader",
    );
    assert!(F::term(&replacement).get() > dead);
    let log = log_of(&server, &ns, "scheduler");
    let tail: Vec<(String, bool)> = log[log.len() - 3..]
        .iter()
        .map(|(id, leader, _)| (id.clone(), *leader))
        .collect();
    assert_eq!(
        tail,
        [
            (format!("{dead}-0"), true),
            (format!("{dead}-1"), false),
            (format!("{}-0", F::term(&replacement)), true),
        ]
    );
    assert_eq!(F::resign(replacement).unwrap(), ReleaseOutcome::Released);
}

/// A value over `max_value_bytes` is refused before anything is sent, with
/// an error that gives the sizes and never the value.
pub(crate) fn a_too_large_value_is_refused_and_nothing_is_written<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-size");
    let a: F = connect(&server, config(&ns).max_value_bytes(8));
    let e = refused(
        a.campaign("scheduler", b"secret-123", no_wait()),
        "too large",
    );
    assert!(
        matches!(e, Error::ValueTooLarge { len: 10, max: 8 }),
        "{e:?}"
    );
    assert_eq!(e.code(), "VALUE_TOO_LARGE");
    assert!(!e.to_string().contains("secret") && !format!("{e:?}").contains("secret"));
    assert!(!exists(&server, &lease_name(&ns, "scheduler")));
    assert!(!exists(&server, &log_name(&ns, "scheduler")));

    let leadership = granted(a.campaign("scheduler", b"12345678", no_wait()), "8 bytes");
    let e = F::proclaim(&leadership, b"secret-123").unwrap_err();
    assert_eq!(e.code(), "VALUE_TOO_LARGE");
    assert_eq!(log_of(&server, &ns, "scheduler").len(), 1, "nothing logged");
    assert!(F::leadership_is_valid(&leadership));
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
}

/// `Debug` of an election, a leadership, a leader and an error shows
/// lengths and terms, never the value or the name.
pub(crate) fn debug_never_shows_the_value<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-debug");
    let a: F = connect(&server, config(&ns));
    let leadership = granted(
        a.campaign("secret-name", b"secret-value", no_wait()),
        "a campaign",
    );
    let leader = a.leader("secret-name").unwrap().expect("a leader");
    for text in [
        F::leadership_debug(&leadership),
        format!("{leader:?}"),
        a.election_debug("secret-name").unwrap(),
    ] {
        assert!(!text.contains("secret"), "{text}");
    }
    let shown = F::leadership_debug(&leadership);
    assert!(
        shown.contains("term") && shown.contains("value_len: 12"),
        "{shown}"
    );
    assert!(format!("{leader:?}").contains("value_len: 12"));
    F::proclaim(&leadership, b"secret-two").unwrap();
    assert!(F::leadership_debug(&leadership).contains("value_len: 10"));
    assert!(!F::leadership_is_lost(&leadership));
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
}

/// The keeper renews a leadership with a short lease long past its first
/// expiry, without any call of the program.
pub(crate) fn a_leadership_is_renewed_by_its_keeper<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-keep");
    let (a, reader): (F, F) = (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let short = no_wait().lease(Duration::from_millis(300));
    let leadership = granted(a.campaign("scheduler", b"a", short), "a leads");
    crate::behaviour::common::let_pass(Duration::from_millis(1200));
    assert!(F::leadership_is_valid(&leadership));
    assert!(!F::leadership_is_lost(&leadership));
    let leader = reader
        .leader("scheduler")
        .unwrap()
        .expect("still the leader");
    assert_eq!(leader.term, F::term(&leadership));
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    assert_eq!(reader.leader("scheduler").unwrap(), None);
}

/// Keeper threads are kept for the next leadership (`keeper_threads`):
/// leaderships that follow each other, resigned or dropped, are each
/// renewed past their lease, and each resign hands over.
pub(crate) fn kept_keeper_threads_renew_the_leaderships_that_follow<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-kept");
    let (a, reader): (F, F) = (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let short = no_wait().lease(Duration::from_millis(300));
    let mut terms = Vec::new();
    for round in 0..3 {
        let leadership = granted(a.campaign("scheduler", b"a", short.clone()), "a leads");
        terms.push(F::term(&leadership));
        crate::behaviour::common::let_pass(Duration::from_millis(700));
        assert!(F::leadership_is_valid(&leadership), "round {round}");
        let leader = reader
            .leader("scheduler")
            .unwrap()
            .expect("still the leader");
        assert_eq!(leader.term, F::term(&leadership), "round {round}");
        if round == 1 {
            // Dropped: its keeper resigns it, then waits for the next.
            drop(leadership);
            wait_until(BOUND, "the dropped leadership is resigned", || {
                reader.leader("scheduler").unwrap().is_none()
            });
        } else {
            assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
            assert_eq!(reader.leader("scheduler").unwrap(), None);
        }
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

/// A leadership taken away in Redis fires `lost` at the keeper's next
/// renewal, and a proclaim then says `LockLost` and logs nothing.
pub(crate) fn a_leadership_taken_away_fires_lost_and_proclaim_refuses<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-lost");
    let a: F = connect(&server, config(&ns));
    let short = no_wait().lease(Duration::from_millis(300));
    let leadership = granted(a.campaign("scheduler", b"a", short), "a leads");
    server.query(redis::cmd("DEL").arg(lease_name(&ns, "scheduler")));
    wait_until(BOUND, "lost fires", || F::leadership_is_lost(&leadership));
    assert!(!F::leadership_is_valid(&leadership));
    let e = F::proclaim(&leadership, b"b").unwrap_err();
    assert_eq!(e.code(), "LOCK_LOST", "{e:?}");
    assert_eq!(log_of(&server, &ns, "scheduler").len(), 1, "nothing logged");
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Expired);
}

/// Collects an observer's items on a thread of its own (it blocks until
/// the next change, and ends at the locker's shutdown).
pub(crate) fn observed<F: Front>(locker: &F, name: &str) -> std::sync::mpsc::Receiver<Observation> {
    let observer = locker.observe(name).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for item in observer {
            if tx.send(item).is_err() {
                break;
            }
        }
    });
    rx
}

/// The next observation, within [`BOUND`].
pub(crate) fn next_of(rx: &std::sync::mpsc::Receiver<Observation>, what: &str) -> Observation {
    rx.recv_timeout(BOUND)
        .unwrap_or_else(|e| panic!("{what}: no observation within {BOUND:?} ({e})"))
}

/// An observer sees the current state first, then every change in order
/// (grants, proclaims, vacancies, a lapse reported as vacant once), and
/// after the log is lost only the current state, marked `resync`; it ends
/// at the locker's shutdown.
pub(crate) fn observe_sees_every_change_in_order_and_resyncs_after_data_loss<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-observe");
    let (a, b, reader): (F, F, F) = (
        connect(&server, config(&ns)),
        connect(&server, config(&ns)),
        connect(&server, config(&ns)),
    );
    let rx = observed(&reader, "scheduler");
    let first = next_of(&rx, "the current state");
    assert!(first.resync && first.leader.is_none() && first.version == Version::default());

    let leadership = granted(a.campaign("scheduler", b"v1", no_wait()), "a leads");
    let term = F::term(&leadership).get();
    F::proclaim(&leadership, b"v2").unwrap();
    F::proclaim(&leadership, b"v3").unwrap();
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    let next = granted(b.campaign("scheduler", b"w", no_wait()), "b leads");
    let next_term = F::term(&next).get();
    let mut seen = Vec::new();
    for _ in 0..5 {
        let item = next_of(&rx, "a change");
        assert!(!item.resync, "no gap: {item:?}");
        seen.push((item.version, item.leader.map(|l| l.value)));
    }
    assert_eq!(
        seen,
        [
            (Version::new(term, 0), Some(b"v1".to_vec())),
            (Version::new(term, 1), Some(b"v2".to_vec())),
            (Version::new(term, 2), Some(b"v3".to_vec())),
            (Version::new(term, 3), None),
            (Version::new(next_term, 0), Some(b"w".to_vec())),
        ]
    );

    // A lapse (the leader's lease deleted, as if it expired) is reported
    // as vacant at the version the next grant will log.
    server.query(redis::cmd("DEL").arg(lease_name(&ns, "scheduler")));
    let lapse = next_of(&rx, "the lapse");
    assert_eq!(
        (lapse.version, lapse.leader, lapse.resync),
        (Version::new(next_term, 1), None, false)
    );
    drop(next);

    // The log lost (a restart without data): the current state, resync.
    server.query(&redis::cmd("FLUSHALL"));
    let after = next_of(&rx, "the resync");
    assert!(after.resync && after.leader.is_none(), "{after:?}");
    let again = granted(a.campaign("scheduler", b"z", no_wait()), "a leads again");
    let item = next_of(&rx, "the new leader");
    assert!(!item.resync && F::term(&again).get() > next_term);
    assert_eq!(item.leader.map(|l| l.value), Some(b"z".to_vec()));
    F::resign(again).unwrap();
    next_of(&rx, "the vacancy");
    reader.shutdown().unwrap();
    assert!(
        matches!(
            rx.recv_timeout(BOUND),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        ),
        "the observer ends at shutdown"
    );
}

/// An observer reads when a notification names its election (its polls
/// and the lease are 30 s, so within the bound nothing else can deliver a
/// change): a grant, a proclaim, a change nobody published (read once the
/// subscription, killed, is back), and a resign.
pub(crate) fn an_observer_is_woken_by_notifications_and_after_a_resubscription<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-observe-notified");
    let slow = config(&ns)
        .lease(Duration::from_secs(30))
        .notify_poll_interval(Duration::from_secs(30))
        .poll_interval(Duration::from_secs(30));
    let (a, reader): (F, F) = (connect(&server, slow.clone()), connect(&server, slow));
    let rx = observed(&reader, "scheduler");
    assert!(next_of(&rx, "the current state").resync);
    wait_until(BOUND, "the observer's subscription", || {
        reader.stats().subscribed
    });

    let leadership = granted(a.campaign("scheduler", b"v1", no_wait()), "a leads");
    let term = F::term(&leadership).get();
    let item = next_of(&rx, "the grant");
    assert_eq!(item.version, Version::new(term, 0));
    F::proclaim(&leadership, b"v2").unwrap();
    let item = next_of(&rx, "the proclaim");
    assert_eq!(item.leader.map(|l| l.value), Some(b"v2".to_vec()));

    // A change whose notification never came (logged by hand, published
    // by nobody): the observer reads it once its subscription is back.
    server.query(
        redis::cmd("XADD")
            .arg(log_name(&ns, "scheduler"))
            .arg(format!("{term}-2"))
            .arg("prev")
            .arg(format!("{term}-1"))
            .arg("leader")
            .arg("1")
            .arg("value")
            .arg("v3"),
    );
    server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
    let item = next_of(&rx, "the change read after the resubscription");
    assert_eq!(
        (item.version, item.leader.map(|l| l.value), item.resync),
        (Version::new(term, 2), Some(b"v3".to_vec()), false)
    );

    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
    let item = next_of(&rx, "the vacancy");
    assert_eq!((item.version, item.leader), (Version::new(term, 3), None));
}

/// A campaign whose first attempt timed out on a paused server is sent
/// again with the same token: one grant, one log entry, one term. A
/// proclaim whose outcome was unknown, sent again with the same value,
/// returns the version the first one logged and logs nothing twice.
pub(crate) fn replayed_campaigns_and_proclaims_log_nothing_twice<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-replay");
    let quick = config(&ns).command_timeout(Duration::from_millis(200));
    let (a, reader): (F, F) = (connect(&server, quick.clone()), connect(&server, quick));
    // Pooled connections and cached scripts, so the calls are sent.
    F::resign(granted(a.campaign("warm", b"w", no_wait()), "warm-up")).unwrap();
    assert_eq!(reader.leader("warm").unwrap(), None);

    let a = Arc::new(a);
    let campaigner = a.clone();
    let sent = a.stats().scripts_sent;
    let paused = server.pause_guard();
    let campaign = spawn("campaign", move || {
        campaigner.campaign("scheduler", b"v1", waiting(BOUND))
    });
    // Past the command timeout: the first attempt's outcome is unknown.
    crate::behaviour::common::let_pass(Duration::from_millis(500));
    drop(paused);
    let leadership = granted(campaign.join_within(BOUND), "the campaign");
    assert!(
        a.stats().scripts_sent >= sent + 2,
        "the campaign was sent again"
    );
    let term = F::term(&leadership);
    let log = log_of(&server, &ns, "scheduler");
    assert_eq!(log.len(), 1, "one grant logged: {log:?}");
    assert_eq!(log[0].0, format!("{term}-0"));
    assert_eq!(reader.leader("scheduler").unwrap().unwrap().term, term);

    let e = {
        let _paused = server.pause_guard();
        F::proclaim(&leadership, b"v2").unwrap_err()
    };
    assert_eq!(e.code(), "OUTCOME_UNKNOWN", "{e:?}");
    // The buffered proclaim ran on resume; the same proclaim again is
    // recognised.
    let version = F::proclaim(&leadership, b"v2").unwrap();
    assert_eq!(version, Version::new(term.get(), 1));
    assert_eq!(log_of(&server, &ns, "scheduler").len(), 2, "logged once");
    assert_eq!(
        F::proclaim(&leadership, b"v3").unwrap(),
        Version::new(term.get(), 2)
    );
    assert_eq!(F::resign(leadership).unwrap(), ReleaseOutcome::Released);
}

/// Shutdown resigns a live leadership (logging its vacancy and waking the
/// candidates); resigning it afterwards reports `ShuttingDown`.
pub(crate) fn shutdown_resigns_a_leadership<F: Front>() {
    let server = RedisServer::start();
    let ns = namespace("elect-shutdown");
    let (a, reader): (F, F) = (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let leadership = granted(a.campaign("scheduler", b"a", no_wait()), "a leads");
    a.shutdown().unwrap();
    assert_eq!(reader.leader("scheduler").unwrap(), None);
    let log = log_of(&server, &ns, "scheduler");
    let leaders: Vec<bool> = log.iter().map(|(_, leader, _)| *leader).collect();
    assert_eq!(leaders, [true, false], "grant, vacancy");
    let e = F::resign(leadership).unwrap_err();
    assert_eq!(e.code(), "SHUTTING_DOWN", "{e:?}");
}

/// A leader deposed behind its back (its lease gone while it was paused)
/// still holds its old term; the next leader's term is larger, so a fenced
/// store refuses the deposed leader's write once the new one wrote, and the
/// deposed leader's `lost` fires at its next renewal.
pub(crate) fn a_deposed_leaders_write_with_its_old_term_is_refused_by_a_fenced_store<F: Front>() {
    use redlease::fenced::{FencedStore, WriteError};

    let server = RedisServer::start();
    let ns = namespace("elect-fenced");
    let (a, b): (F, F) = (connect(&server, config(&ns)), connect(&server, config(&ns)));
    let store = FencedStore::new(&ns);
    let mut conn = server.conn();
    let short = no_wait().lease(Duration::from_millis(400));
    let deposed = granted(a.campaign("scheduler", b"a", short), "a leads");
    store
        .write(&mut conn, "schedule", F::term(&deposed), "from a")
        .unwrap();
    // As if `a` were paused past its lease: the lease is gone in Redis.
    server.query(redis::cmd("DEL").arg(lease_name(&ns, "scheduler")));
    let next = granted(b.campaign("scheduler", b"b", no_wait()), "b leads");
    assert!(F::term(&next) > F::term(&deposed));
    store
        .write(&mut conn, "schedule", F::term(&next), "from b")
        .unwrap();
    match store.write(&mut conn, "schedule", F::term(&deposed), "late a") {
        Err(WriteError::Stale(_)) => {}
        other => panic!("the deposed leader's write must be refused: {other:?}"),
    }
    wait_until(BOUND, "the deposed leader learns it", || {
        F::leadership_is_lost(&deposed)
    });
    assert_eq!(F::resign(deposed).unwrap(), ReleaseOutcome::Conflict);
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);
}

/// Two observers of one name on one locker share its reader (docs/PROTOCOL.md §7
/// §7): each change is read once, not once per observer (ten reads or more
/// for five changes when each observer read by itself), and both yield
/// every change in order. Polls and the lease are 30 s, so within the
/// bound only the notifications make reads.
pub(crate) fn observers_of_one_name_share_one_read_per_change<F: Front>() {
    const CHANGES: usize = 5;
    let server = RedisServer::start();
    let ns = namespace("elect-shared-reader");
    let slow = || {
        config(&ns)
            .notify_poll_interval(Duration::from_secs(30))
            .lease(Duration::from_secs(30))
    };
    let (leader, reader): (F, F) = (connect(&server, slow()), connect(&server, slow()));
    let observers = [
        observed(&reader, "scheduler"),
        observed(&reader, "scheduler"),
    ];
    for rx in &observers {
        assert!(next_of(rx, "the current state").resync);
    }
    server.reset_stats();
    // One change at a time, each yielded by both before the next: every
    // change is a read of its own, for one observer or two.
    let mut leadership = None;
    for i in 0..CHANGES {
        let value = format!("v{i}");
        match &leadership {
            None => {
                let leads = leader.campaign("scheduler", value.as_bytes(), no_wait());
                leadership = Some(granted(leads, "leads"));
            }
            Some(l) => {
                F::proclaim(l, value.as_bytes()).unwrap();
            }
        }
        for rx in &observers {
            let item = next_of(rx, "a change");
            assert!(!item.resync, "{item:?}");
            let seen = item.leader.map(|l| l.value).unwrap_or_default();
            assert_eq!(seen, value.as_bytes(), "every change, in order");
        }
    }
    let reads = server
        .commandstats()
        .get("evalsha_ro")
        .copied()
        .unwrap_or(0);
    assert!(
        (1..=CHANGES as u64 + 1).contains(&reads),
        "one read per change for both observers: {reads} reads"
    );
    if let Some(l) = leadership {
        F::resign(l).unwrap();
    }
}
