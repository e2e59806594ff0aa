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

use super::core::{intent_ms, Core, WaiterStep};
use super::line::{Line, WaiterId};
use super::names::{Kind, Target};
use crate::config::ResolvedOptions;

use super::names::{
    lock_prefix, lock_queue_flag, validate_key, Channel, KeyId, LineKey, LockNames, OwnerToken,
    RegId,
};
use super::outcome::Fence;
use super::script::{
    handover_lua, next_fence_lua, parse_fence, ReplyError, ScriptCall, ScriptKind,
};
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
    let Some(first) = names.first().map(slot) else {
        return Ok(());
    };
    match names.iter().position(|n| slot(n) != first) {
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

/// What a multi-key acquire reply says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MultiReply {
    /// Every key is ours, each with its fence, in the caller's order.
    Acquired(Vec<Fence>),
    /// Some key is held: the least remaining time of the held keys when
    /// Redis knows it, and the waiter's age (server µs) for its next
    /// attempt.
    Busy {
        remaining: Option<Duration>,
        since: u64,
    },
}

/// Classifies the multi-key acquire script's reply: `['ok', f_1..f_n]`
/// with exactly `n` fences, or `['busy', ms, since]`.
pub(crate) fn classify_multi(value: &Value, n: usize) -> Result<MultiReply, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::MultiAcquire, value);
    let Value::Array(items) = value else {
        return Err(unexpected());
    };
    match items.split_first() {
        Some((Value::BulkString(tag), fences)) if tag == b"ok" && fences.len() == n => fences
            .iter()
            .map(|f| match f {
                Value::BulkString(digits) => parse_fence(digits),
                _ => None,
            })
            .collect::<Option<Vec<Fence>>>()
            .map(MultiReply::Acquired)
            .ok_or_else(unexpected),
        Some((Value::BulkString(tag), [Value::Int(ms), Value::BulkString(since)]))
            if tag == b"busy" && *ms >= -2 =>
        {
            let since = std::str::from_utf8(since)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(unexpected)?;
            Ok(MultiReply::Busy {
                remaining: u64::try_from(*ms).ok().map(Duration::from_millis),
                since,
            })
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
    let mut keys = Vec::with_capacity(names.len() * if registers { 4 } else { 2 });
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
        keys.extend(names.iter().map(|n| n.queue.list.clone()));
        keys.extend(names.iter().map(|n| n.queue.flag.clone()));
        args.push(reg.to_hex());
        args.push(reg_ms.to_string());
        args.extend(names.iter().map(|n| n.queue.reg_prefix.clone()));
    }
    ScriptCall::new(ScriptKind::MultiAcquire, keys, args)
}

/// The renew of every key by token (`locks`: the keys' lock names).
pub(crate) fn multi_renew_call(locks: Vec<String>, token: OwnerToken, lease_ms: u64) -> ScriptCall {
    ScriptCall::new(
        ScriptKind::MultiRenew,
        locks,
        vec![token.to_hex(), lease_ms.to_string()],
    )
}

/// The release of every key by token (also of a waiter's reservations),
/// each key handed to its queue's head with the hand-over
/// (`handover_ttl_ms`: the fence counter TTL ms), else deleted and its
/// release published. `keys`: each key's id and lock name, moved into the
/// call. The script derives each key's message and, when a key has a
/// queue, its other names from its lock name and [`lock_prefix`]
/// ([`MULTI_RELEASE_LUA`]).
pub(crate) fn multi_release_call(
    keys: Vec<(KeyId, String)>,
    token: OwnerToken,
    namespace: &str,
    channel: Channel,
    handover_ttl_ms: Option<u64>,
) -> ScriptCall {
    let mut args = Vec::with_capacity(5);
    args.extend([
        token.to_hex(),
        channel.publish_command().to_owned(),
        handover_ttl_ms.map_or_else(String::new, |ttl| ttl.to_string()),
        lock_prefix(namespace),
    ]);
    // Keys of one channel (every key on one server, the keys of one hash
    // tag on a Cluster) send its name once: the script reads one argument
    // for all of them.
    let first = keys.first().map(|(id, _)| id.channel_id());
    let shared =
        channel == Channel::Standalone || keys.iter().all(|(id, _)| Some(id.channel_id()) == first);
    match keys.first() {
        Some((id, _)) if shared => args.push(channel.name(namespace, *id)),
        _ => args.extend(keys.iter().map(|(id, _)| channel.name(namespace, *id))),
    }
    // The flags are sent rather than built by the script: building a
    // name in Lua costs Redis more than receiving it.
    let flags: Vec<String> = match handover_ttl_ms {
        Some(_) => keys
            .iter()
            .map(|(id, _)| lock_queue_flag(namespace, *id))
            .collect(),
        None => Vec::new(),
    };
    let mut names: Vec<String> = keys.into_iter().map(|(_, lock)| lock).collect();
    names.extend(flags);
    ScriptCall::new(ScriptKind::MultiRelease, names, args)
}

