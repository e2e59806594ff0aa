//! A lock's or a semaphore slot's grant taken from its notice without the claim round trip
//! (`core/claimless.rs`, docs/PROTOCOL.md §4.3): held until the lower bound
//! of the grant's expiry, extended by the subscriber, released by the hold's
//! whole value; claimed as before wherever the bound is not known.

use super::*;
use crate::core::names::{LineKey, RegId, Want};

const REG: RegId = RegId(0x52);
/// The server's time (ms) when the registering attempt ran.
const SERVER_MS: u64 = 1_700_000_000_000;

/// A core with the hand-over on and its subscription confirmed.
fn handover_core(now: Instant, channel: Channel) -> Core {
    let mut s = settings(128, 10_000);
    s.handover = Some(HandoverSettings {
        reg: REG,
        reg_ms: 3_000,
        claim_ms: 100,
    });
    s.claimless = channel == Channel::Standalone;
    s.channel = channel;
    let mut core = Core::new(s, now);
    core.subscription_wanted_by_waiter();
    core.handle_subscribed();
    drain(&mut core);
    core
}

fn line() -> LineKey {
    LineKey {
        kind: Kind::Lock,
        id: KeyId::of("k"),
    }
}

/// A lock acquire's busy reply after it registered at `SERVER_MS`.
fn registered(remaining_ms: i64) -> Result<Value, RedisError> {
    ok(Value::Array(vec![
        Value::Int(remaining_ms),
        Value::Int(SERVER_MS as i64),
    ]))
}

/// The id a notice gives the grant token of the line whose first waiter
/// had token `i`.
fn owner_id(i: u8) -> String {
    format!("{:016x}", token(i).grant_token().notice_id())
}

/// The notice of a grant with fence 17 and a 100 ms window to this
/// locker's registration under the grant token of the line token 1's
/// waiter began, made at server time `at` (none: an older version's
/// notice).
fn our_grant(at: Option<u64>) -> String {
    grant_to_owner(at, 1)
}

/// As [`our_grant`], to the grant token of the line token `i`'s waiter
/// began.
fn grant_to_owner(at: Option<u64>, i: u8) -> String {
    let base = format!("{}:g:{}:17:100", line().message(), line().queue_entry(REG));
    match at {
        Some(at) => format!("{base}:{at}::{}", owner_id(i)),
        None => base,
    }
}

/// A waiter of token `i` on "k" that registered with a busy attempt sent
/// at `now`, and a second waiter behind it.
fn registered_waiters(core: &mut Core, now: Instant) -> (WaiterId, WaiterId) {
    let id = join(core, now, "k", 1, secs(10));
    let next = join(core, now, "k", 2, secs(10));
    attempt(core, now, id);
    core.handle_acquire_reply(now, id, registered(5_000));
    drain(core);
    (id, next)
}

/// A core whose head waiter took a grant (fence 17) from its notice 1 ms
/// after registering at `now`; the grant, and the waiter behind it.
fn taken_without_claim(now: Instant) -> (Core, Grant, WaiterId) {
    let mut core = handover_core(now, Channel::Standalone);
    let (id, next) = registered_waiters(&mut core, now);
    core.handle_notice(now + ms(1), our_grant(Some(SERVER_MS + 1)).as_bytes());
    let grant = granted(&mut core, now + ms(1), id);
    drain(&mut core);
    (core, grant, next)
}

