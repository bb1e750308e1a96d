-- Shared head of every semaphore script (concatenated in front of each one).
-- KEYS[1] is the name's key prefix, `lockyard:{<name>}:`, and KEYS[2] its
-- holders key. The name's keys are the prefix followed by the suffixes
-- below, so all of them share its hash tag and live in one Redis Cluster
-- slot. The scripts name them in Lua rather than take all of them, because
-- redis-server spends about as long taking a script's keys as running a
-- few commands: a fast path names just the keys it touches, and the rest
-- are named where the rules begin. Two keys are declared, one of which
-- (the prefix) never exists, so that while the slot is half-moved between
-- Cluster nodes every script is refused with TRYAGAIN, whichever side the
-- keys are on: with one key a script could be sent by ASK to the target
-- and run there without the keys still on the source.
-- holders:  zset token -> lease deadline (server ms); or, in the short
--           form, a string "<kind> <limit> <fence> <deadline ms> <token>"
--           while `token` alone holds the name, taken when it had no
--           record at all and outside a session (acquire.lua's fast
--           path): one key, expiring with the lease, stands for the
--           holders, grants and shape records. Any script that needs
--           more spreads it into those first (settle). A string where a
--           zset was makes the scripts of versions before the short
--           form fail with WRONGTYPE rather than take a held name for
--           a free one.
-- grants:   hash token -> fencing token of its grant
-- queue:    zset waiter token -> arrival time (server us), FIFO order
-- leases:   hash waiter token -> "<waiter lease deadline ms> <ttl ms> <handoff ms>"
-- fence:    string, the last fencing token issued for this name
-- watchers: hash watcher token -> lease deadline ms (wait() callers)
-- bound:    hash token -> "<lock_delay ms> <delete 0|1> <election 0|1> <value>"
--           for grants and waiters under a session, and
--           "handoff:" .. token -> 1 while a grant handed to it is not taken up
-- delay:    string, present while a lost session's lock_delay bars new grants
-- value:    string, the value a holder under a "release" session left behind
-- terms:    stream of election terms: fence + value at a grant, fence + '' at its end
-- shape:    string "<kind> <limit>" (kind 1 lock, 2 WaitGroup) while
--           anyone holds or waits (absent in the short form, which
--           carries it): clients must agree on what the name is
-- owners:   hash token -> id of the refresher that adopted the slot in
--           another process; absent while the process that took it keeps it
-- wake:     a waiter's wake-up list is this prefix followed by its token
--           (and "wake:<token>:gone" the tombstone of a request given up)
-- ARGV[1] limit (slots)
-- ARGV[2] fence base: added to server time (us) where fencing tokens are
--         seeded; 0 on a plain server, the failover epoch << 32 behind
--         Sentinel (see next_fence)
-- All deadlines come from this server's clock, never from a client's.
-- A script is the two lines below, the body's fast path if it has one,
-- the rest of this prelude, rules.lua and the rest of the body, which
-- starts with settle(). A fast path runs before any of the helpers below
-- exist and spells out what it needs of them: with the helpers built
-- first and called, an uncontended cycle spent about a fifth more time
-- inside redis-server (building them alone, about a tenth).
redis.replicate_commands()
local prefix, holders = KEYS[1], KEYS[2]
-- [fast path]
-- Named where the rules begin (rules.lua); a fast path names what it uses.
local grants, queue, leases, fence_key, watchers, bound, delay_key, value_key, terms, shape_key, owners
local wake_prefix
local limit, fence_base = tonumber(ARGV[1]), tonumber(ARGV[2])
local recorded_shape, now_ms, now_us

-- A whole number as Redis wants it: %d formats it as an integer (exact
-- below 2^63), where tostring would print large ones in exponent form and
-- %.0f goes through floating-point formatting, several times slower.
local function int(x) return string.format('%d', x) end

local function read_clock()
  local clock = redis.call('TIME')
  now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end

-- The short form's record, when `holders` holds one (see `holders` above):
-- a holders set answers WRONGTYPE, which pcall turns into a table. Every
-- script that writes the shape record or any other settles first (which
-- turns the short form into a set), so a short form found is the name's
-- whole state.
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

-- Seeded from server time, so tokens keep increasing even after the counter
-- key expired or Redis restarted without persistence (acquire.lua's fast
-- path spells this out: keep the two alike). Behind Sentinel the
-- fence base adds the failover epoch, so that a promoted replica that missed
-- the last increments still issues larger tokens than the old master did,
-- even if its clock is somewhat behind the old master's.
-- Returns the token, and the token as text.
local function next_fence(lifetime_ms)
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now_us + fence_base)
  local text = int(fence)
  redis.call('SET', fence_key, text, 'PX', int(lifetime_ms + 3600000))
  return fence, text
end

-- Reads the clock and the name's shape record, spreading a short form into
-- the records every other rule works on.
-- While anyone holds or waits, the name's limit is the one it was taken
-- with, whatever this client was built with: only acquire may compare the
-- two (and refuses a mismatch); every other script follows the record, so
-- that no call from a client with a larger limit admits a waiter too many.
local function settle()
  local shape = redis.call('GET', shape_key)
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
