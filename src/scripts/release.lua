-- release.lua: the release of a lease key by token: a lock, a permit's
-- slot or a writer (docs/PROTOCOL.md §4.2, §5).
-- KEYS: key
-- ARGV: token, publish, channel, message [, counter_ttl_ms, reg_prefix,
--   counter, queue, flag [, readers [, own_reg [, served_once]]]]
-- Reply: 1 released, 3 released and handed over, 0 expired (key gone),
--   2 conflict; error WRONGTYPE. `readers` is a writer's readers' key (''
--   otherwise), `own_reg` the releaser's lingering registration, never
--   granted (docs/PROTOCOL.md §4.4), `served_once` '1' for a permit's slot.
--
-- Only the lease key is declared: a release is a single-key command for
-- Redis Cluster, so it runs on the node that has the lease while a slot
-- migration has moved it there and not yet the queue's keys (the names
-- share its hash tag, so they are in its slot; missing on that node, they
-- read as an empty queue and the release is a plain one).
--
-- `MGET` reads a key of another type as missing: `EXISTS` then tells it
-- from a lease that expired, and it is refused with `WRONGTYPE` as `GET`
-- refused it. The plain notification goes out only when this script
-- deleted the key, and through `pcall`: a publish refused (an ACL without
-- channel rights) must not turn an applied `DEL` into an error reply;
-- waiters then rely on safety polls.

local handover = #ARGV >= 9
local got = handover and redis.pcall('MGET', KEYS[1], ARGV[7], ARGV[9])
if not got or got.err then
  -- Only the lease key is declared: on the node a slot migration is
  -- importing it to, the queue's names are not local yet.
  handover = false
  got = redis.call('MGET', KEYS[1])
end
local held = got[1]
if not held then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return redis.error_reply(WRONGTYPE)
  end
  return 0
end
local sep = string.find(held, ':', 1, true)
if not (sep and string.sub(held, 1, sep - 1) == ARGV[1]) then
  return 2
end
if handover and got[3] and ARGV[10] and ARGV[10] ~= '' then
  -- A writer's release: the head writer, or the readers at the head.
  local H = {queue = ARGV[8], flag = ARGV[9], reg_prefix = ARGV[6], publish = ARGV[2], channel = ARGV[3], message = ARGV[4]}
  if rw_hand_over(KEYS[1], ARGV[10], ARGV[7], got[2], ARGV[5], H, '') then
    if redis.call('GET', KEYS[1]) == held then
      redis.call('DEL', KEYS[1])
    end
    return 1
  end
elseif handover and got[3] then
  local own, once = ARGV[11], ARGV[12] == '1'
  local reg, value = next_registration(ARGV[8], nil, once)
  if reg and reg == own then
    -- The releaser's own registration, lingering for its next waiter
    -- (docs/PROTOCOL.md §4.4): the next one's turn, if there is one.
    reg, value = next_registration(ARGV[8], {[own] = true}, once)
  end
  if reg and grant_to(reg, value, KEYS[1], ARGV[7], got[2], ARGV[5], ARGV[2], ARGV[3], ARGV[4]) then
    return 3
  end
  if reg == nil then
    redis.call('DEL', ARGV[9])
  end
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[2], ARGV[3], ARGV[4])
return 1
