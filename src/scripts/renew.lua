-- renew.lua: the renew of a lease key by token.
-- KEYS: key
-- ARGV: token, lease_ms
-- Reply: 1 renewed, 0 expired, 2 conflict. Never re-creates an expired key.
-- `token` may also be a whole value `<grant token>:<fence>`: the hold of a
-- grant taken without its claim (docs/PROTOCOL.md §4.3), extended to the
-- full lease; it matches that grant only.

local held = redis.call('GET', KEYS[1])
if not held then
  return 0
end
local sep = string.find(held, ':', 1, true)
if held == ARGV[1] or sep and string.sub(held, 1, sep - 1) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 2
