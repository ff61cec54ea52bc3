-- Bring a copy from one stamp to the next with a write's delta (memory/cache/copy.py: copy_apply).
-- KEYS: memory hash. ARGV: prev stamp, stamp, ttl, guard ttl, depth,
--   then n turns and n (seq, payload) pairs, n facts and n (key, payload) pairs, n deleted keys.
-- Returns 1 applied, 2 already reflected, 0 dropped (payload absent or not at prev stamp).
local key = KEYS[1]
local stamp = tonumber(ARGV[2])
-- NOTE: one read of the turns' small fields; the facts' fields only when the delta changes
-- them. Every byte a script reads or builds costs Redis about a nanosecond (docs/performance.md).
local held = redis.call('HMGET', key, 'rev', 'floor', 'seqs', 'complete', 'ends', 'tail')
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

-- Offsets as 4 bytes big-endian each.
-- NOTE: converted up to BLOCK at a time, one struct call each: a call per offset cost Redis
-- about a fifth of an append's script.
local BLOCK = 200
local function ends_of(packed)
  local ends, n = {}, #(packed or '') / 4
  local j = 0
  while j < n do
    local m = math.min(BLOCK, n - j)
    local got = {struct.unpack('>' .. string.rep('I4', m), packed, 4 * j + 1)}
    for k = 1, m do ends[j + k] = got[k] end
    j = j + m
  end
  return ends
end
local function ends_packed(ends, from)
  local parts, j = {}, from - 1
  while j < #ends do
    local m = math.min(BLOCK, #ends - j)
    parts[#parts + 1] = struct.pack('>' .. string.rep('I4', m), unpack(ends, j + 1, j + m))
    j = j + m
  end
  return table.concat(parts)
end

-- The cached turns' payloads, each followed by ',', are the fields turns .. tail, in order; ends
-- holds where the first cached payload begins in them, then where each one's successor would
-- begin (the last: their length). A turn goes on the end of tail, the oldest goes by moving
-- the first offset past it; tail and the bytes dropped are folded into turns once they reach a
-- quarter of it (FOLD_MIN at least). So an append rewrites the small fields, and the big one
-- once in many appends.
local FOLD_MIN = 1024
-- NOTE: the cached seqs ascend (a fill stores them so, and a turn goes at the end only above
-- the last one), so a turn above the last cached seq is new without listing the others; the
-- set of cached seqs is built only for one that is not.
local seqs, packed, tail = held[3] or '', held[5] or '', held[6] or ''
if #packed < 4 then packed = struct.pack('>I4', 0) end
local count = #packed / 4 - 1
local last_end = struct.unpack('>I4', packed, #packed - 3)
local last_seq = nil
if count > 0 then
  local j = #seqs
  while j > 0 and string.byte(seqs, j) ~= 32 do j = j - 1 end
  last_seq = tonumber(string.sub(seqs, j + 1))
end
local have = nil
local changed = false
local i = 6
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do
  local seq, payload = ARGV[i], ARGV[i + 1]
  local new
  if have == nil and last_seq ~= nil and tonumber(seq) <= last_seq then
    have = {}
    for s in string.gmatch(seqs, '%S+') do have[s] = true end
  end
  -- NOTE: a fill may already hold this turn (its rows were read after the commit);
  -- applying a delta twice must change nothing.
  if have == nil then new = true else new = not have[seq] end
  if new then
    if have ~= nil then have[seq] = true end
    tail = tail .. payload .. ','
    last_end = last_end + #payload + 1
    packed = packed .. struct.pack('>I4', last_end)
    if count == 0 then seqs = seq else seqs = seqs .. ' ' .. seq end
    count = count + 1
    last_seq = tonumber(seq)
    changed = true
  end
  i = i + 2
end
local depth = tonumber(ARGV[5])
if count > depth then
  local cut = count - depth
  packed = string.sub(packed, 4 * cut + 1)
  local from = 1
  for _ = 1, cut do from = string.find(seqs, ' ', from, true) + 1 end
  seqs = string.sub(seqs, from)
  count = depth
  complete = '0'
  changed = true
end
-- NOTE: every field the delta changes is written by one HSET at the end.
local fields = {'rev', ARGV[2], 'floor', floor}
local function put(name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
if complete ~= held[4] then put('complete', complete) end
if changed then
  local start = struct.unpack('>I4', packed, 1)
  local head = last_end - #tail
  local loose = start + #tail
  put('seqs', seqs)
  if loose >= FOLD_MIN and 4 * loose >= head then
    local body
    if start < head then
      body = string.sub(redis.call('HGET', key, 'turns') or '', start + 1) .. tail
    else
      body = string.sub(tail, start - head + 1)
    end
    local ends = ends_of(packed)
    for j = 1, #ends do ends[j] = ends[j] - start end
    put('ends', ends_packed(ends, 1))
    put('turns', body)
    redis.call('HDEL', key, 'tail')
  else
    put('ends', packed)
    put('tail', tail)
  end
end
local nfacts = tonumber(ARGV[i])
local ndeleted = tonumber(ARGV[i + 1 + 2 * nfacts])
if nfacts > 0 or ndeleted > 0 then
  -- The cached facts: their keys in fkeys, payloads joined by ',' in facts, each one's end
  -- offset in fends.
  local names, payloads, from = {}, {}, 1
  local kept = redis.call('HMGET', key, 'fkeys', 'fends', 'facts')
  local stored = kept[3] or ''
  local fends = ends_of(kept[2])
  local j = 0
  for name in string.gmatch(kept[1] or '', '%S+') do
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
  put('fkeys', table.concat(listed, ' '))
  put('fends', ends_packed(kept_ends, 1))
  put('facts', table.concat(bodies, ','))
end
redis.call('HSET', key, unpack(fields))
redis.call('EXPIRE', key, ARGV[3])
return 1
