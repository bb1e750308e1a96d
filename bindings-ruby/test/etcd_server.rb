# frozen_string_literal: true

require "fileutils"
require "minitest"
require "open3"
require "socket"
require "tmpdir"

# A private etcd member (Debian's etcd-server) on loopback ports below the
# ephemeral range, started once for the run and stopped when it ends.
class EtcdServer
  attr_reader :url

  def self.instance
    @instance ||= new.tap do |server|
      Minitest.after_run { server.stop }
    end
  end

  def initialize
    @dir = Dir.mktmpdir("lockyard-etcd")
    @port = low_port
    peer = "http://127.0.0.1:#{low_port}"
    client = "http://127.0.0.1:#{@port}"
    @url = "etcd://127.0.0.1:#{@port}"
    @pid = Process.spawn("etcd", "--name", "solo", "--data-dir", File.join(@dir, "data"),
                         "--listen-client-urls", client, "--advertise-client-urls", client,
                         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                         "--initial-cluster", "solo=#{peer}", "--log-level", "error",
                         out: File::NULL, err: File::NULL)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 20
    until ctl("endpoint", "health")[1].success?
      raise "etcd did not start" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep 0.05
    end
  end

  def ctl(*args)
    Open3.capture2e({ "ETCDCTL_API" => "3" }, "etcdctl", "--endpoints", "127.0.0.1:#{@port}",
                    "--command-timeout", "2s", *args)
  end

  # Every key lockyard keeps.
  def keys
    ctl("get", "--prefix", "lockyard/", "--keys-only")[0].lines.map(&:strip).reject(&:empty?).sort
  end

  def stop
    Process.kill(:KILL, @pid)
    Process.wait(@pid)
    FileUtils.remove_entry(@dir)
  end

  private

  def low_port
    loop do
      port = rand(20_000..29_999)
      server = TCPServer.new("127.0.0.1", port)
      server.close
      return port
    rescue SystemCallError
      next
    end
  end
end
