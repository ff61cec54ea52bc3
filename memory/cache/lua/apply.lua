-- Bring a copy from one stamp to the next with a write's delta (memory/cache/copy.py: copy_apply).
-- KEYS: memory hash. ARGV: prev stamp, stamp, ttl, guard ttl, depth,
--   then n turns and n (seq, payload) pairs, n facts and n (key, payload) pairs, n deleted keys.
-- Returns 1 applied, 2 already reflected, 0 dropped (payload absent or not at prev stamp).
local key = KEYS[1]
local stamp = tonumber(ARGV[2])
-- NOTE: one read of every field the script needs (a missing one is false).
local held = redis.call('HMGET', key, 'rev', 'floor', 'seqs', 'complete', 'fkeys')
local cur = held[1]
if cur and tonumber(cur) >= stamp then return 2 end
local floor = tonumber(held[2] or '0')
if stamp > floor then floor = stamp end
if not cur or cur ~= ARGV[1] then
  redis.call('DEL', key)
  redis.call('HSET', key, 'floor', floor)
  redis.call('EXPIRE', key, ARGV[4])
  return 0
end
local seqs = held[3] or ''
local complete = held[4] or '0'
local i = 6
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  -- NOTE: a fill may already hold this turn (its rows were read after the commit);
  -- applying a delta twice must change nothing.
  if redis.call('HSETNX', key, 't:' .. ARGV[i], ARGV[i + 1]) == 1 then
    if seqs == '' then seqs = ARGV[i] else seqs = seqs .. ' ' .. ARGV[i] end
  end
  i = i + 2
end
local list = {}
for w in string.gmatch(seqs, '%S+') do list[#list + 1] = w end
local depth = tonumber(ARGV[5])
if #list > depth then
  for j = 1, #list - depth do redis.call('HDEL', key, 't:' .. list[j]) end
  seqs = table.concat(list, ' ', #list - depth + 1, #list)
  complete = '0'
end
local nfacts = tonumber(ARGV[i])
local ndeleted = tonumber(ARGV[i + 1 + 2 * nfacts])
if nfacts > 0 or ndeleted > 0 then
  local fkeys = held[5]
  local known = {}
  if fkeys then for name in string.gmatch(fkeys, '%S+') do known[name] = true end end
  i = i + 1
  for _ = 1, nfacts do
    redis.call('HSET', key, 'f:' .. ARGV[i], ARGV[i + 1])
    known[ARGV[i]] = true
    i = i + 2
  end
  i = i + 1
  for _ = 1, ndeleted do
    redis.call('HDEL', key, 'f:' .. ARGV[i])
    known[ARGV[i]] = nil
    i = i + 1
  end
  -- NOTE: a copy filled before the field existed lacks it; reads then list the hash's fields.
  if fkeys then
    local names = {}
    for name in pairs(known) do names[#names + 1] = name end
    redis.call('HSET', key, 'fkeys', table.concat(names, ' '))
  end
end
redis.call('HSET', key, 'rev', ARGV[2], 'floor', floor, 'seqs', seqs, 'complete', complete)
redis.call('EXPIRE', key, ARGV[3])
return 1
