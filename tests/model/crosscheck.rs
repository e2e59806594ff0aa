//! The emulator against the real thing: every scenario of
//! [`super::scenarios`] runs on a real `redis-server` and on the emulator
//! (its clock set to the server's `TIME` before each step); replies and the
//! key space after each step must agree (types and values exactly, numbers
//! that come from the clock and TTLs within a tolerance).

#![allow(clippy::disallowed_methods)] // sleeps: the real server's keys expire in real time

use std::collections::BTreeMap;
use std::time::Duration;

use super::calls::Sources;
use super::emu::{stream_item, Db, Reply};
use super::lua::Emulator;
use super::scenarios::{self, Step, RAW};
use crate::support::RedisServer;

/// How far clock-derived numbers may differ, in ms.
const TOLERANCE_MS: i64 = 300;

/// The script and its keys and arguments a step runs.
pub(crate) fn step_script(
    sources: &mut Sources,
    step: &Step,
) -> Option<(String, Vec<String>, Vec<String>)> {
    match step {
        Step::Eval(c) => Some((
            sources.get(c.script).to_owned(),
            c.keys.clone(),
            c.args.clone(),
        )),
        Step::Raw(words) => Some((RAW.to_owned(), Vec::new(), words.clone())),
        Step::Inline(src, keys, args) => Some(((*src).to_owned(), keys.clone(), args.clone())),
        Step::Sleep(_) => None,
    }
}

/// The name a step's script is reported by.
pub(crate) fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Eval(c) => c.script,
        Step::Raw(_) => "raw",
        Step::Inline(..) => "inline",
        Step::Sleep(_) => "sleep",
    }
}

fn from_redis(v: redis::Value) -> Reply {
    match v {
        redis::Value::Nil => Reply::Nil,
        redis::Value::Int(i) => Reply::Int(i),
        redis::Value::BulkString(b) => Reply::Bulk(String::from_utf8_lossy(&b).into_owned()),
        redis::Value::Array(items) => Reply::Array(items.into_iter().map(from_redis).collect()),
        redis::Value::SimpleString(s) => Reply::Status(s),
        redis::Value::Okay => Reply::Status("OK".to_owned()),
        redis::Value::ServerError(e) => {
            Reply::Error(format!("{} {}", e.code(), e.details().unwrap_or("")))
        }
        other => Reply::Error(format!("unexpected reply {other:?}")),
    }
}

/// Numbers of 10 digits or more (clock readings in ms, or ms × 1000) may
/// differ by the tolerance; everything else must be equal.
fn fuzzy_str(a: &str, b: &str) -> bool {
    fn runs(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    if a == b {
        return true;
    }
    let (ra, rb) = (runs(a), runs(b));
    ra.len() == rb.len()
        && ra.iter().zip(&rb).all(|((da, x), (_, y))| {
            if x == y {
                return true;
            }
            if !*da || x.len() < 10 || x.len().abs_diff(y.len()) > 1 {
                return false;
            }
            let scale = 10i128.pow(x.len().saturating_sub(13) as u32);
            match (x.parse::<i128>(), y.parse::<i128>()) {
                (Ok(p), Ok(q)) => (p - q).abs() <= i128::from(TOLERANCE_MS) * scale,
                _ => false,
            }
        })
}

fn fuzzy_reply(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        // Times: ms, or µs for a wait of a second or more (the campaign's
        // busy `{µs}`; the scenarios' waits in ms stay below, server times in
        // ms are above): the emulator's clock is set from `TIME` just before
        // the run, which a loaded machine may delay by more than a ms.
        (Reply::Int(x), Reply::Int(y)) => {
            let waits_us = |v: i64| (1_000_000..100_000_000_000).contains(&v.abs());
            let scale = if waits_us(*x) && waits_us(*y) {
                1_000
            } else {
                1
            };
            x == y || (x.abs() >= 50 && y.abs() >= 50 && (x - y).abs() <= TOLERANCE_MS * scale)
        }
        (Reply::Bulk(x), Reply::Bulk(y)) | (Reply::Status(x), Reply::Status(y)) => fuzzy_str(x, y),
        // Errors: the same code (messages differ in what Redis appends).
        (Reply::Error(x), Reply::Error(y)) => x.split(' ').next() == y.split(' ').next(),
        (Reply::Array(x), Reply::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| fuzzy_reply(p, q))
        }
        _ => a == b,
    }
}

type Dump = BTreeMap<String, (String, Vec<String>, i64)>;

