# frozen_string_literal: true

# Runs every binding test: ruby bindings-ruby/test/run.rb
# (build the extension first with bindings-ruby/build-dev.sh, or install the gem).
here = File.expand_path(__dir__)
$LOAD_PATH.unshift(File.expand_path("../lib", here), here)
Dir[File.join(here, "**", "*_test.rb")].sort.each { |file| require file }
