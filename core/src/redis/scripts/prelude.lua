-- Shared head of every semaphore script (concatenated in front of each one).
-- KEYS[1] holders: zset token -> lease deadline (server ms)
-- KEYS[2] grants:  hash token -> fencing token of its grant
-- KEYS[3] queue:   zset waiter token -> arrival time (server us), FIFO order
-- KEYS[4] leases:  hash waiter token -> "<waiter lease deadline ms> <ttl ms> <handoff ms>"
-- KEYS[5] fence:   string, the last fencing token issued for this name
-- KEYS[6] watchers: hash watcher token -> lease deadline ms (wait() callers)
-- ARGV[1] wake-key prefix (wake key of a waiter = prefix .. token; same hash tag)
-- ARGV[2] limit (slots)
-- All deadlines come from this server's clock, never from a client's.
redis.replicate_commands()
local holders, grants, queue, leases, fence_key, watchers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local wake_prefix, limit = ARGV[1], tonumber(ARGV[2])
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local function int(x) return string.format('%.0f', x) end

-- Keys carry an expiry so that a name whose holders and waiters all crashed
-- leaves nothing behind in Redis.
local function expire_with_last(key, zset)
  local last = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')[2]
  if last then redis.call('PEXPIREAT', key, int(tonumber(last) + 1)) end
end

-- Holders whose lease ran out (crashed, paused, partitioned) lose their slot.
local function purge_expired()
  local expired = redis.call('ZRANGEBYSCORE', holders, '-inf', now_ms)
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
    redis.call('HDEL', grants, unpack(expired))
  end
end

-- Seeded from server time, so tokens keep increasing even after the counter
-- key expired or Redis restarted without persistence.
local function next_fence(lifetime_ms)
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now_us)
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
  return fence, deadline
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
  while redis.call('ZCARD', holders) < limit do
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
        local wake = wake_prefix .. head
        redis.call('RPUSH', wake, int(fence) .. ' ' .. int(deadline))
        redis.call('PEXPIRE', wake, int(math.min(ttl_ms, handoff_ms)))
      end
    end
  end
  if redis.call('ZCARD', holders) == 0 then notify_idle() end
  return admitted
end
