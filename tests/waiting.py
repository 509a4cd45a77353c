"""Waiting on a condition in tests, with a deadline, instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from clusters.errors import ClusterError

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.5,
               ignoring: tuple[type[Exception], ...] = (ClusterError,)) -> T:
    """Poll ``check`` until it returns something truthy and return that; fail after ``timeout_s``.

    An exception in ``ignoring`` counts as "not yet": a cluster that does not
    answer (a frozen broker) is what many waits are waiting out.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            result = check()
            if result:
                return result
        except ignoring:
            pass
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout_s:g}s: {what}")
        time.sleep(interval_s)


def wait_for(check: Callable[[], object], timeout_s: float, what: str) -> None:
    """``eventually`` at a fine grain, for the workload's own counters (no cluster call to wait out)."""
    eventually(check, timeout_s, what, interval_s=0.02, ignoring=())
