#!/bin/sh
# Builds the native extension into lib/lockyard/, so that
# `ruby -Ibindings-ruby/lib` loads this checkout without installing the gem.
# Honours CARGO_TARGET_DIR like cargo itself.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
RUBY=${RUBY:-$(command -v ruby)} cargo build --release --manifest-path "$here/Cargo.toml"
target=$(cargo metadata --format-version 1 --no-deps --manifest-path "$here/Cargo.toml" |
  ruby -rjson -e 'print JSON.parse($stdin.read).fetch("target_directory")')
cp "$target/release/liblockyard_ruby.so" "$here/lib/lockyard/lockyard_ruby.so"
echo "built $here/lib/lockyard/lockyard_ruby.so"
