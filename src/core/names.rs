//! Key validation and the names stored in Redis: every name carries the
//! lowercase hex SHA-256 of the key inside a hash tag, so the lock, its fence
//! counter and (in cluster mode) its release channel share one slot.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::election::{ElectNames, LeaderValue};
use super::multi::KeySet;
use super::outcome::Fence;
use super::script::{parse_fence, parse_u64};
use crate::error::Error;

/// The SHA-256 of a key: identifies a key's line and its notifications
/// without keeping the key itself. With `Config::key_hash_tags`, a key that
/// carries a Redis hash tag also keeps the tag's digest, which its stored
/// names and (on Redis Cluster) its notification channel are hashed by.
/// Identity (equality, hashing, order) is the key's digest alone: the tag
/// follows from the key.
#[derive(Clone, Copy)]
pub(crate) struct KeyId {
    digest: [u8; 32],
    tag: Option<[u8; 32]>,
}

impl PartialEq for KeyId {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for KeyId {}

impl std::hash::Hash for KeyId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.digest.hash(state);
    }
}

impl PartialOrd for KeyId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KeyId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.digest.cmp(&other.digest)
    }
}

impl KeyId {
    /// The id of a digest, without a hash tag's.
    fn untagged(digest: [u8; 32]) -> Self {
        KeyId { digest, tag: None }
    }

    pub(crate) fn of(key: &str) -> Self {
        KeyId::untagged(Sha256::digest(key.as_bytes()).into())
    }

    /// The id of `key`, hashed by its Redis hash tag when `tags` is on and
    /// the key has one (docs/PROTOCOL.md §2).
    pub(crate) fn named(key: &str, tags: bool) -> Self {
        let tag = hash_tag(key)
            .filter(|_| tags)
            .map(|tag| Sha256::digest(tag.as_bytes()).into());
        KeyId {
            tag,
            ..Self::of(key)
        }
    }

    /// What a stored name carries in its hash tag: `{<sha>}`, or with a
    /// key's hash tag `{<sha(tag)>}:<sha>`.
    pub(crate) fn braced(self) -> String {
        let mut s = String::with_capacity(if self.tag.is_some() { 131 } else { 66 });
        s.push('{');
        push_hex(&mut s, self.tag.as_ref().unwrap_or(&self.digest));
        s.push('}');
        if self.tag.is_some() {
            s.push(':');
            push_hex(&mut s, &self.digest);
        }
        s
    }

    /// The id of this key's notification channel on Redis Cluster: the
    /// key's own, or its hash tag's (keys of one tag share a channel).
    pub(crate) fn channel_id(self) -> KeyId {
        KeyId::untagged(self.tag.unwrap_or(self.digest))
    }

    /// Parses the lowercase hex form carried by release notifications.
    pub(crate) fn from_hex(hex: &[u8]) -> Option<Self> {
        if hex.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
            *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
        }
        Some(KeyId::untagged(out))
    }

    pub(crate) fn to_hex(self) -> String {
        hex(&self.digest)
    }

    /// The digest's first 8 bytes, as a number.
    pub(crate) fn prefix(self) -> u64 {
        be_u64(&self.digest)
    }
}

/// The Redis hash tag of `key`: the text between its first `{` and the
/// next `}`, when not empty (the Cluster routing rule).
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let rest = &key[open + 1..];
    let close = rest.find('}')?;
    (close > 0).then(|| &rest[..close])
}

/// `Debug` as the type's name alone: a key's digest identifies it to
/// anyone who can guess it, names carry the digest, tokens are secret.
macro_rules! opaque_debug {
    ($($t:ty),+) => {$(
        impl std::fmt::Debug for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($t), "(..)"))
            }
        }
    )+};
}
pub(crate) use opaque_debug;

opaque_debug!(KeyId, LockNames, QueueNames, SemNames, RwNames, OwnerToken);

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// Appends the lowercase hex of `bytes` to `s`, 32 bytes at a time
/// through a buffer on the stack (one copy, not a `push` per digit).
fn push_hex(s: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for chunk in bytes.chunks(32) {
        let mut buf = [0u8; 64];
        for (pair, b) in buf.chunks_exact_mut(2).zip(chunk) {
            pair[0] = DIGITS[usize::from(b >> 4)];
            pair[1] = DIGITS[usize::from(b & 0xf)];
        }
        // Hex digits are ASCII: this never fails.
        s.push_str(std::str::from_utf8(&buf[..2 * chunk.len()]).unwrap_or_default());
    }
}

/// Checks a key against the rules of docs/PROTOCOL.md §1.
pub(crate) fn validate_key(key: &str, max_key_bytes: usize) -> Result<(), Error> {
    let reason = if key.is_empty() {
        "must not be empty".to_owned()
    } else if key.len() > max_key_bytes {
        format!(
            "is {} bytes long; max_key_bytes is {max_key_bytes}",
            key.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::InvalidKey { reason })
}

/// The Redis names of one key's lock.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct LockNames {
    pub(crate) id: KeyId,
    /// `<ns>:lock:{<sha>}`
    pub(crate) lock: String,
    /// `<ns>:lock-fence:{<sha>}`
    pub(crate) fence: String,
    /// The hand-over queue's names (`lock-`).
    pub(crate) queue: QueueNames,
}

