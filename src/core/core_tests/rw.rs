//! Read-write waiters: a read line and a write line per key, readers of
//! one locker granted one after another at once, a writer's intent only
//! when it will wait, `rw:<sha>` waking both lines, and reader releases
//! and renews by the readers' set.

use super::*;
use crate::core::names::{Kind, Want};

fn join_as(core: &mut Core, now: Instant, want: Want, i: u8, wait: Duration) -> WaiterId {
    core.acquire_for(now, "doc", want, token(i), waiting(wait))
        .expect("the acquire is admitted")
}

fn line(kind: Kind) -> LineKey {
    LineKey {
        kind,
        id: KeyId::of("doc"),
    }
}

#[test]
fn reads_and_writes_send_their_scripts_and_a_waiting_writer_asks_for_an_intent() {
    let now = t0();
    let mut core = core_at(now);
    let read = join_as(&mut core, now, Want::Read, 1, secs(5));
    let write = join_as(&mut core, now, Want::Write, 2, secs(5));
    let read_call = attempt(&mut core, now, read);
    assert_eq!(read_call.kind, ScriptKind::RwRead);
    let write_call = attempt(&mut core, now, write);
    assert_eq!(write_call.kind, ScriptKind::RwWrite);
    // The intent lives three safety polls (NOTIFY = 250 ms).
    assert!(
        packed(&write_call).ends_with("$3\r\n750\r\n"),
        "{}",
        packed(&write_call)
    );
    // A try-once writer behind a writer of ours is busy without asking.
    let once = core.acquire_for(now, "doc", Want::Write, token(3), waiting(Duration::ZERO));
    assert!(matches!(once, Err(Error::Busy { .. })));
    assert!(core.lines.contains_key(&line(Kind::Read)));
    assert!(core.lines.contains_key(&line(Kind::Write)));
}

#[test]
fn a_try_once_writer_leaves_no_intent() {
    let now = t0();
    let mut core = core_at(now);
    let once = join_as(&mut core, now, Want::Write, 3, Duration::ZERO);
    let call = attempt(&mut core, now, once);
    assert!(packed(&call).ends_with("$1\r\n0\r\n"), "{}", packed(&call));
}

#[test]
fn after_a_read_grant_the_next_reader_tries_at_once_after_a_write_it_waits() {
    let now = t0();
    let mut core = core_at(now);
    let r1 = join_as(&mut core, now, Want::Read, 1, secs(5));
    let r2 = join_as(&mut core, now, Want::Read, 2, secs(5));
    attempt(&mut core, now, r1);
    core.handle_acquire_reply(now, r1, acquired(40));
    assert_eq!(
        granted(&mut core, now, r1).fence,
        Fence::new(40),
        "the epoch"
    );
    assert!(drain(&mut core).contains(&CoreEvent::Wake(r2)));
    assert_eq!(attempt(&mut core, now, r2).kind, ScriptKind::RwRead);

    let w1 = join_as(&mut core, now, Want::Write, 3, secs(5));
    let w2 = join_as(&mut core, now, Want::Write, 4, secs(5));
    attempt(&mut core, now, w1);
    core.handle_acquire_reply(now, w1, acquired(41));
    granted(&mut core, now, w1);
    drain(&mut core);
    // Our own writer holds it: the next writer waits for the notification.
    assert!(matches!(
        core.poll_waiter(now, w2),
        WaiterStep::Wait(Some(_))
    ));
}

#[test]
fn an_rw_notification_wakes_both_lines_of_the_key() {
    let now = t0();
    let mut core = core_at(now);
    let read = join_as(&mut core, now, Want::Read, 1, secs(60));
    let write = join_as(&mut core, now, Want::Write, 2, secs(60));
    for id in [read, write] {
        attempt(&mut core, now, id);
        core.handle_acquire_reply(now, id, busy(5000));
    }
    drain(&mut core);
    core.handle_notification(format!("rw:{}", KeyId::of("doc").to_hex()).as_bytes());
    let woken = drain(&mut core);
    assert!(woken.contains(&CoreEvent::Wake(read)) && woken.contains(&CoreEvent::Wake(write)));
    // A lock notification of the same key wakes neither.
    notify(&mut core, "doc");
    assert!(drain(&mut core).is_empty());
}

#[test]
fn a_readers_release_and_renew_use_the_readers_set_and_a_writers_its_key() {
    let now = t0();
    let mut core = core_at(now);
    let read = join_as(&mut core, now, Want::Read, 1, secs(5));
    attempt(&mut core, now, read);
    core.handle_acquire_reply(now, read, acquired(7));
    let grant = granted(&mut core, now, read);
    let readers = format!("ns:rw-read:{{{}}}", KeyId::of("doc").to_hex());
    let renew = core.renew_call(grant.lease, LEASE_MS).unwrap();
    assert_eq!(renew.kind, ScriptKind::RwReadRenew);
    assert!(packed(&renew).contains(&readers));
    let release = core.release_call(grant.lease).unwrap();
    assert_eq!(release.kind, ScriptKind::RwReadRelease);
    assert!(packed(&release).contains(&format!("rw:{}", KeyId::of("doc").to_hex())));

    let write = join_as(&mut core, now, Want::Write, 2, secs(5));
    attempt(&mut core, now, write);
    core.handle_acquire_reply(now, write, timed_out());
    core.cancel(write);
    // Cancelled while its outcome is unknown: the token may hold the key.
    assert_eq!(failed(&mut core, now, write).code(), "CANCELLED");
    let orphans = core.take_orphans();
    assert_eq!(orphans.len(), 1);
    assert!(releases(&orphans[0], token(2)));
    assert!(packed(&orphans[0]).contains(&format!("ns:rw-write:{{{}}}", KeyId::of("doc").to_hex())));
}

/// A writer's grant a waiter of this line was given, brought back by a
/// failover that lost writes, is not given to the next writer
/// (docs/PROTOCOL.md §4.3).
#[test]
fn a_writers_grant_brought_back_by_data_loss_is_not_given_twice() {
    let now = t0();
    let mut core = core_at(now);
    let first = join_as(&mut core, now, Want::Write, 1, secs(5));
    let next = join_as(&mut core, now, Want::Write, 2, secs(5));
    attempt(&mut core, now, first);
    core.handle_acquire_reply(now, first, acquired(40));
    granted(&mut core, now, first);
    drain(&mut core);
    let later = now + secs(1);
    attempt(&mut core, later, next);
    core.handle_acquire_reply(later, next, acquired(40));
    if let WaiterStep::Done(result) = core.poll_waiter(later, next) {
        panic!("fence 40 given twice: {result:?}");
    }
    assert!(core.take_orphans().iter().any(|c| releases(c, token(2))));
}
