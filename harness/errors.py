"""How a kchaos command ends: a termination signal unwinds like Ctrl-C, a failure is one line and exit 2.

The exit codes and HarnessError are the catalogue's (catalogue/exits.py), so every stage can raise and return them.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

from catalogue.exits import EXIT_HARNESS


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C so every `finally` (teardown) runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def _terminate(signum: int, _frame: object) -> NoReturn:
    raise Terminated(signum)


def install_termination_handlers() -> None:
    """Make SIGTERM and SIGHUP unwind the stack like Ctrl-C does."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)


def fail(message: str) -> NoReturn:
    print(f"kchaos: {message}", file=sys.stderr)
    raise SystemExit(EXIT_HARNESS)
