"""Read a run's history (history/sends.jsonl, reads.jsonl, events.jsonl) for the checkers.

A history of a million sends and two million reads must fit in memory, so a
send or read line is kept as a small named tuple of the fields the checker
uses plus its line number (strings interned, so a producer's name is stored
once); the whole line is re-read from disk only for the few examples a
results.json shows (``History.send_lines`` / ``History.read_lines``).
Events are few (faults, leader observations, commits, final-read marks) and
are kept as the parsed dicts.

The run-directory contract (DESIGN.md) says readers ignore unknown fields and
drop an incomplete last line (the harness died while writing it) with a note.
Anything else that is unusable stops the checker with a one-line
``HistoryError`` naming the file and line.
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

SENDS_FILE = "sends.jsonl"
READS_FILE = "reads.jsonl"
EVENTS_FILE = "events.jsonl"

OK, FAIL, INFO = "ok", "fail", "info"
LIVE, FINAL = "live", "final"
SEND_STATUSES = {OK: OK, FAIL: FAIL, INFO: INFO}
PHASES = {LIVE: LIVE, FINAL: FINAL}

CUT_SHORT_NOTE = "the run was cut short: no final read-back was recorded, so loss cannot be judged"

T = TypeVar("T")


class HistoryError(ValueError):
    """The history cannot be checked; the message is one line naming the file and line."""


class NotJudged(HistoryError):
    """The history holds nothing to judge (no sends, or nothing read back): the run proved nothing."""


def require_history(history_dir: Path) -> None:
    """Refuse a history with no send or no read to judge (NotJudged, one line); both checkers call it first.

    Judged anyway, a missing reads.jsonl would call every acknowledged message
    lost, and a missing sends.jsonl every read unexpected.
    """
    if not history_dir.is_dir():
        raise HistoryError(f"{history_dir}: no history directory")
    for name, meaning in ((SENDS_FILE, "no send was recorded"), (READS_FILE, "nothing was read back")):
        path = history_dir / name
        if not path.is_file():
            raise NotJudged(f"not judged: history/{name} is missing ({meaning})")
        if not _holds_a_line(path):
            raise NotJudged(f"not judged: history/{name} is empty ({meaning})")


def _holds_a_line(path: Path) -> bool:
    """Whether the file has a complete JSON line, or a bad one the reader will report (not only a cut-off one)."""
    with path.open("rb") as f:
        lines = (raw for raw in f if raw.strip())
        first = next(lines, None)
        if first is None:
            return False
        try:
            parse_json_line(first)
            return True
        except ValueError:
            return next(lines, None) is not None


class Send(NamedTuple):
    """One line of sends.jsonl: what the checker needs, and where to find the whole line again."""

    producer: str
    seq: int
    topic: str
    partition: int | None
    offset: int | None  # only for acknowledged sends (and not even then under acks=0)
    status: str  # "ok" | "fail" | "info"
    line: int  # 1-based line number in sends.jsonl


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

    @property
    def cut_short(self) -> bool:
        """No final-read event at all: the run ended before the read-back, so loss cannot be judged."""
        return not any(e.get("kind") == "final-read" for e in self.events)

    def send_lines(self, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The whole sends.jsonl lines with these line numbers, as dicts."""
        return self._lines(SENDS_FILE, self.sends, set(numbers))

    def read_lines(self, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The whole reads.jsonl lines with these line numbers, as dicts."""
        return self._lines(READS_FILE, self.reads, set(numbers))

    def _lines(self, name: str, records: list[Send] | list[Read], numbers: set[int]) -> dict[int, dict[str, Any]]:
        if not numbers:
            return {}
        if self.directory is None:
            return {r.line: _without_line(r._asdict()) for r in records if r.line in numbers}
        return lines_at(self.directory / name, numbers)


def _without_line(record: dict[str, Any]) -> dict[str, Any]:
    record.pop("line", None)
    return record


def lines_at(path: Path, numbers: set[int]) -> dict[int, dict[str, Any]]:
    """Parse only the wanted lines of a JSON-lines file (it was validated when first read)."""
    found: dict[int, dict[str, Any]] = {}
    last = max(numbers)
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if number in numbers:
                found[number] = parse_json_line(raw)
            if number >= last:
                break
    return found


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
    """Read the three history files; sends.jsonl must exist, the others may be missing (noted)."""
    with paused_gc():
        return _read_history(history_dir)


def _read_history(history_dir: Path) -> History:
    if not history_dir.is_dir():
        raise HistoryError(f"{history_dir}: no history directory")
    label = history_dir.name
    sends_path = history_dir / SENDS_FILE
    if not sends_path.is_file():
        raise HistoryError(f"{label}/{SENDS_FILE}: missing")
    notes: list[str] = []
    sends = read_jsonl(sends_path, f"{label}/{SENDS_FILE}", parse_send, notes)
    reads = _read_optional(history_dir / READS_FILE, f"{label}/{READS_FILE}", parse_read, notes, "no reads")
    events = _read_optional(history_dir / EVENTS_FILE, f"{label}/{EVENTS_FILE}", parse_event, notes, "no events")
    history = History(sends=sends, reads=reads, events=events, notes=notes, directory=history_dir)
    if history.cut_short:
        notes.append(CUT_SHORT_NOTE)
    return history


def _read_optional(path: Path, label: str, parse: Callable[[dict[str, Any], int], T],
                   notes: list[str], nothing: str) -> list[T]:
    if not path.is_file():
        notes.append(f"{label} is missing: {nothing} recorded")
        return []
    return read_jsonl(path, label, parse, notes)


def read_jsonl(path: Path, label: str, parse: Callable[[dict[str, Any], int], T], notes: list[str]) -> list[T]:
    """Parse every line with ``parse``; a last line that is not JSON is dropped with a note."""
    lines = LineRules(label, parse)
    with path.open("rb") as f:
        records = lines.feed(enumerate(f, 1), [])
    lines.finish(notes)
    return records


class LineRules(Generic[T]):
    """The reader's rules for the lines of one file, fed in batches (the Spark checker converts files by blocks).

    A line that does not parse is only known to be the last one when the file
    ends, so it is held until then; any later non-blank line makes it an error.
    """

    def __init__(self, label: str, parse: Callable[[dict[str, Any], int], T]) -> None:
        self.label = label
        self.parse = parse
        self.unparsed: tuple[int, str] | None = None  # (line number, why) of a line that is not JSON

    def feed(self, lines: Iterable[tuple[int, bytes]], records: list[T]) -> list[T]:
        """Append the records of these (line number, raw line) to ``records``; HistoryError at a bad line."""
        label, parse, unparsed = self.label, self.parse, self.unparsed
        for number, raw in lines:
            if not raw.strip():
                continue
            if unparsed is not None:
                raise HistoryError(f"{label} line {unparsed[0]}: {unparsed[1]}")
            try:
                obj = parse_json_line(raw)
            except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for a cut multibyte character
                unparsed = (number, _why_not_json(e))
                continue
            try:
                if type(obj) is not dict:
                    raise BadLine("not a JSON object")
                records.append(parse(obj, number))
            except BadLine as e:
                raise HistoryError(f"{label} line {number}: {e}") from None
        self.unparsed = unparsed
        return records

    def finish(self, notes: list[str]) -> None:
        """At the end of the file: a held line was the last one, cut off; drop it with a note."""
        if self.unparsed is not None:
            notes.append(f"{self.label}: dropped an incomplete last line (line {self.unparsed[0]})")


_raw_decode = json.JSONDecoder().raw_decode


def parse_json_line(raw: bytes) -> Any:
    """json.loads for one line, minus two layers of Python calls (a third of the time on millions of lines)."""
    text = raw.decode("utf-8").lstrip()
    obj, end = _raw_decode(text)
    if text[end:].strip():
        raise json.JSONDecodeError("Extra data", text, end)
    return obj


def _why_not_json(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at column {error.colno})"
    return "not valid UTF-8"


# --- one line ----------------------------------------------------------------------------------


class BadLine(ValueError):
    """A field is missing or has the wrong type; read_jsonl adds the file and line."""


_MISSING = object()


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _get(obj: dict[str, Any], name: str, kind: type, *, nullable: bool = False, optional: bool = False) -> Any:
    """obj[name] when it has exactly type ``kind`` (bool is not an int here), else BadLine."""
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        if optional:
            return None
        raise BadLine(f"missing field '{name}'")
    if type(value) is kind or (value is None and nullable):
        return value
    wanted = {int: "an integer", str: "a string", bool: "true or false"}[kind]
    raise BadLine(f"field '{name}' must be {wanted}{' or null' if nullable else ''}, not {_type_name(value)}")


def _choice(obj: dict[str, Any], name: str, choices: dict[str, str]) -> str:
    """One of a few fixed strings, returned as the shared constant."""
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        raise BadLine(f"missing field '{name}'")
    try:
        return choices[value]
    except (KeyError, TypeError):
        names = [repr(c) for c in choices]
        wanted = f"{', '.join(names[:-1])} or {names[-1]}"
        raise BadLine(f"field '{name}' must be {wanted}, not {value!r}") from None


_intern = sys.intern  # names (producer, topic, consumer, group): a million lines share one string


def _name(value: str | None) -> str | None:
    return None if value is None else _intern(value)


def parse_send(obj: dict[str, Any], line: int) -> Send:
    """A send line as a Send; the common, well-formed line takes a quick path (see _checked_send)."""
    get = obj.get
    producer, seq, topic, status = get("producer"), get("seq"), get("topic"), get("status")
    partition, offset = get("partition", _MISSING), get("offset")
    status = SEND_STATUSES.get(status) if type(status) is str else None
    if (type(producer) is str and type(seq) is int and type(topic) is str and status is not None
            and (partition is None or type(partition) is int) and (offset is None or type(offset) is int)):
        return Send(_intern(producer), seq, _intern(topic), partition, offset, status, line)
    return _checked_send(obj, line)


def _checked_send(obj: dict[str, Any], line: int) -> Send:
    """Field by field, so that a bad line is reported by what is wrong with it."""
    return Send(
        producer=_name(_get(obj, "producer", str)),
        seq=_get(obj, "seq", int),
        topic=_name(_get(obj, "topic", str)),
        partition=_get(obj, "partition", int, nullable=True),
        offset=_get(obj, "offset", int, nullable=True, optional=True),
        status=_choice(obj, "status", SEND_STATUSES),
        line=line,
    )


def parse_read(obj: dict[str, Any], line: int) -> Read:
    """A read line as a Read; the common, well-formed line takes a quick path (see _checked_read)."""
    get = obj.get
    consumer, group, phase, topic = get("consumer"), get("group"), get("phase"), get("topic")
    partition, offset, producer, seq = get("partition"), get("offset"), get("producer"), get("seq")
    phase = PHASES.get(phase) if type(phase) is str else None
    if (type(consumer) is str and (group is None or type(group) is str) and phase is not None
            and type(topic) is str and type(partition) is int and type(offset) is int
            and type(producer) is str and type(seq) is int):
        return Read(_intern(consumer), None if group is None else _intern(group), phase, _intern(topic),
                    partition, offset, _intern(producer), seq, line)
    return _checked_read(obj, line)


def _checked_read(obj: dict[str, Any], line: int) -> Read:
    """Field by field, so that a bad line is reported by what is wrong with it (or a foreign value accepted)."""
    producer = _get(obj, "producer", str, nullable=True)
    seq = _get(obj, "seq", int, nullable=True)
    if (producer is None) != (seq is None):
        raise BadLine("fields 'producer' and 'seq' must both be set or both be null")
    return Read(
        consumer=_name(_get(obj, "consumer", str)),
        group=_name(_get(obj, "group", str, nullable=True, optional=True)),
        phase=_choice(obj, "phase", PHASES),
        topic=_name(_get(obj, "topic", str)),
        partition=_get(obj, "partition", int),
        offset=_get(obj, "offset", int),
        producer=_name(producer),
        seq=seq,
        line=line,
    )


def parse_event(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """Events need a kind; the two kinds the checker reads also need their fields."""
    kind = _get(obj, "kind", str)
    if kind == "final-read":
        _get(obj, "topic", str)
        _get(obj, "partition", int)
        _get(obj, "complete", bool)
        _get(obj, "high_watermark", int, nullable=True, optional=True)
    elif kind == "committed":
        _get(obj, "group", str)
        _get(obj, "topic", str)
        _get(obj, "partition", int)
        _get(obj, "offset", int, nullable=True)  # null: the group never committed this partition
    return obj
