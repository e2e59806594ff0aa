//! The multi-key lease in the core (docs/PROTOCOL.md): the validation of a
//! key set, its line's id, the three scripts (acquire, renew and release of
//! all keys at once) with their calls, and the pure decoding of the
//! acquire's reply.
//!
//! A multi-key lease holds the keys' own locks (`<token>:<fence_i>` in each
//! `<ns>:lock:{<sha_i>}`), so single-key holders and waiters of those keys
//! see it as an ordinary holder. While it waits it *reserves* the keys it
//! finds free (`<token>:r<since>`, no fence), which every other script reads
//! as held by someone else; an older waiter takes a younger one's
//! reservations over, so two waiters of overlapping sets never deadlock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::core::{Attempted, Core, WaiterStep};
use super::line::WaiterId;
use super::names::{Kind, Target};
use crate::config::ResolvedOptions;

use super::names::{validate_key, Channel, KeyId, LineKey, LockNames, OwnerToken, RegId};
use super::outcome::Fence;
use super::script::{parse_fence, parse_u64, ReplyError, ScriptCall, ScriptKind};
use crate::error::Error;

/// The most keys one multi-key lease takes: it bounds the scripts' work.
pub(crate) const MAX_KEYS: usize = 64;

/// The keys of one multi-key lease, as digests in the caller's order, and
/// the id of its line: the digest of the sorted key digests, so `{a, b}`
/// and `{b, a}` wait in one line.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KeySet {
    pub(crate) set: KeyId,
    pub(crate) members: Arc<[KeyId]>,
}

impl KeySet {
    /// Checks `keys` (1 ≤ N ≤ [`MAX_KEYS`], each a valid key, pairwise
    /// distinct) and names them. Errors name positions, never a key.
    pub(crate) fn of<K: AsRef<str>>(
        keys: &[K],
        max_key_bytes: usize,
        tags: bool,
    ) -> Result<Self, Error> {
        if keys.is_empty() || keys.len() > MAX_KEYS {
            return Err(Error::InvalidKey {
                reason: format!(
                    "a multi-key lease takes 1 to {MAX_KEYS} keys, got {}",
                    keys.len()
                ),
            });
        }
        let mut members = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            validate_key(key.as_ref(), max_key_bytes).map_err(|e| match e {
                Error::InvalidKey { reason } => Error::InvalidKey {
                    reason: format!("key {} {reason}", i + 1),
                },
                other => other,
            })?;
            members.push(KeyId::named(key.as_ref(), tags));
        }
        if let Some((a, b)) = first_duplicate(&members) {
            return Err(Error::InvalidKey {
                reason: format!("keys {a} and {b} are the same"),
            });
        }
        let mut sorted = members.clone();
        sorted.sort();
        let joined: String = sorted.iter().map(|id| id.to_hex()).collect();
        Ok(KeySet {
            set: KeyId::of(&joined),
            members: members.into(),
        })
    }

    /// A set of one key, named by its digest.
    pub(crate) fn single(id: KeyId) -> Self {
        let set = KeyId::of(&id.to_hex());
        KeySet {
            set,
            members: Arc::from(&[id][..]),
        }
    }

    #[cfg(test)]
    pub(crate) fn line(&self) -> LineKey {
        LineKey::multi(self.set)
    }

    /// The member keys' lock names, in the caller's order.
    pub(crate) fn names(&self, namespace: &str) -> Vec<LockNames> {
        self.members
            .iter()
            .map(|id| LockNames::new(namespace, *id))
            .collect()
    }
}

/// The 1-based positions of the first two equal items (the pair whose
/// later item comes first), if any: what an error about a repeated key or
/// resource names instead of the key.
pub(crate) fn first_duplicate<T: Ord>(items: &[T]) -> Option<(usize, usize)> {
    let mut sorted: Vec<(&T, usize)> = items.iter().zip(1..).collect();
    sorted.sort();
    sorted
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].1, w[1].1))
        .min_by_key(|&(_, b)| b)
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySet({} keys)", self.members.len())
    }
}

/// On Redis Cluster one script reaches one slot: every key's names must
/// hash to the first key's slot. The error names positions only.
fn one_slot(names: &[LockNames]) -> Result<(), Error> {
    let slot = |n: &LockNames| crate::cluster::slot_of(&n.lock);
    let first = names.first().map(slot);
    match names.iter().position(|n| Some(slot(n)) != first) {
        None => Ok(()),
        Some(i) => Err(Error::InvalidKey {
            reason: format!(
                "on Redis Cluster the keys of one multi-key lease must be stored in one hash \
                 slot, and keys 1 and {} are not (each key is stored under a hash tag of its \
                 own digest: see docs/PROTOCOL.md §6)",
                i + 1
            ),
        }),
    }
}

