# frozen_string_literal: true

require "test_helper"
require "timeout"

class WaitGroupTest < Minitest::Test
  include LockyardTest

  UUID = /\A\h{8}-\h{4}-4\h{3}-[89ab]\h{3}-\h{12}\z/

  def test_add_takes_slots_up_to_the_limit_and_done_frees_them
    wg = new_group(limit: 2)
    first = wg.add
    second = wg.add(timeout: 0)
    assert_match UUID, first
    refute_equal first, second
    assert_equal 2, wg.count
    error = assert_raises(Lockyard::TimeoutError) { wg.add(timeout: 0) }
    assert_includes error.message, wg.name
    assert_equal true, wg.done(first)
    assert_equal false, wg.done(first), "freed already"
    assert_equal false, wg.done("not a token")
    assert_equal 1, wg.count
    assert wg.done(second)
    assert_equal 0, wg.count
  end

  def test_health_and_fencing_of_a_token
    wg = new_group(limit: 2)
    first = wg.add
    second = wg.add
    assert wg.healthy?(first)
    assert_nil wg.check_health!(first)
    assert_operator wg.fencing_token(second), :>, wg.fencing_token(first)
    wg.done(first)
    refute wg.healthy?(first)
    assert_nil wg.fencing_token(first)
    error = assert_raises(Lockyard::NotLockedError) { wg.check_health!(first) }
    assert_includes error.message, first
    wg.done(second)
  end

  def test_slots_belong_to_the_process_not_the_thread
    wg = new_group(limit: 1)
    token = wg.add
    assert_equal [true, true], Thread.new { [wg.healthy?(token), wg.done(token)] }.value
    assert_equal 0, wg.count
  end

  def test_readers_inspect_and_subclasses
    wg = new_group(name: "readers-#{SecureRandom.hex(4)}", limit: 4, ttl: 2.5, refresh_interval: 0.1,
                   max_refresh_fails: 2, connect_timeout: 0.5)
    assert_equal 4, wg.limit
    assert_equal "#<Lockyard::Redis::WaitGroup name=#{wg.name.inspect} limit=4>", wg.inspect
    subclass = Class.new(Lockyard::Redis::WaitGroup) { def kind = :mine }
    mine = subclass.new(url: redis.url, name: wg.name, limit: 4)
    assert_instance_of subclass, mine
    assert_equal :mine, mine.kind
  end

  def test_synchronize_yields_a_slot_and_returns_the_block_value
    wg = new_group(limit: 3)
    taken = nil
    value = wg.synchronize(timeout: 1) do |slot|
      taken = slot
      assert_instance_of Lockyard::Redis::WaitGroup::Slot, slot
      assert_same wg, slot.group
      assert_match UUID, slot.token
      assert slot.healthy?
      assert_nil slot.check_health!
      assert_equal wg.fencing_token(slot.token), slot.fencing_token
      assert_includes slot.inspect, slot.token
      assert_equal 1, wg.count
      :value
    end
    assert_equal :value, value
    assert_equal 0, wg.count
    refute taken.healthy?
    assert_nil taken.fencing_token
    assert_raises(Lockyard::NotLockedError) { taken.check_health! }
  end

  def test_synchronize_frees_its_slot_on_raise_break_return_and_throw
    wg = new_group(limit: 1)
    assert_raises(ArgumentError) { wg.synchronize { raise ArgumentError } }
    assert_equal 0, wg.count
    assert_equal :broke, [1, 2].each { break wg.synchronize { break :broke } }
    assert_equal 0, wg.count
    token = return_token_from_inside(wg)
    assert_equal false, wg.done(token), "freed already by the return"
    assert_equal :thrown, catch(:out) { wg.synchronize { throw :out, :thrown } }
    assert_equal 0, wg.count
  end

  def test_synchronize_times_out_like_add_and_needs_a_block
    wg = new_group(limit: 1)
    wg.synchronize do
      assert_raises(Lockyard::TimeoutError) { wg.synchronize(timeout: 0.1) { flunk "beyond the limit" } }
      assert_equal 1, wg.count
    end
    assert_raises(ArgumentError) { wg.synchronize }
    assert_equal 0, wg.count
  end

  BAD_INPUT = [
    *BAD_PLACES,
    *BAD_LEASE_OPTIONS,
    { limit: 0 },
    { limit: -1 },
    { limit: 2.5 },
    { limit: "3" },
    { limit: true },
    { limit: nil },
    { limit: 2**32 }
  ].freeze

  def test_bad_input_is_a_config_error_and_writes_nothing
    db = 14
    assert_rejected_writing_nothing(BAD_INPUT, db: db) do |**row|
      Lockyard::Redis::WaitGroup.new(**{ url: redis.url(db), name: "bad-input", limit: 3 }.merge(row))
    end
    wg = Lockyard::Redis::WaitGroup.new(url: redis.url(db), name: "bad-input", limit: 1)
    # Past 100 years is refused, not an overflow (nil waits forever).
    [-1, Float::NAN, Float::INFINITY, 1e19, "1", :forever].each do |timeout|
      assert_raises(Lockyard::ConfigError, timeout.inspect) { wg.add(timeout: timeout) }
      assert_raises(Lockyard::ConfigError, timeout.inspect) { wg.wait(timeout: timeout) }
      assert_raises(Lockyard::ConfigError, timeout.inspect) { wg.synchronize(timeout: timeout) { flunk } }
    end
    [nil, 7, :token].each do |token|
      %i[done healthy? check_health! fencing_token].each do |method|
        error = assert_raises(Lockyard::ConfigError, "#{method}(#{token.inspect})") { wg.public_send(method, token) }
        assert_includes error.message, "token"
      end
    end
    assert_equal 0, redis.call("DBSIZE", db: db)
  end

  def test_unknown_or_missing_keywords_are_argument_errors
    assert_raises(ArgumentError) { new_group(limit: 1, lmit: 2) }
    assert_raises(ArgumentError) { Lockyard::Redis::WaitGroup.new(url: redis.url, name: "no-limit") }
    assert_raises(ArgumentError) { new_group(limit: 1).add(wait: 1) }
    assert_raises(ArgumentError) { new_group(limit: 1).wait(1) }
  end

  def test_unreachable_server_is_a_backend_error_naming_it
    port = TCPServer.open("127.0.0.1", 0) { |server| server.addr[1] }
    wg = Lockyard::Redis::WaitGroup.new(url: "redis://127.0.0.1:#{port}/0", name: "x", limit: 1, connect_timeout: 1)
    [-> { wg.add }, -> { wg.wait }, -> { wg.count }, -> { wg.done("token") },
     -> { wg.synchronize { flunk "entered a slot of an unreachable server" } }].each do |call|
      error = assert_raises(Lockyard::BackendError) { call.call }
      assert_includes error.message, "127.0.0.1:#{port}"
    end
  end

  def test_threads_never_exceed_the_limit_and_reach_it
    wg = new_group(limit: 3)
    inside = 0
    most = 0
    counting = Mutex.new
    threads = Array.new(8) do
      Thread.new do
        15.times do
          wg.synchronize do
            counting.synchronize { most = [most, inside += 1].max }
            sleep 0.002
            counting.synchronize { inside -= 1 }
          end
        end
      end
    end
    threads.each(&:join)
    assert_equal 3, most
    assert_equal 0, wg.count
  end

  def test_done_from_another_group_object_frees_the_slot_and_the_holder_turns_unhealthy
    wg = new_group(limit: 1, ttl: 1)
    token = wg.add
    # Another object has slots of its own, like another process.
    assert_equal true, new_group(name: wg.name, limit: 1).done(token)
    assert_equal 0, wg.count
    assert eventually(1.0) { !wg.healthy?(token) }, "the holder never noticed"
    assert_raises(Lockyard::LockUnhealthyError) { wg.check_health!(token) }
    assert_equal false, wg.done(token)
  end

  def test_wait_returns_promptly_once_no_slot_is_held
    wg = new_group(limit: 3)
    assert_equal true, wg.wait, "nothing held"
    tokens = [wg.add, wg.add]
    assert_equal false, wg.wait(timeout: 0.2)
    freers = tokens.zip([0.1, 0.3]).map { |token, delay| Thread.new { sleep delay; wg.done(token) } }
    started = monotonic
    assert_equal true, wg.wait(timeout: 5)
    assert_in_delta 0.35, monotonic - started, 0.15
    freers.each(&:join)
  end

  def test_timeout_interrupts_a_blocked_add_and_wait_leaving_nothing_held
    wg = new_group(limit: 1)
    token = wg.add
    waiter = new_group(name: wg.name, limit: 1)
    [-> { waiter.add }, -> { waiter.wait }, -> { waiter.synchronize { flunk "beyond the limit" } }].each do |call|
      started = monotonic
      assert_raises(Timeout::Error) { Timeout.timeout(0.3) { call.call } }
      assert_operator monotonic - started, :<, 0.8
    end
    assert_nothing_left_but(wg, token)
  end

  def test_interrupts_at_any_moment_of_synchronize_leave_no_slot_held
    wg = new_group(limit: 1)
    timeouts = 300.times.count do
      Timeout.timeout(rand * 0.003) { wg.synchronize { sleep 0.0005 } }
      false
    rescue Timeout::Error
      true
    end
    assert_operator timeouts, :>, 0
    assert_equal 0, wg.count
  end

  def test_thread_raise_interrupts_a_blocked_add_and_wait_leaving_nothing_held
    wg = new_group(limit: 1)
    token = wg.add
    waiter = new_group(name: wg.name, limit: 1)
    %i[add wait].each do |method|
      blocked = Thread.new do
        waiter.public_send(method)
        :returned
      rescue RuntimeError => e
        e.message
      end
      sleep 0.2
      assert_equal "sleep", blocked.status, "#{method} is waiting"
      raised_at = monotonic
      blocked.raise(RuntimeError, "wake up")
      assert_equal "wake up", blocked.value
      assert_operator monotonic - raised_at, :<, 0.5
    end
    assert_nothing_left_but(wg, token)
  end

  def test_a_forked_child_neither_holds_nor_frees_the_parents_slots
    wg = new_group(limit: 2)
    token = wg.add
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      writer.write(Marshal.dump([wg.healthy?(token), wg.fencing_token(token)]))
      writer.close
      # A normal exit frees none of the parent's slots.
    end
    writer.close
    seen_by_child = Marshal.load(reader.read)
    Process.wait(pid)
    assert_equal [false, nil], seen_by_child
    assert_equal 1, wg.count, "the child freed its parent's slot"
    assert wg.healthy?(token)
    assert wg.done(token)
  end

  def test_ctrl_c_interrupts_a_blocked_add
    wg = new_group(limit: 1)
    token = wg.add
    script = <<~RUBY
      require "lockyard"
      wg = Lockyard::Redis::WaitGroup.new(url: #{redis.url.dump}, name: #{wg.name.dump}, limit: 1)
      $stdout.puts "waiting"
      $stdout.flush
      begin
        wg.add
      rescue Interrupt
        $stdout.puts "interrupted"
      end
    RUBY
    assert_equal "interrupted\n", line_after_ctrl_c(script)
    assert_nothing_left_but(wg, token)
  end

  private

  def new_group(name: "wg-#{SecureRandom.hex(6)}", **options)
    Lockyard::Redis::WaitGroup.new(url: redis.url, name: name, **options)
  end

  def return_token_from_inside(wg)
    wg.synchronize { |slot| return slot.token }
  end

  def eventually(seconds)
    deadline = monotonic + seconds
    sleep 0.02 until (done = yield) || monotonic > deadline
    done
  end

  # Only `token` was held: no waiter is queued and a newcomer gets the
  # slot at once once it is freed; then only the fencing counter is left.
  def assert_nothing_left_but(wg, token)
    assert_equal 1, wg.count
    assert_equal 0, redis.call("ZCARD", "lockyard:{#{wg.name}}:queue")
    assert wg.done(token)
    assert wg.done(wg.add(timeout: 0)), "a ghost waiter was handed the freed slot"
    fence = ["lockyard:{#{wg.name}}:fence"]
    assert eventually(1.0) { redis.call("KEYS", "lockyard:{#{wg.name}}:*") == fence },
           redis.call("KEYS", "lockyard:{#{wg.name}}:*").inspect
  end
end
