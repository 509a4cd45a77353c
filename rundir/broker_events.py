"""history/broker-events.jsonl: what the nodes' own logs say happened (elections, ISR changes, truncations).

Rebuilt whole from logs/ by ``kchaos forensics`` (and at the end of ``kchaos run``), so it is written in one
atomic step rather than appended like the live histories. Every line has ``kind``, ``node`` (the log's node
name: broker1, controller2, zk1), ``time_ns`` (run time, like every other history) and ``line`` (its line in
logs/<node>.log); partition events add ``topic`` and ``partition``. Readers follow the history rules
(rundir.lines): unknown fields are ignored, a cut-off last line is dropped with a note.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rundir.documents import write_jsonl_atomically
from rundir.layout import BROKER_EVENTS, RunDir
from rundir.lines import field_of, read_history_file

def write_broker_events(run: RunDir, events: Iterable[dict[str, Any]]) -> Path:
    """Replace history/broker-events.jsonl with these events, one compact JSON line each."""
    return write_jsonl_atomically(run.broker_events, events)


def parse_broker_event(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """The fields every broker event has; partition events also name their partition."""
    field_of(obj, "kind", str)
    field_of(obj, "node", str)
    field_of(obj, "time_ns", int)
    field_of(obj, "topic", str, optional=True)
    field_of(obj, "partition", int, optional=True)
    return obj


def read_broker_events(history_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every line of history/broker-events.jsonl; a missing file is noted (no events: not parsed yet)."""
    return read_history_file(history_dir, BROKER_EVENTS, parse_broker_event, notes,
                             "`kchaos forensics RUN` parses the node logs into it")
