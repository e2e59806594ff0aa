//! The Lua scripts (a lock's acquire, release and renew; a semaphore's
//! acquire and its release of a token whose slot is unknown; a read-write
//! lease's read, write, and a reader's release and renew), the commands
//! that run them, and the pure classification of their replies from
//! `redis::Value`.
//!
//! Classification is total: every `Value` maps to an outcome or to a
//! [`ReplyError`], never to a panic. Replies are decoded here rather than
//! through `FromRedisValue`, whose conversion errors claim the connection is
//! unrecoverable although the script ran.

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use super::election::{CAMPAIGN_LUA, PROCLAIM_LUA, READ_LUA, RESIGN_LUA};
use super::multi::{MULTI_ACQUIRE_LUA, MULTI_RELEASE_LUA, MULTI_RENEW_LUA};
use super::names::{Channel, LineKey, LockNames, OwnerToken, QueueNames, RwNames, SemNames};
use super::outcome::{Fence, ReleaseOutcome, RenewOutcome};

/// The Lua every fence-granting script starts with: `WRONGTYPE` (the
/// error a write refused by `NX` answers with), `fence_floor(now)`,
/// `fence_after(counter, floor)` and `next_fence(key, counter, now,
/// ttl_ms)`.
///
/// - `fence_floor(now)`: docs/PROTOCOL.md §3's floor of the `TIME` reply `now`, its
///   milliseconds × 1000.
/// - `fence_after(counter, floor)`: the next fence, as text, after the
///   counter value `counter` that `MGET` read (`false` or `nil`: missing),
///   `max(counter + 1, floor)`; `nil` when the counter is not a plain
///   integer Lua counts exactly (the general path of `next_fence`). It
///   writes nothing: a script that writes several counters at once (one
///   `MSET`) takes its values from here, so they are `next_fence`'s.
/// - `next_fence(key, counter, now, ttl_ms)` stores and returns the next
///   fence of the counter `key` whose value `counter` was read, floored at
///   `now`, or returns nothing when a counter `MGET` read as missing holds
///   another type.
///
/// The next fence is computed in Lua, whose numbers are doubles: that is
/// exact only for a counter of at most 16 plain digits below 2^53 (until
/// about the year 2255 for counters floored at the clock), printed with
/// `%d` (a C `long`: exact there, and cheaper than `%.0f`). Any other value
/// takes the general path: `INCR` (which refuses a counter that is not an
/// integer), then the fence read back with `GET`, so a large counter is
/// never printed in float notation. `ttl_ms` is the locker's
/// `fence_counter_ttl` (`'0'`: none, and `KEEPTTL` keeps the counter's
/// expiry, as `INCR` did). A counter read as missing is created with `NX`.
macro_rules! next_fence_lua {
    () => {
        r#"
local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local function fence_floor(now)
  return tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 1000) * 1000
end
local function fence_after(counter, floor)
  local last = 0
  if counter then
    if #counter > 16 or not string.find(counter, '^[1-9]%d*$') then
      return nil
    end
    last = tonumber(counter)
    if last >= 9007199254740991 then
      return nil
    end
  end
  return string.format('%d', math.max(last + 1, floor))
end
local function next_fence(key, counter, now, ttl_ms)
  local floor = fence_floor(now)
  local ttl = ttl_ms and ttl_ms ~= '0'
  local fence = fence_after(counter, floor)
  if not fence then
    if redis.call('INCR', key) < floor then
      redis.call('SET', key, string.format('%d', floor), 'KEEPTTL')
    end
    if ttl then
      redis.call('PEXPIRE', key, ttl_ms)
    end
    return redis.call('GET', key)
  end
  local set
  if counter and ttl then
    set = redis.call('SET', key, fence, 'PX', ttl_ms)
  elseif counter then
    set = redis.call('SET', key, fence, 'KEEPTTL')
  elseif ttl then
    set = redis.call('SET', key, fence, 'NX', 'PX', ttl_ms)
  else
    set = redis.call('SET', key, fence, 'NX')
  end
  if set then
    return fence
  end
end
"#
    };
}
pub(crate) use next_fence_lua;

