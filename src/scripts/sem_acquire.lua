-- sem_acquire.lua: a semaphore's acquire (docs/PROTOCOL.md §5.2).
-- KEYS: permits, slot..., counter... [, queue, flag, reg]
-- ARGV: token, lease_ms, counter_ttl_ms, permits [, HANDOVER]
-- Reply: {slot, fence}: granted; {slot, fence, 1}: granted, and the
--   locker's next waiter is registered for the next free slot; an integer:
--   busy, the ms to wait (-1: unknown); {ms, server ms}: busy, and the
--   attempt registered at that server time (as acquire.lua's);
--   {'permits', n}: the permits are
--   recorded as n while a slot is held; {'slots', n}: the record is n,
--   more slots than declared: ask again declaring n; error WRONGTYPE.
--   `slot...` and `counter...` are slots 0, 1, … and their counters, at
--   least `permits` of each.
--
-- One `MGET` reads the count record, every slot declared and the queue's
-- flag. A token of this locker already in a slot gets that slot
-- and fence back, with the full lease from this attempt on (a replay, or
-- the claim of a slot the hand-over granted: handover.lua `claim`); its
-- own token before its grant token.
-- A permit count other than the recorded one is refused while any slot of
-- the recorded count is held (the reply `['permits', n]`) and replaces the
-- record when none is, so lockers that disagree never hold more than one
-- count's slots at once. With registrations queued, each free slot goes
-- to the next live registration in turn (`grant_to`), until the caller's
-- own comes up or the slots or the queue run out. Else the lowest free
-- slot is taken with the next fence of its own counter, computed as in
-- `ACQUIRE_LUA` (the §3 floor; `GET`, `TIME`, two `SET`s) and the reply
-- is `[slot, fence]`, or `[slot, fence, 1]` when the locker's next waiter
-- (`next` of the hand-over's arguments) is registered and no other slot
-- is free: that waiter then waits for its grant instead of an attempt
-- that could only be busy (a take of the last free slot registers it, as
-- a claim does); with every slot held it is the smallest remaining
-- time (`-1` when none is known, one `PTTL` per slot) or the claim window
-- of the grant this attempt made, and a waiting caller registers.
--
-- The slot is set with `NX`: `MGET` reads a slot of another type as free,
-- and `SET NX` refuses it with `WRONGTYPE` instead of overwriting it.

local n = (#KEYS - (#ARGV > 4 and 4 or 1)) / 2
local H, got, queued, _, busy = begin(4, 2 * n + 2, unpack(KEYS, 1, n + 1))
local permits = tonumber(ARGV[4])
local stored = tonumber(got[1] or '0') or 0
if stored > n then
  return {'slots', stored}
end
-- Slot i (from 0) is KEYS[2 + i], its counter KEYS[2 + n + i].
local held, free = {unpack(got, 2, n + 1)}, {}
for i = 1, permits do
  if not held[i] then
    free[#free + 1] = i - 1
  end
end
local next_registers = H and H.grant ~= '' and H.keep ~= 'd'
-- Its own token first (a replay: the first send's slot), then its grant
-- token (a claim): a replay never claims a grant beside its own slot.
local at, fence
for j = 1, 2 * n do
  local i = (j - 1) % n + 1
  fence = fence or our_fence(j > n and H, held[i])
  at = at or (fence and i)
end
if at then
  claim(H, KEYS[1 + at], fence)
  if next_registers and H.keep == 'k' then
    enqueue(H, ARGV[1])
  end
  -- The third value 1: the waiter registered, and no slot is free.
  return {at - 1, fence, (next_registers and #free == 0) and 1 or nil}
end
if stored ~= permits then
  for i = 1, stored do
    if held[i] then
      return {'permits', stored}
    end
  end
  redis.call('SET', KEYS[1], permits)
end
local granted, seen = nil, {}
while queued and #free > 0 do
  -- A registration is served once per round: popped, not rotated, or it
  -- could be handed a second free slot before it claimed the first (its
  -- claim queues it again).
  local reg, value = next_registration(H.queue, seen, true, H.flag)
  queued = reg ~= nil
  if not queued or reg == H.reg then
    break
  end
  local slot = table.remove(free, 1)
  local counter = KEYS[2 + n + slot]
  granted = grant_to(reg, value, KEYS[2 + slot], counter, redis.call('GET', counter), ARGV[3], H.publish, H.channel, H.message, slot)
  if not granted then
    return redis.error_reply(WRONGTYPE)
  end
end
if #free == 0 then
  if granted then
    return busy(tonumber(granted))
  end
  local least = -1
  for i = 1, permits do
    local ttl = redis.call('PTTL', KEYS[1 + i])
    if ttl >= 0 and (least < 0 or ttl < least) then
      least = ttl
    end
  end
  return busy(least)
end
local slot = free[1]
local counter = KEYS[2 + n + slot]
-- The take of the last free slot registers the next waiter, as a claim
-- does: it waits for its grant.
local last = next_registers and #free == 1
local fence = take(KEYS[2 + slot], counter, redis.call('GET', counter), ARGV[3], not last and H, queued)
if not fence then
  return redis.error_reply(WRONGTYPE)
end
if last then
  enqueue(H, ARGV[1])
end
return {slot, fence, last and 1 or nil}