#[test]
fn a_grant_is_taken_from_its_notice_and_extended_later() {
    let now = t0();
    let mut core = handover_core(now, Channel::Standalone);
    let (id, _) = registered_waiters(&mut core, now);

    // Granted 40 ms (server time) after the attempt ran, heard 41 ms after
    // it was sent.
    let heard = now + ms(41);
    core.handle_notice(heard, our_grant(Some(SERVER_MS + 40)).as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)]);
    let grant = granted(&mut core, heard, id);
    assert_eq!(grant.fence.get(), 17);
    // Valid until the send + 40 + 100 ms, less the 2 ms margin and 1 ms
    // per second between the two server times (40 µs).
    assert_eq!(
        grant.clock.lock().remaining(heard),
        ms(40 + 100 - 2 - 41) - Duration::from_micros(40)
    );

    // The release and the renew name the hold whole.
    let hold = format!("{}:17", token(1).grant_token().to_hex());
    assert!(packed(&core.release_call(grant.lease).unwrap()).contains(&hold));
    assert!(packed(&core.renew_call(grant.lease, LEASE_MS).unwrap()).contains(&hold));

    // The extension is due an eighth of the way to the deadline: then the
    // subscriber renews the hold to the full lease.
    let due = core.next_extension_due().expect("an extension");
    assert_eq!(due, heard + (ms(97) - Duration::from_micros(40)) / 8);
    assert!(core.take_due_extensions(due - ms(1)).is_empty());
    let mut extensions = core.take_due_extensions(due);
    assert_eq!(extensions.len(), 1);
    let (call, clock) = extensions.remove(0);
    assert_eq!(call.kind, ScriptKind::Renew);
    assert!(packed(&call).contains(&hold));
    assert!(packed(&call).contains(&LEASE_MS.to_string()));
    crate::core::claimless::handle_extension_reply(&clock, Some(&Value::Int(1)));
    assert_eq!(
        grant.clock.lock().remaining(due),
        ms(LEASE_MS),
        "the full lease from the extension's send"
    );
    assert_eq!(core.next_extension_due(), None);
}

#[test]
fn an_extension_of_a_released_hold_is_not_sent() {
    let now = t0();
    let (mut core, grant, _) = taken_without_claim(now);
    grant
        .clock
        .lock()
        .handle_release(Some(ReleaseOutcome::Released));
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();
    let due = core.next_extension_due().expect("still listed");
    assert!(core.take_due_extensions(due).is_empty());
    assert_eq!(core.next_extension_due(), None);
}

#[test]
fn an_extension_ends_the_hold_when_the_grant_is_gone_and_keeps_it_when_unknown() {
    for (reply, ended) in [(None, false), (Some(Value::Int(0)), true)] {
        let now = t0();
        let (mut core, grant, _) = taken_without_claim(now);
        let deadline = grant.clock.lock().valid_until();
        let due = core.next_extension_due().unwrap();
        let (_, clock) = core.take_due_extensions(due).remove(0);
        crate::core::claimless::handle_extension_reply(&clock, reply.as_ref());
        let after = grant.clock.lock().valid_until();
        if ended {
            assert_eq!(after, None, "the grant lapsed: the hold is over");
        } else {
            assert_eq!(after, deadline, "unknown: the grant's own deadline stands");
        }
    }
}

/// Where the bound is not known, the head claims the grant as before.
#[test]
fn a_grant_the_locker_cannot_place_is_claimed() {
    let cases: [(&str, Channel, Option<u64>); 4] = [
        ("an older version's notice", Channel::Standalone, None),
        (
            "made before the attempt ran",
            Channel::Standalone,
            Some(SERVER_MS - 1),
        ),
        (
            "too late to be worth it",
            Channel::Standalone,
            Some(SERVER_MS),
        ),
        ("on Redis Cluster", Channel::Sharded, Some(SERVER_MS + 1)),
    ];
    for (case, channel, at) in cases {
        let now = t0();
        let mut core = handover_core(now, channel);
        let (id, _) = registered_waiters(&mut core, now);
        // The third case is heard 60 ms on: under half the window is left.
        let heard = if at == Some(SERVER_MS) {
            now + ms(60)
        } else {
            now + ms(1)
        };
        core.handle_notice(heard, our_grant(at).as_bytes());
        assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)], "{case}");
        let claim = attempt(&mut core, heard, id);
        assert_eq!(claim.kind, ScriptKind::Acquire, "{case}");
        assert_eq!(core.next_extension_due(), None, "{case}");
    }
}

