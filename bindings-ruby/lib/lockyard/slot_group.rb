# frozen_string_literal: true

module Lockyard
  # The methods every wait group shares ({Lockyard::Redis::WaitGroup},
  # {Lockyard::Etcd::WaitGroup}) over their native +take+, +leave+ and
  # +wait_idle+: {#add}, {#wait}, {#synchronize} and its {Slot}.
  module SlotGroup
    # Takes a slot, waiting while all +limit+ are held. Prefer
    # {#synchronize}, which frees the slot however its block ends.
    # @param timeout [Numeric, nil] seconds to wait; nil waits forever, 0 tries once
    # @return [String] the slot's token, for {#done}
    # @raise [Lockyard::TimeoutError] when the wait runs out
    # @raise [Lockyard::BackendError] if the server cannot be reached
    def add(timeout: nil)
      take(timeout, nil)
    end

    # Waits until no slot is held, like Go's sync.WaitGroup#Wait.
    # @param timeout [Numeric, nil] seconds to wait; nil waits forever
    # @return [Boolean] false if the timeout ran out
    def wait(timeout: nil)
      wait_idle(timeout)
    end

    # Takes a slot, yields it, and frees it however the block is left
    # (exception, break, return, throw). If freeing it fails after the
    # block raised, the block's exception propagates and the failure is
    # only warned about.
    # @param timeout [Numeric, nil] as for {#add}
    # @yieldparam slot [Slot]
    # @return the block's value
    # @raise [Lockyard::TimeoutError] when the wait runs out
    def synchronize(timeout: nil)
      raise ArgumentError, "synchronize needs a block" unless block_given?

      # Interrupts (Thread#raise, Timeout) are let in only while waiting
      # and inside the block; the native take stores the token in the
      # slot before any can land, so the ensure frees every slot taken.
      Thread.handle_interrupt(Exception => :never) do
        slot = Slot.new(self)
        Lockyard.give_back_after(-> { leave(slot.token) if slot.token }) do
          Thread.handle_interrupt(Exception => :immediate) do
            take(timeout, slot)
            yield slot
          end
        end
      end
    end

    def inspect
      "#<#{self.class} name=#{name.inspect} limit=#{limit}>"
    end

    # One slot taken by {#synchronize}, freed when its block ends.
    class Slot
      # @return [Lockyard::Redis::WaitGroup, Lockyard::Etcd::WaitGroup]
      attr_reader :group
      # @return [String] the slot's token, what {#done} takes
      attr_reader :token

      # @api private
      def initialize(group)
        @group = group
        @token = nil
      end

      # @return [Integer, nil] see {#fencing_token}; nil once freed
      def fencing_token
        group.fencing_token(token)
      end

      # @return [Boolean] see {#healthy?}; false once freed
      def healthy?
        group.healthy?(token)
      end

      # @return [nil]
      # @raise [Lockyard::LockUnhealthyError] if the slot may have been lost
      # @raise [Lockyard::NotLockedError] once it is freed
      def check_health!
        group.check_health!(token)
      end

      def inspect
        "#<#{self.class} of #{group.name.inspect} token=#{token.inspect}>"
      end
    end
  end
end