/// The registration id of a set's line in its keys' hand-over queues: the
/// locker's id mixed with the set's, so that a locker waiting for a key
/// alone and in a set holds two registrations in that key's queue.
pub(crate) fn multi_reg(locker: RegId, set: KeyId) -> RegId {
    RegId(locker.0 ^ set.prefix())
}

/// A multi-key lease's keys and their fences, in its caller's order.
pub(crate) type KeyFences = (Arc<[KeyId]>, Box<[Fence]>);

/// What a multi-key acquire adds for the hand-over (docs/PROTOCOL.md §6):
/// the registration the waiting lease enters in each busy key's queue.
#[derive(Debug)]
pub(crate) struct MultiHandover {
    /// The set line's queue entry; `None` for a try-once acquire.
    pub(crate) register: Option<RegId>,
    pub(crate) reg_ms: u64,
}

/// Classifies the multi-key acquire script's reply: `['ok', f_1..f_n]`
/// with exactly `n` fences (every key is ours, each with its fence, in the
/// caller's order), or `['busy', ms, since]` (some key is held: the least
/// remaining time of the held keys when Redis knows it, and the waiter's
/// age in server µs for its next attempt).
pub(super) fn classify_multi(value: &Value, n: usize) -> Result<Attempted, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::MultiAcquire, value);
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    match items.split_first() {
        Some((Value::BulkString(tag), fences)) if tag == b"ok" && fences.len() == n => {
            let fences = fences.iter().map(|f| match f {
                Value::BulkString(digits) => parse_fence(digits),
                _ => None,
            });
            let fences: Box<[Fence]> = fences.collect::<Option<_>>().ok_or_else(unexpected)?;
            let first = fences.first().copied().ok_or_else(unexpected)?;
            Ok(Attempted::Granted(first, None, Some(fences), false))
        }
        Some((Value::BulkString(tag), [Value::Int(ms), Value::BulkString(since)]))
            if tag == b"busy" && *ms >= -2 =>
        {
            let since = parse_u64(since).ok_or_else(unexpected)?;
            let remaining = u64::try_from(*ms).ok().map(Duration::from_millis);
            Ok(Attempted::Busy(remaining, Some(since), false, None))
        }
        _ => Err(unexpected()),
    }
}

/// The acquire of every key, one call (docs/PROTOCOL.md §6).
#[allow(clippy::too_many_arguments)]
pub(crate) fn multi_acquire_call(
    names: &[LockNames],
    token: OwnerToken,
    lease_ms: u64,
    fence_counter_ttl_ms: u64,
    since: u64,
    reserve_ms: u64,
    handover: Option<MultiHandover>,
) -> ScriptCall {
    let registers = handover.as_ref().is_some_and(|h| h.register.is_some());
    let mut keys = Vec::with_capacity(names.len() * if registers { 5 } else { 2 });
    keys.extend(names.iter().map(|n| n.lock.clone()));
    keys.extend(names.iter().map(|n| n.fence.clone()));
    let mut args = vec![
        token.to_hex(),
        lease_ms.to_string(),
        fence_counter_ttl_ms.to_string(),
        since.to_string(),
        reserve_ms.to_string(),
    ];
    // Without a registration to enter, the script uses nothing of the
    // hand-over: the call leaves its names out (a third of the keys).
    if let Some((reg, reg_ms)) = handover.and_then(|h| Some((h.register?, h.reg_ms))) {
        let reg = reg.to_hex();
        keys.extend(names.iter().map(|n| n.queue.list.clone()));
        keys.extend(names.iter().map(|n| n.queue.flag.clone()));
        keys.extend(names.iter().map(|n| n.queue.reg_key(&reg)));
        args.extend([reg, reg_ms.to_string()]);
    }
    ScriptCall::new(ScriptKind::MultiAcquire, keys, args)
}

