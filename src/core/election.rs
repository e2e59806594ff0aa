//! Leader election in the core (docs/PROTOCOL.md): the names of one
//! election, the leader's value, the scripts (campaign, proclaim, resign,
//! read) with their calls, and the pure decoding of their replies,
//! including the rule that tells the current leader from a read (§7).
//!
//! A campaign is an acquire of kind [`Want::Leader`](super::names::Want):
//! its waiting, line and token are a lock's, its reply is classified as a
//! lock's, and the lease is renewed by the lock's renew script. Only the
//! scripts differ, because every change of leader or value is also logged
//! to the election's stream, whose entry ids `<term>-<seq>` are the
//! [`Version`]s.
//!
//! ```text
//!   vacant ──campaign──▶ leader (term t, entry t-0) ──proclaim──▶ t-1, t-2 …
//!     ▲                        │ resign / lapse
//!     └──── vacancy t-(seq+1) ◀┘
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use super::core::{Core, LeaseId};
use super::names::{hex, opaque_debug, Channel, KeyId, OwnerToken};
use super::outcome::{Fence, RenewOutcome};
use super::script::{parse_digits, parse_u64, ReplyError, ScriptCall, ScriptKind};
use crate::error::Error;

/// The Redis names of one election (docs/PROTOCOL.md §2), all under the
/// name's hash tag.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ElectNames {
    pub(crate) id: KeyId,
    /// `<ns>:elect:{<sha>}`: the leader's lease, `<token>:<term>`.
    pub(crate) lease: String,
    /// `<ns>:elect-term:{<sha>}`: the term counter.
    pub(crate) term: String,
    /// `<ns>:elect-log:{<sha>}`: the change log (a stream).
    pub(crate) log: String,
}

impl ElectNames {
    pub(crate) fn new(namespace: &str, id: KeyId) -> Self {
        let sha = id.braced();
        ElectNames {
            id,
            lease: format!("{namespace}:elect:{sha}"),
            term: format!("{namespace}:elect-term:{sha}"),
            log: format!("{namespace}:elect-log:{sha}"),
        }
    }
}

opaque_debug!(ElectNames);

/// A leader's value: bytes the leader publishes (an address, an id). Never
/// shown: its `Debug` is its length. The default is no value (a
/// candidate's target before its value is set).
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct LeaderValue(Arc<[u8]>);

impl LeaderValue {
    /// The value, if it is at most `max` bytes long.
    pub(crate) fn checked(value: &[u8], max: usize) -> Result<Self, Error> {
        if value.len() > max {
            return Err(Error::ValueTooLarge {
                len: value.len(),
                max,
            });
        }
        Ok(LeaderValue(value.into()))
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for LeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaderValue({} bytes)", self.0.len())
    }
}

/// The version of an election's state: the id `<term>-<seq>` of its log
/// entry. A grant is `(term, 0)`, each proclaim adds one to `seq`, and the
/// end of a term is `(term, last seq + 1)`; versions only grow.
///
/// ```
/// let v = redlease::Version::new(17, 2);
/// assert_eq!(v.to_string(), "17.2");
/// assert!(redlease::Version::new(17, 3) > v && redlease::Version::new(18, 0) > v);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version {
    /// The term the change belongs to.
    pub term: u64,
    /// Its place within the term: 0 for the grant.
    pub seq: u64,
}

impl Version {
    /// The version `term.seq`.
    pub fn new(term: u64, seq: u64) -> Self {
        Version { term, seq }
    }

    /// Parses a stream id `<term>-<seq>`.
    fn parse(id: &[u8]) -> Option<Self> {
        let (term, seq) = std::str::from_utf8(id).ok()?.split_once('-')?;
        Some(Version {
            term: parse_digits(term.as_bytes())?,
            seq: parse_digits(seq.as_bytes())?,
        })
    }

    /// The stream id of this version.
    pub(crate) fn to_id(self) -> String {
        format!("{}-{}", self.term, self.seq)
    }

    /// The version after this one in the same term.
    pub(crate) fn next(self) -> Self {
        Version::new(self.term, self.seq.saturating_add(1))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.term, self.seq)
    }
}

/// The leader of an election as one read saw it
/// ([`Election::leader`](crate::Election::leader)).
///
/// Its `Debug` shows the term, the version, the remaining time and the
/// value's length, never the value.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term: its fence, strictly increasing across leaders.
    pub term: Fence,
    /// The value the leader campaigned with or last proclaimed.
    pub value: Vec<u8>,
    /// The version of that value.
    pub version: Version,
    /// The leader's lease time left as Redis counts it, when known.
    pub remaining: Option<Duration>,
}

