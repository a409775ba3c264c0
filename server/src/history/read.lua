-- One consistent read of a session: its meta and events. KEYS: meta,
-- stream. ARGV: 'last' and a count (the newest events, newest first), or a
-- seq and a count (the events after that seq, oldest first).
-- Returns nil when the session is gone, else {epoch, published, acked,
-- sent, entries, publish key ('' without one)}.
local m = redis.call('HMGET', KEYS[1], 'epoch', 'published', 'acked', 'sent', 'pk')
if not m[1] then return nil end
local entries
if ARGV[1] == 'last' then
  entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[2])
else
  entries = redis.call('XRANGE', KEYS[2], '(0-' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
return {m[1], m[2], m[3], m[4], entries, m[5] or ''}
