//! The emulator's conversions and globals, without a server.

use super::emu::{Db, Reply};
use super::lua::{Emulator, KeyCheck};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

#[test]
fn conversions_follow_redis() {
    let mut e = Emulator::new(Db::at_ms(1_000_000));
    assert_eq!(e.eval("return 3.9", &[], &[]), Reply::Int(3));
    assert_eq!(e.eval("return false", &[], &[]), Reply::Nil);
    assert_eq!(
        e.eval("return {1, 'a', nil, 2}", &[], &[]),
        Reply::Array(vec![Reply::Int(1), Reply::Bulk("a".into())])
    );
    assert_eq!(
        e.eval("return redis.error_reply('NOPE x')", &[], &[]),
        Reply::Error("NOPE x".into())
    );
    assert_eq!(
        e.eval("return redis.status_reply('FINE')", &[], &[]),
        Reply::Status("FINE".into())
    );
    assert_eq!(
        e.eval(
            "redis.call('SET', KEYS[1], 'v'); return redis.pcall('LPUSH', KEYS[1], 'x')",
            &s(&["k"]),
            &[]
        ),
        Reply::Error(super::emu::WRONGTYPE.into())
    );
    assert_eq!(
        e.eval("return redis.call('LPUSH', KEYS[1], 'x')", &s(&["k"]), &[]),
        Reply::Error(super::emu::WRONGTYPE.into())
    );
    assert_eq!(
        e.eval("return type(redis.call('GET', 'nothing'))", &[], &[]),
        Reply::Bulk("boolean".into())
    );
    assert_eq!(
        e.eval("return unpack({ARGV[1], ARGV[2]})", &[], &s(&["a", "b"])),
        Reply::Bulk("a".into())
    );
    assert!(matches!(e.eval("x = 1", &[], &[]), Reply::Error(m) if m.contains("global")));
    assert_eq!(
        e.eval("return redis.call('TIME')", &[], &[]),
        Reply::Array(vec![Reply::Bulk("1000".into()), Reply::Bulk("0".into())])
    );
}

#[test]
fn refuse_mode_refuses_undeclared_keys() {
    let mut e = Emulator::new(Db::at_ms(1_000_000));
    e.check = KeyCheck::Refuse;
    let r = e.eval("return redis.call('GET', 'other')", &s(&["k"]), &[]);
    assert!(matches!(r, Reply::Error(m) if m.contains("not declared")));
    assert_eq!(e.undeclared.len(), 1);
    assert_eq!(
        e.eval("return redis.call('MGET', KEYS[1])", &s(&["k"]), &[]),
        Reply::Array(vec![Reply::Nil])
    );
    assert_eq!(e.undeclared.len(), 1);
}
