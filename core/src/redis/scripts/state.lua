-- state: what the name looks like now, for inspect() (`lockyard status`).
-- Writes nothing: live holders are those whose deadline is still ahead,
-- live waiters those whose waiter lease is, whether or not a script has
-- purged the others yet.
-- Returns strings: {now ms, lock_delay ms left (0 if none), live waiters,
-- recorded shape "<kind> <limit>" ('' if none)} followed, for each live
-- holder in deadline order, by its token, deadline ms, fence and value
-- ('' outside sessions).
read_clock()
local shape = redis.call('GET', shape_key)
-- A short form is the sole holder's whole grant (prelude).
local short = not shape and short_form()
local kind_limit, sole_fence, sole_deadline, sole
if short then kind_limit, sole_fence, sole_deadline, sole = sole_holder(short) end
local state = {int(now_ms), int(math.max(redis.call('PTTL', delay_key), 0)), '0', kind_limit or shape or ''}
local waiting = 0
for _, token in ipairs(redis.call('ZRANGE', queue, 0, -1)) do
  local lease = redis.call('HGET', leases, token)
  if lease and tonumber(string.match(lease, '^(%d+)')) > now_ms then waiting = waiting + 1 end
end
state[3] = int(waiting)
if sole then
  if sole_deadline > now_ms then
    for _, field in ipairs({sole, int(sole_deadline), sole_fence, ''}) do state[#state + 1] = field end
  end
  return state
end
local live = redis.call('ZRANGEBYSCORE', holders, '(' .. int(now_ms), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local b = binding(live[i])
  state[#state + 1] = live[i]
  state[#state + 1] = int(tonumber(live[i + 1]))
  state[#state + 1] = redis.call('HGET', grants, live[i]) or '0'
  state[#state + 1] = b and b.value or ''
end
return state
