-- campaign.lua: an election's campaign (docs/PROTOCOL.md §7).
-- KEYS: lease, term, log
-- ARGV: token, lease_ms, value_hex, publish, channel, sha
-- Reply: the term (bulk): elected (or a replay); {us}: busy, the leader's
--   time left in µs; error WRONGTYPE.
--
-- The lock's acquire plus the log: a lease held by this token (a replay,
-- or a retry after an unknown outcome) is extended and its term returned,
-- logging its grant only if the log lacks it; a lease held by another is
-- busy (its time left in µs, `{us}`: `AcquireReply::BusyFor`). Else the
-- term is `max(next_fence, top term + 1)` (docs/PROTOCOL.md §3, and above every term logged), the lease is set with `NX`, and the
-- grant is logged (after the vacancy of a lapsed leader) and published.

local got = redis.call('MGET', KEYS[1], KEYS[2])
if got[1] then
  local t = our_term(got[1])
  if t then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    log_leader(KEYS[3], top_of(KEYS[3]), t, unhex(ARGV[3]), ARGV[4], ARGV[5], ARGV[6])
    return t
  end
  -- The holder's time left in microseconds from this read: Redis keeps a
  -- key while its millisecond clock is at most the expiry, so it ends at
  -- the start of millisecond PTTL + 1 counted from TIME's millisecond. A
  -- plain PTTL (negative: no expiry, or gone) otherwise.
  local now = redis.call('TIME')
  local ms = redis.call('PTTL', KEYS[1])
  return ms < 0 and ms or {(ms + 1) * 1000 - tonumber(now[2]) % 1000}
end
local top = top_of(KEYS[3])
local t = next_fence(KEYS[2], got[2], redis.call('TIME'), '0')
if not t then
  return redis.error_reply(WRONGTYPE)
end
if top and tonumber(top.term) + 1 > tonumber(t) then
  t = string.format('%.0f', tonumber(top.term) + 1)
  redis.call('SET', KEYS[2], t)
end
if not redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'NX', 'PX', ARGV[2]) then
  return redis.error_reply(WRONGTYPE)
end
log_leader(KEYS[3], top, t, unhex(ARGV[3]), ARGV[4], ARGV[5], ARGV[6])
return t