/// The Lua of the hand-over (docs/PROTOCOL.md §4), shared by the lock's, the
/// semaphore's, the read-write lease's and the multi-key lease's scripts.
/// A queue entry is `<reg>|<deadline ms>|<owner>:<claim ms>`: the
/// registration id, when it stops counting by the server's clock (`TIME`),
/// the token a grant is made out to and the claim window; the
/// registration's key holds the entry as queued, for its bound (`PX`).
///
/// - `handover_args(base)`: the hand-over's arguments, which follow the
///   script's own at `ARGV[base + 1]`: registration id (empty: none),
///   registration bound ms, claim window ms, registration key prefix,
///   publish command, channel, the line's release message, the locker's
///   grant token for this line if it is registered (empty otherwise: a
///   grant can only be made out to a registration), `keep`: `k` when the
///   locker still has waiters once this attempt holds the lease (its
///   registration stays queued), `r` as `k` and the attempt that gets the
///   lease also refreshes the registration's bound (a locker served by
///   grants makes no busy attempt that would), `d` when it has none (the
///   attempt that gets the lease takes the registration out), and the
///   grant token a
///   registration this attempt makes names (the owner a grant is made out
///   to, never a holder's token; empty: this attempt does not register, it
///   tries once or hears no grants).
/// - `server_time()`, `now_ms()`: the script's one `TIME`, read at most
///   once, and its milliseconds.
/// - `enqueue(H, queue, flag, owner)`: registers the locker for its
///   grant token (`owner` when the arguments carry none: a multi-key
///   lease's), or refreshes its registration: the new entry's bound starts
///   now; `SET … GET` returns the entry as queued, which `LPOS` finds and
///   `LSET` replaces in its place; a locker not queued is `RPUSH`ed. Every
///   registration sets the flag, and the queue and the flag live until
///   the latest entry's bound (`PEXPIRE … GT`), so a queue is never left
///   unflagged and one whose registrants all died goes away. Only a slot
///   migration's refusal of the registration's key is waited out
///   unregistered; any other error (`NOPERM`) is raised.
/// - `rotate_head(queue, seen, served_once)` moves the head entry to the
///   tail (`LMOVE`: a registration keeps its place in the round, so the
///   claim of a grant writes nothing to the queue) and returns its id and
///   its `<owner>:<claim_ms>`, or `false` for an entry past its bound,
///   which is dropped (`RPOP`). A registration `seen` (a table, or `nil`)
///   already holds goes back to the head, and the third value is `true`:
///   a script that grants several times stops after a full round, with the
///   queue as it was. With `served_once` (a semaphore's, which its caller
///   says) the head is popped (`LPOP`) rather than rotated: a semaphore's
///   registration could otherwise get a second free slot before it claimed
///   the first (its claim queues it again). A multi-key lease's entry
///   (value `m<age>.<token>:<res_ms>`) is taken out as it is served; it
///   registers again at its next attempt.
/// - `next_registration(queue, seen, served_once)`: `rotate_head` until a
///   live entry: its id and value, `nil` for an empty queue, or `false`
///   when the round is complete. Each dead entry it meets is dropped, so
///   no attempt gets past a live registration however many died before
///   it, and each is dropped once.
/// - `grant_to(...)` writes the lease key for that registration's owner
///   with the next fence of its counter (docs/PROTOCOL.md §3, `next_fence`) for its
///   claim window, and publishes `<message>:g:<reg>:<fence>:<claim_ms>`;
///   for a waiting multi-key lease's registration (value
///   `m<age>.<token>:<res_ms>`, docs/PROTOCOL.md §6) it reserves the key
///   instead (`<token>:r<age>` for `res_ms`, no fence; notice fence `0`).
/// - `settle(H, queue, flag)`: the caller got the lease; with no
///   waiter left behind it (`keep` is `d`) its registration is taken out
///   (`GETDEL` gives the entry as queued, `LREM` removes it), with `r` it
///   is refreshed (`enqueue`).
/// - `claim(H, key, token, fence, lease_ms, queue, flag)`: a caller found its
///   own token or its grant token (a replay, or a grant to it): the lease
///   runs its full length from this attempt on, under the caller's token.
///   No claim notice is published (the other lockers learn that a grant
///   was settled from the next grant's notice, docs/PROTOCOL.md §4 "As
///   built"), so a claim wakes no subscriber.
/// - `is_ours(H, owner)`, `our_fence(H, value)`: whether a token is this
///   locker's (the caller's, or its grant token), and the fence of a lease
///   value `<token>:<fence>` that is.
/// - `take(key, counter_key, counter, t, ttl_ms)`: sets the free lease key
///   for the caller with the next fence (`NX`, the lease's `PX`); `nil`
///   when the key or the counter is of another type (`WRONGTYPE`).
macro_rules! handover_lua {
    () => {
        r#"
local function handover_args(base)
  return {
    reg = ARGV[base + 1], reg_ms = ARGV[base + 2], claim = ARGV[base + 3],
    reg_prefix = ARGV[base + 4], publish = ARGV[base + 5], channel = ARGV[base + 6],
    message = ARGV[base + 7], other = ARGV[base + 8], keep = ARGV[base + 9],
    grant = ARGV[base + 10],
  }
end
local server_t
local function server_time()
  if not server_t then
    server_t = redis.call('TIME')
  end
  return server_t
end
local function now_ms()
  local t = server_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function enqueue(H, queue, flag, owner)
  if H.reg == '' or H.grant == '' then
    return
  end
  if H.grant then
    owner = H.grant
  end
  local entry = H.reg .. '|' .. string.format('%d', now_ms() + tonumber(H.reg_ms)) .. '|' .. owner .. ':' .. H.claim
  local was = redis.pcall('SET', H.reg_prefix .. H.reg, entry, 'PX', H.reg_ms, 'GET')
  if type(was) == 'table' and was.err then
    if string.find(was.err, 'non local key', 1, true) then
      -- Not local while a slot migration imports the key: wait unregistered.
      return
    end
    error(was)
  end
  local at = was and redis.call('LPOS', queue, was)
  if at then
    redis.call('LSET', queue, at, entry)
  else
    redis.call('RPUSH', queue, entry)
  end
  -- The queue and its flag live as long as their latest registration,
  -- and no longer (a queue of lockers that all died goes away).
  if redis.call('PEXPIRE', queue, H.reg_ms, 'GT') == 0 then
    redis.call('PEXPIRE', queue, H.reg_ms, 'NX')
  end
  if redis.call('PEXPIRE', flag, H.reg_ms, 'GT') == 0
      and not redis.call('SET', flag, '1', 'NX', 'PX', H.reg_ms) then
    -- A flag without an expiry, left by an older version.
    redis.call('PEXPIRE', flag, H.reg_ms, 'NX')
  end
end
local function rotate_head(queue, seen, served_once)
  local entry
  if served_once then
    entry = redis.call('LPOP', queue)
  else
    entry = redis.call('LMOVE', queue, queue, 'LEFT', 'RIGHT')
  end
  if not entry then
    return nil
  end
  local a = string.find(entry, '|', 1, true)
  local b = a and string.find(entry, '|', a + 1, true)
  local reg = a and string.sub(entry, 1, a - 1) or entry
  if seen and seen[reg] then
    if served_once then
      redis.call('LPUSH', queue, entry)
    else
      redis.call('LMOVE', queue, queue, 'RIGHT', 'LEFT')
    end
    return reg, nil, true
  end
  local deadline = b and tonumber(string.sub(entry, a + 1, b - 1))
  local value = b and string.sub(entry, b + 1)
  if not (deadline and deadline > now_ms() and string.find(value, ':', 1, true)) then
    if not served_once then
      redis.call('RPOP', queue)
    end
    return reg, false
  end
  -- A multi-key lease's registration registers again at its next attempt.
  if string.sub(value, 1, 1) == 'm' and not served_once then
    redis.call('RPOP', queue)
  end
  if seen then
    seen[reg] = true
  end
  return reg, value
end
local function next_registration(queue, seen, served_once)
  while true do
    local reg, value, cycled = rotate_head(queue, seen, served_once)
    if not reg then
      return nil
    end
    if cycled then
      return false
    end
    if value then
      return reg, value
    end
  end
end
local function grant_to(reg, value, key, counter_key, counter, ttl_ms, publish, channel, message)
  local sep = string.find(value, ':', 1, true)
  local claim = string.sub(value, sep + 1)
  if string.sub(value, 1, 1) == 'm' then
    -- A waiting multi-key lease, m<age>.<token>: the key is reserved for
    -- it, no fence spent.
    local dot = string.find(value, '.', 1, true)
    redis.call('SET', key, string.sub(value, dot + 1, sep - 1) .. ':r' .. string.sub(value, 2, dot - 1), 'PX', claim)
    redis.pcall(publish, channel, message .. ':g:' .. reg .. ':0:' .. claim)
    return claim
  end
  local fence = next_fence(counter_key, counter, server_time(), ttl_ms)
  if not fence then
    return nil
  end
  redis.call('SET', key, string.sub(value, 1, sep - 1) .. ':' .. fence, 'PX', claim)
  redis.pcall(publish, channel, message .. ':g:' .. reg .. ':' .. fence .. ':' .. claim)
  return claim
end
local function settle(H, queue, flag)
  if not H or H.reg == '' then
    return
  end
  if H.keep == 'd' then
    local entry = redis.call('GETDEL', H.reg_prefix .. H.reg)
    if entry then
      redis.call('LREM', queue, 0, entry)
    end
  elseif H.keep == 'r' then
    enqueue(H, queue, flag, H.grant)
  end
end
local function claim(H, key, token, fence, lease_ms, queue, flag)
  redis.call('SET', key, token .. ':' .. fence, 'PX', lease_ms)
  settle(H, queue, flag)
end
local function is_ours(H, owner)
  return owner == ARGV[1] or (H and H.other ~= '' and owner == H.other)
end
local function our_fence(H, value)
  local sep = value and string.find(value, ':', 1, true)
  if sep and is_ours(H, string.sub(value, 1, sep - 1)) then
    return string.sub(value, sep + 1)
  end
end
local function take(key, counter_key, counter, t, ttl_ms)
  local fence = next_fence(counter_key, counter, t, ttl_ms)
  if fence and redis.call('SET', key, ARGV[1] .. ':' .. fence, 'NX', 'PX', ARGV[2]) then
    return fence
  end
end
"#
    };
}
pub(crate) use handover_lua;

