-- One consistent read of a session: its meta and a page of its events,
-- at most a byte budget of payload (never less than one event), and a
-- restart of its idle expiry (a read is activity too), unless the log is
-- complete (complete.lua: it expires its grace after completion).
-- KEYS: meta, stream, sizes. ARGV: a seq (the events after it, oldest
-- first), max bytes, idle ms.
-- Returns nil when the session is gone, else {epoch, published, acked,
-- sent, entries, publish key ('' without one), first retained seq}.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'published', 'acked', 'sent', 'pk', 'done')
if not m[1] then return nil end
local published = tonumber(m[2])
local retained = redis.call('LLEN', KEYS[3])
local first = published - retained + 1
local from = math.max(tonumber(ARGV[1]) + 1, first)
local budget = tonumber(ARGV[2])
local count = 0
if from <= published then
  local sizes = redis.call('LRANGE', KEYS[3], from - first, from - first + 511)
  local total = 0
  for _, size in ipairs(sizes) do
    total = total + tonumber(size)
    if count > 0 and total > budget then break end
    count = count + 1
  end
end
local entries = {}
if count > 0 then
  entries = redis.call('XRANGE', KEYS[2], string.format('0-%d', from), '+', 'COUNT', count)
end
if not m[6] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return {m[1], m[2], m[3], m[4], entries, m[5] or '', string.format('%d', first)}
