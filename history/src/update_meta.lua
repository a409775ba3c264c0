-- Updates a log's caller meta (fields `c:<name>`) atomically and restarts
-- its idle expiry. KEYS: meta, stream, sizes. ARGV: the keys' time to live
-- in ms; the epoch the log must be under ('' for any); a counter that must
-- be at most a value (name, value; '' for none): either guard failing
-- refuses the update, nothing written; a counter to increment by one (''
-- for none); the caller fields to answer with: '' for all of them
-- (`HGETALL`), or their number followed by their names (`HMGET`: the
-- others are not read); then counters to raise to at least a value, as
-- name, value pairs (a maximum: never lowered).
-- Returns {1 if applied else 0, epoch, the caller's meta as a flat name,
-- value list: the fields asked for that the log has}. Error: GONE.
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then return redis.error_reply('GONE log') end
local wanted = ARGV[6]
local raises = 7 -- the first ARGV of the counters to raise
if wanted ~= '' then raises = 7 + tonumber(wanted) end
local function caller()
  local meta = {}
  if wanted == '' then
    local fields = redis.call('HGETALL', KEYS[1])
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 2) == 'c:' then
        meta[#meta + 1] = string.sub(fields[i], 3)
        meta[#meta + 1] = fields[i + 1]
      end
    end
    return meta
  end
  -- In slices: `unpack` has a bound on the values it spreads.
  for from = 7, raises - 1, 256 do
    local to = math.min(from + 255, raises - 1)
    local names = {}
    for i = from, to do names[#names + 1] = 'c:' .. ARGV[i] end
    local values = redis.call('HMGET', KEYS[1], unpack(names))
    for i = from, to do
      local value = values[i - from + 1]
      if value then
        meta[#meta + 1] = ARGV[i]
        meta[#meta + 1] = value
      end
    end
  end
  return meta
end
local function counter(name)
  return tonumber(redis.call('HGET', KEYS[1], 'c:' .. name) or '0') or 0
end
if (ARGV[2] ~= '' and ARGV[2] ~= epoch)
    or (ARGV[3] ~= '' and counter(ARGV[3]) > tonumber(ARGV[4])) then
  return {0, epoch, caller()}
end
if ARGV[5] ~= '' then redis.call('HINCRBY', KEYS[1], 'c:' .. ARGV[5], 1) end
for i = raises, #ARGV - 1, 2 do
  if tonumber(ARGV[i + 1]) > counter(ARGV[i]) then
    redis.call('HSET', KEYS[1], 'c:' .. ARGV[i], ARGV[i + 1])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[1])
return {1, epoch, caller()}
