//! Property checks behind the fuzz targets in `fuzz/` (feature `fuzzing`,
//! hidden: not part of the API, no stability promise).
//!
//! Each `check_*` function decodes arbitrary bytes into a structured case,
//! runs it through the sans-IO core and **panics when a property is
//! violated**. The fuzz targets are one-line calls of these functions, and
//! `tests/fuzz_corpus.rs` replays the committed seed corpus
//! (`fuzz/corpus/<target>/*`) through the same checks on stable Rust.
//!
//! - [`check_replies`]: classification of acquire, release and renew replies
//!   from arbitrary `redis::Value` trees is total, agrees with a reference
//!   written from SPEC §3, accepted fences are positive and round-trip, the
//!   error text never depends on string contents, and the core turns each
//!   reply into the matching outcome, orphan or lease state.
//! - [`check_names`]: key and namespace validation never panics and gives
//!   `INVALID_KEY` / `INVALID_CONFIG` exactly for invalid input; valid keys
//!   give `<ns>:lock:{<64 lowercase hex>}` names whose hash tag is the key's
//!   SHA-256, and the acquire command carries exactly those names.
//! - [`check_line`]: the per-key FIFO lines and wait decisions under
//!   arbitrary operation sequences and instants, checked after every step
//!   against a small reference model: no waiter lost, duplicated or
//!   reordered, one attempt per key, no wait past a deadline, no head left
//!   without a wake-up, and every token tracked, orphaned or released once.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use redis::{PushKind, Value, VerbatimFormat};
use sha2::{Digest, Sha256};

use crate::config::{Config, ResolvedOptions};
use crate::core::core::{
    AttemptSummary, Core, CoreEvent, CoreSettings, LeaseId, SubscriberStep, WaiterStep,
    RESUBSCRIBE_AFTER, SUBSCRIPTION_LINGER,
};
use crate::core::lease::RenewResult;
use crate::core::line::WaiterId;
use crate::core::names::{validate_key, Channel, KeyId, LockNames, OwnerToken};
use crate::core::outcome::{Fence, ReleaseOutcome, RenewOutcome};
use crate::core::script::{
    classify_acquire, classify_release, classify_renew, AcquireReply, ScriptCall, ScriptKind,
};
use crate::error::{Error, Failure, Operation};

// ----- input decoding --------------------------------------------------------

/// The fuzz bytes, read front to back; reads past the end give zeros, so
/// every input decodes to some case.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte();
        }
        u64::from_le_bytes(b)
    }

    /// A number below `n` (at most 256).
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
}

/// The element of `items` that `pick` selects, if there is any.
fn choose<T: Copy>(pick: u8, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[usize::from(pick) % items.len()])
}

/// The one reading of the clock per case; every other instant is derived
/// from it by adding durations (the core never reads the clock itself).
#[allow(clippy::disallowed_methods)]
fn clock_reading() -> Instant {
    Instant::now()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lowercase_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The packed form of a command, parsed back into its arguments.
fn command_args(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    match redis::parse_redis_value(&cmd.get_packed_command()) {
        Ok(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::BulkString(b) => b,
                other => panic!("a packed command holds bulk strings, not {other:?}"),
            })
            .collect(),
        other => panic!("a packed command parses as an array, not {other:?}"),
    }
}

/// Whether `call` is a release of exactly `token`.
fn releases(call: &ScriptCall, token: OwnerToken) -> bool {
    call.kind == ScriptKind::Release
        && command_args(&call.evalsha()).get(4) == Some(&token.to_hex().into_bytes())
}

// ----- replies ---------------------------------------------------------------

const MAX_DEPTH: usize = 4;
/// Reply triples decoded per input.
const MAX_TRIPLES: usize = 8;

