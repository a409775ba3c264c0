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
-- events), the batch's length, its payloads, then its guard: the number of
-- caller fields it expects, each as name, '1' and the value it must hold
-- or '0' and '' (must be absent), the number of caller fields it sets,
-- each as name, value, and the number of caller fields it removes, each
-- as name (after those it sets: a field in both ends absent; the fields
-- are `c:<name>` in the meta).
-- Returns per session {epoch (hex), the first seq of its batch}, or, with
-- nothing of the session written or removed: 'GONE' (its meta is gone),
-- 'REFUSED' (a field its guard expects holds something else), 'DAMAGED
-- <what>' (its keys do not hold what its meta says: one was deleted or cut
-- short, as an eviction policy or a stray command does; permanent), or
-- 'AGAIN' (the session came twice in one call: the later batch was not
-- looked at; the caller sends it again).
--
-- Atomicity per session: a script is never rolled back, so an error
-- raised after a write would leave the sessions before it appended and
-- announced, the failing one half-written, and every caller told the call
-- failed (and retrying: stored twice). So the script looks at EVERY
-- session of the call before its first write, with cheap checks (O(1) per
-- session, and the sizes it trims): meta fields that are numbers, the
-- stream and the sizes of the right types, holding `retained` events each
-- (`LLEN`, `XLEN`), the stream ending at `published` (`XREVRANGE ...
-- COUNT 1`; an empty stream's top ID at most `published`, `XINFO`), and,
-- for a trim by bytes, which reads them first, the sizes it drops whole
-- numbers (a trim by events alone pops them as it writes: a size that is
-- not a number counts as 0 there). A session that fails one gets its own
-- answer and nothing written; the writes of the others are computed from
-- the numbers checked, and cannot fail. The one exception is the first
-- `XADD` of a session (a top ID past `published` left by a stray `XDEL`
-- hides from the checks): it runs protected before any other write of the
-- session, and its refusal answers that session 'DAMAGED'. An error Redis
-- raises at a first write (out of memory, a read-only replica) comes
-- before anything is written.
--
-- Expiry: every script sets the keys' TTL to `ttl` (the idle timeout and a
-- fifth of `ttl` of slack). An append renews it only when the last renewal
-- by an append is a fifth of `ttl` old (`renew_at` in the meta): three
-- PEXPIREs per session per append saved, and the keys still live at least
-- `ttl * 4 / 5` after the last append (the last renewal, by any script, is
-- at most `ttl / 5` older than it). A session that retains no event may
-- be making its stream and sizes afresh: renewed.
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
-- Its stream and sizes are deleted then, whatever they held: not checked.
local info = redis.pcall('INFO', 'server')
local run_id = type(info) == 'string' and string.match(info, 'run_id:(%x+)') or nil
local max_events = tonumber(ARGV[1])
local max_bytes = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lossless = ARGV[4] == '1'

-- `text` as a whole number (decimal digits only), or nil.
local function whole(text)
  if type(text) == 'string' and string.match(text, '^%d+$') then return tonumber(text) end
  return nil
end

-- `text` as an integer (its sign allowed), or nil.
local function integer(text)
  if type(text) == 'string' and string.match(text, '^%-?%d+$') then return tonumber(text) end
  return nil
end

-- The seq of stream entry ID `id` (`0-<seq>`), or nil for any other ID.
local function seq_of(id)
  return whole(type(id) == 'string' and string.match(id, '^0%-(%d+)$') or nil)
end

local function shown(value)
  if value == nil or value == false then return 'none' end
  return tostring(value)
end

