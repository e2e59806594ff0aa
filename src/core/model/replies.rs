//! `check_replies`: reply classification against docs/PROTOCOL.md §3, §5.2, §5.3, alone and through a core.

use std::time::Duration;

use redis::{PushKind, Value, VerbatimFormat};

use crate::core::core::WaiterStep;
use crate::core::lease::RenewResult;
use crate::core::names::OwnerToken;
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::core::script::{
    classify_acquire, classify_permit, classify_release, classify_renew, AcquireReply, PermitReply,
    ScriptKind,
};
use crate::error::{Error, Failure, Operation};

use super::{
    clock_reading, command_args, expect_attempt, fuzz_config, ms, new_core, options, releases,
    Input,
};

const MAX_DEPTH: usize = 4;
/// Reply triples decoded per input.
const MAX_TRIPLES: usize = 8;

/// Decodes one `redis::Value` tree (at most `MAX_DEPTH` levels deep).
fn value(input: &mut Input<'_>, depth: usize) -> Value {
    let nested = depth < MAX_DEPTH;
    match input.byte() % 19 {
        0 => Value::Nil,
        1 => Value::Okay,
        2 => Value::Int(input.u64() as i64),
        3 => Value::Int(i64::from(input.byte() % 8) - 4),
        4 => {
            let n = input.below(40);
            Value::BulkString(input.bytes(n).to_vec())
        }
        5 => {
            let n = input.below(24);
            Value::BulkString((0..n).map(|_| b'0' + input.byte() % 10).collect())
        }
        6 => Value::BulkString(number_text(input)),
        7 => {
            let n = input.below(24);
            Value::SimpleString(String::from_utf8_lossy(input.bytes(n)).into_owned())
        }
        8 => Value::Double(f64::from_bits(input.u64())),
        9 => Value::Boolean(input.byte() & 1 == 1),
        10 => {
            let format = match input.byte() % 3 {
                0 => VerbatimFormat::Text,
                1 => VerbatimFormat::Markdown,
                _ => VerbatimFormat::Unknown("xyz".into()),
            };
            let n = input.below(24);
            let text = String::from_utf8_lossy(input.bytes(n)).into_owned();
            Value::VerbatimString { format, text }
        }
        11 => server_error(input),
        12 if nested => Value::Array(children(input, depth)),
        13 if nested => Value::Set(children(input, depth)),
        14 if nested => {
            let n = input.below(4);
            Value::Map(
                (0..n)
                    .map(|_| (value(input, depth + 1), value(input, depth + 1)))
                    .collect(),
            )
        }
        15 if nested => {
            let kind = match input.byte() % 4 {
                0 => PushKind::Message,
                1 => PushKind::Subscribe,
                2 => PushKind::Disconnection,
                _ => PushKind::Other("other".into()),
            };
            Value::Push {
                kind,
                data: children(input, depth),
            }
        }
        16 if nested => {
            let data = Box::new(value(input, depth + 1));
            let n = input.below(3);
            let attributes = (0..n)
                .map(|_| (value(input, depth + 1), value(input, depth + 1)))
                .collect();
            Value::Attribute { data, attributes }
        }
        17 => {
            // RESP bytes straight from the input, through the redis
            // crate's own parser (most do not parse: then nil).
            let n = input.below(64);
            redis::parse_redis_value(input.bytes(n)).unwrap_or(Value::Nil)
        }
        18 => permit_shaped(input, depth),
        _ => Value::Nil,
    }
}

/// A semaphore reply's shapes (`[slot, fence]`, `['permits', n]`) with
/// members drawn near and past their bounds.
fn permit_shaped(input: &mut Input<'_>, depth: usize) -> Value {
    let int = match input.byte() % 4 {
        0 => i64::from(input.byte()) * 8 - 16,
        1 => 1024,
        2 => input.u64() as i64,
        _ => i64::from(input.byte() % 8),
    };
    let first = match input.byte() % 3 {
        0 => Value::BulkString(b"permits".to_vec()),
        1 if depth < MAX_DEPTH => value(input, depth + 1),
        _ => Value::Int(int),
    };
    let second = match input.byte() % 3 {
        0 => Value::BulkString(number_text(input)),
        1 if depth < MAX_DEPTH => value(input, depth + 1),
        _ => Value::Int(int),
    };
    let mut items = vec![first, second];
    if input.byte().is_multiple_of(8) {
        items.push(Value::Nil);
    }
    Value::Array(items)
}

