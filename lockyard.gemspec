# frozen_string_literal: true

# Two gems from one spec:
#
# - the source gem (default) builds its native extension with cargo at
#   install time, so it ships the whole Cargo workspace: the root manifest
#   and lock file, the core crate, the Ruby binding, and the manifest and
#   sources of every other member (cargo refuses a workspace with a member
#   missing);
# - the platform gem (LOCKYARD_GEM_PLATFORM=x86_64-linux, written by
#   scripts/dist) ships the extension already compiled for this Ruby's ABI
#   in bindings-ruby/lib/lockyard/, and needs no compiler to install.

workspace_version = File.read(File.join(__dir__, "Cargo.toml"))[/^\[workspace\.package\].*?^version\s*=\s*"([^"]+)"/m, 1]
platform = ENV.fetch("LOCKYARD_GEM_PLATFORM", "")

Gem::Specification.new do |spec|
  spec.name = "lockyard"
  spec.version = workspace_version or raise "no [workspace.package] version in Cargo.toml"
  spec.summary = "Distributed locks on Redis and Google Cloud Storage that stay correct under crashes, pauses and network faults"
  spec.description = <<~TEXT
    Locks, wait groups, sessions, leader election and a quorum read/write
    lock whose lease runs on the server's clock and is refreshed in the
    background, with health checks and fencing tokens. A Ruby binding of the
    Rust library lockyard.
  TEXT
  spec.authors = ["lockyard maintainers"]
  spec.license = "MIT"
  spec.homepage = "https://example.invalid/lockyard"
  spec.require_paths = ["bindings-ruby/lib"]
  # The `lockyard` command, the same as the Rust binary's (Lockyard::Command).
  spec.bindir = "exe"
  spec.executables = ["lockyard"]

  if platform.empty?
    spec.required_ruby_version = ">= 3.1"
    spec.files = Dir.chdir(__dir__) do
      Dir[
        "lockyard.gemspec", "Cargo.toml", "Cargo.lock", "core/**/*", "bindings-ruby/**/*", "exe/lockyard",
        "bindings-python/Cargo.toml", "bindings-python/build.rs", "bindings-python/src/**/*",
        "cli/Cargo.toml", "cli/src/**/*"
      ].select { |path| File.file?(path) }
        # Build products of a development checkout.
        .reject { |path| path.match?(%r{(\A|/)(target|tmp)/|\.(so|bundle|dylib)\z|/Makefile\z}) }
    end
    spec.extensions = ["bindings-ruby/ext/lockyard/extconf.rb"]
  else
    # The extension is compiled against this Ruby's ABI (major.minor).
    abi = Gem::Version.new(RUBY_VERSION).segments.first(2).join(".")
    spec.platform = Gem::Platform.new(platform)
    spec.required_ruby_version = "~> #{abi}.0"
    spec.files = Dir.chdir(__dir__) do
      extension = "bindings-ruby/lib/lockyard/lockyard_ruby.#{RbConfig::CONFIG['DLEXT']}"
      raise "#{extension} is missing: scripts/dist builds the platform gem" unless File.file?(extension)

      [extension, *Dir["bindings-ruby/lib/**/*.rb"], "exe/lockyard"]
    end
  end
end
