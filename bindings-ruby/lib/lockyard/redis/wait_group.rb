# frozen_string_literal: true

module Lockyard
  module Redis
    # At most +limit+ holders at a time across every process: a distributed
    # counting semaphore with the shape of Go's sync.WaitGroup. {#add} takes
    # one of +limit+ slots and returns its token, {#done} frees it, {#wait}
    # returns once no slot is held. A holder that crashes gives its slot
    # back after +ttl+; held slots are refreshed in the background meanwhile.
    #
    #   quota = Lockyard::Redis::WaitGroup.new(url: "redis://127.0.0.1:6379/0", name: "api-quota", limit: 10)
    #   quota.synchronize(timeout: 30) do |slot|
    #     slot.check_health!   # before each step that must stay within the limit
    #     call_the_api(fencing_token: slot.fencing_token)
    #   end
    #
    # Slots belong to the process, not the thread: a token can be given to
    # {#done} from any thread, or any other process, and the process that
    # works on a token it was handed calls {#adopt} so that the slot lives as
    # long as it does. A group that is garbage-collected, or whose process
    # exits, frees the slots of {#synchronize} blocks still open, never those
    # taken by {#add}: nobody refreshes them any more, and they run out after
    # +ttl+ unless another process adopted them. A forked child neither
    # holds nor frees its parent's slots by dropping its copy of the group
    # or by leaving a {#synchronize} block it inherited.
    #
    # Durations are seconds (Integer or Float): a ttl, lock_delay,
    # refresh_interval or connect/request timeout at most 30 days, a wait's
    # timeout at most 100 years (nil waits forever). Bad arguments raise
    # {Lockyard::ConfigError} before any network access.
    class WaitGroup
      # Options left nil take the core's defaults, stated with each.
      # @param url [String] redis://, rediss://, unix:// or redis+sentinel:// URL (see the README)
      # @param name [String] the group's name; groups of the same name share their slots
      # @param limit [Integer] how many slots may be held at once, at least 1
      # @param ttl [Numeric, nil] how long a slot outlives its holder's last refresh (default 30)
      # @param refresh_interval [Numeric, nil] refresh period, below ttl / max_refresh_fails
      #   (default: a third of that)
      # @param max_refresh_fails [Integer, nil] consecutive failed refreshes that make a slot
      #   unhealthy (default 3)
      # @param connect_timeout [Numeric, nil] how long connecting may take before the server
      #   counts as unreachable (default 5)
      # @raise [Lockyard::ConfigError]
      def self.new(url:, name:, limit:, ttl: nil, refresh_interval: nil, max_refresh_fails: nil, connect_timeout: nil)
        build(url, name, limit, ttl, refresh_interval, max_refresh_fails, connect_timeout)
      end
      private_class_method :build

      include Lockyard::SlotGroup

      # @!method done(token)
      #   Frees the slot of +token+, from whichever process took it.
      #   @param token [String]
      #   @return [Boolean] false if that slot had already expired or been freed,
      #     or the token is not one of this group's
      # @!method adopt(token)
      #   Takes over keeping the slot of +token+ alive, in the process that works
      #   on it: from now on this process refreshes it and the adder's stops, so
      #   the slot is freed by {#done} or +ttl+ after this process dies.
      #     wg.done(token) if wg.adopt(token) && work
      #   @param token [String] a token another process got from {#add}
      #   @return [Boolean] false if the slot is gone (done, or run out)
      # @!method count
      #   @return [Integer] live slots across every process, asked of the server
      # @!method healthy?(token)
      #   Whether this process holds the slot of +token+ and its lease is surely
      #   live. Reads a flag; never touches the server, so it is cheap in a loop.
      # @!method check_health!(token)
      #   @return [nil]
      #   @raise [Lockyard::NotLockedError] if this process does not hold that slot
      #   @raise [Lockyard::LockUnhealthyError] if it may have been lost
      # @!method fencing_token(token)
      #   @return [Integer, nil] the slot's grant number, strictly increasing across
      #     all grants of this name; nil unless this process holds the slot
      # @!method name
      #   @return [String]
      # @!method limit
      #   @return [Integer]

      # The slot {#synchronize} yields.
      Slot = Lockyard::SlotGroup::Slot
    end
  end
end
