# frozen_string_literal: true

# Uncontended acquire + release cycles on etcd from Ruby, for bench/etcd.py:
# a Lockyard::Etcd::Lock against its floor (the same two requests lockyard
# sends — the put-if-absent Txn on a lease, the compare-and-delete Txn — by
# Ruby's own Net::HTTP over one kept-alive connection to etcd's JSON
# gateway), in alternating batches of CYCLES, so that both meet the same
# moments of the disk's fsync. Prints one line per round: the mean
# microseconds per cycle of the floor, then of lockyard.
#
#   ruby bench/etcd_cycle.rb ETCD_URL KEY CYCLES ROUNDS

require "base64"
require "json"
require "net/http"
require "uri"

def floor_cycle(url, key)
  uri = URI(url.sub("etcd://", "http://"))
  http = Net::HTTP.start(uri.host, uri.port)
  call = lambda do |path, body|
    JSON.parse(http.post("/v3/#{path}", JSON.generate(body)).body)
  end
  lease = Integer(call.call("lease/grant", { TTL: 60 })["ID"])
  encoded = Base64.strict_encode64(key)
  lambda do
    taken = call.call("kv/txn", {
                        compare: [{ key: encoded, target: "CREATE", result: "EQUAL", create_revision: 0 }],
                        success: [{ request_put: { key: encoded, value: Base64.strict_encode64("x"), lease: lease } }]
                      })
    taken["succeeded"] or raise "the key was taken"
    revision = Integer(taken["header"]["revision"])
    released = call.call("kv/txn", {
                           compare: [{ key: encoded, target: "CREATE", result: "EQUAL", create_revision: revision }],
                           success: [{ request_delete_range: { key: encoded } }]
                         })
    released["succeeded"] or raise "the key was lost"
  end
end

def lockyard_cycle(url, key)
  require "lockyard"
  lock = Lockyard::Etcd::Lock.new(url: url, name: key, ttl: 30)
  lambda do
    lock.lock
    lock.unlock
  end
end

def per_cycle_us(cycle, cycles)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  cycles.times { cycle.call }
  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started) * 1e6 / cycles
end

url, key, cycles, rounds = ARGV
abort("usage: etcd_cycle.rb ETCD_URL KEY CYCLES ROUNDS") unless rounds
floor = floor_cycle(url, "#{key}-floor")
ours = lockyard_cycle(url, key)
cycles = Integer(cycles)
[floor, ours].each { |cycle| 50.times { cycle.call } } # connect, grant the lease
Integer(rounds).times do
  puts format("%.1f %.1f", per_cycle_us(floor, cycles), per_cycle_us(ours, cycles))
end
