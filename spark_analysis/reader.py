"""Read a run's history into DataFrames, holding every line to the reference reader's rules.

Each JSON-lines file is scanned once as text (one row per line, blank lines
included) and parsed with ``from_json`` and an explicit schema: no inference,
so a file of tens of millions of lines is read exactly once, and the parsed
columns are cached compressed (spilling to disk) for every later stage.

Why text plus ``from_json`` rather than ``spark.read.json``:

- Each row keeps a position key, ``_key = input_file_block_start() + row in
  the block``: a line number in all but name. It orders lines as the file
  does (the reference's "last send line wins" and "first ten reads"), it
  names a line in an error message, and it finds the whole line again for an
  example. Blank lines count, as they do for the reference's line numbers.
- The raw line is at hand to check what the JSON parser forgives: trailing
  text after the object, invalid UTF-8, a byte-order mark.

The reference's rules on types are strict (a seq of true is not an integer, a
producer of 5 is not a string, a missing partition is not a null one). Spark's
JSON reader casts any value to a string column and cannot tell a missing field
from a null one, so the string fields and the nullable-but-required ones are
read as VARIANT and their JSON type is checked; integer columns already reject
strings, booleans and fractions.

A line that fails a check in Spark is only *flagged*: the driver fetches the
first flagged lines (in file order, by the few) and judges each with the
reference's own parser, so a bad line yields exactly the reference's one-line
HistoryError, and a cut-off last line the same note. A flagged line that the
reference accepts after all (a form-feed-only line, ``}{`` inside a string,
a field given twice) is parsed in the driver and joins the others.

What remains different, knowingly: after a complete JSON object the Spark
parser ignores the rest of the line. The checks catch text that does not end
in ``}``, glued objects (``}{``, ``} {``) and invalid UTF-8, but not, say,
``{...},"x",{}``; the reference calls that line not valid JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from checkers.anomalies import CUT_SHORT_NOTE
from checkers.history import parse_read, parse_send
from rundir.documents import read_events
from rundir.layout import EVENTS as EVENTS_FILE, READS as READS_FILE, SENDS as SENDS_FILE, require_history
from rundir.lines import HistoryError, LineRules, parse_event

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_analysis.encode import Names

# How many flagged lines the driver judges in one round trip, and in all. Flagged lines are normally
# none, or one cut-off last line; a history where thousands of lines are odd in ways Spark cannot
# settle is better checked by the reference.
FLAGGED_BATCH = 1000
MAX_FALSE_ALARMS = 10_000
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1

JSON_OPTIONS = {
    "mode": "PERMISSIVE",
    "columnNameOfCorruptRecord": "_corrupt",
    "allowSingleQuotes": "false",  # the reference (Python's json) does not allow them
}

# The raw line has the shape of one JSON object with nothing after it (see the module docstring).
SHAPE_OK = (r"is_valid_utf8(value) AND NOT startswith(value, '\uFEFF')"
            r" AND (endswith(value, '}') OR value RLIKE '\\}\\s*$')"
            r" AND NOT contains(value, '}{') AND NOT contains(value, '} {')")


def _type(column: str) -> str:
    """The JSON type of a VARIANT field: STRING, BIGINT, BOOLEAN, VOID (null), ... or NULL when missing."""
    return f"schema_of_variant({column})"


def _is(column: str, *types: str) -> str:
    listed = ", ".join(f"'{t}'" for t in types)
    return f"coalesce({_type(column)} IN ({listed}), false)"


@dataclass(frozen=True)
class FileKind:
    """How one history file is parsed, checked and typed (the reference's parse_send/parse_read/parse_event)."""

    name: str  # sends.jsonl ...
    schema: str  # from_json schema, DDL
    good: str  # SQL: the parsed row ``j`` is a valid line
    columns: dict[str, str]  # output column -> SQL over ``j``
    output_types: dict[str, str]  # output column -> Spark type, for lines parsed in the driver
    parse: Callable[[dict[str, Any], int], Any]  # the reference's parser for one line
    to_row: Callable[[Any], dict[str, Any]]  # reference record -> output columns


def _send_row(s: Any) -> dict[str, Any]:
    return {"producer": s.producer, "seq": s.seq, "topic": s.topic, "partition": s.partition,
            "offset": s.offset, "status": s.status}


def _read_row(r: Any) -> dict[str, Any]:
    return {"grp": r.group, "phase": r.phase, "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "producer": r.producer, "seq": r.seq}


def _event_row(e: dict[str, Any]) -> dict[str, Any]:
    kind = e["kind"]
    known = kind in ("final-read", "committed")
    return {"kind": kind,
            "topic": e.get("topic") if known else None,
            "partition": e.get("partition") if known else None,
            "complete": e.get("complete") if kind == "final-read" else None,
            "grp": e.get("group") if kind == "committed" else None,
            "offset": e.get("offset") if kind == "committed" else None}


SENDS = FileKind(
    name=SENDS_FILE,
    schema="producer VARIANT, seq BIGINT, topic VARIANT, `partition` VARIANT, `offset` BIGINT, status STRING, "
           "_corrupt STRING",
    good=" AND ".join([
        _is("j.producer", "STRING"), "j.seq IS NOT NULL", _is("j.topic", "STRING"),
        _is("j.`partition`", "BIGINT", "VOID"), "coalesce(j.status IN ('ok', 'fail', 'info'), false)",
    ]),
    columns={
        "producer": "try_variant_get(j.producer, '$', 'string')",
        "seq": "j.seq",
        "topic": "try_variant_get(j.topic, '$', 'string')",
        "partition": "try_variant_get(j.`partition`, '$', 'bigint')",
        "offset": "j.`offset`",
        "status": "j.status",
    },
    output_types={"producer": "string", "seq": "bigint", "topic": "string", "partition": "bigint",
                  "offset": "bigint", "status": "string"},
    parse=parse_send,
    to_row=_send_row,
)

READS = FileKind(
    name=READS_FILE,
    schema="consumer VARIANT, `group` VARIANT, phase STRING, topic VARIANT, `partition` BIGINT, `offset` BIGINT, "
           "producer VARIANT, seq VARIANT, _corrupt STRING",
    good=" AND ".join([
        _is("j.consumer", "STRING"), "(j.`group` IS NULL OR " + _is("j.`group`", "STRING", "VOID") + ")",
        "coalesce(j.phase IN ('live', 'final'), false)", _is("j.topic", "STRING"),
        "j.`partition` IS NOT NULL", "j.`offset` IS NOT NULL",
        _is("j.producer", "STRING", "VOID"), _is("j.seq", "BIGINT", "VOID"),
        "(" + _is("j.producer", "VOID") + " = " + _is("j.seq", "VOID") + ")",
    ]),
    columns={
        "grp": "try_variant_get(j.`group`, '$', 'string')",
        "phase": "j.phase",
        "topic": "try_variant_get(j.topic, '$', 'string')",
        "partition": "j.`partition`",
        "offset": "j.`offset`",
        "producer": "try_variant_get(j.producer, '$', 'string')",
        "seq": "try_variant_get(j.seq, '$', 'bigint')",
    },
    output_types={"grp": "string", "phase": "string", "topic": "string", "partition": "bigint", "offset": "bigint",
                  "producer": "string", "seq": "bigint"},
    parse=parse_read,
    to_row=_read_row,
)

_KIND = "try_variant_get(j.kind, '$', 'string')"
EVENTS = FileKind(
    name=EVENTS_FILE,
    schema="kind VARIANT, topic VARIANT, `partition` VARIANT, complete VARIANT, high_watermark VARIANT, "
           "`group` VARIANT, `offset` VARIANT, _corrupt STRING",
    good=" AND ".join([
        _is("j.kind", "STRING"),
        f"(coalesce({_KIND} <> 'final-read', true) OR ("
        + " AND ".join([_is("j.topic", "STRING"), _is("j.`partition`", "BIGINT"), _is("j.complete", "BOOLEAN"),
                        "(j.high_watermark IS NULL OR " + _is("j.high_watermark", "BIGINT", "VOID") + ")"]) + "))",
        f"(coalesce({_KIND} <> 'committed', true) OR ("
        + " AND ".join([_is("j.`group`", "STRING"), _is("j.topic", "STRING"), _is("j.`partition`", "BIGINT"),
                        _is("j.`offset`", "BIGINT", "VOID")]) + "))",
    ]),
    columns={
        "kind": _KIND,
        "topic": f"CASE WHEN {_KIND} IN ('final-read', 'committed') THEN try_variant_get(j.topic, '$', 'string') END",
        "partition": f"CASE WHEN {_KIND} IN ('final-read', 'committed') "
                     "THEN try_variant_get(j.`partition`, '$', 'bigint') END",
        "complete": f"CASE WHEN {_KIND} = 'final-read' THEN try_variant_get(j.complete, '$', 'boolean') END",
        "grp": f"CASE WHEN {_KIND} = 'committed' THEN try_variant_get(j.`group`, '$', 'string') END",
        "offset": f"CASE WHEN {_KIND} = 'committed' THEN try_variant_get(j.`offset`, '$', 'bigint') END",
    },
    output_types={"kind": "string", "topic": "string", "partition": "bigint", "complete": "boolean",
                  "grp": "string", "offset": "bigint"},
    parse=parse_event,
    to_row=_event_row,
)


def text_lines(spark: "SparkSession", path: Path) -> "DataFrame":
    """Every line of ``path`` as ``value`` with its position key ``_key`` and split start ``_blk``.

    Lines are split on "\\n" alone, as Python's binary reader splits them. A
    split (block) of the file is read by one task from its start, so the row
    number within the task (the low 33 bits of monotonically_increasing_id)
    counts lines from the block start, and block start + row is unique and
    increasing in file order (a block of n bytes holds at most n line starts).
    ``finish_file`` checks that every block starts at row 0.
    """
    from pyspark.sql import functions as F

    return (spark.read.option("lineSep", "\n").text(str(path))
            .select("value", F.expr("input_file_block_start()").alias("_blk"),
                    F.expr("monotonically_increasing_id() & 8589934591").alias("_row"))
            .selectExpr("value", "_blk", "_row", "_blk + _row AS _key"))


@dataclass
class FileRead:
    """One history file read by Spark: its valid lines as a cached DataFrame, plus what the reader noticed."""

    kind: FileKind
    label: str  # history/sends.jsonl, as in the reference's messages
    path: Path
    records: "DataFrame | None"  # _key + the kind's columns, one row per valid line (None: file missing)
    cached: list["DataFrame"] = field(default_factory=list)
    block_rows: list[tuple[int, int]] = field(default_factory=list)  # (block start, lines in it), sorted

    def line_number(self, key: int, block: int) -> int:
        """1-based line number of the line with position key ``key`` in the block starting at ``block``."""
        before = sum(rows for start, rows in self.block_rows if start < block)
        return before + (key - block) + 1

    def unpersist(self) -> None:
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def prepare_file(spark: "SparkSession", path: Path, label: str, kind: FileKind) -> FileRead:
    """Plan the parse and check of one history file and mark it for caching (nothing runs yet)."""
    from pyspark import StorageLevel

    lines = text_lines(spark, path)
    parsed = lines.select("value", "_blk", "_row", "_key", _from_json(kind).alias("j"))
    checked = parsed.selectExpr(
        "_blk", "_row", "_key", "j",
        "j IS NULL AS _blank",
        f"j IS NOT NULL AND NOT ({SHAPE_OK} AND j._corrupt IS NULL AND {kind.good}) AS _flag",
        "value")
    table = checked.selectExpr(
        "_blk", "_key", "_blank", "_flag",
        "CASE WHEN _flag THEN cast(value AS binary) END AS _raw",
        *[f"CASE WHEN NOT _flag THEN {sql} END AS `{name}`" for name, sql in kind.columns.items()])
    table = table.persist(StorageLevel.MEMORY_AND_DISK)
    return FileRead(kind=kind, label=label, path=path, records=None, cached=[table])


def block_stats(files: list[FileRead]) -> list[list[tuple[int, int, int, int, int | None]]]:
    """Per file, per block in file order: (start, lines, first row number, flagged lines, last valid line's key).

    One job for all the files: it parses them and fills their caches.
    """
    from pyspark.sql import functions as F

    if not files:
        return []
    per_file = [f.cached[0].groupBy("_blk").agg(
        F.lit(i).alias("file"), F.count(F.lit(1)).alias("n"), F.expr("min(_key - _blk)").alias("min_row"),
        F.count_if(F.col("_flag")).alias("flagged"),
        F.expr("max(_key) FILTER (WHERE NOT _blank AND NOT _flag)").alias("last_good"))
        for i, f in enumerate(files)]
    union = per_file[0]
    for df in per_file[1:]:
        union = union.unionByName(df)
    stats: list[list[tuple[int, int, int, int, int | None]]] = [[] for _ in files]
    for r in sorted(union.collect(), key=lambda r: (r["file"], r["_blk"])):
        stats[r["file"]].append((r["_blk"], r["n"], r["min_row"], r["flagged"], r["last_good"]))
    return stats


def finish_file(spark: "SparkSession", file: FileRead, stats: list[tuple[int, int, int, int, int | None]],
                notes: list[str]) -> None:
    """Settle the file's flagged lines (HistoryError, a note, or lines accepted after all) and set its records."""
    file.block_rows = [(blk, rows) for blk, rows, _, _, _ in stats]
    if any(min_row != 0 for _, _, min_row, _, _ in stats):  # the position key would be wrong
        raise HistoryError(f"{file.label}: Spark read a block of the file from the middle; use --engine python")
    flagged = sum(n for _, _, _, n, _ in stats)
    last_good = max((k for _, _, _, _, k in stats if k is not None), default=None)
    table = file.cached[0]
    good = table.filter("NOT _blank AND NOT _flag").select("_key", *file.kind.columns)
    if flagged:
        extra = _judge_flagged(spark, table, file, last_good, notes)
        if extra is not None:
            good = good.unionByName(extra)
    file.records = good


def _from_json(kind: FileKind) -> Any:
    from pyspark.sql import functions as F

    return F.from_json(F.col("value"), kind.schema, JSON_OPTIONS)


def _judge_flagged(spark: "SparkSession", table: "DataFrame", file: FileRead, last_good: int | None,
                   notes: list[str]) -> "DataFrame | None":
    """Judge flagged lines in file order with the reference's parser.

    Returns the lines it accepts after all (as rows to add), raises
    HistoryError at the first bad one, or notes a dropped incomplete last line.
    """
    kind = file.kind
    total_lines = sum(rows for _, rows in file.block_rows)
    last_has_newline = _ends_with_newline(file.path)
    rules = LineRules(file.label, kind.parse)  # holds a line that is not JSON until the file ends
    accepted: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        query = table.filter("_flag")
        if after is not None:
            query = query.filter(f"_key > {after}")
        batch = query.orderBy("_key").select("_key", "_blk", "_raw").limit(FLAGGED_BATCH).collect()
        for row in batch:
            key, block, raw = row["_key"], row["_blk"], bytes(row["_raw"])
            number = file.line_number(key, block)
            if number < total_lines or last_has_newline:
                raw += b"\n"  # as the reference reads it: the position of a JSON error depends on it
            held = rules.unparsed
            records = rules.feed([(number, raw)], [])  # blank to Python (a form feed, say): no record
            unparsed = rules.unparsed
            if unparsed is not None and unparsed is not held:  # not JSON: only the last line may be
                if last_good is not None and last_good > key:  # ... and a valid line follows it
                    raise HistoryError(f"{file.label} line {number}: {unparsed[1]}")
                continue
            for record in records:
                accepted.append({"_key": key, **_representable(kind.to_row(record), file.label, number)})
            if len(accepted) > MAX_FALSE_ALARMS:
                raise HistoryError(f"{file.label}: more than {MAX_FALSE_ALARMS} lines are valid but unusual in "
                                   "ways the Spark reader settles one by one; check with --engine python")
        if len(batch) < FLAGGED_BATCH:
            break
        after = batch[-1]["_key"]
    rules.finish(notes)
    if not accepted:
        return None
    schema = ", ".join(["_key bigint"] + [f"`{name}` {t}" for name, t in kind.output_types.items()])
    return spark.createDataFrame([tuple(r[c] for c in ["_key", *kind.output_types]) for r in accepted], schema)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        if f.seek(0, 2) == 0:
            return False
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def _representable(row: dict[str, Any], label: str, number: int) -> dict[str, Any]:
    """A line the reference accepts but whose integers do not fit Spark's 64-bit columns stops the check."""
    for name, value in row.items():
        if type(value) is int and not LONG_MIN <= value <= LONG_MAX:
            raise HistoryError(f"{label} line {number}: field '{name}' does not fit in 64 bits; "
                               "check with --engine python")
    return row


class Source(Protocol):
    """One history file as the judge sees it: its rows with their position key ``_key``, and its whole lines."""

    records: "DataFrame | None"

    def unpersist(self) -> None: ...


@dataclass
class SparkHistory:
    """A run's history as DataFrames, with the reference reader's notes (missing files, dropped lines, cut short).

    The sources are ``FileRead`` (the JSON lines read by Spark) or
    ``columnar_reader.ParquetSource`` (their Parquet caches).
    """

    sends: Source
    reads: Source | None
    events: Source | None
    notes: list[str]
    cut_short: bool
    complete: dict[tuple[str, int], bool]  # per partition with a final-read event: did some read-back finish?
    committed: dict[tuple[str, int], dict[str, int]]  # per partition: group -> committed offset
    names: "Names | None" = None  # set when the records are already encoded (encode.py): the names behind the ids
    # (low, high) of integer columns over all records, when known without a job (Parquet statistics); a column
    # missing here holds no value
    ranges: dict[str, tuple[int, int]] | None = None

    def unpersist(self) -> None:
        for f in (self.sends, self.reads, self.events):
            if f is not None:
                f.unpersist()


def read_history(spark: "SparkSession", history_dir: Path) -> SparkHistory:
    """Read the three files; sends and reads must hold something (require_history), a missing events.jsonl is
    noted, as in the reference."""
    require_history(history_dir)
    label = history_dir.name
    files: dict[str, FileRead | None] = {}
    try:
        for kind in (SENDS, READS, EVENTS):
            path = history_dir / kind.name
            files[kind.name] = prepare_file(spark, path, f"{label}/{kind.name}", kind) if path.is_file() else None
        present = [f for f in files.values() if f is not None]
        stats = dict(zip((f.kind.name for f in present), block_stats(present)))
        notes: list[str] = []
        for kind in (SENDS, READS, EVENTS):  # sends and reads are there (require_history)
            file = files[kind.name]
            if file is not None:
                finish_file(spark, file, stats[kind.name], notes)
            elif kind is EVENTS:
                read_events(history_dir, notes)  # no file: the reference reader's note, and no events
        sends, reads, events = files[SENDS_FILE], files[READS_FILE], files[EVENTS_FILE]
        assert sends is not None
        complete, committed, any_final = _event_facts(events)
        if not any_final:
            notes.append(CUT_SHORT_NOTE)
        return SparkHistory(sends=sends, reads=reads, events=events, notes=notes, cut_short=not any_final,
                            complete=complete, committed=committed)
    except BaseException:
        for f in files.values():
            if f is not None:
                f.unpersist()
        raise


def _event_facts(events: FileRead | None) -> tuple[dict[tuple[str, int], bool], dict[tuple[str, int], dict[str, int]],
                                                  bool]:
    """Final-read completeness and committed offsets: aggregated in Spark, one row per partition and group.

    As in the reference: a partition is complete when any final-read event
    says so; the last committed event of a group and partition wins, and a
    null offset means the group never committed there.
    """
    if events is None or events.records is None:
        return {}, {}, False
    from pyspark.sql import functions as F

    rows = (events.records.filter("kind IN ('final-read', 'committed')")
            .groupBy("kind", "grp", "topic", "partition")
            .agg(F.expr("bool_or(complete)").alias("complete"),
                 F.expr("max(struct(_key, `offset`)).`offset`").alias("offset"))
            .collect())
    finals = [r for r in rows if r["kind"] == "final-read"]
    commits = [r for r in rows if r["kind"] == "committed"]
    complete = {(r["topic"], r["partition"]): bool(r["complete"]) for r in finals}
    committed: dict[tuple[str, int], dict[str, int]] = {}
    for r in commits:
        if r["offset"] is not None:
            committed.setdefault((r["topic"], r["partition"]), {})[r["grp"]] = r["offset"]
    return complete, committed, bool(finals)
