//! Multi-key waiters: a line per key set (shared by `{a,b}` and `{b,a}`),
//! woken by any member key's release or by a reservation made out to its
//! registration, the age a busy reply gives carried into the next attempt,
//! the try-once rule, and the calls that renew, release and leave.

use super::*;
use crate::core::multi::{classify_multi, multi_reg, KeySet};
use crate::core::names::{Kind, RegId};

fn join_set(core: &mut Core, now: Instant, keys: &[&str], i: u8, wait: Duration) -> WaiterId {
    let set = KeySet::of(keys, 1024, false).expect("a valid key set");
    core.acquire_multi(now, set, token(i), waiting(wait))
        .expect("the acquire is admitted")
}

fn multi_granted(fences: &[u64]) -> Result<Value, RedisError> {
    let mut items = vec![Value::BulkString(b"ok".to_vec())];
    items.extend(
        fences
            .iter()
            .map(|f| Value::BulkString(f.to_string().into_bytes())),
    );
    Ok(Value::Array(items))
}

fn multi_busy(ms: i64, since: u64) -> Result<Value, RedisError> {
    Ok(Value::Array(vec![
        Value::BulkString(b"busy".to_vec()),
        Value::Int(ms),
        Value::BulkString(since.to_string().into_bytes()),
    ]))
}

#[test]
fn key_sets_are_checked_and_one_set_is_one_line_in_any_order() {
    let ab = KeySet::of(&["a", "b"], 1024, false).unwrap();
    let ba = KeySet::of(&["b", "a"], 1024, false).unwrap();
    assert_eq!(ab.line(), ba.line());
    assert_eq!(ab.line().kind, Kind::Multi);
    assert_ne!(ab.members, ba.members, "the caller's order is kept");
    let reason = |keys: &[&str]| match KeySet::of(keys, 8, false) {
        Err(Error::InvalidKey { reason }) => reason,
        other => panic!("expected InvalidKey, got {other:?}"),
    };
    assert_eq!(reason(&[]), "a multi-key lease takes 1 to 64 keys, got 0");
    assert_eq!(reason(&["x", "y", "x"]), "keys 1 and 3 are the same");
    assert_eq!(reason(&["x", ""]), "key 2 must not be empty");
    assert!(reason(&["x", "far-too-long"]).starts_with("key 2 is 12 bytes long"));
}

#[test]
fn multi_replies_are_classified_totally() {
    let ok = |fences: &[&[u8]]| {
        let mut items = vec![Value::BulkString(b"ok".to_vec())];
        items.extend(fences.iter().map(|f| Value::BulkString(f.to_vec())));
        Value::Array(items)
    };
    let both = [Fence::new(5), Fence::new(9)];
    assert!(matches!(
        classify_multi(&ok(&[b"5", b"9"]), 2),
        Ok(Attempted::Granted(first, None, Some(fences), false))
            if first == both[0] && *fences == both
    ));
    assert!(
        classify_multi(&ok(&[b"5"]), 2).is_err(),
        "one fence per key"
    );
    assert!(
        classify_multi(&ok(&[b"5", b"0"]), 2).is_err(),
        "fences are positive"
    );
    assert!(matches!(
        classify_multi(&multi_busy(40, 7).unwrap(), 2),
        Ok(Attempted::Busy(Some(remaining), Some(7), false, None)) if remaining == ms(40)
    ));
    assert!(matches!(
        classify_multi(&multi_busy(-2, 7).unwrap(), 2),
        Ok(Attempted::Busy(None, Some(7), false, None))
    ));
    for bad in [Value::Nil, Value::Int(1), Value::Array(vec![])] {
        assert!(classify_multi(&bad, 2).is_err(), "{bad:?}");
    }
}

#[test]
fn a_set_waiter_is_woken_by_a_release_of_any_of_its_keys_and_keeps_its_age() {
    let now = t0();
    let mut core = core_at(now);
    let id = join_set(&mut core, now, &["a", "b"], 1, secs(60));
    let call = attempt(&mut core, now, id);
    assert_eq!(call.kind, ScriptKind::MultiAcquire);
    assert!(packed(&call).contains(&LockNames::new("ns", KeyId::of("b")).lock));
    core.handle_acquire_reply(now, id, multi_busy(5_000, 1_234));
    assert!(
        wait_until(&mut core, now, id).is_some(),
        "waits for a release"
    );
    drain(&mut core);

    notify(&mut core, "c");
    assert!(drain(&mut core).is_empty(), "not one of its keys");
    notify(&mut core, "b");
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)]);
    let again = attempt(&mut core, now, id);
    assert!(packed(&again).contains("1234"), "the age rides along");
    core.handle_acquire_reply(now, id, multi_granted(&[3, 4]));
    let grant = granted(&mut core, now, id);
    let (members, fences) = grant.multi.expect("a multi-key grant");
    assert_eq!(members.to_vec(), vec![KeyId::of("a"), KeyId::of("b")]);
    assert_eq!(fences.to_vec(), vec![Fence::new(3), Fence::new(4)]);

    let renew = core.renew_call(grant.lease, LEASE_MS).unwrap();
    assert_eq!(renew.kind, ScriptKind::MultiRenew);
    let release = core.release_call(grant.lease).unwrap();
    assert_eq!(release.kind, ScriptKind::MultiRelease);
    assert!(packed(&release).contains(&KeyId::of("a").to_hex()));
}

