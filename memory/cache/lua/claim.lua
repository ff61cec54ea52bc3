-- Take the fill lock of an owner, pipelined after the HMGET of a read that may miss
-- (memory/cache/copy.py: copy_read): one round trip for a miss and its claim.
-- KEYS: memory hash, fill lock. ARGV: lock ms, lock token.
-- Returns 2 when a copy is there (the HMGET's hit, or a fill stored since it ran); 1 when this
-- caller took the fill lock (and left its claim in the hash); else 0.
local key = KEYS[1]
if redis.call('HEXISTS', key, 'rev') == 1 then return 2 end
if ARGV[1] == '0' then return 0 end
local got = redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[1])
if not got then return 0 end
-- NOTE: the claim, in the owner's hash itself: any write's update, eviction, flush or delete
-- removes the hash whole, so a fill that still finds its claim knows none happened since.
if redis.call('EXISTS', key) == 0 then
  redis.call('HSET', key, 'claim', ARGV[2])
  redis.call('PEXPIRE', key, ARGV[1])
else
  redis.call('HSET', key, 'claim', ARGV[2])
end
return 1
