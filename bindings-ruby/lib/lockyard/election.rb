# frozen_string_literal: true

module Lockyard
  # One change of leadership: a term begins (+value+ is the new leader's)
  # or ends (+value+ is nil). +fencing_token+ is the term's, strictly
  # increasing across terms.
  Term = Struct.new(:value, :fencing_token)

  # What every election class shares ({Lockyard::Redis::Election},
  # {Lockyard::Etcd::Election}) over its native +build+, +campaign_within+
  # and +observer+: the keywords of +new+, {#campaign} and {#observe}. The
  # native methods are documented here too, as every backend defines them
  # alike.
  #
  # @!method resign
  #   Steps down; the next campaigner takes over at once.
  #   @return [Boolean] false if leadership had been lost meanwhile
  #   @raise [Lockyard::NotLockedError] when not leading
  # @!method leader
  #   Asks the server.
  #   @return [String, nil] the current leader's value; nil when nobody leads
  # @!method leader?
  #   Whether this election leads and its session is surely live. Reads a
  #   flag; never touches the server.
  # @!method check_health!
  #   @raise [Lockyard::NotLockedError] when not leading
  #   @raise [Lockyard::LockUnhealthyError] when leadership may be lost
  # @!method fencing_token
  #   @return [Integer, nil] this election's term, nil when not leading
  # @!method term
  #   Same as {#fencing_token}.
  # @!method name
  #   @return [String]
  module Leadership
    def self.included(election)
      election.extend(ClassMethods)
      election.private_class_method :build
    end

    # +new+ of every election class.
    module ClassMethods
      # @param url [String] the session's server
      # @param name [String] the election's name: campaigners of the same name
      #   compete for one leadership
      # @param session [Lockyard::Redis::Session, Lockyard::Etcd::Session] the
      #   backend's session to campaign under; leadership ends with it
      # @raise [Lockyard::ConfigError] for a bad name, a session of another
      #   backend or a destroyed one
      def new(url:, name:, session:)
        election = build(url, name, session)
        # Leadership lives under the session: keep it while the election does.
        election.instance_variable_set(:@session, session)
        election
      end
    end

    # Waits until this election leads with +value+.
    # @param value [String] what {#leader} answers while this election leads
    # @param timeout [Numeric, nil] seconds to wait; nil waits forever, 0 tries once
    # @return [true]
    # @raise [Lockyard::TimeoutError] when the wait runs out
    # @raise [Lockyard::AlreadyLockedError] when it leads already
    # @raise [Lockyard::ConfigError] for an empty value
    def campaign(value, timeout: nil)
      campaign_within(value, timeout)
    end

    # Yields a {Term} for the current state, then for every change of
    # leadership in order; returns once +timeout+ seconds pass without a
    # change (nil: never). Without a block, returns an Enumerator.
    # @return [nil]
    def observe(timeout: nil)
      return enum_for(:observe, timeout: timeout) unless block_given?

      changes = observer
      while (change = changes.next_change(timeout))
        yield Term.new(*change)
      end
      nil
    end

    def inspect
      "#<#{self.class} name=#{name.inspect}#{" term=#{term}" if term}>"
    end
  end
end