/// Acquire of N keys: KEYS = lock_1..N, counter_1..N, and with the
/// hand-over queue_1..N, flag_1..N; ARGV = token, lease ms, counter TTL ms,
/// the waiter's age (`0`: none yet), reservation ms (`0`: try once), and
/// with the hand-over the registration entry (empty: do not register), the
/// registration bound ms and the registration prefix of each key.
///
/// Each key is classified: ours (`mine`), reserved by us (`reserved`),
/// free, reserved by a younger waiter (`younger`: taken over), or `busy`
/// (held, or reserved by an older waiter). All ours: a replay; the lease
/// runs its full length from this attempt and the same fences return. No
/// key busy: every key gets the next fence of its counter (docs/PROTOCOL.md §3; all
/// counters are written before any lock, so a refusal leaves no hold:
/// those read as plain integers in one `MSET` when the locker sets no
/// counter TTL, the others by `next_fence`) and is set with the lease's
/// `PX`. Else, unless trying once (which deletes
/// what it may hold and reserves nothing), each key not busy becomes a
/// reservation `<token>:r<age>` for `res_ms`, and the waiter registers in
/// each busy key's hand-over queue with the value `m<age>.<token>:<res_ms>`,
/// for which a release reserves the key instead of granting it. Writes of
/// holds happen only in the grant branch, for all N keys: never a partial
/// hold.
pub(crate) const MULTI_ACQUIRE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    r#"
local handover = #ARGV > 5
local n = handover and #KEYS / 4 or #KEYS / 2
local token = ARGV[1]
local got
if handover then
  local read = {}
  for i = 1, 2 * n do
    read[i] = KEYS[i]
  end
  for i = 1, n do
    read[2 * n + i] = KEYS[3 * n + i]
  end
  got = redis.call('MGET', unpack(read))
else
  got = redis.call('MGET', unpack(KEYS))
end
local t = server_time()
-- The waiter's age, computed when a reservation or a busy key needs it.
local age
local function waiter_age()
  if not age then
    age = tonumber(ARGV[4])
    if age == 0 then
      age = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
  end
  return age
end
local state, all_mine, busy = {}, true, false
for i = 1, n do
  local v, s = got[i], 'free'
  if v then
    local sep = string.find(v, ':', 1, true)
    local owner = sep and string.sub(v, 1, sep - 1) or ''
    local reserved = sep and string.sub(v, sep + 1, sep + 1) == 'r'
    if owner == token then
      s = reserved and 'reserved' or 'mine'
    elseif reserved then
      local other = tonumber(string.sub(v, sep + 2)) or 0
      local mine = waiter_age()
      if other > mine or (other == mine and owner > token) then
        s = 'younger'
      else
        s = 'busy'
      end
    else
      s = 'busy'
    end
  end
  state[i] = s
  all_mine = all_mine and s == 'mine'
  busy = busy or s == 'busy'
