# frozen_string_literal: true

# The gem builds its native extension from source with cargo at install
# time, so it ships the whole Cargo workspace: the root manifest and lock
# file, the core crate, the Ruby binding, and the manifest and sources of
# every other member (cargo refuses a workspace with a member missing).

workspace_version = File.read(File.join(__dir__, "Cargo.toml"))[/^\[workspace\.package\].*?^version\s*=\s*"([^"]+)"/m, 1]

Gem::Specification.new do |spec|
  spec.name = "lockyard"
  spec.version = workspace_version or raise "no [workspace.package] version in Cargo.toml"
  spec.summary = "Distributed locks on Redis that stay correct under crashes, pauses and network faults"
  spec.description = <<~TEXT
    Locks whose lease runs on the server's clock and is refreshed in the
    background, with health checks and fencing tokens. A Ruby binding of the
    Rust library lockyard; built from source with cargo on install.
  TEXT
  spec.authors = ["lockyard maintainers"]
  spec.license = "MIT"
  spec.homepage = "https://example.invalid/lockyard"
  spec.required_ruby_version = ">= 3.1"

  spec.files = Dir.chdir(__dir__) do
    Dir[
      "lockyard.gemspec", "Cargo.toml", "Cargo.lock", "core/**/*", "bindings-ruby/**/*",
      "bindings-python/Cargo.toml", "bindings-python/build.rs", "bindings-python/src/**/*"
    ].select { |path| File.file?(path) }
      # Build products of a development checkout.
      .reject { |path| path.match?(%r{(\A|/)(target|tmp)/|\.(so|bundle|dylib)\z|/Makefile\z}) }
  end
  spec.require_paths = ["bindings-ruby/lib"]
  spec.extensions = ["bindings-ruby/ext/lockyard/extconf.rb"]
end
