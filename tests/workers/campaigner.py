"""A candidate in a leader election, driven line by line on stdin:
"campaign" (waits until leader), "resign", or "exit". Answers each with a
JSON line carrying its term's fencing token.

    python campaigner.py URL NAME VALUE

URL is a Redis or an etcd URL.
"""

import json
import sys

from lockyard import etcd, redis


def main() -> None:
    url, name, value = sys.argv[1:4]
    backend = etcd if url.startswith(("etcd://", "etcds://")) else redis
    with backend.Session(url, ttl=2.0, lock_delay=0) as session:
        election = backend.Election(url, name, session)
        for command in sys.stdin:
            command = command.strip()
            if command == "exit":
                break
            term = election.fencing_token
            if command == "campaign":
                election.campaign(value)
                term = election.fencing_token
            else:
                election.resign()
            print(
                json.dumps({"event": command, "lang": "py", "fence": term}), flush=True
            )


if __name__ == "__main__":
    main()
