//! Semaphore waiters: their own line beside the key's lock line, the next
//! head trying at once after a grant, `sem:<sha>` notifications, the
//! refusal of another permit count, and releases by slot or by search.

use super::*;
use crate::core::names::{Kind, Want};

fn permit_of(n: u32) -> Want {
    Want::Permit { permits: n }
}

fn join_sem(core: &mut Core, now: Instant, key: &str, i: u8, wait: Duration) -> WaiterId {
    core.acquire_for(now, key, permit_of(3), token(i), waiting(wait))
        .expect("the acquire is admitted")
}

fn permit_granted(slot: i64, fence: u64) -> Result<Value, RedisError> {
    Ok(Value::Array(vec![
        Value::Int(slot),
        Value::BulkString(fence.to_string().into_bytes()),
    ]))
}

fn sem_line(key: &str) -> LineKey {
    LineKey {
        kind: Kind::Semaphore,
        id: KeyId::of(key),
    }
}

#[test]
fn a_permit_attempt_sends_the_semaphore_script_and_its_grant_names_the_slot() {
    let now = t0();
    let mut core = core_at(now);
    let id = join_sem(&mut core, now, "pool", 1, secs(5));
    let call = attempt(&mut core, now, id);
    assert_eq!(call.kind, ScriptKind::SemAcquire);
    assert!(packed(&call).contains(&format!("ns:sem:{{{}}}:", KeyId::of("pool").to_hex())));
    core.handle_acquire_reply(now, id, permit_granted(2, 77));
    let grant = granted(&mut core, now, id);
    assert_eq!((grant.slot, grant.fence), (Some(2), Fence::new(77)));

    // Renew and release act on the slot's key.
    let slot_key = format!("ns:sem:{{{}}}:2", KeyId::of("pool").to_hex());
    let renew = core.renew_call(grant.lease, LEASE_MS).unwrap();
    assert!(packed(&renew).contains(&slot_key));
    let release = core.release_call(grant.lease).unwrap();
    assert_eq!(release.kind, ScriptKind::Release);
    let text = packed(&release);
    assert!(text.contains(&slot_key));
    assert!(text.contains(&format!("sem:{}", KeyId::of("pool").to_hex())));
}

#[test]
fn a_lock_and_a_semaphore_of_one_key_have_lines_of_their_own() {
    let now = t0();
    let mut core = core_at(now);
    let lock = join(&mut core, now, "k", 1, secs(5));
    let sem = join_sem(&mut core, now, "k", 2, secs(5));
    // Both are heads: each sends its attempt.
    assert_eq!(attempt(&mut core, now, lock).kind, ScriptKind::Acquire);
    assert_eq!(attempt(&mut core, now, sem).kind, ScriptKind::SemAcquire);
    assert!(core.lines.contains_key(&sem_line("k")));
    assert!(core.lines.contains_key(&LineKey::lock(KeyId::of("k"))));
}

#[test]
fn after_a_grant_the_next_permit_waiter_tries_at_once() {
    let now = t0();
    let mut core = core_at(now);
    let first = join_sem(&mut core, now, "pool", 1, secs(5));
    let second = join_sem(&mut core, now, "pool", 2, secs(5));
    attempt(&mut core, now, first);
    assert!(matches!(core.poll_waiter(now, second), WaiterStep::Wait(_)));
    core.handle_acquire_reply(now, first, permit_granted(0, 5));
    granted(&mut core, now, first);
    assert!(drain(&mut core).contains(&CoreEvent::Wake(second)));
    // No deferral behind our own grant, unlike a lock's line.
    assert_eq!(attempt(&mut core, now, second).kind, ScriptKind::SemAcquire);
}

