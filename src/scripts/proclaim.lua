-- proclaim.lua: a leader's proclaim of a new value (docs/PROTOCOL.md §7).
-- KEYS: lease, log
-- ARGV: token, value_hex, last_id, publish, channel, sha
-- Reply: the new entry's id (bulk); 0 the lease is gone; 2 another token
--   holds it, or the log moved on without this leadership.
--
-- 0: the lease is gone; 2: another token holds it, or the log moved on
-- without this leadership. When the log's top is the id given, logs the
-- value as the next entry of the term, publishes `e:<sha>:<id>:v` and
-- returns the new id; when the top already is this very proclaim (same
-- predecessor, same value: a replay), returns its id and logs nothing.

local t, refused = our_term(redis.call('GET', KEYS[1]))
if not t then
  return refused
end
local top = top_of(KEYS[2])
if not top or top.term ~= t then
  return 2
end
local value = unhex(ARGV[2])
if top.id == ARGV[3] then
  local id = t .. '-' .. (top.seq + 1)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', '64', id, 'prev', top.id, 'leader', '1', 'value', value)
  redis.pcall(ARGV[4], ARGV[5], 'e:' .. ARGV[6] .. ':' .. id .. ':v')
  return id
end
if top.prev == ARGV[3] and top.value == value then
  return top.id
end
return 2
