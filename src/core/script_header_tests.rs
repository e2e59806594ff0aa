//! Each script's header (`src/scripts/<name>.lua`: `-- KEYS:` and `--
//! ARGV:` lines) against the calls the Rust side builds: a header that
//! names more or fewer keys or arguments than some call sends fails here.
//!
//! A header item is one name; `HANDOVER`, the hand-over's ten arguments;
//! `name...`, one per key of a multi-key call; `name+`, one, or one per
//! key; `{a, b}...`, that group once per key; `[, …]`, an optional tail,
//! which may nest.

use super::election::{
    campaign_call, proclaim_call, read_call, resign_call, ElectNames, LeaderValue, Version,
};
use super::multi::{multi_acquire_call, multi_release_call, MultiHandover};
use super::names::{
    Channel, KeyId, Kind, LineKey, LockNames, OwnerToken, RegId, RwNames, SemNames, Target, Want,
};
use super::outcome::Fence;
use super::script::{AcquireHandover, ScriptCall, ScriptKind};

/// The `KEYS:` or `ARGV:` list of a script file, its continuation lines
/// joined.
fn header(file: &str, label: &str) -> String {
    let path = format!("{}/src/scripts/{file}.lua", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("-- {label}:")));
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("{file}.lua has no {label} line"));
    let mut list = first[format!("-- {label}:").len()..].to_owned();
    for more in lines.take_while(|l| l.starts_with("--   ")) {
        list.push(' ');
        list.push_str(more.trim_start_matches("--").trim());
    }
    list
}

/// The counts a header list allows for a call of `n` keys (1 when the
/// call is not multi-key).
fn allowed(list: &str, n: usize) -> Vec<usize> {
    let list = list.trim();
    if list == "(none)" {
        return vec![0];
    }
    let (head, tail) = match list.find('[') {
        Some(at) => {
            let inner = list[at + 1..].trim_end();
            let inner = inner
                .strip_suffix(']')
                .expect("an optional tail ends the list");
            (
                &list[..at],
                Some(inner.trim_start().trim_start_matches(',')),
            )
        }
        None => (list, None),
    };
    let mut base = vec![0usize];
    for item in top_level_items(head) {
        let counts: Vec<usize> = if item == "HANDOVER" {
            vec![10]
        } else if item.starts_with('{') {
            let group = item.matches(',').count() + 1;
            vec![group * n]
        } else if item.ends_with("...") {
            vec![n]
        } else if item.ends_with('+') {
            vec![1, n]
        } else {
            vec![1]
        };
        base = base
            .iter()
            .flat_map(|b| counts.iter().map(move |c| b + c))
            .collect();
    }
    let mut all = base.clone();
    if let Some(tail) = tail {
        for extra in allowed(tail, n) {
            all.extend(base.iter().map(|b| b + extra));
        }
    }
    all.sort_unstable();
    all.dedup();
    all
}

