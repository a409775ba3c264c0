-- Appends a batch of events to a session as its next seqs: Redis is the
-- sequencer, so any instance may append and two appends never get the same
-- seq. Then trims the session to the ring's limits, in events and in
-- payload bytes (never below the newest event), and announces the append.
-- KEYS: meta, stream, sizes (a list: the payload length of each retained
-- event, oldest first). ARGV: session ID, max events, max bytes, idle ms,
-- lossless ('1': Redis persists every write before answering), the
-- caller's epoch (hex) and published seq (what its ring has seen), a new
-- epoch (hex, used only if the session lost events), payload...
-- Returns {epoch (hex), the first seq of the batch}. Error: GONE.
--
-- Lost events: `inc` is the run_id of the Redis that last appended to the
-- session. Another run_id means Redis restarted since; unless it persists
-- every write, it may have come back without acknowledged events, and
-- `published` would hand their seqs out again. So would a `published`
-- below what the caller's ring has seen under the same epoch, whatever
-- the cause (a restart, a failover to a replica that lagged). Either way
-- the session continues under the new epoch, from seq 1, with no events,
-- its cursors reset and its transports superseded: no seq of an epoch is
-- ever given to two events.
local m = redis.call('HMGET', KEYS[1], 'published', 'bytes', 'epoch', 'inc')
if not m[1] then return redis.error_reply('GONE session') end
local published = tonumber(m[1])
local bytes = tonumber(m[2] or '0')
local epoch = m[3]
local info = redis.pcall('INFO', 'server')
local run_id = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
local restarted = m[4] and run_id and m[4] ~= run_id
if (restarted and ARGV[5] ~= '1') or (epoch == ARGV[6] and published < tonumber(ARGV[7])) then
  epoch = ARGV[8]
  redis.call('DEL', KEYS[2], KEYS[3])
  published = 0
  bytes = 0
  redis.call('HSET', KEYS[1], 'epoch', epoch, 'acked', '0', 'sent', '0')
  redis.call('HINCRBY', KEYS[1], 'attach', 1)
end
if run_id and m[4] ~= run_id then redis.call('HSET', KEYS[1], 'inc', run_id) end
local max_events = tonumber(ARGV[2])
local max_bytes = tonumber(ARGV[3])
local count = #ARGV - 8
for i = 1, count do
  local payload = ARGV[8 + i]
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
return {epoch, published - count + 1}
