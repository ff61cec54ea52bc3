-- Store a rehydrated copy unless a writer moved past it (memory/cache/copy.py: copy_fill).
-- KEYS: memory hash, fill lock.
-- ARGV: stamp, ttl, complete, lock token, seqs, fields ("name length" pairs), payloads joined,
--   the summary payload ('' for none).
-- Returns 1 stored over this caller's claim, 2 stored without it (the hash was removed since
-- the miss: verify the fill), 0 refused (the copy is at or past the stamp, or a floor is above it).
-- NOTE: two arguments for all payloads, not two per payload: packing a command's arguments is
-- most of the client's time for a fill of 50 turns.
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
redis.call('HSET', KEYS[1], 'rev', ARGV[1], 'floor', ARGV[1], 'complete', ARGV[3], 'seqs', ARGV[5])
local fields, fkeys, pos = {}, {}, 1
for name, size in string.gmatch(ARGV[6], '(%S+) (%d+)') do
  fields[#fields + 1] = name
  fields[#fields + 1] = string.sub(ARGV[7], pos, pos + size - 1)
  if string.sub(name, 1, 2) == 'f:' then fkeys[#fkeys + 1] = string.sub(name, 3) end
  pos = pos + size
end
redis.call('HSET', KEYS[1], 'fkeys', table.concat(fkeys, ' '))
if ARGV[8] ~= '' then redis.call('HSET', KEYS[1], 'sum', ARGV[8]) end
-- NOTE: one HSET per slice of fields, as unpack() has a limit on how many values it spreads.
for i = 1, #fields, 1000 do
  redis.call('HSET', KEYS[1], unpack(fields, i, math.min(i + 999, #fields)))
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
if claimed then return 1 end
return 2