end
if all_mine then
  local fences = {'ok'}
  for i = 1, n do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    fences[i + 1] = string.sub(got[i], #token + 2)
  end
  return fences
end
if not busy then
  -- Counters read as plain integers take their next fence in one MSET
  -- (without a counter TTL to set); the others one by one. Counters of
  -- one value (a set granted together before) take one fence, computed
  -- once.
  local fences, batch, rest = {'ok'}, {}, {}
  local floor = ARGV[3] == '0' and fence_floor(t)
  local seen, seen_fence
  for i = 1, n do
    local counter = floor and got[n + i]
    local fence
    if counter then
      if counter ~= seen then
        seen, seen_fence = counter, fence_after(counter, floor)
      end
      fence = seen_fence
    end
    if fence then
      fences[i + 1] = fence
      batch[#batch + 1] = KEYS[n + i]
      batch[#batch + 1] = fence
    else
      rest[#rest + 1] = i
    end
  end
  if #batch > 0 then
    redis.call('MSET', unpack(batch))
  end
  for _, i in ipairs(rest) do
    local fence = next_fence(KEYS[n + i], got[n + i], t, ARGV[3])
    if not fence then
      return redis.error_reply(WRONGTYPE)
    end
    fences[i + 1] = fence
  end
  -- Keys of one fence share one value (the floor's, as a rule).
  local owner, value, value_fence = token .. ':'
  for i = 1, n do
    local fence = fences[i + 1]
    if fence ~= value_fence then
      value, value_fence = owner .. fence, fence
    end
    local set
    if state[i] == 'free' then
      set = redis.call('SET', KEYS[i], value, 'NX', 'PX', ARGV[2])
    else
      set = redis.call('SET', KEYS[i], value, 'PX', ARGV[2])
    end
    if not set then
      for j = 1, i - 1 do
        redis.call('DEL', KEYS[j])
      end
      return redis.error_reply(WRONGTYPE)
    end
  end
  if handover and ARGV[6] ~= '' then
    -- Registrations left in queues a key was not handed over by (it came
    -- free by expiry), also by an earlier attempt whose reply was lost:
    -- out of the queue too, or a release of this very lease would reserve
    -- the key for it, as an entry looks live until its deadline. Only a
    -- flagged queue can hold one.
    for i = 1, n do
      if got[2 * n + i] then
        settle({reg = ARGV[6], keep = 'd', reg_prefix = ARGV[7 + i]}, KEYS[2 * n + i])
      end
    end
  end
  return fences
end
local res_ms = ARGV[5]
local age_text = string.format('%d', waiter_age())
local wait = nil
for i = 1, n do
  local s = state[i]
  if s == 'busy' then
    local ms = redis.call('PTTL', KEYS[i])
    if ms >= 0 and (wait == nil or ms < wait) then
      wait = ms
    end
    if handover and ARGV[6] ~= '' and res_ms ~= '0' then
      local H = {reg = ARGV[6], reg_ms = ARGV[7], claim = res_ms, reg_prefix = ARGV[7 + i]}
      enqueue(H, KEYS[2 * n + i], KEYS[3 * n + i], 'm' .. age_text .. '.' .. token)
    end
  elseif res_ms == '0' then
    if s == 'mine' or s == 'reserved' then
      redis.call('DEL', KEYS[i])
    end
  elseif s == 'reserved' then
    redis.call('PEXPIRE', KEYS[i], res_ms)
  else
    redis.call('SET', KEYS[i], token .. ':r' .. age_text, 'PX', res_ms)
  end
end
return {'busy', wait or -2, res_ms == '0' and '0' or age_text}
"#
);

/// Renew of N keys: KEYS = lock_1..N; ARGV = token, lease ms. 1 renewed
/// (every key held by the token), 0 expired (no key held by it, and none
/// by another), 2 conflict. A lease found with some keys gone or another's
/// deletes the keys it still holds: it never lives on with part of them.
pub(crate) const MULTI_RENEW_LUA: &str = r#"
local got = redis.call('MGET', unpack(KEYS))
local mine, present = {}, 0
for i = 1, #KEYS do
  local v = got[i]
  if v then
    present = present + 1
    local sep = string.find(v, ':', 1, true)
    if sep and string.sub(v, 1, sep - 1) == ARGV[1] and string.sub(v, sep + 1, sep + 1) ~= 'r' then
      mine[#mine + 1] = KEYS[i]
    end
  end
end
if #mine == #KEYS then
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  end
  return 1
end
if #mine > 0 then
  redis.call('DEL', unpack(mine))
end
if present == #mine then
  return 0
end
return 2
"#;

/// Release of N keys: KEYS = lock_1..N, and with the hand-over each
/// key's queue flag flag_1..N; ARGV = token, publish command, the fence
/// counter TTL ms with the hand-over (empty: no hand-over), the names'
/// prefix `<ns>:lock` ([`lock_prefix`]), then the channel every key shares
/// (one server's, or on a Cluster one hash tag's), or each key's channel.
/// A key's lock is `<prefix>:<tail>` ([`LockNames`]; the tail is `{<sha>}`
/// or, with a hash tag, `{<sha(tag)>}:<sha>`); its release message is its
/// `<sha>`, the end of the lock's name, and its queue, registration prefix
/// and counter are `<prefix>-queue:<tail>`, `<prefix>-reg:<tail>:` and
/// `<prefix>-fence:<tail>`: built here rather than sent (an uncontended
/// release reads only the flags and publishes once). Each key
/// the token holds or reserves goes to its queue's head live registration
/// ([`handover_lua`]), else is deleted with its release published (the
/// single-key message, so every locker's waiters wake); once a `PUBLISH`
/// reached nobody, the rest of that channel's are left out (nobody
/// subscribes while a script runs). 1 released (every key was the
/// token's), 0 expired (the others were gone), 2 conflict.
pub(crate) const MULTI_RELEASE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    r#"
local handover = ARGV[3] ~= ''
local n = handover and #KEYS / 2 or #KEYS
local prefix = ARGV[4]
local each_channel = #ARGV > 5
local function name_of(i, kind)
  return prefix .. kind .. string.sub(KEYS[i], #prefix + 2)
end
local function channel_of(i)
  return each_channel and ARGV[4 + i] or ARGV[5]
end
-- The key's digest, which ends its lock's name: `…{<sha>}` or `…}:<sha>`.
local function message_of(i)
  local lock = KEYS[i]
  if string.byte(lock, -1) == 125 then
    return string.sub(lock, -65, -2)
  end
  return string.sub(lock, -64)
end
-- One read of the locks and, with the hand-over, their queues' flags.
local got = redis.call('MGET', unpack(KEYS))
-- A token holds or reserves a key whose value starts `<token>:`.
local owner = ARGV[1] .. ':'
local mine, present = 0, 0
local freed, published = {}, {}
for i = 1, n do
  local v = got[i]
  if v then
    present = present + 1
    if string.sub(v, 1, #owner) == owner then
      mine = mine + 1
      local handed = false
      if handover and got[n + i] then
        local counter = name_of(i, '-fence:')
        local reg, value = next_registration(name_of(i, '-queue:'))
        if reg and grant_to(reg, value, KEYS[i], counter, redis.call('MGET', counter)[1], ARGV[3], ARGV[2], channel_of(i), message_of(i)) then
          handed = true
        elseif reg == nil then
          redis.call('DEL', KEYS[n + i])
        end
      end
      if not handed then
        freed[#freed + 1] = KEYS[i]
        published[#published + 1] = i
      end
    end
  end
end
-- Deleted before any notification goes out: a woken waiter finds them free.
if #freed > 0 then
  redis.call('DEL', unpack(freed))
end
-- A PUBLISH that reached nobody tells the rest of that channel's messages
-- would reach nobody either (nobody subscribes while a script runs).
local nobody = {}
for _, i in ipairs(published) do
  local channel = channel_of(i)
  if not nobody[channel] then
    local heard = redis.pcall(ARGV[2], channel, message_of(i))
    if heard == 0 and ARGV[2] == 'PUBLISH' then
      nobody[channel] = true
    end
  end
end
if mine == n then
  return 1
end
if present == mine then
  return 0
end
return 2
"#
);

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
        if self.settings.channel == Channel::Sharded {
            if let Target::Multi { names, .. } = &target {
                one_slot(names)?;
            }
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

    /// Removes an empty line (and a set's keys with it).
    pub(super) fn forget_line(&mut self, line: LineKey) {
        self.lines.remove(&line);
        if line.kind == Kind::Multi {
            self.sets.remove(&line.id);
        }
    }

    /// Whether a grant (here: a reservation) for any key of `line` would
    /// reach this locker ([`hears_grants`](Core::hears_grants) of each).
    pub(super) fn hears_grants_of(&self, line: LineKey) -> bool {
        self.channel_keys(line)
            .into_iter()
            .all(|id| self.hears_grants(id))
    }

    /// Wakes the head of every multi-key line waiting for key `id` (a
    /// release or a reservation for one of them); returns how many.
    pub(super) fn wake_sets_of(&mut self, id: KeyId) -> u64 {
        let sets: Vec<LineKey> = self.set_lines_with(id).collect();
        sets.into_iter()
            .map(|set| u64::from(self.wake_head_of(set, Line::handle_wake)))
            .sum()
    }
}

impl Core {
    /// The attempt of the head of a multi-key line: reserving (and with
    /// the hand-over registering) unless it tries once.
    pub(super) fn multi_attempt(&self, id: WaiterId, line: LineKey, try_once: bool) -> WaiterStep {
        let Some((token, lease_ms, Target::Multi { names, since, .. })) = self.waiter_target(id)
        else {
            return WaiterStep::Wait(None);
        };
        let handover = self.settings.handover.map(|h| MultiHandover {
            register: (!try_once && self.hears_grants_of(line)).then(|| multi_reg(h.reg, line.id)),
            reg_ms: h.reg_ms,
        });
        let reserve_ms = if try_once {
            0
        } else {
            intent_ms(self.settings.notify_poll_interval)
        };
        WaiterStep::Attempt(multi_acquire_call(
            names,
            token,
            lease_ms,
            self.settings.fence_counter_ttl_ms,
            *since,
            reserve_ms,
            handover,
        ))
    }
}
