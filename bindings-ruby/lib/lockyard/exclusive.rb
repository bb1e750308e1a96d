# frozen_string_literal: true

module Lockyard
  # +each_exclusive+ of every backend with sessions ({Lockyard::Redis},
  # {Lockyard::Etcd}), which extend it, over their native private +claim+.
  module Exclusive
    # Mutually exclusive workers: tries each name's lock once under +session+
    # and yields only the names won, skipping taken ones without waiting.
    # Each lock is held while the block runs and released when it returns,
    # breaks or raises. Without a block, returns an Enumerator.
    # @param url [String] the session's server
    # @param names [Enumerable<String>] the tasks, walked in order
    # @param session [Lockyard::Redis::Session, Lockyard::Etcd::Session] this backend's session
    # @return [nil]
    # @raise [Lockyard::ConfigError] for a bad name, a session of another backend
    #   or a destroyed one
    def each_exclusive(url:, names:, session:)
      return enum_for(:each_exclusive, url: url, names: names, session: session) unless block_given?

      names.each do |name|
        # Interrupts (Thread#raise, Timeout) are let in only while trying
        # and inside the block, as in +synchronize+, so none lands between
        # the claim being won and the ensure that gives it back.
        Thread.handle_interrupt(Exception => :never) do
          won = nil
          Lockyard.give_back_after(-> { won&.leave }) do
            Thread.handle_interrupt(Exception => :immediate) do
              won = claim(url, name, session)
              yield name if won
            end
          end
        end
      end
      nil
    end
  end
end
