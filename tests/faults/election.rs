//! Leader election under faults (docs/ELECTION.md §8, §12), each row
//! written once for any front end: a leader process really SIGSTOPped past
//! its lease. Waits are bounded; no row asserts how long something took.

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
    let store = FencedStore::new(&ns);
    let mut conn = server.conn();
    assert_eq!(
        store
            .read(&mut conn, LEADER_RESOURCE)
            .unwrap()
            .map(|(f, v)| (f.get(), v)),
        Some((leader.term(), b"from child".to_vec())),
        "the leader wrote with its term"
    );

    leader.stop();
    let candidate: F = connect(&server, config(&ns));
    let next = granted(
        candidate.campaign("scheduler", b"next", waiting(BOUND)),
        "the candidate leads once the stopped leader's lease ran out",
    );
    let term = F::term(&next);
    assert!(term.get() > leader.term(), "a larger term");
    store
        .write(&mut conn, LEADER_RESOURCE, term, "from next")
        .unwrap();

    // Buffered while it is stopped: the first thing it reads once resumed.
    leader.write_again();
    leader.resume();
    assert_eq!(
        leader.report_within(BOUND),
        format!("write=stale lost=true leader={term}")
    );
    assert_eq!(
        store
            .read(&mut conn, LEADER_RESOURCE)
            .unwrap()
            .map(|(f, v)| (f, v)),
        Some((term, b"from next".to_vec())),
        "the new leader's write stands"
    );
    assert_eq!(F::resign(next).unwrap(), ReleaseOutcome::Released);
}
