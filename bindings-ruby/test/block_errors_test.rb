# frozen_string_literal: true

require "test_helper"

# A block that raises keeps its own exception when giving back what it held
# fails too (here: the server went away inside the block); the failure is
# warned about. After a block that did not raise, it still raises.
class BlockErrorsTest < Minitest::Test
  include LockyardTest

  # Every block front whose release reports a server it cannot reach as an
  # error, run on `url` with `block` inside.
  FRONTS = {
    "lock" => lambda { |url, name, &block|
      Lockyard::Redis::Lock.new(url: url, name: name).synchronize(&block)
    },
    "slot" => lambda { |url, name, &block|
      Lockyard::Redis::WaitGroup.new(url: url, name: name, limit: 2).synchronize(&block)
    },
    "session" => ->(url, _name, &block) { Lockyard::Redis::Session.open(url: url, &block) },
    "exclusive" => lambda { |url, name, &block|
      Lockyard::Redis::Session.open(url: url) do |session|
        Lockyard::Redis.each_exclusive(url: url, names: [name], session: session, &block)
      end
    }
  }.freeze

  FRONTS.each do |front, run|
    define_method("test_the_blocks_exception_wins_over_a_failing_release_of_#{front}") do
      server = RedisServer.new
      _, err = capture_io do
        error = assert_raises(RuntimeError) do
          run.call(server.url, "block-#{SecureRandom.hex(4)}") do
            server.stop
            raise "the block's own"
          end
        end
        assert_equal "the block's own", error.message
      end
      assert_match(/failed too: Lockyard::BackendError/, err)
    end

    define_method("test_a_failing_release_after_a_block_that_succeeded_raises_for_#{front}") do
      server = RedisServer.new
      capture_io do
        assert_raises(Lockyard::BackendError) do
          run.call(server.url, "block-#{SecureRandom.hex(4)}") { server.stop }
        end
      end
    end
  end

  # A quorum lock reports grants it could not give back as lost (false),
  # not as an error: its block's exception has no rival, and must stay so.
  %i[with_write_lock with_read_lock].each do |front|
    define_method("test_the_blocks_exception_reaches_the_caller_of_#{front}") do
      server = RedisServer.new
      lock = Lockyard::Quorum::RwLock.new(urls: [server.url], name: "block-#{SecureRandom.hex(4)}")
      error = assert_raises(RuntimeError) do
        lock.public_send(front) do
          server.stop
          raise "the block's own"
        end
      end
      assert_equal "the block's own", error.message
    end
  end
end
