-- Raises a session's acked and sent cursors (each a maximum, never
-- lowered) and restarts its idle expiry, for the transport attached at
-- a given attach generation. KEYS: meta, stream, sizes. ARGV: acked, sent, idle
-- ms, generation: '' (no transport), 'new' (a transport attaches now: the
-- generation goes up by one), or the generation of the caller's transport
-- (refused, nothing raised, if another transport attached since).
-- Returns {1, generation} if raised, {0, generation} if superseded.
-- Error: GONE.
local m = redis.call('HMGET', KEYS[1], 'acked', 'sent', 'attach')
if not m[1] then return redis.error_reply('GONE session') end
local generation = tonumber(m[3] or '0')
if ARGV[4] == 'new' then
  generation = redis.call('HINCRBY', KEYS[1], 'attach', 1)
elseif ARGV[4] ~= '' and tonumber(ARGV[4]) < generation then
  return {0, generation}
end
if tonumber(ARGV[1]) > tonumber(m[1]) then redis.call('HSET', KEYS[1], 'acked', ARGV[1]) end
if tonumber(ARGV[2]) > tonumber(m[2]) then redis.call('HSET', KEYS[1], 'sent', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if KEYS[3] then redis.call('PEXPIRE', KEYS[3], ARGV[3]) end
return {1, generation}
