# frozen_string_literal: true

# Uncontended acquire + release cycles on etcd from Ruby, for bench/etcd.py:
# prints the mean microseconds per cycle of a Lockyard::Etcd::Lock
# (`lockyard`), or of its floor (`floor`: the same two requests lockyard
# sends — the put-if-absent Txn on a lease, the compare-and-delete Txn — by
# Ruby's own Net::HTTP over one kept-alive connection to etcd's JSON gateway).
#
#   ruby bench/etcd_cycle.rb lockyard|floor ETCD_URL KEY CYCLES

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

what, url, key, cycles = ARGV
abort("usage: etcd_cycle.rb lockyard|floor ETCD_URL KEY CYCLES") unless cycles
cycle = what == "floor" ? floor_cycle(url, key) : lockyard_cycle(url, key)
cycles = Integer(cycles)
[cycles, 50].min.times { cycle.call } # connect, grant the lease
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
cycles.times { cycle.call }
elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
puts format("%.1f", elapsed * 1e6 / cycles)
