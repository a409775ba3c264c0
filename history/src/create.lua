-- Creates a session's meta hash unless it exists. KEYS: meta. ARGV: epoch
-- (hex), idle ms, publish key (hex; empty without --publish-keys).
-- Returns 1 if created, 0 if the ID is taken. `inc`: the run_id of this
-- Redis (see append.lua: an append under another one finds the restart).
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'published', '0', 'acked', '0', 'sent', '0',
  'bytes', '0')
local info = redis.pcall('INFO', 'server')
local run_id = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
if run_id then redis.call('HSET', KEYS[1], 'inc', run_id) end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'pk', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
