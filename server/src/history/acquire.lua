-- Takes (or keeps) the lease on a session if it is free or already ours.
-- KEYS: lease, meta. ARGV: owner token, lease ms.
-- Returns {'owner', published} or {'held', pttl ms}. Error: GONE.
local published = redis.call('HGET', KEYS[2], 'published')
if not published then return redis.error_reply('GONE session') end
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {'owner', published}
end
return {'held', string.format('%d', redis.call('PTTL', KEYS[1]))}
