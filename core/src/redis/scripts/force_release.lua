-- force_release: break-glass removal of every holder of the name, whoever
-- they are (an operator's `lockyard release --force`, dsync's ForceUnlock).
-- The fence counter stays, so the next grant still gets a larger fencing
-- token, and each former holder finds its grant gone at its next refresh
-- and turns unhealthy. A running lock_delay is lifted too: the operator
-- asked for the name to be free now. Waiters are then admitted in order,
-- as after a release.
-- ARGV[1] (limit) is ignored: the prelude takes the limit the name was
-- taken with (its recorded shape), which the operator need not know.
-- Returns the number of holders removed.
settle()
purge_expired()
local removed = redis.call('ZRANGE', holders, 0, -1)
for _, token in ipairs(removed) do
  redis.call('ZREM', holders, token)
  -- Before the grant's fence goes: an election records the term's end with it.
  end_grant(token, nil)
end
if #removed > 0 then forget_grants(removed) end
redis.call('DEL', delay_key)
promote(nil)
return #removed
