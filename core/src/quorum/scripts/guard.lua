-- Shared prelude of lock, rlock, refresh, unlock and runlock (prepended to
-- each): the restart guard and the node-list fingerprint.
--
-- A node restarted without persistence (or flushed) has forgotten every
-- grant it gave, so a lease it granted may still be live elsewhere: Redlock's
-- "delayed restart". The node finds out by itself: `lockyard:rw:alive` is a
-- hash with no expiry written at first contact, so it is missing exactly
-- when the node lost its data. Created, it records when (`since`, server
-- ms) and the longest lease asked of the node since then (`window`); until
-- `window` has passed since `since`, the node grants nothing. A refresh
-- raises `window` too, so a holder with a longer lease than the writer now
-- asking keeps its forgotten lease out of reach once it has refreshed.
-- (A node may be new rather than restarted: the client tells them apart,
-- see `adopt.lua`.) An eviction policy that drops the key errs on the safe
-- side: the node only waits once more.
local function recovering(alive, now_ms, ttl_ms)
  local state = redis.call('HMGET', alive, 'since', 'window')
  if not state[1] then
    redis.call('HSET', alive, 'since', now_ms, 'window', ttl_ms)
    return true
  end
  local window = tonumber(state[2]) or 0
  if ttl_ms > window then
    window = ttl_ms
    redis.call('HSET', alive, 'window', window)
  end
  return now_ms - tonumber(state[1]) < window
end

-- The node list of the client that holds (or last held) a name: clients
-- with different lists do not exclude each other, so a mismatch is refused.
-- Returns the recorded fingerprint when it differs from `fingerprint`.
local function other_list(nodes, fingerprint)
  local recorded = redis.call('GET', nodes)
  if recorded and recorded ~= fingerprint then return recorded end
  return nil
end

-- Keeps the fingerprint as long as the longest grant on the name.
local function record_list(nodes, fingerprint, ttl_ms)
  if redis.call('PTTL', nodes) < ttl_ms then
    redis.call('SET', nodes, fingerprint, 'PX', ttl_ms)
  end
end


-- Drops the fingerprint with the name's last holder: it only has to keep
-- clients with other lists away from live grants, and a misconfigured
-- client's grant, given back, must not keep it around to refuse the rest.
local function forget_list_if_free(writer, readers, nodes, now_ms)
  if redis.call('EXISTS', writer) == 1 then return end
  if redis.call('ZCOUNT', readers, '(' .. now_ms, '+inf') > 0 then return end
  redis.call('DEL', nodes)
end

local function server_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
