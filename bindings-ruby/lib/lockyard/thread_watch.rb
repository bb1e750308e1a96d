# frozen_string_literal: true

module Lockyard
  # Releases what a Thread still holds once it has died, as Ruby unlocks the
  # Mutexes of a dead Thread: a lock, rw lock or GCS lock taken and never
  # given back by a Thread that returned, raised or was killed is released
  # within PERIOD seconds (plus the release's round trip), with a warning,
  # instead of being refreshed for as long as the lock object lives.
  #
  # Holds are per Fiber, and a Fiber that ends holding a lock keeps it until
  # its Thread dies, as a Mutex does.
  #
  # One watcher thread per process, started by the first grant and stopped
  # once no thread holds anything; a forked child starts its own. Core does
  # the work: it knows which Thread each holder belongs to, which of them
  # hold something, and releases a dead one's holds in the background.
  # @api private
  module ThreadWatch
    # How often the watcher looks for dead threads.
    PERIOD = 0.2

    class << self
      private :owners_holding, :owner_ended, :watcher_failed

      # Called by the native half after a grant, when core says no watcher
      # runs in this process (an atomic, not a Mutex: grants happen in trap
      # handlers too, where Mutex#synchronize raises).
      def start
        watcher = Thread.new do
          sleep PERIOD while sweep
        rescue Exception # rubocop:disable Lint/RescueException
          watcher_failed # killed or raised into: the next grant starts another
          raise
        end
        watcher.name = "lockyard-thread-watch"
        nil
      end

      private

      # Releases what dead threads held; false, ending the watcher, once no
      # thread holds anything (core then lets the next grant start another).
      def sweep
        holding = owners_holding
        return false if holding.empty?

        dead = holding - Thread.list.map(&:object_id)
        dead.each do |owner|
          owner_ended(owner).each do |what|
            warn("lockyard: released #{what}: the thread holding it died without releasing it")
          end
        end
        true
      end
    end
  end
end
