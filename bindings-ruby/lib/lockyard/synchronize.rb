# frozen_string_literal: true

module Lockyard
  # Ends a block: yields to give back what the block held. When that fails
  # while the block's own exception +raised+ propagates (nil: the block did
  # not raise), +raised+ is what the caller must see, so the failure is
  # reported with +warn+ instead of replacing it.
  # @api private
  def self.end_block(raised)
    yield
  rescue StandardError => e
    raise unless raised

    warn("lockyard: releasing after the block raised #{raised.class} failed too: #{e.class}: #{e.message}")
  end

  # +synchronize+ for every lock class: it needs +lock(timeout:)+, +unlock+,
  # +default_timeout+ and a private +held_by_this_thread?+ (local state only).
  module Synchronize
    # Locks, yields, and unlocks however the block is left (exception,
    # break, return, throw). If unlocking fails after the block raised, the
    # block's exception propagates and the failure is only warned about.
    # @return the block's value
    def synchronize(timeout: default_timeout)
      raise ArgumentError, "synchronize needs a block" unless block_given?

      # Interrupts (Thread#raise, Timeout) are let in only while waiting
      # and inside the block, so none can land between being granted the
      # lock and the ensure that gives it back.
      Thread.handle_interrupt(Exception => :never) do
        held_before = held_by_this_thread?
        raised = nil
        begin
          Thread.handle_interrupt(Exception => :immediate) do
            lock(timeout: timeout)
            yield
          end
        rescue Exception => raised # rubocop:disable Lint/RescueException
          raise
        ensure
          Lockyard.end_block(raised) { unlock if !held_before && held_by_this_thread? }
        end
      end
    end
  end
end
