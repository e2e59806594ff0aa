-- rw_read_release.lua: the release of a reader (docs/PROTOCOL.md §5.3).
-- KEYS: readers [, counter, queue, flag, write]
-- ARGV: token, publish, channel, message [, counter_ttl_ms]
-- Reply: 1 released, 0 expired (a reader past its expiry is never
--   released as live).

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms())
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  if #KEYS == 5 then
    local got = redis.call('MGET', KEYS[2], KEYS[4], KEYS[5])
    if got[2] and not got[3] then
      local H = {queue = KEYS[3], flag = KEYS[4], publish = ARGV[2], channel = ARGV[3], message = ARGV[4]}
      if rw_hand_over(KEYS[5], KEYS[1], KEYS[2], got[1], ARGV[5], H, '') then
        return 1
      end
    end
  end
  redis.pcall(ARGV[2], ARGV[3], ARGV[4])
end
return 1
