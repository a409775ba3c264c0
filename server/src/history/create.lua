-- Creates a session's meta hash unless it exists. KEYS: meta. ARGV: epoch
-- (hex), idle ms, publish key (hex; empty without --publish-keys).
-- Returns 1 if created, 0 if the ID is taken.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'published', '0', 'acked', '0', 'sent', '0',
  'bytes', '0')
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'pk', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
