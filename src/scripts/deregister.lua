-- deregister.lua: a locker whose last waiter for a key left takes its
-- registration out of the queue (docs/PROTOCOL.md §4.4).
-- KEYS: queue, reg
-- ARGV: owner
-- Reply: 1.
--
-- Only the registration that names `owner` (the line's grant token; a
-- multi-key lease's token, in `m<age>.<token>`): a removal that runs late
-- must leave the registration the locker's next line of the key made
-- meanwhile under a grant token of its own (the registration key is one
-- per locker and key). An empty `owner` takes out any.

local entry = redis.call('GET', KEYS[2])
local owner = entry and string.match(entry, '([^|.]*):%d*$')
if entry and ((ARGV[1] or '') == '' or owner == ARGV[1]) then
  redis.call('DEL', KEYS[2])
  redis.call('LREM', KEYS[1], 0, entry)
end
return 1