/// The Lua of the read-write lease's hand-over (docs/PROTOCOL.md §5.3),
/// after [`next_fence_lua`] and [`handover_lua`]. Queue entries are
/// `w<reg>` (a locker's writers) and `r<reg>` (its readers).
///
/// - `read_epoch(counter_key, counter, t, ttl_ms)`: the epoch a reader
///   gets, the latest writer fence; a missing counter is set to the §3
///   floor first, so that the next writer's fence is above every epoch.
/// - `admit(readers, token, expiry)`: adds a reader; the set expires with
///   its latest member.
/// - `readers_until(readers)`: the latest live reader's expiry, or `nil`.
/// - `rw_hand_over(write, readers, counter_key, counter, ttl_ms, H,
///   self_entry)`: hands the free lease to the head live entry: a writer
///   gets the write lease (`grant_to`) unless a reader is live, and then
///   stays first in line; every reader at the head is admitted together,
///   each for its claim window, with the epoch and one notification each.
///   Returns the claim window of the grant (`nil`: nothing granted),
///   whether `self_entry` (the caller's entry) was the head or among the
///   readers admitted, whether readers were admitted, and whether a
///   writer's entry is next in the queue (after them, or kept first by
///   live readers); an empty queue's flag is deleted.
/// - `rw_begin(base)`: what a read or a write starts with: the hand-over's
///   arguments (after `ARGV[base]`, `H`, or `false` without the queue's
///   `KEYS[5]`, `KEYS[6]`), one `MGET` of the writer, the intent, the
///   counter and the queue's flag, the flag as `queue.queued`, and
///   `register(token)`, which registers a waiting caller.
macro_rules! rw_handover_lua {
    () => {
        r#"
local function read_epoch(counter_key, counter, t, ttl_ms)
  if counter then
    if ttl_ms ~= '0' then
      redis.call('PEXPIRE', counter_key, ttl_ms)
    end
    return counter
  end
  local epoch = string.format('%.0f', tonumber(t[1]) * 1000000 + math.floor(tonumber(t[2]) / 1000) * 1000)
  if ttl_ms ~= '0' then
    redis.call('SET', counter_key, epoch, 'PX', ttl_ms)
  else
    redis.call('SET', counter_key, epoch)
  end
  return epoch
end
local function admit(readers, token, expiry)
  redis.call('ZADD', readers, expiry, token)
  if redis.call('PEXPIREAT', readers, expiry, 'GT') == 0 then
    redis.call('PEXPIREAT', readers, expiry, 'NX')
  end
end
local function readers_until(readers)
  local latest = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  local expiry = latest[2] and tonumber(latest[2])
  if expiry and expiry > now_ms() then
    return expiry
  end
end
local function rw_hand_over(write, readers, counter_key, counter, ttl_ms, H, self_entry)
  local reg, value = next_registration(H.queue)
  if not reg then
    if reg == nil then
      redis.call('DEL', H.flag)
    end
    return nil, false
  end
  if string.sub(reg, 1, 1) ~= 'r' then
    if reg == self_entry then
      return nil, true, false, false
    end
    if readers_until(readers) then
      -- No writer beside a live reader: it waits, first in line.
      redis.call('LMOVE', H.queue, H.queue, 'RIGHT', 'LEFT')
      return nil, false, false, true
    end
    return grant_to(reg, value, write, counter_key, counter, ttl_ms, H.publish, H.channel, H.message), false, false, false
  end
  local t = server_time()
  local now = now_ms()
  local epoch = read_epoch(counter_key, counter, t, ttl_ms)
  local claim, served, writer_next = nil, false, false
  local seen = {[reg] = true}
  while true do
    if value then
      local sep = string.find(value, ':', 1, true)
      claim = string.sub(value, sep + 1)
      admit(readers, string.sub(value, 1, sep - 1), string.format('%.0f', now + tonumber(claim)))
      redis.pcall(H.publish, H.channel, H.message .. ':g:' .. reg .. ':' .. epoch .. ':' .. claim)
      served = served or reg == self_entry
    end
    local head = redis.call('LINDEX', H.queue, 0)
    if not (head and string.sub(head, 1, 1) == 'r') then
      writer_next = head and true or false
      break
    end
    -- Each reader's registration keeps its place in the round, as
    -- next_registration does; a full round stops at the first one again.
    local cycled
    reg, value, cycled = rotate_head(H.queue, seen)
    if cycled or not reg then
      break
    end
  end
  return claim, served, claim ~= nil, writer_next
end
local function rw_begin(base)
  local handover = #KEYS == 6
  local H = handover and handover_args(base)
  if H then
    H.queue, H.flag = KEYS[5], KEYS[6]
  end
  local got = redis.call('MGET', KEYS[1], KEYS[3], KEYS[4], KEYS[#KEYS])
  local queue = {queued = handover and got[4]}
  local function register(token)
    if handover then
      enqueue(H, KEYS[5], KEYS[6], token)
    end
  end
  return H, got, queue, register
end
"#
    };
}

/// Acquire: KEYS = lock, fence counter, and with the hand-over the queue
/// and its flag; ARGV = owner token, lease ms, fence counter TTL in ms (0:
/// the counter never expires), and with the hand-over its arguments
/// ([`handover_lua`]'s `handover_args(3)`).
///
/// The lock's value is `<token>:<fence>`, so an acquire replayed by a client
/// library after a timeout finds its own token and returns the same fence
/// without a second grant; it also sets the lease's full length from this
/// attempt on, as the caller's clock counts it. That is the claim of a
/// grant the hand-over made out to this locker (a token of its own), which
/// may re-register the locker for its next waiter. Every grant's fence is `max(counter + 1, TIME in ms ×
/// 1000)` (docs/PROTOCOL.md §3), so fences keep increasing after Redis lost its data
/// and after a failover to a replica that missed the last grants.
///
/// One `MGET` reads the lock, the counter and the queue's flag, so a busy
/// attempt runs `MGET` + `PTTL` (and `SET … GET` to register or refresh
/// the registration, `RPUSH` the first time) and an uncontended grant
/// `MGET` + `TIME` + two `SET`s; the fence comes from `next_fence`
/// ([`next_fence_lua`]). A lock found free with registrations queued goes
/// to the head registration ([`handover_lua`]) unless that is the caller's
/// own; the caller then hears busy for the claim window.
///
/// `MGET` reads a key of another type as missing, where `GET` and `INCR`
/// refused it with `WRONGTYPE`: so a counter `MGET` found missing is
/// created with `NX`, the lock is set with `NX`, and either refusal is
/// answered with that same `WRONGTYPE` error. The counter is written first,
/// so an error never leaves a lock whose fence the counter does not cover.
pub(crate) const ACQUIRE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    r#"
local handover = #KEYS == 4
local H = handover and handover_args(3)
local got = redis.call('MGET', KEYS[1], KEYS[2], KEYS[#KEYS])
local queued = handover and got[3]
local function register(token)
  if handover then
    enqueue(H, KEYS[3], KEYS[4], token)
  end
end
if got[1] then
  local fence = our_fence(H, got[1])
  if fence then
    claim(H, KEYS[1], ARGV[1], fence, ARGV[2], KEYS[3], KEYS[4])
    return fence
  end
  register(ARGV[1])
  return redis.call('PTTL', KEYS[1])
end
if queued then
  local reg, value = next_registration(KEYS[3])
  if reg and reg ~= H.reg then
    local claim_ms = grant_to(reg, value, KEYS[1], KEYS[2], got[2], ARGV[3], H.publish, H.channel, H.message)
    if not claim_ms then
      return redis.error_reply(WRONGTYPE)
    end
    register(ARGV[1])
    return tonumber(claim_ms)
  end
  if reg == nil then
    redis.call('DEL', KEYS[4])
  end
end
local fence = take(KEYS[1], KEYS[2], got[2], server_time(), ARGV[3])
if not fence then
  return redis.error_reply(WRONGTYPE)
end
if queued then
  -- The caller's own registration was the head, or the queue was empty.
  settle(H, KEYS[3], KEYS[4])
end
return fence
"#
);

/// Release: KEYS = lease key; ARGV = owner token, publish command, channel,
/// message, and for a lock or a permit's slot with the hand-over the fence
/// counter TTL in ms, the registration key prefix, and the names of the
/// fence counter, the queue and the queue's flag (then, for a writer, the
/// readers' key; for a lock whose locker's registration lingers, `''` and
/// that registration, which is never granted: docs/PROTOCOL.md §4.4).
/// Returns 1 released, 3 released and handed over, 0 expired (key gone),
/// 2 conflict. A lease whose queue holds a live registration is handed to
/// it ([`handover_lua`]) instead of deleted.
///
/// Only the lease key is declared: a release is a single-key command for
/// Redis Cluster, so it runs on the node that has the lease while a slot
/// migration has moved it there and not yet the queue's keys (the names
/// share its hash tag, so they are in its slot; missing on that node, they
/// read as an empty queue and the release is a plain one).
///
/// `MGET` reads a key of another type as missing: `EXISTS` then tells it
/// from a lease that expired, and it is refused with `WRONGTYPE` as `GET`
/// refused it. The plain notification goes out only when this script
/// deleted the key, and through `pcall`: a publish refused (an ACL without
/// channel rights) must not turn an applied `DEL` into an error reply;
/// waiters then rely on safety polls.
pub(crate) const RELEASE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    rw_handover_lua!(),
    r#"
local handover = #ARGV >= 9
local got = handover and redis.pcall('MGET', KEYS[1], ARGV[7], ARGV[9])
if not got or got.err then
  -- Only the lease key is declared: on the node a slot migration is
  -- importing it to, the queue's names are not local yet.
  handover = false
  got = redis.call('MGET', KEYS[1])
end
local held = got[1]
if not held then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply(WRONGTYPE)
  end
  return 0
end
local sep = string.find(held, ':', 1, true)
if not (sep and string.sub(held, 1, sep - 1) == ARGV[1]) then
  return 2
end
if handover and got[3] and ARGV[10] and ARGV[10] ~= '' then
  -- A writer's release: the head writer, or the readers at the head.
  local H = {queue = ARGV[8], flag = ARGV[9], reg_prefix = ARGV[6], publish = ARGV[2], channel = ARGV[3], message = ARGV[4]}
  if rw_hand_over(KEYS[1], ARGV[10], ARGV[7], got[2], ARGV[5], H, '') then
    if redis.call('GET', KEYS[1]) == held then
      redis.call('DEL', KEYS[1])
    end
    return 1
  end
elseif handover and got[3] then
  local own, once = ARGV[11], ARGV[12] == '1'
  local reg, value = next_registration(ARGV[8], nil, once)
  if reg and reg == own then
    -- The releaser's own registration, lingering for its next waiter
    -- (docs/PROTOCOL.md §4.4): the next one's turn, if there is one.
    reg, value = next_registration(ARGV[8], {[own] = true}, once)
  end
  if reg and grant_to(reg, value, KEYS[1], ARGV[7], got[2], ARGV[5], ARGV[2], ARGV[3], ARGV[4]) then
    return 3
  end
  if reg == nil then
    redis.call('DEL', ARGV[9])
  end
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[2], ARGV[3], ARGV[4])
return 1
"#
);

/// Renew: KEYS = lock; ARGV = owner token, lease ms. Returns 1 renewed,
/// 0 expired, 2 conflict. Never re-creates an expired key.
pub(crate) const RENEW_LUA: &str = r#"
local held = redis.call('GET', KEYS[1])
if not held then
  return 0
end
local sep = string.find(held, ':', 1, true)
if sep and string.sub(held, 1, sep - 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 2
"#;

/// Deregistration of a locker whose last waiter for a key left
/// (docs/PROTOCOL.md §4.4): KEYS = the hand-over queue; ARGV = the
/// registration's key. Deletes the registration and its queue entry (the
/// key holds the entry as queued), so no grant goes to a locker nobody
/// waits on; an entry whose key expired is dropped by the next grant that
/// reaches it. Returns 1.
pub(crate) const DEREGISTER_LUA: &str = r#"
local entry = redis.call('GETDEL', ARGV[1])
if entry then
  redis.call('LREM', KEYS[1], 0, entry)
end
return 1
"#;

/// The Lua both semaphore scripts that look for a token start with:
/// `read_slots(permits, extra)` returns the values of the slots (`KEYS[2] ..
/// i`), the count of slots recorded at `KEYS[1]` and the value of the key
/// `extra` (if given: the hand-over queue's flag): one `MGET` of the record,
/// the `permits` slots asked for and `extra`, and a second one only for the
/// slots past them that a larger recorded count says may be held.
macro_rules! read_slots_lua {
    () => {
        r#"
local function read_slots(permits, extra)
  local names = {KEYS[1]}
  for i = 1, permits do
    names[i + 1] = KEYS[2] .. (i - 1)
  end
  if extra then
    names[permits + 2] = extra
  end
  local got = redis.call('MGET', unpack(names))
  local stored = tonumber(got[1] or '0') or 0
  local held = {}
  for i = 1, permits do
    held[i] = got[i + 1]
  end
  local more = {}
  for i = permits + 1, stored do
    more[#more + 1] = KEYS[2] .. (i - 1)
  end
  if #more > 0 then
    local rest = redis.call('MGET', unpack(more))
    for i = 1, #rest do
      held[permits + i] = rest[i]
    end
  end
  return held, stored, extra and got[permits + 2]
end
"#
    };
}

/// Semaphore acquire (docs/PROTOCOL.md §5.2): KEYS = permit record, slot prefix, fence
/// prefix, and with the hand-over the queue and its flag; ARGV = owner
/// token, lease ms, fence counter TTL in ms, permits, and with the
/// hand-over its arguments ([`handover_lua`]'s `handover_args(4)`).
///
/// One `MGET` reads the count record, every slot of the count asked for and
/// the queue's flag; a second one, only when the record is larger, the
/// slots past it. A token of this locker already in a slot gets that slot
/// and fence back, with the full lease from this attempt on (a replay, or
/// the claim of a slot the hand-over granted: [`handover_lua`]'s `claim`).
/// A permit count other than the recorded one is refused while any slot of
/// the recorded count is held (the reply `['permits', n]`) and replaces the
/// record when none is, so lockers that disagree never hold more than one
/// count's slots at once. With registrations queued, each free slot goes
/// to the next live registration in turn (`grant_to`), until the caller's
/// own comes up or the slots or the queue run out. Else the lowest free
/// slot is taken with the next fence of its own counter, computed as in
/// [`ACQUIRE_LUA`] (the §3 floor; `GET`, `TIME`, two `SET`s) and the reply
/// is `[slot, fence]`, or `[slot, fence, 1]` when the locker's next waiter
/// (`next` of the hand-over's arguments) is registered and no other slot
/// is free: that waiter then waits for its grant instead of an attempt
/// that could only be busy (a take of the last free slot registers it, as
/// a claim does); with every slot held it is the smallest remaining
/// time (`-1` when none is known, one `PTTL` per slot) or the claim window
/// of the grant this attempt made, and a waiting caller registers.
///
/// The slot is set with `NX`: `MGET` reads a slot of another type as free,
/// and `SET NX` refuses it with `WRONGTYPE` instead of overwriting it.
pub(crate) const SEM_ACQUIRE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    read_slots_lua!(),
    r#"
local handover = #KEYS == 5
local H = handover and handover_args(4)
local permits = tonumber(ARGV[4])
local held, stored, queued = read_slots(permits, handover and KEYS[5])
local next_registers = H and H.grant ~= '' and H.keep ~= 'd'
for i = 1, #held do
  local fence = our_fence(H, held[i])
  if fence then
    claim(H, KEYS[2] .. (i - 1), ARGV[1], fence, ARGV[2], KEYS[4], KEYS[5])
    if next_registers then
      if H.keep == 'k' then
        enqueue(H, KEYS[4], KEYS[5], ARGV[1])
      end
      for j = 1, permits do
        if j ~= i and not held[j] then
          return {i - 1, fence}
        end
      end
      return {i - 1, fence, 1}
    end
    return {i - 1, fence}
  end
end
if stored ~= permits then
  for i = 1, stored do
    if held[i] then
      return {'permits', stored}
    end
  end
  redis.call('SET', KEYS[1], permits)
end
local free = {}
for i = 1, permits do
  if not held[i] then
    free[#free + 1] = i - 1
  end
end
local granted
local seen = {}
while queued and #free > 0 do
  -- A registration is served once per round: popped, not rotated, or it
  -- could be handed a second free slot before it claimed the first (its
  -- claim queues it again).
  local reg, value = next_registration(KEYS[4], seen, true)
  if not reg then
    if reg == nil then
      redis.call('DEL', KEYS[5])
      queued = false
    end
    break
  end
  if reg == H.reg then
    break
  end
  local slot = table.remove(free, 1)
  local counter = KEYS[3] .. slot
  granted = grant_to(reg, value, KEYS[2] .. slot, counter, redis.call('GET', counter), ARGV[3], H.publish, H.channel, H.message)
  if not granted then
    return redis.error_reply(WRONGTYPE)
  end
end
if #free == 0 then
  if handover then
    enqueue(H, KEYS[4], KEYS[5], ARGV[1])
  end
  if granted then
    return tonumber(granted)
  end
  local least = -1
  for i = 1, permits do
    local ttl = redis.call('PTTL', KEYS[2] .. (i - 1))
    if ttl >= 0 and (least < 0 or ttl < least) then
      least = ttl
    end
  end
  return least
end
local slot = free[1]
local counter = KEYS[3] .. slot
local fence = take(KEYS[2] .. slot, counter, redis.call('GET', counter), server_time(), ARGV[3])
if not fence then
  return redis.error_reply(WRONGTYPE)
end
if next_registers and #free == 1 then
  enqueue(H, KEYS[4], KEYS[5], ARGV[1])
  return {slot, fence, 1}
end
if queued then
  settle(H, KEYS[4], KEYS[5])
end
return {slot, fence}
"#
);

/// Semaphore release of a token whose slot is unknown (an acquire whose
/// outcome was unknown): KEYS = permit record, slot prefix; ARGV = owner
/// token, publish command, channel, message, permits. Finds the token among
/// the slots (read as in [`SEM_ACQUIRE_LUA`]: one `MGET` with the count
/// record), deletes it and notifies; 1 released, 0 not held.
pub(crate) const SEM_RELEASE_ANY_LUA: &str = concat!(
    read_slots_lua!(),
    r#"
local permits = tonumber(ARGV[5])
local held, stored = read_slots(permits)
local mine = ARGV[1] .. ':'
for i = 1, #held do
  local v = held[i]
  if v and string.sub(v, 1, #mine) == mine then
    redis.call('DEL', KEYS[2] .. (i - 1))
    redis.pcall(ARGV[2], ARGV[3], ARGV[4])
    return 1
  end
end
return 0
"#
);

/// Read-write lease, read (docs/PROTOCOL.md §5.3): KEYS = writer, readers, intent,
/// fence counter, and with the hand-over the queue and its flag; ARGV =
/// owner token, lease ms, fence counter TTL in ms, and with the hand-over
/// its arguments ([`handover_lua`]'s `handover_args(3)`).
///
/// One `MGET` reads the writer, the intent, the counter and the queue's
/// flag. Busy (the writer's or the intent's `PTTL`) while a writer holds
/// the lease or a waiting writer's intent lives: writers are preferred; a
/// waiting caller then registers. On those paths, and while lockers are
/// queued, a live reader of this locker (this token, or the one its
/// registration names: a hand-over admitted it) is the claim, or a replay:
/// it gets the epoch and the full lease from this attempt on. A free lease
/// with lockers queued goes to the head first ([`rw_handover_lua`]'s
/// `rw_hand_over`); a live writer first in line keeps new readers out
/// while it waits for the live ones. Else the reader is added, scored by
/// its expiry in the server's ms (`TIME`), and the epoch is the counter's
/// value, the latest writer fence; a missing counter is set to the §3
/// floor first, so that the next writer's fence is above every epoch
/// handed out. A replay sets the reader's expiry anew from this attempt
/// on, as every kind's replay does.
///
/// The set expires with its latest member: `PEXPIREAT ... GT` moves its
/// expiry to the new reader's when that is later, and only a set with no
/// expiry yet (one this `ZADD` created: every script that adds a reader
/// gives the set an expiry in the same run) takes it with `NX`, which
/// leaves nothing to purge; on a set that was there the expired readers are
/// purged.
pub(crate) const RW_READ_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    rw_handover_lua!(),
    r#"
local H, got, queue, register = rw_begin(3)
local epoch = got[3]
if got[1] then
  -- No reader lives beside a writer.
  register(ARGV[1])
  return redis.call('PTTL', KEYS[1])
end
local function expiry()
  return string.format('%.0f', now_ms() + tonumber(ARGV[2]))
end
-- A live reader of this locker (a replay, or one a hand-over admitted)
-- holds the lease again, from this attempt on.
local function claimed()
  for _, token in ipairs({ARGV[1], H and H.other or ''}) do
    local score = token ~= '' and redis.call('ZSCORE', KEYS[2], token)
    if score and tonumber(score) > now_ms() then
      if token ~= ARGV[1] then
        redis.call('ZREM', KEYS[2], token)
      end
      admit(KEYS[2], ARGV[1], expiry())
      settle(H, KEYS[5], KEYS[6])
      return read_epoch(KEYS[4], epoch, server_time(), ARGV[3])
    end
  end
end
if got[2] or queue.queued then
  local mine = claimed()
  if mine then
    return mine
  end
  if got[2] then
    register(ARGV[1])
    return redis.call('PTTL', KEYS[3])
  end
  local claim, served, readers_in, writer_next = rw_hand_over(KEYS[1], KEYS[2], KEYS[4], epoch, ARGV[3], H, H.reg)
  epoch = redis.call('GET', KEYS[4])
  if served then
    mine = claimed()
    if mine then
      return mine
    end
  end
  if writer_next and not claim then
    -- A writer first in line waits for the live readers; new ones wait
    -- behind it.
    register(ARGV[1])
    return readers_until(KEYS[2]) - now_ms()
  end
  -- Readers let in with no writer queued next: this one joins them.
  if claim and not (readers_in and not writer_next) then
    register(ARGV[1])
    return tonumber(claim)
  end
end
-- A replay sets the reader's expiry anew, as every kind's replay does.
local until_ms = expiry()
redis.call('ZADD', KEYS[2], until_ms, ARGV[1])
epoch = read_epoch(KEYS[4], epoch, server_time(), ARGV[3])
local fresh = false
if redis.call('PEXPIREAT', KEYS[2], until_ms, 'GT') == 0 then
  fresh = redis.call('PEXPIREAT', KEYS[2], until_ms, 'NX') == 1
end
if not fresh then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms())
end
if queue.queued then
  settle(H, KEYS[5], KEYS[6])
end
return epoch
"#
);

/// Read-write lease, write (docs/PROTOCOL.md §5.3): KEYS = writer, readers, intent,
/// fence counter, and with the hand-over the queue and its flag; ARGV =
/// owner token, lease ms, fence counter TTL in ms, intent ms (0: a
/// try-once write, which leaves no intent), and with the hand-over its
/// arguments ([`handover_lua`]'s `handover_args(4)`).
///
/// As the lock's acquire (one `MGET`, here of the writer, the intent, the
/// counter and the queue's flag; replay-safe, and a writer of this locker
/// found holding is the claim of a hand-over; the §3 fence computed as
/// there), but also busy while any live reader holds it: the latest
/// reader's expiry (`ZRANGE -1 -1`) is in the future. Then a writer that
/// will wait sets the intent (or refreshes its own), which keeps new
/// readers out, registers, and the reply is the time until that expiry. A
/// set of expired readers only is deleted. A free lease with lockers
/// queued goes to the head first ([`rw_handover_lua`]). A grant or a claim
/// clears its own intent.
///
/// As in [`ACQUIRE_LUA`], a writer key or counter `MGET` read as missing is
/// written with `NX`, so one of another type is refused with `WRONGTYPE`.
pub(crate) const RW_WRITE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    rw_handover_lua!(),
    r#"
local H, got, queue, register = rw_begin(4)
if got[1] then
  local fence = our_fence(H, got[1])
  if fence then
    claim(H, KEYS[1], ARGV[1], fence, ARGV[2], KEYS[5], KEYS[6])
    if got[2] and is_ours(H, got[2]) then
      redis.call('DEL', KEYS[3])
    end
    return fence
  end
  register(ARGV[1])
  return redis.call('PTTL', KEYS[1])
end
local t = server_time()
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local latest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if latest[1] then
  if tonumber(latest[2]) > now then
    if ARGV[4] ~= '0' and (not got[2] or got[2] == ARGV[1]) then
      redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[4])
    end
    register(ARGV[1])
    return tonumber(latest[2]) - now
  end
  redis.call('DEL', KEYS[2])
end
if queue.queued then
  local claim_ms = rw_hand_over(KEYS[1], KEYS[2], KEYS[4], got[3], ARGV[3], H, H.reg)
  if claim_ms then
    register(ARGV[1])
    return tonumber(claim_ms)
  end
  got[3] = redis.call('GET', KEYS[4])
end
local fence = take(KEYS[1], KEYS[4], got[3], t, ARGV[3])
if not fence then
  return redis.error_reply(WRONGTYPE)
end
if got[2] == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
if queue.queued then
  settle(H, KEYS[5], KEYS[6])
end
return fence
"#
);