#[test]
fn a_failed_attempt_or_a_lost_subscription_forgets_the_server_time() {
    for lose in [true, false] {
        let now = t0();
        let mut core = handover_core(now, Channel::Standalone);
        let (id, next) = registered_waiters(&mut core, now);
        if lose {
            core.handle_subscriber_lost(now);
            core.handle_subscribed();
        } else {
            attempt(&mut core, now + secs(2), id);
            core.handle_acquire_reply(now + secs(2), id, timed_out());
        }
        drain(&mut core);
        core.handle_notice(now + ms(1), our_grant(Some(SERVER_MS + 1)).as_bytes());
        assert_eq!(core.next_extension_due(), None, "lost: {lose}");
        let _ = next;
    }
}

/// While a grant taken without its claim holds under the grant token, the
/// registration's leaving releases nothing by that token: it would end
/// the hold.
#[test]
fn a_leaving_registration_does_not_release_a_hold_under_its_grant_token() {
    let now = t0();
    let (mut core, grant, next) = taken_without_claim(now);
    // The next waiter gives up: its line is empty, the registration goes.
    core.cancel(next);
    let _ = core.poll_waiter(now + ms(2), next);
    let leaving = core.take_deregistrations();
    assert!(
        leaving.iter().all(|c| c.kind == ScriptKind::Deregister),
        "only DEREGISTER: {leaving:?}"
    );
    // Once the hold is released, the grant token's release goes (a grant
    // made out to the registration before it left is passed on).
    assert!(core.release_call(grant.lease).is_ok());
    core.handle_release_reply(grant.lease, ok(Value::Int(1)))
        .unwrap();
    let later = core.take_deregistrations();
    let grant_token = token(1).grant_token();
    assert!(
        later.iter().any(|c| releases(c, grant_token)),
        "the grant token's release: {later:?}"
    );
}

/// The hold of a grant taken without its claim is under the grant token,
/// which stays registered for the next waiter: the line's next attempts
/// name that token as their own only above the floor of the hold's fence,
/// so they never take the hold for a grant to them.
#[test]
fn the_next_waiter_does_not_take_the_hold_for_its_own_grant() {
    let now = t0();
    let (mut core, grant, next) = taken_without_claim(now);
    let grant_token = token(1).grant_token().to_hex();
    // The next head checks at its safety poll.
    let later = now + secs(2);
    let check = attempt(&mut core, later, next);
    let args = check.args();
    assert_eq!(args[3 + 6], grant_token, "named: {args:?}");
    assert_eq!(args[3 + 9], "17", "above the hold's fence only");
    core.handle_acquire_reply(later, next, registered(90));
    drain(&mut core);

    // Released: the floor stays, a later grant is above it.
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();
    let again = attempt(&mut core, later + secs(2), next);
    assert_eq!(again.args()[3 + 9], "17");
}

/// The hold of a grant taken without its claim (fence 17) has ended in
/// Redis while the locker still tracks it (dropped and not yet swept,
/// expired, lost to a failover), and the key is granted to the line's
/// registration again, fence 18. The next waiter claims that grant: its
/// attempt names the grant token as its own above the floor of fence 17,
/// so the script tells the new grant from the hold (docs/PROTOCOL.md
/// §4.3), and the grant does not lapse beside the hold.
#[test]
fn a_grant_beside_a_tracked_hold_is_claimed_above_the_holds_fence() {
    let now = t0();
    let (mut core, _grant, next) = taken_without_claim(now);
    let grant_token = token(1).grant_token().to_hex();
    // An older version's notice (no time): the head claims it.
    let notice = format!("{}:g:{}:18:100", line().message(), line().queue_entry(REG));
    core.handle_notice(now + ms(2), notice.as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(next)]);
    let claim = attempt(&mut core, now + ms(2), next);
    let args = claim.args();
    // The hand-over's arguments follow the acquire's three.
    assert_eq!(args[3 + 6], grant_token, "its own grant, named: {args:?}");
    assert_eq!(args.get(3 + 9).map(String::as_str), Some("17"), "the floor");
    core.handle_acquire_reply(now + ms(2), next, acquired(18));
    assert_eq!(granted(&mut core, now + ms(2), next).fence.get(), 18);
}