fn children(input: &mut Input<'_>, depth: usize) -> Vec<Value> {
    let n = input.below(5);
    (0..n).map(|_| value(input, depth + 1)).collect()
}

/// Texts around a `u64`: canonical, zero-padded, signed, padded with a
/// space, overflowing, in float notation, zero.
fn number_text(input: &mut Input<'_>) -> Vec<u8> {
    let n = input.u64();
    let text = match input.byte() % 8 {
        0 | 1 => n.to_string(),
        2 => format!("0{n}"),
        3 => format!("+{n}"),
        4 => format!("-{n}"),
        5 => format!("{n} "),
        6 => (u128::from(n) + u128::from(u64::MAX) + 1).to_string(),
        _ => format!("{:e}", n as f64),
    };
    text.into_bytes()
}

/// A RESP error reply (`-CODE detail`), parsed by the redis crate.
fn server_error(input: &mut Input<'_>) -> Value {
    const CODES: [&str; 5] = ["ERR", "NOSCRIPT", "WRONGTYPE", "NOPERM", "OOM"];
    let code = CODES[input.below(CODES.len())];
    let n = input.below(16);
    let detail: String = input
        .bytes(n)
        .iter()
        .map(|b| char::from(b' ' + b % 94))
        .collect();
    redis::parse_redis_value(format!("-{code} {detail}\r\n").as_bytes()).unwrap_or(Value::Nil)
}

/// What docs/PROTOCOL.md §3 says an acquire reply means.
#[derive(Debug)]
enum SpecAcquire {
    Is(AcquireReply),
    Unexpected,
    /// A decimal string with leading zeros: never sent by the script, so
    /// either reading is allowed, as long as an accepted one is its value.
    ZeroPadded(Option<u64>),
}

/// The value of an all-digit string, `None` when it does not fit `u64`.
fn decimal(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The reference classification of an acquire reply, from docs/PROTOCOL.md §3:
/// *acquired(fence)* for a positive decimal string that fits `u64`,
/// *busy(remaining)* for an integer ≥ -2, *busy(unknown)* for nil, either
/// with a positive server time as `[busy, ms]` (registered), anything else
/// unexpected.
fn spec_acquire(value: &Value) -> SpecAcquire {
    match value {
        Value::BulkString(b) if !b.is_empty() && b.iter().all(u8::is_ascii_digit) => {
            if b.len() > 1 && b[0] == b'0' {
                return SpecAcquire::ZeroPadded(decimal(b));
            }
            match decimal(b) {
                Some(n) if n > 0 => SpecAcquire::Is(AcquireReply::Acquired(Fence::new(n))),
                _ => SpecAcquire::Unexpected,
            }
        }
        Value::Int(n) if *n >= 0 => SpecAcquire::Is(AcquireReply::Busy(Some(ms(n.unsigned_abs())))),
        Value::Int(-1 | -2) | Value::Nil => SpecAcquire::Is(AcquireReply::Busy(None)),
        // Busy, registered at a positive server time (ms).
        Value::Array(items) => match items.as_slice() {
            [busy @ Value::Int(_), Value::Int(at)] if *at > 0 => match spec_acquire(busy) {
                SpecAcquire::Is(AcquireReply::Busy(remaining)) => {
                    SpecAcquire::Is(AcquireReply::Registered(remaining, at.unsigned_abs()))
                }
                _ => SpecAcquire::Unexpected,
            },
            _ => SpecAcquire::Unexpected,
        },
        _ => SpecAcquire::Unexpected,
    }
}

/// The reference classification of a semaphore acquire reply (docs/PROTOCOL.md §5.2):
/// `[slot, fence]` with a slot in 0..1024 and a fence read as for a lock,
/// and `1` after them when the next waiter waits for its grant;
/// `['permits', n]` with n in 1..=1024; busy as for a lock (registered:
/// `[ms, server ms]`).
fn spec_permit(value: &Value) -> Option<PermitReply> {
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(slot @ 0..=1023), fence @ Value::BulkString(_), rest @ ..]
                if rest.is_empty() || rest == [Value::Int(1)] =>
            {
                match spec_acquire(fence) {
                    SpecAcquire::Is(AcquireReply::Acquired(fence)) => Some(PermitReply::Acquired {
                        slot: *slot as u32,
                        fence,
                        next_waits: rest.len() == 1,
                    }),
                    _ => None,
                }
            }
            [Value::BulkString(tag), Value::Int(n @ 1..=1024)] if tag.as_slice() == b"permits" => {
                Some(PermitReply::OtherCount(*n as u32))
            }
            [Value::Int(_), Value::Int(_)] => match spec_acquire(value) {
                SpecAcquire::Is(AcquireReply::Registered(remaining, at)) => {
                    Some(PermitReply::Busy(remaining, Some(at)))
                }
                _ => None,
            },
            _ => None,
        },
        Value::Int(_) | Value::Nil => match spec_acquire(value) {
            SpecAcquire::Is(AcquireReply::Busy(remaining)) => {
                Some(PermitReply::Busy(remaining, None))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The reference reading of a release or renew reply: 1, 0 or 2.
fn spec_int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n @ 0..=2) => Some(*n),
        _ => None,
    }
}