-- What appending a batch to one session will write, from what its keys
-- hold now; or the session's answer (a string) when nothing may be.
local function plan(meta, stream, sizes, known_epoch, known, new_epoch, payloads, count, guard)
  local m = redis.pcall('HMGET', meta, 'published', 'bytes', 'epoch', 'inc', 'retained',
    'renew_at')
  if m.err then return 'DAMAGED meta: ' .. m.err end
  if not m[1] then return 'GONE' end
  local published = whole(m[1])
  local bytes = integer(m[2] or '0')
  local epoch = m[3]
  local renew_at = whole(m[6] or '0')
  if not published then return 'DAMAGED meta published is ' .. shown(m[1]) end
  if not bytes then return 'DAMAGED meta bytes is ' .. shown(m[2]) end
  if not epoch then return 'DAMAGED meta has no epoch' end
  if not renew_at then return 'DAMAGED meta renew_at is ' .. shown(m[6]) end
  local p = {
    epoch = epoch, published = published, bytes = bytes, renew_at = renew_at,
    retained = 0, reset = false,
  }
  if run_id and m[4] ~= run_id then p.inc = run_id end
  local restarted = m[4] and run_id and m[4] ~= run_id
  if (restarted and not lossless) or (epoch == known_epoch and published < known) then
    p.reset = true
    p.epoch = new_epoch
    p.published = 0
    p.bytes = 0
  else
    local listed = redis.pcall('LLEN', sizes)
    if type(listed) ~= 'number' then return 'DAMAGED sizes: ' .. shown(listed.err) end
    local entries = redis.pcall('XLEN', stream)
    if type(entries) ~= 'number' then return 'DAMAGED stream: ' .. shown(entries.err) end
    local retained = listed
    if m[5] then
      retained = whole(m[5])
      if not retained then return 'DAMAGED meta retained is ' .. shown(m[5]) end
    end
    if listed ~= retained then
      return string.format('DAMAGED sizes holds %d of %d retained events', listed, retained)
    end
    if entries ~= retained then
      return string.format('DAMAGED stream holds %d of %d retained events', entries, retained)
    end
    if retained > published then
      return string.format('DAMAGED %d retained of %d published', retained, published)
    end
    if retained > 0 then
      local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
      local id = last[1] and last[1][1]
      if seq_of(id) ~= published then
        return string.format('DAMAGED stream ends at %s, published %d', shown(id), published)
      end
    elseif redis.call('EXISTS', stream) == 1 then
      -- Empty but there: the next ID must still be above its top one.
      local described = redis.call('XINFO', 'STREAM', stream)
      local top
      for i = 1, #described - 1, 2 do
        if described[i] == 'last-generated-id' then top = described[i + 1] end
      end
      local top_seq = seq_of(top)
      if not top_seq or top_seq > published then
        return string.format('DAMAGED empty stream at %s, published %d', shown(top), published)
      end
    end
    p.retained = retained
  end
  for _, expected in ipairs(guard.expect) do
    local held = redis.call('HGET', meta, 'c:' .. expected.name)
    if expected.present then
      if held ~= expected.value then return 'REFUSED' end
    elseif held then
      return 'REFUSED'
    end
  end
  if p.retained == 0 then
    -- The stream and the sizes are made afresh: without a TTL yet.
    p.renew_at = 0
  end
  -- The trim, from the checked numbers: the oldest events go while the
  -- session holds more than `max_events`, or more than `max_bytes` and
  -- more than one event.
  local total = p.retained + count
  p.bytes_after = p.bytes
  for i = 0, count - 1 do p.bytes_after = p.bytes_after + #ARGV[payloads + i] end
  if p.bytes_after <= max_bytes then
    -- Within the bytes: only the events over `max_events` go, and their
    -- sizes are subtracted as they are popped (a log at its limit drops
    -- one per event appended: no read for it).
    p.pop = true
    p.dropped = math.max(total - max_events, 0)
    p.retained_after = total - p.dropped
    return p
  end
  -- Over the bytes: the sizes of retained events are read as needed.
  local dropped = 0
  local read = {}
  while total - dropped > max_events or (p.bytes_after > max_bytes and total - dropped > 1) do
    local size
    if dropped < p.retained then
      if dropped >= #read then
        -- What the events over the limit need, then doubling: O(dropped).
        local more = math.max(total - max_events - dropped, #read, 1)
        local from = #read
        local to = math.min(from + more, p.retained) - 1
        for _, text in ipairs(redis.call('LRANGE', sizes, from, to)) do
          local n = whole(text)
          if not n then return 'DAMAGED sizes holds ' .. shown(text) end
          read[#read + 1] = n
        end
        if dropped >= #read then return 'DAMAGED sizes ended early' end
      end
      size = read[dropped + 1]
    else
      size = #ARGV[payloads + dropped - p.retained]
    end
    p.bytes_after = p.bytes_after - size
    dropped = dropped + 1
  end
  p.dropped = dropped
  p.retained_after = total - dropped
  return p
end

-- Writes session `p`'s batch; its answer. Raises nothing after the
-- session's first write.
local function write(p, meta, stream, sizes, id, payloads, count, guard)
  if p.reset then
    redis.call('DEL', stream, sizes)
    redis.call('HSET', meta, 'epoch', p.epoch)
    -- The caller's fields of the old epoch (`c:epoch/<name>`: its
    -- cursors, say) go with it; its other fields (a key) stay.
    for _, field in ipairs(redis.call('HKEYS', meta)) do
      if string.sub(field, 1, 8) == 'c:epoch/' then redis.call('HDEL', meta, field) end
    end
  end
  for i = 1, count do
    local entry = string.format('0-%d', p.published + i)
    local payload = ARGV[payloads + i - 1]
    if i == 1 and not p.reset then
      local added = redis.pcall('XADD', stream, entry, 'd', payload)
      if type(added) == 'table' and added.err then
        if string.find(added.err, 'XADD', 1, true) or string.find(added.err, 'WRONGTYPE', 1, true) then
          return 'DAMAGED stream refused ' .. entry .. ': ' .. added.err
        end
        -- Refused before any write of the call: nothing to undo.
        error(added)
      end
    else
      redis.call('XADD', stream, entry, 'd', payload)
    end
    redis.call('RPUSH', sizes, #payload)
  end
  local published = p.published + count
  if p.dropped > 0 then
    if p.pop then
      -- `LLEN` was checked: as many come as asked for. A size that is not
      -- a number (damage no O(1) check finds) counts as none.
      for _, size in ipairs(redis.call('LPOP', sizes, p.dropped)) do
        p.bytes_after = p.bytes_after - (tonumber(size) or 0)
      end
    else
      redis.call('LTRIM', sizes, p.dropped, -1)
    end
    redis.call('XTRIM', stream, 'MINID', string.format('0-%d', published - p.retained_after + 1))
  end
  if p.inc then redis.call('HSET', meta, 'inc', p.inc) end
  for _, field in ipairs(guard.set) do
    redis.call('HSET', meta, 'c:' .. field.name, field.value)
  end
  for _, name in ipairs(guard.unset) do
    redis.call('HDEL', meta, 'c:' .. name)
  end
  local renew = now >= p.renew_at
  if renew then
    redis.call('HSET', meta, 'published', string.format('%d', published), 'bytes',
      string.format('%d', p.bytes_after), 'retained', string.format('%d', p.retained_after),
      'renew_at', string.format('%d', now + math.floor(ttl / 5)))
  else
    redis.call('HSET', meta, 'published', string.format('%d', published), 'bytes',
      string.format('%d', p.bytes_after), 'retained', string.format('%d', p.retained_after))
  end
  if renew then
    redis.call('PEXPIRE', meta, ttl)
    redis.call('PEXPIRE', stream, ttl)
    redis.call('PEXPIRE', sizes, ttl)
  end
  redis.call('PUBLISH', 'gapless:appended:' .. id, id .. ' ' .. string.format('%d', published))
  return {p.epoch, p.published + 1}
end

-- Every session looked at before the first write.
local sessions = {}
local seen = {}
local at = 5
for s = 1, #KEYS / 3 do
  local meta, stream, sizes = KEYS[3 * s - 2], KEYS[3 * s - 1], KEYS[3 * s]
  local count = tonumber(ARGV[at + 4])
  local guard = { expect = {}, set = {}, unset = {} }
  local g = at + 5 + count
  for _ = 1, tonumber(ARGV[g]) do
    guard.expect[#guard.expect + 1] = {
      name = ARGV[g + 1], present = ARGV[g + 2] == '1', value = ARGV[g + 3],
    }
    g = g + 3
  end
  g = g + 1
  for _ = 1, tonumber(ARGV[g]) do
    guard.set[#guard.set + 1] = { name = ARGV[g + 1], value = ARGV[g + 2] }
    g = g + 2
  end
  g = g + 1
  for _ = 1, tonumber(ARGV[g]) do
    guard.unset[#guard.unset + 1] = ARGV[g + 1]
    g = g + 1
  end
  local session = {
    meta = meta, stream = stream, sizes = sizes, id = ARGV[at], payloads = at + 5,
    count = count, guard = guard,
  }
  if seen[meta] then
    session.plan = 'AGAIN'
  else
    seen[meta] = true
    session.plan = plan(meta, stream, sizes, ARGV[at + 1], tonumber(ARGV[at + 2]), ARGV[at + 3],
      at + 5, count, guard)
  end
  sessions[s] = session
  at = g + 1
end

local results = {}
for s = 1, #sessions do
  local session = sessions[s]
  if type(session.plan) == 'string' then
    results[s] = session.plan
  else
    results[s] = write(session.plan, session.meta, session.stream, session.sizes, session.id,
      session.payloads, session.count, session.guard)
  end
end
return results
