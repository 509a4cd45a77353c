"""The lines of a node's log and their times on the run's time line.

Every node logs with the pattern ``[%d] %p %m (%c)%n`` (clusters/config.py), so a line is
``[2026-11-24 07:03:26,784] INFO <message> (<logger>)``. The time is the container's wall clock, which is the
host's kernel clock in UTC (the node images set no time zone): checked against the runs' fault times, e.g. a
broker cut from its peers at 07:03:20.31 by events.jsonl shrank its ISRs at 07:03:26.6, replica.lag.time.max.ms
(5 s) plus one ISR check later, and its followers' lastCaughtUpTimeMs (epoch ms) read 07:03:20.49. Lines that
do not start with a time (stack traces, the config dump) belong to the line above and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

_LINE = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d),(\d{3})\] ([A-Z]+) (.*?)(?: \([\w.$]+\))?\s*$")
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class LogLine:
    """One timestamped line: its number in the file, the wall-clock time (UTC), the level and the bare message."""

    number: int
    stamp: tuple[int, ...]  # year, month, day, hour, minute, second, millisecond
    level: str
    message: str

    def time_ns(self, started: datetime) -> int:
        """Nanoseconds since the run started (``started``: scenario.yaml's started_at, time-zone aware)."""
        y, mo, d, h, mi, s, ms = self.stamp
        wall = datetime(y, mo, d, h, mi, s, ms * 1000, tzinfo=timezone.utc)
        return (wall - started) // _MICROSECOND * 1000


def parse_line(number: int, text: str) -> LogLine | None:
    """The line's parts, or None for a line that does not start with a log4j time (a continuation)."""
    if not text.startswith("["):
        return None
    m = _LINE.match(text)
    if m is None:
        return None
    return LogLine(number, tuple(int(m.group(i)) for i in range(1, 8)), m.group(8), m.group(9))


def read_lines(path: Path) -> Iterator[LogLine]:
    """The timestamped lines of one node log, in file order (bytes that are not UTF-8 are replaced)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, 1):
            line = parse_line(number, text)
            if line is not None:
                yield line
