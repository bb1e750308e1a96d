"""The ``lockyard`` command installed with the wheel: the command line of
the Rust binary (``lockyard --help``), run in this process. It installs
its own handlers for SIGINT, SIGTERM and SIGHUP, which it passes on to
COMMAND; the interpreter's KeyboardInterrupt plays no part."""

from __future__ import annotations

import signal
import sys


def main() -> None:
    # Until the command installs its own handlers, these signals do what
    # they do to the binary: end the process, without a traceback. One
    # ignored when the process started (nohup) stays ignored.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    from lockyard._lockyard import run_command

    sys.exit(run_command(sys.argv[1:]))


if __name__ == "__main__":
    main()
