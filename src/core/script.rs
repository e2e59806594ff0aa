//! The table of the Lua scripts (their text is in `src/scripts/`, one file
//! per script and per shared fragment; docs/PROTOCOL.md §5 says what each
//! keeps), the commands that run them, and the pure classification of their
//! replies from `redis::Value`.
//!
//! Classification is total: every `Value` maps to an outcome or to a
//! [`ReplyError`], never to a panic. Replies are decoded here rather than
//! through `FromRedisValue`, whose conversion errors claim the connection is
//! unrecoverable although the script ran.

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::names::{Channel, LineKey, OwnerToken, QueueNames, Target};
use super::outcome::{Fence, ReleaseOutcome, RenewOutcome};

/// A script's text, composed at build time from files of `src/scripts/`:
/// the fragments it uses (each written once: `fence`, `handover`,
/// `rw_handover`, `election`), then its own file, whose
/// header lists its KEYS, ARGV and replies.
macro_rules! lua {
    ($($file:literal),+ $(,)?) => {
        concat!($(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/", $file, ".lua"))),+)
    };
}
pub(crate) use lua;

/// The scripts, one line each: the variant of [`ScriptKind`], its name in
/// errors, and the files its text is composed of (`lua!`: the fragments it
/// uses, then its own file, whose header lists its KEYS, ARGV and replies).
macro_rules! scripts {
    ($($(#[$doc:meta])* $kind:ident $name:literal = [$($file:literal),+];)+) => {
        /// Which of the scripts.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum ScriptKind {
            $($(#[$doc])* $kind,)+
        }

        impl ScriptKind {
            /// Every script, in the order of the variants.
            pub(crate) const ALL: &[ScriptKind] = &[$(ScriptKind::$kind),+];

            pub(crate) fn source(self) -> &'static str {
                match self {
                    $(ScriptKind::$kind => lua!($($file),+),)+
                }
            }

            fn name(self) -> &'static str {
                match self {
                    $(ScriptKind::$kind => $name,)+
                }
            }
        }
    };
}

scripts! {
    /// A lock's acquire: a grant, a replay or a claim, or busy (and a
    /// registration).
    Acquire "acquire" = ["fence", "handover", "acquire"];
    /// The release of a lease key by token (a lock, a permit's slot, a
    /// writer), handing the key to the next registration.
    Release "release" = ["fence", "handover", "rw_handover", "release"];
    /// The renew of a lease key by token.
    Renew "renew" = ["renew"];
    /// A semaphore's acquire: a free slot, a replay or a claim, or busy.
    SemAcquire "semaphore acquire" = ["fence", "handover", "sem_acquire"];
    /// The release of a semaphore token whose slot is unknown.
    SemReleaseAny "semaphore release" = ["sem_release_any"];
    /// A read-write lease's read.
    RwRead "read" = ["fence", "handover", "rw_handover", "rw_read"];
    /// A read-write lease's write.
    RwWrite "write" = ["fence", "handover", "rw_handover", "rw_write"];
    /// The release of a reader, handing the lease over when it was the last.
    RwReadRelease "read release" = ["fence", "handover", "rw_handover", "rw_read_release"];
    /// The renew of a reader.
    RwReadRenew "read renew" = ["rw_read_renew"];
    /// An election's campaign (its calls: `core/election.rs`).
    Campaign "campaign" = ["fence", "election", "campaign"];
    /// A leader's proclaim of a new value.
    Proclaim "proclaim" = ["election", "proclaim"];
    /// A leader's resign.
    Resign "resign" = ["election", "resign"];
    /// The read of an election's leader and log (read-only).
    ElectRead "leader read" = ["elect_read"];
    /// Takes a locker's registration out of a hand-over queue.
    Deregister "deregister" = ["deregister"];
    /// A multi-key lease's acquire: every key at once, or reservations
    /// (its calls: `core/multi.rs`).
    MultiAcquire "multi-key acquire" = ["fence", "handover", "multi_acquire"];
    /// A multi-key lease's renew.
    MultiRenew "multi-key renew" = ["multi_renew"];
    /// A multi-key lease's release, handing each key over.
    MultiRelease "multi-key release" = ["fence", "handover", "multi_release"];
}

impl ScriptKind {
    /// The SHA-1 digest EVALSHA needs (computed by `redis::Script`).
    pub(crate) fn sha1(self) -> &'static str {
        static LOADED: LazyLock<Vec<redis::Script>> = LazyLock::new(|| {
            ScriptKind::ALL
                .iter()
                .map(|k| redis::Script::new(k.source()))
                .collect()
        });
        LOADED[self as usize].get_hash()
    }

    /// Whether a reply to this script granted (acquire) or extended
    /// (renew) the lease: the writes a replication check must wait for.
    pub(crate) fn grants(self, reply: &Value) -> bool {
        match self {
            ScriptKind::Acquire
            | ScriptKind::RwRead
            | ScriptKind::RwWrite
            | ScriptKind::Campaign => {
                matches!(classify_acquire(reply), Ok(AcquireReply::Acquired(_)))
            }
            ScriptKind::SemAcquire => {
                matches!(classify_permit(reply), Ok(PermitReply::Acquired { .. }))
            }
            ScriptKind::MultiAcquire => matches!(
                reply,
                Value::Array(items) if matches!(items.first(), Some(Value::BulkString(t)) if t == b"ok")
            ),
            ScriptKind::Renew | ScriptKind::RwReadRenew | ScriptKind::MultiRenew => {
                classify_renew(reply) == Ok(RenewOutcome::Renewed)
            }
            ScriptKind::Release
            | ScriptKind::SemReleaseAny
            | ScriptKind::RwReadRelease
            | ScriptKind::Proclaim
            | ScriptKind::Resign
            | ScriptKind::ElectRead
            | ScriptKind::Deregister
            | ScriptKind::MultiRelease => false,
        }
    }
}

/// What a lock's or a semaphore's acquire adds for the hand-over
/// (docs/PROTOCOL.md §4).
#[derive(Debug)]
pub(crate) struct AcquireHandover {
    /// The locker's registration as queued for this line
    /// ([`LineKey::queue_entry`]).
    pub(crate) entry: String,
    /// Whether this attempt registers (or refreshes the registration) if
    /// it finds the lease held: it waits and hears grants; not a try-once
    /// acquire.
    pub(crate) register: bool,
    pub(crate) reg_ms: u64,
    pub(crate) claim_ms: u64,
    pub(crate) channel: Channel,
    /// The channel's name for this key.
    pub(crate) channel_name: String,
    /// The line's release message, which the hand-over's notifications
    /// start with.
    pub(crate) message: String,
    /// The locker's grant token for this line: the owner its registration
    /// names, to whom a grant is made out ([`OwnerToken::grant_token`]).
    pub(crate) grant_token: OwnerToken,
    /// Whether the locker's registration is queued (as far as the replies
    /// told): only then is a grant to the grant token looked for.
    pub(crate) registered: bool,
    /// The highest fence a waiter of the line was given (a lock's): a
    /// value under the grant token is this attempt's only above it, so a
    /// hold taken under that token, or a grant data loss brought back, is
    /// never claimed (docs/PROTOCOL.md §4.3).
    pub(crate) floor: Option<Fence>,
    /// Whether the locker still has waiters once this attempt holds the
    /// lease: its registration then stays queued; else the attempt that
    /// gets the lease takes it out.
    pub(crate) keep: bool,
    /// Whether an attempt that keeps the registration also refreshes its
    /// bound if it gets the lease (its last refresh is getting old).
    pub(crate) refresh: bool,
}

/// One script invocation, built once and sent by either front end.
#[derive(Clone)]
pub(crate) struct ScriptCall {
    pub(crate) kind: ScriptKind,
    keys: Vec<String>,
    args: Vec<String>,
}

impl fmt::Debug for ScriptCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptCall")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl ScriptCall {
    /// A call of script `kind` (the election's calls are built in
    /// `core/election.rs`).
    pub(crate) fn new(kind: ScriptKind, keys: Vec<String>, args: Vec<String>) -> Self {
        ScriptCall { kind, keys, args }
    }

    #[cfg(test)]
    pub(crate) fn keys(&self) -> &[String] {
        &self.keys
    }

    #[cfg(test)]
    pub(crate) fn args(&self) -> &[String] {
        &self.args
    }

    /// The hash slot of the call's first key, which a cluster routes it by.
    pub(crate) fn slot(&self) -> Option<u16> {
        self.keys.first().map(|key| crate::cluster::slot_of(key))
    }

    /// The acquire of a lock, a permit (declaring the larger of its
    /// permits and its `slots`, a larger recorded count the script named,
    /// `['slots', n]`) or a side of a read-write lease (`intent_ms`: how
    /// long a waiting writer keeps readers out, 0 for none). `None` for a
    /// candidate or a multi-key lease: `core/election.rs` and
    /// `core/multi.rs` build theirs.
    pub(crate) fn acquire(
        target: &Target,
        token: OwnerToken,
        lease_ms: u64,
        fence_counter_ttl_ms: u64,
        intent_ms: u64,
        handover: Option<AcquireHandover>,
    ) -> Option<Self> {
        let mut args = vec![
            token.to_hex(),
            lease_ms.to_string(),
            fence_counter_ttl_ms.to_string(),
        ];
        let (kind, keys, queue) = match target {
            Target::Lock(names) => (
                ScriptKind::Acquire,
                vec![names.lock.clone(), names.fence.clone()],
                &names.queue,
            ),
            Target::Permit {
                names,
                permits,
                slots,
                ..
            } => {
                args.push(permits.to_string());
                let slots = names.slots_and_counters(*slots.max(permits));
                let keys = std::iter::once(names.permits.clone()).chain(slots);
                (ScriptKind::SemAcquire, keys.collect(), &names.queue)
            }
            Target::Read(names) | Target::Write(names) => {
                let kind = if let Target::Write(_) = target {
                    args.push(intent_ms.to_string());
                    ScriptKind::RwWrite
                } else {
                    ScriptKind::RwRead
                };
                let (write, read) = (names.write.clone(), names.read.clone());
                let keys = vec![write, read, names.intent.clone(), names.fence.clone()];
                (kind, keys, &names.queue)
            }
            Target::Leader { .. } | Target::Multi { .. } => return None,
        };
        let mut call = ScriptCall { kind, keys, args };
        call.add_handover(queue, handover);
        Some(call)
    }

    /// Appends the hand-over's keys and arguments ([`handover_lua`]'s
    /// `handover_args`) to an acquire, if it takes part.
    fn add_handover(&mut self, queue: &QueueNames, handover: Option<AcquireHandover>) {
        let Some(h) = handover else {
            return;
        };
        let grant = |named: bool| {
            if named {
                h.grant_token.to_hex()
            } else {
                String::new()
            }
        };
        self.keys.extend([
            queue.list.clone(),
            queue.flag.clone(),
            queue.reg_key(&h.entry),
        ]);
        self.args.extend([
            h.entry,
            h.reg_ms.to_string(),
            h.claim_ms.to_string(),
            h.channel.publish_command().to_owned(),
            h.channel_name,
            h.message,
            grant(h.registered),
            match (h.keep, h.refresh) {
                (false, _) => "d",
                (true, false) => "k",
                (true, true) => "r",
            }
            .to_owned(),
            grant(h.register),
            h.floor.map(|f| f.get().to_string()).unwrap_or_default(),
        ]);
    }

    /// This release (of a lock or a permit's slot) with the hand-over: a
    /// live registration in `queue` gets the key with the next fence of
    /// `counter` (docs/PROTOCOL.md §4.2).
    pub(crate) fn handing_over(
        mut self,
        counter: String,
        queue: &QueueNames,
        fence_counter_ttl_ms: u64,
    ) -> Self {
        self.keys
            .extend([counter, queue.list.clone(), queue.flag.clone()]);
        self.args.push(fence_counter_ttl_ms.to_string());
        self
    }

    /// This release (of a lock, with the hand-over) by a locker whose
    /// registration `reg`, if any, lingers in the queue (docs/PROTOCOL.md
    /// §4.4): the release never grants the key to it.
    pub(crate) fn skipping(mut self, reg: Option<String>) -> Self {
        self.args.extend(reg);
        self
    }

    /// This release (of permit slot `slot`, with the hand-over) serves
    /// each registration once per round: the one it grants the slot to
    /// leaves the queue until its locker's next attempt queues it again,
    /// so a second slot's release cannot grant it twice. The grant's
    /// notice names the slot.
    pub(crate) fn serving_slot(mut self, slot: u32) -> Self {
        self.args.extend([String::new(), slot.to_string()]);
        self
    }

    /// This release of a read-write lease with the hand-over: its other
    /// key (the readers' for a writer's release, the writer's for a
    /// reader's), which a hand-over may grant.
    pub(crate) fn with_rw_key(mut self, key: String) -> Self {
        self.keys.push(key);
        self
    }

    /// Removes the locker's registration, queued as `reg`, from `queue`.
    pub(crate) fn deregister(queue: &QueueNames, reg: String, owner: String) -> Self {
        ScriptCall {
            kind: ScriptKind::Deregister,
            keys: vec![queue.list.clone(), queue.reg_key(&reg)],
            args: vec![owner],
        }
    }

    /// The release by `token` (its hex, or a hold's whole value) of `keys`
    /// with script `kind` (a lease key's
    /// release, a reader's, a semaphore token's in whichever of the slots
    /// `keys` holds it), notifying `line`'s waiters.
    pub(crate) fn release(
        kind: ScriptKind,
        keys: Vec<String>,
        line: LineKey,
        token: String,
        namespace: &str,
        channel: Channel,
    ) -> Self {
        let args = vec![
            token,
            channel.publish_command().to_owned(),
            channel.name(namespace, line.id),
            line.message(),
        ];
        ScriptCall { kind, keys, args }
    }

    /// The renew by token of the lease in `keys` (a lock's, a permit's
    /// slot, a writer's: `Renew`; a reader's: `RwReadRenew`; a multi-key
    /// lease's lock names: `MultiRenew`).
    pub(crate) fn renew(kind: ScriptKind, keys: Vec<String>, token: String, lease_ms: u64) -> Self {
        let args = vec![token, lease_ms.to_string()];
        ScriptCall { kind, keys, args }
    }

    /// `EVALSHA <sha1> <numkeys> keys.. args..`
    pub(crate) fn evalsha(&self) -> redis::Cmd {
        self.command("EVALSHA", self.kind.sha1())
    }

    /// `EVAL <source> <numkeys> keys.. args..`, sent after a `NOSCRIPT`
    /// reply (which Redis answers without running anything). It runs the
    /// script and caches it in one round trip, on the node of the key:
    /// `SCRIPT LOAD` has no key, so a cluster client would send it to every
    /// primary and wait for all of them.
    pub(crate) fn eval(&self) -> redis::Cmd {
        self.command("EVAL", self.kind.source())
    }

    /// `<verb> <script> <numkeys> keys.. args..`, the verb in its read-only
    /// form for a script that writes nothing (a read-only user can run it).
    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let mut cmd = match self.kind {
            ScriptKind::ElectRead => redis::cmd(&format!("{verb}_RO")),
            _ => redis::cmd(verb),
        };
        cmd.arg(script)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// Many calls in one pipeline, each answered on its own (`ignore_errors`):
/// first `SCRIPT LOAD` of every script they run, once each (replies
/// ignored), then each call's `EVALSHA`, which then finds its script, so
/// the calls run in their order (a `NOSCRIPT` answered later with `EVAL`
/// would run after the ones behind it). The loads are the first
/// `len() - calls.len()` commands.
pub(crate) fn pipeline_loading(calls: &[ScriptCall]) -> redis::Pipeline {
    let mut kinds: Vec<ScriptKind> = Vec::new();
    let mut pipe = redis::pipe();
    for call in calls {
        if !kinds.contains(&call.kind) {
            kinds.push(call.kind);
            pipe.cmd("SCRIPT")
                .arg("LOAD")
                .arg(call.kind.source())
                .ignore();
        }
    }
    for call in calls {
        pipe.add_command(call.evalsha());
    }
    pipe.ignore_errors();
    pipe
}

/// What an acquire reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The lock is ours with this fence.
    Acquired(Fence),
    /// Someone holds it; their remaining time when Redis knows it.
    Busy(Option<Duration>),
    /// Someone holds it until this long after Redis read it, to the
    /// microsecond (`PTTL`'s millisecond plus where Redis's clock stood in
    /// it): a retry can be timed to reach Redis as the key expires.
    BusyFor(Duration),
    /// Busy as [`Busy`](Self::Busy), and the attempt registered the
    /// locker at this server time (`TIME`, ms): a lock's (docs/PROTOCOL.md
    /// §4.3).
    Registered(Option<Duration>, u64),
}

/// A reply whose shape none of the scripts produce. Its `Display` names the
/// shape only, never the content, which could be another owner's token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected reply to the {script} script: {shape}")]
pub struct ReplyError {
    script: &'static str,
    shape: String,
}

impl ReplyError {
    pub(crate) fn new(kind: ScriptKind, value: &Value) -> Self {
        ReplyError {
            script: kind.name(),
            shape: shape_of(value),
        }
    }
}

fn shape_of(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Int(n) => format!("integer {n}"),
        Value::BulkString(b) => format!("bulk string of {} bytes", b.len()),
        Value::Array(a) => format!("array of {} items", a.len()),
        Value::SimpleString(s) => format!("status of {} bytes", s.len()),
        Value::Okay => "OK status".into(),
        Value::Map(m) => format!("map of {} entries", m.len()),
        Value::Set(s) => format!("set of {} items", s.len()),
        Value::Double(_) => "double".into(),
        Value::Boolean(_) => "boolean".into(),
        Value::ServerError(_) => "error".into(),
        _ => "other RESP3 value".into(),
    }
}

