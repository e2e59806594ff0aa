-- rw_handover.lua: the read-write lease's hand-over, after fence.lua and handover.lua.
--
-- The Lua of the read-write lease's hand-over (docs/PROTOCOL.md §5.3),
-- after next_fence.lua and handover.lua. Queue entries are
-- `w<reg>` (a locker's writers) and `r<reg>` (its readers).
--
-- - `read_epoch(counter_key, counter, ttl_ms)`: the epoch a reader
--   gets, the latest writer fence; a missing counter is set to the §3
--   floor first, so that the next writer's fence is above every epoch.
-- - `admit(readers, token, expiry)`: adds a reader; the set expires with
--   its latest member. `true` when the set is new (it took its first
--   expiry: every script that adds a reader gives the set one in the same
--   run), so it holds no expired reader to purge.
-- - `readers_until(readers)`: the latest live reader's expiry, or `nil`
--   and whether the set holds expired readers only.
-- - `rw_hand_over(write, readers, counter_key, counter, ttl_ms, H,
--   self_entry)`: hands the free lease to the head live entry: a writer
--   gets the write lease (`grant_to`) unless a reader is live, and then
--   stays first in line; every reader at the head is admitted together,
--   each for its claim window, with the epoch and one notification each.
--   Returns the claim window of the grant (`nil`: nothing granted),
--   whether `self_entry` (the caller's entry) was the head or among the
--   readers admitted, whether readers were admitted, and whether a
--   writer's entry is next in the queue (after them, or kept first by
--   live readers); an empty queue's flag is deleted.

local function read_epoch(counter_key, counter, ttl_ms)
  local ttl = ttl_ms ~= '0'
  if counter and ttl then
    redis.call('PEXPIRE', counter_key, ttl_ms)
  elseif not counter then
    counter = string.format('%.0f', fence_floor(server_time()))
    redis.call('SET', counter_key, counter, unpack(ttl and {'PX', ttl_ms} or {}))
  end
  return counter
end
local function admit(readers, token, expiry)
  redis.call('ZADD', readers, expiry, token)
  return redis.call('PEXPIREAT', readers, expiry, 'GT') == 0
    and redis.call('PEXPIREAT', readers, expiry, 'NX') == 1
end
local function readers_until(readers)
  local latest = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  local expiry = latest[2] and tonumber(latest[2])
  if expiry and expiry > now_ms() then
    return expiry
  end
  return nil, expiry ~= nil
end
local function rw_hand_over(write, readers, counter_key, counter, ttl_ms, H, self_entry)
  local reg, value = next_registration(H.queue, nil, false, H.flag)
  if not reg then
    return nil, false
  end
  if string.sub(reg, 1, 1) ~= 'r' then
    if reg == self_entry then
      return nil, true, false, false
    end
    if readers_until(readers) then
      -- No writer beside a live reader: it waits, first in line.
      redis.call('LMOVE', H.queue, H.queue, 'RIGHT', 'LEFT')
      return nil, false, false, true
    end
    return grant_to(reg, value, write, counter_key, counter, ttl_ms, H.publish, H.channel, H.message), false, false, false
  end
  local epoch = read_epoch(counter_key, counter, ttl_ms)
  local claim, served, writer_next = nil, false, false
  local seen = {[reg] = true}
  repeat
    if value then
      local sep = string.find(value, ':', 1, true)
      claim = string.sub(value, sep + 1)
      admit(readers, string.sub(value, 1, sep - 1), string.format('%.0f', now_ms() + tonumber(claim)))
      redis.pcall(H.publish, H.channel, H.message .. ':g:' .. reg .. ':' .. epoch .. ':' .. claim)
      served = served or reg == self_entry
    end
    local head = redis.call('LINDEX', H.queue, 0)
    if not (head and string.sub(head, 1, 1) == 'r') then
      writer_next = head and true or false
      break
    end
    -- Each reader's registration keeps its place in the round, as
    -- next_registration does; a full round stops at the first one again.
    reg, value = rotate_head(H.queue, seen)
  until not reg
  return claim, served, claim ~= nil, writer_next
end
