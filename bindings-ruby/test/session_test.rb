# frozen_string_literal: true

require "test_helper"

# Sessions, locks under them, each_exclusive and elections: API shape,
# values, cleanup and bad input, and workers as forked processes.
class SessionTest < Minitest::Test
  include LockyardTest

  def new_session(**options)
    Lockyard::Redis::Session.new(url: redis.url, **options)
  end

  def under(session, name, value: nil)
    Lockyard::Redis::Lock.new(url: redis.url, name: name, session: session, value: value)
  end

  def unique(prefix)
    "#{prefix}-#{SecureRandom.hex(4)}"
  end

  def test_open_destroys_the_session_and_frees_its_locks_at_once
    name = unique("open")
    lock = nil
    kept = Lockyard::Redis::Session.open(url: redis.url, ttl: 2, lock_delay: 0) do |session|
      assert session.healthy?
      assert_equal [2.0, "release", 32], [session.ttl, session.behavior, session.id.size]
      lock = under(session, name, value: "w1")
      assert lock.try_lock
      lock.check_health!
      Lockyard::Redis.holder(url: redis.url, name: name)
    end
    assert_equal "w1", kept
    refute lock.healthy?
    assert_raises(Lockyard::LockUnhealthyError) { lock.check_health! }
    Lockyard::Redis::Session.open(url: redis.url) { |other| assert under(other, name).try_lock }
  end

  def test_destroy_leaves_only_expiring_keys
    { "release" => "w1", "delete" => nil }.each do |behavior, kept|
      name = unique("destroy")
      session = new_session(behavior: behavior, lock_delay: 5)
      3.times { |i| assert under(session, "#{name}-#{i}", value: "w1").try_lock }
      session.destroy
      session.destroy
      assert_raises(Lockyard::LockUnhealthyError) { session.check_health! }
      left = Lockyard::Redis.holder(url: redis.url, name: "#{name}-0")
      kept ? assert_equal(kept, left) : assert_nil(left)
      redis.call("KEYS", "*#{name}*").each do |key|
        assert key.end_with?(":fence", ":value"), "#{key} left behind"
        assert_operator redis.call("PTTL", key), :>, 0
      end
      assert_empty redis.call("KEYS", "lockyard:session:{#{session.id}}")
    end
  end

  def test_each_exclusive_yields_only_won_names_and_releases_each
    tasks = Array.new(4) { |i| unique("task#{i}") }
    Lockyard::Redis::Session.open(url: redis.url) do |mine|
      Lockyard::Redis::Session.open(url: redis.url) do |theirs|
        assert under(theirs, tasks[1]).try_lock
        ran = []
        Lockyard::Redis.each_exclusive(url: redis.url, names: tasks, session: mine) do |task|
          refute under(theirs, task).try_lock
          ran << task
        end
        assert_equal tasks - [tasks[1]], ran
        assert under(theirs, tasks[0]).try_lock, "released as the loop moved on"
        Lockyard::Redis.each_exclusive(url: redis.url, names: tasks[2..], session: mine) { break }
        assert under(theirs, tasks[2]).try_lock, "released on break"
      end
    end
  end

  # Issue 16: a wait past 100 years is a ConfigError, not a fatal overflow.
  def test_election_waits_past_100_years_are_config_errors
    Lockyard::Redis::Session.open(url: redis.url) do |session|
      election = Lockyard::Redis::Election.new(url: redis.url, name: unique("huge"), session: session)
      assert_raises(Lockyard::ConfigError) { election.campaign("a", timeout: 1e19) }
      assert_raises(Lockyard::ConfigError) { election.observe(timeout: 1e19).next }
      assert_nil election.leader
    end
  end

  def test_election_campaign_leader_resign_and_observe
    name = unique("election")
    Lockyard::Redis::Session.open(url: redis.url) do |a|
      Lockyard::Redis::Session.open(url: redis.url) do |b|
        first = Lockyard::Redis::Election.new(url: redis.url, name: name, session: a)
        second = Lockyard::Redis::Election.new(url: redis.url, name: name, session: b)
        changes = second.observe(timeout: 0.3)
        assert_nil changes.next.value
        assert first.campaign("node-a", timeout: 0)
        assert first.leader?
        assert_equal first.term, first.fencing_token
        assert_raises(Lockyard::TimeoutError) { second.campaign("node-b", timeout: 0.2) }
        assert_equal "node-a", second.leader
        assert first.resign
        assert_raises(Lockyard::NotLockedError) { first.resign }
        assert second.campaign("node-b", timeout: 1)
        assert_equal(%w[node-a node-b], [changes.next.value, (changes.next && changes.next.value)])
      end
    end
  end

  def test_bad_input_is_a_config_error
    [
      -> { new_session(ttl: 0) },
      -> { new_session(ttl: -1) },
      -> { new_session(behavior: "sometimes") },
      -> { new_session(lock_delay: -1) },
      -> { new_session(ttl: 1e19) },
      -> { new_session(ttl: Float::NAN) },
      -> { new_session(ttl: 18_446_744_073_709_551.616) },
      -> { new_session(lock_delay: 31 * 86_400) },
      -> { new_session(lock_delay: Float::INFINITY) },
      -> { new_lock(value: "v") },
      -> { Lockyard::Redis::Lock.new(url: redis.url, name: "x", ttl: 5, session: new_session) },
      -> { Lockyard::Redis::Election.new(url: redis.url, name: "x", session: "not a session") }
    ].each { |make| assert_raises(Lockyard::ConfigError) { make.call } }
    assert_raises(ArgumentError) { new_session(tll: 5) }
    session = new_session
    lock = under(session, unique("gone"))
    session.destroy
    assert_raises(Lockyard::ConfigError) { under(session, "x") }
    assert_raises(Lockyard::ConfigError) { lock.try_lock }
    assert_raises(Lockyard::ConfigError) { Lockyard::Redis::Election.new(url: redis.url, name: "x", session: session) }
  end

  # A forked worker holding +name+ under a session; answers health checks.
  def fork_worker(name, ttl:, lock_delay:)
    to_child_reader, to_child = IO.pipe
    from_child, to_parent = IO.pipe
    url = redis.url # started before the fork, so the child uses it too
    pid = fork do
      to_child.close
      from_child.close
      session = Lockyard::Redis::Session.new(url: url, ttl: ttl, lock_delay: lock_delay)
      lock = under(session, name, value: "worker")
      lock.lock(timeout: 0)
      to_parent.puts(lock.fencing_token)
      while to_child_reader.gets
        to_parent.puts([session.healthy?, lock.healthy?].join(" "))
      end
      exit!(0)
    end
    to_child_reader.close
    to_parent.close
    [pid, to_child, from_child, Integer(from_child.gets)]
  end

  def ask(to_child, from_child)
    to_child.puts("?")
    from_child.gets.chomp
  end

  def test_killed_worker_frees_its_task_after_ttl_plus_lock_delay_and_not_before
    name = unique("killed")
    ttl = 0.6
    delay = 0.7
    pid, to_child, from_child, = fork_worker(name, ttl: ttl, lock_delay: delay)
    sleep 3 * ttl
    assert_equal "true true", ask(to_child, from_child), "kept past its ttl"
    Lockyard::Redis::Session.open(url: redis.url) do |session|
      lock = under(session, name)
      refute lock.try_lock, "taken from a live worker"
      Process.kill(:KILL, pid)
      Process.wait(pid)
      killed_at = monotonic
      until lock.try_lock
        flunk "never freed" if monotonic - killed_at > 5
        sleep 0.02
      end
      waited = monotonic - killed_at
      assert_operator waited, :>=, (ttl / 2) + delay - 0.05
      assert_operator waited, :<=, ttl + delay + 0.4
    end
  end

  def test_paused_worker_finds_its_session_unhealthy_on_resume
    name = unique("paused")
    pid, to_child, from_child, paused_token = fork_worker(name, ttl: 0.4, lock_delay: 0)
    Process.kill(:STOP, pid)
    sleep 1
    Lockyard::Redis::Session.open(url: redis.url) do |session|
      lock = under(session, name)
      assert lock.try_lock, "the paused worker's lease ran out"
      Process.kill(:CONT, pid)
      assert_equal "false false", ask(to_child, from_child)
      assert_operator lock.fencing_token, :>, paused_token
    end
  ensure
    if pid
      Process.kill(:CONT, pid)
      Process.kill(:KILL, pid)
      Process.wait(pid)
    end
  end

  def test_observe_reports_every_change_in_fencing_order
    name = unique("observed")
    # Started here, not in the children: a child that asked first would
    # start a server of its own.
    url = redis.url
    campaigners = %w[a b].to_h do |value|
      to_child_reader, to_child = IO.pipe
      from_child, to_parent = IO.pipe
      pid = fork do
        Lockyard::Redis::Session.open(url: url, ttl: 2, lock_delay: 0) do |session|
          election = Lockyard::Redis::Election.new(url: url, name: name, session: session)
          while (command = to_child_reader.gets&.chomp) && command != "exit"
            command == "campaign" ? election.campaign(value) : election.resign
            to_parent.puts(election.term.to_s)
          end
        end
        exit!(0)
      end
      [value, [pid, to_child, from_child]]
    end
    Lockyard::Redis::Session.open(url: redis.url) do |session|
      observer = Lockyard::Redis::Election.new(url: redis.url, name: name, session: session)
      terms = []
      watching = Thread.new { observer.observe(timeout: 1) { |term| terms << term } }
      sleep 0.2
      [%w[a campaign], %w[a resign], %w[b campaign], %w[b resign], %w[a campaign]].each do |value, command|
        _, to_child, from_child = campaigners[value]
        to_child.puts(command)
        from_child.gets
      end
      watching.join
      assert_equal [nil, "a", nil, "b", nil, "a"], terms.map(&:value)
      fences = terms.drop(1).map(&:fencing_token)
      assert fences[0] == fences[1] && fences[1] < fences[2] && fences[2] == fences[3] && fences[3] < fences[4],
             fences.inspect
    end
  ensure
    # A sibling fork holds the other's pipe open too: say exit, not EOF.
    campaigners&.each_value do |pid, to_child, _|
      to_child.puts("exit")
      Process.wait(pid)
    end
  end

  # Found by review: a lock kept no reference to its session, so collecting
  # a session referenced only by the lock destroyed it under the holder.
  def test_a_held_lock_keeps_its_session_alive
    name = "test-#{SecureRandom.hex(6)}"
    url = redis.url
    lock = Fiber.new do
      # The session is referenced from this Fiber's stack only.
      Lockyard::Redis::Lock.new(url: url, name: name,
                                session: Lockyard::Redis::Session.new(url: url, ttl: 5, lock_delay: 0))
    end.resume
    lock.lock
    3.times { GC.start }
    sleep 0.3
    other = new_lock(name: name)
    taken = other.try_lock
    other.unlock if taken
    refute taken, "another holder took #{name} while this one still holds it (healthy? #{lock.healthy?})"
    assert lock.healthy?
  ensure
    lock&.unlock
  end
end
