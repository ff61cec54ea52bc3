-- Drop a copy, leaving only a content-free floor (memory/cache/copy.py: copy_drop).
-- KEYS: memory hash. ARGV: stamp, guard ttl. Returns 1.
local floor = tonumber(redis.call('HGET', KEYS[1], 'floor') or '0')
local stamp = tonumber(ARGV[1])
if stamp > floor then floor = stamp end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'floor', floor)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