impl LockNames {
    pub(crate) fn new(namespace: &str, id: KeyId) -> Self {
        let sha = id.braced();
        LockNames {
            id,
            lock: lock_name(namespace, &sha),
            fence: [namespace, ":lock-fence:", &sha].concat(),
            queue: QueueNames::new(namespace, "lock", &sha),
        }
    }
}

/// The names of one key's hand-over queue (docs/PROTOCOL.md §4.1), for a
/// lock (`lock-`), a semaphore (`sem-`) or a read-write lease (`rw-`).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct QueueNames {
    /// `<ns>:<kind>-queue:{<sha>}`: the registrations of waiting lockers,
    /// in arrival order.
    pub(crate) list: String,
    /// `<ns>:<kind>-queued:{<sha>}`: set while the queue may hold entries.
    pub(crate) flag: String,
    /// `<ns>:<kind>-reg:{<sha>}:`, followed by a registration id.
    pub(crate) reg_prefix: String,
}

impl QueueNames {
    fn new(namespace: &str, kind: &str, sha: &str) -> Self {
        QueueNames {
            list: [namespace, ":", kind, "-queue:", sha].concat(),
            flag: [namespace, ":", kind, "-queued:", sha].concat(),
            reg_prefix: [namespace, ":", kind, "-reg:", sha, ":"].concat(),
        }
    }

    /// The registration key of the queue entry `entry`.
    pub(crate) fn reg_key(&self, entry: &str) -> String {
        [&self.reg_prefix, entry].concat()
    }

    /// The queue `line` waits in.
    pub(crate) fn of(namespace: &str, line: LineKey) -> Self {
        let kind = match line.kind {
            // A set's line waits in each of its keys' lock queues.
            Kind::Lock | Kind::Multi => "lock",
            Kind::Semaphore => "sem",
            Kind::Read | Kind::Write => "rw",
            // Not used yet: candidates wait without the hand-over.
            Kind::Leader => "elect",
        };
        QueueNames::new(namespace, kind, &line.id.braced())
    }
}

/// A locker's registration id in the hand-over queues: random, drawn once
/// per locker, not secret (a grant is made out to a token, never to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RegId(pub(crate) u64);

impl RegId {
    pub(crate) fn to_hex(self) -> String {
        format!("{:016x}", self.0)
    }

    fn from_hex(hex: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(hex).ok().filter(|t| t.len() == 16)?;
        u64::from_str_radix(text, 16).ok().map(RegId)
    }
}

/// What a hand-over notification says (docs/PROTOCOL.md §4.2, §4.3): the
/// payload `<message>:g:<entry>:<fence>:<claim_ms>:<ms>:<slot>:<owner id>` for a grant to the
/// queue entry `entry` ([`LineKey::queue_entry`]), `<message>:c:<fence>`
/// for a grant that was claimed (published only by older lockers, still
/// heard), where `<message>` is the line's release
/// message ([`LineKey::message`]: the sha for a lock, `sem:<sha>` for a
/// semaphore, `rw:<sha>` for a read-write lease, whose claims name no
/// line: the line is the writers').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// A grant to `reg`'s registration.
    Granted(GrantNotice),
    Claimed,
}

/// What a grant's notice says (docs/PROTOCOL.md §8); older versions
/// publish no server time, slot or owner id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantNotice {
    pub(crate) reg: RegId,
    pub(crate) fence: Option<Fence>,
    /// The claim window.
    pub(crate) claim: Duration,
    /// The grant's server time, in ms.
    pub(crate) at_ms: Option<u64>,
    /// A semaphore's slot.
    pub(crate) slot: Option<u32>,
    /// The owner's id ([`OwnerToken::notice_id`]): whose grant it is.
    pub(crate) owner: Option<u64>,
}

impl Handover {
    /// The line and what happened, for a hand-over payload; `None` for any
    /// other payload (a plain release is the bare message).
    pub(crate) fn parse(message: &[u8]) -> Option<(LineKey, Handover)> {
        let (mut kind, message) = message_kind(message);
        let mut parts = message.split(|b| *b == b':');
        let id = KeyId::from_hex(parts.next()?)?;
        let notice = match parts.next()? {
            b"g" => {
                let mut entry = parts.next()?;
                if kind == Kind::Write {
                    let (side, rest) = entry.split_first()?;
                    kind = match side {
                        b'r' => Kind::Read,
                        b'w' => Kind::Write,
                        _ => return None,
                    };
                    entry = rest;
                }
                let reg = RegId::from_hex(entry)?;
                let fence = parse_fence(parts.next()?);
                let claim = parse_u64(parts.next()?)?;
                Handover::Granted(GrantNotice {
                    reg,
                    fence,
                    claim: Duration::from_millis(claim),
                    at_ms: parts.next().and_then(parse_u64),
                    slot: parts
                        .next()
                        .and_then(parse_u64)
                        .and_then(|slot| u32::try_from(slot).ok())
                        .filter(|slot| *slot < MAX_PERMITS),
                    owner: parts.next().and_then(RegId::from_hex).map(|id| id.0),
                })
            }
            b"c" => Handover::Claimed,
            _ => return None,
        };
        Some((LineKey { kind, id }, notice))
    }
}