impl Leader {
    /// A leader of term `term` with `value` at `version`, its remaining
    /// time unknown: for tests of code that handles leaders (a read gives
    /// the real ones).
    ///
    /// ```
    /// use redlease::{Fence, Leader, Version};
    /// let leader = Leader::new(Fence::new(7), b"host-a:4242", Version::new(7, 0));
    /// assert_eq!((leader.term.get(), leader.remaining), (7, None));
    /// ```
    pub fn new(term: Fence, value: impl Into<Vec<u8>>, version: Version) -> Self {
        Leader {
            term,
            value: value.into(),
            version,
            remaining: None,
        }
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("term", &self.term)
            .field("version", &self.version)
            .field("remaining", &self.remaining)
            .field("value_len", &self.value.len())
            .finish_non_exhaustive()
    }
}

/// A call of election script `kind` on `keys`: its own `args`, then where
/// it publishes (the command, the channel, the sha).
fn elect_call(
    kind: ScriptKind,
    names: &ElectNames,
    keys: Vec<String>,
    mut args: Vec<String>,
    namespace: &str,
    channel: Channel,
) -> ScriptCall {
    args.extend([
        channel.publish_command().to_owned(),
        channel.name(namespace, names.id),
        names.id.to_hex(),
    ]);
    ScriptCall::new(kind, keys, args)
}

/// The campaign of `token` with `value` for a lease of `lease_ms`.
pub(crate) fn campaign_call(
    names: &ElectNames,
    value: &LeaderValue,
    token: OwnerToken,
    lease_ms: u64,
    namespace: &str,
    channel: Channel,
) -> ScriptCall {
    let keys = vec![names.lease.clone(), names.term.clone(), names.log.clone()];
    // The value travels as hex, so that any bytes fit a script argument;
    // the scripts store the bytes themselves.
    let args = vec![token.to_hex(), lease_ms.to_string(), hex(&value.0)];
    elect_call(ScriptKind::Campaign, names, keys, args, namespace, channel)
}

/// The proclaim of `value` by `token`, whose last entry is `last`.
pub(super) fn proclaim_call(
    names: &ElectNames,
    value: &LeaderValue,
    token: OwnerToken,
    last: Version,
    namespace: &str,
    channel: Channel,
) -> ScriptCall {
    let keys = vec![names.lease.clone(), names.log.clone()];
    let args = vec![token.to_hex(), hex(&value.0), last.to_id()];
    elect_call(ScriptKind::Proclaim, names, keys, args, namespace, channel)
}

/// The resign (the release) of `token`.
pub(crate) fn resign_call(
    names: &ElectNames,
    token: OwnerToken,
    namespace: &str,
    channel: Channel,
) -> ScriptCall {
    let keys = vec![names.lease.clone(), names.log.clone()];
    let args = vec![token.to_hex()];
    elect_call(ScriptKind::Resign, names, keys, args, namespace, channel)
}

/// The read of an election's current state and, with `after`, of the
/// log's entries after that version.
pub(crate) fn read_call(names: &ElectNames, after: Option<Version>) -> ScriptCall {
    ScriptCall::new(
        ScriptKind::ElectRead,
        vec![names.lease.clone(), names.log.clone()],
        vec![after.map(Version::to_id).unwrap_or_default()],
    )
}

impl Core {
    /// The proclaim of `value` by the tracked leadership `lease`, whose
    /// last entry is `last`.
    ///
    /// # Errors
    ///
    /// `ShuttingDown` when shutdown already resigned it.
    pub(crate) fn proclaim_call(
        &self,
        lease: LeaseId,
        value: &LeaderValue,
        last: Version,
    ) -> Result<ScriptCall, Error> {
        let owned = self.leases.get(lease.0).ok_or(Error::ShuttingDown)?;
        let (namespace, channel) = (&self.settings.namespace, self.settings.channel);
        let names = ElectNames::new(namespace, owned.target.id);
        let call = proclaim_call(&names, value, owned.token, last, namespace, channel);
        Ok(call)
    }
}

/// What a proclaim reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProclaimReply {
    /// Logged (or found logged by a replay) as this version.
    Proclaimed(Version),
    /// The leadership is over: the lease expired or is another's.
    Ended(RenewOutcome),
}