#[test]
fn a_reservation_for_its_registration_wakes_the_set_waiter() {
    let now = t0();
    let mut s = settings(128, 10_000);
    s.handover = Some(HandoverSettings {
        reg: RegId(0x77),
        reg_ms: 750,
        claim_ms: 100,
    });
    let mut core = Core::new(s, now);
    let id = join_set(&mut core, now, &["a", "b"], 1, secs(60));
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, multi_busy(5_000, 9));
    drain(&mut core);
    let set = KeySet::of(&["a", "b"], 1024, false).unwrap();
    let ours = multi_reg(RegId(0x77), set.set).to_hex();
    let other = format!(
        "{}:g:{}:0:750",
        KeyId::of("a").to_hex(),
        RegId(0x78).to_hex()
    );
    core.handle_notice(now, other.as_bytes());
    assert!(
        !drain(&mut core).contains(&CoreEvent::Wake(id)),
        "another's reservation"
    );
    let reserved = format!("{}:g:{ours}:0:750", KeyId::of("a").to_hex());
    core.handle_notice(now, reserved.as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)]);
}

#[test]
fn a_try_once_set_never_jumps_a_line_of_one_of_its_keys() {
    let now = t0();
    let mut core = core_at(now);
    let _waiter = busy_head(&mut core, now, "b", 1, 5_000);
    let set = KeySet::of(&["a", "b"], 1024, false).unwrap();
    let e = core
        .acquire_multi(now, set, token(2), waiting(Duration::ZERO))
        .expect_err("a waiter of ours waits for b");
    assert_eq!(e.code(), "LOCK_BUSY");
}

#[test]
fn a_set_waiter_that_gives_up_releases_its_reservations_at_once() {
    let now = t0();
    let mut core = core_at(now);
    let id = join_set(&mut core, now, &["a", "b"], 1, ms(300));
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, multi_busy(5_000, 9));
    let e = failed(&mut core, now + ms(300), id);
    assert_eq!(e.code(), "WAIT_TIMEOUT");
    let calls = core.take_deregistrations();
    assert_eq!(
        calls.len(),
        1,
        "no queues without the hand-over: the release"
    );
    assert_eq!(calls[0].kind, ScriptKind::MultiRelease);
    assert!(packed(&calls[0]).contains(&token(1).to_hex()));
}

/// The release sends each key's lock (with the hand-over, and its queue's
/// flag, counter and queue) and one channel when every key shares it (one server's; on a
/// Cluster, the keys of one hash tag), else each key's; the script derives
/// the messages from the lock names.
#[test]
fn a_multi_release_sends_a_shared_channel_once() {
    use crate::core::multi::multi_release_call;
    use crate::core::names::{Channel, LockNames};
    let release = |keys: &[KeyId], channel: Channel, ttl: Option<u64>| {
        let keys = keys
            .iter()
            .map(|id| (*id, LockNames::new("ns", *id).lock))
            .collect();
        packed(&multi_release_call(keys, token(1), "ns", channel, ttl))
    };
    // EVALSHA, sha, key count, 3 locks (and with the hand-over their
    // queues' flags, counters and queues), then token, publish, TTL and
    // the channels.
    let items = |packed: &str| packed.split("\r\n").next().map(str::to_owned);
    let plain = ["a", "b", "c"].map(KeyId::of);
    let tagged = ["x{t}1", "x{t}2", "x{t}3"].map(|k| KeyId::named(k, true));

    let one = release(&plain, Channel::Standalone, Some(90));
    assert_eq!(items(&one).as_deref(), Some("*19"));
    assert_eq!(one.matches("ns:lock-released").count(), 1);
    for id in plain {
        let names = LockNames::new("ns", id);
        for name in [names.queue.flag, names.fence, names.queue.list] {
            assert!(one.contains(&name), "{name}");
        }
    }
    assert!(
        one.contains("\r\n$2\r\n90\r\n$16\r\nns:lock-released"),
        "{one:?}"
    );
    let off = release(&plain, Channel::Standalone, None);
    assert_eq!(items(&off).as_deref(), Some("*10"));
    assert!(!off.contains("lock-queued"), "no hand-over: no flags");
    assert!(
        off.contains("\r\n$0\r\n\r\n$16\r\nns:lock-released"),
        "no hand-over"
    );

    let each = release(&plain, Channel::Sharded, None);
    assert_eq!(items(&each).as_deref(), Some("*12"), "a channel per key");
    assert_eq!(each.matches("ns:lock-released:{").count(), 3);
    let shared = release(&tagged, Channel::Sharded, None);
    assert_eq!(items(&shared).as_deref(), Some("*10"), "one tag's channel");
    assert_eq!(shared.matches("ns:lock-released:{").count(), 1);
}