/// `<ns>:lock:{<sha>}` (`braced`: [`KeyId::braced`])
fn lock_name(namespace: &str, braced: &str) -> String {
    [namespace, ":lock:", braced].concat()
}

/// `<ns>:sem:{<sha>}:`
fn sem_slot_prefix(namespace: &str, braced: &str) -> String {
    format!("{namespace}:sem:{braced}:")
}

/// `<ns>:rw-write:{<sha>}`
fn rw_write_name(namespace: &str, braced: &str) -> String {
    format!("{namespace}:rw-write:{braced}")
}

/// What a line of waiters is for. A lock and a semaphore of the same key
/// are unrelated: each has its own line, names and notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Lock,
    Semaphore,
    /// The readers of a read-write lease.
    Read,
    /// The writers of a read-write lease.
    Write,
    /// The candidates of an election.
    Leader,
    /// The waiters of a multi-key lease: the line's id is its key set's
    /// (`core/multi.rs`), not a key's.
    Multi,
}

/// Identifies one line of waiters: the key and what is acquired on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LineKey {
    pub(crate) kind: Kind,
    pub(crate) id: KeyId,
}

impl Kind {
    /// Every kind, for lookups of all the lines of one key.
    pub(crate) const ALL: [Kind; 5] = [
        Kind::Lock,
        Kind::Semaphore,
        Kind::Read,
        Kind::Write,
        Kind::Leader,
    ];
}

impl LineKey {
    pub(crate) fn new(kind: Kind, id: KeyId) -> Self {
        LineKey { kind, id }
    }

    #[cfg(test)]
    pub(crate) fn lock(id: KeyId) -> Self {
        LineKey::new(Kind::Lock, id)
    }

    /// The line of a multi-key lease's key set `set`.
    pub(crate) fn multi(set: KeyId) -> Self {
        LineKey::new(Kind::Multi, set)
    }

    /// The entry of a locker's registration `reg` in this line's queue: the
    /// id, or for a read-write lease `r<id>` (its readers) or `w<id>` (its
    /// writers), which wait in one queue.
    pub(crate) fn queue_entry(self, reg: RegId) -> String {
        match self.kind {
            Kind::Lock | Kind::Semaphore | Kind::Leader => reg.to_hex(),
            Kind::Multi => super::multi::multi_reg(reg, self.id).to_hex(),
            Kind::Read => format!("r{}", reg.to_hex()),
            Kind::Write => format!("w{}", reg.to_hex()),
        }
    }

    /// The release notification's message: the key's sha for a lock,
    /// `sem:<sha>` for a semaphore (docs/PROTOCOL.md §5.2), `rw:<sha>` for a read-write
    /// lease (docs/PROTOCOL.md §5.3), so one channel serves all.
    pub(crate) fn message(self) -> String {
        match self.kind {
            Kind::Lock => self.id.to_hex(),
            Kind::Semaphore => format!("sem:{}", self.id.to_hex()),
            Kind::Read | Kind::Write => format!("rw:{}", self.id.to_hex()),
            // The vacancy an election's resign publishes (its own script
            // writes the version; candidates only read the `r`).
            Kind::Leader => format!("e:{}:0-0:r", self.id.to_hex()),
            // A set's release publishes each key's lock message.
            Kind::Multi => String::new(),
        }
    }

    /// The lines a release of a grant of this line may let in: this line,
    /// and for a read-write lease both of its lines (a reader's release
    /// may let in a writer, a writer's release readers and writers).
    pub(crate) fn freed_by_release(self) -> impl Iterator<Item = LineKey> {
        let (first, readers) = match self.kind {
            Kind::Read | Kind::Write => (Kind::Write, Some(Kind::Read)),
            kind => (kind, None),
        };
        let kinds = std::iter::once(first).chain(readers);
        kinds.map(move |kind| LineKey { kind, id: self.id })
    }

    /// The lines a release notification's message is for: a read-write
    /// lease's release may let in readers and writers alike.
    pub(crate) fn from_message(message: &[u8]) -> Vec<Self> {
        if message.starts_with(b"e:") {
            // Only a vacancy (`r`) lets a candidate in; a new leader (`l`)
            // or value (`v`) does not.
            return election_notice(message)
                .filter(|(_, what)| *what == b"r")
                .map(|(id, _)| LineKey::new(Kind::Leader, id))
                .into_iter()
                .collect();
        }
        let (kind, hex) = message_kind(message);
        let ids = KeyId::from_hex(hex).into_iter();
        ids.flat_map(|id| LineKey { kind, id }.freed_by_release())
            .collect()
    }
}

/// The kind of line a release or hand-over message names by its prefix
/// (`sem:`, `rw:`: the writers', standing for both sides; none for a
/// lock), and the rest of it.
fn message_kind(message: &[u8]) -> (Kind, &[u8]) {
    if let Some(rest) = message.strip_prefix(b"sem:") {
        (Kind::Semaphore, rest)
    } else if let Some(rest) = message.strip_prefix(b"rw:") {
        (Kind::Write, rest)
    } else {
        (Kind::Lock, message)
    }
}

