//! An emulated Redis 7.0 key space: strings, lists, sorted sets and
//! streams with per-key expiry in ms against a clock the test moves, and
//! exactly the commands the crate's scripts call, with the options they
//! use.
//!
//! Semantics follow Redis 7.0: a key expires once the clock is past its
//! expiry (`now > at`, so `PX L` lasts L to L + 1 ms); a list or sorted set
//! emptied is deleted with its expiry; `PEXPIRE … GT` treats a key without
//! an expiry as infinite (it fails), `NX` sets only where none is; a
//! command on a key of another type answers `WRONGTYPE`. A stream takes
//! explicit ids only (`<ms>-<seq>`, each above the last one it ever took),
//! and `MAXLEN ~ n` trims nothing below n + 100 entries (Redis trims whole
//! nodes only, of at most `stream-node-max-entries`, 100 by default); past
//! that it drops 100-entry nodes from the head, where Redis's nodes may be
//! smaller by their byte bound: runs that compare stay below it.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};

/// The error every command answers a key of another type with.
pub(crate) const WRONGTYPE: &str =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A reply, as RESP2 has them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Nil,
    Int(i64),
    Bulk(String),
    Array(Vec<Reply>),
    Status(String),
    Error(String),
}

impl Reply {
    fn ok() -> Reply {
        Reply::Status("OK".to_owned())
    }
    fn err(msg: &str) -> Reply {
        Reply::Error(msg.to_owned())
    }
    fn bulk_or_nil(v: Option<String>) -> Reply {
        v.map_or(Reply::Nil, Reply::Bulk)
    }
}

/// A sorted set's score: a double (hashed by its bits, for the explorer's
/// memo of visited states).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Score(pub(crate) f64);

impl Eq for Score {}

impl Hash for Score {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// A key's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Value {
    Str(String),
    List(VecDeque<String>),
    /// Member → score; ordered by (score, member) on demand.
    ZSet(BTreeMap<String, Score>),
    Stream(Stream),
}

/// A stream entry's id.
pub(crate) type StreamId = (u64, u64);

/// A stream: its entries by id, and the last id it took (trimming never
/// lowers it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Stream {
    pub(crate) entries: BTreeMap<StreamId, Vec<(String, String)>>,
    pub(crate) last: StreamId,
}

/// The entries of a stream node (Redis's `stream-node-max-entries`).
const STREAM_NODE: usize = 100;

fn format_id(id: StreamId) -> String {
    format!("{}-{}", id.0, id.1)
}

/// A full id `<ms>-<seq>`, or `<ms>` with `seq` for its missing part.
fn parse_id(s: &str, seq: u64) -> Option<StreamId> {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('-') {
        Some((ms, sq)) if digits(ms) && digits(sq) => Some((ms.parse().ok()?, sq.parse().ok()?)),
        None if digits(s) => Some((s.parse().ok()?, seq)),
        _ => None,
    }
}

/// A range bound of `XRANGE`: `-`, `+`, an id, or `(` and an id
/// (exclusive), as the first id of the range (`start`) or its last.
fn range_bound(s: &str, start: bool) -> Result<Option<StreamId>, Reply> {
    let bad = || Reply::err("ERR Invalid stream ID specified as stream command argument");
    match s {
        "-" => return Ok(Some((0, 0))),
        "+" => return Ok(Some((u64::MAX, u64::MAX))),
        _ => {}
    }
    let (exclusive, id) = match s.strip_prefix('(') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let id = parse_id(id, if start { 0 } else { u64::MAX }).ok_or_else(bad)?;
    if !exclusive {
        return Ok(Some(id));
    }
    // An exclusive bound past the last id (or before the first) is empty.
    Ok(if start {
        match id {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some((ms + 1, 0)),
            (ms, seq) => Some((ms, seq + 1)),
        }
    } else {
        match id {
            (0, 0) => None,
            (ms, 0) => Some((ms - 1, u64::MAX)),
            (ms, seq) => Some((ms, seq - 1)),
        }
    })
}

