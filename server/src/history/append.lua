-- Appends a batch of events after checking, before any write, that the
-- caller holds the lease and that the batch starts right after the last
-- seq appended (a script is atomic but never rolled back).
-- KEYS: lease, stream, meta. ARGV: owner token, first seq, MAXLEN ~
-- retention, lease ms, idle ms, payload... Returns the last seq appended.
-- Errors: GONE, NOTOWNER <lease pttl ms>, BEHIND <published>.
local published = redis.call('HGET', KEYS[3], 'published')
if not published then return redis.error_reply('GONE session') end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('NOTOWNER ' .. redis.call('PTTL', KEYS[1]))
end
published = tonumber(published)
local first = tonumber(ARGV[2])
if first ~= published + 1 then
  return redis.error_reply(string.format('BEHIND %d', published))
end
local count = #ARGV - 5
for i = 1, count do
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3],
    string.format('0-%d', first + i - 1), 'd', ARGV[5 + i])
end
local last = string.format('%d', first + count - 1)
redis.call('HSET', KEYS[3], 'published', last)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return last