/// A waiter dropped after its grant was taken, before it returned: the
/// orphan's release names the hold, and the next waiter's attempts name
/// the grant token only above the hold's fence.
#[test]
fn a_dropped_waiters_taken_grant_is_released_as_its_hold() {
    let now = t0();
    let mut core = handover_core(now, Channel::Standalone);
    let (id, next) = registered_waiters(&mut core, now);
    core.handle_notice(now + ms(1), our_grant(Some(SERVER_MS + 1)).as_bytes());
    drain(&mut core);
    core.abandon(now + ms(2), id);
    let grant_token = token(1).grant_token().to_hex();
    let check = attempt(&mut core, now + secs(2), next);
    assert_eq!(check.args()[3 + 9], "17", "the hold's fence, a floor");
    let hold = format!("{grant_token}:17");
    let orphans = core.take_orphans();
    assert!(
        orphans.iter().any(|c| packed(c).contains(&hold)),
        "the hold's release: {orphans:?}"
    );
}

/// A failover to a replica that missed a released hold's release brings
/// back the grant (fence 17) a waiter of this line was given. The floor
/// the line's next attempt sends keeps the script from claiming it; were
/// it claimed all the same, that fence is still not given twice: the
/// claimed lease is released, the waiter waits on, and a notice of that
/// grant again is not taken.
#[test]
fn a_grant_data_loss_brought_back_is_not_given_to_the_next_waiter() {
    let now = t0();
    let (mut core, grant, next) = taken_without_claim(now);
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();
    let later = now + secs(2);
    attempt(&mut core, later, next);
    core.handle_acquire_reply(later, next, acquired(17));
    // It waits on: its next attempt, under a new token, cannot meet the
    // stale lease, which goes back with the orphans.
    let again = match core.poll_waiter(later, next) {
        WaiterStep::Attempt(call) => call,
        other => panic!("fence 17 given twice: {other:?}"),
    };
    assert!(!packed(&again).contains(&token(2).to_hex()), "a new token");
    let orphans = core.take_orphans();
    assert!(
        orphans.iter().any(|c| releases(c, token(2))),
        "the claimed lease's release: {orphans:?}"
    );

    // A notice of a grant with fence 17 again is claimed, not taken.
    core.handle_acquire_reply(later, next, registered(90));
    drain(&mut core);
    let _third = join(&mut core, later, "k", 3, secs(10));
    core.handle_notice(later + ms(1), our_grant(Some(SERVER_MS + 1)).as_bytes());
    drain(&mut core);
    let step = core.poll_waiter(later + ms(1), next);
    assert!(matches!(step, WaiterStep::Attempt(_)), "claimed: {step:?}");
}

fn sem_line() -> LineKey {
    LineKey {
        kind: Kind::Semaphore,
        id: KeyId::of("pool"),
    }
}

/// A grant of slot `slot` (none: an older version's notice) with fence 17
/// and a 100 ms window to this locker's registration for "pool" under the
/// grant token of the line token 1's waiter began, made 1 ms after the
/// registering attempt ran.
fn our_slot_grant(slot: Option<u32>) -> String {
    let line = sem_line();
    let base = format!(
        "{}:g:{}:17:100:{}",
        line.message(),
        line.queue_entry(REG),
        SERVER_MS + 1
    );
    match slot {
        Some(slot) => format!("{base}:{slot}:{}", owner_id(1)),
        None => base,
    }
}

/// Two waiters for a permit of "pool" (of 3), the head registered at
/// `SERVER_MS` by a busy attempt sent at `now`.
fn registered_permit_waiters(core: &mut Core, now: Instant) -> (WaiterId, WaiterId) {
    let permit = Want::Permit { permits: 3 };
    let mut join = |i| {
        core.acquire_for(now, "pool", permit, token(i), waiting(secs(10)))
            .expect("the acquire is admitted")
    };
    let (id, next) = (join(1), join(2));
    let call = attempt(core, now, id);
    assert_eq!(call.kind, ScriptKind::SemAcquire);
    core.handle_acquire_reply(now, id, registered(5_000));
    drain(core);
    (id, next)
}

