# frozen_string_literal: true

require "json"
require "open3"
require "timeout"
require_relative "test_helper"
require_relative "etcd_server"

# Lockyard::Etcd::Election and Lockyard::Etcd.each_exclusive against a real
# etcd member: handover between processes, observers, workers under two
# sessions, interrupted campaigns, forked children, bad input.
class EtcdElectionTest < Minitest::Test
  include LockyardTest

  def setup
    @etcd = EtcdServer.instance
    @url = @etcd.url
    @name = "ruby-#{name}-#{SecureRandom.hex(4)}"
  end

  # The keys of this test's names in etcd: campaigns in line, held tasks.
  def keys
    @etcd.keys.select { |key| key.include?(@name) }
  end

  # Waits until the block is true; fails after 10 s, so a condition that
  # never comes fails the test instead of hanging it.
  def eventually(message)
    deadline = monotonic + 10
    until yield
      flunk "#{message} (etcd keys: #{keys})" if monotonic > deadline
      sleep 0.02
    end
  end

  # The value of a thread blocked in a campaign that is to end now; fails
  # if it does not end within 10 s.
  def finished(thread)
    assert thread.join(10), "still blocked"
    thread.value
  end

  # The next line of a child process, which is to answer now.
  def reply(child)
    assert IO.select([child], nil, nil, 10), "the child did not answer"
    child.gets
  end

  def open_session(&block)
    Lockyard::Etcd::Session.open(url: @url, ttl: 5, lock_delay: 0, &block)
  end

  def election(session)
    Lockyard::Etcd::Election.new(url: @url, name: @name, session: session)
  end

  # A campaigner in another process: campaigns or resigns as told on its
  # stdin and answers with its term ("" when not leading).
  CAMPAIGNER = <<~'RUBY'
    require "lockyard"

    url, name, value = ARGV
    Lockyard::Etcd::Session.open(url: url, ttl: 5, lock_delay: 0) do |session|
      election = Lockyard::Etcd::Election.new(url: url, name: name, session: session)
      while (command = $stdin.gets)
        command.chomp == "campaign" ? election.campaign(value) : election.resign
        puts election.term.to_s
        $stdout.flush
      end
    end
  RUBY

  def test_leadership_hands_over_between_processes_with_growing_fencing_tokens
    open_session do |session|
      here = election(session)
      IO.popen([RbConfig.ruby, *ruby_include, "-e", CAMPAIGNER, @url, @name, "child"], "r+") do |child|
        child.puts("campaign")
        first = Integer(reply(child))
        assert_equal "child", here.leader
        refute here.leader?
        waiting = Thread.new { here.campaign("here") }
        eventually("the campaign here never got in line") { keys.size == 2 }
        child.puts("resign")
        assert_equal "", reply(child).chomp
        assert finished(waiting)
        assert here.leader?
        assert_equal "here", here.leader
        assert_operator here.term, :>, first

        child.puts("campaign")
        eventually("the child's campaign never got in line") { keys.size == 2 }
        second = here.term
        assert here.resign
        assert_operator Integer(reply(child)), :>, second
        assert_equal "child", here.leader
        child.puts("resign")
        assert_equal "", reply(child).chomp
        assert_nil here.leader
      end
      assert $?.success?
    end
    assert_empty keys
  end

  def test_observe_yields_every_term_in_order_and_its_timeout_ends_it
    open_session do |first|
      open_session do |second|
        a = election(first)
        b = election(second)
        changes = b.observe(timeout: 10)
        assert_equal Lockyard::Etcd::Term.new(nil, 0), changes.next, "nobody leads yet"
        assert a.campaign("node-a", timeout: 0)
        a_term = a.term
        waiting = Thread.new { b.campaign("node-b") }
        eventually("b never got in line") { keys.size == 2 }
        assert a.resign
        assert finished(waiting)
        b_term = b.term
        assert b.resign
        assert_equal [["node-a", a_term], [nil, a_term], ["node-b", b_term], [nil, b_term]],
                     Array.new(4) { changes.next.to_a }
        assert_operator b_term, :>, a_term

        seen = []
        # Bounded only so that an observe its timeout fails to end fails
        # the test instead of hanging it.
        ended = Timeout.timeout(10) { a.observe(timeout: 0.2) { |term| seen << term } }
        assert_nil ended
        assert_equal [Lockyard::Etcd::Term.new(nil, 0)], seen, "starts from the current state"
      end
    end
    assert_empty keys
  end

  def test_election_api_and_errors_while_leading
    open_session do |first|
      open_session do |second|
        a = election(first)
        b = election(second)
        assert_nil a.leader
        assert_raises(Lockyard::NotLockedError) { a.check_health! }
        assert_nil a.term
        assert a.campaign("node-a", timeout: 0)
        assert a.leader?
        assert_nil a.check_health!
        assert_equal a.term, a.fencing_token
        assert_equal @name, a.name
        assert_equal %(#<Lockyard::Etcd::Election name="#{@name}" term=#{a.term}>), a.inspect
        assert_raises(Lockyard::AlreadyLockedError) { a.campaign("node-a", timeout: 0) }
        assert_raises(Lockyard::TimeoutError) { b.campaign("node-b", timeout: 0) }
        assert_raises(Lockyard::TimeoutError) { b.campaign("node-b", timeout: 0.2) }
        eventually("a campaign that timed out left its key") { keys.size == 1 }
        assert a.resign
        refute a.leader?
        assert_raises(Lockyard::NotLockedError) { a.resign }
      end
    end
    assert_empty keys
  end

  def test_thread_raise_and_timeout_end_a_blocked_campaign_leaving_no_key_in_line
    open_session do |first|
      open_session do |second|
        leader = election(first)
        waiter = election(second)
        assert leader.campaign("leader", timeout: 0)
        thread = Thread.new { waiter.campaign("waiter") }
        thread.report_on_exception = false
        eventually("the waiter never got in line") { keys.size == 2 }
        thread.raise(Interrupt)
        assert_raises(Interrupt) { finished(thread) }
        eventually("the interrupted campaign left its key") { keys.size == 1 }

        timed = Thread.new { Timeout.timeout(0.5) { waiter.campaign("waiter") } }
        timed.report_on_exception = false
        assert_raises(Timeout::Error) { finished(timed) }
        eventually("the timed-out campaign left its key") { keys.size == 1 }
        refute waiter.leader?
        assert leader.resign
        assert_nil waiter.leader, "nothing left in line leads"
        assert waiter.campaign("waiter", timeout: 0)
        assert waiter.resign
      end
    end
    assert_empty keys
  end

  def test_each_exclusive_gives_each_task_to_one_worker_of_two
    tasks = Array.new(6) { |i| "#{@name}-task#{i}" }
    mutex = Mutex.new
    changed = ConditionVariable.new
    tried = { a: [], b: [] }
    won = { a: [], b: [] }
    inside = {}
    workers = { a: :b, b: :a }.map do |me, other|
      Thread.new do
        # The names, noting each one once its try (and its block, if won)
        # is over.
        names = Enumerator.new do |walk|
          tasks.each do |task|
            walk << task
            mutex.synchronize do
              tried[me] << task
              changed.broadcast
            end
          end
        end
        open_session do |session|
          Lockyard::Etcd.each_exclusive(url: @url, names: names, session: session) do |task|
            # Held until the other worker has tried it too, so a task both
            # could win is won twice (and neither waits for the other then).
            mutex.synchronize do
              won[me] << task
              inside[me] = task
              changed.broadcast
              changed.wait(mutex) until tried[other].include?(task) || inside[other] == task
              inside[me] = nil
            end
          end
        end
      end
    end
    workers.each { |worker| finished(worker) }
    assert_empty won[:a] & won[:b], "won by both workers"
    assert_equal tasks, (won[:a] + won[:b]).sort_by { |task| tasks.index(task) }
    assert_empty keys
  end

  def test_each_exclusive_releases_as_the_loop_moves_on_and_on_break
    tasks = Array.new(4) { |i| "#{@name}-task#{i}" }
    open_session do |mine|
      open_session do |theirs|
        free = lambda do |task|
          lock = Lockyard::Etcd::Lock.new(url: @url, name: task, session: theirs)
          lock.try_lock && lock.unlock
        end
        taken = Lockyard::Etcd::Lock.new(url: @url, name: tasks[1], session: theirs)
        assert taken.try_lock
        ran = []
        Lockyard::Etcd.each_exclusive(url: @url, names: tasks, session: mine) do |task|
          refute free.call(task), "#{task} is not held while its block runs"
          assert free.call(ran.last), "#{ran.last} was not released as the loop moved on" if ran.any?
          ran << task
        end
        assert_equal tasks - [tasks[1]], ran
        assert free.call(tasks.last)
        assert taken.unlock

        assert_equal tasks, Lockyard::Etcd.each_exclusive(url: @url, names: tasks, session: mine).to_a
        Lockyard::Etcd.each_exclusive(url: @url, names: tasks[2..], session: mine) { break }
        assert free.call(tasks[2]), "not released on break"
      end
    end
    assert_empty keys
  end

  # The parent leads, holds a task of each_exclusive and its session, and
  # forks inside all of them; the child ends as ARGV[2] says (as in
  # fork_test.rb, for the Redis election).
  FORKING_LEADER = <<~'RUBY'
    require "json"
    require "lockyard"

    url, name, how = ARGV
    Lockyard::Etcd::Session.open(url: url, ttl: 5) do |session|
      election = Lockyard::Etcd::Election.new(url: url, name: name, session: session)
      election.campaign("parent", timeout: 0)
      Lockyard::Etcd.each_exclusive(url: url, names: ["#{name}-task"], session: session) do
        pid = how == "block" ? fork { GC.start } : fork
        if pid.nil?
          exit 0 if how == "exit"
          raise "the child's own failure" if how == "raise"

          next
        end
        Process.wait(pid)
        puts JSON.generate(child: $?.exitstatus)
        $stdout.flush
        $stdin.gets # the test looks from outside meanwhile
        puts JSON.generate(session: session.healthy?, leader: election.leader?, term: election.term)
        $stdout.flush
        election.resign
      end
    end
  RUBY

  { "exit" => 0, "raise" => 1, "leave" => 0, "block" => 0 }.each do |how, status|
    define_method("test_a_forked_child_that_ends_by_#{how}_keeps_its_parents_leadership_and_task") do
      command = [RbConfig.ruby, *ruby_include, "-e", FORKING_LEADER, @url, @name, how]
      Open3.popen3(*command) do |stdin, stdout, stderr, parent|
        line = reply(stdout)
        assert line, -> { stderr.read }
        assert_equal({ "child" => status }, JSON.parse(line))

        open_session do |session|
          rival = election(session)
          assert_equal "parent", rival.leader
          assert_raises(Lockyard::TimeoutError) { rival.campaign("rival", timeout: 0) }
          refute Lockyard::Etcd::Lock.new(url: @url, name: "#{@name}-task", session: session).try_lock
          assert_empty Lockyard::Etcd.each_exclusive(url: @url, names: ["#{@name}-task"], session: session).to_a
        end

        stdin.puts("report")
        health = JSON.parse(reply(stdout))
        assert_equal [true, true], health.values_at("session", "leader"), health.inspect
        assert_kind_of Integer, health["term"]
        stdin.close
        err = stderr.read
        assert parent.value.success?, err
        # The child failed with its own exception, not a lockyard error
        # from a block it left.
        refute_match(/Lockyard/, err)
        assert_equal how == "raise", err.include?("the child's own failure"), err
      end
      assert_empty keys
    end
  end

  def test_bad_input_is_a_config_error
    redis_session = Lockyard::Redis::Session.new(url: redis.url)
    open_session do |session|
      [
        { name: "" },
        { name: :symbol },
        { url: "etcd://" },
        { url: "etcd://127.0.0.1:1" }, # other members than the session's
        { url: redis.url },
        { session: "not a session" },
        { session: nil },
        { session: redis_session }
      ].each do |row|
        options = { url: @url, name: @name, session: session, **row }
        assert_raises(Lockyard::ConfigError, row.inspect) { Lockyard::Etcd::Election.new(**options) }
      end
      assert_raises(ArgumentError) { Lockyard::Etcd::Election.new(url: @url, name: @name, session: session, ttl: 5) }
      assert_raises(Lockyard::ConfigError) do
        Lockyard::Redis::Election.new(url: redis.url, name: @name, session: session)
      end
      [redis_session, "not a session"].each do |wrong|
        assert_raises(Lockyard::ConfigError) do
          Lockyard::Etcd.each_exclusive(url: @url, names: ["#{@name}-task"], session: wrong) { flunk "ran" }
        end
      end

      elected = election(session)
      assert_raises(Lockyard::ConfigError) { elected.campaign("") }
      assert_raises(Lockyard::ConfigError) { elected.campaign(:value) }
      assert_raises(Lockyard::ConfigError) { elected.campaign("a", timeout: 1e19) }
      assert_raises(Lockyard::ConfigError) { elected.campaign("a", timeout: "1") }
      assert_raises(Lockyard::ConfigError) { elected.observe(timeout: 1e19).next }
      refute elected.leader?
      assert_nil elected.leader
      assert_empty keys
    end
    gone = Lockyard::Etcd::Session.new(url: @url, ttl: 5)
    gone.destroy
    assert_raises(Lockyard::ConfigError) { election(gone) }
  ensure
    redis_session&.destroy
  end
end
