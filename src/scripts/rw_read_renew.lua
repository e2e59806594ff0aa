-- rw_read_renew.lua: the renew of a reader.
-- KEYS: readers
-- ARGV: token, lease_ms
-- Reply: 1 renewed, 0 expired (a reader past its expiry is never brought
--   back).

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