/// Read-write lease, release of a reader: KEYS = readers; ARGV = owner
/// token, publish command, channel, message, and with the hand-over the
/// fence counter TTL in ms, the registration key prefix, and the names of
/// the fence counter, the queue, the queue's flag and the writer. Returns 1
/// released, 0 expired (a reader past its expiry is never released as
/// live). Expired readers are purged first, so the `ZREM` tells whether
/// this one was live, and `ZCARD` what is left: the last live reader's
/// release hands the lease to the head of the queue
/// ([`rw_handover_lua`]), or notifies (waiting writers). As the lock's
/// release, only its own key is declared; the others are reached through
/// `pcall` while a slot migration has not moved them yet.
pub(crate) const RW_READ_RELEASE_LUA: &str = concat!(
    next_fence_lua!(),
    handover_lua!(),
    rw_handover_lua!(),
    r#"
local t = server_time()
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  if #ARGV == 10 then
    local got = redis.pcall('MGET', ARGV[7], ARGV[9], ARGV[10])
    if got[2] and not got[3] then
      local H = {queue = ARGV[8], flag = ARGV[9], reg_prefix = ARGV[6], publish = ARGV[2], channel = ARGV[3], message = ARGV[4]}
      if rw_hand_over(ARGV[10], KEYS[1], ARGV[7], got[1], ARGV[5], H, '') then
        return 1
      end
    end
  end
  redis.pcall(ARGV[2], ARGV[3], ARGV[4])
end
return 1
"#
);

