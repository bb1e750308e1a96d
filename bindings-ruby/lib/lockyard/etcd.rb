# frozen_string_literal: true

module Lockyard
  # Locks on etcd, the consensus store: for locks that must hold through a
  # failover (etcd commits every grant through Raft before it answers).
  #
  #   lock = Lockyard::Etcd::Lock.new(url: "etcd://127.0.0.1:2379", name: "deploy", ttl: 30)
  #   lock.synchronize do
  #     lock.check_health!   # before each step that must not run twice
  #   end
  module Etcd
    # A distributed lock on etcd. Each thread is a separate holder, as with
    # {Lockyard::Redis::Lock}; waiters are served in arrival order; the
    # fencing token is the create revision of the holder's key.
    class Lock
      include Lockyard::Synchronize

      # Options left nil take the core's defaults, stated with each.
      # @param url [String] +etcd://host:2379+ (members comma-separated, +etcds://+ for TLS,
      #   +user:password@+ for etcd's auth)
      # @param name [String] the lock's name; holders of the same name exclude each other
      # @param ttl [Numeric, nil] the lease's ttl in whole seconds, rounded up: how long the
      #   lock outlives a holder's crashed process (default 30)
      # @param timeout [Numeric, nil] default wait of {#lock} and {#synchronize}; nil waits forever
      # @param identity_prefix [String, nil] prefix of holder identities (default: random)
      # @param connect_timeout [Numeric, nil] how long one request to a member may take before
      #   the next member is tried (default 5)
      # @param session [Lockyard::Etcd::Session, nil] hold the lock under this session: its key
      #   rides on the session's lease (the lock's ttl is unused) and shares its health
      # @param value [String, nil] what the holder's key stores, for {Etcd.holder}
      #   (default: the holder's identity)
      # @raise [Lockyard::ConfigError]
      def self.new(url:, name:, ttl: nil, timeout: nil, identity_prefix: nil, connect_timeout: nil,
                   session: nil, value: nil)
        build(url, name, ttl, timeout, identity_prefix, connect_timeout, session, value)
      end
      private_class_method :build

      # Waits until the calling thread holds the lock.
      # @param timeout [Numeric, nil] seconds to wait; nil waits forever, 0 tries once
      # @return [true]
      # @raise [Lockyard::TimeoutError] when the wait runs out
      # @raise [Lockyard::AlreadyLockedError] if this thread holds it already
      # @raise [Lockyard::BackendError] if no member answers, or the waiter's lease is lost
      def lock(timeout: default_timeout)
        acquire(timeout)
      end

      # The other methods are {Lockyard::Redis::Lock}'s: try_lock, unlock,
      # healthy?, check_health!, owned?, locked?, fencing_token, name,
      # identity, default_timeout.

      def inspect
        token = fencing_token
        held = token ? " fencing_token=#{token}" : ""
        "#<#{self.class} name=#{name.inspect}#{held}>"
      end

      private

      # Local state only: true from a grant until {#unlock}.
      def held_by_this_thread?
        !fencing_token.nil?
      end
    end

    # At most +limit+ holders at a time across every process, on etcd: the
    # wait group of {Lockyard::Redis::WaitGroup} (add, done, adopt, wait,
    # count, synchronize), its slots the +limit+ oldest keys of the name, so
    # waiters are served in arrival order and a slot's fencing token is its
    # key's create revision. A crashed holder's slot comes free when its
    # lease runs out; slots taken by {#add} outlive a garbage-collected
    # group until their ttl, for the process they were handed to.
    #
    #   quota = Lockyard::Etcd::WaitGroup.new(url: "etcd://127.0.0.1:2379", name: "api-quota", limit: 3)
    #   quota.synchronize(timeout: 30) { |slot| slot.check_health! }
    class WaitGroup
      include Lockyard::SlotGroup

      # @param url [String] as for {Lock.new}
      # @param name [String] the group's name; groups of the same name share their slots
      # @param limit [Integer] how many slots may be held at once, at least 1
      # @param ttl [Numeric, nil] the lease's ttl in whole seconds, rounded up (default 30)
      # @param connect_timeout [Numeric, nil] how long one request to a member may take
      #   before the next member is tried (default 5)
      # @raise [Lockyard::ConfigError]
      def self.new(url:, name:, limit:, ttl: nil, connect_timeout: nil)
        build(url, name, limit, ttl, connect_timeout)
      end
      private_class_method :build

      # The slot {#synchronize} yields.
      Slot = Lockyard::SlotGroup::Slot
    end

    # An etcd lease that locks and elections live under, kept alive every
    # ttl / 3 (whole seconds). Locks under it put their keys on its lease:
    # they are lost with it, share its health, and are freed at once by
    # {#destroy}, which revokes it. A session lost without {#destroy} leaves
    # its names barred for +lock_delay+ more seconds, for every lock of
    # those names.
    #
    #   Lockyard::Etcd::Session.open(url: url, ttl: 15) do |session|
    #     Lockyard::Etcd::Lock.new(url: url, name: "task-7", session: session).synchronize { run }
    #   end
    class Session
      # Options left nil take the core's defaults, stated with each.
      # @param url [String] as for {Lock.new}
      # @param ttl [Numeric, nil] the lease's ttl in whole seconds, rounded up (default 15)
      # @param behavior [String, nil] "release" keeps a lock's value readable by {Etcd.holder}
      #   while its name is barred; "delete" keeps none (default "release")
      # @param lock_delay [Numeric, nil] how long a lost session's names stay barred, in whole
      #   seconds, rounded up; 0 disables it (default 15)
      # @param connect_timeout [Numeric, nil] (default 5)
      # @raise [Lockyard::ConfigError] for a bad value
      # @raise [Lockyard::BackendError] if no member answers
      def self.new(url:, ttl: nil, behavior: nil, lock_delay: nil, connect_timeout: nil)
        build(url, ttl, behavior, lock_delay, connect_timeout)
      end
      private_class_method :build

      # Creates a session, yields it, and destroys it however the block is
      # left (see {Lockyard::Redis::Session.open}).
      # @return the block's value
      def self.open(**options)
        session = new(**options)
        Lockyard.give_back_after(-> { session.destroy }) { yield session }
      end

      # The other methods are {Lockyard::Redis::Session}'s: destroy, healthy?,
      # check_health!, id, ttl, lock_delay, behavior.

      def inspect
        "#<#{self.class} id=#{id} healthy=#{healthy?}>"
      end
    end

    # One change of leadership (see {Lockyard::Term}).
    Term = Lockyard::Term

    # Leader election under a session, with the methods of
    # {Lockyard::Redis::Election} ({Lockyard::Leadership}'s): a campaign is
    # a key in the line of the lock +name+, storing the campaign's value, so
    # campaigners lead in arrival order; the leader's fencing token is its
    # key's create revision.
    #
    #   election = Lockyard::Etcd::Election.new(url: url, name: "scheduler", session: session)
    #   election.campaign("node-a", timeout: 10)
    #   election.leader        # => "node-a"
    #   election.observe { |term| puts "leader: #{term.value.inspect} (#{term.fencing_token})" }
    class Election
      include Lockyard::Leadership
    end

    private_constant :Claim
    private_class_method :claim
    # +each_exclusive(url:, names:, session:)+, as {Lockyard::Redis.each_exclusive}
    # (see {Lockyard::Exclusive#each_exclusive}), with this module's locks.
    extend Lockyard::Exclusive

    # @!method self.holder(url, name)
    #   @return [String, nil] what the lock's current holder stored (its value under a
    #     session, else its identity); while a lost session's lock_delay bars the name, the
    #     value it held it with if its behavior is "release"
  end
end
