-- The fill lock's claim: a chunk that claim.lua and read_claim.lua are loaded after
-- (memory/cache/copy.py: _script). KEYS: memory hash, fill lock.
-- take(ms, token) takes the fill lock for ms milliseconds (none when ms is '0') and leaves token
-- as the claim in the hash. Returns 1 when this caller took the lock, else 0.
local function take(ms, token)
  if ms == '0' then return 0 end
  if not redis.call('SET', KEYS[2], token, 'NX', 'PX', ms) then return 0 end
  -- NOTE: the claim, in the owner's hash itself: any write's update, eviction, flush or delete
  -- removes the hash whole, so a fill that still finds its claim knows none happened since.
  local fresh = redis.call('EXISTS', KEYS[1]) == 0
  redis.call('HSET', KEYS[1], 'claim', token)
  if fresh then redis.call('PEXPIRE', KEYS[1], ms) end
  return 1
end
