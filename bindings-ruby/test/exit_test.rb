# frozen_string_literal: true

require "open3"
require "test_helper"

# A program that ends while its threads still wait for, take turns with or
# ask about a lock exits with its own status and leaves nothing queued:
# Ruby kills those threads at exit, which interrupts a wait like
# Thread#raise does, so each gives up its place and what it was handed.
class ExitTest < Minitest::Test
  include LockyardTest

  PROGRAM = <<~'RUBY'
    require "lockyard"

    url, name = ARGV
    lock = Lockyard::Redis::Lock.new(url: url, name: name)
    started = Queue.new
    Thread.new do
      started << :waiting
      lock.lock(timeout: nil)
    end
    2.times { Thread.new { loop { lock.locked? } } }
    2.times { Thread.new { loop { lock.synchronize(timeout: nil) {} } } }
    started.pop
    sleep 0.1
    at_exit { sleep 0.3 } # exiting takes a moment, as with real programs' hooks
  RUBY

  def test_exiting_with_threads_waiting_and_calling_is_clean_every_time
    name = "exit-#{SecureRandom.hex(4)}"
    holder = new_lock(name: name)
    20.times do |run|
      assert holder.try_lock, "run #{run}"
      _, err, status = Open3.capture3(RbConfig.ruby, *ruby_include, "-e", PROGRAM, redis.url, name)
      assert status.success?, "run #{run}: #{status.inspect} #{err}"
      assert_empty err, "run #{run}"
      holder.unlock
      # Nobody is left queued to be handed the lock: it is free at once,
      # not after the 2 s handoff window of a waiter that is gone.
      after = new_lock(name: name)
      assert after.try_lock, "run #{run}"
      after.unlock
    end
  end

  # Nobody holds the lock from outside: the threads take turns with it
  # until the end, and the one killed inside its block releases in `ensure`.
  def test_a_thread_killed_at_exit_inside_its_block_releases
    name = "exit-#{SecureRandom.hex(4)}"
    10.times do |run|
      _, err, status = Open3.capture3(RbConfig.ruby, *ruby_include, "-e", PROGRAM, redis.url, name)
      assert status.success?, "run #{run}: #{status.inspect} #{err}"
      after = new_lock(name: name)
      assert after.try_lock, "run #{run}"
      after.unlock
    end
  end
end
