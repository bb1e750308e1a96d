# frozen_string_literal: true

# Uncontended acquire + release cycles from Ruby, for bench/run: prints the
# mean microseconds per cycle of a lockyard Lock (`lockyard`), or of the
# floor it is measured against (`floor`: SET NX PX, then a compare-and-delete
# script by EVALSHA, with redis-rb).
#
#   ruby bench/cycle.rb lockyard|floor REDIS_URL KEY CYCLES

COMPARE_AND_DELETE = <<~LUA
  if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
LUA

def floor_cycle(url, key)
  require "redis"
  redis = Redis.new(url: url)
  sha = redis.script(:load, COMPARE_AND_DELETE)
  lambda do
    redis.set(key, "token", nx: true, px: 30_000) or raise "the key was taken"
    redis.evalsha(sha, keys: [key], argv: ["token"]) == 1 or raise "the key was lost"
  end
end

def lockyard_cycle(url, key)
  require "lockyard"
  lock = Lockyard::Redis::Lock.new(url: url, name: key, ttl: 30)
  lambda do
    lock.lock
    lock.unlock
  end
end

what, url, key, cycles = ARGV
abort("usage: cycle.rb lockyard|floor REDIS_URL KEY CYCLES") unless cycles
cycle = what == "floor" ? floor_cycle(url, key) : lockyard_cycle(url, key)
cycles = Integer(cycles)
[cycles, 100].min.times { cycle.call } # connect, load scripts
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
cycles.times { cycle.call }
elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
puts format("%.1f", elapsed * 1e6 / cycles)
