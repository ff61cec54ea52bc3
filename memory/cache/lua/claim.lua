-- Take the fill lock of an owner, pipelined after the HMGET of a read that may miss
-- (memory/cache/copy.py: copy_read): one round trip for a miss and its claim.
-- Loaded after take.lua. KEYS: memory hash, fill lock. ARGV: lock ms, lock token.
-- Returns 2 when a copy is there (the HMGET's hit, or a fill stored since it ran); 1 when this
-- caller took the fill lock (and left its claim in the hash); else 0.
if redis.call('HEXISTS', KEYS[1], 'rev') == 1 then return 2 end
return take(ARGV[1], ARGV[2])