/// Classifies the proclaim script's reply: a version id, or 0 (expired) / 2
/// (conflict).
pub(crate) fn classify_proclaim(value: &Value) -> Result<ProclaimReply, ReplyError> {
    match value {
        Value::BulkString(id) => Version::parse(id)
            .map(ProclaimReply::Proclaimed)
            .ok_or_else(|| ReplyError::new(ScriptKind::Proclaim, value)),
        Value::Int(0) => Ok(ProclaimReply::Ended(RenewOutcome::Expired)),
        Value::Int(2) => Ok(ProclaimReply::Ended(RenewOutcome::Conflict)),
        _ => Err(ReplyError::new(ScriptKind::Proclaim, value)),
    }
}

/// An election's state as one read found it (the default: vacant at
/// `0.0`, no log).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Current {
    /// The version of this state: of the leader's last entry, or of the
    /// vacancy (logged, or the one the next grant will log).
    pub(crate) version: Version,
    /// The leader, when one holds a lease whose grant is logged.
    pub(crate) leader: Option<Leader>,
}

/// The read script's reply: the lease's term and `PTTL`, the log's top and
/// the entries after the version asked for (oldest first, at most
/// [`READ_BATCH`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadReply {
    lease_term: Option<u64>,
    pttl: i64,
    pub(crate) top: Option<Entry>,
    pub(crate) entries: Vec<Entry>,
}

/// The most entries one read returns.
pub(crate) const READ_BATCH: usize = 64;

impl ReadReply {
    /// docs/PROTOCOL.md §7: the log's top is the current leader only while
    /// a lease of the same term lives; a top leader without it lapsed
    /// (vacant at `(term, seq + 1)`); a vacant top is vacant at its
    /// version; no log is vacant at `0.0`.
    pub(crate) fn current(&self) -> Current {
        let Some(top) = &self.top else {
            return Current::default();
        };
        let live = self.lease_term == Some(top.version.term);
        let remaining = u64::try_from(self.pttl).ok().map(Duration::from_millis);
        match &top.value {
            Some(_) if !live => Current {
                version: top.version.next(),
                leader: None,
            },
            value => Current {
                version: top.version,
                leader: value.as_ref().map(|_| top.leader(remaining)),
            },
        }
    }
}

/// Classifies the read script's reply (see [`ReadReply`]).
pub(crate) fn classify_read(value: &Value) -> Result<ReadReply, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::ElectRead, value);
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    let [Value::BulkString(term), Value::Int(pttl), top, rest @ ..] = items.as_slice() else {
        return Err(unexpected());
    };
    let lease_term = match term.as_slice() {
        b"" => None,
        digits => Some(parse_u64(digits).ok_or_else(unexpected)?),
    };
    let top = match top {
        Value::Nil => None,
        entry => Some(parse_entry(entry).ok_or_else(unexpected)?),
    };
    let entries = match rest {
        [] => Vec::new(),
        [Value::Array(entries)] if entries.len() <= READ_BATCH => {
            let entries = entries.iter().map(parse_entry);
            entries.collect::<Option<_>>().ok_or_else(unexpected)?
        }
        _ => return Err(unexpected()),
    };
    Ok(ReadReply {
        lease_term,
        pttl: *pttl,
        top,
        entries,
    })
}

/// Classifies the read script's reply as the current state.
pub(crate) fn classify_current(value: &Value) -> Result<Current, ReplyError> {
    classify_read(value).map(|read| read.current())
}

/// One log entry: its version, its predecessor, and the value when it
/// names a leader (`None`: a vacancy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) version: Version,
    pub(crate) prev: Option<Version>,
    pub(crate) value: Option<Vec<u8>>,
}

impl Entry {
    /// The leader this entry names, with `remaining` (for a leader entry).
    pub(crate) fn leader(&self, remaining: Option<Duration>) -> Leader {
        Leader {
            term: Fence::new(self.version.term),
            value: self.value.clone().unwrap_or_default(),
            version: self.version,
            remaining,
        }
    }
}

