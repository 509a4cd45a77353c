"""A run's history for Spark from the Parquet caches of sends.jsonl and reads.jsonl (see ``cache``).

The same ``SparkHistory`` as ``reader.read_history`` gives from the JSON lines,
with the same notes in the same order, but no Spark job: the caches are
converted (when stale) before Spark reads anything, every line having had
the reference reader's verdict, so Spark reads typed columns and nothing is
left to check. The records come out already encoded (encode.py): each file
stores names as its own ids, listed in its footer, which a literal array
maps to the history's ids (all names in name order), so no job has to look
for the names and no join puts ids in. Events are few (faults, leader
observations, commits, final-read marks, stable samples): the driver reads
them with the reference reader itself. txns.jsonl, one line per transaction
(a million in a run of ten-message transactions), has a cache of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from rundir.documents import committed_offsets, read_events
from rundir.layout import require_history

from spark_analysis.cache import ParquetFile, cached
from spark_analysis.columnar import DICTIONARIES, READS, SENDS, TXNS, Layout
from spark_analysis.encode import Names, sorted_names
from spark_analysis.ranged import Tasks, on_executors
from spark_analysis.reader import SparkHistory, history_of
from spark_analysis.session import converts_on_executors, master_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from spark_analysis.tallies import Tallies


@dataclass
class ParquetSource:
    """One history file as Spark reads it from its cache: rows keyed by line number (``_key``)."""

    file: ParquetFile
    records: "DataFrame"

    def lines(self, keys: Iterable[int]) -> dict[int, dict[str, Any]]:
        """Whole source lines by ``_key`` (here the line number), for examples."""
        return self.file.lines(keys)

    def unpersist(self) -> None:
        """Nothing is cached: Parquet is read again by each job, faster than a cache is filled."""


def convert_history(history_dir: Path, tasks: Tasks | None = None) -> dict[str, ParquetFile | None] | None:
    """Fresh caches of sends.jsonl and reads.jsonl (None for a missing file), converting what is stale, in this
    process or by ``tasks`` (``conversion_tasks``).

    None when a cache cannot be written: the caller reads the JSON lines.
    HistoryError at the first line the reference reader rejects.
    """
    require_history(history_dir)
    label = history_dir.name
    files: dict[str, ParquetFile | None] = {}
    for layout in (SENDS, READS):
        file = cached(history_dir / layout.name, layout, f"{label}/{layout.name}", tasks)
        if file is None:
            return None
        files[layout.name] = file
    return files


def read_history(spark: "SparkSession", history_dir: Path,
                 files: dict[str, ParquetFile | None] | None = None) -> SparkHistory | None:
    """The history from its caches (``files`` from ``convert_history``, or converted here); None: no cache.

    txns.jsonl is converted here, after the events are read: the reference reads it last, so a bad line there
    must not be reported before a bad event.
    """
    tasks = conversion_tasks(spark)
    if files is None:
        files = convert_history(history_dir, tasks)
        if files is None:
            return None
    notes: list[str] = []
    for layout in (SENDS, READS):
        file = files[layout.name]
        assert file is not None  # require_history: both are there
        notes += file.notes
    events = read_events(history_dir, notes)
    txns_file = None
    if (history_dir / TXNS.name).is_file():
        txns_file = cached(history_dir / TXNS.name, TXNS, f"{history_dir.name}/{TXNS.name}", tasks)
        if txns_file is None:
            return None
        notes += txns_file.notes
    present = [f for f in (*files.values(), txns_file) if f is not None]
    committed = committed_offsets(events)
    names = Names(*(sorted_names({n for f in present for n in f.names[kind]}) for kind in DICTIONARIES[:2]),
                  sorted_names({n for f in present for n in f.names["groups"]}
                               | {g for groups in committed.values() for g in groups}),
                  sorted_names({n for f in present for n in f.names["consumers"]}))
    sends, reads = (ParquetSource(file, _records(spark, file, layout, names))
                    for layout, file in ((SENDS, files[SENDS.name]), (READS, files[READS.name])))
    txns = None if txns_file is None else ParquetSource(txns_file, _records(spark, txns_file, TXNS, names))
    ranges = value_ranges(present, RANGED)
    if "fseq" in ranges:  # an output record's source seq groups with the messages (judge.tagged_rows)
        low, high = ranges.pop("fseq")
        ranges["seq"] = (min(low, ranges.get("seq", (low, high))[0]), max(high, ranges.get("seq", (low, high))[1]))
    return history_of(history_dir, sends, reads, txns, events, notes, txn_sends=files[SENDS.name].has_values("txn"),
                      names=names, ranges=ranges, acks_ordered=files[SENDS.name].acks_ordered is True,
                      tallies=_tallies(files[SENDS.name], files[READS.name]))


def _tallies(sends: ParquetFile, reads: ParquetFile | None) -> "tuple[Tallies, Tallies] | None":
    """Both files' tallies, when their caches recorded them (a cache made before kept none)."""
    if sends.tallies is None or reads is None or reads.tallies is None:
        return None
    return sends.tallies, reads.tallies


def conversion_tasks(spark: "SparkSession") -> Tasks | None:
    """The session's executors when they convert (a cluster: session.converts_on_executors), else None."""
    return on_executors(spark) if converts_on_executors(master_of(spark)) else None


# the columns the judge packs into one grouping key when their ranges allow
RANGED = ("seq", "partition", "offset", "txn", "fseq")


def value_ranges(files: list[ParquetFile], columns: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """(low, high) of each column over these files, from their statistics; a column with no value is left out."""
    per_file = [f.value_ranges(columns) for f in files]
    ranges: dict[str, tuple[int, int]] = {}
    for column in columns:
        found = [r[column] for r in per_file if column in r]
        if found:
            ranges[column] = (min(low for low, _ in found), max(high for _, high in found))
    return ranges


def _records(spark: "SparkSession", file: ParquetFile, layout: Layout, names: Names) -> "DataFrame":
    """The file's rows with the history's ids: ``_key`` (the line number), then encode.py's columns."""
    from pyspark.sql import functions as F

    ddl = ", ".join(f"`{field.name}` {_SPARK_TYPES[str(field.type)]}" for field in layout.schema)
    columns = [F.col("line").alias("_key")]
    for column, (how, _) in layout.stored.items():
        if how in DICTIONARIES:
            columns.append(_to_history_ids(column, file.names[how], getattr(names, how)).alias(column))
        else:
            columns.append(F.col(column))
    columns += [F.col(column) for column in layout.flags]
    return spark.read.schema(ddl).parquet(str(file.path)).select(*columns)


def _to_history_ids(column: str, local: list[str], history: list[str]) -> "Column":
    """A file's ids of ``local`` names as ids of ``history`` (an O(1) literal-array lookup; null stays null)."""
    from pyspark.sql import functions as F

    ids = {name: i for i, name in enumerate(history)}
    mapping = [ids[name] for name in local]
    if mapping == list(range(len(mapping))):
        return F.col(column)
    # get(), not element_at() or [ ]: Spark 4.3 folds those over a literal array to a value for a null index
    return F.get(F.array(*[F.lit(i) for i in mapping]), F.col(column))


_SPARK_TYPES = {"int64": "bigint", "int32": "int", "int8": "tinyint", "bool": "boolean"}