#[test]
fn a_sem_notification_wakes_the_semaphore_head_and_not_the_locks() {
    let now = t0();
    let mut core = core_at(now);
    let lock = busy_head(&mut core, now, "k", 1, 5000);
    let sem = join_sem(&mut core, now, "k", 2, secs(60));
    attempt(&mut core, now, sem);
    core.handle_acquire_reply(now, sem, busy(5000));
    drain(&mut core);

    core.handle_notification(format!("sem:{}", KeyId::of("k").to_hex()).as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(sem)]);
    assert_eq!(attempt(&mut core, now, sem).kind, ScriptKind::SemAcquire);
    notify(&mut core, "k");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(lock)]);
}

#[test]
fn another_permit_count_ends_the_wait_with_invalid_config() {
    let now = t0();
    let mut core = core_at(now);
    let id = join_sem(&mut core, now, "pool", 1, secs(60));
    attempt(&mut core, now, id);
    let other = Value::Array(vec![Value::BulkString(b"permits".to_vec()), Value::Int(5)]);
    core.handle_acquire_reply(now, id, ok(other));
    let e = failed(&mut core, now, id);
    assert_eq!(e.code(), "INVALID_CONFIG");
    assert!(e.to_string().contains("5 permits"), "{e}");
    assert_eq!(core.counts().orphans, 0, "settled: nothing to release");
}

#[test]
fn a_permit_acquire_with_an_unknown_outcome_is_released_by_search() {
    let now = t0();
    let mut core = core_at(now);
    let id = core
        .acquire_for(now, "pool", permit_of(3), token(9), waiting(Duration::ZERO))
        .unwrap();
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, timed_out());
    assert_eq!(failed(&mut core, now, id).code(), "OUTCOME_UNKNOWN");
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].kind, ScriptKind::SemReleaseAny);
    assert!(packed(&calls[0]).contains(&token(9).to_hex()));
}

#[test]
fn a_dropped_permit_is_released_by_its_slot() {
    let now = t0();
    let mut core = core_at(now);
    let id = join_sem(&mut core, now, "pool", 4, secs(5));
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, permit_granted(1, 8));
    let grant = granted(&mut core, now, id);
    core.abandon_lease(grant.lease);
    let calls = core.take_orphans();
    assert_eq!(calls.len(), 1);
    assert!(releases(&calls[0], token(4)));
    assert!(packed(&calls[0]).contains(&format!("ns:sem:{{{}}}:1", KeyId::of("pool").to_hex())));
}

#[test]
fn bad_permit_counts_are_refused_before_joining() {
    let now = t0();
    let mut core = core_at(now);
    for n in [0, 1025] {
        let e = core
            .acquire_for(now, "pool", permit_of(n), token(1), waiting(secs(1)))
            .unwrap_err();
        assert_eq!(e.code(), "INVALID_CONFIG");
    }
    assert_eq!(core.counts().waiters, 0);
}

/// A failover that lost writes may bring back a slot's grant a waiter of
/// this line was given: the next waiter's claim of it is not a grant, while
/// another slot's own (lower) fence is (docs/PROTOCOL.md §4.3).
#[test]
fn a_slots_grant_brought_back_by_data_loss_is_not_given_twice() {
    let now = t0();
    let mut core = core_at(now);
    let first = join_sem(&mut core, now, "pool", 1, secs(5));
    let next = join_sem(&mut core, now, "pool", 2, secs(5));
    attempt(&mut core, now, first);
    core.handle_acquire_reply(now, first, permit_granted(2, 77));
    granted(&mut core, now, first);
    drain(&mut core);
    let later = now + secs(1);
    attempt(&mut core, later, next);
    core.handle_acquire_reply(later, next, permit_granted(2, 77));
    let again = match core.poll_waiter(later, next) {
        WaiterStep::Attempt(call) => call,
        other => panic!("slot 2's fence 77 given twice: {other:?}"),
    };
    assert!(!packed(&again).contains(&token(2).to_hex()), "a new token");
    assert!(core.take_orphans().iter().any(|c| releases(c, token(2))));
    core.handle_acquire_reply(later, next, permit_granted(1, 5));
    assert_eq!(granted(&mut core, later, next).slot, Some(1));
}