/// Classifies the acquire script's reply (docs/PROTOCOL.md §3): a positive decimal
/// string that fits `u64` is a fence, an integer ≥ -2 or nil means busy.
pub(crate) fn classify_acquire(value: &Value) -> Result<AcquireReply, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::Acquire, value);
    match value {
        Value::BulkString(bytes) => parse_fence(bytes)
            .map(AcquireReply::Acquired)
            .ok_or_else(unexpected),
        Value::Int(ms) if *ms >= 0 => Ok(AcquireReply::Busy(Some(Duration::from_millis(
            ms.unsigned_abs(),
        )))),
        // -1: held without expiry; -2: gone between the checks. Neither
        // tells when the lock frees up.
        Value::Int(-2 | -1) | Value::Nil => Ok(AcquireReply::Busy(None)),
        Value::Array(items) => match items.as_slice() {
            [busy @ Value::Int(_), Value::Int(at)] if *at > 0 => match classify_acquire(busy)? {
                AcquireReply::Busy(remaining) => {
                    Ok(AcquireReply::Registered(remaining, at.unsigned_abs()))
                }
                _ => Err(unexpected()),
            },
            _ => Err(unexpected()),
        },
        _ => Err(unexpected()),
    }
}

/// Classifies the campaign script's reply: the acquire's, and `{us}` for
/// busy `us` microseconds (docs/PROTOCOL.md §7).
pub(crate) fn classify_campaign(value: &Value) -> Result<AcquireReply, ReplyError> {
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(us)] if *us >= 0 => Ok(AcquireReply::BusyFor(Duration::from_micros(
                us.unsigned_abs(),
            ))),
            _ => Err(ReplyError::new(ScriptKind::Campaign, value)),
        },
        other => classify_acquire(other),
    }
}

