# frozen_string_literal: true

module Lockyard
  # +synchronize+ for every lock class: it needs +lock(timeout:)+, +unlock+,
  # +default_timeout+ and a private +held_by_this_thread?+ (local state only).
  module Synchronize
    # Locks, yields, and unlocks however the block is left (exception,
    # break, return, throw).
    # @return the block's value
    def synchronize(timeout: default_timeout)
      raise ArgumentError, "synchronize needs a block" unless block_given?

      # Interrupts (Thread#raise, Timeout) are let in only while waiting
      # and inside the block, so none can land between being granted the
      # lock and the ensure that gives it back.
      Thread.handle_interrupt(Exception => :never) do
        held_before = held_by_this_thread?
        begin
          Thread.handle_interrupt(Exception => :immediate) do
            lock(timeout: timeout)
            yield
          end
        ensure
          unlock if !held_before && held_by_this_thread?
        end
      end
    end
  end
end