/// The same tree with every string byte replaced by `#` (lengths kept).
fn masked(value: &Value) -> Value {
    let hide = |n: usize| "#".repeat(n);
    match value {
        Value::BulkString(b) => Value::BulkString(vec![b'#'; b.len()]),
        Value::SimpleString(s) => Value::SimpleString(hide(s.len())),
        Value::VerbatimString { format, text } => Value::VerbatimString {
            format: format.clone(),
            text: hide(text.len()),
        },
        Value::Array(items) => Value::Array(items.iter().map(masked).collect()),
        Value::Set(items) => Value::Set(items.iter().map(masked).collect()),
        Value::Map(pairs) => {
            Value::Map(pairs.iter().map(|(k, v)| (masked(k), masked(v))).collect())
        }
        Value::Push { kind, data } => Value::Push {
            kind: kind.clone(),
            data: data.iter().map(masked).collect(),
        },
        Value::Attribute { data, attributes } => Value::Attribute {
            data: Box::new(masked(data)),
            attributes: attributes
                .iter()
                .map(|(k, v)| (masked(k), masked(v)))
                .collect(),
        },
        other => other.clone(),
    }
}

/// Checks the pure classification of one reply against the reference.
fn check_classification(value: &Value) {
    let acquire = classify_acquire(value);
    match (spec_acquire(value), &acquire) {
        (SpecAcquire::Is(expected), Ok(got)) => assert_eq!(*got, expected, "{value:?}"),
        (SpecAcquire::Unexpected, Err(_)) => {}
        (SpecAcquire::ZeroPadded(_), Err(_)) => {}
        (SpecAcquire::ZeroPadded(Some(n)), Ok(AcquireReply::Acquired(f))) if f.get() == n => {}
        (spec, got) => panic!("acquire reply {value:?}: expected {spec:?}, got {got:?}"),
    }
    if let Ok(AcquireReply::Acquired(fence)) = acquire {
        assert!(fence.get() > 0, "an accepted fence is positive: {value:?}");
        let text = fence.to_string();
        assert_eq!(text.parse::<u64>(), Ok(fence.get()), "Display round-trips");
        assert_eq!(
            classify_acquire(&Value::BulkString(text.into_bytes())),
            Ok(AcquireReply::Acquired(fence)),
            "an accepted fence's decimal form is accepted as the same fence"
        );
    }
    // A read-write lease's read (epoch) and write (fence) replies read as
    // a lock's acquire.
    for kind in [ScriptKind::Acquire, ScriptKind::RwRead, ScriptKind::RwWrite] {
        assert_eq!(
            kind.grants(value),
            matches!(acquire, Ok(AcquireReply::Acquired(_))),
            "{kind:?}"
        );
    }

    let permit = classify_permit(value);
    let padded_fence = matches!(value, Value::Array(items)
        if matches!(items.get(1).map(spec_acquire), Some(SpecAcquire::ZeroPadded(_))));
    if !padded_fence {
        assert_eq!(
            permit.clone().ok(),
            spec_permit(value),
            "permit reply {value:?}"
        );
    }
    assert_eq!(
        ScriptKind::SemAcquire.grants(value),
        matches!(permit, Ok(PermitReply::Acquired { .. }))
    );
    if let Err(e) = &permit {
        let other = classify_permit(&masked(value)).expect_err("masked: never a grant");
        assert_eq!(e.to_string(), other.to_string(), "{value:?}");
    }

    let release = classify_release(value);
    // A release also answers 3: released and handed over.
    let handed_over = matches!(value, Value::Int(3)).then_some(1);
    let expected = spec_int(value).or(handed_over).map(|n| match n {
        1 => ReleaseOutcome::Released,
        0 => ReleaseOutcome::Expired,
        _ => ReleaseOutcome::Conflict,
    });
    assert_eq!(release.clone().ok(), expected, "release reply {value:?}");
    let renew = classify_renew(value);
    let expected = spec_int(value).map(|n| match n {
        1 => RenewOutcome::Renewed,
        0 => RenewOutcome::Expired,
        _ => RenewOutcome::Conflict,
    });
    assert_eq!(renew.clone().ok(), expected, "renew reply {value:?}");
    assert_eq!(
        ScriptKind::Renew.grants(value),
        renew == Ok(RenewOutcome::Renewed)
    );
    assert_eq!(
        ScriptKind::RwReadRenew.grants(value),
        renew == Ok(RenewOutcome::Renewed)
    );
    for kind in [
        ScriptKind::Release,
        ScriptKind::SemReleaseAny,
        ScriptKind::RwReadRelease,
    ] {
        assert!(!kind.grants(value), "{kind:?}");
    }

    // The error text names the shape only: it reads the same when every
    // string in the reply (a token, say) is replaced by `#`s.
    let hidden = masked(value);
    if let Err(e) = &acquire {
        let other = classify_acquire(&hidden).expect_err("a masked reply is never a fence");
        assert_eq!(e.to_string(), other.to_string(), "{value:?}");
    }
    if let Err(e) = &release {
        let other = classify_release(&hidden).expect_err("masking keeps integers");
        assert_eq!(e.to_string(), other.to_string(), "{value:?}");
    }
    if let Err(e) = &renew {
        let other = classify_renew(&hidden).expect_err("masking keeps integers");
        assert_eq!(e.to_string(), other.to_string(), "{value:?}");
    }
}

