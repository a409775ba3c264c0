-- Appends a batch of events to a session as its next seqs: Redis is the
-- sequencer, so any instance may append and two appends never get the same
-- seq. Then trims the session to the ring's limits, in events and in
-- payload bytes (never below the newest event), and announces the append.
-- KEYS: meta, stream, sizes (a list: the payload length of each retained
-- event, oldest first). ARGV: session ID, max events, max bytes, idle ms,
-- payload... Returns the first seq of the batch. Error: GONE.
local m = redis.call('HMGET', KEYS[1], 'published', 'bytes')
if not m[1] then return redis.error_reply('GONE session') end
local published = tonumber(m[1])
local bytes = tonumber(m[2] or '0')
local max_events = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local count = #ARGV - 4
for i = 1, count do
  local payload = ARGV[4 + i]
  redis.call('XADD', KEYS[2], string.format('0-%d', published + i), 'd', payload)
  redis.call('RPUSH', KEYS[3], #payload)
  bytes = bytes + #payload
end
published = published + count
local retained = redis.call('LLEN', KEYS[3])
local dropped = 0
while retained > max_events or (bytes > max_bytes and retained > 1) do
  bytes = bytes - tonumber(redis.call('LPOP', KEYS[3]))
  retained = retained - 1
  dropped = dropped + 1
end
if dropped > 0 then
  redis.call('XTRIM', KEYS[2], 'MINID', string.format('0-%d', published - retained + 1))
end
redis.call('HSET', KEYS[1], 'published', string.format('%d', published), 'bytes',
  string.format('%d', bytes))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PUBLISH', 'gapless:appended', ARGV[1] .. ' ' .. string.format('%d', published))
return published - count + 1
