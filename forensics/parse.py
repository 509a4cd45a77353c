"""One node's log into broker events, completing what a single line cannot say alone.

Two things need the lines before: an ``ISR updated to`` line is an expansion only if the ISR this broker knew
was smaller (``isr_expand``; anything else is an ``isr_update``: the commit of a shrink, or of an ISR not seen
before), and a log's ``Truncating to offset`` gets its reason from the fetcher line that asked for it (or, for
KRaft's metadata log, from the Raft client's line just after it). What a broker knows starts over with each JVM
(``process_start``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from forensics.nodelog import LogLine, read_lines
from forensics.templates import Fields, match

Event = dict[str, Any]
Part = tuple[Any, Any]  # (topic, partition); (None, None) for node events
RAFT_LOOKBACK = 20  # events back to look for the metadata truncation a Raft client line explains


class NodeParser:
    """The events of one node's lines, in file order; ``started`` is the run's wall-clock start (aware)."""

    def __init__(self, node: str, started: datetime) -> None:
        self.node = node
        self.started = started
        self.isr: dict[Part, list[int]] = {}          # the ISR this broker last knew, while it leads the partition
        self.reasons: dict[Part, Fields] = {}         # a fetcher's reason to truncate, until the log acts on it

    def events(self, lines: Iterable[LogLine]) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            fields = match(line.message)
            if fields is None:
                continue
            if fields["kind"] == "_raft_truncation":
                if self._explain(events, fields):
                    continue
                fields["kind"] = "truncate"  # no log line before it: the Raft client's line is the event
            fields = self._complete(fields)
            if fields is not None:
                kind = fields.pop("kind")
                events.append({"kind": kind, "node": self.node, "time_ns": line.time_ns(self.started),
                               "line": line.number, **fields})
        return events

    @staticmethod
    def _explain(events: list[Event], raft: Fields) -> bool:
        """Give the metadata log's truncation just logged its reason; False when there is none to explain."""
        for event in reversed(events[-RAFT_LOOKBACK:]):
            if (event["kind"] == "truncate" and event["topic"] == raft["topic"] and event["reason"] is None
                    and event["to_offset"] == raft["to_offset"]):
                event.update(reason=raft["reason"], leader=raft["leader"])
                return True
        return False

    def _complete(self, fields: Fields) -> Fields | None:
        """The event for these fields given what came before, or None for half an event kept for later."""
        kind = fields["kind"]
        part: Part = (fields.get("topic"), fields.get("partition"))
        if kind == "process_start":
            self.isr.clear()
            self.reasons.clear()
        elif kind == "become_leader":
            self.isr[part] = fields["isr"]
        elif kind == "become_follower":
            self.isr.pop(part, None)
        elif kind == "_isr_committed":
            old = self.isr.get(part)
            new = fields["new_isr"]
            self.isr[part] = new
            grew = old is not None and set(new) > set(old)
            return {**fields, "kind": "isr_expand" if grew else "isr_update", "old_isr": old}
        elif kind == "_truncation_reason":
            self.reasons[part] = fields
            return None
        elif kind == "_truncation_noop":
            self.reasons.pop(part, None)
            return None
        elif kind == "truncate" and "reason" not in fields:
            reason = self.reasons.pop(part, None)
            extra = {k: v for k, v in (reason or {}).items() if k not in ("kind", "topic", "partition")}
            return {**fields, "reason": None, **extra}
        return fields


def parse_node_log(node: str, path: Path, started: datetime) -> list[Event]:
    """Every broker event in one node's log (``node``: its name, broker1, controller2, zk1)."""
    return NodeParser(node, started).events(read_lines(path))
