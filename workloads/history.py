"""Append-only JSON-lines histories (sends, reads, events, txns) of a run.

Lines are buffered in memory and written by a background thread at least
once a second, so a harness killed mid-run leaves a readable history with at
most the last second missing and at most one cut-off last line. ``close()``
fsyncs. Field names and their order are catalogue.history's (rundir/records.py
makes the lines).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from rundir.layout import RunDir
from rundir.records import event_record, json_line

FLUSH_INTERVAL_S = 0.5
FLUSH_SLICE = 4096  # lines joined into one write
# librdkafka's own log lines (broker down, request timed out) go to Python
# logging, not over the progress display; `kchaos -v` shows them.
RDKAFKA_LOG = logging.getLogger("rdkafka")


class RunClock:
    """Integer nanoseconds since the run started (the ``*_ns`` fields).

    time.monotonic_ns is one clock for the whole machine, so a workload
    process given the harness's ``origin_ns`` stamps its lines on the run's
    own time line.
    """

    def __init__(self, origin_ns: int | None = None) -> None:
        self._origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self.wall_start = time.time()

    @property
    def origin_ns(self) -> int:
        return self._origin

    def now_ns(self) -> int:
        return time.monotonic_ns() - self._origin

    def seconds(self) -> float:
        return self.now_ns() / 1e9


class HistoryWriter:
    """A thread-safe JSON-lines appender with a once-a-second background flush."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("ab")
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.lines = 0
        self._flusher = threading.Thread(target=self._flush_loop, name=f"flush-{path.stem}", daemon=True)
        self._flusher.start()

    def write(self, record: dict[str, Any]) -> None:
        self.write_lines([json_line(record)])

    def write_many(self, records: list[dict[str, Any]]) -> None:
        """Several lines at once (one lock for a whole batch from a workload process)."""
        self.write_lines([json_line(r) for r in records])

    def write_lines(self, lines: list[bytes]) -> None:
        """Lines already JSON (UTF-8, no newline): the workload clients format their hot lines themselves."""
        with self._lock:
            self._pending.extend(lines)
            self.lines += len(lines)

    def flush(self) -> None:
        """Write the buffered lines, a slice of FLUSH_SLICE at a time: half a second of a fast reader's lines
        joined at once, and copied again to add the last newline, would be one large buffer built twice; a slice
        stays small and the newline goes in with the join."""
        with self._lock:
            pending, self._pending = self._pending, []
        for i in range(0, len(pending), FLUSH_SLICE):
            part = pending[i:i + FLUSH_SLICE]
            part.append(b"")  # the last line's newline
            self._file.write(b"\n".join(part))
        if pending:
            self._file.flush()

    def _flush_loop(self) -> None:
        while not self._closed.wait(FLUSH_INTERVAL_S):
            self.flush()

    def close(self) -> None:
        """Write what is buffered and fsync; safe to call twice."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._flusher.join()
        self.flush()
        os.fsync(self._file.fileno())
        self._file.close()


class History:
    """The history files of a run directory, opened together.

    txns.jsonl exists only in transactional runs, shares.jsonl only in runs with a share group: the absence of
    either says the run had none.
    """

    def __init__(self, run: RunDir, clock: RunClock, transactions: bool = False, shares: bool = False) -> None:
        self.clock = clock
        self.sends = HistoryWriter(run.sends)
        self.reads = HistoryWriter(run.reads)
        self.events = HistoryWriter(run.events)
        self.txns = HistoryWriter(run.txns) if transactions else None
        self.shares = HistoryWriter(run.shares) if shares else None

    def event(self, kind: str, **fields: Any) -> None:
        """An events.jsonl line, its fields in the catalogue's order (ValueError for one it does not list)."""
        self.events.write(event_record(kind, fields))

    def close(self) -> None:
        for writer in (self.sends, self.reads, self.events, self.txns, self.shares):
            if writer is not None:
                writer.close()