/// Parses `[id, [field, value, ...]]`.
fn parse_entry(entry: &Value) -> Option<Entry> {
    let Value::Array(entry) = entry else {
        return None;
    };
    let [Value::BulkString(id), Value::Array(fields)] = entry.as_slice() else {
        return None;
    };
    let version = Version::parse(id)?;
    let (mut leader, mut value, mut prev) = (false, None, None);
    for pair in fields.chunks(2) {
        match pair {
            [Value::BulkString(name), Value::BulkString(v)] => match name.as_slice() {
                b"leader" => leader = v.as_slice() == b"1",
                b"value" => value = Some(v.clone()),
                b"prev" => prev = Version::parse(v),
                _ => {}
            },
            _ => return None,
        }
    }
    Some(Entry {
        version,
        prev,
        value: leader.then(|| value.unwrap_or_default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::names::OwnerToken;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    fn entry(id: &str, leader: bool, value: &[u8]) -> Value {
        let mut fields = vec![bulk(b"prev"), bulk(b"0-0"), bulk(b"leader")];
        fields.push(bulk(if leader { b"1" } else { b"0" }));
        if leader {
            fields.extend([bulk(b"value"), bulk(value)]);
        }
        Value::Array(vec![bulk(id.as_bytes()), Value::Array(fields)])
    }

    fn read(term: &str, pttl: i64, top: Value) -> Value {
        Value::Array(vec![bulk(term.as_bytes()), Value::Int(pttl), top])
    }

    #[test]
    fn a_logged_leader_whose_lease_lives_is_current() {
        let current = classify_current(&read("17", 900, entry("17-2", true, b"host-a"))).unwrap();
        assert_eq!(current.version, Version::new(17, 2));
        let leader = current.leader.unwrap();
        assert_eq!(leader.term, Fence::new(17));
        assert_eq!(leader.value, b"host-a");
        assert_eq!(leader.remaining, Some(Duration::from_millis(900)));
    }

    #[test]
    fn a_lapsed_leader_is_never_current_and_its_vacancy_is_the_next_version() {
        let gone = classify_current(&read("", -2, entry("17-2", true, b"a"))).unwrap();
        assert_eq!((gone.version, gone.leader), (Version::new(17, 3), None));
        // A later term holds a lease whose grant is not logged yet.
        let unlogged = classify_current(&read("18", 900, entry("17-2", true, b"a"))).unwrap();
        assert_eq!(unlogged.leader, None);
    }

    #[test]
    fn a_vacancy_or_no_log_is_vacant_at_its_version() {
        let vacant = classify_current(&read("", -2, entry("17-3", false, b""))).unwrap();
        assert_eq!((vacant.version, vacant.leader), (Version::new(17, 3), None));
        let empty = classify_current(&read("", -2, Value::Nil)).unwrap();
        assert_eq!((empty.version, empty.leader), (Version::default(), None));
    }

    #[test]
    fn proclaim_replies_are_a_version_or_the_end() {
        assert_eq!(
            classify_proclaim(&bulk(b"17-1")),
            Ok(ProclaimReply::Proclaimed(Version::new(17, 1)))
        );
        assert_eq!(
            classify_proclaim(&Value::Int(0)),
            Ok(ProclaimReply::Ended(RenewOutcome::Expired))
        );
        assert_eq!(
            classify_proclaim(&Value::Int(2)),
            Ok(ProclaimReply::Ended(RenewOutcome::Conflict))
        );
        for odd in [bulk(b"17"), bulk(b"-1"), bulk(b"a-1"), Value::Int(1)] {
            assert!(classify_proclaim(&odd).is_err(), "{odd:?}");
        }
    }

    #[test]
    fn odd_reads_are_unexpected_and_never_panic() {
        for odd in [
            Value::Nil,
            read("x", 1, Value::Nil),
            read("", 1, bulk(b"1-0")),
            read("", 1, Value::Array(vec![bulk(b"1-0")])),
        ] {
            assert!(classify_current(&odd).is_err(), "{odd:?}");
        }
    }

    #[test]
    fn values_too_large_are_refused_and_never_shown() {
        let e = LeaderValue::checked(b"secret-value", 4).unwrap_err();
        assert_eq!(e.code(), "VALUE_TOO_LARGE");
        assert!(!e.to_string().contains("secret"), "{e}");
        let value = LeaderValue::checked(b"secret", 6).unwrap();
        assert_eq!(format!("{value:?}"), "LeaderValue(6 bytes)");
        let leader = Leader {
            term: Fence::new(1),
            value: b"secret".to_vec(),
            version: Version::new(1, 0),
            remaining: None,
        };
        assert!(!format!("{leader:?}").contains("secret"));
    }

    #[test]
    fn the_calls_carry_the_value_as_hex_and_the_names() {
        let names = ElectNames::new("ns", KeyId::of("billing"));
        let value = LeaderValue::checked(&[0, 0xff, b':'], 16).unwrap();
        let token = OwnerToken::from_bytes([3; 16]);
        let call = campaign_call(&names, &value, token, 500, "ns", Channel::Standalone);
        let packed = String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned();
        for part in [&names.lease, &names.term, &names.log, &"00ff3a".to_owned()] {
            assert!(packed.contains(part.as_str()), "{part}");
        }
        assert!(names.lease.starts_with("ns:elect:{"));
        let read = String::from_utf8_lossy(&read_call(&names, None).evalsha().get_packed_command())
            .into_owned();
        assert!(read.contains("EVALSHA_RO"));
    }
}
