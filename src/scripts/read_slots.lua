-- read_slots.lua: the semaphore's read of its slots.
--
-- The Lua both semaphore scripts that look for a token start with:
-- `read_slots(permits, extra)` returns the values of the slots (`KEYS[2] ..
-- i`), the count of slots recorded at `KEYS[1]` and the value of the key
-- `extra` (if given: the hand-over queue's flag): one `MGET` of the record,
-- the `permits` slots asked for and `extra`, and a second one only for the
-- slots past them that a larger recorded count says may be held.

local function read_slots(permits, extra)
  local names = {KEYS[1]}
  for i = 1, permits do
    names[i + 1] = KEYS[2] .. (i - 1)
  end
  if extra then
    names[permits + 2] = extra
  end
  local got = redis.call('MGET', unpack(names))
  local stored = tonumber(got[1] or '0') or 0
  local held = {}
  for i = 1, permits do
    held[i] = got[i + 1]
  end
  local more = {}
  for i = permits + 1, stored do
    more[#more + 1] = KEYS[2] .. (i - 1)
  end
  if #more > 0 then
    local rest = redis.call('MGET', unpack(more))
    for i = 1, #rest do
      held[permits + i] = rest[i]
    end
  end
  return held, stored, extra and got[permits + 2]
end
