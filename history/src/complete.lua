-- Marks a log complete (nothing more will be appended to it: an rmcp
-- request stream after its response) and lets its keys expire `grace` ms
-- from now; reads of a complete log no longer renew its keys (read.lua).
-- KEYS: meta, stream, sizes. ARGV: grace ms.
-- Returns 1, or 0 if the log is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'done', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return 1