/// A positive fence, written with digits alone.
pub(crate) fn parse_fence(bytes: &[u8]) -> Option<Fence> {
    parse_digits(bytes).filter(|n| *n != 0).map(Fence::new)
}

/// A `u64` written with digits alone (no sign): a fence, a version's
/// term or sequence number.
pub(crate) fn parse_digits(bytes: &[u8]) -> Option<u64> {
    parse_u64(bytes).filter(|_| bytes.iter().all(u8::is_ascii_digit))
}

/// A `u64` as `str::parse` reads it (a leading `+` allowed).
pub(crate) fn parse_u64(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// What a semaphore acquire reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PermitReply {
    /// Slot `slot` is ours with this fence; with `next_waits`, the
    /// locker's next waiter is registered and no other slot is free, so it
    /// waits for its grant rather than attempting at once.
    Acquired {
        slot: u32,
        fence: Fence,
        next_waits: bool,
    },
    /// Every slot is held; the soonest to end has this remaining time,
    /// and the attempt registered at this server time (ms), if it did.
    Busy(Option<Duration>, Option<u64>),
    /// The semaphore is in use with another permit count.
    OtherCount(u32),
    /// The recorded count is this, more slots than the attempt declared:
    /// it must be sent again declaring them.
    MoreSlots(u32),
}

