//! A registration that outlives its line (docs/PROTOCOL.md,
//! `core/linger.rs`): kept while the last waiter's lease is held and a
//! short window after its release; a waiter that comes back waits for its
//! grant; a grant nobody waits for, and the end of the window, are passed
//! on by the subscriber.

use super::*;
use crate::core::linger::LINGER_AFTER_RELEASE;
use crate::core::names::{LineKey, RegId};

const REG: RegId = RegId(0x51);

/// A core with the hand-over on and its subscription confirmed.
fn handover_core(now: Instant) -> Core {
    let mut s = settings(128, 10_000);
    s.handover = Some(HandoverSettings {
        reg: REG,
        reg_ms: 750,
        claim_ms: 100,
    });
    let mut core = Core::new(s, now);
    core.subscription_wanted_by_waiter();
    core.handle_subscribed();
    drain(&mut core);
    core
}

fn line(key: &str) -> LineKey {
    LineKey {
        kind: Kind::Lock,
        id: KeyId::of(key),
    }
}

/// The notice of a grant to this locker's registration on `key`.
fn our_grant(key: &str) -> String {
    format!(
        "{}:g:{}:17:100",
        line(key).message(),
        line(key).queue_entry(REG)
    )
}

/// A lock acquire's hand-over argument `i` (`handover_args`, from 0: the
/// entry, its bound, the claim window, publish, channel, message, the
/// grant token it names as its own, keep, the grant token it registers).
fn handover_arg(call: &ScriptCall, i: usize) -> String {
    // EVALSHA, sha, 5 (lock, counter, queue, flag, registration), the
    // keys, then the script's own three arguments and the hand-over's.
    let words: Vec<String> = packed(call)
        .split("\r\n")
        .filter(|w| !w.starts_with(['$', '*']))
        .map(str::to_owned)
        .collect();
    words[3 + 5 + 3 + i].clone()
}

/// An acquire's `keep` argument (`handover_args`: `k` keeps the
/// registration queued, `r` also refreshes it, `d` takes it out).
fn keep_of(call: &ScriptCall) -> String {
    handover_arg(call, 7)
}

/// An attempt that registers and whose outcome is unknown may have
/// registered: the next attempt names the grant token as its own, so a
/// grant made out to it meanwhile is claimed, not taken for another's
/// (a semaphore would grant that registration a second slot).
#[test]
fn an_attempt_sent_again_after_an_unknown_outcome_claims_a_grant_it_may_have() {
    let now = t0();
    let mut core = handover_core(now);
    let id = join(&mut core, now, "k", 1, secs(10));
    let first = attempt(&mut core, now, id);
    let grant = handover_arg(&first, 8);
    assert!(!grant.is_empty(), "it registers");
    assert_eq!(handover_arg(&first, 6), "", "not registered yet");
    core.handle_acquire_reply(now, id, timed_out());
    drain(&mut core);
    let later = now + secs(1);
    let again = attempt(&mut core, later, id);
    assert_eq!(handover_arg(&again, 6), grant, "its grant is its own");
}

/// A waiter that registered with a busy attempt, then was granted the key
/// and claimed it: returns its grant.
fn claimed_after_registering(core: &mut Core, now: Instant, key: &str, i: u8) -> Grant {
    let id = join(core, now, key, i, secs(10));
    let call = attempt(core, now, id);
    assert!(packed(&call).contains(&REG.to_hex()), "it registers");
    core.handle_acquire_reply(now, id, busy(5_000));
    drain(core);
    core.handle_notice(now, our_grant(key).as_bytes());
    assert_eq!(drain(core), vec![CoreEvent::Wake(id)], "its grant");
    let claim = attempt(core, now, id);
    assert_eq!(
        keep_of(&claim),
        "k",
        "the claim keeps the registration queued"
    );
    core.handle_acquire_reply(now, id, acquired(17));
    granted(core, now, id)
}

#[test]
fn a_lone_waiter_that_took_the_lease_stays_registered_and_the_next_waits_for_its_grant() {
    let now = t0();
    let mut core = handover_core(now);
    let grant = claimed_after_registering(&mut core, now, "k", 1);
    assert!(core.lingering.contains(&line("k")), "kept, with no waiter");
    assert!(core.take_deregistrations().is_empty(), "nothing taken out");

    // The release skips its own registration and hands the key on.
    let release = core.release_call(grant.lease).unwrap();
    assert!(
        packed(&release).ends_with(&format!("\r\n{}\r\n", REG.to_hex())),
        "names its own registration last"
    );
    let later = now + ms(5);
    core.handle_lease_released(later, grant.lease, Some(&Value::Int(3)));
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();

    // Back within the window: no attempt, the grant is awaited.
    let id = join(&mut core, later + ms(1), "k", 2, secs(10));
    assert!(matches!(
        core.poll_waiter(later + ms(1), id),
        WaiterStep::Wait(Some(_))
    ));
    core.handle_notice(later + ms(3), our_grant("k").as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)]);
    let claim = attempt(&mut core, later + ms(3), id);
    assert!(packed(&claim).contains(&token(1).grant_token().to_hex()));
    assert!(core.take_pass_ons().is_empty());
}

