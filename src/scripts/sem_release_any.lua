-- sem_release_any.lua: the release of a semaphore token whose slot is
-- unknown (an acquire whose outcome was unknown).
-- KEYS: slot...
-- ARGV: token, publish, channel, message
-- Reply: 1 released, 0 not held. `slot...` are slots 0, 1, … of the
--   permit count the token's acquire asked for: it took none past them.

local held = redis.call('MGET', unpack(KEYS))
local mine = ARGV[1] .. ':'
for i = 1, #held do
  local v = held[i]
  if v and string.sub(v, 1, #mine) == mine then
    redis.call('DEL', KEYS[i])
    redis.pcall(ARGV[2], ARGV[3], ARGV[4])
    return 1
  end
end
return 0