/// Classifies the semaphore acquire script's reply: `[slot, fence]` or
/// `[slot, fence, 1]` (the next waiter waits for its grant) with a slot
/// below the largest permit count and a fence as in [`classify_acquire`];
/// an integer ≥ -2 or nil means busy;
/// `['permits', n]` names the count in use, `['slots', n]` the slots to
/// declare.
pub(crate) fn classify_permit(value: &Value) -> Result<PermitReply, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::SemAcquire, value);
    // Busy as a lock's acquire is, registered or not.
    let busy = || match classify_acquire(value) {
        Ok(AcquireReply::Busy(remaining)) => Ok(PermitReply::Busy(remaining, None)),
        Ok(AcquireReply::Registered(remaining, at)) => Ok(PermitReply::Busy(remaining, Some(at))),
        _ => Err(unexpected()),
    };
    match value {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(slot), Value::BulkString(fence), rest @ ..]
                if matches!(rest, [] | [Value::Int(1)]) =>
            {
                let slot = u32::try_from(*slot)
                    .ok()
                    .filter(|s| *s < super::names::MAX_PERMITS)
                    .ok_or_else(unexpected)?;
                let fence = parse_fence(fence).ok_or_else(unexpected)?;
                Ok(PermitReply::Acquired {
                    slot,
                    fence,
                    next_waits: !rest.is_empty(),
                })
            }
            [Value::BulkString(tag), Value::Int(n)]
                if matches!(tag.as_slice(), b"permits" | b"slots") =>
            {
                let n = u32::try_from(*n)
                    .ok()
                    .filter(|n| (1..=super::names::MAX_PERMITS).contains(n))
                    .ok_or_else(unexpected)?;
                Ok(match tag.as_slice() {
                    b"permits" => PermitReply::OtherCount(n),
                    _ => PermitReply::MoreSlots(n),
                })
            }
            _ => busy(),
        },
        _ => busy(),
    }
}