#[test]
fn a_waiter_back_after_a_release_that_freed_the_key_attempts_at_once() {
    let now = t0();
    let mut core = handover_core(now);
    let grant = claimed_after_registering(&mut core, now, "k", 1);
    core.handle_lease_released(now, grant.lease, Some(&Value::Int(1)));
    core.handle_release_reply(grant.lease, ok(Value::Int(1)))
        .unwrap();
    let id = join(&mut core, now, "k", 2, secs(10));
    let call = attempt(&mut core, now, id);
    assert_eq!(
        call.kind,
        ScriptKind::Acquire,
        "still registered: {}",
        packed(&call)
    );
}

#[test]
fn a_grant_that_finds_no_waiter_is_passed_on_by_the_subscriber() {
    let now = t0();
    let mut core = handover_core(now);
    let grant = claimed_after_registering(&mut core, now, "k", 1);
    core.handle_lease_released(now, grant.lease, Some(&Value::Int(3)));
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();
    core.handle_notice(now + ms(2), our_grant("k").as_bytes());
    let pass_ons = core.take_pass_ons();
    assert_eq!(pass_ons.len(), 1);
    let (key, calls) = &pass_ons[0];
    assert_eq!(*key, KeyId::of("k").channel_id());
    let kinds: Vec<ScriptKind> = calls.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ScriptKind::Deregister, ScriptKind::Release]);
    assert!(
        packed(&calls[1]).contains(&token(1).grant_token().to_hex()),
        "the grant is released by the token it was made out to"
    );
    assert!(!core.lingering.contains(&line("k")));
    // A waiter coming later starts afresh, with an attempt.
    let id = join(&mut core, now + ms(3), "k", 2, secs(10));
    attempt(&mut core, now + ms(3), id);
}

#[test]
fn the_window_after_the_release_ends_with_the_registration_taken_out() {
    let now = t0();
    let mut core = handover_core(now);
    let grant = claimed_after_registering(&mut core, now, "k", 1);
    // Held: lingers until the entry's bound in Redis at most.
    assert!(core.end_lingering_due(now + ms(100)).is_some());
    assert!(core.take_pass_ons().is_empty());
    core.handle_lease_released(now + ms(100), grant.lease, Some(&Value::Int(3)));
    let end = now + ms(100) + LINGER_AFTER_RELEASE;
    assert_eq!(core.end_lingering_due(now + ms(101)), Some(end));
    assert!(core.take_pass_ons().is_empty());
    assert_eq!(core.end_lingering_due(end), None);
    let pass_ons = core.take_pass_ons();
    assert_eq!(pass_ons.len(), 1, "taken out when the window ends");
    assert!(core.lingering.is_empty());
}

#[test]
fn a_try_once_acquire_or_a_second_waiter_does_not_linger_and_shutdown_takes_it_out() {
    let now = t0();
    let mut core = handover_core(now);
    let _grant = claimed_after_registering(&mut core, now, "k", 1);
    core.begin_shutdown();
    assert!(core.lingering.is_empty());
    let calls = core.take_cleanup();
    assert_eq!(
        calls[0].kind,
        ScriptKind::Deregister,
        "taken out at shutdown"
    );

    // A try-once acquire that finds the key free keeps nothing queued.
    let mut core = handover_core(now);
    let _grant = claimed_after_registering(&mut core, now, "k", 1);
    let id = join(&mut core, now, "k", 2, Duration::ZERO);
    let call = attempt(&mut core, now, id);
    assert_eq!(keep_of(&call), "d", "a try-once acquire takes it out");
}

#[test]
fn on_a_cluster_a_lingering_registration_keeps_its_keys_channel_until_it_ends() {
    let now = t0();
    let mut core = Core::new(
        CoreSettings {
            channel: Channel::Sharded,
            handover: Some(HandoverSettings {
                reg: REG,
                reg_ms: 750,
                claim_ms: 100,
            }),
            ..settings(128, 10_000)
        },
        now,
    );
    let id = join(&mut core, now, "k", 1, secs(10));
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, busy(5_000));
    core.handle_channel_subscribed(KeyId::of("k"));
    drain(&mut core);
    let call = attempt(&mut core, now, id);
    assert!(
        packed(&call).contains(&REG.to_hex()),
        "registers once heard"
    );
    core.handle_acquire_reply(now, id, busy(5_000));
    core.handle_notice(now, our_grant("k").as_bytes());
    drain(&mut core);
    attempt(&mut core, now, id);
    core.handle_acquire_reply(now, id, acquired(17));
    let grant = granted(&mut core, now, id);
    assert!(core.lingering.contains(&line("k")));
    let heard = KeyId::of("k").channel_id();
    assert_eq!(
        core.wanted_keys(now + secs(2)),
        vec![heard],
        "held while it lingers"
    );

    core.handle_lease_released(now + secs(2), grant.lease, Some(&Value::Int(3)));
    let end = now + secs(2) + LINGER_AFTER_RELEASE;
    core.poll_subscriber(end);
    assert!(core.lingering.is_empty());
    let pass_ons = core.take_pass_ons();
    assert_eq!(pass_ons.len(), 1);
    assert_eq!(pass_ons[0].0, heard, "sent on the key's channel's node");
    assert_eq!(core.wanted_keys(end), vec![heard], "then lingers a second");
    assert!(core.wanted_keys(end + secs(1)).is_empty());
}