/// Decodes one `redis::Value` tree (at most `MAX_DEPTH` levels deep).
fn value(input: &mut Input<'_>, depth: usize) -> Value {
    let nested = depth < MAX_DEPTH;
    match input.byte() % 18 {
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
        _ => Value::Nil,
    }
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

/// What SPEC §3 says an acquire reply means.
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

/// The reference classification of an acquire reply, from SPEC §3:
/// *acquired(fence)* for a positive decimal string that fits `u64`,
/// *busy(remaining)* for an integer ≥ -2, *busy(unknown)* for nil, anything
/// else unexpected.
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
        _ => SpecAcquire::Unexpected,
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
    assert_eq!(
        ScriptKind::Acquire.grants(value),
        matches!(acquire, Ok(AcquireReply::Acquired(_)))
    );

    let release = classify_release(value);
    let expected = spec_int(value).map(|n| match n {
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
    assert!(!ScriptKind::Release.grants(value));

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

fn fuzz_config() -> Config {
    Config::new("fuzz")
}

fn new_core(config: &Config, now: Instant) -> Core {
    Core::new(CoreSettings::new(config, Channel::Standalone), now)
}

fn options(wait: Duration, lease_ms: u64) -> ResolvedOptions {
    ResolvedOptions { wait, lease_ms }
}

#[track_caller]
fn expect_attempt(core: &mut Core, now: Instant, id: WaiterId) -> ScriptCall {
    match core.poll_waiter(now, id) {
        WaiterStep::Attempt(call) => call,
        other => panic!("expected an attempt, got {other:?}"),
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
                grant.clock.remaining(t1),
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
        (Ok(AcquireReply::Busy(expected)), WaiterStep::Done(Err(Error::Busy { remaining }))) => {
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
    let mut clock = grant.clock;

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
/// When classification panics, disagrees with SPEC §3, accepts a fence
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

// ----- names -----------------------------------------------------------------

/// Characters that matter to names: braces (hash tags), separators, non-ASCII.
const NAME_CHARS: [char; 12] = [
    'a', 'z', '0', ':', '{', '}', '-', ' ', 'é', '€', '\u{0}', '/',
];

fn text(input: &mut Input<'_>, max: usize) -> String {
    let len = input.below(max + 1);
    if input.byte() & 1 == 1 {
        String::from_utf8_lossy(input.bytes(len)).into_owned()
    } else {
        (0..len)
            .map(|_| NAME_CHARS[input.below(NAME_CHARS.len())])
            .collect()
    }
}

/// The Redis Cluster hash tag of a name: between the first `{` and the
/// next `}`, if non-empty; otherwise the whole name.
fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{') {
        if let Some(len) = name[open + 1..].find('}') {
            if len > 0 {
                return &name[open + 1..open + 1 + len];
            }
        }
    }
    name
}

/// `s` with every character but braces replaced by `x` of the same length.
fn masked_text(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '{' | '}' => c.to_string(),
            c => "x".repeat(c.len_utf8()),
        })
        .collect()
}

/// Key and namespace validation and name building.
///
/// # Panics
///
/// When validation panics or disagrees with SPEC §2, an error message
/// depends on the key's or namespace's characters, or a valid key's names,
/// hash tags, channel or acquire command are not the ones SPEC §2 gives.
pub fn check_names(data: &[u8]) {
    let mut input = Input::new(data);
    let namespace = text(&mut input, 24);
    let key = match input.byte() % 8 {
        // Long keys around the limits.
        0 => "k".repeat(usize::from(input.u16()) % 2100),
        _ => text(&mut input, 48),
    };
    let max_key_bytes = match input.byte() % 4 {
        0 => 1024,
        _ => input.below(64),
    };
    let raw_hex = {
        let n = input.below(72);
        input.bytes(n).to_vec()
    };

    // Namespace (and the max_key_bytes option).
    let config = Config::new(namespace.clone()).max_key_bytes(max_key_bytes);
    let config_ok = !namespace.is_empty() && !namespace.contains(['{', '}']) && max_key_bytes >= 1;
    match config.validate() {
        Ok(()) => assert!(
            config_ok,
            "namespace {namespace:?}, max {max_key_bytes} accepted"
        ),
        Err(e) => {
            assert!(!config_ok, "namespace {namespace:?} refused: {e:?}");
            assert_eq!(e.code(), "INVALID_CONFIG");
            let other = Config::new(masked_text(&namespace))
                .max_key_bytes(max_key_bytes)
                .validate()
                .expect_err("masking keeps braces and emptiness");
            assert_eq!(
                e.to_string(),
                other.to_string(),
                "the message hides the namespace"
            );
        }
    }

    // Key.
    let key_ok = !key.is_empty() && key.len() <= max_key_bytes;
    match validate_key(&key, max_key_bytes) {
        Ok(()) => assert!(
            key_ok,
            "key of {} bytes accepted (max {max_key_bytes})",
            key.len()
        ),
        Err(e) => {
            assert!(!key_ok, "key {key:?} refused: {e:?}");
            assert_eq!(e.code(), "INVALID_KEY");
            let other = validate_key(&"x".repeat(key.len()), max_key_bytes)
                .expect_err("same length, same verdict");
            assert_eq!(
                e.to_string(),
                other.to_string(),
                "the message hides the key"
            );
            assert_eq!(
                format!("{e:?}"),
                format!("{other:?}"),
                "Debug hides the key"
            );
        }
    }

    // Names of the key under a valid namespace.
    let id = KeyId::of(&key);
    let sha = lowercase_hex(&Sha256::digest(key.as_bytes()));
    assert_eq!(sha.len(), 64);
    assert_eq!(id.to_hex(), sha);
    assert_eq!(KeyId::from_hex(sha.as_bytes()), Some(id));
    if config_ok {
        let names = LockNames::new(&namespace, id);
        assert_eq!(names.lock, format!("{namespace}:lock:{{{sha}}}"));
        assert_eq!(names.fence, format!("{namespace}:lock-fence:{{{sha}}}"));
        assert_eq!(
            hash_tag(&names.lock),
            sha,
            "the lock's hash tag is the key's sha"
        );
        assert_eq!(
            hash_tag(&names.fence),
            sha,
            "the counter shares the lock's slot"
        );
        let sharded = Channel::Sharded.name(&namespace, id);
        assert_eq!(sharded, format!("{namespace}:lock-released:{{{sha}}}"));
        assert_eq!(
            hash_tag(&sharded),
            sha,
            "the sharded channel shares the slot"
        );
        assert_eq!(
            Channel::Standalone.name(&namespace, id),
            format!("{namespace}:lock-released")
        );
        assert!(
            !format!("{names:?}").contains(&sha),
            "Debug hides the names"
        );

        // Through the core: the acquire carries exactly these names.
        let now = clock_reading();
        let mut core = new_core(&config, now);
        let token = OwnerToken::from_bytes([7; 16]);
        match core.acquire(now, &key, token, options(Duration::ZERO, 1000)) {
            Ok(waiter) => {
                assert!(key_ok);
                let call = expect_attempt(&mut core, now, waiter);
                let args = command_args(&call.evalsha());
                assert_eq!(args[0], b"EVALSHA");
                assert_eq!(args[1], ScriptKind::Acquire.sha1().as_bytes());
                assert_eq!(args[2], b"2");
                assert_eq!(args[3], names.lock.as_bytes());
                assert_eq!(args[4], names.fence.as_bytes());
                assert_eq!(args[5], token.to_hex().as_bytes());
                assert_eq!(args[6], b"1000");
            }
            Err(e) => {
                assert!(!key_ok, "core refused a valid key: {e:?}");
                assert_eq!(e.code(), "INVALID_KEY");
                assert_eq!(core.counts().waiters, 0);
            }
        }
    }

    // Notification payloads: any bytes parse or not, never panic.
    let parsed = KeyId::from_hex(&raw_hex);
    let well_formed = raw_hex.len() == 64
        && raw_hex
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
    assert_eq!(parsed.is_some(), well_formed, "{raw_hex:?}");
    if let Some(parsed) = parsed {
        assert_eq!(parsed.to_hex().as_bytes(), raw_hex.as_slice());
    }

    // Owner tokens: 32 lowercase hex digits, hidden from Debug.
    let mut bytes = [0u8; 16];
    for b in &mut bytes {
        *b = input.byte();
    }
    let token = OwnerToken::from_bytes(bytes);
    assert_eq!(token.to_hex(), lowercase_hex(&bytes));
    assert!(!format!("{token:?}").contains(&token.to_hex()));
}

// ----- the line --------------------------------------------------------------

const KEYS: [&str; 3] = ["alpha", "beta", "gamma"];
const MAX_WAITERS: usize = 8;
const MAX_LEASES: usize = 5;
const LEASE_MS: u64 = 10_000;
/// Operations per case: enough for long lines, short enough for speed.
const MAX_OPS: usize = 400;

#[derive(Debug, Clone, Copy)]
enum Reply {
    Acquired,
    Busy(i64),
    BusyUnknown,
    TimedOut,
    ServerError,
    NotSent,
    Unexpected,
}

fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "t"))
}

fn server_error_reply() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Extension, "OOM", "x".to_string()))
}

impl Reply {
    fn decode(input: &mut Input<'_>) -> Self {
        match input.byte() % 16 {
            0..=3 => Reply::Acquired,
            4..=7 => Reply::Busy(i64::from(input.u16() % 3002) - 2),
            8 => Reply::Busy(0),
            9 => Reply::Busy((input.u64() >> 1) as i64),
            10 => Reply::BusyUnknown,
            11 => Reply::TimedOut,
            12 => Reply::ServerError,
            13 => Reply::NotSent,
            14 => Reply::Unexpected,
            _ => Reply::Busy(i64::from(input.u16())),
        }
    }

    fn value(self, fence: u64) -> Result<Value, Failure> {
        match self {
            Reply::Acquired => Ok(Value::BulkString(fence.to_string().into_bytes())),
            Reply::Busy(n) => Ok(Value::Int(n)),
            Reply::BusyUnknown => Ok(Value::Nil),
            Reply::TimedOut => Err(Failure::Sent(timed_out())),
            Reply::ServerError => Err(Failure::Sent(server_error_reply())),
            Reply::NotSent => Err(Failure::NotSent(timed_out())),
            Reply::Unexpected => Ok(Value::Okay),
        }
    }

