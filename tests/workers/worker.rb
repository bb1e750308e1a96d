# frozen_string_literal: true

# A process that uses one lockyard Lock the way an application would, and
# reports what it saw as JSON lines on stdout (times from CLOCK_MONOTONIC in
# ns, comparable between processes on one machine). Same arguments and
# modes as worker.py:
#
#   ruby worker.rb URL NAME --mode count --threads 3 --iterations 20 \
#     --hold 0.001 --counter /tmp/counter
#
# URL is a Redis URL, or gs://BUCKET for a GCS lock on the object NAME.

require "json"
require "optparse"
require "lockyard"

module Worker
  LANG = "rb"
  REPORT_MUTEX = Mutex.new

  module_function

  def now_ns
    Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  end

  def report(event, **fields)
    record = { event: event, lang: LANG, pid: Process.pid, thread: Thread.current.object_id, **fields }
    REPORT_MUTEX.synchronize { $stdout.puts(JSON.generate(record)) }
  end

  # Each thread, `iterations` times: read the counter file, sleep, write it
  # back plus one, all under the lock.
  def count(lock, options)
    threads = Array.new(options[:threads]) do
      Thread.new do
        options[:iterations].times do
          asked = now_ns
          acquired = fence = releasing = nil
          lock.synchronize do
            acquired = now_ns
            fence = lock.fencing_token
            value = Integer(File.read(options[:counter]))
            sleep(options[:hold])
            File.write(options[:counter], (value + 1).to_s)
            releasing = now_ns
          end
          report("hold", asked: asked, acquired: acquired, releasing: releasing, released: now_ns, fence: fence)
        end
      end
    end
    threads.each(&:join)
  end

  # Take the lock once, hold it (a negative hold: until stdin closes), then
  # say whether it is still ours.
  def hold(lock, options)
    asked = now_ns
    begin
      lock.lock(timeout: options[:timeout])
    rescue Lockyard::TimeoutError
      return report("timeout", asked: asked, gave_up: now_ns)
    end
    report("acquired", asked: asked, acquired: now_ns, fence: lock.fencing_token)
    options[:hold].negative? ? $stdin.read : sleep(options[:hold])
    healthy = lock.healthy?
    check = begin
      lock.check_health!
      "ok"
    rescue Lockyard::LockUnhealthyError => e
      e.class.name.split("::").last
    end
    report("checked", at: now_ns, healthy: healthy, check: check, fence: lock.fencing_token)
    lock.unlock
    report("released", released: now_ns)
  end

  # try_lock every `interval` seconds for `hold` seconds, or until
  # `iterations` successes.
  def probe(lock, options)
    stop_at = Process.clock_gettime(Process::CLOCK_MONOTONIC) + options[:hold]
    attempts = successes = 0
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop_at && successes < options[:iterations]
      attempts += 1
      if lock.try_lock
        successes += 1
        report("acquired", acquired: now_ns, fence: lock.fencing_token, attempts: attempts)
        lock.unlock
      end
      sleep(options[:interval])
    end
    report("probed", attempts: attempts)
  end

  # Queue for the lock, hold it briefly, release.
  def wait(lock, options)
    asked = now_ns
    report("asking", asked: asked)
    begin
      lock.lock(timeout: options[:timeout])
    rescue Lockyard::TimeoutError
      return report("timeout", asked: asked, gave_up: now_ns)
    end
    acquired = now_ns
    fence = lock.fencing_token
    report("acquired", asked: asked, acquired: acquired, fence: fence)
    sleep(options[:hold])
    releasing = now_ns
    lock.unlock
    report("hold", asked: asked, acquired: acquired, releasing: releasing, released: now_ns, fence: fence)
  end

  MODES = %w[count hold probe wait].freeze

  def parse(argv)
    options = { mode: "count", ttl: 30.0, hold: 0.001, iterations: 10, threads: 1, timeout: nil, interval: 0.01 }
    OptionParser.new do |parser|
      parser.banner = "usage: worker.rb URL NAME [options]"
      parser.on("--mode MODE", MODES)
      parser.on("--ttl SECONDS", Float)
      parser.on("--hold SECONDS", Float)
      parser.on("--iterations N", Integer)
      parser.on("--threads N", Integer)
      parser.on("--counter PATH")
      parser.on("--timeout SECONDS", Float)
      parser.on("--interval SECONDS", Float)
    end.parse!(argv, into: options)
    abort("usage: worker.rb URL NAME [options]") unless argv.size == 2
    options.merge(url: argv[0], name: argv[1])
  end

  def main(argv)
    $stdout.sync = true
    options = parse(argv)
    lock = if options[:url].start_with?("gs://")
             Lockyard::GCS::Lock.new(bucket_name: options[:url].delete_prefix("gs://"), path: options[:name],
                                     ttl: options[:ttl], backoff_min: 0.01, backoff_max: 0.05)
           elsif options[:url].start_with?("etcd://")
             Lockyard::Etcd::Lock.new(url: options[:url], name: options[:name], ttl: options[:ttl])
           else
             Lockyard::Redis::Lock.new(url: options[:url], name: options[:name], ttl: options[:ttl])
           end
    report("ready", at: now_ns)
    public_send(options[:mode], lock, options)
  end
end

Worker.main(ARGV) if $PROGRAM_NAME == __FILE__