/// The release of every key by token (also of a waiter's reservations),
/// each key handed to its queue's head with the hand-over
/// (`handover_ttl_ms`: the fence counter TTL ms), else deleted and its
/// release published. `keys`: each key's id and lock name, moved into the
/// call; with the hand-over each key's flag, counter and queue follow.
pub(crate) fn multi_release_call(
    keys: Vec<(KeyId, String)>,
    token: OwnerToken,
    namespace: &str,
    channel: Channel,
    handover_ttl_ms: Option<u64>,
) -> ScriptCall {
    let mut args = vec![
        token.to_hex(),
        channel.publish_command().to_owned(),
        handover_ttl_ms.map_or_else(String::new, |ttl| ttl.to_string()),
    ];
    // Keys of one channel (every key on one server, the keys of one hash
    // tag on a Cluster) send its name once: the script reads one argument
    // for all of them.
    let mut channels: Vec<String> = keys
        .iter()
        .map(|(id, _)| channel.name(namespace, *id))
        .collect();
    if channels.windows(2).all(|pair| pair[0] == pair[1]) {
        channels.truncate(1);
    }
    args.extend(channels);
    let others: Vec<LockNames> = keys
        .iter()
        .filter(|_| handover_ttl_ms.is_some())
        .map(|(id, _)| LockNames::new(namespace, *id))
        .collect();
    let mut names: Vec<String> = keys.into_iter().map(|(_, lock)| lock).collect();
    names.extend(others.iter().map(|n| n.queue.flag.clone()));
    names.extend(others.iter().map(|n| n.fence.clone()));
    names.extend(others.into_iter().map(|n| n.queue.list));
    ScriptCall::new(ScriptKind::MultiRelease, names, args)
}

impl Core {
    /// Starts an acquire of every key of `keys` at once. The waiter joins
    /// the set's line (not the keys' own lines: docs/PROTOCOL.md §6).
    pub(crate) fn acquire_multi(
        &mut self,
        now: Instant,
        keys: KeySet,
        token: OwnerToken,
        options: ResolvedOptions,
    ) -> Result<WaiterId, Error> {
        let target = Target::multi(&self.settings.namespace, keys);
        if let (Channel::Sharded, Target::Multi { names, .. }) = (self.settings.channel, &target) {
            one_slot(names)?;
        }
        self.join(now, target, token, options)
    }

    /// The keys whose notifications concern `line`: its key, or a set's
    /// keys.
    pub(super) fn channel_keys(&self, line: LineKey) -> Vec<KeyId> {
        match (line.kind, self.sets.get(&line.id)) {
            (Kind::Multi, Some(members)) => members.to_vec(),
            (Kind::Multi, None) => Vec::new(),
            _ => vec![line.id],
        }
    }

    /// The lines of the multi-key leases waiting for key `id`.
    pub(super) fn set_lines_with(&self, id: KeyId) -> impl Iterator<Item = LineKey> + '_ {
        self.sets
            .iter()
            .filter(move |(_, members)| members.contains(&id))
            .map(|(set, _)| LineKey::multi(*set))
    }

    /// Every line that waits for key `id`: one lookup per kind, and the
    /// multi-key leases' lines of its sets.
    pub(super) fn lines_of(&self, id: KeyId) -> impl Iterator<Item = LineKey> + '_ {
        let own = Kind::ALL.iter().map(move |&kind| LineKey::new(kind, id));
        own.chain(self.set_lines_with(id))
    }

    /// Removes an empty line (and a set's keys with it).
    pub(super) fn forget_line(&mut self, line: LineKey) {
        self.lines.remove(&line);
        if line.kind == Kind::Multi {
            self.sets.remove(&line.id);
        }
    }

    /// Whether a multi-key line's attempt registers: a grant (here: a
    /// reservation) for any of its keys must reach this locker.
    pub(super) fn hears_set_grants(&self, line: LineKey, try_once: bool) -> bool {
        let keys = self.channel_keys(line);
        !try_once && keys.iter().all(|id| self.hears_grants(*id))
    }

    /// The attempt of the head of a multi-key line: reserving (and with
    /// the hand-over registering) unless it tries once.
    pub(super) fn multi_attempt(&self, id: WaiterId, line: LineKey, try_once: bool) -> WaiterStep {
        let Some((token, lease_ms, Target::Multi { names, since, .. })) = self.waiter_target(id)
        else {
            return WaiterStep::Wait(None);
        };
        let hears = self.hears_set_grants(line, try_once);
        let handover = self.settings.handover.map(|h| MultiHandover {
            register: hears.then(|| multi_reg(h.reg, line.id)),
            reg_ms: h.reg_ms,
        });
        let (ttl, reserve_ms) = (self.settings.fence_counter_ttl_ms, self.intent_ms(try_once));
        let call = multi_acquire_call(names, token, lease_ms, ttl, *since, reserve_ms, handover);
        WaiterStep::Attempt(call)
    }
}