/// The election an `e:<sha>:<version>:<what>` notification is about, and
/// its `what` (`r` vacant, `l` new leader, `v` new value); every one of
/// them may change what an observer of the election sees.
pub(crate) fn election_notice(message: &[u8]) -> Option<(KeyId, &[u8])> {
    let mut parts = message.strip_prefix(b"e:")?.split(|b| *b == b':');
    let id = KeyId::from_hex(parts.next()?)?;
    let _version = parts.next()?;
    let what = parts.next()?;
    parts.next().is_none().then_some((id, what))
}

/// The Redis names of one key's semaphore (docs/PROTOCOL.md §5.2). Slot `i` is
/// `<slot prefix><i>` with its fence counter `<fence prefix><i>`; the
/// prefixes share the hash tag.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SemNames {
    pub(crate) id: KeyId,
    /// `<ns>:sem-permits:{<sha>}`: the permit count in use.
    pub(crate) permits: String,
    /// `<ns>:sem:{<sha>}:`
    pub(crate) slot_prefix: String,
    /// `<ns>:sem-fence:{<sha>}:`
    pub(crate) fence_prefix: String,
    /// The hand-over queue's names (`sem-`).
    pub(crate) queue: QueueNames,
}

impl SemNames {
    pub(crate) fn new(namespace: &str, id: KeyId) -> Self {
        let sha = id.braced();
        SemNames {
            id,
            permits: format!("{namespace}:sem-permits:{sha}"),
            slot_prefix: sem_slot_prefix(namespace, &sha),
            fence_prefix: format!("{namespace}:sem-fence:{sha}:"),
            queue: QueueNames::new(namespace, "sem", &sha),
        }
    }

    /// Slots `0..n`, then their fence counters: what a script that may
    /// take any of them declares.
    pub(crate) fn slots_and_counters(&self, n: u32) -> impl Iterator<Item = String> + '_ {
        let counters = (0..n).map(|i| format!("{}{i}", self.fence_prefix));
        self.slots(n).chain(counters)
    }

    /// Slots `0..n`: what the release of a token in any of them declares.
    pub(crate) fn slots(&self, n: u32) -> impl Iterator<Item = String> + '_ {
        (0..n).map(|i| format!("{}{i}", self.slot_prefix))
    }
}

/// The Redis names of one key's read-write lease (docs/PROTOCOL.md §5.3).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RwNames {
    pub(crate) id: KeyId,
    /// `<ns>:rw-write:{<sha>}`: the writer, `<token>:<fence>`.
    pub(crate) write: String,
    /// `<ns>:rw-read:{<sha>}`: the readers, token → expiry in server ms.
    pub(crate) read: String,
    /// `<ns>:rw-intent:{<sha>}`: a waiting writer's intent.
    pub(crate) intent: String,
    /// `<ns>:rw-fence:{<sha>}`: the writers' fence counter.
    pub(crate) fence: String,
    /// The hand-over queue's names (`rw-`).
    pub(crate) queue: QueueNames,
}

impl RwNames {
    pub(crate) fn new(namespace: &str, id: KeyId) -> Self {
        let sha = id.braced();
        RwNames {
            id,
            write: rw_write_name(namespace, &sha),
            read: format!("{namespace}:rw-read:{sha}"),
            intent: format!("{namespace}:rw-intent:{sha}"),
            fence: format!("{namespace}:rw-fence:{sha}"),
            queue: QueueNames::new(namespace, "rw", &sha),
        }
    }
}

/// What one token holds or asks for, with the names its scripts need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Lock(LockNames),
    /// A semaphore of `permits`; `slot` once a grant named it (an acquire
    /// whose outcome is unknown holds some slot, or none); `slots` its
    /// attempts declare: `permits`, or a larger recorded count.
    Permit {
        names: SemNames,
        permits: u32,
        slots: u32,
        slot: Option<u32>,
    },
    /// A reader of a read-write lease.
    Read(RwNames),
    /// The writer of a read-write lease.
    Write(RwNames),
    /// A candidate of an election, with the value it campaigns with.
    Leader {
        names: ElectNames,
        value: LeaderValue,
    },
    /// A multi-key lease: its keys, their lock names in the caller's
    /// order, and the waiter's age (server µs, `0` until a busy reply
    /// gave it) that its reservations carry.
    Multi {
        keys: KeySet,
        names: Vec<LockNames>,
        since: u64,
    },
}

impl Target {
    pub(crate) fn new(namespace: &str, want: Want, id: KeyId) -> Self {
        match want {
            Want::Lock => Target::Lock(LockNames::new(namespace, id)),
            Want::Permit { permits } => Target::Permit {
                names: SemNames::new(namespace, id),
                permits,
                slots: permits,
                slot: None,
            },
            Want::Read => Target::Read(RwNames::new(namespace, id)),
            Want::Write => Target::Write(RwNames::new(namespace, id)),
            Want::Leader => Target::Leader {
                names: ElectNames::new(namespace, id),
                value: LeaderValue::default(),
            },
            // Built by `Target::multi`: one key's id does not name a set.
            Want::Multi => Target::multi(namespace, KeySet::single(id)),
        }
    }

