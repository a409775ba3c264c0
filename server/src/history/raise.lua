-- Raises a session's acked and sent cursors (each a maximum, never
-- lowered) and restarts its idle expiry. KEYS: meta, stream.
-- ARGV: acked, sent, idle ms. Returns 1. Error: GONE.
local m = redis.call('HMGET', KEYS[1], 'acked', 'sent')
if not m[1] then return redis.error_reply('GONE session') end
if tonumber(ARGV[1]) > tonumber(m[1]) then redis.call('HSET', KEYS[1], 'acked', ARGV[1]) end
if tonumber(ARGV[2]) > tonumber(m[2]) then redis.call('HSET', KEYS[1], 'sent', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