fn entry_reply(id: StreamId, fields: &[(String, String)]) -> Reply {
    Reply::Array(vec![
        Reply::Bulk(format_id(id)),
        Reply::Array(
            fields
                .iter()
                .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())])
                .collect(),
        ),
    ])
}

impl Value {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }
}

/// A key: its value and its expiry (absolute ms), if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) expire_at: Option<u64>,
}

/// A message a script published (`PUBLISH`/`SPUBLISH`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Published {
    pub(crate) command: String,
    pub(crate) channel: String,
    pub(crate) message: String,
}

/// The key space and its clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct Db {
    pub(crate) keys: BTreeMap<String, Entry>,
    /// The clock, in µs since the epoch (`TIME`).
    pub(crate) now_us: u64,
    /// Messages published since the test last took them.
    pub(crate) published: Vec<Published>,
    /// What `PUBLISH` answers (the number of receivers).
    pub(crate) subscribers: i64,
}

fn parse_i64(s: &str) -> Option<i64> {
    // Redis's string2ll: no spaces, no '+', no leading zeros (but "0").
    if s.is_empty() || s.len() > 20 || s.starts_with('+') {
        return None;
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || (digits.len() > 1 && digits.starts_with('0'))
        || digits == "0" && s != "0"
    {
        return None;
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_score(s: &str) -> Option<f64> {
    match s.to_ascii_lowercase().as_str() {
        "-inf" => Some(f64::NEG_INFINITY),
        "+inf" | "inf" => Some(f64::INFINITY),
        t => t.parse::<f64>().ok().filter(|v| !v.is_nan()),
    }
}

/// Redis's printing of a score (`%.17g`, shortest form that reads back).
pub(crate) fn format_score(v: f64) -> String {
    if v == f64::INFINITY {
        return "inf".to_owned();
    }
    if v == f64::NEG_INFINITY {
        return "-inf".to_owned();
    }
    if v.fract() == 0.0 && v.abs() < 1e17 {
        return format!("{}", v as i64);
    }
    format!("{v}")
}

const NOT_INT: &str = "ERR value is not an integer or out of range";
const SYNTAX: &str = "ERR syntax error";

impl Db {
    /// A key space whose clock reads `now_ms`.
    pub(crate) fn at_ms(now_ms: u64) -> Db {
        Db {
            now_us: now_ms * 1000,
            ..Db::default()
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// Moves the clock forward by `ms` (expired keys go lazily, and
    /// [`Db::purge`] drops them for a canonical state).
    pub(crate) fn advance_ms(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }

    /// Drops every expired key (Redis's active expiry, all at once): two
    /// key spaces that answer every command alike then compare equal.
    pub(crate) fn purge(&mut self) {
        let now = self.now_ms();
        self.keys
            .retain(|_, e| e.expire_at.is_none_or(|at| at >= now));
    }

    /// The live entry of `key` (an expired one is deleted first).
    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now_ms();
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expire_at.is_some_and(|at| at < now))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// The live entry's value, read only (`None`: missing).
    pub(crate) fn peek(&self, key: &str) -> Option<&Entry> {
        let now = self.now_ms();
        self.keys
            .get(key)
            .filter(|e| e.expire_at.is_none_or(|at| at >= now))
    }

    fn get_str(&mut self, key: &str) -> Result<Option<String>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    fn list_mut(&mut self, key: &str) -> Result<Option<&mut VecDeque<String>>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::List(l),
                ..
            }) => Ok(Some(l)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    fn zset_mut(&mut self, key: &str) -> Result<Option<&mut BTreeMap<String, Score>>, Reply> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::ZSet(z),
                ..
            }) => Ok(Some(z)),
            Some(_) => Err(Reply::err(WRONGTYPE)),
        }
    }

    /// Deletes `key` if it is an empty list or sorted set (Redis never
    /// keeps one).
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.keys.get(key).map(|e| &e.value) {
            Some(Value::List(l)) => l.is_empty(),
            Some(Value::ZSet(z)) => z.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// The key arguments of a command (for the declared-keys check).
    pub(crate) fn key_args(args: &[String]) -> Vec<&str> {
        let Some(name) = args.first() else {
            return Vec::new();
        };
        let rest = &args[1..];
        match name.to_ascii_uppercase().as_str() {
            "TIME" | "PUBLISH" | "SPUBLISH" => Vec::new(),
            "MGET" | "DEL" | "EXISTS" => rest.iter().map(String::as_str).collect(),
            "MSET" => rest.iter().step_by(2).map(String::as_str).collect(),
            "LMOVE" => rest.iter().take(2).map(String::as_str).collect(),
            _ => rest.first().map(String::as_str).into_iter().collect(),
        }
    }

    /// Runs one command (`args[0]` is its name, any case).
    pub(crate) fn command(&mut self, args: &[String]) -> Reply {
        let Some(name) = args.first() else {
            return Reply::err("ERR Please specify at least one argument for this redis lib call");
        };
        let name = name.to_ascii_uppercase();
        let a = &args[1..];
        let arity = |n: usize| -> Result<(), Reply> {
            if a.len() < n {
                Err(Reply::Error(format!(
                    "ERR wrong number of arguments for '{}' command",
                    name.to_ascii_lowercase()
                )))
            } else {
                Ok(())
            }
        };
        let result = (|| -> Result<Reply, Reply> {
            match name.as_str() {
                "GET" => {
                    arity(1)?;
                    Ok(Reply::bulk_or_nil(self.get_str(&a[0])?))
                }
                "MGET" => {
                    arity(1)?;
                    Ok(Reply::Array(
                        a.iter()
                            .map(|k| Reply::bulk_or_nil(self.get_str(k).ok().flatten()))
                            .collect(),
                    ))
                }
                "SET" => self.set(a),
                "MSET" => {
                    if a.is_empty() || !a.len().is_multiple_of(2) {
                        return Err(Reply::err(
                            "ERR wrong number of arguments for 'mset' command",
                        ));
                    }
                    for kv in a.chunks(2) {
                        self.keys.insert(
                            kv[0].clone(),
                            Entry {
                                value: Value::Str(kv[1].clone()),
                                expire_at: None,
                            },
                        );
                    }
                    Ok(Reply::ok())
                }
                "DEL" => {
                    arity(1)?;
                    let mut n = 0;
                    for k in a {
                        if self.live(k).is_some() {
                            self.keys.remove(k);
                            n += 1;
                        }
                    }
                    Ok(Reply::Int(n))
                }
                "EXISTS" => {
                    arity(1)?;
                    let mut n = 0;
                    for k in a {
                        if self.live(k).is_some() {
                            n += 1;
                        }
                    }
                    Ok(Reply::Int(n))
                }
                "GETDEL" => {
                    arity(1)?;
                    let v = self.get_str(&a[0])?;
                    if v.is_some() {
                        self.keys.remove(&a[0]);
                    }
                    Ok(Reply::bulk_or_nil(v))
                }
                "INCR" => {
                    arity(1)?;
                    let v = self.get_str(&a[0])?;
                    let n = match v {
                        None => 0,
                        Some(s) => parse_i64(&s).ok_or_else(|| Reply::err(NOT_INT))?,
                    };
                    let n = n
                        .checked_add(1)
                        .ok_or_else(|| Reply::err("ERR increment or decrement would overflow"))?;
                    match self.live(&a[0]) {
                        Some(e) => e.value = Value::Str(n.to_string()),
                        None => {
                            self.keys.insert(
                                a[0].clone(),
                                Entry {
                                    value: Value::Str(n.to_string()),
                                    expire_at: None,
                                },
                            );
                        }
                    }
                    Ok(Reply::Int(n))
                }
                "PEXPIRE" | "PEXPIREAT" => {
                    arity(2)?;
                    let t = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let at = if name == "PEXPIRE" {
                        self.now_ms() as i64 + t
                    } else {
                        t
                    };
                    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
                    for opt in &a[2..] {
                        match opt.to_ascii_uppercase().as_str() {
                            "NX" => nx = true,
                            "XX" => xx = true,
                            "GT" => gt = true,
                            "LT" => lt = true,
                            other => {
                                return Err(Reply::Error(format!("ERR Unsupported option {other}")))
                            }
                        }
                    }
                    if nx && (xx || gt || lt) {
                        return Err(Reply::err(
                            "ERR NX and XX, GT or LT options at the same time are not compatible",
                        ));
                    }
                    if gt && lt {
                        return Err(Reply::err(
                            "ERR GT and LT options at the same time are not compatible",
                        ));
                    }
                    let now = self.now_ms() as i64;
                    let Some(e) = self.live(&a[0]) else {
                        return Ok(Reply::Int(0));
                    };
                    let cur = e.expire_at;
                    if nx && cur.is_some() || xx && cur.is_none() {
                        return Ok(Reply::Int(0));
                    }
                    if gt && cur.is_none_or(|c| at <= c as i64) {
                        // No expiry counts as infinite.
                        return Ok(Reply::Int(0));
                    }
                    if lt && cur.is_some_and(|c| at >= c as i64) {
                        return Ok(Reply::Int(0));
                    }
                    if at <= now {
                        self.keys.remove(&a[0]);
                    } else {
                        e.expire_at = Some(at as u64);
                    }
                    Ok(Reply::Int(1))
                }
                "PTTL" => {
                    arity(1)?;
                    let now = self.now_ms();
                    Ok(Reply::Int(match self.live(&a[0]) {
                        None => -2,
                        Some(Entry {
                            expire_at: None, ..
                        }) => -1,
                        Some(Entry {
                            expire_at: Some(at),
                            ..
                        }) => at.saturating_sub(now) as i64,
                    }))
                }
                "TIME" => Ok(Reply::Array(vec![
                    Reply::Bulk((self.now_us / 1_000_000).to_string()),
                    Reply::Bulk((self.now_us % 1_000_000).to_string()),
                ])),
                "PUBLISH" | "SPUBLISH" => {
                    arity(2)?;
                    self.published.push(Published {
                        command: name.clone(),
                        channel: a[0].clone(),
                        message: a[1].clone(),
                    });
                    Ok(Reply::Int(self.subscribers))
                }
                "RPUSH" | "LPUSH" => {
                    arity(2)?;
                    let l = match self.list_mut(&a[0])? {
                        Some(l) => l,
                        None => {
                            self.keys.insert(
                                a[0].clone(),
                                Entry {
                                    value: Value::List(VecDeque::new()),
                                    expire_at: None,
                                },
                            );
                            self.list_mut(&a[0])?.expect("just created")
                        }
                    };
                    for v in &a[1..] {
                        if name == "RPUSH" {
                            l.push_back(v.clone());
                        } else {
                            l.push_front(v.clone());
                        }
                    }
                    Ok(Reply::Int(l.len() as i64))
                }
                "LPOP" | "RPOP" => {
                    arity(1)?;
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Nil);
                    };
                    let v = if name == "LPOP" {
                        l.pop_front()
                    } else {
                        l.pop_back()
                    };
                    self.drop_if_empty(&a[0]);
                    Ok(Reply::bulk_or_nil(v))
                }
                "LMOVE" => {
                    arity(4)?;
                    let from_left = match a[2].to_ascii_uppercase().as_str() {
                        "LEFT" => true,
                        "RIGHT" => false,
                        _ => return Err(Reply::err(SYNTAX)),
                    };
                    let to_left = match a[3].to_ascii_uppercase().as_str() {
                        "LEFT" => true,
                        "RIGHT" => false,
                        _ => return Err(Reply::err(SYNTAX)),
                    };
                    // The destination's type is checked before anything moves.
                    if a[0] != a[1] {
                        self.list_mut(&a[1])?;
                    }
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Nil);
                    };
                    let v = if from_left {
                        l.pop_front()
                    } else {
                        l.pop_back()
                    }
                    .expect("lists are never empty");
                    let dst = match self.list_mut(&a[1])? {
                        Some(d) => d,
                        None => {
                            // Only a different key can be missing here; the
                            // source's expiry stays with the source.
                            self.keys.insert(
                                a[1].clone(),
                                Entry {
                                    value: Value::List(VecDeque::new()),
                                    expire_at: None,
                                },
                            );
                            self.list_mut(&a[1])?.expect("just created")
                        }
                    };
                    if to_left {
                        dst.push_front(v.clone());
                    } else {
                        dst.push_back(v.clone());
                    }
                    self.drop_if_empty(&a[0]);
                    Ok(Reply::Bulk(v))
                }
                "LPOS" => {
                    arity(2)?;
                    if a.len() > 2 {
                        return Err(Reply::err("ERR LPOS options are not emulated"));
                    }
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Nil);
                    };
                    Ok(l.iter()
                        .position(|v| v == &a[1])
                        .map_or(Reply::Nil, |i| Reply::Int(i as i64)))
                }
                "LSET" => {
                    arity(3)?;
                    let i = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Err(Reply::err("ERR no such key"));
                    };
                    let len = l.len() as i64;
                    let i = if i < 0 { len + i } else { i };
                    if i < 0 || i >= len {
                        return Err(Reply::err("ERR index out of range"));
                    }
                    l[i as usize] = a[2].clone();
                    Ok(Reply::ok())
                }
                "LREM" => {
                    arity(3)?;
                    let count = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Int(0));
                    };
                    let mut removed = 0i64;
                    if count >= 0 {
                        let mut i = 0;
                        while i < l.len() && (count == 0 || removed < count) {
                            if l[i] == a[2] {
                                l.remove(i);
                                removed += 1;
                            } else {
                                i += 1;
                            }
                        }
                    } else {
                        let mut i = l.len();
                        while i > 0 && removed < -count {
                            i -= 1;
                            if l[i] == a[2] {
                                l.remove(i);
                                removed += 1;
                            }
                        }
                    }
                    self.drop_if_empty(&a[0]);
                    Ok(Reply::Int(removed))
                }
                "LINDEX" => {
                    arity(2)?;
                    let i = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Nil);
                    };
                    let len = l.len() as i64;
                    let i = if i < 0 { len + i } else { i };
                    Ok(if i < 0 || i >= len {
                        Reply::Nil
                    } else {
                        Reply::Bulk(l[i as usize].clone())
                    })
                }
                "LLEN" => {
                    arity(1)?;
                    Ok(Reply::Int(
                        self.list_mut(&a[0])?.map_or(0, |l| l.len() as i64),
                    ))
                }
                "LRANGE" => {
                    arity(3)?;
                    let start = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let stop = parse_i64(&a[2]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let Some(l) = self.list_mut(&a[0])? else {
                        return Ok(Reply::Array(Vec::new()));
                    };
                    let items: Vec<String> = l.iter().cloned().collect();
                    Ok(Reply::Array(
                        range(items.len(), start, stop)
                            .map(|i| Reply::Bulk(items[i].clone()))
                            .collect(),
                    ))
                }
                "XADD" => self.xadd(a),
                "XRANGE" | "XREVRANGE" => {
                    arity(3)?;
                    let rev = name == "XREVRANGE";
                    // XREVRANGE takes the end first.
                    let (lo, hi) = if rev { (&a[2], &a[1]) } else { (&a[1], &a[2]) };
                    let (lo, hi) = (range_bound(lo, true)?, range_bound(hi, false)?);
                    let count = match a.get(3) {
                        None => None,
                        Some(w) if w.eq_ignore_ascii_case("COUNT") && a.len() == 5 => {
                            let n = parse_i64(&a[4]).ok_or_else(|| Reply::err(NOT_INT))?;
                            Some(usize::try_from(n).unwrap_or(0))
                        }
                        Some(_) => return Err(Reply::err(SYNTAX)),
                    };
                    if count == Some(0) {
                        // Redis answers a null array to `COUNT 0` (or less).
                        return Ok(Reply::Nil);
                    }
                    let stream = match self.live(&a[0]) {
                        None => return Ok(Reply::Array(Vec::new())),
                        Some(Entry {
                            value: Value::Stream(st),
                            ..
                        }) => st,
                        Some(_) => return Err(Reply::err(WRONGTYPE)),
                    };
                    let (Some(lo), Some(hi)) = (lo, hi) else {
                        return Ok(Reply::Array(Vec::new()));
                    };
                    if lo > hi {
                        return Ok(Reply::Array(Vec::new()));
                    }
                    let range = stream.entries.range(lo..=hi);
                    let items: Vec<Reply> = if rev {
                        range
                            .rev()
                            .take(count.unwrap_or(usize::MAX))
                            .map(|(id, f)| entry_reply(*id, f))
                            .collect()
                    } else {
                        range
                            .take(count.unwrap_or(usize::MAX))
                            .map(|(id, f)| entry_reply(*id, f))
                            .collect()
                    };
                    Ok(Reply::Array(items))
                }
                "ZADD" => self.zadd(a),
                "ZSCORE" => {
                    arity(2)?;
                    let Some(z) = self.zset_mut(&a[0])? else {
                        return Ok(Reply::Nil);
                    };
                    Ok(z.get(&a[1])
                        .map_or(Reply::Nil, |s| Reply::Bulk(format_score(s.0))))
                }
                "ZREM" => {
                    arity(2)?;
                    let Some(z) = self.zset_mut(&a[0])? else {
                        return Ok(Reply::Int(0));
                    };
                    let n = a[1..].iter().filter(|m| z.remove(*m).is_some()).count();
                    self.drop_if_empty(&a[0]);
                    Ok(Reply::Int(n as i64))
                }
                "ZCARD" => {
                    arity(1)?;
                    Ok(Reply::Int(
                        self.zset_mut(&a[0])?.map_or(0, |z| z.len() as i64),
                    ))
                }
                "ZRANGE" => {
                    arity(3)?;
                    let start = parse_i64(&a[1]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let stop = parse_i64(&a[2]).ok_or_else(|| Reply::err(NOT_INT))?;
                    let mut scores = false;
                    for opt in &a[3..] {
                        if opt.eq_ignore_ascii_case("WITHSCORES") {
                            scores = true;
                        } else {
                            return Err(Reply::err(SYNTAX));
                        }
                    }
                    let Some(z) = self.zset_mut(&a[0])? else {
                        return Ok(Reply::Array(Vec::new()));
                    };
                    let sorted = sorted(z);
                    let mut out = Vec::new();
                    for i in range(sorted.len(), start, stop) {
                        out.push(Reply::Bulk(sorted[i].1.clone()));
                        if scores {
                            out.push(Reply::Bulk(format_score(sorted[i].0)));
                        }
                    }
                    Ok(Reply::Array(out))
                }
                "ZREMRANGEBYSCORE" => {
                    arity(3)?;
                    let (lo, lo_ex) = score_bound(&a[1])?;
                    let (hi, hi_ex) = score_bound(&a[2])?;
                    let Some(z) = self.zset_mut(&a[0])? else {
                        return Ok(Reply::Int(0));
                    };
                    let before = z.len();
                    z.retain(|_, s| {
                        let above = if lo_ex { s.0 > lo } else { s.0 >= lo };
                        let below = if hi_ex { s.0 < hi } else { s.0 <= hi };
                        !(above && below)
                    });
                    let n = before - z.len();
                    self.drop_if_empty(&a[0]);
                    Ok(Reply::Int(n as i64))
                }
                other => Err(Reply::Error(format!(
                    "ERR the emulator has no command '{}'",
                    other.to_ascii_lowercase()
                ))),
            }
        })();
        result.unwrap_or_else(|e| e)
    }

    /// `XADD key [MAXLEN [~|=] n] id field value [field value …]`, an
    /// explicit id only.
    fn xadd(&mut self, a: &[String]) -> Result<Reply, Reply> {
        let arity = || Reply::err("ERR wrong number of arguments for 'xadd' command");
        if a.len() < 4 {
            return Err(arity());
        }
        let mut i = 1;
        let mut maxlen: Option<(usize, bool)> = None;
        if a[i].eq_ignore_ascii_case("MAXLEN") {
            i += 1;
            let approx = match a.get(i).map(String::as_str) {
                Some("~") => true,
                Some("=") => false,
                Some(_) => {
                    i -= 1;
                    false
                }
                None => return Err(arity()),
            };
            i += 1;
            let n = a
                .get(i)
                .and_then(|w| parse_i64(w))
                .filter(|n| *n >= 0)
                .ok_or_else(|| Reply::err("ERR The MAXLEN argument must be >= 0."))?;
            maxlen = Some((n as usize, approx));
            i += 1;
        }
        let fields = a.get(i + 1..).unwrap_or_default();
        if fields.is_empty() || !fields.len().is_multiple_of(2) {
            return Err(arity());
        }
        let id = parse_id(&a[i], 0).ok_or_else(|| {
            Reply::err("ERR Invalid stream ID specified as stream command argument")
        })?;
        if id == (0, 0) {
            return Err(Reply::err(
                "ERR The ID specified in XADD must be greater than 0-0",
            ));
        }
        let key = &a[0];
        let stream = match self.live(key) {
            None => {
                self.keys.insert(
                    key.clone(),
                    Entry {
                        value: Value::Stream(Stream::default()),
                        expire_at: None,
                    },
                );
                match self.keys.get_mut(key).map(|e| &mut e.value) {
                    Some(Value::Stream(st)) => st,
                    _ => unreachable!("just inserted"),
                }
            }
            Some(Entry {
                value: Value::Stream(st),
                ..
            }) => st,
            Some(_) => return Err(Reply::err(WRONGTYPE)),
        };
        if id <= stream.last {
            return Err(Reply::err(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            ));
        }
        stream.last = id;
        stream.entries.insert(
            id,
            fields
                .chunks(2)
                .map(|p| (p[0].clone(), p[1].clone()))
                .collect(),
        );
        if let Some((n, approx)) = maxlen {
            if approx {
                // Whole nodes only, and never below n.
                while stream.entries.len() >= n + STREAM_NODE {
                    for _ in 0..STREAM_NODE {
                        stream.entries.pop_first();
                    }
                }
            } else {
                while stream.entries.len() > n {
                    stream.entries.pop_first();
                }
            }
        }
        Ok(Reply::Bulk(format_id(id)))
    }

    fn set(&mut self, a: &[String]) -> Result<Reply, Reply> {
        if a.len() < 2 {
            return Err(Reply::err(
                "ERR wrong number of arguments for 'set' command",
            ));
        }
        let (key, value) = (&a[0], &a[1]);
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut expire: Option<u64> = None;
        let mut i = 2;
        let now = self.now_ms();
        while i < a.len() {
            let opt = a[i].to_ascii_uppercase();
            match opt.as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GET" => get = true,
                "KEEPTTL" => keepttl = true,
                "PX" | "EX" | "PXAT" | "EXAT" => {
                    if expire.is_some() || keepttl {
                        return Err(Reply::err(SYNTAX));
                    }
                    let n = a
                        .get(i + 1)
                        .ok_or_else(|| Reply::err(SYNTAX))
                        .and_then(|s| parse_i64(s).ok_or_else(|| Reply::err(NOT_INT)))?;
                    if n <= 0 {
                        return Err(Reply::err("ERR invalid expire time in 'set' command"));
                    }
                    let n = n as u64;
                    expire = Some(match opt.as_str() {
                        "PX" => now + n,
                        "EX" => now + n * 1000,
                        "PXAT" => n,
                        _ => n * 1000,
                    });
                    i += 1;
                }
                _ => return Err(Reply::err(SYNTAX)),
            }
            i += 1;
        }
        if nx && xx || keepttl && expire.is_some() {
            return Err(Reply::err(SYNTAX));
        }
        let old = if get { self.get_str(key)? } else { None };
        let exists = self.live(key).is_some();
        if nx && exists || xx && !exists {
            return Ok(if get {
                Reply::bulk_or_nil(old)
            } else {
                Reply::Nil
            });
        }
        let keep = if keepttl {
            self.live(key).and_then(|e| e.expire_at)
        } else {
            None
        };
        self.keys.insert(
            key.clone(),
            Entry {
                value: Value::Str(value.clone()),
                expire_at: expire.or(keep),
            },
        );
        Ok(if get {
            Reply::bulk_or_nil(old)
        } else {
            Reply::ok()
        })
    }

    fn zadd(&mut self, a: &[String]) -> Result<Reply, Reply> {
        if a.len() < 3 {
            return Err(Reply::err(
                "ERR wrong number of arguments for 'zadd' command",
            ));
        }
        let key = &a[0];
        let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
        let mut i = 1;
        while i < a.len() {
            match a[i].to_ascii_uppercase().as_str() {
                "NX" => nx = true,
                "XX" => xx = true,
                "GT" => gt = true,
                "LT" => lt = true,
                "CH" => ch = true,
                _ => break,
            }
            i += 1;
        }
        let pairs = &a[i..];
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Err(Reply::err(SYNTAX));
        }
        if nx && xx {
            return Err(Reply::err(
                "ERR XX and NX options at the same time are not compatible",
            ));
        }
        let mut parsed = Vec::new();
        for p in pairs.chunks(2) {
            let s =
                parse_score(&p[0]).ok_or_else(|| Reply::err("ERR value is not a valid float"))?;
            parsed.push((s, p[1].clone()));
        }
        let z = match self.zset_mut(key)? {
            Some(z) => z,
            None => {
                if xx {
                    return Ok(Reply::Int(0));
                }
                self.keys.insert(
                    key.clone(),
                    Entry {
                        value: Value::ZSet(BTreeMap::new()),
                        expire_at: None,
                    },
                );
                self.zset_mut(key)?.expect("just created")
            }
        };
        let (mut added, mut changed) = (0, 0);
        for (s, m) in parsed {
            match z.get(&m).copied() {
                None => {
                    if !xx {
                        z.insert(m, Score(s));
                        added += 1;
                    }
                }
                Some(old) => {
                    if nx || gt && s <= old.0 || lt && s >= old.0 {
                        continue;
                    }
                    if old.0 != s {
                        z.insert(m, Score(s));
                        changed += 1;
                    }
                }
            }
        }
        Ok(Reply::Int(if ch { added + changed } else { added }))
    }

    /// A summary of the key space for comparisons: each live key's type,
    /// value (a list's items, a sorted set's `member=score`s) and TTL in ms.
    pub(crate) fn dump(&self) -> BTreeMap<String, (String, Vec<String>, i64)> {
        let now = self.now_ms();
        self.keys
            .iter()
            .filter(|(_, e)| e.expire_at.is_none_or(|at| at >= now))
            .map(|(k, e)| {
                let items = match &e.value {
                    Value::Str(s) => vec![s.clone()],
                    Value::List(l) => l.iter().cloned().collect(),
                    Value::ZSet(z) => sorted(z)
                        .into_iter()
                        .map(|(s, m)| format!("{m}={}", format_score(s)))
                        .collect(),
                    Value::Stream(st) => st
                        .entries
                        .iter()
                        .map(|(id, f)| stream_item(&format_id(*id), f))
                        .collect(),
                };
                let ttl = e.expire_at.map_or(-1, |at| (at - now) as i64);
                (k.clone(), (e.value.type_name().to_owned(), items, ttl))
            })
            .collect()
    }
}

/// A stream entry in a dump: `<id> f1=v1 f2=v2 …`.
pub(crate) fn stream_item(id: &str, fields: &[(String, String)]) -> String {
    let mut out = id.to_owned();
    for (f, v) in fields {
        out.push_str(&format!(" {f}={v}"));
    }
    out
}

fn sorted(z: &BTreeMap<String, Score>) -> Vec<(f64, String)> {
    let mut v: Vec<(f64, String)> = z.iter().map(|(m, s)| (s.0, m.clone())).collect();
    v.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
    v
}

fn score_bound(s: &str) -> Result<(f64, bool), Reply> {
    let bad = || Reply::err("ERR min or max is not a float");
    match s.strip_prefix('(') {
        Some(rest) => Ok((parse_score(rest).ok_or_else(bad)?, true)),
        None => Ok((parse_score(s).ok_or_else(bad)?, false)),
    }
}

/// The indices `start..=stop` of a list of `len` (negative from the end).
fn range(len: usize, start: i64, stop: i64) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        return 0..0;
    }
    start as usize..(stop + 1) as usize
}
