-- multi_acquire.lua: a multi-key lease's acquire (docs/PROTOCOL.md §6).
-- KEYS: lock..., counter... [, queue..., flag..., reg...]
-- ARGV: token, lease_ms, counter_ttl_ms, since, reserve_ms [, reg, reg_ms]
-- Reply: {'ok', fence...}: every key granted; {'busy', ms, since}: some
--   key held (ms: the least time left, -1 or -2 unknown; since: the
--   waiter's age for its next attempt); error WRONGTYPE. `name...` is one
--   per key, in the caller's order; `since` 0: no age yet; `reserve_ms` 0:
--   try once.
--
-- Each key is classified: ours (`mine`), reserved by us (`reserved`),
-- free, reserved by a younger waiter (`younger`: taken over), or `busy`
-- (held, or reserved by an older waiter). All ours: a replay; the lease
-- runs its full length from this attempt and the same fences return. No
-- key busy: every key gets the next fence of its counter (docs/PROTOCOL.md §3; all
-- counters are written before any lock, so a refusal leaves no hold:
-- those read as plain integers in one `MSET` when the locker sets no
-- counter TTL, the others by `next_fence`) and is set with the lease's
-- `PX`. Else, unless trying once (which deletes
-- what it may hold and reserves nothing), each key not busy becomes a
-- reservation `<token>:r<age>` for `res_ms`, and the waiter registers in
-- each busy key's hand-over queue with the value `m<age>.<token>:<res_ms>`,
-- for which a release reserves the key instead of granting it. Writes of
-- holds happen only in the grant branch, for all N keys: never a partial
-- hold.

local handover = #ARGV > 5
local n = handover and #KEYS / 5 or #KEYS / 2
local token = ARGV[1]
-- One read of the locks, the counters and (with the hand-over) the flags.
local read = {unpack(KEYS, 1, 2 * n)}
for i = 1, handover and n or 0 do
  read[2 * n + i] = KEYS[3 * n + i]
end
local got = redis.call('MGET', unpack(read))
local t = server_time()
-- The waiter's age: its first busy reply's server time, in µs.
local age = tonumber(ARGV[4])
if age == 0 then
  age = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local state, all_mine, busy = {}, true, false
for i = 1, n do
  local s = 'free'
  if got[i] then
    -- `<owner>:<fence>`, or a reservation `<owner>:r<age>`.
    local owner, r, other = string.match(got[i], '^([^:]*):(r?)(.*)$')
    if owner == token then
      s = r == 'r' and 'reserved' or 'mine'
    elseif r == 'r' then
      other = tonumber(other) or 0
      s = (other > age or (other == age and owner > token)) and 'younger' or 'busy'
    else
      s = 'busy'
    end
  end
  state[i] = s
  all_mine = all_mine and s == 'mine'
  busy = busy or s == 'busy'
end
if all_mine then
  local fences = {'ok'}
  for i = 1, n do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    fences[i + 1] = string.sub(got[i], #token + 2)
  end
  return fences
end
if not busy then
  -- Counters read as plain integers take their next fence in one MSET
  -- (without a counter TTL to set); the others one by one. Counters of
  -- one value (a set granted together before) take one fence, computed
  -- once.
  local fences, batch, rest = {'ok'}, {}, {}
  local floor = ARGV[3] == '0' and fence_floor(t)
  local seen, seen_fence
  for i = 1, n do
    local counter = floor and got[n + i]
    if counter and counter ~= seen then
      seen, seen_fence = counter, fence_after(counter, floor)
    end
    local fence = counter and seen_fence
    if fence then
      fences[i + 1] = fence
      batch[#batch + 1] = KEYS[n + i]
      batch[#batch + 1] = fence
    else
      rest[#rest + 1] = i
    end
  end
  if #batch > 0 then
    redis.call('MSET', unpack(batch))
  end
  for _, i in ipairs(rest) do
    fences[i + 1] = next_fence(KEYS[n + i], got[n + i], t, ARGV[3])
    if not fences[i + 1] then
      return redis.error_reply(WRONGTYPE)
    end
  end
  -- Keys of one fence share one value (the floor's, as a rule).
  -- A free key is set with NX: one of another type is refused.
  local owner, value, value_fence = token .. ':'
  local nx, px = {'NX', 'PX', ARGV[2]}, {'PX', ARGV[2]}
  for i = 1, n do
    local fence = fences[i + 1]
    if fence ~= value_fence then
      value, value_fence = owner .. fence, fence
    end
    if not redis.call('SET', KEYS[i], value, unpack(state[i] == 'free' and nx or px)) then
      for j = 1, i - 1 do
        redis.call('DEL', KEYS[j])
      end
      return redis.error_reply(WRONGTYPE)
    end
  end
  -- Registrations left in queues a key was not handed over by (it came
  -- free by expiry), also by an earlier attempt whose reply was lost: out
  -- of the queue too, or a release of this very lease would reserve the
  -- key for it, as an entry looks live until its deadline. Only a flagged
  -- queue can hold one.
  for i = 1, (handover and ARGV[6] ~= '') and n or 0 do
    if got[2 * n + i] then
      settle({reg = ARGV[6], keep = 'd', queue = KEYS[2 * n + i], reg_key = KEYS[4 * n + i]}, true)
    end
  end
  return fences
end
local res_ms, age_text, wait = ARGV[5], string.format('%d', age)
for i = 1, n do
  local s = state[i]
  if s == 'busy' then
    local ms = redis.call('PTTL', KEYS[i])
    if ms >= 0 and (wait == nil or ms < wait) then
      wait = ms
    end
    if handover and ARGV[6] ~= '' and res_ms ~= '0' then
      enqueue({reg = ARGV[6], reg_ms = ARGV[7], claim = res_ms, queue = KEYS[2 * n + i], flag = KEYS[3 * n + i], reg_key = KEYS[4 * n + i]},
        'm' .. age_text .. '.' .. token)
    end
  elseif res_ms == '0' then
    if s == 'mine' or s == 'reserved' then
      redis.call('DEL', KEYS[i])
    end
  elseif s == 'reserved' then
    redis.call('PEXPIRE', KEYS[i], res_ms)
  else
    redis.call('SET', KEYS[i], token .. ':r' .. age_text, 'PX', res_ms)
  end
end
return {'busy', wait or -2, res_ms == '0' and '0' or age_text}
