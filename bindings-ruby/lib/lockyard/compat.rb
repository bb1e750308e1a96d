# frozen_string_literal: true

# A drop-in for the gem distributed-lock-google-cloud-storage: change
#
#   require "distributed-lock-google-cloud-storage"
#
# to +require "lockyard/compat"+ and DistributedLock::GoogleCloudStorage::Lock,
# its options, methods and error classes keep working, on lockyard's core.
require "logger"
require "lockyard"

module DistributedLock
  module GoogleCloudStorage
    DEFAULT_TTL = 5 * 60
    DEFAULT_MAX_REFRESH_FAILS = 3
    DEFAULT_BACKOFF_MIN = 1
    DEFAULT_BACKOFF_MAX = 30
    DEFAULT_BACKOFF_MULTIPLIER = 2

    Error = Lockyard::Error
    TimeoutError = Lockyard::TimeoutError
    AlreadyLockedError = Lockyard::AlreadyLockedError
    NotLockedError = Lockyard::NotLockedError
    LockUnhealthyError = Lockyard::LockUnhealthyError
    class LockError < Lockyard::Error; end
    class MetadataParseError < Lockyard::Error; end
    class BucketNotFoundError < Lockyard::BackendError; end

    # The gem's class: its defaults (a logger on $stderr, +lock+ waiting
    # twice the TTL) over {Lockyard::GCS::Lock}.
    class Lock < Lockyard::GCS::Lock

      # Same value for the whole process, a new one in a forked child.
      def self.default_instance_identity_prefix
        @prefix_without_pid ||= format("%024x", rand(2**96))
        "#{@prefix_without_pid}-#{Process.pid}"
      end

      def self.new(logger: Logger.new($stderr), instance_identity_prefix: default_instance_identity_prefix,
                   **options)
        super(logger: logger, instance_identity_prefix: instance_identity_prefix, **options)
      end

      def lock(timeout: 2 * ttl)
        super
      end

      def synchronize(timeout: 2 * ttl, &block)
        super
      end
    end
  end
end
