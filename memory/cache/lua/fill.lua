-- Store a rehydrated copy unless a writer moved past it (memory/cache/copy.py: copy_fill).
-- KEYS: memory hash, fill lock.
-- ARGV: stamp, ttl, complete, lock token, then the turns' seqs, offsets and payloads
--   (fields seqs, ends, turns; apply.lua says how they are laid out), the facts' keys, end
--   offsets and payloads (fkeys, fends, facts), and the summary payload ('' for none).
-- Returns 1 stored over this caller's claim, 2 stored without it (the hash was removed since
-- the miss: verify the fill), 0 refused (the copy is at or past the stamp, or a floor is above it).
if redis.call('GET', KEYS[2]) == ARGV[4] then redis.call('DEL', KEYS[2]) end
local claimed = ARGV[4] ~= '' and redis.call('HGET', KEYS[1], 'claim') == ARGV[4]
local stamp = tonumber(ARGV[1])
local cur = redis.call('HGET', KEYS[1], 'rev')
local floor = redis.call('HGET', KEYS[1], 'floor')
if (cur and tonumber(cur) >= stamp) or (floor and tonumber(floor) > stamp) then
  if claimed then redis.call('HDEL', KEYS[1], 'claim') end
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rev', ARGV[1], 'floor', ARGV[1], 'complete', ARGV[3],
  'seqs', ARGV[5], 'ends', ARGV[6], 'turns', ARGV[7], 'fkeys', ARGV[8], 'fends', ARGV[9],
  'facts', ARGV[10])
if ARGV[11] ~= '' then redis.call('HSET', KEYS[1], 'sum', ARGV[11]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
if claimed then return 1 end
return 2
