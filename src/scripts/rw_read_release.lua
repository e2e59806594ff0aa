-- rw_read_release.lua: the release of a reader (docs/PROTOCOL.md §5.3).
-- KEYS: readers
-- ARGV: token, publish, channel, message [, counter_ttl_ms, reg_prefix,
--   counter, queue, flag, write]
-- Reply: 1 released, 0 expired (a reader past its expiry is never
--   released as live).

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
