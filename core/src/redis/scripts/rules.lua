-- The rules over the full records (see prelude.lua for the keys), for
-- every script's full path.

grants, queue, leases, watchers = prefix .. 'grants', prefix .. 'queue', prefix .. 'leases', prefix .. 'watchers'
fence_key, wake_prefix = prefix .. 'fence', prefix .. 'wake:'
bound, delay_key, value_key, terms = prefix .. 'bound', prefix .. 'delay', prefix .. 'value', prefix .. 'terms'
shape_key, owners = prefix .. 'shape', prefix .. 'owners'

-- Keys carry an expiry so that a name whose holders and waiters all crashed
-- leaves nothing behind in Redis.
local function expire_with_last(key, zset)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')[2]
  if last then redis.call('PEXPIREAT', key, int(tonumber(last) + 1)) end
end

-- Only lengthens a key's expiry (a waiter's entry may outlive every holder's).
local function expire_no_earlier(key, ms)
  local left = redis.call('PTTL', key)
  if left == -1 or (left >= 0 and left < ms) then redis.call('PEXPIRE', key, int(ms)) end
end

-- What a session attached to `token`'s grant, or nil outside sessions.
local function binding(token)
  local meta = redis.call('HGET', bound, token)
  if not meta then return nil end
  local delay_ms, delete, election, value = string.match(meta, '^(%d+) (%d) (%d) (.*)$')
  return {delay_ms = tonumber(delay_ms), delete = delete == '1', election = election == '1', value = value}
end

-- A grant under a session must be found run out, not vanish with its keys'
-- expiry, or its lock_delay would never start: keep them that much longer.
local function keep_bound(b, lifetime_ms)
  local ms = lifetime_ms + b.delay_ms + 1
  expire_no_earlier(holders, ms)
  expire_no_earlier(grants, ms)
  expire_no_earlier(bound, ms)
end

-- `token` takes up its grant (a handed-over one included) for a whole
-- ttl; under a session the binding lives as long.
local function take_up(token, ttl_ms)
  local deadline = now_ms + ttl_ms
  redis.call('ZADD', holders, 'XX', int(deadline), token)
  expire_with_last(holders, holders)
  expire_with_last(grants, holders)
  expire_with_last(owners, holders)
  expire_no_earlier(shape_key, ttl_ms)
  local b = binding(token)
  if b then
    redis.call('HDEL', bound, 'handoff:' .. token)
    keep_bound(b, ttl_ms)
  end
  return deadline
end

-- Kept as long as the fence counter: a term's record outlives its holder.
local function record_term(fence, value)
  redis.call('XADD', terms, 'MAXLEN', '~', 1000, '*', 'fence', fence, 'value', value)
  redis.call('PEXPIRE', terms, 3600000)
end

-- The end of `token`'s grant under a session: released (expired_at nil)
-- or run out at server time expired_at. Only a lease that ran out starts
-- the lock_delay, counted from the moment it ran out; a clean release
-- frees the name at once.
local function end_grant(token, expired_at)
  local b = binding(token)
  if not b then return end
  redis.call('HDEL', bound, token)
  -- A grant handed to a waiter that never took it up (paused, crashed)
  -- was never held: its end frees the name without a lock_delay.
  local never_taken = redis.call('HDEL', bound, 'handoff:' .. token) == 1
  if expired_at and b.delay_ms > 0 and not never_taken then
    local left = expired_at + b.delay_ms - now_ms
    -- A delay already over (found in its last millisecond, or late) bars
    -- nothing; SET … PX 0 or -1 would fail after this script's earlier
    -- writes, and PTTL of a missing key (-2) is below both.
    if left > 0 and left > redis.call('PTTL', delay_key) then
      redis.call('SET', delay_key, token, 'PX', int(left))
    end
  end
  if not b.delete and b.value ~= '' then
    redis.call('SET', value_key, b.value, 'PX', 3600000)
  end
  if b.election then
    record_term(redis.call('HGET', grants, token), '')
  end