    /// A multi-key lease of `keys`.
    pub(crate) fn multi(namespace: &str, keys: KeySet) -> Self {
        Target::Multi {
            names: keys.names(namespace),
            keys,
            since: 0,
        }
    }

    /// What it acquires, and the id of its line.
    fn want(&self) -> (Want, KeyId) {
        match self {
            Target::Lock(names) => (Want::Lock, names.id),
            Target::Permit { names, permits, .. } => (Want::Permit { permits: *permits }, names.id),
            Target::Read(names) => (Want::Read, names.id),
            Target::Write(names) => (Want::Write, names.id),
            Target::Leader { names, .. } => (Want::Leader, names.id),
            Target::Multi { keys, .. } => (Want::Multi, keys.set),
        }
    }

    /// What a token that holds (or may hold) this keeps: the key's digest
    /// and kind, without the names.
    pub(crate) fn held(&self) -> HeldTarget {
        let (want, id) = self.want();
        let (slot, members) = match self {
            Target::Permit { slot, .. } => (*slot, None),
            Target::Multi { keys, .. } => (None, Some(keys.members.clone())),
            _ => (None, None),
        };
        HeldTarget {
            id,
            want,
            slot,
            members,
        }
    }

    pub(crate) fn line(&self) -> LineKey {
        let (want, id) = self.want();
        LineKey::new(want.kind(), id)
    }
}

/// What a tracked lease or an orphan's token holds, without its Redis
/// names: the key's digest, what was acquired on it and (for a permit) the
/// slot a grant named. 10 000 held leases would otherwise keep 20 000 to
/// 40 000 name strings of about 100 bytes; the one name a release or renew
/// needs is built again from the namespace when it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldTarget {
    pub(crate) id: KeyId,
    pub(crate) want: Want,
    /// A permit's slot, once a grant named it (an acquire whose outcome is
    /// unknown holds some slot, or none).
    pub(crate) slot: Option<u32>,
    /// A multi-key lease's keys, in its caller's order (its `id` is the
    /// set's).
    pub(crate) members: Option<Arc<[KeyId]>>,
}

impl HeldTarget {
    pub(crate) fn line(&self) -> LineKey {
        LineKey::new(self.want.kind(), self.id)
    }

    /// The names its release or renew needs, built from the namespace.
    pub(crate) fn names(&self, namespace: &str) -> HeldNames {
        let sha = self.id.braced();
        match (self.want, self.slot) {
            (Want::Lock, _) => HeldNames::Key(lock_name(namespace, &sha)),
            (Want::Write, _) => HeldNames::Key(rw_write_name(namespace, &sha)),
            (Want::Permit { .. }, Some(slot)) => {
                HeldNames::Key(format!("{}{slot}", sem_slot_prefix(namespace, &sha)))
            }
            (Want::Permit { permits }, None) => {
                HeldNames::AnySlot(SemNames::new(namespace, self.id), permits)
            }
            (Want::Read, _) => HeldNames::Reader(RwNames::new(namespace, self.id)),
            (Want::Leader, _) => HeldNames::Election(ElectNames::new(namespace, self.id)),
            (Want::Multi, _) => HeldNames::Multi(
                self.members
                    .iter()
                    .flat_map(|m| m.iter())
                    .map(|id| (*id, lock_name(namespace, &id.braced())))
                    .collect(),
            ),
        }
    }
}

/// What the release or renew of a [`HeldTarget`] names.
#[derive(Debug)]
pub(crate) enum HeldNames {
    /// The one key the lease lives in: a lock's, a writer's, a permit's slot.
    Key(String),
    /// A semaphore of this many permits, slot unknown: its release frees
    /// whichever slot the token holds.
    AnySlot(SemNames, u32),
    /// A reader of a read-write lease.
    Reader(RwNames),
    /// An election's leader: released by its resign.
    Election(ElectNames),
    /// A multi-key lease's keys and their lock names, in its caller's
    /// order.
    Multi(Vec<(KeyId, String)>),
}

impl HeldNames {
    /// The key a renew extends by token, for a lease in one key.
    pub(crate) fn lease_key(self) -> Option<String> {
        match self {
            HeldNames::Key(key) => Some(key),
            HeldNames::Election(names) => Some(names.lease),
            HeldNames::AnySlot(..) | HeldNames::Reader(_) | HeldNames::Multi(_) => None,
        }
    }
}

/// What an acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    Lock,
    /// One permit of a semaphore of this many (1..=[`MAX_PERMITS`]).
    Permit {
        permits: u32,
    },
    /// A read lease of a read-write lease.
    Read,
    /// The write lease of a read-write lease.
    Write,
    /// The leadership of an election (its value rides in the [`Target`]).
    Leader,
    /// A multi-key lease (its keys ride in the [`Target`]).
    Multi,
}

