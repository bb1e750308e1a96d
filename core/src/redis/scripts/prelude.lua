-- Shared head of every semaphore script (concatenated in front of each one).
-- KEYS[1] holders: zset token -> lease deadline (server ms); or, in the short
--                  form, a string "<kind> <limit> <fence> <deadline ms> <token>"
--                  while `token` alone holds the name, taken when it had no
--                  record at all and outside a session (acquire.lua's fast
--                  path): one key, expiring with the lease, stands for the
--                  holders, grants and shape records. Any script that needs
--                  more spreads it into those first (settle). A string where a
--                  zset was makes the scripts of versions before the short
--                  form fail with WRONGTYPE rather than take a held name for
--                  a free one.
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
--                  anyone holds or waits (absent in the short form, which
--                  carries it): clients must agree on what the name is
-- KEYS[12] owners: hash token -> id of the refresher that adopted the slot in
--                  another process; absent while the process that took it keeps it
-- ARGV[1] wake-key prefix (wake key of a waiter = prefix .. token; same hash tag)
-- ARGV[2] limit (slots)
-- ARGV[3] fence base: added to server time (us) where fencing tokens are
--         seeded; 0 on a plain server, the failover epoch << 32 behind
--         Sentinel (see next_fence)
-- All deadlines come from this server's clock, never from a client's.
-- A script is this prelude, the body's fast path if it has one, then
-- rules.lua and the rest of the body, which starts with settle(): the
-- prelude sends no command and defines only what a fast path uses, so a
-- fast path pays for its own commands and for nothing else.
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

-- The short form's record, when `holders` holds one (see KEYS[1]).
-- Called only where the shape record is absent, as it always is beside a
-- short form: a holders set found there (kept past its shape record for a
-- lock_delay) answers WRONGTYPE, which pcall turns into a table.
local function short_form()
  local record = redis.pcall('GET', holders)
  if type(record) == 'string' then return record end
end

-- A short form's kind and limit ("<kind> <limit>"), fence, deadline and
-- token.
local function sole_holder(record)
  local kind_limit, fence, deadline, token = string.match(record, '^(%d+ %d+) (%d+) (%d+) (.*)$')
  if not kind_limit then error('lockyard: unexpected record in ' .. holders .. ': ' .. record) end
  return kind_limit, fence, tonumber(deadline), token
end

-- The kind and limit ("<kind> <limit>") and the fence of the short form
-- when `token` alone holds the name in it, its lease not run out; nil
-- otherwise. The key may outlive its deadline by a millisecond: a grant
-- found past it is left to the full path, which purges it. `shape` is the
-- shape record as read (false if absent): a short form is only ever where
-- it is absent.
local function held_alone(shape, token)
  local short = not shape and short_form()
  if not short then return nil end
  local kind_limit, fence, deadline, sole = sole_holder(short)
  if sole ~= token then return nil end
  read_clock()
  if deadline <= now_ms then return nil end
  return kind_limit, fence
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

-- Reads the clock and the name's shape record (`shape`, when the caller
-- already read it: false if absent), spreading a short form into the
-- records every other rule works on.
-- While anyone holds or waits, the name's limit is the one it was taken
-- with, whatever this client was built with: only acquire may compare the
-- two (and refuses a mismatch); every other script follows the record, so
-- that no call from a client with a larger limit admits a waiter too many.
local function settle(shape)
  if shape == nil then shape = redis.call('GET', shape_key) end
  read_clock()
  recorded_shape = shape or nil
  if not recorded_shape then
    local short = short_form()
    if not short then return end
    local kind_limit, fence, deadline, token = sole_holder(short)
    recorded_shape = kind_limit
    redis.call('DEL', holders)
    redis.call('ZADD', holders, int(deadline), token)
    redis.call('HSET', grants, token, fence)
    redis.call('PEXPIREAT', holders, int(deadline + 1))
    redis.call('PEXPIREAT', grants, int(deadline + 1))
    redis.call('SET', shape_key, kind_limit, 'PX', int(math.max(deadline - now_ms, 1)))
  end
  limit = tonumber(string.match(recorded_shape, ' (%d+)$')) or limit
end