/// The comma-separated items of `list`, a `{…}` group as one item.
fn top_level_items(list: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (at, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(list[start..at].trim());
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(list[start..].trim());
    items.retain(|i| !i.is_empty());
    items
}

fn check(file: &str, call: &ScriptCall, n: usize) {
    for (label, got) in [("KEYS", call.keys().len()), ("ARGV", call.args().len())] {
        let list = header(file, label);
        let counts = allowed(&list, n);
        assert!(
            counts.contains(&got),
            "{file}.lua's {label} ({list}) allows {counts:?}, the {:?} call sends {got}",
            call.kind
        );
    }
}

fn handover(keep: bool, refresh: bool, register: bool) -> AcquireHandover {
    AcquireHandover {
        entry: "0123".to_owned(),
        register,
        reg_ms: 300,
        claim_ms: 100,
        channel: Channel::Standalone,
        channel_name: "ns:lock-released".to_owned(),
        message: "m".to_owned(),
        grant_token: OwnerToken::from_bytes([2; 16]),
        registered: true,
        floor: Some(Fence::new(17)),
        keep,
        refresh,
    }
}

/// Every shape of call each script is sent with: with and without the
/// hand-over, each way a release is built, one and three keys.
fn calls() -> Vec<(&'static str, ScriptCall, usize)> {
    let (ns, id, token) = ("ns", KeyId::of("k"), OwnerToken::from_bytes([1; 16]));
    let lock = LockNames::new(ns, id);
    let sem = SemNames::new(ns, id);
    let rw = RwNames::new(ns, id);
    let elect = ElectNames::new(ns, id);
    let line = |kind| LineKey { kind, id };
    let chan = Channel::Standalone;
    let release_by = |script, keys, kind| {
        ScriptCall::release(script, keys, line(kind), token.to_hex(), ns, chan)
    };
    let release = |key: &str, kind| release_by(ScriptKind::Release, vec![key.to_owned()], kind);
    let acquire = |want, h| {
        let target = Target::new(ns, want, id);
        ScriptCall::acquire(&target, token, 5000, 0, 300, h).expect("an acquire of its own")
    };
    let mut calls = vec![
        ("acquire", acquire(Want::Lock, None), 1),
        (
            "renew",
            ScriptCall::renew(
                ScriptKind::Renew,
                vec![lock.lock.clone()],
                token.to_hex(),
                5000,
            ),
            1,
        ),
        (
            "deregister",
            ScriptCall::deregister(&lock.queue, "0123".to_owned(), token.to_hex()),
            1,
        ),
        ("release", release(&lock.lock, Kind::Lock), 1),
        (
            "release",
            release(&lock.lock, Kind::Lock).handing_over(lock.fence.clone(), &lock.queue, 0),
            1,
        ),
        (
            "release",
            release(&lock.lock, Kind::Lock)
                .handing_over(lock.fence.clone(), &lock.queue, 0)
                .skipping(Some("0123".to_owned())),
            1,
        ),
        (
            "release",
            release(&format!("{}0", sem.slot_prefix), Kind::Semaphore)
                .handing_over(format!("{}0", sem.fence_prefix), &sem.queue, 0)
                .serving_slot(0),
            1,
        ),
        (
            "release",
            release(&rw.write, Kind::Write)
                .handing_over(rw.fence.clone(), &rw.queue, 0)
                .with_rw_key(rw.read.clone()),
            1,
        ),
        ("sem_acquire", acquire(Want::Permit { permits: 3 }, None), 3),
        (
            "sem_release_any",
            release_by(
                ScriptKind::SemReleaseAny,
                sem.slots(3).collect(),
                Kind::Semaphore,
            ),
            3,
        ),
        (
            "rw_read_release",
            release_by(ScriptKind::RwReadRelease, vec![rw.read.clone()], Kind::Read),
            1,
        ),
        (
            "rw_read_release",
            release_by(ScriptKind::RwReadRelease, vec![rw.read.clone()], Kind::Read)
                .handing_over(rw.fence.clone(), &rw.queue, 0)
                .with_rw_key(rw.write.clone()),
            1,
        ),
        (
            "rw_read_renew",
            ScriptCall::renew(
                ScriptKind::RwReadRenew,
                vec![rw.read.clone()],
                token.to_hex(),
                5000,
            ),
            1,
        ),
        (
            "campaign",
            campaign_call(&elect, &LeaderValue::default(), token, 5000, ns, chan),
            1,
        ),
        (
            "proclaim",
            proclaim_call(
                &elect,
                &LeaderValue::default(),
                token,
                Version::new(1, 0),
                ns,
                chan,
            ),
            1,
        ),
        ("resign", resign_call(&elect, token, ns, chan), 1),
        ("elect_read", read_call(&elect, None), 1),
    ];
    for (keep, refresh, register) in [
        (false, false, true),
        (true, false, true),
        (true, true, false),
    ] {
        let h = || Some(handover(keep, refresh, register));
        calls.push(("acquire", acquire(Want::Lock, h()), 1));
        calls.push(("sem_acquire", acquire(Want::Permit { permits: 3 }, h()), 3));
        for (file, want) in [("rw_read", Want::Read), ("rw_write", Want::Write)] {
            calls.push((file, acquire(want, h()), 1));
            calls.push((file, acquire(want, None), 1));
        }
    }
    for n in [1, 3] {
        let ids: Vec<KeyId> = (0..n).map(|i| KeyId::of(&format!("k{i}"))).collect();
        let names: Vec<LockNames> = ids.iter().map(|id| LockNames::new(ns, *id)).collect();
        let locks: Vec<String> = names.iter().map(|l| l.lock.clone()).collect();
        let keyed: Vec<(KeyId, String)> = ids.iter().copied().zip(locks.clone()).collect();
        for register in [None, Some(RegId(7))] {
            let h = MultiHandover {
                register,
                reg_ms: 300,
            };
            calls.push((
                "multi_acquire",
                multi_acquire_call(&names, token, 5000, 0, 0, 750, Some(h)),
                n,
            ));
        }
        calls.push((
            "multi_acquire",
            multi_acquire_call(&names, token, 5000, 0, 0, 750, None),
            n,
        ));
        calls.push((
            "multi_renew",
            ScriptCall::renew(ScriptKind::MultiRenew, locks, token.to_hex(), 5000),
            n,
        ));
        for ttl in [None, Some(0)] {
            calls.push((
                "multi_release",
                multi_release_call(keyed.clone(), token, ns, chan, ttl),
                n,
            ));
        }
    }
    calls
}

#[test]
fn every_script_header_names_the_keys_and_arguments_its_calls_send() {
    let mut seen = Vec::new();
    for (file, call, n) in calls() {
        check(file, &call, n);
        seen.push(call.kind);
    }
    for kind in ScriptKind::ALL {
        assert!(seen.contains(kind), "no call of {kind:?} was checked");
    }
}

#[test]
fn header_lists_count_optional_tails_and_per_key_items() {
    assert_eq!(allowed("a, b [, c, d]", 1), [2, 4]);
    assert_eq!(allowed("a [, HANDOVER]", 1), [1, 11]);
    assert_eq!(allowed("a, b [, c [, d [, e]]]", 1), [2, 3, 4, 5]);
    assert_eq!(
        allowed("lock..., counter... [, queue..., flag...]", 3),
        [6, 12]
    );
    assert_eq!(allowed("a, ch+", 3), [2, 4]);
    assert_eq!(allowed("mode, {f, v, g}...", 2), [7]);
    assert_eq!(allowed("(none)", 1), [0]);
}