/// Classifies the release script's reply.
pub(crate) fn classify_release(value: &Value) -> Result<ReleaseOutcome, ReplyError> {
    match value {
        // 3: released, and handed to a registration.
        Value::Int(1 | 3) => Ok(ReleaseOutcome::Released),
        Value::Int(0) => Ok(ReleaseOutcome::Expired),
        Value::Int(2) => Ok(ReleaseOutcome::Conflict),
        _ => Err(ReplyError::new(ScriptKind::Release, value)),
    }
}

/// Classifies the renew script's reply.
pub(crate) fn classify_renew(value: &Value) -> Result<RenewOutcome, ReplyError> {
    match value {
        Value::Int(1) => Ok(RenewOutcome::Renewed),
        Value::Int(0) => Ok(RenewOutcome::Expired),
        Value::Int(2) => Ok(RenewOutcome::Conflict),
        _ => Err(ReplyError::new(ScriptKind::Renew, value)),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_positive_decimal_string_is_a_fence() {
        assert_eq!(
            classify_acquire(&bulk("1796104174047001")),
            Ok(AcquireReply::Acquired(Fence::new(1_796_104_174_047_001)))
        );
        assert_eq!(
            classify_acquire(&bulk("18446744073709551615")),
            Ok(AcquireReply::Acquired(Fence::new(u64::MAX)))
        );
    }

    #[test]
    fn a_campaigns_one_integer_array_is_busy_for_that_many_microseconds() {
        assert_eq!(
            classify_campaign(&Value::Array(vec![Value::Int(1_234)])),
            Ok(AcquireReply::BusyFor(Duration::from_micros(1_234)))
        );
        assert_eq!(
            classify_campaign(&Value::Int(7)),
            Ok(AcquireReply::Busy(Some(Duration::from_millis(7))))
        );
        assert!(
            classify_acquire(&Value::Array(vec![Value::Int(1_234)])).is_err(),
            "only the campaign sends it"
        );
        for bad in [
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(-1)]),
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
            Value::Array(vec![bulk("5")]),
        ] {
            assert!(classify_campaign(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn zero_overflow_float_and_signed_strings_are_unexpected() {
        for s in [
            "0",
            "18446744073709551616",
            "1.796104174047e+15",
            "-5",
            "+5",
            "",
            "12a",
        ] {
            assert!(classify_acquire(&bulk(s)).is_err(), "{s:?}");
        }
    }

    #[test]
    fn integers_from_minus_two_and_nil_are_busy() {
        assert_eq!(
            classify_acquire(&Value::Int(1500)),
            Ok(AcquireReply::Busy(Some(Duration::from_millis(1500))))
        );
        assert_eq!(
            classify_acquire(&Value::Int(-1)),
            Ok(AcquireReply::Busy(None))
        );
        assert_eq!(
            classify_acquire(&Value::Int(-2)),
            Ok(AcquireReply::Busy(None))
        );
        assert_eq!(classify_acquire(&Value::Nil), Ok(AcquireReply::Busy(None)));
        assert!(classify_acquire(&Value::Int(-3)).is_err());
        assert!(classify_acquire(&Value::Okay).is_err());
    }

    #[test]
    fn release_and_renew_replies_map_to_their_outcomes() {
        assert_eq!(
            classify_release(&Value::Int(1)),
            Ok(ReleaseOutcome::Released)
        );
        assert_eq!(
            classify_release(&Value::Int(0)),
            Ok(ReleaseOutcome::Expired)
        );
        assert_eq!(
            classify_release(&Value::Int(2)),
            Ok(ReleaseOutcome::Conflict)
        );
        assert_eq!(
            classify_release(&Value::Int(3)),
            Ok(ReleaseOutcome::Released),
            "released and handed over"
        );
        assert!(classify_release(&Value::Int(4)).is_err());
        assert_eq!(classify_renew(&Value::Int(1)), Ok(RenewOutcome::Renewed));
        assert_eq!(classify_renew(&Value::Int(0)), Ok(RenewOutcome::Expired));
        assert_eq!(classify_renew(&Value::Int(2)), Ok(RenewOutcome::Conflict));
        assert!(classify_renew(&Value::Nil).is_err());
    }

    #[test]
    fn the_script_table_follows_the_kinds_order() {
        for (i, kind) in ScriptKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i, "{kind:?}");
        }
    }

    #[test]
    fn reply_error_names_the_shape_not_the_content() {
        let e = classify_acquire(&bulk("secret-token:12")).unwrap_err();
        let text = e.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("bulk string of 15 bytes"), "{text}");
    }

    #[test]
    fn the_evalsha_command_carries_the_sha1_and_both_keys() {
        use super::super::names::{KeyId, LockNames, Want};
        let names = LockNames::new("ns", KeyId::of("k"));
        let target = Target::new("ns", Want::Lock, KeyId::of("k"));
        let token = OwnerToken::from_bytes([1; 16]);
        let call = ScriptCall::acquire(&target, token, 500, 0, 0, None).unwrap();
        let packed = String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned();
        assert!(packed.contains(ScriptKind::Acquire.sha1()));
        assert!(packed.contains(&names.lock));
        assert!(packed.contains(&names.fence));
        assert_eq!(ScriptKind::Acquire.sha1().len(), 40);
    }

    #[test]
    fn a_permit_grant_is_a_slot_and_a_fence() {
        let reply = Value::Array(vec![Value::Int(2), bulk("1796104174047001")]);
        assert_eq!(
            classify_permit(&reply),
            Ok(PermitReply::Acquired {
                slot: 2,
                fence: Fence::new(1_796_104_174_047_001),
                next_waits: false,
            })
        );
        let waits = Value::Array(vec![Value::Int(2), bulk("17"), Value::Int(1)]);
        assert_eq!(
            classify_permit(&waits),
            Ok(PermitReply::Acquired {
                slot: 2,
                fence: Fence::new(17),
                next_waits: true,
            })
        );
        let odd = Value::Array(vec![Value::Int(2), bulk("17"), Value::Int(0)]);
        assert!(classify_permit(&odd).is_err());
        assert_eq!(
            classify_permit(&Value::Int(40)),
            Ok(PermitReply::Busy(Some(Duration::from_millis(40)), None))
        );
        assert_eq!(
            classify_permit(&Value::Int(-1)),
            Ok(PermitReply::Busy(None, None))
        );
        assert_eq!(
            classify_permit(&Value::Nil),
            Ok(PermitReply::Busy(None, None))
        );
        let registered = Value::Array(vec![Value::Int(40), Value::Int(1_700_000_000_000)]);
        assert_eq!(
            classify_permit(&registered),
            Ok(PermitReply::Busy(
                Some(Duration::from_millis(40)),
                Some(1_700_000_000_000)
            ))
        );
        let other = Value::Array(vec![bulk("permits"), Value::Int(4)]);
        assert_eq!(classify_permit(&other), Ok(PermitReply::OtherCount(4)));
    }

    #[test]
    fn odd_permit_replies_are_unexpected() {
        for reply in [
            Value::Array(vec![Value::Int(-1), bulk("5")]),
            Value::Array(vec![Value::Int(1024), bulk("5")]),
            Value::Array(vec![Value::Int(1), bulk("0")]),
            Value::Array(vec![Value::Int(1), Value::Int(0)]),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![bulk("permits"), Value::Int(0)]),
            Value::Array(vec![bulk("permits"), Value::Int(1025)]),
            Value::Array(vec![bulk("other"), Value::Int(3)]),
            Value::Int(-3),
            bulk("7"),
            Value::Okay,
        ] {
            assert!(classify_permit(&reply).is_err(), "{reply:?}");
        }
    }

    #[test]
    fn the_semaphore_calls_declare_every_slot_they_may_take() {
        use super::super::names::{KeyId, SemNames, Want};
        let names = SemNames::new("ns", KeyId::of("pool"));
        let token = OwnerToken::from_bytes([7; 16]);
        let permit = |slots| Target::Permit {
            names: names.clone(),
            permits: 3,
            slots,
            slot: None,
        };
        let call = ScriptCall::acquire(&permit(0), token, 500, 0, 0, None).unwrap();
        let new = Target::new("ns", Want::Permit { permits: 3 }, KeyId::of("pool"));
        assert_eq!(
            ScriptCall::acquire(&new, token, 500, 0, 0, None)
                .unwrap()
                .keys,
            call.keys
        );
        let slot = |i: u32| format!("{}{i}", names.slot_prefix);
        let counter = |i: u32| format!("{}{i}", names.fence_prefix);
        let mut keys = vec![names.permits.clone()];
        keys.extend((0..3).map(slot));
        keys.extend((0..3).map(counter));
        assert_eq!(call.keys, keys);
        // A larger recorded count the script named: its slots too.
        let wider = ScriptCall::acquire(&permit(5), token, 500, 0, 0, None).unwrap();
        assert_eq!(wider.keys.len(), 11);
        assert_eq!(wider.keys[5], slot(4));
        assert_eq!(wider.args[3], "3");
        assert_eq!(
            classify_permit(&Value::Array(vec![bulk("slots"), Value::Int(5)])),
            Ok(PermitReply::MoreSlots(5))
        );
        let packed = String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned();
        assert!(packed.contains(ScriptKind::SemAcquire.sha1()));
        let line = LineKey {
            kind: super::super::names::Kind::Semaphore,
            id: names.id,
        };
        let any = ScriptCall::release(
            ScriptKind::SemReleaseAny,
            names.slots(3).collect(),
            line,
            token.to_hex(),
            "ns",
            Channel::Standalone,
        );
        assert_eq!(any.keys, (0..3).map(slot).collect::<Vec<_>>());
        let packed = String::from_utf8_lossy(&any.evalsha().get_packed_command()).into_owned();
        assert!(packed.contains(&format!("sem:{}", names.id.to_hex())));
        assert!(ScriptKind::SemAcquire.grants(&Value::Array(vec![Value::Int(0), bulk("9")])));
        assert!(!ScriptKind::SemAcquire.grants(&Value::Int(5)));
    }

    /// Any `redis::Value` tree, for property tests and fuzz replays.
    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            (-3i64..3).prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            "[0-9]{0,22}".prop_map(|s| Value::BulkString(s.into_bytes())),
            ".{0,8}".prop_map(Value::SimpleString),
            any::<f64>().prop_map(Value::Double),
            any::<bool>().prop_map(Value::Boolean),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Set),
                proptest::collection::vec((inner.clone(), inner), 0..3).prop_map(Value::Map),
            ]
        })
    }

    proptest! {
        #[test]
        fn classification_is_total(v in arb_value()) {
            let _ = classify_acquire(&v);
            let _ = classify_release(&v);
            let _ = classify_renew(&v);
            let _ = classify_permit(&v);
        }

        #[test]
        fn every_accepted_fence_is_positive_and_round_trips(n in 1u64..) {
            prop_assert_eq!(
                classify_acquire(&Value::BulkString(n.to_string().into_bytes())),
                Ok(AcquireReply::Acquired(Fence::new(n)))
            );
        }
    }
}
