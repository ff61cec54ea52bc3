-- Read an owner's copy (memory/cache/copy.py: copy_read).
-- KEYS: memory hash, fill lock. ARGV: ttl, lock ms, lock token, turns wanted.
-- A hit returns {1, rev, turns, facts, summary}: the last turns wanted and every fact, each as
-- one JSON array joined here from the stored payloads, and the summary payload ('' for none); {2} when the copy holds fewer turns than wanted.
-- A miss returns {0, 1} when this caller took the fill lock (and left its claim in the hash),
-- else {0, 0}.
-- NOTE: the joined arrays make a hit three bulk replies whatever the turn count, and leave out
-- the cached turns the caller did not ask for: parsing replies is most of a hit's client time.
local key = KEYS[1]
local meta = redis.call('HMGET', key, 'rev', 'complete', 'seqs', 'fkeys', 'sum')
if meta[1] then
  redis.call('EXPIRE', key, ARGV[1])
  local seqs = {}
  for w in string.gmatch(meta[3] or '', '%S+') do seqs[#seqs + 1] = w end
  local want = tonumber(ARGV[4])
  if want > #seqs and meta[2] ~= '1' then return {2} end
  local names = {}
  for j = math.max(#seqs - want + 1, 1), #seqs do names[#names + 1] = 't:' .. seqs[j] end
  local nturns = #names
  if meta[4] then
    for name in string.gmatch(meta[4], '%S+') do names[#names + 1] = 'f:' .. name end
  else
    for _, name in ipairs(redis.call('HKEYS', key)) do
      if string.sub(name, 1, 2) == 'f:' then names[#names + 1] = name end
    end
  end
  local turns, facts = {}, {}
  -- NOTE: in slices, as unpack() has a limit on how many values it spreads.
  for i = 1, #names, 1000 do
    local last = math.min(i + 999, #names)
    local values = redis.call('HMGET', key, unpack(names, i, last))
    for j = 1, #values do
      if not values[j] then return {2} end
      if i + j - 1 <= nturns then
        turns[#turns + 1] = values[j]
      else
        facts[#facts + 1] = values[j]
      end
    end
  end
  turns = '[' .. table.concat(turns, ',') .. ']'
  return {1, meta[1], turns, '[' .. table.concat(facts, ',') .. ']', meta[5] or ''}
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
