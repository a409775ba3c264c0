-- Gives the lease up if the caller holds it. KEYS: lease.
-- ARGV: owner token. Returns 1 if released.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
