# frozen_string_literal: true

# A job server (the source's scenario): walks the shared task list with
# Lockyard::Redis.each_exclusive under its own session, runs only the tasks
# it won, and skips what another server holds or has finished. Same
# arguments and JSON-line reports as job_server.py:
#
#   ruby job_server.rb URL SERVER --tasks 12 --work 0.5 --ttl 1 --lock-delay 1 --done DIR

require "json"
require "optparse"
require "lockyard"

module JobServer
  module_function

  def report(event, **fields)
    record = { event: event, lang: "rb", pid: Process.pid, at: Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) }
    $stdout.puts(JSON.generate(record.merge(fields)))
  end

  def main(argv)
    $stdout.sync = true
    options = { tasks: 12, work: 0.5, ttl: 1.0, "lock-delay": 1.0 }
    OptionParser.new do |parser|
      parser.on("--tasks N", Integer)
      parser.on("--work SECONDS", Float)
      parser.on("--ttl SECONDS", Float)
      parser.on("--lock-delay SECONDS", Float)
      parser.on("--done DIR")
    end.parse!(argv, into: options)
    abort("usage: job_server.rb URL SERVER [options]") unless argv.size == 2 && options[:done]
    url, server = argv
    tasks = (1..options[:tasks]).map { |i| format("task-%02d", i) }
    finished = ->(task) { File.exist?(File.join(options[:done], task)) }
    Lockyard::Redis::Session.open(url: url, ttl: options[:ttl], lock_delay: options[:"lock-delay"]) do |session|
      report("ready", server: server, session: session.id)
      until tasks.all?(&finished)
        Lockyard::Redis.each_exclusive(url: url, names: tasks, session: session) do |task|
          next if finished.call(task)

          report("start", server: server, task: task)
          sleep(options[:work])
          session.check_health! # never finish a task we may have lost
          File.write(File.join(options[:done], task), server)
          report("done", server: server, task: task)
        end
        sleep(0.05)
      end
    end
  end
end

JobServer.main(ARGV) if $PROGRAM_NAME == __FILE__