end

-- The grant records of `tokens`, whose slots are no longer held.
local function forget_grants(tokens)
  redis.call('HDEL', grants, unpack(tokens))
  redis.call('HDEL', owners, unpack(tokens))
end

-- Holders whose lease ran out (crashed, paused, partitioned) lose their slot.
local function purge_expired()
  local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', now_ms, 'WITHSCORES')
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
    local under_session = redis.call('EXISTS', bound) == 1
    local tokens = {}
    for i = 1, #expired, 2 do
      tokens[#tokens + 1] = expired[i]
      if under_session then end_grant(expired[i], tonumber(expired[i + 1])) end
    end
    forget_grants(tokens)
  end
end

local function grant(token, lifetime_ms)
  local deadline = now_ms + lifetime_ms
  redis.call('ZADD', holders, int(deadline), token)
  local fence, fence_text = next_fence(lifetime_ms)
  redis.call('HSET', grants, token, fence_text)
  expire_with_last(holders, holders)
  expire_with_last(grants, holders)
  -- A value left by an earlier holder no longer describes the name.
  redis.call('DEL', value_key)
  local b = binding(token)
  if b then
    keep_bound(b, lifetime_ms)
    if b.election then record_term(fence_text, b.value) end
  end
  return fence, deadline
end

-- A name nobody holds or waits for may be taken up as anything next.
-- `recorded_shape` follows the key, so no script reads it twice.
local function forget_shape_if_idle()
  if recorded_shape and redis.call('ZCARD', holders) == 0
      and redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', shape_key)
    recorded_shape = nil
  end
end

-- Wake every live wait() caller once no slot is held.
local function notify_idle()
  local all = redis.call('HGETALL', watchers)
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) > now_ms then
      local wake = wake_prefix .. all[i]
      redis.call('RPUSH', wake, 'idle')
      redis.call('PEXPIRE', wake, int(tonumber(all[i + 1]) - now_ms))
    end
  end
  redis.call('DEL', watchers)
end

-- Admit waiters in arrival order while slots are free. A waiter whose lease
-- ran out (it crashed or gave up without cancelling) is dropped, never
-- granted. A grant handed to a waiter lasts only its handoff window until
-- the waiter picks it up and refreshes it, so a waiter that died just after
-- its last renewal cannot sit on the slot for a whole TTL.
-- Returns {fence, deadline} when `caller` itself was admitted.
local function promote(caller)
  local admitted = nil
  -- A lost session's lock_delay bars every grant until it runs out.
  local barred = redis.call('EXISTS', delay_key) == 1
  while not barred and redis.call('ZCARD', holders) < limit do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then break end
    local lease = redis.call('HGET', leases, head)
    redis.call('ZREM', queue, head)
    redis.call('HDEL', leases, head)
    if lease then
      local lease_deadline, ttl_ms, handoff_ms = string.match(lease, '(%d+) (%d+) (%d+)')
      lease_deadline, ttl_ms, handoff_ms = tonumber(lease_deadline), tonumber(ttl_ms), tonumber(handoff_ms)
      if head == caller then
        local fence, deadline = grant(head, ttl_ms)
        admitted = {fence, deadline}
      elseif lease_deadline > now_ms then
        local fence, deadline = grant(head, math.min(ttl_ms, handoff_ms))
        if binding(head) then redis.call('HSET', bound, 'handoff:' .. head, '1') end
        local wake = wake_prefix .. head
        redis.call('RPUSH', wake, int(fence) .. ' ' .. int(deadline))
        redis.call('PEXPIRE', wake, int(math.min(ttl_ms, handoff_ms)))
      else
        redis.call('HDEL', bound, head)
      end
    else
      redis.call('HDEL', bound, head)
    end
  end
  if redis.call('ZCARD', holders) == 0 then notify_idle() end
  forget_shape_if_idle()
  return admitted
end
