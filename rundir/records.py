"""The lines the harness appends to history/*.jsonl, their fields in catalogue.history's order.

Two ways to make a line, giving the same bytes: a record (a dict whose keys
``ordered`` puts in the catalogue's order, encoded by ``json_line``) for the
few lines of a run (events, transactions, what a dead process left), and a
byte template (``template``, built once from the catalogue's tuple) for the
lines written once per message, which are %-formatted from the protocol's
fields with no dict per line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from catalogue.history import EVENT_FIELDS

# one encoder for every line: json.dumps with separators builds a new one per call
_to_json = json.JSONEncoder(separators=(",", ":")).encode


def json_line(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8: a history line, or one field of a line formatted by hand."""
    return _to_json(value).encode()


def ordered(fields: Sequence[str], values: Mapping[str, Any], optional: Sequence[str] = ()) -> dict[str, Any]:
    """A line's record: every one of ``fields`` (all required), then those of ``optional`` that are given, in
    these orders; ValueError for a field in neither, so a writer cannot put a field the catalogue does not list."""
    unknown = values.keys() - set(fields) - set(optional)
    if unknown:
        raise ValueError(f"fields the catalogue does not list: {', '.join(sorted(unknown))}")
    record = {name: values[name] for name in fields}
    record.update((name, values[name]) for name in optional if name in values)
    return record


def event_record(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """An events.jsonl line: ``kind``, then the given fields in the catalogue's order for that kind (each kind's
    fields are optional: a fault's start has no end yet, a workload's client event no binding)."""
    return {"kind": kind, **ordered((), fields, EVENT_FIELDS[kind])}


def template(fields: Sequence[str], constants: Mapping[str, bytes], placeholders: Mapping[str, bytes]) -> bytes:
    """A line's bytes as a %-format: a JSON object with ``fields`` in this order, each field's value either one
    of ``constants`` (already JSON, the same on every line of one writer) or its pattern from ``placeholders``
    (``%s``, ``%d``, ``"%s"``...).

    ``placeholders`` must name the other fields in the line's order, which is the order of the arguments the
    format takes: a catalogue whose order changed fails here, when the writer's module is imported, instead of
    writing values under the wrong names.
    """
    free = tuple(name for name in fields if name not in constants)
    if tuple(placeholders) != free or not constants.keys() <= set(fields):
        raise ValueError(f"a template of {fields} takes {free} in this order, not {tuple(placeholders)}")
    pieces = (constants[name].replace(b"%", b"%%") if name in constants else placeholders[name] for name in fields)
    return b"{" + b",".join(b'"%s":%s' % (name.encode(), piece) for name, piece in zip(fields, pieces)) + b"}"


def head(fields: Sequence[str], constants: Mapping[str, bytes]) -> bytes:
    """A line's bytes up to the value of its first field that is not one of ``constants`` (``{"a":1,"b":``):
    the part every line of one writer starts with, by which the harness tells that writer's lines."""
    pieces = []
    for name in fields:
        if name not in constants:
            return b"{" + b"".join(pieces) + b'"%s":' % name.encode()
        pieces.append(b'"%s":%s,' % (name.encode(), constants[name]))
    raise ValueError(f"every field of {fields} is a constant")
