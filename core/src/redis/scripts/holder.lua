-- holder: who holds the name now, for holder() / Election.leader() / observe().
-- Returns {1 if held else 0, the holder's value ('' if none; when nobody
-- holds it, the value a "release" session left behind), the holder's fence
-- (0 if none), the id of the last term recorded ('0-0' if none)}.
settle()
purge_expired()
promote(nil)
local last = redis.call('XREVRANGE', terms, '+', '-', 'COUNT', 1)[1]
local last_id = last and last[1] or '0-0'
local head = redis.call('ZRANGE', holders, 0, 0)[1]
if head then
  local b = binding(head)
  return {1, b and b.value or '', tonumber(redis.call('HGET', grants, head) or '0'), last_id}
end
return {0, redis.call('GET', value_key) or '', 0, last_id}
