# frozen_string_literal: true

require "test_helper"

class ProcessesTest < Minitest::Test
  include LockyardTest

  def test_a_forked_child_uses_its_own_locks_and_not_its_parents_hold
    parents = new_lock
    parents.lock
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      childs = new_lock
      report = {
        child_lock: childs.synchronize { childs.owned? },
        parents_owned: parents.owned?,
        parents_unlock: begin
          parents.unlock
        rescue Lockyard::Error => e
          e.class.name
        end
      }
      writer.write(Marshal.dump(report))
      writer.close
    end
    writer.close
    report = Marshal.load(reader.read)
    Process.wait(pid)
    assert_equal({ child_lock: true, parents_owned: false, parents_unlock: "Lockyard::NotLockedError" }, report)
    assert parents.owned?, "the child's exit did not release the parent's hold"
    assert parents.unlock
  end

  def test_paused_holder_becomes_unhealthy_after_takeover
    name = "paused-#{SecureRandom.hex(4)}"
    to_child_reader, to_child = IO.pipe
    from_child, to_parent = IO.pipe
    pid = fork do
      to_child.close
      from_child.close
      lock = new_lock(name: name, ttl: 1)
      lock.lock
      to_parent.puts(lock.fencing_token)
      to_child_reader.gets # paused and resumed meanwhile
      report = {
        healthy: lock.healthy?,
        check_health: begin
          lock.check_health!
          "healthy"
        rescue Lockyard::Error => e
          e.class.name
        end,
        unlock: lock.unlock
      }
      to_parent.write(Marshal.dump(report))
      to_parent.close
    end
    to_child_reader.close
    to_parent.close
    paused_token = Integer(from_child.gets)
    Process.kill(:STOP, pid)
    paused_at = monotonic
    taker = new_lock(name: name, ttl: 5)
    taker.lock(timeout: 5)
    sleep([paused_at + 2 - monotonic, 0].max)
    Process.kill(:CONT, pid)
    to_child.puts("go")
    to_child.close
    report = Marshal.load(from_child.read)
    Process.wait(pid)
    assert_equal({ healthy: false, check_health: "Lockyard::LockUnhealthyError", unlock: false }, report)
    assert_operator taker.fencing_token, :>, paused_token
    assert taker.healthy?
    assert taker.unlock
  ensure
    Process.kill(:CONT, pid) if pid && !report
  end

  def test_ctrl_c_interrupts_a_blocked_lock
    holder = new_lock
    holder.lock
    script = <<~RUBY
      require "lockyard"
      lock = Lockyard::Redis::Lock.new(url: #{redis.url.dump}, name: #{holder.name.dump})
      $stdout.puts "waiting"
      $stdout.flush
      begin
        lock.lock
      rescue Interrupt
        $stdout.puts "interrupted, holding: \#{!lock.fencing_token.nil?}"
      end
    RUBY
    assert_equal "interrupted, holding: false\n", line_after_ctrl_c(script)
    assert_equal 0, redis.call("ZCARD", "lockyard:{#{holder.name}}:queue")
    holder.unlock
  end
end
