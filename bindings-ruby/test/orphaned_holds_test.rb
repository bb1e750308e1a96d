# frozen_string_literal: true

require "test_helper"

# Holds whose holder is gone. What a Thread still holds when it dies is
# released, as Ruby unlocks a dead Thread's Mutexes; a lock (or session, or
# election) the garbage collector frees gives back what it held without
# making the collection wait on the server; a program's exit still waits
# for those releases.
class OrphanedHoldsTest < Minitest::Test
  include LockyardTest

  # A hold kept by mistake is refreshed every 0.6 s, so none of the waits
  # below (1.5 s) can be won by its lease running out.
  LEASE = { ttl: 2, refresh_interval: 0.6 }.freeze

  ENDINGS = {
    returns: -> {},
    raises: -> { raise "boom" },
    is_killed: -> { Thread.current.kill }
  }.freeze

  def test_a_thread_that_dies_holding_a_lock_releases_it_with_a_warning
    ENDINGS.each do |ending, die|
      lock = new_lock(**LEASE)
      _, warned = capture_io do
        dying = Thread.new do
          Thread.current.report_on_exception = false
          lock.lock
          die.call
        end
        begin
          dying.join
        rescue RuntimeError
          nil
        end
        assert_operator seconds_to_take(lock.name), :<, 1, "a thread that #{ending}"
      end
      assert_match(/released lock "#{lock.name}": the thread holding it died/, warned)
    end
  end

  def test_a_fiber_that_ends_holding_a_lock_keeps_it_until_its_thread_dies
    lock = new_lock(**LEASE)
    finish = Queue.new
    thread = Thread.new do
      Fiber.new { lock.lock }.resume
      finish.pop
    end
    Thread.pass until thread.status == "sleep"
    sleep 0.6
    refute new_lock(name: lock.name).try_lock, "released while its Thread lives, unlike a Mutex"
    capture_io do
      finish << :done
      thread.join
      assert_operator seconds_to_take(lock.name), :<, 1
    end
  end

  def test_the_watcher_runs_only_while_a_thread_holds_something
    # Other tests may leave this thread holding locks they no longer
    # reference (a lock under a session they destroyed, never unlocked):
    # collected, those give their holds back, and the watcher may stop.
    GC.start
    settled_by = monotonic + 2
    sleep 0.05 while watcher && monotonic < settled_by
    lock = new_lock(**LEASE)
    lock.synchronize { assert watcher, "no watcher while a lock is held" }
    stopped_by = monotonic + 2
    sleep 0.05 while watcher && monotonic < stopped_by
    holding = Lockyard::ThreadWatch.__send__(:owners_holding)
    assert_nil watcher, "still watching, for the threads #{holding} (this one: #{Thread.current.object_id})"
  end

  def test_a_forked_child_watches_its_own_threads
    parents = new_lock(**LEASE)
    parents.synchronize do # the parent's watcher runs, and is not the child's
      lock = new_lock(**LEASE)
      taken, told = IO.pipe
      child = fork do
        Thread.new { told.puts(lock.try_lock) }.join
        sleep 3
      end
      told.close
      assert_equal "true\n", taken.gets
      assert_operator seconds_to_take(lock.name), :<, 1
    ensure
      Process.kill(:KILL, child)
      Process.wait(child)
    end
  end

  def test_a_lock_collected_while_held_frees_its_name
    name = "test-#{SecureRandom.hex(6)}"
    alive = forget { Lockyard::Redis::Lock.new(url: redis.url, name: name, **LEASE).tap(&:lock) }
    collect
    refute alive.call, "the lock was not collected"
    assert_operator seconds_to_take(name), :<, 1
  end

  def test_collecting_a_held_lock_does_not_wait_on_an_unreachable_server
    server = RedisServer.new
    name = "test-#{SecureRandom.hex(6)}"
    alive = forget { Lockyard::Redis::Lock.new(url: server.url, name: name, **LEASE).tap(&:lock) }
    assert_operator seconds_to_collect_with_server_stopped(server), :<, 0.5
    refute alive.call, "the lock was not collected"
  ensure
    server.stop
  end

  def test_collecting_a_leading_election_and_its_session_does_not_wait_on_an_unreachable_server
    server = RedisServer.new
    name = "test-#{SecureRandom.hex(6)}"
    alive = forget do
      session = Lockyard::Redis::Session.new(url: server.url, ttl: 5, lock_delay: 0)
      election = Lockyard::Redis::Election.new(url: server.url, name: name, session: session)
      election.campaign("gone", timeout: 0)
      [session, election]
    end
    assert_operator seconds_to_collect_with_server_stopped(server), :<, 0.5
    refute alive.call, "the session and election were not collected"
    # Resigned and destroyed in the background once the server answers,
    # not left for the session's ttl (5 s) to run out.
    Lockyard::Redis::Session.open(url: server.url) do |session|
      assert Lockyard::Redis::Election.new(url: server.url, name: name, session: session).campaign("next", timeout: 1)
    end
  ensure
    server.stop
  end

  # An external enumerator of each_exclusive left inside a task's block
  # (`tasks.next`, never resumed) holds that task's lock in a Fiber that
  # never ends; collected, it gives the lock back like a collected Lock.
  def test_collecting_an_abandoned_exclusive_task_does_not_wait_on_an_unreachable_server
    server = RedisServer.new
    name = "test-#{SecureRandom.hex(6)}"
    session = Lockyard::Redis::Session.new(url: server.url, ttl: 5, lock_delay: 0)
    alive = forget do
      tasks = Lockyard::Redis.each_exclusive(url: server.url, names: [name], session: session)
      assert_equal name, tasks.next
      tasks
    end
    assert_operator seconds_to_collect_with_server_stopped(server), :<, 0.5
    refute alive.call, "the abandoned enumerator was not collected"
  ensure
    server.stop
  end

  def test_a_lock_held_when_the_program_exits_is_released_before_it_ends
    name = "test-#{SecureRandom.hex(6)}"
    # Ruby frees the lock at exit; its release, handed to the background,
    # must not die with the process.
    holder = "Lockyard::Redis::Lock.new(url: ARGV[0], name: ARGV[1], ttl: 20).lock"
    system(RbConfig.ruby, *ruby_include, "-rlockyard", "-e", holder, redis.url, name, exception: true)
    lock = new_lock(name: name)
    assert lock.try_lock, "the exited program's lock is still held"
    lock.unlock
  end

  private

  def seconds_to_take(name)
    other = new_lock(name: name, **LEASE)
    started = monotonic
    other.lock(timeout: 1.5)
    monotonic - started
  ensure
    other.unlock if other&.__send__(:held_by_this_thread?)
  end

  def watcher
    Thread.list.find { |thread| thread.name == "lockyard-thread-watch" }
  end

  # Keeps no reference to what the block returns (an object or an Array of
  # them); the returned check says whether any of them is still alive.
  def forget(&make)
    alive = ObjectSpace::WeakMap.new
    keys = []
    # In a Fiber of its own, whose stack (unlike this one) the collector no
    # longer scans once it has ended.
    Fiber.new do
      Array(make.call).each { |object| alive[keys.push(Object.new).last] = object }
      nil
    end.resume
    -> { keys.any? { |key| alive.key?(key) } }
  end

  # How long a collection takes while `server` does not answer.
  def seconds_to_collect_with_server_stopped(server)
    Process.kill(:STOP, server.pid)
    started = monotonic
    collect
    monotonic - started
  ensure
    Process.kill(:CONT, server.pid)
  end

  # A full collection, and a moment for the deferred free functions it
  # leaves to run.
  def collect
    3.times { GC.start }
    sleep 0.05
  end

  # Found by review: a grant in a signal trap (a graceful-shutdown handler)
  # raised ThreadError from the watcher's Mutex after the grant was made,
  # so the caller was told it failed while it held the lock.
  def test_a_lock_taken_in_a_trap_handler_reports_its_grant
    lock = new_lock
    outcome = []
    previous = Signal.trap(:USR2) do
      outcome << lock.try_lock
    rescue Exception => e # rubocop:disable Lint/RescueException
      outcome << e
    end
    Process.kill(:USR2, Process.pid)
    sleep 0.01 until outcome.any?
    assert_equal [true], outcome
    lock.unlock
  ensure
    Signal.trap(:USR2, previous || "DEFAULT")
  end

  def test_synchronize_in_a_trap_handler_runs_its_block
    lock = new_lock
    outcome = []
    previous = Signal.trap(:USR2) do
      outcome << lock.synchronize(timeout: 1) { :ran }
    rescue Exception => e # rubocop:disable Lint/RescueException
      outcome << e
    end
    Process.kill(:USR2, Process.pid)
    sleep 0.01 until outcome.any?
    assert_equal [:ran], outcome
  ensure
    Signal.trap(:USR2, previous || "DEFAULT")
  end
end
