# frozen_string_literal: true

# A drop-in for the gem distributed-lock-google-cloud-storage: change
#
#   require "distributed-lock-google-cloud-storage"
#
# to +require "lockyard/compat"+ and DistributedLock::GoogleCloudStorage::Lock,
# its options, methods, error classes and log lines keep working, on
# lockyard's core. What it keeps of the gem:
#
# - its defaults: a Logger on $stderr per lock, +lock+ waiting twice the TTL;
# - its errors: a bad option is an ArgumentError (and still a
#   Lockyard::ConfigError); when google-cloud-errors is installed, a failed
#   request is a Google::Cloud::Error of the matching class (and still a
#   Lockyard::BackendError);
# - every +cloud_storage_options+ key of Google::Cloud::Storage.new, taken,
#   ignored for a stated reason or rejected by name
#   ({Lockyard::GCS::StorageOptions});
# - one hold per Lock object: +unlock+, +abandon+, +healthy?+ and
#   +check_health!+ from any thread act on it, and it outlives the thread
#   that took it, as in the gem.
#
# What it changes: without +instance_identity_prefix+, each Lock object has
# an identity of its own (the gem's default is shared by a whole process,
# so two Lock objects on one path in one thread took each other's lock).
# Pass the same prefix explicitly to recover your own abandoned lock at once.
require "logger"
require "lockyard"
begin
  require "google/cloud/errors"
rescue LoadError
  nil # failed requests are then Lockyard::BackendError alone, as without compat
end

module Lockyard
  # Marks an error of lockyard/compat that inherits from a class a gem user
  # rescues (ArgumentError, a Google::Cloud::Error) and stands for the
  # lockyard class +lockyard_class+.
  #
  # Ruby has single inheritance: such an error cannot also inherit from
  # Lockyard::Error. +rescue+ asks +Class#===+, so lockyard's own classes
  # are made to match these errors too (ForeignErrorMatching). Only ===
  # of classes lockyard owns is widened, never that of ArgumentError or
  # Google's: the gem user's +rescue+ and +is_a?+ see true inheritance,
  # code that rescues lockyard classes sees them through ===.
  # @api private
  module ForeignError
    # @return [Class] the Lockyard::Error subclass this error stands for
    def lockyard_class
      self.class::LOCKYARD_CLASS
    end
  end

  # Prepended to Lockyard::Error's singleton class, so it serves every
  # subclass's === as well. It asks ForeignError === rather than the
  # object's is_a?, which a BasicObject (or a proxy) lacks: +case+ and
  # +grep+ on any object answer as they did without compat.
  # @api private
  module ForeignErrorMatching
    def ===(error)
      super || (ForeignError === error && error.lockyard_class.ancestors.include?(self)) # rubocop:disable Style/CaseEquality
    end
  end
  Error.singleton_class.prepend(ForeignErrorMatching)
end

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

    # A bad option: the gem raised ArgumentError.
    class ConfigError < ArgumentError
      include Lockyard::ForeignError
      LOCKYARD_CLASS = Lockyard::ConfigError
    end

    # A failed request as the gem raised it: a Google::Cloud::Error of the
    # class google-cloud-storage gives that HTTP status. Empty without
    # google-cloud-errors.
    module ServiceErrors
      CLASS_BY_STATUS = {
        400 => :InvalidArgumentError, 401 => :UnauthenticatedError, 403 => :PermissionDeniedError,
        404 => :NotFoundError, 409 => :AlreadyExistsError, 412 => :FailedPreconditionError,
        429 => :ResourceExhaustedError, 499 => :CanceledError, 500 => :InternalError,
        501 => :UnimplementedError, 503 => :UnavailableError, 504 => :DeadlineExceededError
      }.freeze

      if defined?(Google::Cloud::Error)
        [:Error, *CLASS_BY_STATUS.values].each do |name|
          next unless Google::Cloud.const_defined?(name)

          const_set(name, Class.new(Google::Cloud.const_get(name)) do
            include Lockyard::ForeignError
            const_set(:LOCKYARD_CLASS, Lockyard::BackendError)
          end)
        end
      end

      # The class for +error+ (a Lockyard::BackendError), nil without
      # google-cloud-errors. The status is read from the core's message
      # ("... HTTP 404 Not Found ..."); a failure to get a token is
      # UnauthenticatedError; anything else (unreachable, no reply) is the
      # base Google::Cloud::Error.
      def self.for(error)
        return nil unless const_defined?(:Error, false)

        status = error.message[/\bHTTP (\d{3})\b/, 1]&.to_i
        name = CLASS_BY_STATUS[status]
        name ||= :UnauthenticatedError if error.message.match?(/credential|access token/i)
        name && const_defined?(name, false) ? const_get(name, false) : const_get(:Error, false)
      end
    end

    # The gem's class: its defaults (a logger on $stderr, +lock+ waiting
    # twice the TTL) and errors over {Lockyard::GCS::Lock} with one hold per
    # object.
    class Lock < Lockyard::GCS::Lock
      # The gem's process-wide prefix: same value for the whole process, a
      # new one in a forked child. No longer the default (see above).
      def self.default_instance_identity_prefix
        @prefix_without_pid ||= format("%024x", rand(2**96))
        "#{@prefix_without_pid}-#{Process.pid}"
      end

      # @raise [ConfigError] an ArgumentError that is also a Lockyard::ConfigError
      def self.new(logger: Logger.new($stderr), **options)
        super(logger: logger, hold_per_instance: true, **options)
      rescue Lockyard::ConfigError => e
        raise ConfigError, e.message
      end

      def lock(timeout: 2 * ttl)
        gem_errors { super }
      end

      def synchronize(timeout: 2 * ttl, &block)
        super
      end

      def unlock
        gem_errors { super }
      end

      def locked_according_to_server?
        gem_errors { super }
      end

      def owned_according_to_server?
        gem_errors { super }
      end

      private

      def gem_errors
        yield
      rescue Lockyard::BackendError => e
        service_error = ServiceErrors.for(e)
        raise unless service_error

        raise service_error, e.message
      end
    end
  end
end
