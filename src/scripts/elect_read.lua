-- elect_read.lua: the read of an election (run as EVALSHA_RO: it writes
-- nothing; docs/PROTOCOL.md §7).
-- KEYS: lease, log
-- ARGV: after
-- Reply: {term, pttl, top, entries}.

local held = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
local term = held and string.match(held, ':(.*)$') or ''
local entries = ARGV[1] ~= '' and redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', 64) or {}
return {term, pttl, top or false, entries}
