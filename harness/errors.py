"""Errors the harness reports as one line and exit code 2."""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_HARNESS = 2


class HarnessError(RuntimeError):
    """The harness could not do its job: bad input, a fault not applied, a cluster never ready."""


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
