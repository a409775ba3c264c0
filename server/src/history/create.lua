-- Creates a session's meta hash and its owner's lease, unless the meta
-- exists. KEYS: meta, lease. ARGV: epoch (hex), owner token, lease ms,
-- idle ms, publish key (hex; empty without --publish-keys). Returns 1 if
-- created, 0 if the ID is taken.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'published', '0', 'acked', '0', 'sent', '0')
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'pk', ARGV[5]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
