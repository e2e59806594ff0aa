//! The declared-keys audit: every scenario of [`super::scenarios`] runs on
//! the emulator with every key argument checked against the script's
//! `KEYS`. Redis requires a script to declare every key it touches (Cluster
//! routes by them, ACL key patterns check them, and a key not declared is
//! "undefined behaviour" by the EVAL docs; Dragonfly and ElastiCache
//! Serverless refuse it). The audit fails on any key a script reaches by
//! name, and lists them all.

use std::collections::BTreeSet;

use super::calls::Sources;
use super::crosscheck::{step_name, step_script};
use super::emu::Db;
use super::lua::{Emulator, KeyCheck, Undeclared};
use super::scenarios::{self, Step};

/// The scripts the audit runs: all but the fenced store's.
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
    "CAMPAIGN_LUA",
    "PROCLAIM_LUA",
    "RESIGN_LUA",
    "ELECT_READ_LUA",
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
fn every_script_touches_only_declared_keys() {
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
    assert!(pairs.is_empty(), "undeclared keys: declare them");
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
