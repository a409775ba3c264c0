-- An admission set (History::admit, renew, count): a sorted set whose
-- members are scored by their expiry, in ms of Redis's own clock (`TIME`,
-- never a caller's). A member whose expiry is at or before now holds no
-- place: it is removed first, whatever the operation. Each call touches
-- this one key only (one Redis Cluster slot, whatever the set's name).
-- KEYS: the set. ARGV: the operation ('admit', 'renew' or 'count'); the
-- member ('admit', 'renew'); its time to live in ms, 0 or more ('admit',
-- 'renew': its expiry is now + ttl); the limit ('admit': the most live
-- members the set holds).
-- Returns {answer, live members after the call}: for 'admit' 2 (added), 1
-- (already present: its expiry renewed, not counted twice) or 0 (full:
-- nothing written); for 'renew' 1 (present: renewed) or 0 (absent:
-- nothing written); for 'count' 1. The key itself expires with its
-- latest member, so an abandoned set disappears.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function ms(n) return string.format('%d', n) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms(now))
local op = ARGV[1]
if op == 'count' then return {1, redis.call('ZCARD', KEYS[1])} end
local member = ARGV[2]
local expiry = now + tonumber(ARGV[3])
local answer
if redis.call('ZSCORE', KEYS[1], member) then
  answer = 1
elseif op == 'renew' then
  return {0, redis.call('ZCARD', KEYS[1])}
elseif op == 'admit' then
  local count = redis.call('ZCARD', KEYS[1])
  if count >= tonumber(ARGV[4]) then return {0, count} end
  answer = 2
else
  return redis.error_reply('ERR unknown admission operation ' .. op)
end
redis.call('ZADD', KEYS[1], ms(expiry), member)
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], ms(math.max(tonumber(latest[2]) - now, 1)))
return {answer, redis.call('ZCARD', KEYS[1])}
