-- Extends the lease if the caller still holds it. KEYS: lease.
-- ARGV: owner token, lease ms. Returns 1 if renewed, 0 if lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
