# frozen_string_literal: true

require "test_helper"
require "timeout"

class ThreadsTest < Minitest::Test
  include LockyardTest

  def test_threads_sharing_one_lock_lose_no_increment
    lock = new_lock
    Dir.mktmpdir do |dir|
      counter = File.join(dir, "counter")
      File.write(counter, "0")
      threads = Array.new(8) do
        Thread.new do
          50.times do
            lock.synchronize do
              value = Integer(File.read(counter))
              Thread.pass
              File.write(counter, (value + 1).to_s)
            end
          end
        end
      end
      threads.each(&:join)
      assert_equal 400, Integer(File.read(counter))
    end
    refute lock.locked?
  end

  def test_a_waiting_thread_lets_other_threads_run
    holder = new_lock
    holder.lock
    waiter = Thread.new { new_lock(name: holder.name).lock(timeout: 1) rescue $! }
    ticks = 0
    deadline = monotonic + 0.5
    ticks += 1 while monotonic < deadline
    assert_operator ticks, :>, 1000
    assert_kind_of Lockyard::TimeoutError, waiter.value
    holder.unlock
  end

  def test_timeout_interrupts_a_wait_and_leaves_nothing_held_or_queued
    holder = new_lock
    waiter = new_lock(name: holder.name)
    holder.lock
    started = monotonic
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { waiter.lock } }
    assert_operator monotonic - started, :<, 0.8
    assert_nil waiter.fencing_token
    assert_equal 0, redis.call("ZCARD", "lockyard:{#{holder.name}}:queue")
    assert_equal 1, redis.call("ZCARD", "lockyard:{#{holder.name}}:holders")
    holder.unlock
    refute waiter.locked?
    assert waiter.try_lock, "a third party gets the freed lock at once: no ghost waiter was handed it"
    waiter.unlock
  end

  def test_thread_raise_interrupts_a_blocked_lock
    holder = new_lock
    holder.lock
    waiter = new_lock(name: holder.name)
    blocked = Thread.new do
      waiter.lock
      :locked
    rescue RuntimeError => e
      e.message
    end
    sleep 0.2
    assert_equal "sleep", blocked.status
    raised_at = monotonic
    blocked.raise(RuntimeError, "wake up")
    assert_equal "wake up", blocked.value
    assert_operator monotonic - raised_at, :<, 1
    assert_equal 0, redis.call("ZCARD", "lockyard:{#{holder.name}}:queue")
    holder.unlock
  end

  def test_timeout_around_synchronize_never_runs_the_block_nor_keeps_the_lock
    holder = new_lock
    waiter = new_lock(name: holder.name)
    holder.lock
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { waiter.synchronize { flunk "ran without the lock" } } }
    assert_nil waiter.fencing_token
    holder.unlock
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { waiter.synchronize { sleep } } }
    refute waiter.locked?, "interrupted inside the block, the lock was released"
  end

  def test_thread_kill_ends_a_blocked_lock
    holder = new_lock
    holder.lock
    blocked = Thread.new { new_lock(name: holder.name).lock }
    sleep 0.2
    blocked.kill
    assert blocked.join(1), "the killed thread ended"
    assert_equal 0, redis.call("ZCARD", "lockyard:{#{holder.name}}:queue")
    holder.unlock
  end

  def test_a_wakeup_without_exception_keeps_waiting
    holder = new_lock
    holder.lock
    waiter = Thread.new { new_lock(name: holder.name).lock(timeout: 0.6) rescue $! }
    sleep 0.2
    waiter.wakeup
    sleep 0.1
    assert waiter.alive?, "a wakeup is not a reason to stop waiting"
    assert_kind_of Lockyard::TimeoutError, waiter.value
    holder.unlock
  end
end
