-- rw_read.lua: a read-write lease's read (docs/PROTOCOL.md §5.3).
-- KEYS: write, readers, intent, counter [, queue, flag, reg]
-- ARGV: token, lease_ms, counter_ttl_ms [, HANDOVER]
-- Reply: the epoch (bulk): granted; an integer: busy, the ms to wait.
--
-- One `MGET` reads the writer, the intent, the counter and the queue's
-- flag. Busy (the writer's or the intent's `PTTL`) while a writer holds
-- the lease or a waiting writer's intent lives: writers are preferred; a
-- waiting caller then registers. On those paths, and while lockers are
-- queued, a live reader of this locker (this token, or the one its
-- registration names: a hand-over admitted it) is the claim, or a replay:
-- it gets the epoch and the full lease from this attempt on. A free lease
-- with lockers queued goes to the head first (rw_handover.lua
-- `rw_hand_over`); a live writer first in line keeps new readers out
-- while it waits for the live ones. Else the reader is added, scored by
-- its expiry in the server's ms (`TIME`), and the epoch is the counter's
-- value, the latest writer fence; a missing counter is set to the §3
-- floor first, so that the next writer's fence is above every epoch
-- handed out. A replay sets the reader's expiry anew from this attempt
-- on, as every kind's replay does.
--
-- The set expires with its latest member (`admit`), and a read into a set
-- that was there purges the expired readers.

local H, got, queued, busy = begin(3, 5, KEYS[1], KEYS[3], KEYS[4])
local epoch = got[3]
if got[1] then
  -- No reader lives beside a writer.
  return busy(redis.call('PTTL', KEYS[1]))
end
local function expiry()
  return string.format('%.0f', now_ms() + tonumber(ARGV[2]))
end
-- A live reader of this locker (a replay, or one a hand-over admitted)
-- holds the lease again, from this attempt on.
local function claimed()
  for _, token in ipairs({ARGV[1], H and H.other or ''}) do
    local score = token ~= '' and redis.call('ZSCORE', KEYS[2], token)
    if score and tonumber(score) > now_ms() then
      if token ~= ARGV[1] then
        redis.call('ZREM', KEYS[2], token)
      end
      admit(KEYS[2], ARGV[1], expiry())
      settle(H, true)
      return read_epoch(KEYS[4], epoch, ARGV[3])
    end
  end
end
if got[2] or queued then
  local mine = claimed()
  if mine then
    return mine
  end
  if got[2] then
    return busy(redis.call('PTTL', KEYS[3]))
  end
  local claim, served, readers_in, writer_next = rw_hand_over(KEYS[1], KEYS[2], KEYS[4], epoch, ARGV[3], H, H.reg)
  epoch = redis.call('GET', KEYS[4])
  mine = served and claimed()
  if mine then
    return mine
  end
  if writer_next and not claim then
    -- A writer first in line waits for the live readers; new ones wait
    -- behind it.
    return busy(readers_until(KEYS[2]) - now_ms())
  end
  -- Readers let in with no writer queued next: this one joins them.
  if claim and not (readers_in and not writer_next) then
    return busy(tonumber(claim))
  end
end
-- A replay sets the reader's expiry anew, as every kind's replay does.
if not admit(KEYS[2], ARGV[1], expiry()) then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms())
end
settle(H, queued)
return read_epoch(KEYS[4], epoch, ARGV[3])