    /// `Some(holder's remaining time)` for a busy reply.
    fn busy_remaining(self) -> Option<Option<Duration>> {
        match self {
            Reply::Busy(n) if n >= 0 => Some(Some(ms(n.unsigned_abs()))),
            Reply::Busy(_) | Reply::BusyUnknown => Some(None),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum OutcomeReply {
    Int(i64),
    TimedOut,
    ServerError,
    NotSent,
}

impl OutcomeReply {
    fn decode(input: &mut Input<'_>) -> Self {
        match input.byte() % 8 {
            n @ 0..=4 => OutcomeReply::Int(i64::from(n)),
            5 => OutcomeReply::TimedOut,
            6 => OutcomeReply::ServerError,
            _ => OutcomeReply::NotSent,
        }
    }

    fn value(self) -> Result<Value, Failure> {
        match self {
            OutcomeReply::Int(n) => Ok(Value::Int(n)),
            OutcomeReply::TimedOut => Err(Failure::Sent(timed_out())),
            OutcomeReply::ServerError => Err(Failure::Sent(server_error_reply())),
            OutcomeReply::NotSent => Err(Failure::NotSent(timed_out())),
        }
    }

    /// The error code a failed release or renew must report.
    fn failure_code(self) -> Option<&'static str> {
        match self {
            OutcomeReply::Int(0..=2) => None,
            OutcomeReply::Int(_) | OutcomeReply::TimedOut => Some("OUTCOME_UNKNOWN"),
            OutcomeReply::ServerError | OutcomeReply::NotSent => Some("PROVIDER_FAILED"),
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Join {
        key: usize,
        wait: Duration,
    },
    /// An attempt in flight is answered; with `defer`, its waiter polls
    /// only later (its thread ran between the two calls into the core).
    Reply {
        pick: u8,
        reply: Reply,
        defer: bool,
    },
    /// A waiter whose reply was handled polls at last.
    Take(u8),
    Advance(Duration),
    Cancel(u8),
    Abandon {
        pick: u8,
        late: Reply,
    },
    Notify(usize),
    NotifyGarbage(Vec<u8>),
    Subscribed,
    SubscriptionFailed,
    SubscriberLost,
    SubscriberStopped,
    PollSubscriber,
    GiveUp(u8),
    Release {
        pick: u8,
        reply: OutcomeReply,
    },
    Renew {
        pick: u8,
        reply: OutcomeReply,
    },
    AbandonLease(u8),
    TakeOrphans,
    Shutdown,
    /// Shutdown's cleanup (only once shutting down).
    Cleanup,
}

impl Op {
    fn decode(input: &mut Input<'_>) -> Self {
        // Weights out of 256, most for the operations that move lines.
        match input.byte() {
            0..=47 => Op::Join {
                key: input.below(KEYS.len()),
                wait: match input.byte() % 8 {
                    0 => Duration::ZERO,
                    1 => Duration::MAX,
                    _ => ms(1 + u64::from(input.u16()) % 3000),
                },
            },
            48..=95 => Op::Reply {
                pick: input.byte(),
                reply: Reply::decode(input),
                defer: input.byte() % 10 < 3,
            },
            96..=105 => Op::Take(input.byte()),
            106..=141 => Op::Advance(match input.byte() % 8 {
                0 => ms(900 + u64::from(input.u16()) % 6100),
                1 => Duration::from_nanos(u64::from(input.u16())),
                _ => ms(u64::from(input.u16()) % 400),
            }),
            142..=151 => Op::Cancel(input.byte()),
            152..=158 => Op::Abandon {
                pick: input.byte(),
                late: Reply::decode(input),
            },
            159..=173 => Op::Notify(input.below(KEYS.len())),
            174..=177 => Op::NotifyGarbage(garbage(input)),
            178..=184 => Op::Subscribed,
            185..=188 => Op::SubscriptionFailed,
            189..=192 => Op::SubscriberLost,
            193..=195 => Op::SubscriberStopped,
            196..=202 => Op::PollSubscriber,
            203..=209 => Op::GiveUp(input.byte()),
            210..=227 => Op::Release {
                pick: input.byte(),
                reply: OutcomeReply::decode(input),
            },
            228..=238 => Op::Renew {
                pick: input.byte(),
                reply: OutcomeReply::decode(input),
            },
            239..=241 => Op::AbandonLease(input.byte()),
            242..=245 => Op::TakeOrphans,
            246..=247 => Op::Shutdown,
            _ => Op::Cleanup,
        }
    }
}

/// Notification payloads that name no waiting key: random bytes, random
/// hex, and near misses of the keys' hex (uppercase, short, long).
fn garbage(input: &mut Input<'_>) -> Vec<u8> {
    let hex = |k: usize| KeyId::of(KEYS[k]).to_hex();
    match input.byte() % 5 {
        0 => {
            let n = input.below(70);
            input.bytes(n).to_vec()
        }
        1 => (0..64)
            .map(|_| b"0123456789abcdef"[usize::from(input.byte() % 16)])
            .collect(),
        2 => hex(input.below(KEYS.len())).to_uppercase().into_bytes(),
        3 => hex(input.below(KEYS.len())).as_bytes()[1..].to_vec(),
        _ => format!("{}0", hex(input.below(KEYS.len()))).into_bytes(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    Off,
    Starting,
    Active,
    Unavailable,
}

/// What a waiter's stored outcome must be when its waiter takes it.
#[derive(Debug, Clone, Copy)]
enum Settled {
    Granted {
        fence: u64,
        submitted: Instant,
        /// Shutdown's cleanup released its token before it was taken.
        cleaned: bool,
    },
    ShuttingDown,
    TooManyLeases,
    OutcomeUnknown,
    UnexpectedReply,
    ProviderFailed,
    Busy(Option<Duration>),
}

/// One waiter as the model (and the front end driving it) sees it.
#[derive(Debug)]
struct ModelWaiter {
    seq: u64,
    key: usize,
    token: OwnerToken,
    started: Instant,
    deadline: Option<Instant>,
    try_once: bool,
    cancelled: bool,
    /// The submission instant of the attempt in flight.
    in_flight: Option<Instant>,
    /// The timer set from the last `Wait`.
    timer: Option<Instant>,
    /// The outcome the core stored for it, not taken yet.
    settled: Option<Settled>,
}

/// The core under test, a front end's driving loop around it, and the
/// reference model the core is checked against.
struct Harness {
    core: Core,
    now: Instant,
    poll: Duration,
    notify: Duration,
    waiters: BTreeMap<WaiterId, ModelWaiter>,
    lines: [VecDeque<WaiterId>; 3],
    /// A notification (or a reason to check again) arrived while the key's
    /// head had its attempt in flight.
    notified: [bool; 3],
    holder_until: [Option<Instant>; 3],
    /// The arrival number of the last waiter granted each key.
    last_granted: [Option<u64>; 3],
    held: Vec<(LeaseId, OwnerToken)>,
    /// Leases whose tokens shutdown's cleanup released.
    cleaned: Vec<LeaseId>,
    orphans: Vec<OwnerToken>,
    sub: Sub,
    subscriber_running: bool,
    idle_since: Option<Instant>,
    shutting_down: bool,
    next_seq: u64,
    next_fence: u64,
    joined: usize,
    /// How each waiter that ended, ended.
    ended: HashMap<u64, &'static str>,
}

fn token_of(seq: u64) -> OwnerToken {
    let mut bytes = [0x5a; 16];
    bytes[..8].copy_from_slice(&seq.to_be_bytes());
    OwnerToken::from_bytes(bytes)
}

/// Each token is released by exactly one of the calls, and nothing else is.
#[track_caller]
fn assert_releases_exactly(calls: &[ScriptCall], tokens: &[OwnerToken]) {
    assert_eq!(calls.len(), tokens.len(), "one release per token");
    for t in tokens {
        assert_eq!(calls.iter().filter(|c| releases(c, *t)).count(), 1);
    }
}

fn drain(core: &mut Core) -> Vec<CoreEvent> {
    std::iter::from_fn(|| core.poll_event()).collect()
}

impl Harness {
    fn new(poll: Duration, notify: Duration) -> Self {
        let now = clock_reading();
        let config = fuzz_config()
            .poll_interval(poll)
            .notify_poll_interval(notify)
            .max_waiters(MAX_WAITERS)
            .max_tracked_leases(MAX_LEASES);
        Harness {
            core: new_core(&config, now),
            now,
            poll,
            notify,
            waiters: BTreeMap::new(),
            lines: Default::default(),
            notified: [false; 3],
            holder_until: [None; 3],
            last_granted: [None; 3],
            held: Vec::new(),
            cleaned: Vec::new(),
            orphans: Vec::new(),
            sub: Sub::Off,
            subscriber_running: false,
            idle_since: Some(now),
            shutting_down: false,
            next_seq: 0,
            next_fence: 1,
            joined: 0,
            ended: HashMap::new(),
        }
    }

    fn safety(&self) -> Duration {
        if self.sub == Sub::Active {
            self.notify
        } else {
            self.poll
        }
    }

    fn ids_where(&self, f: impl Fn(&ModelWaiter) -> bool) -> Vec<WaiterId> {
        self.waiters
            .iter()
            .filter(|(_, w)| f(w))
            .map(|(id, _)| *id)
            .collect()
    }

    fn in_flight(&self) -> Vec<WaiterId> {
        self.ids_where(|w| w.in_flight.is_some())
    }

    fn is_settled(&self, id: &WaiterId) -> bool {
        self.waiters.get(id).is_some_and(|w| w.settled.is_some())
    }

    fn key_in_flight(&self, key: usize) -> bool {
        self.waiters
            .values()
            .any(|w| w.key == key && w.in_flight.is_some())
    }

    /// Tokens of grants the core tracks that their waiters did not take yet.
    fn untaken_grants(&self) -> Vec<OwnerToken> {
        self.waiters
            .values()
            .filter(|w| matches!(w.settled, Some(Settled::Granted { cleaned: false, .. })))
            .map(|w| w.token)
            .collect()
    }

    /// Leases the core tracks, taken by their waiters or not.
    fn tracked(&self) -> usize {
        self.held.len() + self.untaken_grants().len()
    }

    /// The head of `key`'s line when it is neither talking to Redis nor
    /// holding an untaken outcome: it is backing off.
    fn backing_off_head(&self, key: usize) -> Option<WaiterId> {
        self.lines[key].front().copied().filter(|h| {
            let w = &self.waiters[h];
            w.in_flight.is_none() && w.settled.is_none()
        })
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Join { key, wait } => self.join(*key, *wait),
            Op::Reply { pick, reply, defer } => {
                if let Some(id) = choose(*pick, &self.in_flight()) {
                    self.reply_to(id, *reply, *defer);
                    self.settle();
                }
            }
            Op::Take(pick) => {
                let settled = self.ids_where(|w| w.settled.is_some());
                if let Some(id) = choose(*pick, &settled) {
                    self.take(id);
                    self.settle();
                }
            }
            Op::Advance(d) => {
                self.now += *d;
                self.fire_timers();
            }
            Op::Cancel(pick) => self.cancel(*pick),
            Op::Abandon { pick, late } => self.abandon(*pick, *late),
            Op::Notify(key) => self.notify(*key),
            Op::NotifyGarbage(payload) => self.notify_garbage(payload),
            Op::Subscribed => self.subscribed(),
            Op::SubscriptionFailed => self.subscription_failed(),
            Op::SubscriberLost => {
                if self.subscriber_running {
                    self.core.handle_subscriber_lost(self.now);
                    if self.sub == Sub::Active {
                        self.sub = Sub::Starting;
                    }
                    self.settle();
                }
            }
            Op::SubscriberStopped => {
                if self.subscriber_running {
                    // Like a confirmation, it makes every head check again.
                    for key in 0..KEYS.len() {
                        if self.key_in_flight(key) {
                            self.notified[key] = true;
                        }
                    }
                    self.core.handle_subscriber_stopped();
                    self.sub = Sub::Off;
                    self.subscriber_running = false;
                    self.settle();
                }
            }
            Op::PollSubscriber => self.poll_subscriber(),
            Op::GiveUp(pick) => self.give_up(*pick),
            Op::Release { pick, reply } => self.release(*pick, *reply),
            Op::Renew { pick, reply } => self.renew(*pick, *reply),
            Op::AbandonLease(pick) => {
                if !self.held.is_empty() {
                    let i = usize::from(*pick) % self.held.len();
                    let (lease, token) = self.held.swap_remove(i);
                    self.core.abandon_lease(lease);
                    self.orphans.push(token);
                    assert!(self.core.release_call(lease).is_err());
                }
            }
            Op::TakeOrphans => {
                let calls = self.core.take_orphans();
                assert_releases_exactly(&calls, &self.orphans);
                self.orphans.clear();
            }
            Op::Shutdown => {
                self.core.begin_shutdown();
                self.shutting_down = true;
                self.settle();
                assert!(
                    self.waiters
                        .values()
                        .all(|w| w.in_flight.is_some() || w.settled.is_some()),
                    "shutdown ends every wait"
                );
            }
            Op::Cleanup => {
                if self.shutting_down {
                    self.cleanup();
                }
            }
        }
        self.check();
    }

    // ----- the front end's loop -------------------------------------------

    /// Handles every queued event: a woken waiter is polled.
    fn settle(&mut self) {
        while let Some(event) = self.core.poll_event() {
            self.handle(event);
        }
    }

    fn handle(&mut self, event: CoreEvent) {
        match event {
            // A waiter between its reply and its next poll is not
            // listening; it polls when its thread resumes.
            CoreEvent::Wake(id) if self.is_settled(&id) => {}
            CoreEvent::Wake(id) => self.poll(id),
            CoreEvent::StartSubscriber => panic!("only a busy reply starts the subscriber"),
        }
    }

    /// Polls every waiter whose timer is due, earliest first.
    fn fire_timers(&mut self) {
        loop {
            let due = self
                .waiters
                .iter()
                .filter_map(|(id, w)| w.timer.filter(|t| *t <= self.now).map(|t| (t, *id)))
                .min();
            let Some((_, id)) = due else {
                break;
            };
            self.poll(id);
            self.settle();
        }
    }

    /// Polls a waiter that has no stored outcome and checks the step
    /// against the model.
    fn poll(&mut self, id: WaiterId) {
        let now = self.now;
        let Some(w) = self.waiters.get(&id) else {
            let before = self.core.counts();
            let step = self.core.poll_waiter(now, id);
            assert!(
                matches!(step, WaiterStep::Done(Err(Error::Cancelled))),
                "a stale id: {step:?}"
            );
            assert_eq!(self.core.counts(), before, "a stale id changes nothing");
            return;
        };
        assert!(w.settled.is_none(), "a settled waiter is taken, not polled");
        let (key, started, in_flight) = (w.key, w.started, w.in_flight.is_some());
        let expected_end = if w.cancelled {
            Some("CANCELLED")
        } else if self.shutting_down {
            Some("SHUTTING_DOWN")
        } else if !w.try_once && w.deadline.is_some_and(|d| now >= d) {
            Some("WAIT_TIMEOUT")
        } else {
            None
        };
        let step = self.core.poll_waiter(now, id);
        if in_flight {
            assert!(
                matches!(step, WaiterStep::Wait(None)),
                "an attempt in flight waits for its reply: {step:?}"
            );
            return;
        }
        match step {
            WaiterStep::Done(Ok(grant)) => panic!("a grant without an acquired reply: {grant:?}"),
            WaiterStep::Done(Err(e)) => {
                assert_eq!(Some(e.code()), expected_end, "{e:?}");
                if let Error::WaitTimeout { waited, remaining } = &e {
                    assert_eq!(*waited, now - started);
                    let holder = self.holder_until[key].map(|u| u.saturating_duration_since(now));
                    assert_eq!(*remaining, holder);
                }
                self.finish(id, e.code());
            }
            WaiterStep::Attempt(call) => {
                assert_eq!(expected_end, None);
                self.attempted(id, &call);
            }
            WaiterStep::Wait(at) => {
                assert_eq!(expected_end, None);
                self.waited(id, at);
            }
        }
    }

    fn attempted(&mut self, id: WaiterId, call: &ScriptCall) {
        let w = &self.waiters[&id];
        let key = w.key;
        assert_eq!(call.kind, ScriptKind::Acquire);
        let args = command_args(&call.evalsha());
        assert_eq!(
            args.get(5),
            Some(&w.token.to_hex().into_bytes()),
            "its own token"
        );
        let names = LockNames::new("fuzz", KeyId::of(KEYS[key]));
        assert_eq!(args.get(3), Some(&names.lock.into_bytes()), "its own key");
        assert_eq!(self.lines[key].front(), Some(&id), "only the head attempts");
        assert!(!self.key_in_flight(key), "one attempt per key at a time");
        let now = self.now;
        let w = self.waiters.get_mut(&id).expect("present");
        w.in_flight = Some(now);
        w.timer = None;
        self.notified[key] = false;
    }

    fn waited(&mut self, id: WaiterId, at: Option<Instant>) {
        let (now, safety) = (self.now, self.safety());
        let w = &self.waiters[&id];
        if let Some(at) = at {
            assert!(at > now, "a wait that ends in the past would spin");
        }
        if let Some(deadline) = w.deadline {
            let at = at.expect("a bounded waiter gets a wake-up time");
            assert!(at <= deadline, "no wait beyond the waiter's deadline");
        }
        if self.lines[w.key].front() == Some(&id) {
            let at = at.expect("a backing-off head has a retry time");
            assert!(
                at <= now + safety,
                "the head retries within the safety interval"
            );
        } else {
            assert_eq!(at, w.deadline, "behind the head: wait for the deadline");
        }
        self.waiters.get_mut(&id).expect("present").timer = at;
    }

    fn finish(&mut self, id: WaiterId, how: &'static str) {
        let w = self
            .waiters
            .remove(&id)
            .expect("finishing a present waiter");
        assert!(w.in_flight.is_none() && w.settled.is_none());
        assert!(
            self.ended.insert(w.seq, how).is_none(),
            "a waiter ended twice"
        );
        let line = &mut self.lines[w.key];
        let pos = line.iter().position(|x| *x == id).expect("in its line");
        line.remove(pos);
        if line.is_empty() {
            self.holder_until[w.key] = None;
            self.notified[w.key] = false;
        } else if pos == 0 && how == "GRANTED" {
            // The locker itself holds the key now: the next head backs off
            // as behind a busy reply that reported the whole lease.
            self.holder_until[w.key] = self.now.checked_add(ms(LEASE_MS));
            self.notified[w.key] = false;
        }
        if self.waiters.is_empty() {
            self.idle_since = Some(self.now);
        }
    }

    // ----- operations -----------------------------------------------------

    fn join(&mut self, key: usize, wait: Duration) {
        let now = self.now;
        let seq = self.next_seq;
        self.next_seq += 1;
        let token = token_of(seq);
        let try_once = wait.is_zero();
        let result = self
            .core
            .acquire(now, KEYS[key], token, options(wait, LEASE_MS));
        if self.shutting_down {
            assert!(matches!(result, Err(Error::ShuttingDown)), "{result:?}");
            return;
        }
        if self.waiters.len() >= MAX_WAITERS {
            assert!(
                matches!(result, Err(Error::QueueFull { limit: MAX_WAITERS })),
                "{result:?}"
            );
            return;
        }
        if self.tracked() >= MAX_LEASES {
            assert!(
                matches!(result, Err(Error::TooManyLeases { limit: MAX_LEASES })),
                "{result:?}"
            );
            return;
        }
        if try_once && !self.lines[key].is_empty() {
            let holder = self.holder_until[key].map(|u| u.saturating_duration_since(now));
            match result {
                Err(Error::Busy { remaining }) => assert_eq!(remaining, holder),
                other => panic!("a try-once never joins a line: {other:?}"),
            }
            return;
        }
        let id = result.expect("admitted");
        assert!(
            !self.waiters.contains_key(&id),
            "a live id handed out twice"
        );
        if self.waiters.is_empty() {
            let idle_long = self
                .idle_since
                .is_some_and(|t| now.saturating_duration_since(t) >= RESUBSCRIBE_AFTER);
            if self.sub == Sub::Unavailable && idle_long {
                self.sub = Sub::Off;
            }
            self.idle_since = None;
        }
        self.joined += 1;
        self.waiters.insert(
            id,
            ModelWaiter {
                seq,
                key,
                token,
                started: now,
                deadline: now.checked_add(wait),
                try_once,
                cancelled: false,
                in_flight: None,
                timer: None,
                settled: None,
            },
        );
        self.lines[key].push_back(id);
        let first = self.lines[key].len() == 1;
        self.poll(id);
        self.settle();
        if first {
            assert!(
                self.waiters[&id].in_flight.is_some(),
                "a waiter joining an empty line tries at once"
            );
        }
    }

    /// Delivers the reply of `id`'s attempt. A busy reply of a waiting
    /// acquire is followed by its poll at once; every other reply stores an
    /// outcome, which the waiter takes now or, with `defer`, later.
    fn reply_to(&mut self, id: WaiterId, reply: Reply, defer: bool) {
        let now = self.now;
        let fence = self.next_fence;
        self.next_fence += 1;
        let safety = self.safety();
        let w = self.waiters.get_mut(&id).expect("present");
        let submitted = w.in_flight.take().expect("an attempt in flight");
        let (key, seq, token, try_once) = (w.key, w.seq, w.token, w.try_once);
        let busy = reply.busy_remaining();
        let expect_start =
            busy.is_some() && !try_once && self.sub == Sub::Off && !self.shutting_down;

        let summary = self.core.handle_acquire_reply(now, id, reply.value(fence));
        let expected_summary = match reply {
            Reply::Acquired => AttemptSummary::Acquired,
            Reply::Busy(_) | Reply::BusyUnknown => AttemptSummary::Busy,
            _ => AttemptSummary::Failed,
        };
        assert_eq!(summary, expected_summary);

        let events = drain(&mut self.core);
        if expect_start {
            assert_eq!(events, vec![CoreEvent::StartSubscriber]);
            assert!(!self.subscriber_running);
            self.sub = Sub::Starting;
            self.subscriber_running = true;
        } else {
            assert!(events.is_empty(), "{events:?}");
        }
        let notified = std::mem::take(&mut self.notified[key]);
        self.holder_until[key] = busy.flatten().and_then(|r| now.checked_add(r));

        let settled = match (busy, reply) {
            (Some(remaining), _) if try_once => Settled::Busy(remaining),
            (Some(remaining), _) => {
                self.poll_after_busy(id, remaining, notified, safety);
                return;
            }
            (None, Reply::Acquired) if self.shutting_down => {
                self.orphans.push(token);
                Settled::ShuttingDown
            }
            (None, Reply::Acquired) if self.tracked() >= MAX_LEASES => {
                self.orphans.push(token);
                Settled::TooManyLeases
            }
            (None, Reply::Acquired) => {
                assert_eq!(self.lines[key].front(), Some(&id));
                assert!(
                    self.last_granted[key] < Some(seq),
                    "grants in arrival order"
                );
                self.last_granted[key] = Some(seq);
                Settled::Granted {
                    fence,
                    submitted,
                    cleaned: false,
                }
            }
            (None, Reply::TimedOut) => {
                self.orphans.push(token);
                Settled::OutcomeUnknown
            }
            (None, Reply::Unexpected) => {
                self.orphans.push(token);
                Settled::UnexpectedReply
            }
            (None, Reply::ServerError | Reply::NotSent) => Settled::ProviderFailed,
            (None, Reply::Busy(_) | Reply::BusyUnknown) => unreachable!("busy"),
        };
        self.waiters.get_mut(&id).expect("present").settled = Some(settled);
        if !defer {
            self.take(id);
        }
    }

    /// The poll right after a busy reply of a waiting acquire.
    fn poll_after_busy(
        &mut self,
        id: WaiterId,
        remaining: Option<Duration>,
        notified: bool,
        safety: Duration,
    ) {
        let now = self.now;
        let w = &self.waiters[&id];
        let (started, deadline) = (w.started, w.deadline);
        let expected_end = if w.cancelled {
            Some("CANCELLED")
        } else if self.shutting_down {
            Some("SHUTTING_DOWN")
        } else if deadline.is_some_and(|d| now >= d) {
            Some("WAIT_TIMEOUT")
        } else {
            None
        };
        let retry = now + remaining.map_or(safety, |r| r.min(safety));
        match self.core.poll_waiter(now, id) {
            WaiterStep::Done(Err(e)) => {
                assert_eq!(Some(e.code()), expected_end, "{e:?}");
                if let Error::WaitTimeout {
                    waited,
                    remaining: r,
                } = &e
                {
                    assert_eq!(*waited, now - started);
                    assert_eq!(
                        *r,
                        remaining.and_then(|d| now.checked_add(d)).map(|u| u - now)
                    );
                }
                self.finish(id, e.code());
            }
            WaiterStep::Attempt(call) => {
                assert_eq!(expected_end, None);
                assert!(
                    notified || retry <= now,
                    "a busy reply retries at once only after a notification"
                );
                self.attempted(id, &call);
            }
            WaiterStep::Wait(at) => {
                assert_eq!(expected_end, None);
                assert!(
                    !notified,
                    "a notification during the attempt makes a busy reply retry at once"
                );
                assert_eq!(at, Some(deadline.map_or(retry, |d| d.min(retry))));
                self.waited(id, at);
            }
            WaiterStep::Done(Ok(grant)) => panic!("a busy reply granted {grant:?}"),
        }
    }

    /// The waiter takes the outcome the core stored for it.
    fn take(&mut self, id: WaiterId) {
        let now = self.now;
        let w = self.waiters.get_mut(&id).expect("present");
        let settled = w.settled.take().expect("an outcome to take");
        let token = w.token;
        let step = self.core.poll_waiter(now, id);
        let WaiterStep::Done(result) = step else {
            panic!("a stored outcome is taken at once, not {step:?}");
        };
        let how = match (settled, result) {
            (
                Settled::Granted {
                    fence,
                    submitted,
                    cleaned: false,
                },
                Ok(grant),
            ) => {
                assert_eq!(grant.fence, Fence::new(fence));
                assert_eq!(
                    grant.clock.remaining(now),
                    ms(LEASE_MS).saturating_sub(now - submitted),
                    "the lease counts from the submission"
                );
                self.held.push((grant.lease, token));
                "GRANTED"
            }
            (Settled::Granted { cleaned: true, .. }, Err(Error::ShuttingDown))
            | (Settled::ShuttingDown, Err(Error::ShuttingDown)) => "SHUTTING_DOWN",
            (Settled::TooManyLeases, Err(Error::TooManyLeases { limit: MAX_LEASES })) => {
                "QUEUE_FULL"
            }
            (
                Settled::OutcomeUnknown,
                Err(Error::OutcomeUnknown {
                    op: Operation::Acquire,
                    ..
                }),
            )
            | (
                Settled::UnexpectedReply,
                Err(Error::UnexpectedReply {
                    op: Operation::Acquire,
                    ..
                }),
            ) => "OUTCOME_UNKNOWN",
            (
                Settled::ProviderFailed,
                Err(Error::ProviderFailed {
                    op: Operation::Acquire,
                    ..
                }),
            ) => "PROVIDER_FAILED",
            (Settled::Busy(expected), Err(Error::Busy { remaining })) => {
                assert_eq!(remaining, expected);
                "LOCK_BUSY"
            }
            (settled, result) => panic!("expected {settled:?}, got {result:?}"),
        };
        self.finish(id, how);
    }

    fn cancel(&mut self, pick: u8) {
        let Some(id) = choose(pick, &self.ids_where(|_| true)) else {
            return;
        };
        self.core.cancel(id);
        let w = self.waiters.get_mut(&id).expect("present");
        w.cancelled = true;
        let (seq, busy) = (w.seq, w.in_flight.is_some() || w.settled.is_some());
        self.settle();
        if !busy {
            assert_eq!(self.ended.get(&seq), Some(&"CANCELLED"));
        }
    }

    fn abandon(&mut self, pick: u8, late: Reply) {
        let Some(id) = choose(pick, &self.ids_where(|_| true)) else {
            return;
        };
        let w = self.waiters.get_mut(&id).expect("present");
        let was_in_flight = w.in_flight.take().is_some();
        let settled = w.settled.take();
        let (key, token) = (w.key, w.token);
        self.core.abandon(self.now, id);
        if was_in_flight {
            // The attempt may still acquire: its token is released.
            self.orphans.push(token);
            self.notified[key] = false;
        }
        if let Some(Settled::Granted { .. }) = settled {
            // A grant nobody will take is released by token.
            self.orphans.push(token);
        }
        self.finish(id, "ABANDONED");
        // The abandoned attempt's late reply and a stale cancel change
        // nothing but the events already queued (the next head's wake-up).
        let events = drain(&mut self.core);
        let before = self.core.counts();
        let fence = self.next_fence;
        self.next_fence += 1;
        let summary = self
            .core
            .handle_acquire_reply(self.now, id, late.value(fence));
        assert_eq!(summary, AttemptSummary::Ignored);
        self.core.cancel(id);
        assert_eq!(self.core.counts(), before);
        assert!(
            self.core.poll_event().is_none(),
            "a stale id queues nothing"
        );
        for event in events {
            self.handle(event);
        }
        self.settle();
    }

    fn notify(&mut self, key: usize) {
        let head = self.lines[key].front().copied();
        let backing_off = self.backing_off_head(key);
        if self.key_in_flight(key) {
            self.notified[key] = true;
        }
        self.core
            .handle_notification(KeyId::of(KEYS[key]).to_hex().as_bytes());
        let events = drain(&mut self.core);
        match (backing_off, head) {
            (Some(h), _) => assert_eq!(events, vec![CoreEvent::Wake(h)]),
            // A head holding an untaken outcome may be woken; it polls anyway.
            (None, Some(h)) if self.is_settled(&h) => {
                assert!(events.is_empty() || events == vec![CoreEvent::Wake(h)]);
            }
            (None, _) => assert!(events.is_empty(), "{events:?}"),
        }
        for event in events {
            self.handle(event);
        }
        self.settle();
        if let Some(h) = backing_off {
            assert!(
                self.waiters[&h].in_flight.is_some(),
                "the head retries at once"
            );
        }
    }

    fn notify_garbage(&mut self, payload: &[u8]) {
        if KEYS
            .iter()
            .any(|k| KeyId::of(k).to_hex().as_bytes() == payload)
        {
            return;
        }
        let before = self.core.counts();
        self.core.handle_notification(payload);
        assert!(self.core.poll_event().is_none(), "garbage wakes nobody");
        assert_eq!(self.core.counts(), before);
    }

    fn subscribed(&mut self) {
        if !self.subscriber_running {
            return;
        }
        let backing_off: BTreeSet<WaiterId> = (0..KEYS.len())
            .filter_map(|k| self.backing_off_head(k))
            .collect();
        let settled_heads: BTreeSet<WaiterId> = self
            .lines
            .iter()
            .filter_map(|l| l.front().copied())
            .filter(|h| self.is_settled(h))
            .collect();
        for key in 0..KEYS.len() {
            if self.key_in_flight(key) {
                self.notified[key] = true;
            }
        }
        self.core.handle_subscribed();
        if self.sub == Sub::Starting {
            self.sub = Sub::Active;
        }
        let events = drain(&mut self.core);
        let woken: BTreeSet<WaiterId> = events
            .iter()
            .map(|e| match e {
                CoreEvent::Wake(id) => *id,
                CoreEvent::StartSubscriber => panic!("subscribed, not starting"),
            })
            .collect();
        assert_eq!(woken.len(), events.len(), "each head woken once");
        assert!(
            woken.is_superset(&backing_off),
            "every backing-off head checks once more"
        );
        assert!(woken.is_subset(&backing_off.union(&settled_heads).copied().collect()));
        for event in events {
            self.handle(event);
        }
        self.settle();
        for h in backing_off {
            assert!(
                self.waiters[&h].in_flight.is_some(),
                "the head checks once more"
            );
        }
    }

    fn subscription_failed(&mut self) {
        if !self.subscriber_running {
            return;
        }
        assert!(
            self.core.handle_subscription_failed(self.now),
            "the first failure in a row is reported"
        );
        assert!(
            !self.core.handle_subscription_failed(self.now),
            "a repeated failure is not"
        );
        self.sub = Sub::Unavailable;
        self.settle();
        assert_eq!(self.core.poll_subscriber(self.now), SubscriberStep::Stop);
        self.subscriber_running = false;
    }

    fn poll_subscriber(&mut self) {
        if !self.subscriber_running {
            return;
        }
        let step = self.core.poll_subscriber(self.now);
        let expected = if self.shutting_down {
            SubscriberStep::Stop
        } else {
            match self.idle_since {
                None => SubscriberStep::Listen(None),
                Some(t) if self.now < t + SUBSCRIPTION_LINGER => {
                    SubscriberStep::Listen(Some(t + SUBSCRIPTION_LINGER))
                }
                Some(_) => SubscriberStep::Stop,
            }
        };
        assert_eq!(step, expected);
        if step == SubscriberStep::Stop {
            self.sub = Sub::Off;
            self.subscriber_running = false;
        }
    }

    fn give_up(&mut self, pick: u8) {
        let candidates = self.ids_where(|w| {
            !w.try_once && w.in_flight.is_none() && w.settled.is_none() && w.deadline.is_some()
        });
        let Some(id) = choose(pick, &candidates) else {
            return;
        };
        let w = &self.waiters[&id];
        let (seq, deadline) = (w.seq, w.deadline.expect("bounded"));
        self.now = self.now.max(deadline);
        self.fire_timers();
        assert_eq!(self.ended.get(&seq), Some(&"WAIT_TIMEOUT"));
    }

    fn release(&mut self, pick: u8, reply: OutcomeReply) {
        if self.held.is_empty() {
            return;
        }
        let i = usize::from(pick) % self.held.len();
        let (lease, token) = self.held[i];
        let call = self.core.release_call(lease).expect("a tracked lease");
        assert!(releases(&call, token));
        let result = self.core.handle_release_reply(lease, reply.value());
        match (reply.failure_code(), result) {
            (None, Ok(outcome)) => {
                let OutcomeReply::Int(n) = reply else {
                    unreachable!("a settled reply is an integer")
                };
                let expected = [
                    ReleaseOutcome::Expired,
                    ReleaseOutcome::Released,
                    ReleaseOutcome::Conflict,
                ][n.unsigned_abs() as usize];
                assert_eq!(outcome, expected);
                self.held.swap_remove(i);
                assert!(self.core.release_call(lease).is_err(), "no longer tracked");
            }
            (Some(code), Err(e)) => {
                assert_eq!(e.code(), code, "{e:?}");
                assert!(self.core.release_call(lease).is_ok(), "still tracked");
            }
            (expected, result) => panic!("{reply:?}: expected {expected:?}, got {result:?}"),
        }
    }

    fn renew(&mut self, pick: u8, reply: OutcomeReply) {
        if self.held.is_empty() {
            return;
        }
        let (lease, token) = self.held[usize::from(pick) % self.held.len()];
        let call = self
            .core
            .renew_call(lease, LEASE_MS)
            .expect("a tracked lease");
        assert_eq!(call.kind, ScriptKind::Renew);
        assert_eq!(
            command_args(&call.evalsha()).get(4),
            Some(&token.to_hex().into_bytes())
        );
        let (result, outcome) = self.core.handle_renew_reply(lease, reply.value());
        match (reply.failure_code(), outcome) {
            (None, Ok(o)) => assert_eq!(result, RenewResult::Outcome(o)),
            (Some("PROVIDER_FAILED"), Err(e)) => {
                assert_eq!(e.code(), "PROVIDER_FAILED");
                assert_eq!(result, RenewResult::NotApplied);
            }
            (Some(code), Err(e)) => {
                assert_eq!(e.code(), code);
                assert_eq!(result, RenewResult::Unknown);
            }
            (expected, outcome) => panic!("{reply:?}: expected {expected:?}, got {outcome:?}"),
        }
        assert!(
            self.core.release_call(lease).is_ok(),
            "a renew never untracks"
        );
    }

    /// Shutdown's cleanup: one release per tracked lease (taken by its
    /// waiter or not) and per orphan, after which the core forgets them.
    fn cleanup(&mut self) {
        let calls = self.core.take_cleanup();
        let mut tokens: Vec<OwnerToken> = self.held.iter().map(|(_, t)| *t).collect();
        tokens.extend(self.untaken_grants());
        tokens.extend(self.orphans.iter().copied());
        assert_releases_exactly(&calls, &tokens);
        self.orphans.clear();
        self.cleaned
            .extend(self.held.drain(..).map(|(lease, _)| lease));
        for w in self.waiters.values_mut() {
            if let Some(Settled::Granted { cleaned, .. }) = &mut w.settled {
                *cleaned = true;
            }
        }
        for lease in &self.cleaned {
            assert!(matches!(
                self.core.release_call(*lease),
                Err(Error::ShuttingDown)
            ));
        }
    }

    /// Shuts down, lets every waiter take its outcome, answers every
    /// attempt still in flight, and checks that nobody was stranded and
    /// every token is released exactly once.
    fn finish_all(&mut self, cleanup_before_takes: bool) {
        self.core.begin_shutdown();
        self.shutting_down = true;
        self.settle();
        if cleanup_before_takes {
            self.cleanup();
        }
        for id in self.ids_where(|w| w.settled.is_some()) {
            self.take(id);
            self.settle();
        }
        for id in self.in_flight() {
            self.reply_to(id, Reply::Acquired, false);
            self.settle();
        }
        self.check();
        assert!(self.waiters.is_empty(), "shutdown strands nobody");
        assert_eq!(self.ended.len(), self.joined, "every waiter ended once");
        self.cleanup();
        let counts = self.core.counts();
        assert_eq!(
            (
                counts.waiters,
                counts.tracked_leases,
                counts.attempts_in_flight,
                counts.orphans
            ),
            (0, 0, 0, 0)
        );
        if self.subscriber_running {
            assert_eq!(self.core.poll_subscriber(self.now), SubscriberStep::Stop);
        }
    }

    // ----- invariants -----------------------------------------------------

    /// Checks the core against the model after a step. Every waiter that
    /// neither talks to Redis nor holds an untaken outcome is polled once
    /// more (spurious polls are harmless): it must wait until exactly the
    /// timer it was given, which no head may lack.
    fn check(&mut self) {
        assert!(self.core.poll_event().is_none(), "every event was handled");
        let counts = self.core.counts();
        assert_eq!(counts.waiters, self.waiters.len());
        assert_eq!(counts.attempts_in_flight, self.in_flight().len());
        assert_eq!(counts.tracked_leases, self.tracked());
        assert_eq!(counts.orphans, self.orphans.len());
        assert_eq!(self.core.is_subscribed(), self.sub == Sub::Active);
        assert_eq!(self.core.is_shutting_down(), self.shutting_down);
        assert_eq!(
            self.subscriber_running,
            matches!(self.sub, Sub::Starting | Sub::Active)
        );
        assert_eq!(
            self.joined,
            self.ended.len() + self.waiters.len(),
            "no waiter lost or duplicated"
        );
        let in_lines: usize = self.lines.iter().map(VecDeque::len).sum();
        assert_eq!(in_lines, self.waiters.len());

        let (now, safety) = (self.now, self.safety());
        for k in 0..KEYS.len() {
            let line: Vec<WaiterId> = self.lines[k].iter().copied().collect();
            for (pos, id) in line.iter().enumerate() {
                let w = &self.waiters[id];
                assert_eq!(w.key, k);
                if let Some(t) = w.timer {
                    assert!(t > now, "a due timer was left unfired");
                }
                if pos > 0 {
                    assert!(w.in_flight.is_none(), "only the head attempts");
                    assert!(w.settled.is_none(), "only the head gets an outcome");
                    assert_eq!(w.timer, w.deadline, "behind the head: its deadline");
                } else if w.in_flight.is_none() && w.settled.is_none() {
                    let t = w.timer.expect("a backing-off head has a timer");
                    assert!(t <= now + safety, "retry within the safety interval");
                }
                if w.in_flight.is_some() || w.settled.is_some() {
                    continue;
                }
                let timer = w.timer;
                match self.core.poll_waiter(now, *id) {
                    WaiterStep::Wait(at) => assert_eq!(at, timer, "a stale or missing wake-up"),
                    other => panic!("stranded waiter (position {pos}): {other:?}"),
                }
            }
        }
        assert!(
            self.core.poll_event().is_none(),
            "a spurious poll queues nothing"
        );
    }
}

/// The FIFO lines and wait decisions under an arbitrary operation sequence.
///
/// # Panics
///
/// When the core and the reference model disagree: a waiter lost,
/// duplicated or served out of order, two attempts on one key, a wait past
/// a deadline or beyond the safety interval, a head left without a wake-up,
/// a token neither tracked, orphaned nor released exactly once.
pub fn check_line(data: &[u8]) {
    let mut input = Input::new(data);
    // Safety intervals (poll, notify), including notify < poll.
    let (poll, notify) = match input.byte() % 4 {
        0 => (ms(100), ms(30)),
        1 => (ms(1), ms(1)),
        _ => (ms(25), ms(250)),
    };
    let cleanup_before_takes = input.byte() & 1 == 1;
    let mut harness = Harness::new(poll, notify);
    let mut ops = 0;
    while !input.is_empty() && ops < MAX_OPS {
        let op = Op::decode(&mut input);
        harness.apply(&op);
        ops += 1;
    }
    harness.finish_all(cleanup_before_takes);
}
