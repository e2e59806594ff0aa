//! The declared-keys audit: every scenario of [`super::scenarios`] runs on
//! the emulator with every key argument checked against the script's
//! `KEYS`. Redis requires a script to declare every key it touches (Cluster
//! routes by them, ACL key patterns check them, and a key not declared is
//! "undefined behaviour" by the EVAL docs); redlease reaches some by name.
//!
//! [`ALLOWED`] lists the (script, key pattern) pairs that are undeclared
//! today: it is the to-do list. The test fails on any pair not on it (a new
//! undeclared key) and on any pair on it that no longer occurs (fixed:
//! strike it off), and prints the complete list either way. The election's
//! scripts are not covered yet: the emulator has no streams.

use std::collections::BTreeSet;

use super::calls::Sources;
use super::crosscheck::{step_name, step_script};
use super::emu::Db;
use super::lua::{Emulator, KeyCheck, Undeclared};
use super::scenarios::{self, Step};

/// Today's undeclared (script, key pattern) pairs. `<ns>`: the namespace,
/// `{sha}`: a key's tail, `<reg>`: a registration id, `<i>`: a slot.
const ALLOWED: &[(&str, &str)] = &[
    // ACQUIRE_LUA: the registration key, named by ARGV (reg prefix .. reg id).
    ("ACQUIRE_LUA", "<ns>:lock-reg:{sha}:<reg>"),
    // MULTI_ACQUIRE_LUA: each key's registration key, named by ARGV (reg prefix .. reg).
    ("MULTI_ACQUIRE_LUA", "<ns>:lock-reg:{sha}:<reg>"),
    // MULTI_RELEASE_LUA: the counter and queue, built from the `<ns>:lock` prefix.
    ("MULTI_RELEASE_LUA", "<ns>:lock-fence:{sha}"),
    ("MULTI_RELEASE_LUA", "<ns>:lock-queue:{sha}"),
    // RELEASE_LUA: counter, queue, flag (and readers) passed in ARGV; only the lease key is declared.
    ("RELEASE_LUA", "<ns>:lock-fence:{sha}"),
    ("RELEASE_LUA", "<ns>:lock-queue:{sha}"),
    ("RELEASE_LUA", "<ns>:lock-queued:{sha}"),
    ("RELEASE_LUA", "<ns>:rw-fence:{sha}"),
    ("RELEASE_LUA", "<ns>:rw-queue:{sha}"),
    ("RELEASE_LUA", "<ns>:rw-queued:{sha}"),
    ("RELEASE_LUA", "<ns>:rw-read:{sha}"),
    ("RELEASE_LUA", "<ns>:sem-fence:{sha}:<i>"),
    ("RELEASE_LUA", "<ns>:sem-queue:{sha}"),
    ("RELEASE_LUA", "<ns>:sem-queued:{sha}"),
    // RW_READ_LUA: the registration key, named by ARGV.
    ("RW_READ_LUA", "<ns>:rw-reg:{sha}:<reg>"),
    // RW_READ_RELEASE_LUA: counter, queue, flag and writer passed in ARGV.
    ("RW_READ_RELEASE_LUA", "<ns>:rw-fence:{sha}"),
    ("RW_READ_RELEASE_LUA", "<ns>:rw-queue:{sha}"),
    ("RW_READ_RELEASE_LUA", "<ns>:rw-queued:{sha}"),
    ("RW_READ_RELEASE_LUA", "<ns>:rw-write:{sha}"),
    // RW_WRITE_LUA: the registration key, named by ARGV.
    ("RW_WRITE_LUA", "<ns>:rw-reg:{sha}:<reg>"),
    // SEM_ACQUIRE_LUA: slots, their counters and the registration key: KEYS holds prefixes.
    ("SEM_ACQUIRE_LUA", "<ns>:sem-fence:{sha}:<i>"),
    ("SEM_ACQUIRE_LUA", "<ns>:sem-reg:{sha}:<reg>"),
    ("SEM_ACQUIRE_LUA", "<ns>:sem:{sha}:<i>"),
    // SEM_RELEASE_ANY_LUA: the slots: KEYS[2] is a prefix.
    ("SEM_RELEASE_ANY_LUA", "<ns>:sem:{sha}:<i>"),
];

