-- rw_write.lua: a read-write lease's write (docs/PROTOCOL.md §5.3).
-- KEYS: write, readers, intent, counter [, queue, flag, reg]
-- ARGV: token, lease_ms, counter_ttl_ms, intent_ms [, HANDOVER]
-- Reply: a fence (bulk): granted; an integer: busy, the ms to wait; error
--   WRONGTYPE. `intent_ms` 0: a try-once write, which leaves no intent.
--
-- As the lock's acquire (one `MGET`, here of the writer, the intent, the
-- counter and the queue's flag; replay-safe, and a writer of this locker
-- found holding is the claim of a hand-over; the §3 fence computed as
-- there), but also busy while any live reader holds it: the latest
-- reader's expiry (`ZRANGE -1 -1`) is in the future. Then a writer that
-- will wait sets the intent (or refreshes its own), which keeps new
-- readers out, registers, and the reply is the time until that expiry. A
-- set of expired readers only is deleted. A free lease with lockers
-- queued goes to the head first (rw_handover.lua). A grant or a claim
-- clears its own intent.
--
-- As in `ACQUIRE_LUA`, a writer key or counter `MGET` read as missing is
-- written with `NX`, so one of another type is refused with `WRONGTYPE`.

local H, got, queued, busy = begin(4, 5, KEYS[1], KEYS[3], KEYS[4])
if got[1] then
  local fence = our_fence(H, got[1])
  if fence then
    if got[2] and is_ours(H, got[2]) then
      redis.call('DEL', KEYS[3])
    end
    return claim(H, KEYS[1], fence)
  end
  return busy(redis.call('PTTL', KEYS[1]))
end
local live, stale = readers_until(KEYS[2])
if live then
  if ARGV[4] ~= '0' and (not got[2] or got[2] == ARGV[1]) then
    redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[4])
  end
  return busy(live - now_ms())
end
if stale then
  redis.call('DEL', KEYS[2])
end
if queued then
  local claim_ms = rw_hand_over(KEYS[1], KEYS[2], KEYS[4], got[3], ARGV[3], H, H.reg)
  if claim_ms then
    return busy(tonumber(claim_ms))
  end
  got[3] = redis.call('GET', KEYS[4])
end
local fence = take(KEYS[1], KEYS[4], got[3], ARGV[3], H, queued)
if fence and got[2] == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return fence or redis.error_reply(WRONGTYPE)