/// Read-write lease, renew of a reader: KEYS = readers; ARGV = owner
/// token, lease ms. Returns 1 renewed, 0 expired: a reader past its expiry
/// is never brought back. The set, which has an expiry while it holds a
/// reader, moves it with `PEXPIREAT ... GT` to the new one when that is
/// later.
pub(crate) const RW_READ_RENEW_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not mine or tonumber(mine) <= now then
  return 0
end
local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], expiry, 'GT')
return 1
"#;

/// Which of the scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ScriptKind {
    Acquire,
    Release,
    Renew,
    SemAcquire,
    SemReleaseAny,
    RwRead,
    RwWrite,
    RwReadRelease,
    RwReadRenew,
    /// An election's campaign, proclaim, resign and read (`core/election.rs`).
    Campaign,
    Proclaim,
    Resign,
    ElectRead,
    Deregister,
    /// A multi-key lease's acquire, renew and release (`core/multi.rs`).
    MultiAcquire,
    MultiRenew,
    MultiRelease,
}

static ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(ACQUIRE_LUA));
static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_LUA));
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RENEW_LUA));
static SEM_ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SEM_ACQUIRE_LUA));
static SEM_RELEASE_ANY: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(SEM_RELEASE_ANY_LUA));
static RW_READ: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RW_READ_LUA));
static RW_WRITE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RW_WRITE_LUA));
static RW_READ_RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RW_READ_RELEASE_LUA));
static RW_READ_RENEW: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(RW_READ_RENEW_LUA));
static CAMPAIGN: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CAMPAIGN_LUA));
static PROCLAIM: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(PROCLAIM_LUA));
static RESIGN: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RESIGN_LUA));
static ELECT_READ: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(READ_LUA));
static DEREGISTER: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(DEREGISTER_LUA));
static MULTI_ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(MULTI_ACQUIRE_LUA));
static MULTI_RENEW: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(MULTI_RENEW_LUA));
static MULTI_RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(MULTI_RELEASE_LUA));

