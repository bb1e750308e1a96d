# frozen_string_literal: true

require "minitest/autorun"
require "rbconfig"
require "securerandom"
require "socket"
require "tmpdir"
require "lockyard"

# A private redis-server on a free port, started once for the whole run and
# stopped when it ends; it keeps nothing on disk.
class RedisServer
  attr_reader :port, :pid

  def self.instance
    @instance ||= new.tap do |server|
      Minitest.after_run { server.stop }
    end
  end

  def initialize
    @dir = Dir.mktmpdir("lockyard-redis")
    @port = free_port
    @pid = Process.spawn("redis-server", "--port", @port.to_s, "--bind", "127.0.0.1",
                         "--save", "", "--appendonly", "no", "--dir", @dir,
                         out: File.join(@dir, "redis.log"), err: %i[child out])
    wait_until_ready
  end

  def url(db = 0)
    "redis://127.0.0.1:#{@port}/#{db}"
  end

  # Sends one command and returns its reply (integers, strings, nil, arrays).
  def call(*command, db: 0)
    TCPSocket.open("127.0.0.1", @port) do |socket|
      [["SELECT", db], command].each { |words| socket.write(encode(*words)) }
      read_reply(socket)
      read_reply(socket)
    end
  end

  def stop
    Process.kill(:TERM, @pid)
    Process.wait(@pid)
    FileUtils.remove_entry(@dir)
  end

  private

  def free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  def wait_until_ready
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
    begin
      call("PING")
    rescue SystemCallError
      raise "redis-server did not start: #{File.read(File.join(@dir, 'redis.log'))}" if
        Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.02
      retry
    end
  end

  def encode(*words)
    "*#{words.size}\r\n" + words.map { |word| "$#{word.to_s.bytesize}\r\n#{word}\r\n" }.join
  end

  def read_reply(socket)
    line = socket.gets("\r\n").chomp("\r\n")
    case line[0]
    when "+" then line[1..]
    when "-" then raise line[1..]
    when ":" then Integer(line[1..])
    when "$" then line == "$-1" ? nil : socket.read(Integer(line[1..]) + 2).chomp("\r\n")
    when "*" then Array.new(Integer(line[1..])) { read_reply(socket) }
    end
  end
end

module LockyardTest
  # Names and URLs every Redis primitive rejects with a ConfigError.
  BAD_PLACES = [
    { name: "" },
    { name: "a{b" },
    { name: :symbol },
    { name: nil },
    { url: "http://127.0.0.1:6379" },
    { url: "redis://host:notaport" },
    { url: "nonsense" },
    { url: 6379 }
  ].freeze

  # Lease options every Redis primitive rejects with a ConfigError.
  BAD_LEASE_OPTIONS = [
    { ttl: 0 },
    { ttl: -1 },
    { ttl: Float::NAN },
    { ttl: Float::INFINITY },
    # Past 30 days (issue 16): 1e16 s and 1e19 s overflowed a deadline or
    # Redis; 2**64 ms wrapped around into a 380 ms lease.
    { ttl: 31 * 86_400 },
    { ttl: 1e16 },
    { ttl: 18_446_744_073_709_551.616 },
    { ttl: 1e19 },
    { ttl: "30" },
    { ttl: true },
    { refresh_interval: 10 },
    { refresh_interval: 0 },
    { refresh_interval: -1 },
    { max_refresh_fails: 0 },
    { max_refresh_fails: -1 },
    { max_refresh_fails: 1.5 },
    { connect_timeout: 0 },
    { connect_timeout: -1 },
    { connect_timeout: 1e19 }
  ].freeze

  def redis
    RedisServer.instance
  end

  # Each row of keywords makes `construct` raise a ConfigError with a
  # message, and nothing is written to database `db`.
  def assert_rejected_writing_nothing(rows, db:, &construct)
    redis.call("FLUSHDB", db: db)
    rows.each do |row|
      error = assert_raises(Lockyard::ConfigError, row.inspect) { construct.call(**row) }
      refute_empty error.message
    end
    assert_equal 0, redis.call("DBSIZE", db: db)
  end

  # A lock on the private server under a name no other test uses.
  def new_lock(name: "test-#{SecureRandom.hex(6)}", **options)
    Lockyard::Redis::Lock.new(url: redis.url, name: name, **options)
  end

  # The -I option that makes a child ruby load the same lockyard as this one.
  def ruby_include
    lib = File.expand_path("../lib", __dir__)
    $LOAD_PATH.include?(lib) ? ["-I", lib] : []
  end

  def monotonic
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Runs `script` in a child ruby that prints "waiting" and blocks, sends
  # it Ctrl-C (SIGINT), and returns the line it prints next, which must
  # come within a second.
  def line_after_ctrl_c(script)
    IO.popen([RbConfig.ruby, *ruby_include, "-e", script], "r") do |child|
      assert_equal "waiting\n", child.gets
      sleep 0.2
      sent_at = monotonic
      Process.kill(:INT, child.pid)
      line = child.gets
      assert_operator monotonic - sent_at, :<, 1
      line
    end
  end
end
