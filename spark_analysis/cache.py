"""history/sends.parquet and reads.parquet: the JSON lines converted once for Spark, rebuilt when they change.

The JSONL files are the contract (docs/run-directory.md); a Parquet file beside one is
only a cache of it. Its footer records the size and modification time (ns) of
the JSONL it was made from, so it is used only while the JSONL still has
both and is not newer than the cache; otherwise it is rebuilt. The footer
also keeps what the conversion learnt that Spark cannot see in the rows: the
reader's notes (a dropped cut-off last line is reported on every check, not
only the first), where lines start in the JSONL, for the examples, its lines
counted per partition (tallies.py), and for a send file whether its acks are
proved in order (ack_order.py).

A cache is one Parquet file when the driver converted it, or a folder of
parts with its footer in ``_kchaos.meta`` when a Spark cluster's executors did
(ranged.py); both read alike, and either kind replaces the other when stale.

A cache that cannot be written (a read-only run directory, or one the
executors cannot write) is not an error: ``cached`` returns None and the
checker reads the JSON lines instead.
"""

from __future__ import annotations

import bisect
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow.parquet as pq

from rundir.lines import parse_json_line
from spark_analysis.columnar import Converted, Layout, convert
from spark_analysis.ranged import Tasks, convert_ranges, footer_path, parts_of
from spark_analysis.tallies import Tallies

FORMAT = "7"  # bump when the layout or the conversion rules change: older caches are rebuilt (4: complete_ns,
# 5: a txns line's missing intent stored apart from a null one, 6: tallies and the acks' order in the footer,
# 7: a read's consumer and assignment)
KEY = "kchaos."
INT64_RANGE = (-2 ** 63, 2 ** 63 - 1)

log = logging.getLogger(__name__)


