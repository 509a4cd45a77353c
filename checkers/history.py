"""Read a run's history (history/sends.jsonl, reads.jsonl, events.jsonl, and txns.jsonl and shares.jsonl where
the run wrote them) for the checkers.

A history of a million sends and two million reads must fit in memory, so a
send or read line is kept as a small named tuple of the fields the checker
uses plus its line number (strings interned, so a producer's name is stored
once); the whole line is re-read from disk only for the few examples a
results.json shows (``History.send_lines`` / ``History.read_lines``).
Events are few (faults, leader observations, commits, final-read marks) and
are kept as the parsed dicts.

The run-directory contract (docs/run-directory.md) says readers ignore unknown fields and
drop an incomplete last line (the harness died while writing it) with a note.
Anything else that is unusable stops the checker with a one-line
``HistoryError`` naming the file and line.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from catalogue.history import SEND_STATUS_ALIASES, SEND_STATUSES as STATUS_NAMES
from checkers.anomalies import CUT_SHORT_NOTE
from checkers.shares import parse_share
from rundir.documents import read_events
from rundir.layout import READS, SENDS, SHARES, TXNS, require_history
from rundir.lines import (ISOLATIONS, READ_COMMITTED, READ_UNCOMMITTED, BadLine, choice_of, field_of, lines_at,
                          read_jsonl)


OK, FAIL, UNKNOWN_STATUS = STATUS_NAMES
LIVE, FINAL = "live", "final"
# what a sends line's status may say -> the status it is (an old name, in a history written before the rename, is
# read as the status it became: catalogue.history.SEND_STATUS_ALIASES)
SEND_STATUSES = {**{s: s for s in STATUS_NAMES}, **SEND_STATUS_ALIASES}
PHASES = {LIVE: LIVE, FINAL: FINAL}
COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
TXN_OUTCOMES = {COMMITTED: COMMITTED, ABORTED: ABORTED, UNKNOWN: UNKNOWN}
INTENTS = {"commit": "commit", "abort": "abort"}
# A txns.jsonl line without an intent field (written by another tool, or before intents existed): what the
# application asked for is not known, so an unknown outcome may have committed. Never a value of the field itself.
INTENT_UNKNOWN = "unknown"


class Send(NamedTuple):
    """One line of sends.jsonl: what the checker needs, and where to find the whole line again."""

    producer: str
    seq: int
    topic: str
    partition: int | None
    offset: int | None  # only for acknowledged sends (and not even then under acks=0)
    status: str  # "ok" | "fail" | "unknown" (an old "info" is read as "unknown")
    line: int  # 1-based line number in sends.jsonl
    txn: int | None = None  # the producer's transaction number; None outside transactions
    from_producer: str | None = None  # an exactly-once pipeline's output: the input message it came from
    from_seq: int | None = None
    complete_ns: int | None = None  # when the outcome was known: places a lost message in time (anomaly_ranges)


class Read(NamedTuple):
    """One line of reads.jsonl.

    producer and seq are both None for a record whose value kchaos did not
    write (the workload records such values with null producer and seq).
    """

    consumer: str
    group: str | None
    phase: str  # "live" | "final"
    topic: str
    partition: int
    offset: int
    producer: str | None
    seq: int | None
    line: int  # 1-based line number in reads.jsonl
    committed: bool = False  # read with isolation.level read_committed (absent: read_uncommitted)
    from_producer: str | None = None  # a pipeline output record: the input message it came from
    from_seq: int | None = None
    # a live read: which of its consumer process's assignments it was polled in (catalogue.history
    # LIVE_READ_FIELDS); None: not recorded (a final read, or a history written before the field)
    assignment: int | None = None


class Txn(NamedTuple):
    """One line of txns.jsonl: how a producer's transaction ended (or that nobody knows)."""

    producer: str
    txn: int
    outcome: str  # "committed" | "aborted" | "unknown"
    intent: str | None  # "commit" | "abort": what the application asked for; None: it never asked;
    # INTENT_UNKNOWN: the line does not say
    line: int


