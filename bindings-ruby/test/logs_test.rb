# frozen_string_literal: true

require_relative "test_helper"
require "logger"
require "open3"
require "stringio"
require_relative "gcs_test"

# Lockyard.logger: every primitive's records, from the core's background
# threads, reach a Ruby Logger without any further lockyard call.
class LogsTest < Minitest::Test
  include LockyardTest

  def setup
    @out = StringIO.new
    @logger = Logger.new(@out)
  end

  def teardown
    Lockyard.logger = nil
  end

  # Holds a lock refreshed every 0.1 s, then deletes its key behind its
  # back: the next refresh finds it lost and the core warns on its own
  # thread, while this thread only sleeps.
  def lose_a_lock(db:)
    lock = Lockyard::Redis::Lock.new(url: redis.url(db), name: "lost-#{SecureRandom.hex(4)}",
                                     ttl: 3, refresh_interval: 0.1)
    lock.lock
    redis.call("FLUSHDB", db: db)
    lock
  end

  def wait_for(seconds)
    deadline = monotonic + seconds
    sleep 0.05 until yield || monotonic > deadline
  end

  # A Logger on @out whose writes wait until the returned proc is called
  # (one forwarding thread writes, so at most one write waits).
  def gated_logger
    gate = Queue.new
    open = false
    logger = Logger.new(@out)
    logger.define_singleton_method(:add) do |*args|
      gate.pop unless open
      super(*args)
    end
    [logger, lambda {
      open = true
      gate << :go
    }]
  end

  def test_a_lost_redis_lock_is_a_warning_that_arrives_on_its_own
    Lockyard.logger = @logger
    Lockyard.logger = @logger # assigned twice: still one forwarding thread
    assert_same @logger, Lockyard.logger
    lose_a_lock(db: 6)
    wait_for(5) { @out.string.include?("lost") }
    assert_match(/WARN -- lockyard: lock .*lost-\h+.* lost: /, @out.string)
    assert_equal 1, Thread.list.count { |thread| thread.name == "lockyard-logs" }
  end

  def test_the_loggers_level_filters_and_a_changed_level_is_followed
    @logger.level = Logger::ERROR
    Lockyard.logger = @logger
    lock = lose_a_lock(db: 7)
    wait_for(3) { !lock.healthy? }
    sleep 0.3
    assert_empty @out.string
    @logger.level = Logger::WARN
    sleep Lockyard::Logs::LEVEL_CHECK + 0.2
    lose_a_lock(db: 7)
    wait_for(5) { @out.string.include?("lost") }
    assert_match(/WARN -- lockyard: .* lost: /, @out.string)
  end

  def test_nil_turns_logging_off
    Lockyard.logger = nil
    assert_nil Lockyard.logger
    lock = lose_a_lock(db: 8)
    wait_for(3) { !lock.healthy? }
    Lockyard.logger = @logger
    sleep 0.3
    assert_empty @out.string
  end

  def test_a_forked_child_forwards_its_own_records
    redis # started here: one the child started would outlive it (exit! skips after_run)
    Dir.mktmpdir do |dir|
      path = File.join(dir, "child.log")
      Lockyard.logger = Logger.new(path)
      pid = fork do # the child inherits the Logger, not the forwarding thread
        lose_a_lock(db: 9)
        wait_for(5) { File.read(path).include?(" lost: ") }
        exit!(Thread.list.count { |thread| thread.name == "lockyard-logs" } == 1 ? 0 : 2)
      end
      Process.wait(pid)
      assert_equal 0, $?.exitstatus
      assert_match(/##{pid}\] +WARN -- lockyard: .* lost: /, File.read(path))
    end
  end

  # fork() while the core's threads push records: a child made while one
  # of them held the queue's lock found it locked forever, and hung in
  # the fork hook's first take, before fork returned (about 1 in 80).
  def test_forking_while_records_flow_never_hangs_the_child
    gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found")
    quiet = Logger.new(File::NULL)
    locks = Array.new(16) do
      Lockyard::GCS::Lock.new(bucket_name: "locks", path: "logs/fork-#{SecureRandom.hex(4)}", ttl: 1,
                              refresh_interval: 0.01, thread_safe: false, logger: quiet,
                              cloud_storage_options: { emulator_host: gcs.host })
    end
    locks.each(&:lock)
    hung = 400.times.count do
      pid = fork { exit!(0) }
      deadline = monotonic + 3
      sleep 0.001 until (reaped = Process.waitpid(pid, Process::WNOHANG)) || monotonic > deadline
      next false if reaped

      Process.kill(:KILL, pid)
      Process.wait(pid)
      true
    end
    assert_equal 0, hung, "children that hung in fork"
  ensure
    locks&.each(&:abandon)
  end

  LAST_RECORDS = <<~'RUBY'
    require "lockyard"
    $stdout.sync = true
    logger = Logger.new($stdout)
    if ARGV[1] == "stuck"
      def logger.add(*) = sleep
    end
    lock = Lockyard::GCS::Lock.new(bucket_name: "locks", path: "logs/exit-#{rand(2**32)}", ttl: 30,
                                   logger: logger, cloud_storage_options: { emulator_host: ARGV[0] })
    lock.lock
    lock.unlock
  RUBY

  # A program's last records reach its Logger before it exits (they were
  # lost when the exit killed the forwarder first), and a stuck Logger
  # holds the exit up for Logs::EXIT_FLUSH at most.
  def test_the_last_records_are_forwarded_at_exit_and_a_stuck_logger_does_not_hang_it
    gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found")
    5.times do
      out, err, status = Open3.capture3(RbConfig.ruby, *ruby_include, "-e", LAST_RECORDS, gcs.host)
      assert status.success?, err
      assert_match(/DEBUG -- lockyard: Unlocked$/, out)
    end
    started = monotonic
    _, err, status = Open3.capture3(RbConfig.ruby, *ruby_include, "-e", LAST_RECORDS, gcs.host, "stuck")
    assert status.success?, err
    assert_operator monotonic - started, :<, Lockyard::Logs::EXIT_FLUSH + 5
  end

  # Without Lockyard.logger (the compat default: a Logger per lock), the
  # count of dropped records still reaches someone: $stderr.
  def test_drops_are_counted_on_stderr_without_lockyard_logger
    gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found")
    stuck, open_gate = gated_logger
    lock = Lockyard::GCS::Lock.new(bucket_name: "locks", path: "logs/#{SecureRandom.hex(4)}", ttl: 30,
                                   logger: stuck, cloud_storage_options: { emulator_host: gcs.host })
    _, err = capture_io do
      400.times { lock.synchronize { nil } }
      open_gate.call
      wait_for(5) { @out.string.include?("Unlocked") }
      sleep 0.3
    end
    assert_match(/lockyard: \d+ log records dropped: the logger did not keep up/, err)
  end

  # An exception of any class from a Logger, or raised into the
  # forwarding thread, loses at most a record: later ones still arrive.
  def test_a_logger_raising_any_exception_does_not_stop_forwarding
    gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found")
    calls = 0
    failing = Logger.new(@out)
    failing.define_singleton_method(:add) do |*args|
      calls += 1
      raise NotImplementedError, "not here" if calls == 1

      super(*args)
    end
    lock = Lockyard::GCS::Lock.new(bucket_name: "locks", path: "logs/#{SecureRandom.hex(4)}", ttl: 30,
                                   logger: failing, cloud_storage_options: { emulator_host: gcs.host })
    _, err = capture_io do
      lock.synchronize { nil }
      wait_for(3) { calls > 1 }
      Thread.list.find { |thread| thread.name == "lockyard-logs" }&.raise(Interrupt, "stray")
      sleep 0.2
      @out.truncate(0)
      lock.synchronize { nil }
      wait_for(3) { @out.string.include?("Unlocked") }
    end
    assert_match(/DEBUG -- lockyard: Unlocked$/, @out.string)
    assert_match(/the logger raised NotImplementedError: not here/, err)
    assert_equal 1, Thread.list.count { |thread| thread.name == "lockyard-logs" }
  end

  # A Logger that blocks holds up no lock call: records past the queue's
  # 1024 are dropped, and then counted in a warning.
  def test_a_stuck_logger_never_delays_a_lock_call_and_drops_are_counted
    gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found")
    stuck, open_gate = gated_logger
    Lockyard.logger = stuck
    lock = Lockyard::GCS::Lock.new(bucket_name: "locks", path: "logs/#{SecureRandom.hex(4)}", ttl: 30,
                                   cloud_storage_options: { emulator_host: gcs.host })
    started = monotonic
    400.times { lock.synchronize { nil } } # 4 records each
    assert_operator monotonic - started, :<, 20
    open_gate.call
    wait_for(5) { @out.string.include?("dropped") }
    assert_match(/WARN -- lockyard: \d+ log records dropped: the logger did not keep up/, @out.string)
  end
end