fn real_dump(conn: &mut redis::Connection) -> Dump {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).expect("KEYS");
    let mut out = BTreeMap::new();
    for k in keys {
        let kind: String = redis::cmd("TYPE").arg(&k).query(conn).expect("TYPE");
        let items: Vec<String> = match kind.as_str() {
            "string" => vec![redis::cmd("GET").arg(&k).query(conn).expect("GET")],
            "list" => redis::cmd("LRANGE")
                .arg(&k)
                .arg(0)
                .arg(-1)
                .query(conn)
                .expect("LRANGE"),
            "zset" => {
                let flat: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
                    .expect("ZRANGE");
                flat.chunks(2)
                    .map(|p| format!("{}={}", p[0], p[1]))
                    .collect()
            }
            "stream" => {
                let v: redis::Value = redis::cmd("XRANGE")
                    .arg(&k)
                    .arg("-")
                    .arg("+")
                    .query(conn)
                    .expect("XRANGE");
                let Reply::Array(entries) = from_redis(v) else {
                    panic!("XRANGE answered no array");
                };
                entries
                    .iter()
                    .map(|e| match e {
                        Reply::Array(pair) => match (&pair[0], &pair[1]) {
                            (Reply::Bulk(id), Reply::Array(flat)) => {
                                let fields: Vec<(String, String)> = flat
                                    .chunks(2)
                                    .map(|p| match (&p[0], &p[1]) {
                                        (Reply::Bulk(f), Reply::Bulk(v)) => (f.clone(), v.clone()),
                                        other => panic!("a stream field {other:?}"),
                                    })
                                    .collect();
                                stream_item(id, &fields)
                            }
                            other => panic!("a stream entry {other:?}"),
                        },
                        other => panic!("a stream entry {other:?}"),
                    })
                    .collect()
            }
            "none" => continue,
            other => panic!("the scenarios make no {other}"),
        };
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query(conn).expect("PTTL");
        out.insert(k, (kind, items, ttl));
    }
    out
}

fn same_dump(real: &Dump, emu: &Dump) -> Result<(), String> {
    let rk: Vec<&String> = real.keys().collect();
    let ek: Vec<&String> = emu.keys().collect();
    if rk != ek {
        return Err(format!("keys differ:\n real {rk:?}\n emu  {ek:?}"));
    }
    for (k, (rt, rv, rttl)) in real {
        let (et, ev, ettl) = &emu[k];
        let values = rv.len() == ev.len() && rv.iter().zip(ev).all(|(a, b)| fuzzy_str(a, b));
        let ttls = (*rttl == -1 && *ettl == -1)
            || (*rttl >= 0 && *ettl >= 0 && (rttl - ettl).abs() <= TOLERANCE_MS);
        if rt != et || !values || !ttls {
            return Err(format!(
                "key {k} differs:\n real {rt} {rv:?} ttl {rttl}\n emu  {et} {ev:?} ttl {ettl}"
            ));
        }
    }
    Ok(())
}

#[test]
fn emulator_agrees_with_redis() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let mut sources = Sources::real();
    let mut compared = 0;
    for scenario in scenarios::all() {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).expect("FLUSHALL");
        let mut emu = Emulator::new(Db::default());
        for (i, step) in scenario.steps.iter().enumerate() {
            if let Step::Sleep(ms) = step {
                std::thread::sleep(Duration::from_millis(*ms));
                continue;
            }
            let (src, keys, args) = step_script(&mut sources, step).expect("not a sleep");
            let time: Vec<u64> = redis::cmd("TIME").query(&mut conn).expect("TIME");
            emu.db.now_us = emu.db.now_us.max(time[0] * 1_000_000 + time[1]);
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(&src).arg(keys.len()).arg(&keys).arg(&args);
            let real = match cmd.query::<redis::Value>(&mut conn) {
                Ok(v) => from_redis(v),
                Err(e) => Reply::Error(format!("{} {}", e.code().unwrap_or("ERR"), e)),
            };
            let got = emu.eval_named(step_name(step), &src, &keys, &args);
            let at = format!(
                "{} step {i} ({}, args {args:?})",
                scenario.name,
                step_name(step)
            );
            assert!(
                fuzzy_reply(&real, &got),
                "{at}: replies differ:\n real {real:?}\n emu  {got:?}"
            );
            if let Err(e) = same_dump(&real_dump(&mut conn), &emu.db.dump()) {
                panic!("{at}: {e}");
            }
            compared += 1;
        }
    }
    println!("{compared} steps compared with redis-server");
}

#[test]
fn fuzzy_comparison_is_strict_where_it_must_be() {
    assert!(fuzzy_str(
        "a|1712345678901|b:5000",
        "a|1712345678950|b:5000"
    ));
    assert!(!fuzzy_str(
        "a|1712345678901|b:5000",
        "a|1712345679901|b:5000"
    ));
    assert!(!fuzzy_str("a|1|b", "a|2|b"));
    assert!(fuzzy_reply(&Reply::Int(9_990), &Reply::Int(10_000)));
    assert!(!fuzzy_reply(&Reply::Int(2), &Reply::Int(3)));
}
