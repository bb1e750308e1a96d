# frozen_string_literal: true

require "test_helper"

# A WaitGroup slot handed to another process: the adder adds and exits
# cleanly, the worker it handed the token to adopts it and keeps it alive for
# as long as it works, and the limit holds throughout.
class WaitGroupAdoptTest < Minitest::Test
  include LockyardTest

  TTL = 0.6

  def setup
    @url = redis.url # started here: a forked child would start its own
    @name = "adopt-#{SecureRandom.hex(6)}"
    @children = []
  end

  def teardown
    @children.each do |pid|
      Process.kill(:KILL, pid)
      Process.wait(pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    end
  end

  def test_an_adder_that_exits_leaves_its_slot_to_run_out
    token = add_and_exit
    observer = group
    assert_equal 1, observer.count, "freed when the adder exited"
    sleep TTL + 0.3
    assert_equal 0, observer.count, "never refreshed, it ran out"
    refute observer.adopt(token)
    refute observer.done(token)
  end

  def test_an_adopted_slot_stays_held_past_the_ttl_until_done
    observer = group
    worker = start_worker(add_and_exit)
    adopted, fence = worker.ask("token")
    assert_equal true, adopted
    assert_operator fence, :>, 0
    sleep TTL * 3
    assert_equal [true], worker.ask("healthy?")
    assert_equal 1, observer.count
    assert_raises(Lockyard::TimeoutError, "the limit holds while the worker runs") do
      observer.add(timeout: 0.3)
    end
    assert_equal [true], worker.ask("done")
    assert_equal 0, observer.count
    assert_equal ["lockyard:{#{@name}}:fence"], redis.call("KEYS", "lockyard:{#{@name}}:*")
  end

  def test_a_worker_killed_after_adopting_frees_the_slot_after_the_ttl
    observer = group
    token = observer.add # the adder lives on: only the worker refreshes now
    worker = start_worker(token)
    assert_equal true, worker.ask("token").first
    Process.kill(:KILL, worker.pid)
    Process.wait(worker.pid)
    killed = monotonic
    assert_raises(Lockyard::TimeoutError) { observer.add(timeout: 0) }
    second = observer.add(timeout: 5)
    waited = monotonic - killed
    assert_operator waited, :>, 0.2
    assert_operator waited, :<, TTL + 0.5
    refute observer.healthy?(token)
    assert observer.done(second)
  end

  private

  def group
    Lockyard::Redis::WaitGroup.new(url: @url, name: @name, limit: 1, ttl: TTL)
  end

  # The token of a slot a forked adder took before exiting normally (its
  # at_exit hooks and finalizers run).
  def add_and_exit
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      writer.puts group.add(timeout: 5)
      writer.close
    end
    writer.close
    token = reader.gets.chomp
    _, status = Process.wait2(pid)
    assert_predicate status, :success?
    token
  end

  # A forked worker that adopts `token` when asked "token" and answers
  # "healthy?" and "done" about it, one Marshal'd array per question.
  Worker = Struct.new(:pid, :questions, :answers) do
    def ask(question)
      questions.puts(question)
      Marshal.load(answers)
    end
  end

  def start_worker(token)
    questions_in, questions = IO.pipe
    answers, answers_out = IO.pipe
    pid = fork do
      questions.close
      answers.close
      wg = group
      questions_in.each_line do |line|
        answer = case line.chomp
                 when "token" then [wg.adopt(token), wg.fencing_token(token)]
                 when "healthy?" then [wg.healthy?(token)]
                 when "done" then [wg.done(token)]
                 end
        answers_out.write(Marshal.dump(answer))
        answers_out.flush
      end
    end
    questions_in.close
    answers_out.close
    @children << pid
    Worker.new(pid, questions, answers)
  end
end
