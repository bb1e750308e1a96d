# frozen_string_literal: true

# Writes the Makefile `gem install` runs: `cargo build --release` of the
# workspace this gem ships, then the built library installed as
# lockyard/lockyard_ruby.<DLEXT> under sitearchdir (which RubyGems points
# at the gem's extension directory). No gem is needed, rb_sys included.
#
# CARGO_TARGET_DIR is honoured; without it the build happens in ./target
# here and is removed once installed, so the gem directory stays small.

require "rbconfig"
require "shellwords"

workspace = File.expand_path("../../..", __dir__)
manifest = File.join(workspace, "bindings-ruby", "Cargo.toml")
abort "extconf.rb: #{manifest} is missing" unless File.exist?(manifest)

own_target = ENV["CARGO_TARGET_DIR"].to_s.empty?
target_dir = own_target ? File.join(Dir.pwd, "target") : File.expand_path(ENV["CARGO_TARGET_DIR"])
built = File.join(target_dir, "release", "liblockyard_ruby.#{RbConfig::CONFIG['SOEXT']}")
installed = "lockyard_ruby.#{RbConfig::CONFIG['DLEXT']}"
cargo = ENV.fetch("CARGO", "cargo")
found = File.executable?(cargo) ||
        ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).any? { |dir| File.executable?(File.join(dir, cargo)) }
unless found
  abort "extconf.rb: cargo not found. This is lockyard's source gem, which compiles its " \
        "extension with Rust (https://rustup.rs); the x86_64-linux platform gem needs no compiler."
end

q = ->(word) { Shellwords.escape(word) }

File.write("Makefile", <<~MAKEFILE)
  # Written by #{File.basename(__FILE__)}; `make install sitearchdir=DIR` installs elsewhere.
  sitearchdir = #{RbConfig::CONFIG['sitearchdir']}
  DESTDIR =

  all:
  \tRUBY=#{q[RbConfig.ruby]} CARGO_TARGET_DIR=#{q[target_dir]} #{cargo} build --release --manifest-path #{q[manifest]}

  install: all
  \tmkdir -p $(DESTDIR)$(sitearchdir)/lockyard
  \tcp #{q[built]} $(DESTDIR)$(sitearchdir)/lockyard/#{installed}
  #{own_target ? "\trm -rf #{q[target_dir]}" : ''}

  clean:
  #{own_target ? "\trm -rf #{q[target_dir]}" : "\t@:"}

  .PHONY: all install clean
MAKEFILE
