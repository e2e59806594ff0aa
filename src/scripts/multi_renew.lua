-- multi_renew.lua: a multi-key lease's renew (docs/PROTOCOL.md §6).
-- KEYS: lock...
-- ARGV: token, lease_ms
-- Reply: 1 renewed (every key held by the token), 0 expired (none held by
--   it, none by another), 2 conflict.

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
return present == #mine and 0 or 2
