-- Count one request in a fixed window (memory/cache/limits.py: window_count).
-- KEYS: the window's counter. ARGV: the window's length in seconds. Returns the count so far.
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return n