/// A slot's grant whose notice names the slot is taken as a lock's is: the
/// hold is the slot's `<grant token>:<fence>`. The grant took the
/// registration out of the queue (a semaphore serves each once), so the
/// next waiter attempts at once and registers under a grant token of its
/// own: the hold's token is never named again, by an attempt or a release.
#[test]
fn a_slots_grant_is_taken_from_its_notice_and_the_next_waiter_registers_anew() {
    let now = t0();
    let mut core = handover_core(now, Channel::Standalone);
    let (id, next) = registered_permit_waiters(&mut core, now);
    let heard = now + ms(2);
    core.handle_notice(heard, our_slot_grant(Some(2)).as_bytes());
    let events = drain(&mut core);
    assert!(events.contains(&CoreEvent::Wake(id)), "{events:?}");
    let grant = granted(&mut core, heard, id);
    assert_eq!((grant.slot, grant.fence.get()), (Some(2), 17));
    // The send + 1 + 100 ms, less the margin (2 ms) and the drift (1 µs).
    let bound = ms(1 + 100 - 2 - 2) - Duration::from_micros(1);
    assert_eq!(grant.clock.lock().remaining(heard), bound);

    let grant_token = token(1).grant_token().to_hex();
    let hold = format!("{grant_token}:17");
    let slot_key = format!("ns:sem:{{{}}}:2", KeyId::of("pool").to_hex());
    for call in [
        core.release_call(grant.lease).unwrap(),
        core.renew_call(grant.lease, LEASE_MS).unwrap(),
    ] {
        assert!(packed(&call).contains(&hold), "{call:?}");
        assert!(packed(&call).contains(&slot_key), "{call:?}");
    }
    let extension = core.take_due_extensions(heard + secs(1));
    assert_eq!(extension.len(), 1);
    assert_eq!(extension[0].0.kind, ScriptKind::Renew);
    assert!(packed(&extension[0].0).contains(&hold));

    // The next waiter tries at once, under a grant token of its own.
    let events = drain(&mut core);
    assert!(events.contains(&CoreEvent::Wake(next)), "{events:?}");
    let call = attempt(&mut core, heard, next);
    assert_eq!(call.kind, ScriptKind::SemAcquire);
    assert!(!packed(&call).contains(&grant_token), "{call:?}");
    assert!(packed(&call).contains(&token(2).grant_token().to_hex()));

    // Registered under that token, it names it for its own grant beside
    // the hold: no slot holds it.
    core.handle_acquire_reply(heard, next, registered(5_000));
    drain(&mut core);
    let check = attempt(&mut core, heard + secs(2), next);
    let named = packed(&check)
        .split("\r\n")
        .filter(|w| *w == token(2).grant_token().to_hex())
        .count();
    assert_eq!(named, 2, "its own grant, and the token it registers with");
    assert!(core.take_deregistrations().is_empty());
}

/// A slot's grant whose notice does not name the slot (an older version's
/// release) cannot be placed: the head claims it.
#[test]
fn a_slots_grant_without_its_slot_is_claimed() {
    let now = t0();
    let mut core = handover_core(now, Channel::Standalone);
    let (id, _) = registered_permit_waiters(&mut core, now);
    core.handle_notice(now + ms(2), our_slot_grant(None).as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(id)]);
    let claim = attempt(&mut core, now + ms(2), id);
    assert_eq!(claim.kind, ScriptKind::SemAcquire);
    assert_eq!(core.next_extension_due(), None);
}

