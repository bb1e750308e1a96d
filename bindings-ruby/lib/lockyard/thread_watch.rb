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

    @mutex = Mutex.new
    @watcher = nil

    class << self
      private :owners_holding, :owner_ended

      # Called by the native half after each grant: starts the watcher
      # unless it runs.
      def watch
        @mutex.synchronize do
          @watcher = start unless @watcher&.alive?
        end
        nil
      end

      private

      def start
        watcher = Thread.new { sleep PERIOD while sweep }
        watcher.name = "lockyard-thread-watch"
        watcher
      end

      # Releases what dead threads held; false, ending the watcher, once no
      # thread holds anything. Asked under the mutex, so a grant noted after
      # the answer finds the watcher gone and starts another.
      def sweep
        holding = @mutex.synchronize do
          owners = owners_holding
          @watcher = nil if owners.empty?
          owners
        end
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
