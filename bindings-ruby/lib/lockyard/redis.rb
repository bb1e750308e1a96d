# frozen_string_literal: true

module Lockyard
  # Primitives on a Redis server or Redis Cluster.
  module Redis
    # A distributed mutual-exclusion lock. Each Fiber (so each Thread) is a
    # separate holder, as with Ruby's Mutex: one Lock shared by threads or
    # fibers excludes them from each other exactly as it excludes other
    # processes and hosts. While held, the lock is refreshed
    # in the background; {#healthy?} and {#check_health!} tell whether it
    # may have been lost. A Thread that dies holding it releases it, with a
    # warning, as a dead Thread's Mutex is unlocked ({Lockyard::ThreadWatch}).
    #
    #   lock = Lockyard::Redis::Lock.new(url: "redis://127.0.0.1:6379/0", name: "deploy")
    #   lock.synchronize(timeout: 10) do
    #     lock.check_health!
    #     publish(fencing_token: lock.fencing_token)
    #   end
    #
    # Durations are seconds (Integer or Float): a ttl, lock_delay,
    # refresh_interval or connect/request timeout at most 30 days, a wait's
    # timeout at most 100 years (nil waits forever). Bad arguments raise
    # {Lockyard::ConfigError} before any network access.
    class Lock
      include Lockyard::Synchronize

      # Options left nil take the core's defaults, stated with each.
      # @param url [String] redis://, rediss://, unix:// or redis+sentinel:// URL (see the README)
      # @param name [String] the lock's name; holders of the same name exclude each other
      # @param ttl [Numeric, nil] how long the lock outlives its holder's last refresh
      #   (default 30; a lock under a session has none of its own)
      # @param timeout [Numeric, nil] default wait of {#lock} and {#synchronize}; nil waits forever
      # @param refresh_interval [Numeric, nil] refresh period, below ttl / max_refresh_fails
      #   (default: a third of that)
      # @param max_refresh_fails [Integer, nil] consecutive failed refreshes that make the lock
      #   unhealthy (default 3)
      # @param identity_prefix [String, nil] prefix of holder identities (default: random)
      # @param connect_timeout [Numeric, nil] how long connecting may take before the server
      #   counts as unreachable (default 5)
      # @param session [Lockyard::Redis::Session, nil] hold the lock under this session: it lives
      #   exactly as long as the session and shares its health
      # @param value [String, nil] stored with each grant under a session (see {Redis.holder})
      # @raise [Lockyard::ConfigError]
      def self.new(url:, name:, session: nil, value: nil, ttl: nil, timeout: nil,
                   refresh_interval: nil, max_refresh_fails: nil, identity_prefix: nil, connect_timeout: nil)
        lock = build(url, name, ttl, timeout, refresh_interval, max_refresh_fails, identity_prefix, connect_timeout,
                     session, value)
        # The lock lives under the session: collecting the session while
        # the lock is in use would destroy it under the lock's holder.
        lock.instance_variable_set(:@session, session) if session
        lock
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

    # A lease that locks and elections live under, renewed in the background
    # every ttl / 2. Locks under it have no TTL of their own: they live
    # exactly as long as the session, share its health, and are freed at
    # once by {#destroy}. A session lost without {#destroy} (its process
    # crashed or paused past ttl) bars its locks for +lock_delay+ more seconds.
    # After {#destroy} only self-expiring keys stay in Redis: each name's
    # fencing counter, a value kept by "release", an election's terms.
    #
    #   Lockyard::Redis::Session.open(url: url, ttl: 15) do |session|
    #     Lockyard::Redis.each_exclusive(url: url, names: tasks, session: session) { |task| run(task) }
    #   end
    class Session
      # Options left nil take the core's defaults, stated with each.
      # @param url [String] redis://, rediss://, unix:// or redis+sentinel:// URL (see the README)
      # @param ttl [Numeric, nil] how long the session outlives its last renewal
      #   (default 15; at least 0.01)
      # @param behavior [String, nil] what the session's end does to its locks' values:
      #   "release" keeps each readable by {Redis.holder} until the name is taken again
      #   (at most an hour), "delete" deletes it (default "release")
      # @param lock_delay [Numeric, nil] how long a lost session's locks stay barred; 0 disables it
      #   (default 15)
      # @param connect_timeout [Numeric, nil] (default 5)
      # @raise [Lockyard::ConfigError] for a bad value
      # @raise [Lockyard::BackendError] if the server cannot be reached
      def self.new(url:, ttl: nil, behavior: nil, lock_delay: nil, connect_timeout: nil)
        build(url, ttl, behavior, lock_delay, connect_timeout)
      end
      private_class_method :build

      # Creates a session, yields it, and destroys it however the block is
      # left; if destroying fails after the block raised, the block's
      # exception propagates and the failure is only warned about.
      # @return the block's value
      def self.open(**options)
        session = new(**options)
        Lockyard.give_back_after(-> { session.destroy }) { yield session }
      end

      # @!method destroy
      #   Frees every lock held under the session at once (no lock_delay),
      #   deletes it from Redis and stops renewing it. Idempotent. In a process
      #   forked from the one that created it, frees only that process's own
      #   locks under it and leaves the session to its creator.
      # @!method healthy?
      #   Whether the session is surely live: not destroyed, not lost, renewed in time.
      # @!method check_health!
      #   @raise [Lockyard::LockUnhealthyError] if it was destroyed or may be lost
      # @!method id
      #   @return [String] the session's random id, for logs
      # @!method ttl
      # @!method lock_delay
      # @!method behavior

      def inspect
        "#<#{self.class} id=#{id} healthy=#{healthy?}>"
      end
    end

    # One change of leadership (see {Lockyard::Term}).
    Term = Lockyard::Term

    # Leader election under a session: the leader holds the lock +name+
    # with its value, and every term carries a fencing token. The methods
    # are {Lockyard::Leadership}'s.
    #
    #   election = Lockyard::Redis::Election.new(url: url, name: "scheduler", session: session)
    #   election.campaign("node-a", timeout: 10)
    #   election.leader        # => "node-a"
    #   election.observe { |term| puts "leader: #{term.value.inspect} (#{term.fencing_token})" }
    class Election
      include Lockyard::Leadership
    end

    # The value of the current holder of the lock +name+ (+value:+ of a lock
    # under a session, or an election's leader), or nil. After a holder under
    # a "release" session let go, its value stays readable until the name is
    # taken again (at most an hour); under "delete" it is gone with the grant.
    # @return [String, nil]
    def self.holder(url:, name:)
      holder_value(url, name)
    end
    private_class_method :holder_value

    private_constant :Claim
    private_class_method :claim
    # +each_exclusive(url:, names:, session:)+, see {Lockyard::Exclusive#each_exclusive}.
    extend Lockyard::Exclusive
  end
end
