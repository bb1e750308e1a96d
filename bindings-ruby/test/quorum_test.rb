# frozen_string_literal: true

require "test_helper"
require "timeout"

# Lockyard::Quorum::RwLock on five private redis-servers: the API shape,
# the block forms, and the errors.
class QuorumTest < Minitest::Test
  include LockyardTest

  def self.nodes
    @nodes ||= Array.new(5) { RedisServer.new }.tap do |servers|
      Minitest.after_run { servers.each(&:stop) }
    end
  end

  def urls
    self.class.nodes.map(&:url)
  end

  def new_rw_lock(name: "rw-#{SecureRandom.hex(6)}", **options)
    Lockyard::Quorum::RwLock.new(urls: urls, name: name, ttl: 5, **options)
  end

  def in_thread(&block)
    Thread.new(&block).value
  end

  def test_with_write_lock_excludes_everyone_and_returns_the_blocks_value
    lock = new_rw_lock
    assert_equal urls, lock.nodes
    value = lock.with_write_lock do
      assert lock.healthy?
      assert_nil lock.check_health!
      assert_kind_of Integer, lock.fencing_token
      assert_equal false, in_thread { lock.acquire_write(timeout: 0) }
      assert_equal false, in_thread { lock.acquire_read(timeout: 0) }
      :done
    end
    assert_equal :done, value
    refute lock.healthy?
    assert_nil lock.fencing_token
  end

  def test_readers_share_a_read_lock
    lock = new_rw_lock
    lock.with_read_lock do
      assert_nil lock.fencing_token
      assert_equal true, in_thread { lock.acquire_read(timeout: 0).tap { lock.release } }
      assert_equal false, in_thread { lock.acquire_write(timeout: 0) }
    end
  end

  def test_fencing_tokens_increase_across_write_holders
    lock = new_rw_lock
    other = new_rw_lock(name: lock.name)
    first = lock.with_write_lock { lock.fencing_token }
    second = other.with_write_lock { other.fencing_token }
    assert_operator second, :>, first
  end

  def test_with_write_lock_raises_timeout_error_and_releases_on_exceptions
    holder = new_rw_lock
    waiter = new_rw_lock(name: holder.name, timeout: 0.2)
    assert_raises(RuntimeError) { holder.with_read_lock { raise "boom" } }
    assert_equal true, holder.acquire_read(timeout: 1)
    started = monotonic
    assert_raises(Lockyard::TimeoutError) { waiter.with_write_lock { flunk "entered" } }
    assert_operator monotonic - started, :>=, 0.2
    assert_equal true, holder.release
    waiter.with_write_lock { assert waiter.healthy? }
  end

  def test_a_thread_that_dies_holding_the_write_lock_releases_it
    # Refreshed every 0.6 s while kept: the 1.5 s wait cannot outlast it.
    lease = { name: "rw-#{SecureRandom.hex(6)}", ttl: 2, refresh_interval: 0.6 }
    lock = Lockyard::Quorum::RwLock.new(urls: urls, **lease)
    other = Lockyard::Quorum::RwLock.new(urls: urls, **lease)
    _, warned = capture_io do
      Thread.new { lock.acquire_write }.join
      started = monotonic
      assert other.acquire_write(timeout: 1.5), "the dead thread's write lock was kept"
      assert_operator monotonic - started, :<, 1
      other.release
    end
    assert_match(/released rw lock "#{lease[:name]}"/, warned)
  end

  def test_misuse_raises_typed_errors
    lock = new_rw_lock
    assert_raises(Lockyard::NotLockedError) { lock.release }
    assert_raises(Lockyard::NotLockedError) { lock.check_health! }
    lock.with_read_lock do
      assert_raises(Lockyard::AlreadyLockedError) { lock.acquire_write(timeout: 0) }
    end
    assert_raises(ArgumentError) { Lockyard::Quorum::RwLock.new(urls: urls, name: "x", bogus: 1) }
  end

  # Issue 16: durations out of range are ConfigErrors, not a fatal overflow.
  def test_durations_out_of_range_are_config_errors
    lock = new_rw_lock
    assert_raises(Lockyard::ConfigError) { lock.acquire_write(timeout: 1e19) }
    assert_raises(Lockyard::ConfigError) { lock.acquire_read(timeout: 1e19) }
    assert_raises(Lockyard::NotLockedError) { lock.release }
    assert_raises(Lockyard::ConfigError) { Lockyard::Quorum::RwLock.new(urls: urls, name: "x", ttl: 1e19) }
  end

  def test_bad_node_lists_are_config_errors
    [[], Array.new(33) { |i| "redis://127.0.0.1:#{7000 + i}" },
     ["redis://127.0.0.1:7001", "redis://127.0.0.1:7001/0"], "redis://127.0.0.1:7001", [7001]].each do |bad|
      assert_raises(Lockyard::ConfigError, bad.inspect) do
        Lockyard::Quorum::RwLock.new(urls: bad, name: "x")
      end
    end
  end

  def test_an_unreachable_majority_is_a_backend_error_naming_how_many_answered
    dead = Array.new(3) { |i| "redis://127.0.0.1:#{free_port_for_test + i}" }
    lock = Lockyard::Quorum::RwLock.new(urls: urls.first(2) + dead, name: "majority-down")
    error = assert_raises(Lockyard::BackendError) { lock.acquire_write(timeout: 2) }
    assert_match(/only 2 of 5 nodes answered/, error.message)
  end

  def test_timeout_interrupts_a_wait
    holder = new_rw_lock
    waiter = new_rw_lock(name: holder.name)
    assert holder.acquire_write(timeout: 1)
    started = monotonic
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { waiter.acquire_read } }
    assert_operator monotonic - started, :<, 1.5
    refute waiter.healthy?
  ensure
    holder.release
  end

  private

  def free_port_for_test
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end
end
