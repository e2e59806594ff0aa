-- sem_release_any.lua: the release of a semaphore token whose slot is
-- unknown (an acquire whose outcome was unknown).
-- KEYS: permits, slot_prefix
-- ARGV: token, publish, channel, message, permits
-- Reply: 1 released, 0 not held.

local permits = tonumber(ARGV[5])
local held, stored = read_slots(permits)
local mine = ARGV[1] .. ':'
for i = 1, #held do
  local v = held[i]
  if v and string.sub(v, 1, #mine) == mine then
    redis.call('DEL', KEYS[2] .. (i - 1))
    redis.pcall(ARGV[2], ARGV[3], ARGV[4])
    return 1
  end
end
return 0
