-- fence.lua: the fence rule, shared by every script that grants (docs/PROTOCOL.md §3).
--
-- The Lua every fence-granting script starts with: `WRONGTYPE` (the
-- error a write refused by `NX` answers with), `fence_floor(now)`,
-- `fence_after(counter, floor)` and `next_fence(key, counter, now,
-- ttl_ms)`.
--
-- - `fence_floor(now)`: docs/PROTOCOL.md §3's floor of the `TIME` reply `now`, its
--   milliseconds × 1000.
-- - `fence_after(counter, floor)`: the next fence, as text, after the
--   counter value `counter` that `MGET` read (`false` or `nil`: missing),
--   `max(counter + 1, floor)`; `nil` when the counter is not a plain
--   integer Lua counts exactly (the general path of `next_fence`). It
--   writes nothing: a script that writes several counters at once (one
--   `MSET`) takes its values from here, so they are `next_fence`'s.
-- - `next_fence(key, counter, now, ttl_ms)` stores and returns the next
--   fence of the counter `key` whose value `counter` was read, floored at
--   `now`, or returns nothing when a counter `MGET` read as missing holds
--   another type.
--
-- The next fence is computed in Lua, whose numbers are doubles: that is
-- exact only for a counter of at most 16 plain digits below 2^53 (until
-- about the year 2255 for counters floored at the clock), printed with
-- `%d` (a C `long`: exact there, and cheaper than `%.0f`). Any other value
-- takes the general path: `INCR` (which refuses a counter that is not an
-- integer), then the fence read back with `GET`, so a large counter is
-- never printed in float notation. `ttl_ms` is the locker's
-- `fence_counter_ttl` (`'0'`: none, and `KEEPTTL` keeps the counter's
-- expiry, as `INCR` did). A counter read as missing is created with `NX`.

local WRONGTYPE = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local function fence_floor(now)
  return tonumber(now[1]) * 1000000 + math.floor(tonumber(now[2]) / 1000) * 1000
end
local function fence_after(counter, floor)
  local last = tonumber(counter or '0')
  if counter and not (#counter <= 16 and string.find(counter, '^[1-9]%d*$') and last < 9007199254740991) then
    return nil
  end
  return string.format('%d', math.max(last + 1, floor))
end
local function next_fence(key, counter, now, ttl_ms)
  local floor = fence_floor(now)
  local ttl = ttl_ms and ttl_ms ~= '0'
  local fence = fence_after(counter, floor)
  if not fence then
    if redis.call('INCR', key) < floor then
      redis.call('SET', key, string.format('%d', floor), 'KEEPTTL')
    end
    if ttl then
      redis.call('PEXPIRE', key, ttl_ms)
    end
    return redis.call('GET', key)
  end
  local opts = ttl and {'PX', ttl_ms} or {counter and 'KEEPTTL' or nil}
  if not counter then
    table.insert(opts, 1, 'NX')
  end
  if redis.call('SET', key, fence, unpack(opts)) then
    return fence
  end
end
