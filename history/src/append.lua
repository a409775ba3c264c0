-- Appends batches of events to sessions as their next seqs: Redis is the
-- sequencer, so any instance may append and two appends never get the same
-- seq. One call carries the waiting batches of several sessions (group
-- commit across sessions). Each session is then trimmed to the ring's
-- limits, in events and in payload bytes (never below the newest event),
-- and its append announced on the session's own channel (only instances
-- that follow the session subscribe to it).
-- KEYS: per session, meta, stream, sizes (a list: the payload length of
-- each retained event, oldest first). ARGV: max events, max bytes, the
-- keys' time to live in ms (`ttl`), lossless ('1': Redis persists every write before answering), then
-- per session: its ID, the caller's epoch (hex) and published seq (what
-- its ring has seen), a new epoch (hex, used only if the session lost
-- events), the batch's length, and its payloads.
-- Returns per session {epoch (hex), the first seq of its batch}, or 'GONE'
-- for a session whose keys are gone (nothing appended to it).
--
-- Expiry: every script sets the keys' TTL to `ttl` (the idle timeout and a
-- fifth of `ttl` of slack). An append renews it only when the last renewal
-- by an append is a fifth of `ttl` old (`renew_at` in the meta): three
-- PEXPIREs per session per append saved, and the keys still live at least
-- `ttl * 4 / 5` after the last append (the last renewal, by any script, is
-- at most `ttl / 5` older than it). `retained` in the meta counts the
-- sizes list, so no LLEN either.
--
-- Lost events: `inc` is the run_id of the Redis that last appended to the
-- session. Another run_id means Redis restarted since; unless it persists
-- every write, it may have come back without acknowledged events, and
-- `published` would hand their seqs out again. So would a `published`
-- below what the caller's ring has seen under the same epoch, whatever
-- the cause (a restart, a failover to a replica that lagged). Either way
-- the session continues under the new epoch, from seq 1, with no events
-- and the caller's per-epoch meta (`c:epoch/<name>`: cursors, attach
-- generations) cleared: no seq of an epoch is ever given to two events.
local info = redis.pcall('INFO', 'server')
local run_id = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
local max_events = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lossless = ARGV[4] == '1'
local results = {}
local at = 5
for s = 0, #KEYS / 3 - 1 do
  local meta, stream, sizes = KEYS[3 * s + 1], KEYS[3 * s + 2], KEYS[3 * s + 3]
  local id, known_epoch, known = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
  local new_epoch, count = ARGV[at + 3], tonumber(ARGV[at + 4])
  local payloads = at + 5
  at = payloads + count
  local m = redis.call('HMGET', meta, 'published', 'bytes', 'epoch', 'inc', 'retained',
    'renew_at')
  if not m[1] then
    results[s + 1] = 'GONE'
  else
    local published = tonumber(m[1])
    local bytes = tonumber(m[2] or '0')
    local epoch = m[3]
    local retained = tonumber(m[5] or '-1')
    local renew_at = tonumber(m[6] or '0')
    local restarted = m[4] and run_id and m[4] ~= run_id
    if (restarted and not lossless) or (epoch == known_epoch and published < known) then
      epoch = new_epoch
      redis.call('DEL', stream, sizes)
      published = 0
      bytes = 0
      retained = 0
      -- The stream and the sizes are made afresh: without a TTL yet.
      renew_at = 0
      redis.call('HSET', meta, 'epoch', epoch)
      -- The caller's fields of the old epoch (`c:epoch/<name>`: its
      -- cursors, say) go with it; its other fields (a key) stay.
      for _, field in ipairs(redis.call('HKEYS', meta)) do
        if string.sub(field, 1, 8) == 'c:epoch/' then redis.call('HDEL', meta, field) end
      end
    end
    if run_id and m[4] ~= run_id then redis.call('HSET', meta, 'inc', run_id) end
    for i = 1, count do
      local payload = ARGV[payloads + i - 1]
      redis.call('XADD', stream, string.format('0-%d', published + i), 'd', payload)
      redis.call('RPUSH', sizes, #payload)
      bytes = bytes + #payload
    end
    published = published + count
    if retained < 0 then
      retained = redis.call('LLEN', sizes)
    else
      retained = retained + count
    end
    local dropped = 0
    while retained > max_events or (bytes > max_bytes and retained > 1) do
      bytes = bytes - tonumber(redis.call('LPOP', sizes))
      retained = retained - 1
      dropped = dropped + 1
    end
    if dropped > 0 then
      redis.call('XTRIM', stream, 'MINID', string.format('0-%d', published - retained + 1))
    end
    if now >= renew_at then
      redis.call('HSET', meta, 'published', string.format('%d', published), 'bytes',
        string.format('%d', bytes), 'retained', string.format('%d', retained), 'renew_at',
        string.format('%d', now + math.floor(ttl / 5)))
      redis.call('PEXPIRE', meta, ttl)
      redis.call('PEXPIRE', stream, ttl)
      redis.call('PEXPIRE', sizes, ttl)
    else
      redis.call('HSET', meta, 'published', string.format('%d', published), 'bytes',
        string.format('%d', bytes), 'retained', string.format('%d', retained))
    end
    redis.call('PUBLISH', 'gapless:appended:' .. id, id .. ' ' .. string.format('%d', published))
    results[s + 1] = {epoch, published - count + 1}
  end
end
return results