impl Want {
    /// The kind of line this acquire waits in.
    pub(crate) fn kind(self) -> Kind {
        match self {
            Want::Lock => Kind::Lock,
            Want::Permit { .. } => Kind::Semaphore,
            Want::Read => Kind::Read,
            Want::Write => Kind::Write,
            Want::Leader => Kind::Leader,
            Want::Multi => Kind::Multi,
        }
    }
}

/// The largest permit count of a semaphore (docs/PROTOCOL.md §5.2).
pub(crate) const MAX_PERMITS: u32 = 1024;

/// Checks a semaphore's permit count.
pub(crate) fn validate_permits(permits: u32) -> Result<(), Error> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::invalid_config(
            "permits",
            format!("must be 1..={MAX_PERMITS}, got {permits}"),
        ));
    }
    Ok(())
}

/// Where release notifications go and what they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Channel {
    /// One channel per namespace, `PUBLISH`ed; the message is the key's sha.
    #[default]
    Standalone,
    /// One sharded channel per key, `SPUBLISH`ed (Redis Cluster).
    #[allow(dead_code, reason = "used by the Redis Cluster front ends")]
    Sharded,
}

impl Channel {
    pub(crate) fn name(self, namespace: &str, id: KeyId) -> String {
        match self {
            Channel::Standalone => [namespace, ":lock-released"].concat(),
            Channel::Sharded => {
                format!("{namespace}:lock-released:{{{}}}", id.channel_id().to_hex())
            }
        }
    }

    pub(crate) fn publish_command(self) -> &'static str {
        match self {
            Channel::Standalone => "PUBLISH",
            Channel::Sharded => "SPUBLISH",
        }
    }
}

/// A 128-bit owner token, written to Redis as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken([u8; 16]);

impl OwnerToken {
    pub(crate) fn from_bytes(bytes: [u8; 16]) -> Self {
        OwnerToken(bytes)
    }

    pub(crate) fn to_hex(self) -> String {
        hex(&self.0)
    }

    /// The grant token a locker's registration names when this token's
    /// waiter registered first (docs/PROTOCOL.md §4.3): a one-way function
    /// of it, so it is as hard to guess and is never any waiter's or
    /// holder's own token. A grant made out to it is claimed by whichever
    /// waiter heads the line then, and nothing a holder sends (a renew, a
    /// replayed release) can ever match it.
    pub(crate) fn grant_token(self) -> OwnerToken {
        self.derived(b"redlease grant token\0")
    }

    /// The token a waiter goes on with once a lease under this one was
    /// handed back (a stale grant it claimed, docs/PROTOCOL.md §4.3): a
    /// one-way function of it, so the release of that lease can never
    /// meet the waiter's next one.
    pub(crate) fn successor(self) -> OwnerToken {
        self.derived(b"redlease next token\0")
    }

    /// This token's id in a grant's notice: the first 16 hex digits of the
    /// SHA-1 of its hex text, as the scripts compute it (`redis.sha1hex`),
    /// which tells whose grant it is without publishing the token.
    pub(crate) fn notice_id(self) -> u64 {
        be_u64(&sha1_smol::Sha1::from(self.to_hex()).digest().bytes())
    }

    fn derived(self, domain: &[u8]) -> OwnerToken {
        let digest = Sha256::new()
            .chain_update(domain)
            .chain_update(self.0)
            .finalize();
        OwnerToken(digest[..16].try_into().unwrap_or_default())
    }
}

