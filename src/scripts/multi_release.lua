-- multi_release.lua: a multi-key lease's release (docs/PROTOCOL.md §6).
-- KEYS: lock... [, flag..., counter..., queue...]
-- ARGV: token, publish, counter_ttl_ms, channel+
-- Reply: 1 released (every key), 0 expired, 2 some key another's.
--   `counter_ttl_ms` '': no hand-over; `channel+` is the one channel every
--   key shares, or one per key.

local handover = ARGV[3] ~= ''
local n = handover and #KEYS / 4 or #KEYS
local function channel_of(i)
  return #ARGV > 4 and ARGV[3 + i] or ARGV[4]
end
-- The key's digest, which ends its lock's name: `…{<sha>}` or `…}:<sha>`.
local function message_of(i)
  return string.match(KEYS[i], '(%x+)}?$')
end
-- One read of the locks and, with the hand-over, their queues' flags.
local got = redis.call('MGET', unpack(KEYS, 1, handover and 2 * n or n))
-- A token holds or reserves a key whose value starts `<token>:`.
local owner = ARGV[1] .. ':'
local mine, present = 0, 0
local freed, published = {}, {}
for i = 1, n do
  local v = got[i]
  if v then
    present = present + 1
    if string.sub(v, 1, #owner) == owner then
      mine = mine + 1
      local reg, value
      if handover and got[n + i] then
        reg, value = next_registration(KEYS[3 * n + i], nil, false, KEYS[n + i])
      end
      local counter = KEYS[2 * n + i]
      if not (reg and grant_to(reg, value, KEYS[i], counter, redis.call('MGET', counter)[1], ARGV[3], ARGV[2], channel_of(i), message_of(i))) then
        freed[#freed + 1] = KEYS[i]
        published[#published + 1] = i
      end
    end
  end
end
-- Deleted before any notification goes out: a woken waiter finds them free.
if #freed > 0 then
  redis.call('DEL', unpack(freed))
end
-- A PUBLISH that reached nobody tells the rest of that channel's messages
-- would reach nobody either (nobody subscribes while a script runs).
local nobody = {}
for _, i in ipairs(published) do
  local channel = channel_of(i)
  if not nobody[channel] then
    nobody[channel] = redis.pcall(ARGV[2], channel, message_of(i)) == 0 and ARGV[2] == 'PUBLISH'
  end
end
return mine == n and 1 or (present == mine and 0 or 2)
