-- handover.lua: the hand-over queue (docs/PROTOCOL.md §4).
--
-- The Lua of the hand-over (docs/PROTOCOL.md §4), shared by the lock's, the
-- semaphore's, the read-write lease's and the multi-key lease's scripts.
-- A queue entry is `<reg>|<deadline ms>|<owner>:<claim ms>`: the
-- registration id, when it stops counting by the server's clock (`TIME`),
-- the token a grant is made out to and the claim window; the
-- registration's key holds the entry as queued, for its bound (`PX`).
--
-- - `server_time()`, `now_ms()`: the script's one `TIME`, read at most
--   once, and its milliseconds.
-- - `enqueue(H, owner)`: registers the locker for its grant token
--   (`owner` when the arguments carry none: a multi-key lease's), or
--   refreshes its registration: the new entry's bound starts now; `SET …
--   GET` returns the entry as queued, which `LPOS` finds and `LSET`
--   replaces in its place; a locker not queued is `RPUSH`ed. Every
--   registration sets the flag, and the queue and the flag live until
--   the latest entry's bound (`PEXPIRE … GT`), so a queue is never left
--   unflagged and one whose registrants all died goes away.
-- - `handover_args`, the names of the hand-over's arguments, and
--   `begin(base, q, ...)`: what an acquire starts with. `H`, the
--   hand-over's keys and arguments, or `false` unless its keys are
--   declared from `KEYS[q]`: `queue`, `flag` and `reg_key`, the caller's
--   registration key (the only one a script reads or writes: the queue's
--   entries carry their own bounds); its arguments follow the script's
--   own at `ARGV[base + 1]`: registration id (empty: none), registration
--   bound ms, claim window ms, publish command, channel, the line's
--   release message, the locker's grant token for this line if it is
--   registered (empty otherwise: a grant can only be made out to a
--   registration), `keep`: `k` when the locker still has waiters once
--   this attempt holds the lease (its registration stays queued), `r` as
--   `k` and the attempt that gets the lease also refreshes the
--   registration's bound (a locker served by grants makes no busy attempt
--   that would), `d` when it has none (the attempt that gets the lease
--   takes the registration out), and the grant token a registration this
--   attempt makes names (the owner a grant is made out to, never a
--   holder's token; empty: this attempt does not register, it tries once
--   or hears no grants), and `floor`: the highest fence a waiter of the
--   line was given (a lock's; empty or missing: none, as from an older
--   caller). Then one `MGET` of the keys `...` and the flag,
--   the flag (whether registrations may be queued), `busy(ms)`, the
--   reply of a busy attempt, which registers a waiting caller, and
--   `busy_at(ms)`, the same that answers `{ms, server ms}` when the
--   attempt registered (the `TIME` a grant's time is compared with,
--   docs/PROTOCOL.md §4.3).
-- - `rotate_head(queue, seen, served_once)` moves the head entry to the
--   tail (`LMOVE`: a registration keeps its place in the round, so the
--   claim of a grant writes nothing to the queue) and returns its id and
--   its `<owner>:<claim_ms>` (`false` for an entry past its bound, which
--   is dropped: `RPOP`), or `nil` for an empty queue. A registration
--   `seen` (a table, or `nil`) already holds goes back to the head, and
--   it returns `false`: a script that grants several times stops after a
--   full round, with the queue as it was. With `served_once` (a
--   semaphore's, which its caller says) the head is popped (`LPOP`)
--   rather than rotated: a semaphore's registration could otherwise get a
--   second free slot before it claimed the first (its claim queues it
--   again). A multi-key lease's entry (value `m<age>.<token>:<res_ms>`)
--   is taken out as it is served; it registers again at its next attempt.
-- - `next_registration(queue, seen, served_once, flag)`: `rotate_head`
--   until a live entry: its id and value, `nil` for an empty queue (whose
--   `flag`, when given, it deletes), or `false` when the round is
--   complete. Each dead entry it meets is dropped, so no attempt gets
--   past a live registration however many died before it, and each is
--   dropped once.
-- - `grant_to(...)` writes the lease key for that registration's owner
--   with the next fence of its counter (docs/PROTOCOL.md §3, `next_fence`) for its
--   claim window, and publishes `<message>:g:<reg>:<fence>:<claim_ms>:<ms>`
--   (`<ms>`: the grant's server time, from which a grantee counts the
--   window when it takes the grant without claiming it, §4.3), then
--   `:<slot>:<id>`: a semaphore's slot `slot` (empty for other keys: a
--   slot's fence does not tell it) and the owner's id, the first 16 hex
--   digits of its SHA-1, which says whose grant it is without publishing
--   the grant token (a locker takes only a grant to its line's token);
--   for a waiting multi-key lease's registration (value
--   `m<age>.<token>:<res_ms>`, docs/PROTOCOL.md §6) it reserves the key
--   instead (`<token>:r<age>` for `res_ms`, no fence; notice fence `0`).
-- - `settle(H, queued)`: the caller got the lease (`H` `false`: nothing
--   to do); with no waiter left behind it (`keep` is `d`) its
--   registration, if the queue is flagged (`queued`), is taken out
--   (`GETDEL` gives the entry as queued, `LREM` removes it); with `r` it
--   is refreshed (`enqueue`), queued again if the queue lapsed.
-- - `claim(H, key, fence)`: a caller found its own token or its grant
--   token (a replay, or a grant to it): the lease runs its full length
--   (`ARGV[2]`) from this attempt on, under the caller's token; returns
--   `fence`. No claim notice is published (the other lockers learn that a grant
--   was settled from the next grant's notice, docs/PROTOCOL.md §4 "As
--   built"), so a claim wakes no subscriber.
-- - `is_ours(H, owner)`, `our_fence(H, value)`: whether a token is this
--   locker's (the caller's, or its grant token), and the fence of a lease
--   value `<token>:<fence>` that is: under the grant token, only a fence
--   above `floor` (`above`: decimal text compared by length, then digit
--   by digit, exact at any size). A lock's take of a grant leaves its
--   hold under the grant token, which stays registered for the line's
--   next waiter: that hold, and a grant data loss brought back, are not
--   the next waiter's to claim; a later grant to the registration is
--   (docs/PROTOCOL.md §4.3).
-- - `take(key, counter_key, counter, ttl_ms, H, queued)`: sets the free
--   lease key for the caller with the next fence (`NX`, the lease's `PX`),
--   then settles `H` (`false`: nothing to settle); `nil` when the key or the
--   counter is of another type (`WRONGTYPE`).

local server_t
local function server_time()
  server_t = server_t or redis.call('TIME')
  return server_t
end
local function now_ms()
  local t = server_time()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function enqueue(H, owner)
  if H.reg == '' or H.grant == '' then
    return
  end
  owner = H.grant or owner
  local entry = H.reg .. '|' .. string.format('%d', now_ms() + tonumber(H.reg_ms)) .. '|' .. owner .. ':' .. H.claim
  local was = redis.call('SET', H.reg_key, entry, 'PX', H.reg_ms, 'GET')
  local at = was and redis.call('LPOS', H.queue, was)
  if at then
    redis.call('LSET', H.queue, at, entry)
  else
    redis.call('RPUSH', H.queue, entry)
  end
  -- The queue and its flag live as long as their latest registration,
  -- and no longer (a queue of lockers that all died goes away).
  if redis.call('PEXPIRE', H.queue, H.reg_ms, 'GT') == 0 then
    redis.call('PEXPIRE', H.queue, H.reg_ms, 'NX')
  end
  if redis.call('PEXPIRE', H.flag, H.reg_ms, 'GT') == 0
      and not redis.call('SET', H.flag, '1', 'NX', 'PX', H.reg_ms) then
    -- A flag without an expiry, left by an older version.
    redis.call('PEXPIRE', H.flag, H.reg_ms, 'NX')
  end
end
local handover_args = {'reg', 'reg_ms', 'claim', 'publish', 'channel', 'message', 'other', 'keep', 'grant', 'floor'}
local function begin(base, q, ...)
  local H = #KEYS == q + 2 and {queue = KEYS[q], flag = KEYS[q + 1], reg_key = KEYS[q + 2]}
  for i, name in ipairs(H and handover_args or {}) do
    H[name] = ARGV[base + i]
  end
  local names = {...}
  names[#names + 1] = H and H.flag or nil
  local got = redis.call('MGET', unpack(names))
  local function busy(ms)
    if H then
      enqueue(H, ARGV[1])
    end
    return ms
  end
  local function busy_at(ms)
    busy(ms)
    return H and H.reg ~= '' and H.grant ~= '' and {ms, now_ms()} or ms
  end
  return H, got, H and got[#names], busy, busy_at
end
local function rotate_head(queue, seen, served_once)
  seen = seen or {}
  local entry
  if served_once then
    entry = redis.call('LPOP', queue)
  else
    entry = redis.call('LMOVE', queue, queue, 'LEFT', 'RIGHT')
  end
  if not entry then
    return nil
  end
  local reg, deadline, value = string.match(entry, '^([^|]*)|([^|]*)|(.*)$')
  reg = reg or entry
  if seen[reg] then
    if served_once then
      redis.call('LPUSH', queue, entry)
    else
      redis.call('LMOVE', queue, queue, 'RIGHT', 'LEFT')
    end
    return false
  end
  local live = (tonumber(deadline or '') or 0) > now_ms() and string.find(value, ':', 1, true)
  -- A dead entry is dropped; a multi-key lease's is taken out as it is
  -- served (it registers again at its next attempt).
  if not (served_once or live and string.sub(value, 1, 1) ~= 'm') then
    redis.call('RPOP', queue)
  end
  if live then
    seen[reg] = true
  end
  return reg, live and value
end
local function next_registration(queue, seen, served_once, flag)
  local reg, value
  repeat
    reg, value = rotate_head(queue, seen, served_once)
  until not reg or value
  if reg == nil and flag then
    redis.call('DEL', flag)
  end
  return reg, value
end
local function grant_to(reg, value, key, counter_key, counter, ttl_ms, publish, channel, message, slot)
  local owner, claim = string.match(value, '^([^:]*):(.*)$')
  local age, token = string.match(owner, '^m(%d+)%.(.*)$')
  -- A waiting multi-key lease, m<age>.<token>: the key is reserved for
  -- it, no fence spent.
  local fence = age and '0' or next_fence(counter_key, counter, server_time(), ttl_ms)
  if not fence then
    return nil
  end
  redis.call('SET', key, age and (token .. ':r' .. age) or (owner .. ':' .. fence), 'PX', claim)
  -- The owner's id: whose grant it is, without the grant token itself.
  local id = string.sub(redis.sha1hex(owner), 1, 16)
  redis.pcall(publish, channel, table.concat({message, 'g', reg, fence, claim, now_ms(), slot or '', id}, ':'))
  return claim
end
local function settle(H, queued)
  if not H or H.reg == '' then
    return
  end
  if H.keep == 'd' and queued then
    local entry = redis.call('GETDEL', H.reg_key)
    if entry then
      redis.call('LREM', H.queue, 0, entry)
    end
  elseif H.keep == 'r' then
    enqueue(H, H.grant)
  end
end
local function claim(H, key, fence)
  redis.call('SET', key, ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
  settle(H, true)
  return fence
end
local function is_ours(H, owner)
  return owner == ARGV[1] or (H and H.other ~= '' and owner == H.other)
end
local function above(fence, floor)
  floor = floor or ''
  if floor == '' or #fence ~= #floor then
    return #fence > #floor
  end
  for i = 1, #fence do
    local a, b = string.byte(fence, i), string.byte(floor, i)
    if a ~= b then
      return a > b
    end
  end
  return false
end
local function our_fence(H, value)
  local owner, fence = string.match(value or '', '^([^:]*):(.*)$')
  if owner and is_ours(H, owner) and (owner == ARGV[1] or above(fence, H.floor)) then
    return fence
  end
end
local function take(key, counter_key, counter, ttl_ms, H, queued)
  local fence = next_fence(counter_key, counter, server_time(), ttl_ms)
  if fence and redis.call('SET', key, ARGV[1] .. ':' .. fence, 'NX', 'PX', ARGV[2]) then
    settle(H, queued)
    return fence
  end
end
