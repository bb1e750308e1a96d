# frozen_string_literal: true

module Lockyard
  # Primitives on a Redis server or Redis Cluster.
  module Redis
    # A distributed mutual-exclusion lock. Each Fiber (so each Thread) is a
    # separate holder, as with Ruby's Mutex: one Lock shared by threads or
    # fibers excludes them from each other exactly as it excludes other
    # processes and hosts. While held, the lock is refreshed
    # in the background; {#healthy?} and {#check_health!} tell whether it
    # may have been lost.
    #
    #   lock = Lockyard::Redis::Lock.new(url: "redis://127.0.0.1:6379/0", name: "deploy")
    #   lock.synchronize(timeout: 10) do
    #     lock.check_health!
    #     publish(fencing_token: lock.fencing_token)
    #   end
    #
    # Durations are seconds (Integer or Float). Bad arguments raise
    # {Lockyard::ConfigError} before any network access.
    class Lock
      include Lockyard::Synchronize

      # @param url [String] redis://, rediss:// or unix:// URL
      # @param name [String] the lock's name; holders of the same name exclude each other
      # @param ttl [Numeric] how long the lock outlives its holder's last refresh
      # @param timeout [Numeric, nil] default wait of {#lock} and {#synchronize}; nil waits forever
      # @param refresh_interval [Numeric, nil] refresh period, below ttl / max_refresh_fails
      #   (default: a third of that)
      # @param max_refresh_fails [Integer] consecutive failed refreshes that make the lock unhealthy
      # @param identity_prefix [String, nil] prefix of holder identities (default: random)
      # @param connect_timeout [Numeric] how long connecting may take before the server counts as unreachable
      # @raise [Lockyard::ConfigError]
      def self.new(url:, name:, ttl: 30, timeout: nil, refresh_interval: nil, max_refresh_fails: 3,
                   identity_prefix: nil, connect_timeout: 5)
        build(url, name, ttl, timeout, refresh_interval, max_refresh_fails, identity_prefix, connect_timeout)
      end
      private_class_method :build

      # Waits until the calling thread holds the lock.
      # @param timeout [Numeric, nil] seconds to wait; nil waits forever, 0 tries once
      # @return [true]
      # @raise [Lockyard::TimeoutError] when the wait runs out
      # @raise [Lockyard::AlreadyLockedError] if this thread holds it already
      # @raise [Lockyard::BackendError] if the server cannot be reached
      def lock(timeout: default_timeout)
        acquire(timeout)
      end

      # @!method try_lock
      #   One attempt, never waits.
      #   @return [Boolean] true if the calling thread now holds the lock
      #   @raise [Lockyard::AlreadyLockedError] if this thread holds it already
      # @!method unlock
      #   Releases the calling thread's hold.
      #   @return [Boolean] false if the lock had been lost meanwhile (its lease ran
      #     out or another holder took over): what it protects may have been touched
      #   @raise [Lockyard::NotLockedError] if this thread does not hold it
      # @!method healthy?
      #   Whether this thread holds the lock and its lease is surely still live.
      #   Reads a flag; never touches the server, so it is cheap in a loop.
      # @!method check_health!
      #   @return [nil]
      #   @raise [Lockyard::NotLockedError] if this thread does not hold the lock
      #   @raise [Lockyard::LockUnhealthyError] if it may have been lost
      # @!method owned?
      #   Asks the server whether the calling thread holds the lock.
      # @!method locked?
      #   Asks the server whether anyone holds the lock.
      # @!method fencing_token
      #   @return [Integer, nil] the calling thread's grant number: strictly
      #     increasing across all holders of this name, so a protected resource
      #     can reject writes from a holder that lost the lock
      # @!method name
      #   @return [String]
      # @!method identity
      #   @return [String] the calling thread's holder identity, +<prefix>-<pid>/<thread>+
      # @!method default_timeout
      #   @return [Float, nil] the constructor's +timeout+

      def inspect
        token = fencing_token
        held = token ? " fencing_token=#{token}" : ""
        "#<#{self.class} name=#{name.inspect}#{held}>"
      end

      private

      # Local state only: true from a grant until {#unlock}, even if the
      # lock was lost meanwhile.
      def held_by_this_thread?
        !fencing_token.nil?
      end
    end
  end
end
