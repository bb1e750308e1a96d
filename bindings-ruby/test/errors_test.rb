# frozen_string_literal: true

require "test_helper"

class ErrorsTest < Minitest::Test
  include LockyardTest

  CLASSES = %i[TimeoutError AlreadyLockedError NotLockedError LockUnhealthyError ConfigError BackendError].freeze

  def test_every_error_class_derives_from_lockyard_error
    assert_operator Lockyard::Error, :<, StandardError
    CLASSES.each { |name| assert_operator Lockyard.const_get(name), :<, Lockyard::Error, name }
  end

  # Each row: keywords that Lock.new must reject before touching Redis.
  BAD_INPUT = [
    *BAD_PLACES,
    *BAD_LEASE_OPTIONS,
    { timeout: -0.5 },
    { timeout: "5" },
    { identity_prefix: "" },
    { identity_prefix: 7 }
  ].freeze

  def test_bad_input_is_a_config_error_and_writes_nothing
    db = 15
    assert_rejected_writing_nothing(BAD_INPUT, db: db) do |**row|
      Lockyard::Redis::Lock.new(**{ url: redis.url(db), name: "bad-input", ttl: 30 }.merge(row))
    end
    lock = Lockyard::Redis::Lock.new(url: redis.url(db), name: "bad-input")
    # Past 100 years is refused, not an overflow (nil waits forever).
    [-1, Float::NAN, Float::INFINITY, 1e19, "1", :forever].each do |timeout|
      assert_raises(Lockyard::ConfigError, timeout.inspect) { lock.lock(timeout: timeout) }
      assert_raises(Lockyard::ConfigError, timeout.inspect) { lock.synchronize(timeout: timeout) { flunk } }
    end
    assert_equal 0, redis.call("DBSIZE", db: db)
  end

  def test_config_errors_say_what_is_wrong
    error = assert_raises(Lockyard::ConfigError) { new_lock(ttl: "30") }
    assert_includes error.message, "ttl"
    assert_includes error.message, '"30"'
  end

  def test_unknown_or_missing_keywords_are_argument_errors
    assert_raises(ArgumentError) { new_lock(tll: 30) }
    assert_raises(ArgumentError) { Lockyard::Redis::Lock.new(url: redis.url) }
    assert_raises(ArgumentError) { Lockyard::Redis::Lock.new(redis.url, "positional") }
    assert_raises(ArgumentError) { new_lock.lock(wait: 1) }
    assert_raises(ArgumentError) { new_lock.synchronize(wait: 1) { flunk } }
  end

  def test_unreachable_server_is_a_backend_error_naming_it
    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    lock = Lockyard::Redis::Lock.new(url: "redis://127.0.0.1:#{port}/0", name: "x", connect_timeout: 1)
    %i[lock try_lock owned? locked?].each do |method|
      error = assert_raises(Lockyard::BackendError, method) { lock.public_send(method) }
      assert_includes error.message, "127.0.0.1:#{port}"
    end
  end

  def test_lock_timeout_is_a_timeout_error
    holder = new_lock
    holder.lock
    started = monotonic
    error = assert_raises(Lockyard::TimeoutError) { new_lock(name: holder.name).lock(timeout: 0.3) }
    assert_in_delta 0.3, monotonic - started, 0.25
    assert_includes error.message, holder.name
    error = assert_raises(Lockyard::TimeoutError) { new_lock(name: holder.name, timeout: 0.1).lock }
    assert_includes error.message, holder.name
    holder.unlock
  end

  def test_locking_twice_is_an_already_locked_error
    lock = new_lock
    lock.lock
    assert_raises(Lockyard::AlreadyLockedError) { lock.lock }
    assert_raises(Lockyard::AlreadyLockedError) { lock.try_lock }
    assert lock.unlock
  end

  def test_unlocking_what_this_thread_does_not_hold_is_a_not_locked_error
    lock = new_lock
    assert_raises(Lockyard::NotLockedError) { lock.unlock }
    assert_raises(Lockyard::NotLockedError) { lock.check_health! }
    lock.lock
    from_another_thread = Thread.new do
      lock.unlock
    rescue Lockyard::Error => e
      e
    end
    assert_kind_of Lockyard::NotLockedError, from_another_thread.value
    assert lock.unlock
    assert_raises(Lockyard::NotLockedError) { lock.unlock }
  end
end
