# frozen_string_literal: true

require "test_helper"

# A keyword left nil takes the core builder's default, and the YARD docs of
# each constructor state that default in words: both are held to the core.
class DefaultsTest < Minitest::Test
  CORE = Lockyard.send(:core_defaults)

  def redis
    RedisServer.instance
  end

  # keyword => "30", from the "(default 30)" of each @param above +new+.
  def documented_defaults(class_name)
    file, line = Object.const_get(class_name).method(:new).source_location
    above = File.readlines(file).first(line - 1).reverse.take_while { |text| text.strip.start_with?("#") }
    text = above.reverse.map { |comment| comment.strip.delete_prefix("#").strip }.join(" ")
    text.split("@param ").drop(1).to_h { |param| [param[/\A\w+/].to_sym, param[/\(default ([^;):]+)/, 1]] }.compact
  end

  def test_docs_state_the_core_defaults
    assert_equal %w[Lockyard::GCS::Lock Lockyard::Quorum::RwLock Lockyard::Redis::Lock Lockyard::Redis::Session
                    Lockyard::Redis::WaitGroup], CORE.keys.sort
    CORE.each do |class_name, defaults|
      documented = documented_defaults(class_name)
      assert_equal defaults.keys.sort, documented.keys.sort, class_name
      defaults.each do |keyword, value|
        shown = documented.fetch(keyword)
        same = value.is_a?(Numeric) ? Float(shown, exception: false) == value : shown == value.inspect
        assert same, "#{class_name} #{keyword}: the docs say #{shown}, the core #{value.inspect}"
      end
    end
  end

  def test_a_session_given_nil_or_nothing_has_the_core_defaults
    core = CORE.fetch("Lockyard::Redis::Session")
    [{}, core.transform_values { nil }].each do |options|
      Lockyard::Redis::Session.open(url: redis.url, **options) do |session|
        assert_equal core.values_at(:ttl, :behavior, :lock_delay), [session.ttl, session.behavior, session.lock_delay]
      end
    end
  end

  def test_a_gcs_lock_given_nil_has_the_core_ttl
    core = CORE.fetch("Lockyard::GCS::Lock")
    lock = Lockyard::GCS::Lock.new(bucket_name: "b", path: "p", cloud_storage_options: { emulator_host: "127.0.0.1:1" },
                                   **core.transform_values { nil })
    assert_equal core.fetch(:ttl), lock.ttl
  end

  def test_redis_primitives_given_nil_take_the_core_defaults
    name = "defaults-#{SecureRandom.hex(4)}"
    nils = CORE.fetch("Lockyard::Redis::Lock").transform_values { nil }
    lock = Lockyard::Redis::Lock.new(url: redis.url, name: name, **nils)
    assert(lock.synchronize(timeout: 0) { lock.healthy? })
    group = Lockyard::Redis::WaitGroup.new(url: redis.url, name: "#{name}-wg", limit: 1, **nils)
    assert(group.synchronize(timeout: 0, &:healthy?))
    rw = Lockyard::Quorum::RwLock.new(urls: [redis.url], name: "#{name}-rw", **nils)
    assert(rw.with_write_lock(timeout: 0) { rw.healthy? })
  end
end
