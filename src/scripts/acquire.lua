-- acquire.lua: a lock's acquire (docs/PROTOCOL.md §5.1).
-- KEYS: lock, counter [, queue, flag, reg]
-- ARGV: token, lease_ms, counter_ttl_ms [, HANDOVER]
-- Reply: a fence (bulk): granted (a grant, a replay, or the claim of a
--   grant made out to this locker); an integer: busy, the ms to wait (the
--   holder's PTTL, or the claim window of the grant this attempt made);
--   {ms, server ms}: busy as the integer, and the attempt registered or
--   refreshed the locker's registration at that server time (`TIME`, in
--   ms: what a grant's time is compared with, docs/PROTOCOL.md §4.3);
--   error WRONGTYPE. HANDOVER is the hand-over's ten arguments
--   (handover.lua, `handover_args`), `reg` the caller's registration key,
--   `floor` the line's highest fence given (the grant token's value is
--   the caller's only above it); `counter_ttl_ms` 0: no TTL.
--
-- The lock's value is `<token>:<fence>`, so an acquire replayed by a client
-- library after a timeout finds its own token and returns the same fence
-- without a second grant; it also sets the lease's full length from this
-- attempt on, as the caller's clock counts it. That is the claim of a
-- grant the hand-over made out to this locker (a token of its own), which
-- may re-register the locker for its next waiter. Every grant's fence is `max(counter + 1, TIME in ms ×
-- 1000)` (docs/PROTOCOL.md §3), so fences keep increasing after Redis lost its data
-- and after a failover to a replica that missed the last grants.
--
-- One `MGET` reads the lock, the counter and the queue's flag, so a busy
-- attempt runs `MGET` + `PTTL` (and `SET … GET` to register or refresh
-- the registration, `RPUSH` the first time) and an uncontended grant
-- `MGET` + `TIME` + two `SET`s; the fence comes from `next_fence`
-- (next_fence.lua). A lock found free with registrations queued goes
-- to the head registration (handover.lua) unless that is the caller's
-- own; the caller then hears busy for the claim window.
--
-- `MGET` reads a key of another type as missing, where `GET` and `INCR`
-- refused it with `WRONGTYPE`: so a counter `MGET` found missing is
-- created with `NX`, the lock is set with `NX`, and either refusal is
-- answered with that same `WRONGTYPE` error. The counter is written first,
-- so an error never leaves a lock whose fence the counter does not cover.

local H, got, queued, _, busy = begin(3, 3, KEYS[1], KEYS[2])
if got[1] then
  local fence = our_fence(H, got[1])
  if fence then
    return claim(H, KEYS[1], fence)
  end
  return busy(redis.call('PTTL', KEYS[1]))
end
if queued then
  local reg, value = next_registration(KEYS[3], nil, false, KEYS[4])
  if reg and reg ~= H.reg then
    local claim_ms = grant_to(reg, value, KEYS[1], KEYS[2], got[2], ARGV[3], H.publish, H.channel, H.message)
    return claim_ms and busy(tonumber(claim_ms)) or redis.error_reply(WRONGTYPE)
  end
end
-- The caller's own registration was the head, or the queue was empty.
return take(KEYS[1], KEYS[2], got[2], ARGV[3], H, queued) or redis.error_reply(WRONGTYPE)
