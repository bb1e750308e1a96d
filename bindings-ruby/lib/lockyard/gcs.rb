# frozen_string_literal: true

require "logger"
require_relative "gcs/storage_options"

module Lockyard
  # Primitives on Google Cloud Storage.
  module GCS
    # A distributed lock on one object in a Cloud Storage bucket: the lock
    # of the gem distributed-lock-google-cloud-storage, with every option
    # and method of it, and its known flaws fixed (preconditions on
    # generation and metageneration, waiters that only read, staleness by
    # the server's clock, the object generation as fencing token).
    #
    #   lock = Lockyard::GCS::Lock.new(bucket_name: "my-bucket", path: "locks/deploy")
    #   lock.synchronize do
    #     lock.check_health!   # periodically, before each step that must not run twice
    #   end
    #
    # Durations are seconds (Integer or Float): a ttl, refresh_interval,
    # backoff or request timeout at most 30 days, a wait's
    # timeout at most 100 years (nil waits forever). Bad arguments raise
    # {Lockyard::ConfigError} before any request.
    class Lock
      include Lockyard::Synchronize

      # Options left nil take the core's defaults, stated with each.
      # @param bucket_name [String] an existing bucket
      # @param path [String] the lock object's name in it
      # @param instance_identity_prefix [String, nil] identities are +<prefix>/<thread>+;
      #   the default is random hex and the pid. The same prefix recovers its own
      #   abandoned lock at once.
      # @param thread_safe [Boolean, nil] false: all threads share one identity and one hold
      #   (which then outlives the thread that took it); true: a Thread that dies
      #   holding the lock releases it, with a warning ({Lockyard::ThreadWatch}) (default true)
      # @param logger [Logger, nil] receives this lock's progress with the gem's levels,
      #   instead of {Lockyard.logger}
      # @param logger_mutex [Mutex] serializes writes to +logger+
      # @param ttl [Numeric, nil] a hold not refreshed for this long is stale (default 300)
      # @param refresh_interval [Numeric, nil] below ttl / max_refresh_fails
      #   (default: ttl / (max_refresh_fails * 3))
      # @param max_refresh_fails [Integer, nil] consecutive transient refresh failures
      #   that make the lock unhealthy (default 3)
      # @param backoff_min [Numeric, nil] first and least wait of a waiter (default 1)
      # @param backoff_max [Numeric, nil] longest wait of a waiter (default 30)
      # @param backoff_multiplier [Numeric, nil] growth of the waits, with decorrelated jitter
      #   (default 2)
      # @param object_acl [String, Symbol, nil] predefined ACL of the lock object
      # @param cloud_storage_options [Hash, nil] the keywords of +Google::Cloud::Storage.new+:
      #   +credentials+/+keyfile+ (a credentials file's path, its JSON as a Hash:
      #   service-account key, authorized_user, impersonated_service_account or
      #   external_account, or a Google::Auth::Credentials made from a service-account
      #   key or a refresh token), +endpoint+, +timeout+ (or the longest of
      #   +open_timeout+/+read_timeout+/+send_timeout+), +scope+ (checked: it must
      #   allow writing), and +emulator_host+; +project_id+, the retry knobs and
      #   +upload_chunk_size+ are accepted and ignored ({StorageOptions::IGNORED} says why)
      # @param cloud_storage_bucket_options [Hash, nil] +user_project+ (a project id);
      #   +skip_lookup+ and the lookup's preconditions are ignored
      # @param timeout [Numeric, nil] default wait of {#lock}; nil waits forever
      # @param hold_per_instance [Boolean, nil] true: the gem's semantics, where the lock
      #   object has one hold at a time and +unlock+, +abandon+, +healthy?+ and
      #   +check_health!+ from any thread act on it, and it outlives the thread that
      #   took it (default false: each thread reaches only its own hold)
      # @raise [Lockyard::ConfigError]
      def self.new(bucket_name:, path:, instance_identity_prefix: nil, thread_safe: nil,
                   logger: nil, logger_mutex: Mutex.new, ttl: nil, refresh_interval: nil,
                   max_refresh_fails: nil, backoff_min: nil, backoff_max: nil, backoff_multiplier: nil,
                   object_acl: nil, cloud_storage_options: nil, cloud_storage_bucket_options: nil,
                   timeout: nil, hold_per_instance: nil)
        options = {
          instance_identity_prefix: instance_identity_prefix, thread_safe: thread_safe,
          hold_per_instance: hold_per_instance,
          ttl: ttl, refresh_interval: refresh_interval, max_refresh_fails: max_refresh_fails,
          backoff_min: backoff_min, backoff_max: backoff_max, backoff_multiplier: backoff_multiplier,
          object_acl: object_acl&.to_s, timeout: timeout
        }
        options.merge!(StorageOptions.translate(cloud_storage_options, cloud_storage_bucket_options))
        return build(bucket_name, path, options) unless logger

        number = Logs.register(logger, logger_mutex)
        begin
          lock = build(bucket_name, path, options.merge(logger_number: number))
        rescue Exception # rubocop:disable Lint/RescueException
          Logs.unregister(number)
          raise
        end
        ObjectSpace.define_finalizer(lock, forget_logger(number))
        lock
      end

      private_class_method :build

      # Waits until the calling thread holds the lock (the gem's +lock+).
      # @param timeout [Numeric, nil] seconds; nil waits forever, 0 tries once
      # @return [nil]
      # @raise [Lockyard::TimeoutError] @raise [Lockyard::AlreadyLockedError]
      # @raise [Lockyard::BackendError] missing bucket, bad credentials, unreachable
      def lock(timeout: default_timeout)
        acquire(timeout)
        nil
      end

      # The last error that made a refresh fail, kept after the lock heals
      # or is released (nil if none ever did).
      # @return [Lockyard::LockUnhealthyError, nil]
      def last_refresh_error
        message = refresh_error_message
        message && LockUnhealthyError.new(message)
      end

      # @!method healthy?
      #   Whether the calling thread's hold is healthy: refreshes succeed and
      #   its lease has not run out. Reads a flag; cheap in a loop. With
      #   +hold_per_instance+, this, {#unlock}, {#abandon} and {#check_health!}
      #   act on the hold of whichever thread took it.
      #   @raise [Lockyard::NotLockedError] if this thread does not hold the lock
      # @!method try_lock
      #   One attempt, never waits. @return [Boolean]
      # @!method unlock
      #   Deletes exactly the object version this thread holds.
      #   @return [Boolean] false if the server no longer had it (it went stale
      #     and was taken over, or was deleted)
      #   @raise [Lockyard::NotLockedError] if this thread does not hold it
      # @!method abandon
      #   Forgets this thread's hold without touching the server; stops refreshing.
      # @!method check_health!
      #   @raise [Lockyard::NotLockedError] @raise [Lockyard::LockUnhealthyError]
      # @!method owned_according_to_server?
      #   Asks the server whether this thread's identity holds the lock.
      # @!method locked_according_to_server?
      #   Asks the server whether the lock object exists.
      # @!method owned_according_to_internal_state?
      #   Whether this thread holds it, by this process's own state.
      # @!method locked_according_to_internal_state?
      #   Whether any thread of this process holds it, by its own state.
      # @!method fencing_token
      #   @return [Integer, nil] the object generation of this thread's hold
      # @!method identity
      #   @return [String] this thread's holder identity

      def inspect
        token = fencing_token
        "#<#{self.class} identity=#{identity.inspect}#{token ? " fencing_token=#{token}" : ""}>"
      end

      private

      def held_by_this_thread?
        owned_according_to_internal_state?
      end

      # Records for +logger+ go through {Lockyard::Logs}; the finalizer that
      # forgets the logger is made by a class method, so that it does not
      # refer to the lock, which can then still be collected.
      def self.forget_logger(number)
        proc { Logs.unregister(number) }
      end
      private_class_method :forget_logger
    end
  end
end
