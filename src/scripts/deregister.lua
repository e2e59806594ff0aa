-- deregister.lua: a locker whose last waiter for a key left takes its
-- registration out of the queue (docs/PROTOCOL.md §4.4).
-- KEYS: queue, reg
-- ARGV: (none)
-- Reply: 1.

local entry = redis.call('GETDEL', KEYS[2])
if entry then
  redis.call('LREM', KEYS[1], 0, entry)
end
return 1