/// The scripts the audit runs: all but the election's (the emulator has no
/// streams) and the fenced store's.
pub(crate) const SCRIPTS: &[&str] = &[
    "ACQUIRE_LUA",
    "RELEASE_LUA",
    "RENEW_LUA",
    "DEREGISTER_LUA",
    "SEM_ACQUIRE_LUA",
    "SEM_RELEASE_ANY_LUA",
    "RW_READ_LUA",
    "RW_WRITE_LUA",
    "RW_READ_RELEASE_LUA",
    "RW_READ_RENEW_LUA",
    "MULTI_ACQUIRE_LUA",
    "MULTI_RENEW_LUA",
    "MULTI_RELEASE_LUA",
];

/// A key as a pattern: the namespace, tails, registration ids and slot
/// numbers replaced by placeholders.
pub(crate) fn pattern(key: &str) -> String {
    let mut out = key.replacen("ns:", "<ns>:", 1);
    if let (Some(open), Some(close)) = (out.find('{'), out.find('}')) {
        if close == open + 65 {
            out.replace_range(open..=close, "{sha}");
        }
    }
    if let Some(at) = out.find("{sha}:") {
        let head = &out[..at];
        let tail = if head.ends_with("-reg:") {
            "<reg>"
        } else {
            "<i>"
        };
        out = format!("{head}{{sha}}:{tail}");
    }
    out
}

/// Runs every scenario with the check on; returns the undeclared keys met
/// and the scripts run.
pub(crate) fn audit() -> (Vec<Undeclared>, BTreeSet<&'static str>) {
    let mut sources = Sources::real();
    let mut run = BTreeSet::new();
    let mut found = Vec::new();
    for scenario in scenarios::all().into_iter().skip(1) {
        let mut emu = Emulator::new(Db::at_ms(1_700_000_000_000));
        emu.check = KeyCheck::Record;
        for step in &scenario.steps {
            if let Step::Sleep(ms) = step {
                emu.db.advance_ms(*ms);
                continue;
            }
            let (src, keys, args) = step_script(&mut sources, step).expect("not a sleep");
            emu.db.advance_ms(1);
            // Raw commands set scenes up; only the crate's scripts are audited.
            emu.check = if matches!(step, Step::Eval(_)) {
                KeyCheck::Record
            } else {
                KeyCheck::Off
            };
            let _ = emu.eval_named(step_name(step), &src, &keys, &args);
            if let Step::Eval(c) = step {
                run.insert(c.script);
            }
        }
        found.extend(emu.undeclared);
    }
    (found, run)
}

#[test]
fn every_script_touches_only_declared_keys_but_the_allow_list() {
    let (found, run) = audit();
    let missing: Vec<&&str> = SCRIPTS.iter().filter(|s| !run.contains(**s)).collect();
    assert!(
        missing.is_empty(),
        "scripts the audit never ran: {missing:?}"
    );
    let pairs: BTreeSet<(String, String, String)> = found
        .iter()
        .map(|u| (u.script.clone(), pattern(&u.key), u.command.clone()))
        .collect();
    println!(
        "undeclared keys ({} script/key/command triples):",
        pairs.len()
    );
    for (script, key, command) in &pairs {
        println!("  {script:<20} {key:<32} {command}");
    }
    let seen: BTreeSet<(String, String)> = pairs
        .iter()
        .map(|(s, k, _)| (s.clone(), k.clone()))
        .collect();
    let allowed: BTreeSet<(String, String)> = ALLOWED
        .iter()
        .map(|(s, k)| ((*s).to_owned(), (*k).to_owned()))
        .collect();
    let new: Vec<_> = seen.difference(&allowed).collect();
    let fixed: Vec<_> = allowed.difference(&seen).collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "undeclared keys not on the allow-list (declare them): {new:#?}\n\
         allow-list entries no longer met (strike them off): {fixed:#?}"
    );
}

#[test]
fn refuse_mode_turns_an_undeclared_key_into_an_error() {
    let mut emu = Emulator::new(Db::at_ms(1_700_000_000_000));
    emu.check = KeyCheck::Refuse;
    let keys = vec!["declared".to_owned()];
    let args = vec!["undeclared".to_owned()];
    let reply = emu.eval_named(
        "ARGV_KEY",
        "redis.call('GET', KEYS[1]) return redis.call('GET', ARGV[1])",
        &keys,
        &args,
    );
    assert!(
        matches!(&reply, super::emu::Reply::Error(e) if e.contains("not declared")),
        "{reply:?}"
    );
}
