# frozen_string_literal: true

require "test_helper"

# Signals that land on a waiting thread must not turn the wait into a
# BackendError (a socket read with a timeout fails with EINTR when a signal
# handler runs on its thread).
class SignalsTest < Minitest::Test
  include LockyardTest

  def test_child_processes_exiting_do_not_break_a_wait_on_the_main_thread
    assert_waits_out_despite { system("true") }
  end

  def test_child_processes_exiting_do_not_break_a_wait_on_another_thread
    assert_waits_out_despite(waiter_thread: true) { system("true") }
  end

  def test_a_trapped_signal_does_not_break_a_wait_on_another_thread
    previous = Signal.trap(:USR1) { nil }
    assert_waits_out_despite(waiter_thread: true) do
      Process.kill(:USR1, Process.pid)
      sleep 0.005
    end
  ensure
    Signal.trap(:USR1, previous)
  end

  # Ruby runs a trap on the main thread, so the main thread's wait must let
  # signals in: the core, not a signal mask, has to cope with EINTR there.
  def test_a_trapped_signal_does_not_break_a_wait_on_the_main_thread
    previous = Signal.trap(:USR1) { nil }
    assert_waits_out_despite do
      Process.kill(:USR1, Process.pid)
      sleep 0.005
    end
  ensure
    Signal.trap(:USR1, previous)
  end

  private

  def assert_waits_out_despite(waiter_thread: false, &noise)
    holder = new_lock
    holder.lock
    waiter = new_lock(name: holder.name)
    stop = false
    noisy = Thread.new { noise.call until stop }
    wait = -> { waiter.lock(timeout: 1.5) rescue $! }
    outcome = waiter_thread ? Thread.new(&wait).value : wait.call
    stop = true
    noisy.join
    assert_kind_of Lockyard::TimeoutError, outcome
    holder.unlock
  end
end
