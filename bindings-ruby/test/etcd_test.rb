# frozen_string_literal: true

require_relative "test_helper"
require_relative "etcd_server"
require "open3"

class EtcdLockTest < Minitest::Test
  def setup
    @etcd = EtcdServer.instance
    @name = "ruby-#{name}-#{SecureRandom.hex(4)}"
  end

  def new_lock(**options)
    Lockyard::Etcd::Lock.new(url: @etcd.url, name: @name, ttl: 5, **options)
  end

  def test_synchronize_holds_once_with_growing_fencing_tokens
    first, second = new_lock, new_lock
    token = nil
    first.synchronize do
      token = first.fencing_token
      assert first.healthy?
      assert_nil first.check_health!
      assert first.owned? && first.locked?
      assert_equal first.identity, Lockyard::Etcd.holder(@etcd.url, @name)
      refute second.try_lock
      assert_raises(Lockyard::TimeoutError) { second.lock(timeout: 0.2) }
      assert_raises(Lockyard::AlreadyLockedError) { first.lock }
    end
    refute first.locked?
    assert second.try_lock
    assert_operator second.fencing_token, :>, token
    assert second.unlock
    assert_raises(Lockyard::NotLockedError) { second.unlock }
    assert_empty(@etcd.keys.select { |key| key.include?(@name) })
  end

  def test_threads_sharing_a_lock_never_overlap
    lock = new_lock
    inside = 0
    overlaps = 0
    threads = Array.new(4) do
      Thread.new do
        5.times do
          lock.synchronize do
            inside += 1
            overlaps += 1 if inside > 1
            sleep 0.005
            inside -= 1
          end
        end
      end
    end
    threads.each { |thread| thread.join(60) }
    assert_equal 0, overlaps
  end

  def test_thread_raise_interrupts_a_wait_and_leaves_nothing_queued
    holder = new_lock
    holder.lock
    waiter = new_lock
    thread = Thread.new { waiter.lock }
    thread.report_on_exception = false
    sleep 0.5
    thread.raise(Interrupt)
    assert_raises(Interrupt) { thread.join(5) }
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
    sleep 0.05 while @etcd.keys.count { |key| key.include?(@name) } > 1 &&
                     Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    assert_equal 1, @etcd.keys.count { |key| key.include?(@name) }
    holder.unlock
  end

  WAIT_FOREVER = <<~RUBY
    require "lockyard"
    lock = Lockyard::Etcd::Lock.new(url: ARGV[0], name: ARGV[1])
    puts "waiting"
    $stdout.flush
    lock.synchronize { puts "acquired" }
  RUBY

  # An uncaught Interrupt ends Ruby by SIGINT, which skips C's atexit: the
  # delete of the waiter's key, handed to the background, must still land.
  def test_ctrl_c_ends_a_wait_in_another_process_and_leaves_nothing_queued
    holder = new_lock
    holder.lock
    lib = File.expand_path("../lib", __dir__)
    include = $LOAD_PATH.include?(lib) ? ["-I", lib] : []
    Open3.popen3(RbConfig.ruby, *include, "-e", WAIT_FOREVER, @etcd.url, @name) do |_, stdout, stderr, child|
      assert_equal "waiting\n", stdout.gets
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
      sleep 0.05 until @etcd.keys.count { |key| key.include?(@name) } == 2 ||
                       Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      Process.kill(:INT, child.pid)
      refute child.value.success?
      assert_includes stderr.read, "Interrupt"
    end
    assert_equal 1, @etcd.keys.count { |key| key.include?(@name) }, @etcd.keys
    holder.unlock
  end

  def test_bad_options_raise_config_error
    [
      { url: "etcd://", name: "x" },
      { url: "redis://127.0.0.1:2379", name: "x" },
      { url: @etcd.url, name: "" },
      { url: @etcd.url, name: "x", ttl: 0 },
      { url: @etcd.url, name: "x", ttl: 1e19 }
    ].each do |options|
      assert_raises(Lockyard::ConfigError, options.inspect) { Lockyard::Etcd::Lock.new(**options) }
    end
    assert_raises(ArgumentError) { Lockyard::Etcd::Lock.new(url: @etcd.url, name: "x", limit: 2) }
  end
end

