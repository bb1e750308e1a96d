# frozen_string_literal: true

require "json"
require "open3"
require "test_helper"

# A forked child never ends what its parent holds: however it leaves the
# blocks it inherited (normally, by exception, by exit, or with `fork { }`,
# which leaves none) and whatever Ruby finalizes at its exit, the parent
# keeps its lock, slot, session and the locks under it, leadership,
# exclusive task and quorum lock.
class ForkTest < Minitest::Test
  include LockyardTest

  # The parent takes one hold of every kind, each in its block, and forks
  # inside all of them; the child ends as ARGV[2] says.
  PARENT = <<~'RUBY'
    require "json"
    require "lockyard"

    url, name, how = ARGV
    lock = Lockyard::Redis::Lock.new(url: url, name: "#{name}-lock")
    slots = Lockyard::Redis::WaitGroup.new(url: url, name: "#{name}-slots", limit: 1)
    rw = Lockyard::Quorum::RwLock.new(urls: [url], name: "#{name}-rw")
    lock.synchronize do
      slots.synchronize do |slot|
        Lockyard::Redis::Session.open(url: url, ttl: 5) do |session|
          rw.with_write_lock do
            under_session = Lockyard::Redis::Lock.new(url: url, name: "#{name}-under-session", session: session)
            raise "not taken" unless under_session.try_lock

            election = Lockyard::Redis::Election.new(url: url, name: "#{name}-election", session: session)
            election.campaign("parent", timeout: 0)
            Lockyard::Redis.each_exclusive(url: url, names: ["#{name}-task"], session: session) do
              pid = how == "block" ? fork { GC.start } : fork
              if pid.nil?
                exit 0 if how == "exit"
                raise "the child's own failure" if how == "raise"

                next
              end
              Process.wait(pid)
              puts JSON.generate(child: $?.exitstatus)
              $stdout.flush
              $stdin.gets # the test looks from outside meanwhile
              puts JSON.generate(lock: lock.healthy?, slot: slot.healthy?, session: session.healthy?,
                                 under_session: under_session.healthy?, leader: election.leader?,
                                 rw: rw.healthy?)
              $stdout.flush
              under_session.unlock
              election.resign
            end
          end
        end
      end
    end
  RUBY

  { "exit" => 0, "raise" => 1, "leave" => 0, "block" => 0 }.each do |how, status|
    define_method("test_a_forked_child_that_ends_by_#{how}_keeps_every_hold_of_its_parent") do
      name = "fork-#{how}-#{SecureRandom.hex(4)}"
      Open3.popen3(RbConfig.ruby, *ruby_include, "-e", PARENT, redis.url, name, how) do |stdin, stdout, stderr, parent|
        line = stdout.gets
        assert line, -> { stderr.read }
        assert_equal({ "child" => status }, JSON.parse(line))

        refute new_lock(name: "#{name}-lock").try_lock
        assert_raises(Lockyard::TimeoutError) do
          Lockyard::Redis::WaitGroup.new(url: redis.url, name: "#{name}-slots", limit: 1).add(timeout: 0)
        end
        refute new_lock(name: "#{name}-under-session").try_lock
        refute new_lock(name: "#{name}-task").try_lock
        refute Lockyard::Quorum::RwLock.new(urls: [redis.url], name: "#{name}-rw").acquire_read(timeout: 0)
        Lockyard::Redis::Session.open(url: redis.url) do |rivals|
          rival = Lockyard::Redis::Election.new(url: redis.url, name: "#{name}-election", session: rivals)
          assert_equal "parent", rival.leader
          assert_raises(Lockyard::TimeoutError) { rival.campaign("rival", timeout: 0) }
        end

        stdin.puts("report")
        health = JSON.parse(stdout.gets)
        assert_equal 6, health.size
        assert(health.values.all?(true), health.inspect)
        stdin.close
        err = stderr.read
        assert parent.value.success?, err
        # The child failed with its own exception, not a lockyard error
        # from a block it left.
        refute_match(/Lockyard/, err)
        assert_equal how == "raise", err.include?("the child's own failure"), err
      end
    end
  end
end
