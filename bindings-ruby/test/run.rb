# frozen_string_literal: true

# Runs every binding test: ruby bindings-ruby/test/run.rb
# Tests this checkout once bindings-ruby/build-dev.sh has built the extension
# into lib/, and the installed gem otherwise.
here = File.expand_path(__dir__)
lib = File.expand_path("../lib", here)
$LOAD_PATH.unshift(lib) if Dir[File.join(lib, "lockyard", "lockyard_ruby.*")].any?
$LOAD_PATH.unshift(here)
Dir[File.join(here, "**", "*_test.rb")].sort.each { |file| require file }
