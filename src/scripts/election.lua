-- election.lua: what the election scripts share.
--
-- The Lua the election scripts share: `unhex(s)` (values travel as hex);
-- `our_term(held)`, the term of a lease value `<token>:<term>` of the
-- caller's token (`ARGV[1]`), else `nil` and the reply that refuses the
-- caller: `0` for no lease, `2` for another's;
-- `top_of(log)`, the log's newest entry as `{id, term, seq, leader,
-- prev, value}` (`nil` for an empty log; `term` a decimal string);
-- `log_leader(log, top, t, value, publish, channel, sha)`, which logs
-- the grant of term `t` unless the top already is it, after the vacancy of
-- a leader that lapsed without resigning, and publishes `e:<sha>:<t>-0:l`.

local function unhex(s)
  return (string.gsub(s, '..', function(h) return string.char(tonumber(h, 16)) end))
end
local function our_term(held)
  local sep = held and string.find(held, ':', 1, true)
  if sep and string.sub(held, 1, sep - 1) == ARGV[1] then
    return string.sub(held, sep + 1)
  end
  return nil, held and 2 or 0
end
local function top_of(log)
  local entry = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  if not entry then
    return nil
  end
  local term, seq = string.match(entry[1], '^(%d+)-(%d+)$')
  local f, fields = {}, entry[2]
  for i = 1, #fields, 2 do
    f[fields[i]] = fields[i + 1]
  end
  return {id = entry[1], term = term, seq = tonumber(seq), leader = f.leader == '1', prev = f.prev, value = f.value}
end
local function log_leader(log, top, t, value, publish, channel, sha)
  if top and tonumber(top.term) >= tonumber(t) then
    return
  end
  local prev = top and top.id or '0-0'
  if top and top.leader then
    prev = redis.call('XADD', log, 'MAXLEN', '~', '64', top.term .. '-' .. (top.seq + 1),
      'prev', prev, 'leader', '0')
  end
  redis.call('XADD', log, 'MAXLEN', '~', '64', t .. '-0', 'prev', prev, 'leader', '1', 'value', value)
  redis.pcall(publish, channel, 'e:' .. sha .. ':' .. t .. '-0:l')
end
