# frozen_string_literal: true

# A candidate in a leader election, driven line by line on stdin: the same
# commands and JSON-line answers as campaigner.py.
#
#   ruby campaigner.rb URL NAME VALUE
#
# URL is a Redis or an etcd URL.

require "json"
require "lockyard"

url, name, value = ARGV
$stdout.sync = true
backend = url.start_with?("etcd://", "etcds://") ? Lockyard::Etcd : Lockyard::Redis
backend::Session.open(url: url, ttl: 2, lock_delay: 0) do |session|
  election = backend::Election.new(url: url, name: name, session: session)
  while (command = $stdin.gets&.strip) && command != "exit"
    term = election.fencing_token
    if command == "campaign"
      election.campaign(value)
      term = election.fencing_token
    else
      election.resign
    end
    puts JSON.generate(event: command, lang: "rb", fence: term)
  end
end
