"""Where a run's wall time went, phase by phase: printed by ``kchaos run``, averaged by ``kchaos nightly``.

A run's overhead is everything but the load and the settling the
scenario asks for; which phase holds it is what this line says.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES_LINE = re.compile(r"^phases: (.+)$", re.MULTILINE)
PHASE_ITEM = re.compile(r"([^,]+?) (\d+(?:\.\d+)?) s(?:,|$)")


class PhaseTimer:
    """Wall seconds per named phase; a phase started again adds to its total. One phase runs at a time."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._current: str | None = None
        self._since = 0.0

    def start(self, name: str) -> None:
        """End the current phase (if any) and start ``name``."""
        self.stop()
        self._current, self._since = name, time.monotonic()

    def stop(self) -> None:
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + time.monotonic() - self._since
            self._current = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.start(name)
        try:
            yield
        finally:
            self.stop()

    def line(self) -> str:
        """``phases: starting the cluster 5.1 s, load 60.0 s, ...`` in the order the phases first ran."""
        return "phases: " + ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())


def parse_phases(output: str) -> dict[str, float]:
    """The last ``phases:`` line of a run's output as {phase: seconds}; {} when it printed none."""
    found = PHASES_LINE.findall(output)
    if not found:
        return {}
    return {name.strip(): float(s) for name, s in PHASE_ITEM.findall(found[-1])}
