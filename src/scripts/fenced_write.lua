-- fenced_write.lua: the fenced store's compare-and-set writes.
-- KEYS: hash...
-- ARGV: mode, {fence, value, fence_field, value_field, derived_field}...
-- Reply: 1 stored; {i, stored fence}: write i (1-based) is stale.
--
-- Every write is checked before any is stored, so they are stored all or
-- none. A derived write passes if its epoch is not below the stored fence,
-- and records its epoch in the derived field. A holder's write passes if
-- its fence is above the stored fence, or equal to it while the derived
-- field is not (no derived write at that number). Returns 1 when stored,
-- or `{i, stored fence}` for the first write `i` (1-based) that is stale.
-- Fences compare as decimal strings (length first), exact for every
-- `u64`; equal numbers are equal strings (no leading zeros). Replay-safe:
-- a replayed call stores the same fields again and gets the same verdict,
-- except a holder's write replayed after a derived write at its fence,
-- which is stale by then (that holder's lease had ended).

local derived = ARGV[1] == 'derived'
for i = 1, #KEYS do
  local a = (i - 1) * 5 + 1
  local fence = ARGV[a + 1]
  local got = redis.call('HMGET', KEYS[i], ARGV[a + 3], ARGV[a + 5])
  local last = got[1]
  -- Stale: below the stored fence, or a holder's write at a fence a
  -- derived write already used.
  if last and (#last > #fence or (#last == #fence and last > fence)
      or (not derived and last == fence and got[2] == last)) then
    return {i, last}
  end
end
for i = 1, #KEYS do
  local a = (i - 1) * 5 + 1
  -- A derived write also records its epoch in the derived field.
  local derived_field = derived and {ARGV[a + 5], ARGV[a + 1]} or {}
  redis.call('HSET', KEYS[i], ARGV[a + 3], ARGV[a + 1], ARGV[a + 4], ARGV[a + 2], unpack(derived_field))
end
return 1