class EtcdSessionTest < Minitest::Test
  def setup
    @etcd = EtcdServer.instance
    @name = "ruby-#{name}-#{SecureRandom.hex(4)}"
  end

  def test_a_lock_under_a_session_stores_its_value_and_open_destroys_it
    other = Lockyard::Etcd::Lock.new(url: @etcd.url, name: @name, ttl: 5)
    lock = nil
    Lockyard::Etcd::Session.open(url: @etcd.url, ttl: 5, lock_delay: 30) do |session|
      assert session.healthy?
      assert_equal [5.0, 30.0, "release"], [session.ttl, session.lock_delay, session.behavior]
      lock = Lockyard::Etcd::Lock.new(url: @etcd.url, name: @name, session: session, value: "worker-3")
      lock.lock(timeout: 5)
      lock.check_health!
      assert_equal "worker-3", Lockyard::Etcd.holder(@etcd.url, @name)
      refute other.try_lock
    end
    refute lock.healthy?
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    other.lock(timeout: 5)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 1.0, "no lock_delay after destroy"
    other.unlock
    lock.unlock # lost with its session: warns
    assert_raises(Lockyard::ConfigError) { lock.try_lock }
    assert_empty(@etcd.keys.select { |key| key.include?(@name) })
  end

  def test_bad_options_raise_config_error
    assert_raises(Lockyard::ConfigError) { Lockyard::Etcd::Session.new(url: @etcd.url, ttl: 0.5) }
    assert_raises(Lockyard::ConfigError) { Lockyard::Etcd::Session.new(url: @etcd.url, behavior: "keep") }
    assert_raises(ArgumentError) { Lockyard::Etcd::Session.new(url: @etcd.url, ttl: 5, lease: 3) }
    assert_raises(Lockyard::ConfigError) do
      Lockyard::Etcd::Lock.new(url: @etcd.url, name: @name, session: Object.new)
    end
  end
end

class EtcdWaitGroupTest < Minitest::Test
  def setup
    @etcd = EtcdServer.instance
    @name = "ruby-#{name}-#{SecureRandom.hex(4)}"
  end

  def new_group(limit: 2)
    Lockyard::Etcd::WaitGroup.new(url: @etcd.url, name: @name, limit: limit, ttl: 5)
  end

  def keys
    @etcd.keys.select { |key| key.include?(@name) }
  end

  def test_slots_are_limited_fenced_and_freed_by_token
    wg, other = new_group, new_group
    token = wg.add
    wg.synchronize(timeout: 5) do |slot|
      assert_kind_of Lockyard::Etcd::WaitGroup::Slot, slot
      assert slot.healthy?
      assert_operator slot.fencing_token, :>, wg.fencing_token(token)
      assert_equal 2, other.count
      assert_raises(Lockyard::TimeoutError) { other.add(timeout: 0) }
      refute other.wait(timeout: 0.2)
    end
    assert other.done(token)
    refute other.done(token)
    assert wg.wait(timeout: 1)
    assert_empty keys
    assert_equal %(#<Lockyard::Etcd::WaitGroup name="#{@name}" limit=2>), wg.inspect
  end

  def test_synchronize_frees_its_slot_when_the_block_raises_and_thread_raise_ends_a_wait
    wg = new_group(limit: 1)
    assert_raises(RuntimeError) { wg.synchronize { raise "boom" } }
    assert_equal 0, wg.count
    held = wg.add
    thread = Thread.new { wg.add }
    thread.report_on_exception = false
    sleep 0.5
    thread.raise(Interrupt)
    assert_raises(Interrupt) { thread.join(5) }
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
    sleep 0.05 while keys.size > 1 && Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
    assert_equal 1, keys.size, "the interrupted wait left its key"
    assert wg.done(held)
  end

  def test_bad_options_raise_config_error
    [
      { url: "etcd://", name: "x", limit: 1 },
      { url: @etcd.url, name: "", limit: 1 },
      { url: @etcd.url, name: "x", limit: 0 },
      { url: @etcd.url, name: "x", limit: 1, ttl: 0 }
    ].each do |options|
      assert_raises(Lockyard::ConfigError, options.inspect) { Lockyard::Etcd::WaitGroup.new(**options) }
    end
    assert_raises(ArgumentError) do
      Lockyard::Etcd::WaitGroup.new(url: @etcd.url, name: "x", limit: 1, refresh_interval: 1)
    end
  end
end
