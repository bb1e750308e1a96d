# frozen_string_literal: true

# Distributed locks that stay correct under crashes, pauses and network
# faults: a holder's lease runs on the server's clock and is refreshed in
# the background, a holder can always ask whether it may have lost the lock,
# and every grant carries a fencing token that only increases.
#
#   require "lockyard"
#
#   lock = Lockyard::Redis::Lock.new(url: "redis://127.0.0.1:6379/0", name: "deploy", ttl: 30)
#   lock.synchronize do
#     lock.check_health!   # before each step that must not run twice
#   end
#
#   quota = Lockyard::Redis::WaitGroup.new(url: "redis://127.0.0.1:6379/0", name: "api-quota", limit: 10)
#   quota.synchronize do |slot|   # at most 10 at a time, across every process
#     slot.check_health!
#   end
#
#   Lockyard.logger = Logger.new($stderr, level: Logger::WARN)   # default nil: silent
module Lockyard
end

# The native extension looks the error classes up, so they come first.
require_relative "lockyard/error"
require "lockyard/lockyard_ruby"
# Only for the tests, which hold the documented defaults to the core's.
Lockyard.private_class_method :core_defaults
Lockyard.private_class_method :finish_background_work
# A process that ends on an uncaught Interrupt dies by SIGINT, after the
# at_exit blocks and without C's atexit: the releases and deletes handed to
# the background (a wait given up on Ctrl-C) are waited for here.
at_exit do
  Lockyard.send(:finish_background_work)
  # Then the records those releases (and the program's last calls) made.
  Lockyard::Logs.send(:flush)
end
require_relative "lockyard/logs"
require_relative "lockyard/thread_watch"
require_relative "lockyard/synchronize"
require_relative "lockyard/election"
require_relative "lockyard/exclusive"
require_relative "lockyard/redis"
require_relative "lockyard/slot_group"
require_relative "lockyard/redis/wait_group"
require_relative "lockyard/quorum"
require_relative "lockyard/gcs"
require_relative "lockyard/etcd"