/// The first 8 bytes of a digest, as a big-endian number.
fn be_u64(digest: &[u8]) -> u64 {
    u64::from_be_bytes(digest[..8].try_into().unwrap_or_default())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests take one real instant, then move it by hand
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The owner id is what `redis.sha1hex` gives for the token's text.
    #[test]
    fn a_notice_id_is_the_sha1_of_the_tokens_text() {
        let zero = OwnerToken::from_bytes([0; 16]);
        // `echo -n 00000000000000000000000000000000 | sha1sum`
        assert_eq!(format!("{:016x}", zero.notice_id()), "91d3d1f86024e49f");
    }

    #[test]
    fn hand_over_payloads_name_their_line_and_registration() {
        let id = KeyId::of("k");
        let reg = RegId(0xab);
        // An election's candidates wait without the hand-over.
        for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::Leader) {
            let line = LineKey { kind, id };
            let grant = format!("{}:g:{}:17:100", line.message(), line.queue_entry(reg));
            let granted = |at_ms, slot, owner| {
                Some((
                    line,
                    Handover::Granted(GrantNotice {
                        reg,
                        fence: Some(Fence::new(17)),
                        claim: Duration::from_millis(100),
                        at_ms,
                        slot,
                        owner,
                    }),
                ))
            };
            // Older versions publish no server time, slot or owner id.
            let none = granted(None, None, None);
            assert_eq!(Handover::parse(grant.as_bytes()), none, "{kind:?}");
            let timed = format!("{grant}:1700000000123");
            let at = Some(1_700_000_000_123);
            let only_time = granted(at, None, None);
            assert_eq!(Handover::parse(timed.as_bytes()), only_time, "{kind:?}");
            let owner = OwnerToken::from_bytes([5; 16]).grant_token().notice_id();
            let owner_id = format!("{owner:016x}");
            let slotted = format!("{timed}:3:{owner_id}");
            let slot = granted(at, Some(3), Some(owner));
            assert_eq!(Handover::parse(slotted.as_bytes()), slot, "{kind:?}");
            let no_slot = format!("{timed}::{owner_id}");
            let owned = granted(at, None, Some(owner));
            assert_eq!(Handover::parse(no_slot.as_bytes()), owned, "{kind:?}");
            let beyond = format!("{timed}:{MAX_PERMITS}:{owner_id}");
            assert_eq!(Handover::parse(beyond.as_bytes()), owned, "{kind:?}");
            let claim = format!("{}:c:17", line.message());
            let claimed_line = match kind {
                // A claim names the lease, not the side: the writers' line
                // stands for both.
                Kind::Read => LineKey {
                    kind: Kind::Write,
                    id,
                },
                _ => line,
            };
            assert_eq!(
                Handover::parse(claim.as_bytes()),
                Some((claimed_line, Handover::Claimed))
            );
            // A plain release is not a hand-over.
            assert_eq!(Handover::parse(line.message().as_bytes()), None);
        }
        let sha = id.to_hex();
        for bad in [
            format!("rw:{sha}:g:x{}:1:100", reg.to_hex()),
            format!("{sha}:g:short:1:100"),
            format!("{sha}:g:{}:1:soon", reg.to_hex()),
            format!("{sha}:x:1"),
            "sem:nothex:c:1".to_owned(),
        ] {
            assert_eq!(Handover::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn queue_names_and_entries_follow_the_kind() {
        let id = KeyId::of("k");
        let reg = RegId(1);
        let entry = |kind| LineKey { kind, id }.queue_entry(reg);
        assert_eq!(entry(Kind::Lock), "0000000000000001");
        assert_eq!(entry(Kind::Semaphore), "0000000000000001");
        assert_eq!(entry(Kind::Read), "r0000000000000001");
        assert_eq!(entry(Kind::Write), "w0000000000000001");
        let sha = id.to_hex();
        for (kind, prefix) in [
            (Kind::Lock, "lock"),
            (Kind::Semaphore, "sem"),
            (Kind::Read, "rw"),
            (Kind::Write, "rw"),
        ] {
            let q = QueueNames::of("ns", LineKey { kind, id });
            assert_eq!(q.list, format!("ns:{prefix}-queue:{{{sha}}}"));
            assert_eq!(q.flag, format!("ns:{prefix}-queued:{{{sha}}}"));
            assert_eq!(q.reg_prefix, format!("ns:{prefix}-reg:{{{sha}}}:"));
        }
    }

    #[test]
    fn names_use_the_lowercase_hex_sha256_inside_a_hash_tag() {
        let names = LockNames::new("svc", KeyId::of("job:42"));
        let expected = hex(&Sha256::digest(b"job:42"));
        assert_eq!(names.lock, format!("svc:lock:{{{expected}}}"));
        assert_eq!(names.fence, format!("svc:lock-fence:{{{expected}}}"));
        assert_eq!(expected.len(), 64);
        assert!(expected
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
    }

    #[test]
    fn channels_follow_the_spec() {
        let id = KeyId::of("k");
        assert_eq!(Channel::Standalone.name("ns", id), "ns:lock-released");
        assert_eq!(
            Channel::Sharded.name("ns", id),
            format!("ns:lock-released:{{{}}}", id.to_hex())
        );
    }

    #[test]
    fn empty_and_oversized_keys_are_invalid_and_the_message_hides_the_key() {
        assert!(validate_key("", 1024).is_err());
        let long = "x".repeat(1025);
        let e = validate_key(&long, 1024).unwrap_err();
        assert_eq!(e.code(), "INVALID_KEY");
        assert!(!e.to_string().contains("xxxx"));
        assert!(validate_key(&"x".repeat(1024), 1024).is_ok());
    }

    #[test]
    fn hash_tags_follow_the_cluster_rule_and_decide_names_only_when_asked() {
        assert_eq!(hash_tag("acct:{7}:in"), Some("7"));
        assert_eq!(hash_tag("{a}{b}"), Some("a"));
        assert_eq!(hash_tag("x{}{y}"), None, "an empty first tag");
        assert_eq!(hash_tag("x{y"), None);
        assert_eq!(hash_tag("plain"), None);

        let (a, b) = ("acct:{7}:in", "acct:{7}:out");
        assert_eq!(KeyId::named(a, false).braced(), KeyId::of(a).braced());
        assert_eq!(
            KeyId::named("plain", true).braced(),
            KeyId::of("plain").braced()
        );
        let (ta, tb) = (KeyId::named(a, true), KeyId::named(b, true));
        let tag = KeyId::of("7").to_hex();
        assert_eq!(ta.braced(), format!("{{{tag}}}:{}", KeyId::of(a).to_hex()));
        assert_eq!(ta, KeyId::of(a), "identity is the key's digest");
        assert_eq!(ta.channel_id(), tb.channel_id());
        assert_eq!(ta.channel_id(), KeyId::of("7"));
        let (na, nb) = (LockNames::new("ns", ta), LockNames::new("ns", tb));
        assert_ne!(na.lock, nb.lock);
        let slot = crate::cluster::slot_of;
        for name in [&na.fence, &na.queue.list, &nb.lock, &nb.queue.flag] {
            assert_eq!(slot(name), slot(&na.lock), "{name}");
        }
        assert_eq!(
            Channel::Sharded.name("ns", ta),
            Channel::Sharded.name("ns", tb)
        );
        assert_eq!(
            slot(&Channel::Sharded.name("ns", ta)),
            slot(&na.lock),
            "the channel lives in the keys' slot"
        );
    }

    #[test]
    fn debug_forms_hide_tokens_and_names() {
        let t = OwnerToken::from_bytes([0xab; 16]);
        assert!(!format!("{t:?}").contains("abab"));
        let n = LockNames::new("ns", KeyId::of("secret"));
        assert!(!format!("{n:?}").contains("ns:lock"));
    }

    #[test]
    fn a_held_target_builds_again_the_names_of_its_grant() {
        let id = KeyId::of("job:42");
        let key = |want, slot| {
            let mut held = Target::new("ns", want, id).held();
            held.slot = slot;
            match held.names("ns") {
                HeldNames::Key(key) => Some(key),
                HeldNames::AnySlot(..)
                | HeldNames::Reader(_)
                | HeldNames::Election(_)
                | HeldNames::Multi(_) => None,
            }
        };
        let (sem, rw) = (SemNames::new("ns", id), RwNames::new("ns", id));
        assert_eq!(key(Want::Lock, None), Some(LockNames::new("ns", id).lock));
        assert_eq!(key(Want::Write, None), Some(rw.write.clone()));
        let permit = Want::Permit { permits: 3 };
        assert_eq!(key(permit, Some(2)), Some(format!("{}2", sem.slot_prefix)));
        let mut any = Target::new("ns", permit, id).held();
        any.slot = None;
        assert!(matches!(any.names("ns"), HeldNames::AnySlot(n, 3) if n == sem));
        let reader = Target::new("ns", Want::Read, id).held();
        assert!(matches!(reader.names("ns"), HeldNames::Reader(n) if n == rw));
        assert_eq!(reader.line(), Target::new("ns", Want::Read, id).line());
        let leader = Target::new("ns", Want::Leader, id).held();
        let elect = ElectNames::new("ns", id);
        assert!(matches!(leader.names("ns"), HeldNames::Election(n) if n == elect));
        assert_eq!(leader.names("ns").lease_key(), Some(elect.lease));
        let set = KeySet::of(&["b", "a"], 100, false).unwrap();
        let multi = Target::multi("ns", set.clone()).held();
        assert_eq!(multi.line(), set.line());
        let names: Vec<(KeyId, String)> = ["b", "a"]
            .map(|k| (KeyId::of(k), LockNames::new("ns", KeyId::of(k)).lock))
            .to_vec();
        assert!(matches!(multi.names("ns"), HeldNames::Multi(n) if n == names));
        assert_eq!(multi.names("ns").lease_key(), None);
        // What a tracked lease keeps: no strings; the key's digest and its
        // hash tag's, the kind, a permit's slot, a set's keys: 112 bytes.
        assert!(std::mem::size_of::<HeldTarget>() <= 112);
    }

    /// The multi-key release derives each key's release message from its
    /// lock name (MULTI_RELEASE_LUA): it must be the message every other
    /// script uses, with and without a hash tag.
    #[test]
    fn a_lock_name_ends_with_its_release_message() {
        for id in [KeyId::of("k"), KeyId::named("a{tag}b", true)] {
            let names = LockNames::new("my:ns", id);
            let message = LineKey::lock(id).message();
            let end = names.lock.strip_suffix('}').unwrap_or(&names.lock);
            assert!(end.ends_with(&message), "{} {message}", names.lock);
            assert_eq!(message.len(), 64);
        }
    }

    #[test]
    fn an_election_vacancy_wakes_its_candidates_and_a_new_leader_or_value_does_not() {
        let id = KeyId::of("billing");
        let sha = id.to_hex();
        let leader = LineKey {
            kind: Kind::Leader,
            id,
        };
        let message = |what: &str| format!("e:{sha}:17-2:{what}");
        assert_eq!(LineKey::from_message(message("r").as_bytes()), [leader]);
        assert!(LineKey::from_message(message("l").as_bytes()).is_empty());
        assert!(LineKey::from_message(message("v").as_bytes()).is_empty());
        assert!(LineKey::from_message(format!("e:{sha}:17-2:r:x").as_bytes()).is_empty());
        assert!(LineKey::from_message(b"e:zz:1-0:r").is_empty());
        assert_eq!(LineKey::from_message(leader.message().as_bytes()), [leader]);
        // Not a hand-over notice: it is routed as a release.
        assert_eq!(Handover::parse(message("r").as_bytes()), None);
    }

    proptest! {
        #[test]
        fn key_id_hex_round_trips(key in ".*") {
            let id = KeyId::of(&key);
            prop_assert_eq!(KeyId::from_hex(id.to_hex().as_bytes()), Some(id));
        }

        #[test]
        fn from_hex_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = KeyId::from_hex(&bytes);
        }
    }
}
