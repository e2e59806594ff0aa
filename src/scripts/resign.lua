-- resign.lua: a leader's resign (docs/PROTOCOL.md §7).
-- KEYS: lease, log
-- ARGV: token, publish, channel, sha
-- Reply: 1 released, 0 expired, 2 conflict.

local t, refused = our_term(redis.call('GET', KEYS[1]))
if not t then
  return refused
end
local top = top_of(KEYS[2])
local id = t .. '-0'
if top and top.term == t and top.leader then
  id = t .. '-' .. (top.seq + 1)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', '64', id, 'prev', top.id, 'leader', '0')
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[2], ARGV[3], 'e:' .. ARGV[4] .. ':' .. id .. ':r')
return 1
