-- One consistent read of a log: its meta and a page of its events, at
-- most a byte budget of payload (never less than one event), and a
-- restart of its idle expiry (a read is activity too), unless the log is
-- complete (complete.lua: it expires its grace after completion).
-- KEYS: meta, stream, sizes. ARGV: a seq (the events after it, oldest
-- first), max bytes, the keys' time to live in ms, then optionally the
-- number of caller fields wanted followed by their names (without the
-- `c:`): only those and the log's own fields this needs are read
-- (`HMGET`), never the whole meta, which a log with many caller fields
-- makes large; without the number, the whole meta (`HGETALL`).
-- Returns nil when the log is gone, else {epoch, published, entries,
-- first retained seq, the caller's meta as a flat name, value list: the
-- named fields the log has, or all}.
local m = {}
local caller = {}
if ARGV[4] then
  local own = redis.call('HMGET', KEYS[1], 'epoch', 'published', 'done')
  m['epoch'], m['published'], m['done'] = own[1], own[2], own[3]
  if not m['epoch'] or not m['published'] then return nil end
  local count = tonumber(ARGV[4])
  -- In slices: `unpack` has a bound on the values it spreads.
  for from = 1, count, 256 do
    local to = math.min(from + 255, count)
    local names = {}
    for i = from, to do names[#names + 1] = 'c:' .. ARGV[4 + i] end
    local values = redis.call('HMGET', KEYS[1], unpack(names))
    for i = from, to do
      local value = values[i - from + 1]
      if value then
        caller[#caller + 1] = ARGV[4 + i]
        caller[#caller + 1] = value
      end
    end
  end
else
  local fields = redis.call('HGETALL', KEYS[1])
  if #fields == 0 then return nil end
  for i = 1, #fields, 2 do
    local name = fields[i]
    if string.sub(name, 1, 2) == 'c:' then
      caller[#caller + 1] = string.sub(name, 3)
      caller[#caller + 1] = fields[i + 1]
    else
      m[name] = fields[i + 1]
    end
  end
end
if not m['epoch'] or not m['published'] then return nil end
local published = tonumber(m['published'])
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
if not m['done'] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return {m['epoch'], m['published'], entries, string.format('%d', first), caller}
