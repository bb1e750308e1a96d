# frozen_string_literal: true

module Lockyard
  # A read/write lock over N independent Redis servers (minio's dsync).
  module Quorum
    # Many readers or one writer, granted by a quorum of the servers, so it
    # keeps working while up to (n-1)/2 of them are down or unreachable.
    # Each thread is a separate holder; held locks are refreshed in the
    # background, and {#healthy?} / {#check_health!} tell whether the hold
    # may have been lost. A Thread that dies holding it releases it, with a
    # warning ({Lockyard::ThreadWatch}).
    #
    #   lock = Lockyard::Quorum::RwLock.new(urls: %w[redis://a:6379 redis://b:6379 redis://c:6379],
    #                                       name: "index")
    #   lock.with_write_lock { lock.check_health!; rebuild(fencing_token: lock.fencing_token) }
    #   lock.with_read_lock { search }
    #
    # Durations are seconds (Integer or Float): a ttl, lock_delay,
    # refresh_interval or connect/request timeout at most 30 days, a wait's
    # timeout at most 100 years (nil waits forever). Bad arguments (no URLs, more
    # than 32, one server twice) raise {Lockyard::ConfigError} before any
    # network access.
    class RwLock
      # Options left nil take the core's defaults, stated with each.
      # @param urls [Array<String>] one redis:// URL per independent server (1 to 32)
      # @param name [String] the lock's name; holders of the same name exclude each other
      # @param ttl [Numeric, nil] how long each server keeps a grant after its holder's last
      #   refresh (default 30)
      # @param timeout [Numeric, nil] wait of {#with_write_lock} and {#with_read_lock}; nil waits forever
      # @param refresh_interval [Numeric, nil] refresh period, below ttl / max_refresh_fails
      #   (default: a third of that)
      # @param max_refresh_fails [Integer, nil] refreshes in a row that reach no quorum before the
      #   lock turns unhealthy (default 3)
      # @param connect_timeout [Numeric, nil] how long connecting to a server may take (default 5)
      # @raise [Lockyard::ConfigError]
      def self.new(urls:, name:, ttl: nil, timeout: nil, refresh_interval: nil, max_refresh_fails: nil,
                   connect_timeout: nil)
        build(urls, name, ttl, timeout, refresh_interval, max_refresh_fails, connect_timeout)
      end
      private_class_method :build

      # Waits for the write lock.
      # @param timeout [Numeric, nil] seconds to wait; nil waits forever, 0 tries once
      # @return [Boolean] true once held, false when the timeout ran out
      # @raise [Lockyard::AlreadyLockedError] if this thread holds the lock already
      # @raise [Lockyard::BackendError] when fewer servers than a quorum answer
      def acquire_write(timeout: nil)
        acquire(true, timeout)
      end

      # Waits for a read lock, shared with other readers; like {#acquire_write}.
      def acquire_read(timeout: nil)
        acquire(false, timeout)
      end

      # Holds the write lock for the block and releases it however the block
      # is left (exception, break, return, throw). If releasing fails after
      # the block raised, the block's exception propagates and the failure
      # is only warned about.
      # @raise [Lockyard::TimeoutError] when `timeout` runs out
      # @return the block's value
      def with_write_lock(timeout: default_timeout, &block)
        hold(true, timeout, &block)
      end

      # Holds a read lock for the block, like {#with_write_lock}.
      def with_read_lock(timeout: default_timeout, &block)
        hold(false, timeout, &block)
      end

      # @!method release
      #   Releases the calling thread's read or write lock.
      #   @return [Boolean] false if it had been lost meanwhile
      #   @raise [Lockyard::NotLockedError] if this thread holds nothing
      # @!method healthy?
      #   Whether this thread holds the lock and its lease is surely live on a
      #   quorum. Reads a flag; never touches the servers.
      # @!method check_health!
      #   @raise [Lockyard::NotLockedError] if this thread holds nothing
      #   @raise [Lockyard::LockUnhealthyError] if the hold may have been lost
      # @!method fencing_token
      #   @return [Integer, nil] the write lock's token, strictly increasing across
      #     write holders; nil for a read lock or when not held
      # @!method nodes
      #   @return [Array<String>] the servers' URLs, as given
      # @!method name
      #   @return [String]
      # @!method default_timeout
      #   @return [Float, nil] the constructor's +timeout+

      def inspect
        "#<#{self.class} name=#{name.inspect} nodes=#{nodes.size}>"
      end

      private

      def hold(write, timeout)
        raise ArgumentError, "a block is needed" unless block_given?

        # Interrupts are let in only while waiting and inside the block, so
        # none can land between the grant and the ensure that gives it back.
        Thread.handle_interrupt(Exception => :never) do
          held_before = held_by_this_thread?
          Lockyard.give_back_after(-> { release if !held_before && held_by_this_thread? }) do
            Thread.handle_interrupt(Exception => :immediate) do
              unless acquire(write, timeout)
                raise Lockyard::TimeoutError, "timed out after #{timeout}s waiting for rw lock #{name.inspect}"
              end

              yield
            end
          end
        end
      end
    end
  end
end
