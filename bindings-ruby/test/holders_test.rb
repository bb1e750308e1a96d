# frozen_string_literal: true

require "test_helper"

# A Lock is held per Fiber, like Ruby's Mutex: not per native thread, which
# Ruby reuses for new Threads and shares between the fibers of a Thread.
class HoldersTest < Minitest::Test
  include LockyardTest

  def test_a_new_thread_does_not_inherit_the_lock_of_a_dead_one
    3.times do
      lock = new_lock
      Thread.new { lock.lock }.join
      # Ruby runs this Thread on the native thread of the one that died.
      owned, unlocked = Thread.new { [lock.owned?, (lock.unlock rescue $!)] }.value
      refute owned, "a new Thread owns a dead Thread's lock"
      assert_kind_of Lockyard::NotLockedError, unlocked
      # The dead Thread's hold is not the new one's to end; the watcher
      # releases it soon after (thread_death_test.rb).
    end
  end

  def test_fibers_of_one_thread_contend_like_threads
    lock = new_lock
    assert lock.try_lock
    owned, tried, unlocked = Fiber.new { [lock.owned?, lock.try_lock, (lock.unlock rescue $!)] }.resume
    refute owned
    refute tried, "another Fiber took a held lock"
    assert_kind_of Lockyard::NotLockedError, unlocked
    assert lock.unlock

    holder = Fiber.new do
      Fiber.yield [lock.try_lock, lock.owned?, lock.fencing_token]
      lock.unlock
    end
    tried, owned, token = holder.resume
    assert tried
    assert owned
    assert_kind_of Integer, token
    refute lock.owned?, "the Fiber's hold is not its Thread's"
    assert_nil lock.fencing_token
    refute lock.try_lock
    assert holder.resume, "the holding Fiber unlocks"
    assert lock.try_lock
    assert lock.unlock
  end
end