/// A slot's grant a waiter of the line was given (fence 17 on slot 2) and
/// a failover brought back is not taken again.
#[test]
fn a_slots_grant_given_before_is_not_taken_again() {
    let now = t0();
    let mut core = handover_core(now, Channel::Standalone);
    let (id, next) = registered_permit_waiters(&mut core, now);
    core.handle_notice(now + ms(2), our_slot_grant(Some(2)).as_bytes());
    drain(&mut core);
    let grant = granted(&mut core, now + ms(2), id);
    core.handle_release_reply(grant.lease, ok(Value::Int(3)))
        .unwrap();
    attempt(&mut core, now + ms(3), next);
    core.handle_acquire_reply(now + ms(3), next, registered(5_000));
    drain(&mut core);
    core.handle_notice(now + ms(4), our_slot_grant(Some(2)).as_bytes());
    assert_eq!(drain(&mut core), vec![CoreEvent::Wake(next)]);
    let claim = attempt(&mut core, now + ms(4), next);
    assert_eq!(claim.kind, ScriptKind::SemAcquire, "claimed, not taken");
}

/// The waiters of a line leave (they gave up): the registration's release
/// by its grant token is on its way. Meanwhile the holder's release granted
/// the lease to that registration, and new waiters of the key, in a new
/// line, hear the notice before their head's first attempt. The grant is
/// the old line's: taken, it would be ended under the new head by that
/// release. It is not taken; the head attempts.
#[test]
fn a_grant_to_a_gone_lines_token_is_not_taken() {
    for sem in [false, true] {
        let now = t0();
        let mut core = handover_core(now, Channel::Standalone);
        let (id, next) = if sem {
            registered_permit_waiters(&mut core, now)
        } else {
            registered_waiters(&mut core, now)
        };
        for w in [next, id] {
            core.cancel(w);
            let _ = core.poll_waiter(now + ms(1), w);
        }
        let leaving = core.take_deregistrations();
        let old = token(1).grant_token();
        let by_old = |c: &ScriptCall| packed(c).contains(&old.to_hex());
        assert!(
            leaving
                .iter()
                .any(|c| c.kind != ScriptKind::Deregister && by_old(c)),
            "{leaving:?}"
        );
        let key = if sem { "pool" } else { "k" };
        let want = if sem {
            Want::Permit { permits: 3 }
        } else {
            Want::Lock
        };
        let mut join = |i| {
            core.acquire_for(now + ms(1), key, want, token(i), waiting(secs(10)))
                .expect("the acquire is admitted")
        };
        let (head, _behind) = (join(3), join(4));
        drain(&mut core);
        let notice = if sem {
            our_slot_grant(Some(2))
        } else {
            grant_to_owner(Some(SERVER_MS + 1), 1)
        };
        core.handle_notice(now + ms(2), notice.as_bytes());
        drain(&mut core);
        assert_eq!(core.next_extension_due(), None, "sem: {sem}");
        let step = core.poll_waiter(now + ms(2), head);
        assert!(
            matches!(step, WaiterStep::Attempt(_)),
            "sem {sem}: {step:?}"
        );
    }
}

/// An attempt sent before the subscription is confirmed does not register
/// (the locker would not hear its grant): its busy reply leaves the line
/// unregistered, even when the subscription was confirmed meanwhile, so
/// the next attempt registers. Counted as registered, the line once took
/// the free key with its next attempt, which keeps a registration rather
/// than making one, and its next waiter then waited for a grant that
/// could not come until its safety poll.
#[test]
fn a_busy_reply_to_an_attempt_that_did_not_register_leaves_the_line_unregistered() {
    let now = t0();
    let mut s = settings(128, 10_000);
    s.handover = Some(HandoverSettings {
        reg: REG,
        reg_ms: 3_000,
        claim_ms: 100,
    });
    let mut core = Core::new(s, now);
    let id = join(&mut core, now, "k", 1, secs(10));
    join(&mut core, now, "k", 2, secs(10));
    attempt(&mut core, now, id);
    core.subscription_wanted_by_waiter();
    core.handle_subscribed();
    core.handle_acquire_reply(now, id, busy(5_000));
    drain(&mut core);
    let line = core.lines.get(&line()).expect("the line");
    assert!(!line.is_registered(), "the attempt did not register");
}
