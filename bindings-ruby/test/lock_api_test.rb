# frozen_string_literal: true

require "test_helper"

class LockApiTest < Minitest::Test
  include LockyardTest

  def test_lock_and_unlock_report_what_happened
    lock = new_lock
    assert_equal true, lock.lock
    assert lock.owned?
    assert lock.locked?
    assert lock.healthy?
    assert_nil lock.check_health!
    assert_kind_of Integer, lock.fencing_token
    assert_equal true, lock.unlock
    refute lock.owned?
    refute lock.locked?
    refute lock.healthy?
    assert_nil lock.fencing_token
  end

  def test_try_lock_answers_without_waiting
    holder = new_lock
    other = new_lock(name: holder.name)
    assert_equal true, holder.try_lock
    started = monotonic
    assert_equal false, other.try_lock
    assert_operator monotonic - started, :<, 0.5
    assert other.locked?
    refute other.owned?
    holder.unlock
    assert_equal true, other.try_lock
    other.unlock
  end

  def test_lock_waits_for_the_holder
    holder = new_lock
    holder.lock
    waiter = Thread.new { holder.lock(timeout: 5) && holder.fencing_token }
    sleep 0.2
    first = holder.fencing_token
    holder.unlock
    assert_operator waiter.value, :>, first
  end

  def test_keywords_and_readers
    lock = new_lock(name: "api-readers", ttl: 2.5, timeout: 1, refresh_interval: 0.1,
                    max_refresh_fails: 2, identity_prefix: "worker-7", connect_timeout: 0.5)
    assert_equal "api-readers", lock.name
    assert_equal 1.0, lock.default_timeout
    assert_match %r{\Aworker-7-#{Process.pid}/\d+\z}, lock.identity
    assert_nil new_lock.default_timeout
    assert_equal '#<Lockyard::Redis::Lock name="api-readers">', lock.inspect
    lock.lock
    assert_match(/fencing_token=#{lock.fencing_token}>\z/, lock.inspect)
    lock.unlock
  end

  def test_subclasses_construct_themselves
    subclass = Class.new(Lockyard::Redis::Lock) { def kind = :mine }
    lock = subclass.new(url: redis.url, name: "subclass")
    assert_instance_of subclass, lock
    assert_equal :mine, lock.kind
    assert lock.synchronize { lock.owned? }
  end

  def test_threads_are_separate_holders
    lock = new_lock
    lock.lock
    here = lock.identity
    there, holds_there, tries_there = Thread.new { [lock.identity, lock.owned?, lock.try_lock] }.value
    refute_equal here, there
    refute holds_there
    refute tries_there
    lock.unlock
  end

  def test_synchronize_returns_the_block_value_and_releases
    lock = new_lock
    assert_equal 42, lock.synchronize { lock.owned? && 42 }
    refute lock.locked?
  end

  def test_synchronize_releases_on_raise
    lock = new_lock
    assert_raises(ArgumentError) { lock.synchronize { raise ArgumentError } }
    refute lock.locked?
  end

  def test_synchronize_releases_on_break
    lock = new_lock
    value = [1, 2].each { break lock.synchronize { break :broke } }
    assert_equal :broke, value
    refute lock.locked?
  end

  def test_synchronize_releases_on_return
    lock = new_lock
    assert_equal :returned, return_from_inside(lock)
    refute lock.locked?
  end

  def test_synchronize_releases_on_throw
    lock = new_lock
    assert_equal :thrown, catch(:out) { lock.synchronize { throw :out, :thrown } }
    refute lock.locked?
  end

  def test_synchronize_uses_its_timeout
    lock = new_lock
    other = new_lock(name: lock.name, timeout: 0.2)
    lock.lock
    assert_raises(Lockyard::TimeoutError) { other.synchronize { flunk "ran without the lock" } }
    assert_raises(Lockyard::TimeoutError) { other.synchronize(timeout: 0) { flunk "ran without the lock" } }
    lock.unlock
    assert_equal :ran, other.synchronize(timeout: nil) { :ran }
  end

  def test_synchronize_inside_synchronize_is_an_error_and_keeps_the_outer_hold
    lock = new_lock
    lock.synchronize do
      assert_raises(Lockyard::AlreadyLockedError) { lock.synchronize { flunk "re-entered" } }
      assert lock.owned?
    end
    refute lock.locked?
  end

  def test_synchronize_needs_a_block
    assert_raises(ArgumentError) { new_lock.synchronize }
  end

  def test_fencing_tokens_strictly_increase_across_holders
    name = "fence-#{SecureRandom.hex(4)}"
    locks = Array.new(3) { new_lock(name: name) }
    tokens = 6.times.map do |i|
      lock = locks[i % 3]
      lock.synchronize { lock.fencing_token }
    end
    assert_equal tokens.sort.uniq, tokens
  end

  private

  def return_from_inside(lock)
    lock.synchronize { return :returned }
  end
end
