-- Bring a copy from one stamp to the next with a write's delta (memory/cache/copy.py: copy_apply).
-- KEYS: memory hash. ARGV: prev stamp, stamp, ttl, guard ttl, depth,
--   then n turns and n (seq, payload) pairs, n facts and n (key, payload) pairs, n deleted keys.
-- Returns 1 applied, 2 already reflected, 0 dropped (payload absent or not at prev stamp).
local key = KEYS[1]
local stamp = tonumber(ARGV[2])
-- NOTE: one read of the small fields; the payloads only when the delta changes them.
local held = redis.call('HMGET', key, 'rev', 'floor', 'seqs', 'complete', 'fkeys', 'ends', 'fends')
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
local complete = held[4] or '0'

-- A list of payloads joined by ',' in one field, with the end offset of each (exclusive,
-- from 0) as 4 bytes big-endian in another.
local function ends_of(packed)
  local ends = {}
  for j = 1, #(packed or '') / 4 do ends[j] = struct.unpack('>I4', packed, 4 * j - 3) end
  return ends
end
local function ends_packed(ends)
  local parts = {}
  for j = 1, #ends do parts[j] = struct.pack('>I4', ends[j]) end
  return table.concat(parts)
end

local seqs, have = {}, {}
for seq in string.gmatch(held[3] or '', '%S+') do
  seqs[#seqs + 1] = seq
  have[seq] = true
end
local ends = ends_of(held[6])
local body = nil
local i = 6
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  -- NOTE: a fill may already hold this turn (its rows were read after the commit);
  -- applying a delta twice must change nothing.
  if not have[ARGV[i]] then
    have[ARGV[i]] = true
    if body == nil then body = redis.call('HGET', key, 'turns') or '' end
    if #seqs == 0 then
      body = ARGV[i + 1]
      ends[1] = #body
    else
      body = body .. ',' .. ARGV[i + 1]
      ends[#ends + 1] = ends[#ends] + 1 + #ARGV[i + 1]
    end
    seqs[#seqs + 1] = ARGV[i]
  end
  i = i + 2
end
local depth = tonumber(ARGV[5])
if #seqs > depth then
  if body == nil then body = redis.call('HGET', key, 'turns') or '' end
  local cut = #seqs - depth
  local shift = ends[cut] + 1
  body = string.sub(body, shift + 1)
  local kept, kept_ends = {}, {}
  for j = cut + 1, #seqs do
    kept[#kept + 1] = seqs[j]
    kept_ends[#kept_ends + 1] = ends[j] - shift
  end
  seqs, ends = kept, kept_ends
  complete = '0'
end
if body ~= nil then
  redis.call('HSET', key, 'seqs', table.concat(seqs, ' '), 'ends', ends_packed(ends),
    'turns', body)
end
local nfacts = tonumber(ARGV[i])
local ndeleted = tonumber(ARGV[i + 1 + 2 * nfacts])
if nfacts > 0 or ndeleted > 0 then
  -- The cached facts the same way: their keys in fkeys, payloads in facts, ends in fends.
  local names, payloads, from = {}, {}, 1
  local stored = redis.call('HGET', key, 'facts') or ''
  local fends = ends_of(held[7])
  local j = 0
  for name in string.gmatch(held[5] or '', '%S+') do
    j = j + 1
    names[j] = name
    payloads[name] = string.sub(stored, from, fends[j])
    from = fends[j] + 2
  end
  i = i + 1
  for _ = 1, nfacts do
    if payloads[ARGV[i]] == nil then names[#names + 1] = ARGV[i] end
    payloads[ARGV[i]] = ARGV[i + 1]
    i = i + 2
  end
  i = i + 1
  for _ = 1, ndeleted do
    payloads[ARGV[i]] = nil
    i = i + 1
  end
  local listed, bodies, kept_ends, seen, size = {}, {}, {}, {}, -1
  for _, name in ipairs(names) do
    if payloads[name] ~= nil and not seen[name] then
      seen[name] = true
      listed[#listed + 1] = name
      bodies[#bodies + 1] = payloads[name]
      size = size + 1 + #payloads[name]
      kept_ends[#kept_ends + 1] = size
    end
  end
  redis.call('HSET', key, 'fkeys', table.concat(listed, ' '), 'fends', ends_packed(kept_ends),
    'facts', table.concat(bodies, ','))
end
redis.call('HSET', key, 'rev', ARGV[2], 'floor', floor, 'complete', complete)
redis.call('EXPIRE', key, ARGV[3])
return 1
