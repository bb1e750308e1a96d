# frozen_string_literal: true

require "open3"
require "test_helper"

# A network gone silent (connections open, no byte passing) holds no
# waiting thread past its timeout or an interrupt: Timeout.timeout,
# Thread#raise and Ctrl-C end the wait at once, and none of them may crash
# the process. On a slow one, a wait that gives up leaves no place behind. Each case runs in a child ruby, whose death would otherwise
# take the whole test run with it; the proxy lives here, in the parent.
class SilentNetworkTest < Minitest::Test
  include LockyardTest

  # A TCP proxy to the test's redis-server that holds every chunk for
  # `delay` seconds, and can swallow every byte, of connections open now and
  # later.
  class SilentProxy
    attr_reader :port

    def initialize(upstream_port, delay: 0)
      @delay = delay
      @listener = TCPServer.new("127.0.0.1", 0)
      @port = @listener.addr[1]
      @silent = false
      @sockets = []
      @acceptor = Thread.new { accept(upstream_port) }
    end

    def url
      "redis://127.0.0.1:#{@port}/0"
    end

    def silence!
      @silent = true
    end

    def close
      @acceptor.kill
      (@sockets + [@listener]).each { |socket| socket.close rescue nil } # rubocop:disable Style/RescueModifier
    end

    private

    def accept(upstream_port)
      loop do
        client = @listener.accept
        upstream = TCPSocket.new("127.0.0.1", upstream_port)
        @sockets.push(client, upstream)
        Thread.new { pump(client, upstream) }
        Thread.new { pump(upstream, client) }
      end
    rescue IOError, SystemCallError
      nil
    end

    def pump(from, to)
      loop do
        chunk = from.readpartial(16_384)
        sleep @delay
        to.write(chunk) unless @silent
      end
    rescue IOError, SystemCallError
      nil
    end
  end

  # The child: takes and gives back the lock once (a pooled connection),
  # says "ready", waits for the parent to silence the network, then runs
  # CASE and prints the exception's class and how long it took.
  CHILD = <<~'RUBY'
    require "lockyard"
    require "timeout"

    url, name, kase = ARGV
    lock = Lockyard::Redis::Lock.new(url: url, name: name, ttl: 20)
    lock.lock(timeout: 5)
    lock.unlock
    session = Lockyard::Redis::Session.new(url: url, ttl: 20) if kase == "exclusive_timeout_block"
    $stdout.puts "ready"
    $stdout.flush
    $stdin.gets
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    outcome =
      begin
        case kase
        when "timeout_block" then Timeout.timeout(1) { lock.lock }
        when "exclusive_timeout_block"
          Timeout.timeout(1) { Lockyard::Redis.each_exclusive(url: url, names: [name], session: session) { nil } }
        when "lock_timeout" then lock.lock(timeout: 1)
        when "thread_raise"
          waiter = Thread.new { lock.lock rescue $! }
          sleep 1
          waiter.raise(RuntimeError, "stop waiting")
          waiter.value
        when "trap_zero_timeout"
          trap("USR1") { nil }
          $stdout.puts "waiting"
          $stdout.flush
          lock.lock(timeout: 0)
        when "ctrl_c"
          $stdout.puts "waiting"
          $stdout.flush
          lock.lock
        end
      rescue Exception => e # rubocop:disable Lint/RescueException
        e
      end
    took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    $stdout.puts "#{outcome.class} #{took.round(2)}"
    $stdout.flush
    # Destroying the session at exit would wait on the silent network.
    exit!(0) if session
  RUBY

  def setup
    @proxy = SilentProxy.new(redis.port)
  end

  def teardown
    @proxy.close
  end

  def test_timeout_block_ends_a_wait_on_a_silent_network_and_the_process_lives
    kind, took = run_child("timeout_block")
    assert_equal "Timeout::Error", kind
    assert_in_delta 1.0, took, 0.8
  end

  # each_exclusive's one try per name is interruptible like a lock's wait:
  # Timeout.timeout ends it at once, not after the 10 s command timeout.
  def test_timeout_block_ends_an_exclusive_try_on_a_silent_network
    kind, took = run_child("exclusive_timeout_block")
    assert_equal "Timeout::Error", kind
    assert_in_delta 1.0, took, 0.8
  end

  def test_a_lock_timeout_bounds_a_wait_on_a_silent_network
    kind, took = run_child("lock_timeout")
    assert_equal "Lockyard::TimeoutError", kind
    assert_in_delta 1.0, took, 0.8
  end

  def test_thread_raise_ends_a_wait_on_a_silent_network_at_once
    kind, took = run_child("thread_raise")
    assert_equal "RuntimeError", kind
    # The raise comes 1 s in; it must land well before the 10 s command
    # timeout (about 0.1 s on an idle machine).
    assert_in_delta 1.0, took, 0.8
  end

  def test_ctrl_c_ends_a_wait_on_a_silent_network_at_once
    kind, took = run_child("ctrl_c") do |output, pid|
      assert_equal "waiting\n", output.gets
      sleep 0.5
      Process.kill(:INT, pid)
    end
    assert_equal "Interrupt", kind
    assert_in_delta 0.5, took, 0.8
  end

  # A signal trap resumes the wait it interrupted; a zero timeout's one
  # attempt, once resumed, is over. Tried again, each trap (SIGCHLD,
  # SIGWINCH...) would restart a 10 s attempt: the wait might never end.
  def test_a_trap_ends_a_zero_timeout_lock_on_a_silent_network
    kind, took = run_child("trap_zero_timeout") do |output, pid|
      assert_equal "waiting\n", output.gets
      sleep 0.5
      Process.kill(:USR1, pid)
    end
    assert_equal "Lockyard::TimeoutError", kind
    assert_in_delta 0.5, took, 0.8
  end

  def test_a_wait_that_gives_up_on_a_slow_network_leaves_no_place_behind
    slow = SilentProxy.new(redis.port, delay: 0.1)
    name = "slow-#{SecureRandom.hex(4)}"
    far = Lockyard::Redis::Lock.new(url: slow.url, name: name)
    assert far.lock(timeout: 3) # free: granted across the slow link
    far.unlock
    holder = new_lock(name: name)
    holder.lock
    started = monotonic
    assert_raises(Lockyard::TimeoutError) { far.lock(timeout: 0.15) }
    # its timeout, plus a few of the link's 200 ms round trips
    assert_operator monotonic - started, :<, 1.5
    sleep 1.0 # its place is given back within a round trip or two
    holder.unlock
    near = new_lock(name: name)
    started = monotonic
    assert near.lock(timeout: 5)
    assert_operator monotonic - started, :<, 0.5
    near.unlock
  ensure
    slow&.close
  end

  private

  def run_child(kase)
    name = "silent-#{SecureRandom.hex(4)}"
    Open3.popen3(RbConfig.ruby, *ruby_include, "-e", CHILD, @proxy.url, name, kase) do |stdin, stdout, stderr, thread|
      assert_equal "ready\n", stdout.gets, -> { stderr.read }
      @proxy.silence!
      stdin.puts
      stdin.flush
      sent_at = monotonic
      yield stdout, thread.pid if block_given?
      line = stdout.gets
      took_here = monotonic - sent_at
      status = thread.value
      assert status.success?, -> { "the child died: #{status.inspect} #{stderr.read}" }
      refute_nil line, "the child printed nothing"
      assert_operator took_here, :<, 3, "the child took #{took_here} s"
      kind, took = line.split
      [kind, Float(took)]
    end
  end
end
