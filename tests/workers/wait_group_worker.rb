# frozen_string_literal: true

# A process that uses one lockyard WaitGroup the way an application would,
# and appends what it saw to a report file as JSON lines (one object per
# line, times from CLOCK_MONOTONIC in ns, comparable between processes on
# one machine). Same arguments, modes and reports as wait_group_worker.py:
#
#   ruby wait_group_worker.rb URL NAME --limit 3 --reports FILE \
#     --mode crowd --iterations 20 --hold 0.005 --counter /tmp/inside

require "json"
require "optparse"
require "lockyard"

module WaitGroupWorker
  module_function

  def now_ns
    Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  end

  def report(event, **fields)
    @reports.puts(JSON.generate({ event: event, pid: Process.pid, at: now_ns, **fields }))
    @reports.flush
  end

  # Adds `change` to the number in `counter` under flock, so the count is
  # independent of Redis; returns the new number.
  def count_inside(counter, change)
    File.open(counter, "r+") do |file|
      file.flock(File::LOCK_EX)
      inside = file.read.to_i + change
      file.rewind
      file.truncate(0)
      file.write(inside.to_s)
      inside
    end
  end

  # Report "ready", wait for a line on stdin, then take a slot `iterations`
  # times, or for `duration` seconds when given; each hold reports how many
  # were inside, itself included.
  def crowd(wg, options)
    report("ready")
    $stdin.gets
    stop_at = options[:duration] && Process.clock_gettime(Process::CLOCK_MONOTONIC) + options[:duration]
    more = lambda do |iterations|
      stop_at ? Process.clock_gettime(Process::CLOCK_MONOTONIC) < stop_at : iterations < options[:iterations]
    end
    iterations = 0
    while more.call(iterations)
      inside = fence = nil
      wg.synchronize(timeout: options[:timeout]) do |slot|
        inside = count_inside(options[:counter], +1)
        sleep(options[:hold])
        count_inside(options[:counter], -1)
        fence = slot.fencing_token
      end
      report("hold", inside: inside, fence: fence)
      iterations += 1
    end
    report("finished", holds: iterations)
  end

  # Take one slot, report its token, hold it (negative: until a line on
  # stdin), report its health, then give it back with done.
  def hold(wg, options)
    report("asking")
    begin
      token = wg.add(timeout: options[:timeout])
    rescue Lockyard::TimeoutError
      return report("timeout")
    end
    report("acquired", token: token, fence: wg.fencing_token(token))
    keep_and_free(wg, token, options)
  end

  # Hold the slot of `token` (negative: until a line on stdin), report its
  # health, then give it back with done.
  def keep_and_free(wg, token, options)
    options[:hold].negative? ? $stdin.gets : sleep(options[:hold])
    healthy = wg.healthy?(token)
    check = begin
      wg.check_health!(token)
      "ok"
    rescue Lockyard::Error => e
      e.class.name.split("::").last
    end
    report("checked", healthy: healthy, check: check)
    report("done", freed: wg.done(token))
  end

  # Take one slot and report its token, then exit without done: the token
  # is for another process to adopt.
  def add(wg, options)
    token = wg.add(timeout: options[:timeout])
    report("added", token: token, fence: wg.fencing_token(token))
  end

  # adopt(--token), report whether it was still there, then hold and free it
  # like `hold`.
  def adopt(wg, options)
    adopted = wg.adopt(options[:token])
    report("adopted", adopted: adopted, fence: wg.fencing_token(options[:token]))
    keep_and_free(wg, options[:token], options) if adopted
  end

  # done(--token), from this process, which never held it.
  def done(wg, options)
    report("done", freed: wg.done(options[:token]))
  end

  # wait up to `timeout` for no slot to be held.
  def wait(wg, options)
    report("asking")
    report("waited", idle: wg.wait(timeout: options[:timeout]))
  end

  MODES = %w[crowd hold add adopt done wait].freeze

  def parse(argv)
    options = { mode: "crowd", ttl: 30.0, hold: 0.005, iterations: 10, duration: nil, timeout: nil }
    parser = OptionParser.new do |op|
      op.banner = "usage: wait_group_worker.rb URL NAME --limit N --reports FILE [options]"
      op.on("--limit N", Integer)
      op.on("--reports FILE", "file to append to")
      op.on("--mode MODE", MODES)
      op.on("--ttl SECONDS", Float)
      op.on("--hold SECONDS", Float)
      op.on("--iterations N", Integer)
      op.on("--duration SECONDS", Float, "crowd: seconds to go on")
      op.on("--counter PATH", "crowd: file counting who is inside")
      op.on("--timeout SECONDS", Float, "longest wait")
      op.on("--token TOKEN", "done, adopt: the token")
    end
    parser.parse!(argv, into: options)
    abort(parser.banner) unless argv.size == 2 && options[:limit] && options[:reports]
    options.merge(url: argv[0], name: argv[1])
  end

  def main(argv)
    options = parse(argv)
    # The URL picks the backend, as the lockyard command's --url does.
    group = options[:url].start_with?("etcd") ? Lockyard::Etcd::WaitGroup : Lockyard::Redis::WaitGroup
    wg = group.new(url: options[:url], name: options[:name], limit: options[:limit], ttl: options[:ttl])
    File.open(options[:reports], "a") do |reports|
      @reports = reports
      public_send(options[:mode], wg, options)
    end
  end
end

WaitGroupWorker.main(ARGV) if $PROGRAM_NAME == __FILE__