impl ScriptKind {
    pub(crate) fn source(self) -> &'static str {
        match self {
            ScriptKind::Acquire => ACQUIRE_LUA,
            ScriptKind::Release => RELEASE_LUA,
            ScriptKind::Renew => RENEW_LUA,
            ScriptKind::SemAcquire => SEM_ACQUIRE_LUA,
            ScriptKind::SemReleaseAny => SEM_RELEASE_ANY_LUA,
            ScriptKind::RwRead => RW_READ_LUA,
            ScriptKind::RwWrite => RW_WRITE_LUA,
            ScriptKind::RwReadRelease => RW_READ_RELEASE_LUA,
            ScriptKind::RwReadRenew => RW_READ_RENEW_LUA,
            ScriptKind::Campaign => CAMPAIGN_LUA,
            ScriptKind::Proclaim => PROCLAIM_LUA,
            ScriptKind::Resign => RESIGN_LUA,
            ScriptKind::ElectRead => READ_LUA,
            ScriptKind::Deregister => DEREGISTER_LUA,
            ScriptKind::MultiAcquire => MULTI_ACQUIRE_LUA,
            ScriptKind::MultiRenew => MULTI_RENEW_LUA,
            ScriptKind::MultiRelease => MULTI_RELEASE_LUA,
        }
    }

    /// The SHA-1 digest EVALSHA needs (computed by `redis::Script`).
    pub(crate) fn sha1(self) -> &'static str {
        match self {
            ScriptKind::Acquire => ACQUIRE.get_hash(),
            ScriptKind::Release => RELEASE.get_hash(),
            ScriptKind::Renew => RENEW.get_hash(),
            ScriptKind::SemAcquire => SEM_ACQUIRE.get_hash(),
            ScriptKind::SemReleaseAny => SEM_RELEASE_ANY.get_hash(),
            ScriptKind::RwRead => RW_READ.get_hash(),
            ScriptKind::RwWrite => RW_WRITE.get_hash(),
            ScriptKind::RwReadRelease => RW_READ_RELEASE.get_hash(),
            ScriptKind::RwReadRenew => RW_READ_RENEW.get_hash(),
            ScriptKind::Campaign => CAMPAIGN.get_hash(),
            ScriptKind::Proclaim => PROCLAIM.get_hash(),
            ScriptKind::Resign => RESIGN.get_hash(),
            ScriptKind::ElectRead => ELECT_READ.get_hash(),
            ScriptKind::Deregister => DEREGISTER.get_hash(),
            ScriptKind::MultiAcquire => MULTI_ACQUIRE.get_hash(),
            ScriptKind::MultiRenew => MULTI_RENEW.get_hash(),
            ScriptKind::MultiRelease => MULTI_RELEASE.get_hash(),
        }
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

    fn name(self) -> &'static str {
        match self {
            ScriptKind::Acquire => "acquire",
            ScriptKind::Release => "release",
            ScriptKind::Renew => "renew",
            ScriptKind::SemAcquire => "semaphore acquire",
            ScriptKind::SemReleaseAny => "semaphore release",
            ScriptKind::RwRead => "read",
            ScriptKind::RwWrite => "write",
            ScriptKind::RwReadRelease => "read release",
            ScriptKind::RwReadRenew => "read renew",
            ScriptKind::Campaign => "campaign",
            ScriptKind::Proclaim => "proclaim",
            ScriptKind::Resign => "resign",
            ScriptKind::ElectRead => "leader read",
            ScriptKind::Deregister => "deregister",
            ScriptKind::MultiAcquire => "multi-key acquire",
            ScriptKind::MultiRenew => "multi-key renew",
            ScriptKind::MultiRelease => "multi-key release",
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

    /// The hash slot of the call's first key, which a cluster routes it by.
    pub(crate) fn slot(&self) -> Option<u16> {
        self.keys.first().map(|key| crate::cluster::slot_of(key))
    }

    /// The verbs that run it: `EVALSHA`/`EVAL`, or their read-only forms
    /// for a script that writes nothing (a read-only user can run it).
    fn verbs(&self) -> (&'static str, &'static str) {
        match self.kind {
            ScriptKind::ElectRead => ("EVALSHA_RO", "EVAL_RO"),
            _ => ("EVALSHA", "EVAL"),
        }
    }

    pub(crate) fn acquire(
        names: &LockNames,
        token: OwnerToken,
        lease_ms: u64,
        fence_counter_ttl_ms: u64,
        handover: Option<AcquireHandover>,
    ) -> Self {
        let mut call = ScriptCall {
            kind: ScriptKind::Acquire,
            keys: vec![names.lock.clone(), names.fence.clone()],
            args: vec![
                token.to_hex(),
                lease_ms.to_string(),
                fence_counter_ttl_ms.to_string(),
            ],
        };
        call.add_handover(&names.queue, handover);
        call
    }

    /// Appends the hand-over's keys and arguments ([`handover_lua`]'s
    /// `handover_args`) to an acquire, if it takes part.
    fn add_handover(&mut self, queue: &QueueNames, handover: Option<AcquireHandover>) {
        let Some(h) = handover else {
            return;
        };
        self.keys.extend([queue.list.clone(), queue.flag.clone()]);
        self.args.extend([
            h.entry,
            h.reg_ms.to_string(),
            h.claim_ms.to_string(),
            queue.reg_prefix.clone(),
            h.channel.publish_command().to_owned(),
            h.channel_name,
            h.message,
            if h.registered {
                h.grant_token.to_hex()
            } else {
                String::new()
            },
            match (h.keep, h.refresh) {
                (false, _) => "d",
                (true, false) => "k",
                (true, true) => "r",
            }
            .to_owned(),
            if h.register {
                h.grant_token.to_hex()
            } else {
                String::new()
            },
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
        self.args.extend([
            fence_counter_ttl_ms.to_string(),
            queue.reg_prefix.clone(),
            counter,
            queue.list.clone(),
            queue.flag.clone(),
        ]);
        self
    }

    /// This release (of a lock, with the hand-over) by a locker whose
    /// registration `reg` lingers in the queue (docs/PROTOCOL.md §4.4): the
    /// release never grants the key to it.
    pub(crate) fn skipping(mut self, reg: String) -> Self {
        self.args.extend([String::new(), reg]);
        self
    }

    /// This release (of a permit's slot, with the hand-over) serves each
    /// registration once per round: the one it grants the slot to leaves
    /// the queue until its claim queues it again, so a second slot's
    /// release cannot grant it twice.
    pub(crate) fn serving_once(mut self) -> Self {
        self.args
            .extend([String::new(), String::new(), "1".to_owned()]);
        self
    }

    /// This release of a read-write lease with the hand-over: its other
    /// key (the readers' for a writer's release, the writer's for a
    /// reader's), which a hand-over may grant.
    pub(crate) fn with_rw_key(mut self, key: String) -> Self {
        self.args.push(key);
        self
    }

    /// Removes the locker's registration, queued as `reg`, from `queue`.
    pub(crate) fn deregister(queue: &QueueNames, reg: String) -> Self {
        ScriptCall {
            kind: ScriptKind::Deregister,
            keys: vec![queue.list.clone()],
            args: vec![format!("{}{reg}", queue.reg_prefix)],
        }
    }

    /// Release of the lease key `key` by token, notifying `line`'s waiters.
    pub(crate) fn release(
        key: &str,
        line: LineKey,
        token: OwnerToken,
        namespace: &str,
        channel: Channel,
    ) -> Self {
        ScriptCall {
            kind: ScriptKind::Release,
            keys: vec![key.to_owned()],
            args: vec![
                token.to_hex(),
                channel.publish_command().to_owned(),
                channel.name(namespace, line.id),
                line.message(),
            ],
        }
    }

    pub(crate) fn sem_acquire(
        names: &SemNames,
        permits: u32,
        token: OwnerToken,
        lease_ms: u64,
        fence_counter_ttl_ms: u64,
        handover: Option<AcquireHandover>,
    ) -> Self {
        let mut call = ScriptCall {
            kind: ScriptKind::SemAcquire,
            keys: vec![
                names.permits.clone(),
                names.slot_prefix.clone(),
                names.fence_prefix.clone(),
            ],
            args: vec![
                token.to_hex(),
                lease_ms.to_string(),
                fence_counter_ttl_ms.to_string(),
                permits.to_string(),
            ],
        };
        call.add_handover(&names.queue, handover);
        call
    }

    /// Release of a semaphore token in whichever slot holds it.
    pub(crate) fn sem_release_any(
        names: &SemNames,
        permits: u32,
        line: LineKey,
        token: OwnerToken,
        namespace: &str,
        channel: Channel,
    ) -> Self {
        ScriptCall {
            kind: ScriptKind::SemReleaseAny,
            keys: vec![names.permits.clone(), names.slot_prefix.clone()],
            args: vec![
                token.to_hex(),
                channel.publish_command().to_owned(),
                channel.name(namespace, line.id),
                line.message(),
                permits.to_string(),
            ],
        }
    }

    /// Renew of the lease key `key` by token.
    pub(crate) fn renew(key: &str, token: OwnerToken, lease_ms: u64) -> Self {
        ScriptCall {
            kind: ScriptKind::Renew,
            keys: vec![key.to_owned()],
            args: vec![token.to_hex(), lease_ms.to_string()],
        }
    }

    /// A read (`intent_ms` unused) or a write of a read-write lease.
    pub(crate) fn rw_acquire(
        kind: ScriptKind,
        names: &RwNames,
        token: OwnerToken,
        lease_ms: u64,
        fence_counter_ttl_ms: u64,
        intent_ms: u64,
        handover: Option<AcquireHandover>,
    ) -> Self {
        let mut args = vec![
            token.to_hex(),
            lease_ms.to_string(),
            fence_counter_ttl_ms.to_string(),
        ];
        if kind == ScriptKind::RwWrite {
            args.push(intent_ms.to_string());
        }
        let mut call = ScriptCall {
            kind,
            keys: vec![
                names.write.clone(),
                names.read.clone(),
                names.intent.clone(),
                names.fence.clone(),
            ],
            args,
        };
        call.add_handover(&names.queue, handover);
        call
    }

    /// Release of a reader, notifying `line`'s waiters when it was the last.
    pub(crate) fn rw_read_release(
        names: &RwNames,
        line: LineKey,
        token: OwnerToken,
        namespace: &str,
        channel: Channel,
    ) -> Self {
        ScriptCall {
            kind: ScriptKind::RwReadRelease,
            keys: vec![names.read.clone()],
            args: vec![
                token.to_hex(),
                channel.publish_command().to_owned(),
                channel.name(namespace, line.id),
                line.message(),
            ],
        }
    }

    /// Renew of a reader.
    pub(crate) fn rw_read_renew(names: &RwNames, token: OwnerToken, lease_ms: u64) -> Self {
        ScriptCall {
            kind: ScriptKind::RwReadRenew,
            keys: vec![names.read.clone()],
            args: vec![token.to_hex(), lease_ms.to_string()],
        }
    }

    /// `EVALSHA <sha1> <numkeys> keys.. args..`
    pub(crate) fn evalsha(&self) -> redis::Cmd {
        let mut cmd = redis::cmd(self.verbs().0);
        cmd.arg(self.kind.sha1())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    /// `EVAL <source> <numkeys> keys.. args..`, sent after a `NOSCRIPT`
    /// reply (which Redis answers without running anything). It runs the
    /// script and caches it in one round trip, on the node of the key:
    /// `SCRIPT LOAD` has no key, so a cluster client would send it to every
    /// primary and wait for all of them.
    pub(crate) fn eval(&self) -> redis::Cmd {
        let mut cmd = redis::cmd(self.verbs().1);
        cmd.arg(self.kind.source())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// `SCRIPT LOAD <source>` for one script.
pub(crate) fn load_cmd(kind: ScriptKind) -> redis::Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(kind.source());
    cmd
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
            pipe.add_command(load_cmd(call.kind)).ignore();
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
    match value {
        Value::BulkString(bytes) => parse_fence(bytes)
            .map(AcquireReply::Acquired)
            .ok_or_else(|| ReplyError::new(ScriptKind::Acquire, value)),
        Value::Int(ms) if *ms >= 0 => Ok(AcquireReply::Busy(Some(Duration::from_millis(
            ms.unsigned_abs(),
        )))),
        // -1: held without expiry; -2: gone between the checks. Neither
        // tells when the lock frees up.
        Value::Int(-2 | -1) | Value::Nil => Ok(AcquireReply::Busy(None)),
        _ => Err(ReplyError::new(ScriptKind::Acquire, value)),
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

pub(crate) fn parse_fence(bytes: &[u8]) -> Option<Fence> {
    let digits = std::str::from_utf8(bytes).ok()?;
    if digits.is_empty() || digits.len() > 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match digits.parse::<u64>() {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(Fence::new(n)),
    }
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
    /// Every slot is held; the soonest to end has this remaining time.
    Busy(Option<Duration>),
    /// The semaphore is in use with another permit count.
    OtherCount(u32),
}

/// Classifies the semaphore acquire script's reply: `[slot, fence]` or
/// `[slot, fence, 1]` (the next waiter waits for its grant) with a slot
/// below the largest permit count and a fence as in [`classify_acquire`];
/// an integer ≥ -2 or nil means busy;
/// `['permits', n]` names the count in use.
pub(crate) fn classify_permit(value: &Value) -> Result<PermitReply, ReplyError> {
    let unexpected = || ReplyError::new(ScriptKind::SemAcquire, value);
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
            [Value::BulkString(tag), Value::Int(n)] if tag.as_slice() == b"permits" => {
                u32::try_from(*n)
                    .ok()
                    .filter(|n| (1..=super::names::MAX_PERMITS).contains(n))
                    .map(PermitReply::OtherCount)
                    .ok_or_else(unexpected)
            }
            _ => Err(unexpected()),
        },
        Value::Int(_) | Value::Nil => match classify_acquire(value) {
            Ok(AcquireReply::Busy(remaining)) => Ok(PermitReply::Busy(remaining)),
            _ => Err(unexpected()),
        },
        _ => Err(unexpected()),
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
    fn reply_error_names_the_shape_not_the_content() {
        let e = classify_acquire(&bulk("secret-token:12")).unwrap_err();
        let text = e.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("bulk string of 15 bytes"), "{text}");
    }

    #[test]
    fn the_evalsha_command_carries_the_sha1_and_both_keys() {
        let names = LockNames::new("ns", super::super::names::KeyId::of("k"));
        let call = ScriptCall::acquire(&names, OwnerToken::from_bytes([1; 16]), 500, 0, None);
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
            Ok(PermitReply::Busy(Some(Duration::from_millis(40))))
        );
        assert_eq!(
            classify_permit(&Value::Int(-1)),
            Ok(PermitReply::Busy(None))
        );
        assert_eq!(classify_permit(&Value::Nil), Ok(PermitReply::Busy(None)));
        let other = Value::Array(vec![bulk("permits"), Value::Int(4)]);
        assert_eq!(classify_permit(&other), Ok(PermitReply::OtherCount(4)));
    }

    #[test]
    fn odd_permit_replies_are_unexpected() {
        for reply in [
            Value::Array(vec![Value::Int(-1), bulk("5")]),
            Value::Array(vec![Value::Int(1024), bulk("5")]),
            Value::Array(vec![Value::Int(1), bulk("0")]),
            Value::Array(vec![Value::Int(1), Value::Int(5)]),
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
    fn the_semaphore_calls_name_the_prefixes_and_the_count() {
        use super::super::names::{KeyId, SemNames};
        let names = SemNames::new("ns", KeyId::of("pool"));
        let token = OwnerToken::from_bytes([7; 16]);
        let call = ScriptCall::sem_acquire(&names, 3, token, 500, 0, None);
        let packed = String::from_utf8_lossy(&call.evalsha().get_packed_command()).into_owned();
        assert!(packed.contains(ScriptKind::SemAcquire.sha1()));
        for name in [&names.permits, &names.slot_prefix, &names.fence_prefix] {
            assert!(packed.contains(name.as_str()), "{name}");
        }
        let line = LineKey {
            kind: super::super::names::Kind::Semaphore,
            id: names.id,
        };
        let any = ScriptCall::sem_release_any(&names, 3, line, token, "ns", Channel::Standalone);
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
