-- Shared head of every semaphore script (concatenated in front of each one).
-- KEYS[1] holders: zset token -> lease deadline (server ms)
-- KEYS[2] grants:  hash token -> fencing token of its grant
-- KEYS[3] queue:   zset waiter token -> arrival time (server us), FIFO order
-- KEYS[4] leases:  hash waiter token -> "<waiter lease deadline ms> <ttl ms> <handoff ms>"
-- KEYS[5] fence:   string, the last fencing token issued for this name
-- KEYS[6] watchers: hash watcher token -> lease deadline ms (wait() callers)
-- KEYS[7] bound:   hash token -> "<lock_delay ms> <delete 0|1> <election 0|1> <value>"
--                  for grants and waiters under a session, and
--                  "handoff:" .. token -> 1 while a grant handed to it is not taken up
-- KEYS[8] delay:   string, present while a lost session's lock_delay bars new grants
-- KEYS[9] value:   string, the value a holder under a "release" session left behind
-- KEYS[10] terms:  stream of election terms: fence + value at a grant, fence + '' at its end
-- KEYS[11] shape: string "<kind> <limit>" (kind 1 lock, 2 WaitGroup) while
--                  anyone holds or waits: clients must agree on what the name is;
--                  or, in its short form, "<kind> <limit> <fence> <deadline ms> <token>"
--                  while `token` alone holds the name, taken when it was idle
--                  and outside a session (the fast path of acquire.lua): one
--                  key that expires with the lease stands for the holders,
--                  grants and shape records. Any script that needs more
--                  first spreads it into those records (settle).
-- KEYS[12] owners: hash token -> id of the refresher that adopted the slot in
--                  another process; absent while the process that took it keeps it
-- ARGV[1] wake-key prefix (wake key of a waiter = prefix .. token; same hash tag)
-- ARGV[2] limit (slots)
-- ARGV[3] fence base: added to server time (us) where fencing tokens are
--         seeded; 0 on a plain server, the failover epoch << 32 behind
--         Sentinel (see next_fence)
-- All deadlines come from this server's clock, never from a client's.
-- Each body starts with settle(), after its own fast path if it has one:
-- the prelude itself sends no command, so a fast path pays only for its own.
redis.replicate_commands()
local holders, grants, queue, leases, fence_key, watchers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local bound, delay_key, value_key, terms, shape_key = KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local owners = KEYS[12]
local wake_prefix, limit, fence_base = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local recorded_shape, now_ms, now_us

local function int(x) return string.format('%.0f', x) end

local function read_clock()
  local clock = redis.call('TIME')
  now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end

-- The short form of a shape record: "<kind> <limit>", and its sole
-- holder's fence, deadline and token; nil for the plain form.
local function sole_holder(shape)
  local kind_limit, fence, deadline, token = string.match(shape, '^(%d+ %d+) (%d+) (%d+) (.*)$')
  if kind_limit then return kind_limit, fence, tonumber(deadline), token end
end

-- Reads the clock and the name's shape record (`shape`, when the caller
-- already read it: false if absent), spreading a short one into the
-- records every other rule works on.
-- While anyone holds or waits, the name's limit is the one it was taken
-- with, whatever this client was built with: only acquire may compare the
-- two (and refuses a mismatch); every other script follows the record, so
-- that no call from a client with a larger limit admits a waiter too many.
local function settle(shape)
  if shape == nil then shape = redis.call('GET', shape_key) end
  read_clock()
  recorded_shape = shape or nil
  if not recorded_shape then return end
  local kind_limit, fence, deadline, token = sole_holder(recorded_shape)
  if kind_limit then
    recorded_shape = kind_limit
    redis.call('SET', shape_key, kind_limit, 'PX', int(math.max(deadline - now_ms, 1)))
    redis.call('ZADD', holders, int(deadline), token)
    redis.call('HSET', grants, token, fence)
    redis.call('PEXPIREAT', holders, int(deadline + 1))
    redis.call('PEXPIREAT', grants, int(deadline + 1))
  end
  limit = tonumber(string.match(recorded_shape, ' (%d+)$')) or limit
end

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

-- Seeded from server time, so tokens keep increasing even after the counter
-- key expired or Redis restarted without persistence. Behind Sentinel the
-- fence base adds the failover epoch, so that a promoted replica that missed
-- the last increments still issues larger tokens than the old master did,
-- even if its clock is somewhat behind the old master's.
local function next_fence(lifetime_ms)
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now_us + fence_base)
  redis.call('SET', fence_key, int(fence), 'PX', int(lifetime_ms + 3600000))
  return fence
end

local function grant(token, lifetime_ms)
  local deadline = now_ms + lifetime_ms
  redis.call('ZADD', holders, int(deadline), token)
  local fence = next_fence(lifetime_ms)
  redis.call('HSET', grants, token, int(fence))
  expire_with_last(holders, holders)
  expire_with_last(grants, holders)
  -- A value left by an earlier holder no longer describes the name.
  redis.call('DEL', value_key)
  local b = binding(token)
  if b then
    keep_bound(b, lifetime_ms)
    if b.election then record_term(int(fence), b.value) end
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
