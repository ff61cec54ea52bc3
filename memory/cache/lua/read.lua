-- Read an owner's copy where the caller's pipelined HMGET found none (memory/cache/copy.py:
-- copy_read), and take the fill lock.
-- KEYS: memory hash, fill lock. ARGV: ttl, lock ms, lock token, then the fields of a hit.
-- Returns {1, values of those fields} when a copy is there by now (a fill stored it since);
-- {0, 1} when this caller took the fill lock (and left its claim in the hash), else {0, 0}.
local key = KEYS[1]
local held = redis.call('HMGET', key, unpack(ARGV, 4))
if held[1] then
  redis.call('EXPIRE', key, ARGV[1])
  return {1, held}
end
if ARGV[2] == '0' then return {0, 0} end
local got = redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2])
if not got then return {0, 0} end
-- NOTE: the claim, in the owner's hash itself: any write's update, eviction, flush or delete
-- removes the hash whole, so a fill that still finds its claim knows none happened since.
if redis.call('EXISTS', key) == 0 then
  redis.call('HSET', key, 'claim', ARGV[3])
  redis.call('PEXPIRE', key, ARGV[2])
else
  redis.call('HSET', key, 'claim', ARGV[3])
end
return {0, 1}
