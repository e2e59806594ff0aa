-- release.lua: the release of a lease key by token: a lock, a permit's
-- slot or a writer (docs/PROTOCOL.md §4.2, §5).
-- KEYS: key [, counter, queue, flag [, readers]]
-- ARGV: token, publish, channel, message [, counter_ttl_ms [, own_reg
--   [, served_once]]]
-- Reply: 1 released, 3 released and handed over, 0 expired (key gone),
--   2 conflict; error WRONGTYPE. `readers` is declared by a writer's
--   release, `own_reg` is the releaser's lingering registration, never
--   granted (docs/PROTOCOL.md §4.4), `served_once` a permit's slot number
--   (its registrations are served once; the grant's notice names it).
--   `token` may also be a whole value `<grant token>:<fence>`: the hold of
--   a grant taken without its claim (§4.3), which matches that grant only.
--
-- With the key alone declared it is a plain release: the locker sends
-- that when Redis Cluster answers `TRYAGAIN`, because a slot migration
-- has moved some of these keys and not the others (docs/PROTOCOL.md §1).
--
-- `MGET` reads a key of another type as missing: `EXISTS` then tells it
-- from a lease that expired, and it is refused with `WRONGTYPE` as `GET`
-- refused it. The plain notification goes out only when this script
-- deleted the key, and through `pcall`: a publish refused (an ACL without
-- channel rights) must not turn an applied `DEL` into an error reply;
-- waiters then rely on safety polls.

local handover = #KEYS >= 4
local got = redis.call('MGET', unpack(KEYS, 1, handover and 4 or 1))
local held = got[1]
if not held then
  return redis.call('EXISTS', KEYS[1]) == 1 and redis.error_reply(WRONGTYPE) or 0
end
local sep = string.find(held, ':', 1, true)
if held ~= ARGV[1] and not (sep and string.sub(held, 1, sep - 1) == ARGV[1]) then
  return 2
end
if handover and got[4] and KEYS[5] then
  -- A writer's release: the head writer, or the readers at the head.
  local H = {queue = KEYS[3], flag = KEYS[4], publish = ARGV[2], channel = ARGV[3], message = ARGV[4]}
  if rw_hand_over(KEYS[1], KEYS[5], KEYS[2], got[2], ARGV[5], H, '') then
    if redis.call('GET', KEYS[1]) == held then
      redis.call('DEL', KEYS[1])
    end
    return 1
  end
elseif handover and got[4] then
  local own, slot = ARGV[6], ARGV[7]
  local reg, value = next_registration(KEYS[3], nil, slot ~= nil, KEYS[4])
  if reg and reg == own then
    -- The releaser's own registration, lingering for its next waiter
    -- (docs/PROTOCOL.md §4.4): the next one's turn, if there is one.
    reg, value = next_registration(KEYS[3], {[own] = true}, slot ~= nil, KEYS[4])
  end
  if reg and grant_to(reg, value, KEYS[1], KEYS[2], got[2], ARGV[5], ARGV[2], ARGV[3], ARGV[4], slot) then
    return 3
  end
end
redis.call('DEL', KEYS[1])
redis.pcall(ARGV[2], ARGV[3], ARGV[4])
return 1