/// Drives three replies through a core: `acquire` answers a single try of
/// one key; `renew` and `release` answer the renew and release of a lease
/// granted on another key.
fn check_through_core(acquire: &Value, renew: &Value, release: &Value) {
    const LEASE_MS: u64 = 10_000;
    let t0 = clock_reading();
    let config = fuzz_config();
    let mut core = new_core(&config, t0);
    let token = OwnerToken::from_bytes([0xa5; 16]);
    let id = core
        .acquire(t0, "key", token, options(Duration::ZERO, LEASE_MS))
        .expect("admitted");
    let call = expect_attempt(&mut core, t0, id);
    assert_eq!(call.kind, ScriptKind::Acquire);
    let t1 = t0 + ms(5);
    core.handle_acquire_reply(t1, id, Ok::<_, Failure>(acquire.clone()));
    let step = core.poll_waiter(t1, id);
    match (classify_acquire(acquire), step) {
        (Ok(AcquireReply::Acquired(fence)), WaiterStep::Done(Ok(grant))) => {
            assert_eq!(grant.fence, fence);
            assert_eq!(
                grant.clock.lock().remaining(t1),
                ms(LEASE_MS) - ms(5),
                "the lease counts from the submission"
            );
            assert_eq!(core.counts().tracked_leases, 1);
            assert!(core.take_orphans().is_empty());
            assert_eq!(
                core.handle_release_reply(grant.lease, Ok::<_, Failure>(Value::Int(1)))
                    .ok(),
                Some(ReleaseOutcome::Released)
            );
        }
        (
            Ok(AcquireReply::Busy(expected) | AcquireReply::Registered(expected, _)),
            WaiterStep::Done(Err(Error::Busy { remaining })),
        ) => {
            assert_eq!(remaining, expected);
            assert!(core.take_orphans().is_empty());
        }
        (
            Err(_),
            WaiterStep::Done(Err(
                e @ Error::UnexpectedReply {
                    op: Operation::Acquire,
                    ..
                },
            )),
        ) => {
            assert_eq!(e.code(), "OUTCOME_UNKNOWN");
            assert!(e.is_outcome_unknown());
            let orphans = core.take_orphans();
            assert_eq!(orphans.len(), 1, "an unknown acquire's token is released");
            assert!(releases(&orphans[0], token));
        }
        (classified, step) => panic!("{acquire:?} classified {classified:?}, core said {step:?}"),
    }
    assert_eq!(core.counts().waiters, 0);
    assert_eq!(core.counts().tracked_leases, 0);

    // A lease on another key, renewed and released with the other replies.
    let token = OwnerToken::from_bytes([0x3c; 16]);
    let id = core
        .acquire(t1, "other", token, options(Duration::ZERO, LEASE_MS))
        .expect("admitted");
    expect_attempt(&mut core, t1, id);
    core.handle_acquire_reply(t1, id, Ok::<_, Failure>(Value::BulkString(b"42".to_vec())));
    let grant = match core.poll_waiter(t1, id) {
        WaiterStep::Done(Ok(grant)) => grant,
        other => panic!("expected a grant, got {other:?}"),
    };
    assert_eq!(grant.fence, Fence::new(42));
    let mut clock = *grant.clock.lock();

    let call = core.renew_call(grant.lease, LEASE_MS).expect("tracked");
    assert_eq!(call.kind, ScriptKind::Renew);
    assert_eq!(
        command_args(&call.evalsha()).get(4),
        Some(&token.to_hex().into_bytes())
    );
    let t2 = t1 + ms(100);
    clock.renew_submitted(t2);
    let (result, outcome) = core.handle_renew_reply(grant.lease, Ok::<_, Failure>(renew.clone()));
    match (classify_renew(renew), &outcome, result) {
        (Ok(o), Ok(got), RenewResult::Outcome(r)) => {
            assert_eq!((o, o), (*got, r));
        }
        (
            Err(_),
            Err(Error::UnexpectedReply {
                op: Operation::Renew,
                ..
            }),
            RenewResult::Unknown,
        ) => {}
        (c, o, r) => panic!("renew {renew:?}: classified {c:?}, outcome {o:?}, result {r:?}"),
    }
    clock.handle_renew(result);
    let t3 = t2 + ms(1);
    if result == RenewResult::Outcome(RenewOutcome::Renewed) {
        assert_eq!(
            clock.remaining(t3),
            ms(LEASE_MS) - ms(1),
            "renewed from its submission"
        );
    } else {
        assert!(!clock.is_valid(t3), "{result:?} ends the lease");
        clock.renew_submitted(t3);
        clock.handle_renew(RenewResult::Outcome(RenewOutcome::Renewed));
        assert!(
            !clock.is_valid(t3),
            "an ended lease never becomes valid again"
        );
        assert_eq!(clock.remaining(t3), Duration::ZERO);
    }

    let call = core
        .release_call(grant.lease)
        .expect("still tracked after a renew");
    assert!(releases(&call, token));
    let outcome = core.handle_release_reply(grant.lease, Ok::<_, Failure>(release.clone()));
    match (classify_release(release), outcome) {
        (Ok(o), Ok(got)) => {
            assert_eq!(o, got);
            assert!(
                core.release_call(grant.lease).is_err(),
                "a settled release stops tracking"
            );
            assert_eq!(core.counts().tracked_leases, 0);
        }
        (
            Err(_),
            Err(Error::UnexpectedReply {
                op: Operation::Release,
                ..
            }),
        ) => {
            assert!(
                core.release_call(grant.lease).is_ok(),
                "an unknown release keeps the token"
            );
            let cleanup = core.take_cleanup();
            assert_eq!(cleanup.len(), 1);
            assert!(releases(&cleanup[0], token));
        }
        (c, o) => panic!("release {release:?}: classified {c:?}, core said {o:?}"),
    }
    clock.handle_release(None);
    assert!(!clock.is_valid(t3));
}

/// Reply classification from arbitrary `redis::Value` trees.
///
/// # Panics
///
/// When classification panics, disagrees with docs/PROTOCOL.md §3, accepts a fence
/// that is zero or does not round-trip, lets string contents into an error
/// message, or the core turns a reply into the wrong outcome, orphan or
/// lease state.
pub fn check_replies(data: &[u8]) {
    let mut input = Input::new(data);
    // A few replies per input keep executions fast; longer inputs only
    // matter as RESP text (below).
    let mut triples = 0;
    while !input.is_empty() && triples < MAX_TRIPLES {
        triples += 1;
        let values = [
            value(&mut input, 0),
            value(&mut input, 0),
            value(&mut input, 0),
        ];
        for v in &values {
            check_classification(v);
        }
        check_through_core(&values[0], &values[1], &values[2]);
    }
    // The whole input as RESP, through the redis crate's parser.
    if let Ok(v) = redis::parse_redis_value(data) {
        check_classification(&v);
    }
}
