"""The run directory's JSON-lines rules, for every reader of history/*.jsonl.

Readers ignore fields they do not know; a last line cut off (the harness died
while writing it) is dropped with a note; anything else that is unusable is
a one-line ``HistoryError`` naming the file and line (docs/architecture.md, "Command line and exit codes").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")


class HistoryError(ValueError):
    """The history cannot be checked; the message is one line naming the file and line."""


def read_jsonl(path: Path, label: str, parse: Callable[[dict[str, Any], int], T], notes: list[str]) -> list[T]:
    """Parse every line with ``parse``; a last line that is not JSON is dropped with a note."""
    lines = LineRules(label, parse)
    with path.open("rb") as f:
        records = lines.feed(enumerate(f, 1), [])
    lines.finish(notes)
    return records


def read_history_file(history_dir: Path, name: str, parse: Callable[[dict[str, Any], int], T], notes: list[str],
                      when_missing: str) -> list[T]:
    """history/<name> by the rules of ``read_jsonl``; a missing file reads as no lines, with a note saying
    ``when_missing`` (what its absence means)."""
    path, label = history_dir / name, f"{history_dir.name}/{name}"
    if not path.is_file():
        notes.append(f"{label} is missing: {when_missing}")
        return []
    return read_jsonl(path, label, parse, notes)


# Lines iter_jsonl hands to LineRules at a time: few enough that their objects are still in the CPU's cache
# when the caller takes them.
STREAM_BATCH = 128


def iter_jsonl(path: Path, label: str, notes: list[str]) -> Iterator[dict[str, Any]]:
    """Each line's object in turn, by the rules of ``read_jsonl``, for a reader that keeps only aggregates.

    Holds a few lines at a time, never the file; the note on a cut-off last line comes when the file ends.
    """
    lines: LineRules[dict[str, Any]] = LineRules(label, _as_is)
    with path.open("rb") as f:
        numbered = enumerate(f, 1)
        while batch := list(islice(numbered, STREAM_BATCH)):
            yield from lines.feed(batch, [])
    lines.finish(notes)


def _as_is(obj: dict[str, Any], line: int) -> dict[str, Any]:
    return obj


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
                raise held_error(label, unparsed)
            try:
                obj = parse_json_line(raw)
            except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for a cut multibyte character
                unparsed = (number, why_not_json(e))
                continue
            try:
                if type(obj) is not dict:
                    raise BadLine("not a JSON object")
                records.append(parse(obj, number))
            except BadLine as e:
                raise HistoryError(f"{label} line {number}: {e}") from None
        self.unparsed = unparsed
        return records

    def more_lines(self) -> None:
        """Non-blank lines follow that were read elsewhere (the next range of the file, on another executor):
        a held line was not the last one."""
        if self.unparsed is not None:
            raise held_error(self.label, self.unparsed)

    def finish(self, notes: list[str]) -> None:
        """At the end of the file: a held line was the last one, cut off; drop it with a note."""
        if self.unparsed is not None:
            notes.append(f"{self.label}: dropped an incomplete last line (line {self.unparsed[0]})")


def held_error(label: str, unparsed: tuple[int, str]) -> HistoryError:
    return HistoryError(f"{label} line {unparsed[0]}: {unparsed[1]}")


_raw_decode = json.JSONDecoder().raw_decode
_NOT_FLAT = frozenset((float, dict, list))  # values after which orjson's reading is not taken


def parse_json_line(raw: bytes) -> Any:
    """One line's JSON value; every line of every history passes here.

    orjson parses a line about three times as fast as Python's json, and the
    two agree on an object whose values are strings, integers, booleans and
    nulls: what sends and reads hold. Python's json decides every other line
    (``python_json_line``): orjson refuses NaN, lone surrogates and white space
    other than JSON's, and reads an integer past 64 bits as a float; so what a
    history may hold, and the error a bad line gets, stay as they were.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return python_json_line(raw)
    if type(obj) is dict and _NOT_FLAT.isdisjoint(map(type, obj.values())):
        return obj
    return python_json_line(raw)


def python_json_line(raw: bytes) -> Any:
    """json.loads for one line, minus two layers of Python calls: the reference for what a line holds."""
    text = raw.decode("utf-8").lstrip()
    obj, end = _raw_decode(text)
    if text[end:].strip():
        raise json.JSONDecodeError("Extra data", text, end)
    return obj


def why_not_json(error: ValueError) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at column {error.colno})"
    return "not valid UTF-8"


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


READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATIONS = {READ_COMMITTED: READ_COMMITTED, READ_UNCOMMITTED: READ_UNCOMMITTED}


class BadLine(ValueError):
    """A field is missing or has the wrong type; read_jsonl adds the file and line."""


_MISSING = object()


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def field_of(obj: dict[str, Any], name: str, kind: type, *, nullable: bool = False, optional: bool = False) -> Any:
    """obj[name] when it has exactly type ``kind`` (bool is not an int here), else BadLine."""
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        if optional:
            return None
        raise BadLine(f"missing field '{name}'")
    if type(value) is kind or (value is None and nullable):
        return value
    wanted = {int: "an integer", str: "a string", bool: "true or false"}[kind]
    raise BadLine(f"field '{name}' must be {wanted}{' or null' if nullable else ''}, not {type_name(value)}")


def choice_of(obj: dict[str, Any], name: str, choices: dict[str, str], *, nullable: bool = False,
              optional: bool = False) -> str | None:
    """One of a few fixed strings, returned as the shared constant (None when allowed to be null or absent).

    ``choices`` maps each string a line may hold to the constant it stands for: itself, or for an old name
    the value it became (the error names only the current values)."""
    value = obj.get(name, _MISSING)
    if value is _MISSING:
        if optional:
            return None
        raise BadLine(f"missing field '{name}'")
    if value is None and nullable:
        return None
    try:
        return choices[value]
    except (KeyError, TypeError):
        names = [repr(c) for c, stands_for in choices.items() if c == stands_for] + (["null"] if nullable else [])
        wanted = f"{', '.join(names[:-1])} or {names[-1]}"
        raise BadLine(f"field '{name}' must be {wanted}, not {value!r}") from None


def parse_event(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """Events need a kind; the two kinds the checker reads also need their fields."""
    kind = field_of(obj, "kind", str)
    if kind == "final-read":
        field_of(obj, "topic", str)
        field_of(obj, "partition", int)
        field_of(obj, "complete", bool)
        field_of(obj, "high_watermark", int, nullable=True, optional=True)
        field_of(obj, "last_stable_offset", int, nullable=True, optional=True)
        choice_of(obj, "isolation", ISOLATIONS, optional=True)
    elif kind == "committed":
        field_of(obj, "group", str)
        field_of(obj, "topic", str)
        field_of(obj, "partition", int)
        field_of(obj, "offset", int, nullable=True)  # null: the group never committed this partition
    elif kind == "stable":
        field_of(obj, "topic", str)
        field_of(obj, "partition", int)
        field_of(obj, "high_watermark", int)
        field_of(obj, "last_stable_offset", int)
        field_of(obj, "time_ns", int)
    elif kind == "pipeline":
        for name in ("group", "input_topic", "output_topic"):
            field_of(obj, name, str)
    return obj