@dataclass
class ParquetFile:
    """A fresh cache of one history file: where it is, and what its conversion recorded."""

    path: Path
    source: Path
    label: str
    notes: list[str]  # the reader's notes for this file (a dropped incomplete last line)
    marks: list[tuple[int, int]]  # (line number, byte offset of that line in the source), ascending
    names: dict[str, list[str]]  # "producers", "topics", "groups", "consumers" -> the names behind this file's ids
    acks_ordered: bool | None = None  # a send file's acks proved in order (ack_order.py); None: not known
    tallies: Tallies | None = None  # a send or read file's lines per partition (tallies.py); None: not known

    def lines(self, numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
        """The whole source lines with these numbers, parsed as the reference parses them."""
        return lines_at_marks(self.source, self.marks, numbers)

    def has_values(self, column: str) -> bool:
        """Some row holds a value (not null) in ``column`` (from the statistics)."""
        return column in self.value_ranges([column])

    def value_ranges(self, columns: Iterable[str]) -> dict[str, tuple[int, int]]:
        """Smallest and largest value of integer columns, from the row groups' statistics (one footer read,
        no rows read). A column holding no value is left out; one where some row group with values kept no
        statistics gets the whole int64 range (a wider range is always safe)."""
        metas = [pq.read_metadata(part) for part in parts_of(self.path)]  # the parts share one schema
        schema = metas[0].schema.to_arrow_schema()
        ranges: dict[str, tuple[int, int]] = {}
        for column in columns:
            index = schema.get_field_index(column)
            if index < 0:  # not a column of this file
                continue
            low, high = None, None
            for chunk in (meta.row_group(g).column(index) for meta in metas for g in range(meta.num_row_groups)):
                stats = chunk.statistics
                if stats is not None and stats.has_null_count and stats.null_count == chunk.num_values:
                    continue  # nulls only
                if stats is None or not stats.has_min_max:
                    low, high = INT64_RANGE
                    break
                low = stats.min if low is None else min(low, stats.min)
                high = stats.max if high is None else max(high, stats.max)
            if low is not None:
                ranges[column] = (int(low), int(high))
        return ranges


def lines_at_marks(path: Path, marks: list[tuple[int, int]], numbers: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Read only near each wanted line: seek to the last mark before it, then count lines."""
    starts = [line for line, _ in marks]
    found: dict[int, dict[str, Any]] = {}
    with path.open("rb") as f:
        current = 0  # number of the line the next readline returns (0: unknown)
        for number in sorted(set(numbers)):
            line, offset = marks[bisect.bisect_right(starts, number) - 1]
            if not line <= current <= number:
                f.seek(offset)
                current = line
            while current < number:
                f.readline()
                current += 1
            found[number] = parse_json_line(f.readline())
            current += 1
    return found


def parquet_path(source: Path, layout: Layout) -> Path:
    return source.with_name(layout.parquet_name)


def footer(path: Path) -> dict[str, str] | None:
    """The kchaos entries of a cache's footer, or None when there is no readable cache."""
    try:
        raw = pq.read_metadata(footer_path(path)).metadata or {}
    except (OSError, ValueError):  # missing, or not a whole Parquet file
        return None
    return {k.decode()[len(KEY):]: v.decode() for k, v in raw.items() if k.startswith(KEY.encode())}


def is_fresh(source: Path, target: Path, meta: dict[str, str] | None) -> bool:
    """Made by this format from the source as it is now: same size and mtime, and not older than it."""
    if meta is None or meta.get("format") != FORMAT:
        return False
    st = source.stat()
    try:
        cache_mtime = footer_path(target).stat().st_mtime_ns
    except OSError:
        return False
    return (meta.get("source_size") == str(st.st_size) and meta.get("source_mtime_ns") == str(st.st_mtime_ns)
            and cache_mtime >= st.st_mtime_ns)


def cached(source: Path, layout: Layout, label: str, tasks: Tasks | None = None) -> ParquetFile | None:
    """The fresh cache of ``source``, converting it first when needed; None when it cannot be written.

    ``tasks`` (ranged.on_executors) convert it by ranges, else this process does. A line the reference
    rejects raises HistoryError (and leaves no cache).
    """
    target = parquet_path(source, layout)
    meta = footer(target)
    if not is_fresh(source, target, meta):
        st = source.stat()  # before reading: a file that changes meanwhile is converted again next time

        def stamp(converted: Converted) -> dict[str, str]:
            entries = {"format": FORMAT, "source_size": str(st.st_size), "source_mtime_ns": str(st.st_mtime_ns),
                       "lines": str(converted.lines), "notes": json.dumps(converted.notes),
                       "names": json.dumps(converted.names),
                       "blocks": json.dumps({"arrow": converted.arrow_blocks, "rules": converted.rule_blocks}),
                       "marks": json.dumps([x for mark in converted.marks for x in mark])}
            if converted.ack_order is not None:
                entries["acks_ordered"] = json.dumps(converted.ack_order.ordered)
            if converted.tallies is not None:
                entries["tallies"] = converted.tallies.to_json()
            return {KEY + k: v for k, v in entries.items()}

        try:
            if tasks is None:
                converted = convert(source, layout, label, target, stamp)
            else:
                converted = convert_ranges(source, layout, label, target, stamp, tasks)
        except OSError as e:  # read-only or full: the history itself is fine
            log.warning("cannot write the Parquet cache %s (%s): Spark reads the JSON lines", target, e)
            return None
        meta = {k[len(KEY):]: v for k, v in stamp(converted).items()}
    assert meta is not None
    flat = json.loads(meta["marks"])
    return ParquetFile(path=target, source=source, label=label, notes=json.loads(meta["notes"]),
                       marks=list(zip(flat[::2], flat[1::2])), names=json.loads(meta["names"]),
                       acks_ordered=json.loads(meta["acks_ordered"]) if "acks_ordered" in meta else None,
                       tallies=Tallies.from_json(meta["tallies"]) if "tallies" in meta else None)