@dataclass
class History:
    """A run's history, compactly: sends and reads as tuples, events as dicts, plus reader notes.

    ``directory`` is where the lines came from, so that whole lines can be
    re-read for examples; a History built in memory (directory None) rebuilds
    them from the tuples instead.
    """

    sends: list[Send]
    reads: list[Read]
    events: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    directory: Path | None = None
    txns: list[Txn] = field(default_factory=list)  # empty outside transactional workloads
    shares: list[Any] = field(default_factory=list)  # shares.jsonl's lines (checkers/shares.py's ShareLine)

    @property
    def cut_short(self) -> bool:
        """No final-read event at all: the run ended before the read-back, so loss cannot be judged."""
        return not any(e.get("kind") == "final-read" for e in self.events)

    def send_lines(self, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The whole sends.jsonl lines with these line numbers, as dicts."""
        return self._lines(SENDS, self.sends, set(numbers))

    def read_lines(self, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The whole reads.jsonl lines with these line numbers, as dicts."""
        return self._lines(READS, self.reads, set(numbers))

    def _lines(self, name: str, records: list[Send] | list[Read], numbers: set[int]) -> dict[int, dict[str, Any]]:
        if not numbers:
            return {}
        if self.directory is None:
            return {r.line: _without_line(r._asdict()) for r in records if r.line in numbers}
        return lines_at(self.directory / name, numbers)


def _without_line(record: dict[str, Any]) -> dict[str, Any]:
    """A tuple as the line it stands for: no line number, and the transaction fields only where they say something."""
    record.pop("line", None)
    for name in ("txn", "from_producer", "from_seq", "complete_ns", "assignment"):
        if record.get(name, 0) is None:
            del record[name]
    if "committed" in record:
        committed = record.pop("committed")
        if committed:
            record["isolation"] = READ_COMMITTED
    return record


# --- reading -----------------------------------------------------------------------------------


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of small tuples are built.

    Tuples of names and numbers never form cycles, but the collector would
    walk every one of them again each time a generation fills up.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_history(history_dir: Path) -> History:
    """Read the three history files: sends and reads must hold something (require_history); events may be
    missing (noted)."""
    require_history(history_dir)
    with paused_gc():
        label = history_dir.name
        notes: list[str] = []
        sends = read_jsonl(history_dir / SENDS, f"{label}/{SENDS}", parse_send, notes)
        reads = read_jsonl(history_dir / READS, f"{label}/{READS}", parse_read, notes)
        events = read_events(history_dir, notes)
        txns_path = history_dir / TXNS
        txns = read_jsonl(txns_path, f"{label}/{TXNS}", parse_txn, notes) if txns_path.is_file() else []
        shares_path = history_dir / SHARES
        shares = read_jsonl(shares_path, f"{label}/{SHARES}", parse_share, notes) if shares_path.is_file() else []
        history = History(sends=sends, reads=reads, events=events, notes=notes, directory=history_dir, txns=txns,
                          shares=shares)
        if history.cut_short:
            notes.append(CUT_SHORT_NOTE)
        return history


# --- one line ----------------------------------------------------------------------------------


_ABSENT = object()  # a field the line does not have at all (partition must be present, if null)
_intern = sys.intern  # names (producer, topic, consumer, group): a million lines share one string


def _name(value: str | None) -> str | None:
    return None if value is None else _intern(value)


def parse_send(obj: dict[str, Any], line: int) -> Send:
    """A send line as a Send; the common, well-formed line takes a quick path (see checked_send)."""
    get = obj.get
    producer, seq, topic, status = get("producer"), get("seq"), get("topic"), get("status")
    partition, offset = get("partition", _ABSENT), get("offset")
    status = SEND_STATUSES.get(status) if type(status) is str else None
    txn, complete_ns = get("txn"), get("complete_ns")
    if (type(producer) is str and type(seq) is int and type(topic) is str and status is not None
            and (partition is None or type(partition) is int) and (offset is None or type(offset) is int)
            and (txn is None or type(txn) is int) and get("from_producer") is None
            and (complete_ns is None or type(complete_ns) is int)):
        return Send(_intern(producer), seq, _intern(topic), partition, offset, status, line, txn,
                    complete_ns=complete_ns)
    return checked_send(obj, line)


def checked_send(obj: dict[str, Any], line: int) -> Send:
    """Field by field, so that a bad line is reported by what is wrong with it."""
    return Send(
        producer=_name(field_of(obj, "producer", str)),
        seq=field_of(obj, "seq", int),
        topic=_name(field_of(obj, "topic", str)),
        partition=field_of(obj, "partition", int, nullable=True),
        offset=field_of(obj, "offset", int, nullable=True, optional=True),
        status=choice_of(obj, "status", SEND_STATUSES),
        line=line,
        txn=field_of(obj, "txn", int, nullable=True, optional=True),
        **_source(obj),
        complete_ns=field_of(obj, "complete_ns", int, nullable=True, optional=True),
    )


def parse_read(obj: dict[str, Any], line: int) -> Read:
    """A read line as a Read; the common, well-formed line takes a quick path (see checked_read)."""
    get = obj.get
    consumer, group, phase, topic = get("consumer"), get("group"), get("phase"), get("topic")
    partition, offset, producer, seq = get("partition"), get("offset"), get("producer"), get("seq")
    phase = PHASES.get(phase) if type(phase) is str else None
    isolation, assignment = get("isolation"), get("assignment")
    if (type(consumer) is str and (group is None or type(group) is str) and phase is not None
            and type(topic) is str and type(partition) is int and type(offset) is int
            and type(producer) is str and type(seq) is int and get("from_producer") is None
            and (isolation is None or isolation == READ_UNCOMMITTED or isolation == READ_COMMITTED)
            and (assignment is None or type(assignment) is int)):
        return Read(_intern(consumer), None if group is None else _intern(group), phase, _intern(topic),
                    partition, offset, _intern(producer), seq, line, isolation == READ_COMMITTED,
                    assignment=assignment)
    return checked_read(obj, line)


def checked_read(obj: dict[str, Any], line: int) -> Read:
    """Field by field, so that a bad line is reported by what is wrong with it (or a foreign value accepted)."""
    producer = field_of(obj, "producer", str, nullable=True)
    seq = field_of(obj, "seq", int, nullable=True)
    if (producer is None) != (seq is None):
        raise BadLine("fields 'producer' and 'seq' must both be set or both be null")
    return Read(
        consumer=_name(field_of(obj, "consumer", str)),
        group=_name(field_of(obj, "group", str, nullable=True, optional=True)),
        phase=choice_of(obj, "phase", PHASES),
        topic=_name(field_of(obj, "topic", str)),
        partition=field_of(obj, "partition", int),
        offset=field_of(obj, "offset", int),
        producer=_name(producer),
        seq=seq,
        line=line,
        committed=choice_of(obj, "isolation", ISOLATIONS, optional=True) == READ_COMMITTED,
        **_source(obj),
        assignment=field_of(obj, "assignment", int, nullable=True, optional=True),
    )


def _source(obj: dict[str, Any]) -> dict[str, Any]:
    """from_producer and from_seq of a pipeline output's send or read: both set, or both null/absent."""
    producer = field_of(obj, "from_producer", str, nullable=True, optional=True)
    seq = field_of(obj, "from_seq", int, nullable=True, optional=True)
    if (producer is None) != (seq is None):
        raise BadLine("fields 'from_producer' and 'from_seq' must both be set or both be null")
    return {"from_producer": _name(producer), "from_seq": seq}


def parse_txn(obj: dict[str, Any], line: int) -> Txn:
    """A txns.jsonl line as a Txn, field by field (a run has few transactions next to its sends)."""
    return Txn(
        producer=_name(field_of(obj, "producer", str)),
        txn=field_of(obj, "txn", int),
        outcome=choice_of(obj, "outcome", TXN_OUTCOMES),
        intent=choice_of(obj, "intent", INTENTS, nullable=True) if "intent" in obj else INTENT_UNKNOWN,
        line=line,
    )


