# frozen_string_literal: true

require "logger"

module Lockyard
  class << self
    # Where lockyard logs: every primitive's warnings ("... lost: ...",
    # "refreshing ... failed"), and a GCS lock's progress unless it was
    # given a +logger:+ of its own. Default nil, nothing logged, as Ruby
    # libraries do unless asked; +DistributedLock::GoogleCloudStorage::Lock+
    # keeps the gem's default of a Logger on $stderr per lock.
    #
    #   Lockyard.logger = Logger.new($stderr, level: Logger::INFO)
    #
    # Records below the Logger's +level+ are dropped where they are made,
    # at the cost of one comparison; a changed level takes effect within
    # a second. The core logs on its own threads, which never run Ruby:
    # records reach the Logger through a queue that one Ruby thread per
    # process drains, so they arrive promptly from background refreshes
    # too, and a slow Logger never delays a lock call (past 1024 waiting
    # records, new ones are dropped and counted in a warning, to this
    # Logger or, when it is nil, to $stderr).
    # @return [Logger, nil]
    attr_reader :logger

    # @param logger [Logger, #add, nil] nil turns logging off
    def logger=(logger)
      @logger = logger
      Logs.send(:root=, logger)
    end
  end

  # The Ruby half of lockyard's logging: the one forwarding thread and the
  # Loggers it writes to (0 is {Lockyard.logger}, others are GCS locks'
  # +logger:+ options). The native half (+logs.rs+) holds the queue.
  # @api private
  module Logs
    # How often the forwarder looks at the root Logger's level.
    LEVEL_CHECK = 1.0
    # How long the program's exit waits for the Loggers to take the
    # records still queued (a stuck Logger delays the exit no longer).
    EXIT_FLUSH = 2.0

    @loggers = {}
    @numbers = 0
    @start = Mutex.new

    class << self
      private :take, :dropped, :wake, :max_severity=

      # A number for +logger+, whose records the core tags with it. Hash
      # writes need no Mutex under the GVL, and none is taken: unregister
      # runs in finalizers, which may run inside a Mutex of this thread.
      # @return [Integer]
      def register(logger, mutex = Mutex.new)
        number = (@numbers += 1)
        @loggers[number] = [logger, mutex]
        start_forwarder
        number
      end

      def unregister(number)
        @loggers.delete(number)
      end

      # Restarts the forwarder in a forked child, where no thread but the
      # forking one survives, and forgets records the parent had not
      # forwarded yet (the parent forwards them). Nothing to do in a
      # process that never logged.
      def after_fork
        return unless @forwarder

        @forwarder = nil
        take(0)
        start_forwarder if @loggers.any?
      end

      private

      # Run at exit, after lockyard's background releases: the forwarder
      # delivers what is still queued and ends, within EXIT_FLUSH seconds.
      # Without it the program's last records (+Unlocked+, a release's
      # warning) were lost whenever the exit killed the forwarder first. A
      # forwarder stuck in a Logger is left as it is: the exit kills it.
      def flush
        forwarder = @forwarder
        return unless forwarder&.alive?

        @closing = true
        wake
        forwarder.join(EXIT_FLUSH)
        @closing = false
        # at_exit blocks registered before lockyard's still run (minitest's
        # tests do): their records need a forwarder too.
        begin
          start_forwarder if @loggers.any?
        rescue ThreadError
          nil # the VM is tearing threads down
        end
      end

      def root=(logger)
        if logger
          @loggers[0] = [logger, Mutex.new]
          start_forwarder
        else
          @loggers.delete(0)
        end
        follow_level
      end

      # A Logger without a numeric +level+ takes every record.
      def follow_level
        logger, = @loggers[0]
        level = logger.respond_to?(:level) ? Integer(logger.level, exception: false) : nil if logger
        self.max_severity = logger && (level || Logger::DEBUG)
      end

      def start_forwarder
        @start.synchronize do
          return if @forwarder&.alive?

          @forwarder = Thread.new { forward }
          @forwarder.name = "lockyard-logs"
          @forwarder.report_on_exception = false
        end
      end

      # Runs until the process ends (or Thread#kill): an exception, whether
      # a Logger's (of any class: NotImplementedError, SystemExit from a
      # Logger that calls exit) or raised into this thread (Thread#raise,
      # Timeout), costs at most the records in hand, never the forwarding
      # of all later ones.
      def forward
        loop do
          closing = @closing
          take(closing ? 0 : LEVEL_CHECK).each { |number, severity, message| deliver(number, severity, message) }
          report_dropped(dropped)
          break if closing

          follow_level
        rescue Exception => e # rubocop:disable Lint/RescueException
          warn("lockyard: forwarding log records failed: #{e.class}: #{e.message}")
        end
      end

      # To Lockyard.logger, or without one (a lock's own +logger:+ only,
      # as under compat) to $stderr: the loss is never silent.
      def report_dropped(lost)
        return unless lost.positive?

        message = "#{lost} log records dropped: the logger did not keep up"
        return deliver(0, Logger::WARN, message) if @loggers.key?(0)

        warn("lockyard: #{message}")
      end

      # A Logger that raises loses that record, not the forwarder.
      def deliver(number, severity, message)
        logger, mutex = @loggers[number]
        mutex&.synchronize { logger.add(severity, message, "lockyard") }
      rescue Exception => e # rubocop:disable Lint/RescueException
        warn("lockyard: the logger raised #{e.class}: #{e.message}")
      end
    end

    # Ruby 3.1's hook into every fork (Kernel#fork, Process.fork, IO.popen("-")).
    module ForkHook
      def _fork
        pid = super
        Logs.after_fork if pid.zero?
        pid
      end
    end
    Process.singleton_class.prepend(ForkHook)
  end
end
