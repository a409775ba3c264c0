-- Creates a log's meta hash unless it exists. KEYS: meta, stream, sizes.
-- ARGV: epoch (hex), the keys' time to live in ms, then the caller's meta
-- as name, value pairs (kept as fields `c:<name>`, apart from the
-- history's own).
-- Returns 1 if created, 0 if the ID is taken. `inc`: the run_id of this
-- Redis (see append.lua: an append under another one finds the restart).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'published', '0', 'bytes', '0')
local info = redis.pcall('INFO', 'server')
local run_id = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
if run_id then redis.call('HSET', KEYS[1], 'inc', run_id) end
for i = 3, #ARGV - 1, 2 do
  redis.call('HSET', KEYS[1], 'c:' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
