-- A read that may miss, and its claim, in one call (memory/cache/copy.py: copy_read, while
-- this process's reads often miss): the HMGET and EXPIRE of a read, then on a miss the claim of
-- claim.lua, with the same effects as those three sent in one pipeline.
-- Loaded after take.lua. KEYS: memory hash, fill lock. ARGV: ttl, guard ttl, lock ms, lock token.
-- Returns the HMGET's fields when the hash holds a copy (no lock taken); else 1 when this
-- caller took the fill lock (and left its claim in the hash), 0 when it did not.
local key = KEYS[1]
-- NOTE: the fields of copy.py's _HIT_FIELDS, in its order.
local held = redis.call('HMGET', key, 'rev', 'complete', 'ends', 'turns', 'fends', 'facts', 'sum',
  'floor', 'tail')
redis.call('EXPIRE', key, ARGV[1])
if held[1] then return held end
-- NOTE: a floor alone is set back to at most the guard's TTL, as copy_drop promised.
if held[8] then redis.call('EXPIRE', key, ARGV[2], 'LT') end
return take(ARGV[3], ARGV[4])
