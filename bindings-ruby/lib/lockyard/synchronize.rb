# frozen_string_literal: true

module Lockyard
  # Runs the block, then +give_back+ however the block is left (exception,
  # break, return, throw). When giving back fails while the block's own
  # exception propagates, that exception is what the caller must see, so
  # the failure is reported with +warn+ instead of replacing it; after a
  # block that did not raise, the failure raises.
  # @api private
  def self.give_back_after(give_back)
    yield
  rescue Exception => raised # rubocop:disable Lint/RescueException
    raise
  ensure
    begin
      give_back.call
    rescue StandardError => e
      raise unless raised

      warn("lockyard: releasing after the block raised #{raised.class} failed too: #{e.class}: #{e.message}")
    end
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
        Lockyard.give_back_after(-> { unlock if !held_before && held_by_this_thread? }) do
          Thread.handle_interrupt(Exception => :immediate) do
            lock(timeout: timeout)
            yield
          end
        end
      end
    end
  end
end
