# frozen_string_literal: true

module Lockyard
  # Base class of every error lockyard raises.
  class Error < StandardError; end

  # A wait for a lock or a wait group slot ran out (+lock+, +add+,
  # +synchronize+ with a timeout).
  class TimeoutError < Error; end

  # This Fiber already holds the lock: locks are not re-entrant.
  class AlreadyLockedError < Error; end

  # Unlocking or checking a lock this Fiber does not hold, or checking a
  # wait group slot this process does not hold.
  class NotLockedError < Error; end

  # The lock may have been lost (its lease ran out while the process was
  # paused, refreshing failed, another holder took over): stop touching
  # what it protects.
  class LockUnhealthyError < Error; end

  # A bad argument, rejected before anything touched the server.
  class ConfigError < Error; end

  # The server could not be asked (connection, protocol, auth); the
  # message names the server and the operation.
  class BackendError < Error; end
end
