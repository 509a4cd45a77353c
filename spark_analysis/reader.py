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
from checkers.history import INTENT_UNKNOWN, parse_read, parse_send, parse_txn
from checkers.shares import ShareLine, parse_share
from rundir.documents import committed_offsets, final_read_completeness, read_events
from rundir.layout import READS as READS_FILE, SENDS as SENDS_FILE, SHARES, TXNS as TXNS_FILE, require_history
from rundir.lines import READ_COMMITTED, READ_UNCOMMITTED, HistoryError, LineRules, read_jsonl

from spark_analysis.encode import INTENT_CODES, INTENT_UNKNOWN_CODE, OUTCOME_CODES, STATUS_CODES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_analysis.tallies import Tallies

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
    """How one history file is parsed, checked and typed (the reference's parse_send/parse_read/parse_txn)."""

    name: str  # sends.jsonl ...
    schema: str  # from_json schema, DDL
    good: str  # SQL: the parsed row ``j`` is a valid line
    columns: dict[str, str]  # output column -> SQL over ``j``
    output_types: dict[str, str]  # output column -> Spark type, for lines parsed in the driver
    parse: Callable[[dict[str, Any], int], Any]  # the reference's parser for one line
    to_row: Callable[[Any], dict[str, Any]]  # reference record -> output columns
    # (SQL over the output columns, the same over one row as a dict): a row that makes the history transactional
    flag: tuple[str, Callable[[dict[str, Any]], bool]] | None = None


def _send_row(s: Any) -> dict[str, Any]:
    return {"producer": s.producer, "seq": s.seq, "topic": s.topic, "partition": s.partition,
            "offset": s.offset, "status": s.status, "txn": s.txn, "complete_ns": s.complete_ns}


def _read_row(r: Any) -> dict[str, Any]:
    return {"grp": r.group, "phase": r.phase, "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "producer": r.producer, "seq": r.seq, "committed": r.committed, "from_producer": r.from_producer,
            "from_seq": r.from_seq, "consumer": r.consumer, "assignment": r.assignment}


def _txn_row(t: Any) -> dict[str, Any]:
    return {"producer": t.producer, "txn": t.txn, "outcome": OUTCOME_CODES.index(t.outcome),
            "intent": None if t.intent is None else INTENT_UNKNOWN_CODE if t.intent == INTENT_UNKNOWN
            else INTENT_CODES.index(t.intent)}


def _null(column: str) -> str:
    """SQL: a VARIANT field is missing or null."""
    return f"({column} IS NULL OR {_is(column, 'VOID')})"


def _source_ok(j: str = "j") -> str:
    """SQL: from_producer (a string) and from_seq are both set, or both null or missing (the reference's _source)."""
    return (f"({j}.from_producer IS NULL OR {_is(j + '.from_producer', 'STRING', 'VOID')})"
            f" AND {_null(j + '.from_producer')} = ({j}.from_seq IS NULL)")


def _choice(column: str, values: tuple[str, ...]) -> str:
    """SQL: a VARIANT field is one of these strings."""
    listed = ", ".join(f"'{v}'" for v in values)
    return f"({_is(column, 'STRING')} AND coalesce(try_variant_get({column}, '$', 'string') IN ({listed}), false))"


# SQL: a send's status, by any name a sends line may give it (an old name is coded as the status it became, in
# encode.STATUS_CODES)
_SEND_STATUS_OK = "coalesce(j.status IN (" + ", ".join(f"'{s}'" for s in STATUS_CODES) + "), false)"

SENDS = FileKind(
    name=SENDS_FILE,
    schema="producer VARIANT, seq BIGINT, topic VARIANT, `partition` VARIANT, `offset` BIGINT, status STRING, "
           "txn BIGINT, from_producer VARIANT, from_seq BIGINT, complete_ns BIGINT, _corrupt STRING",
    good=" AND ".join([
        _is("j.producer", "STRING"), "j.seq IS NOT NULL", _is("j.topic", "STRING"),
        _is("j.`partition`", "BIGINT", "VOID"), _SEND_STATUS_OK, _source_ok(),
    ]),
    columns={
        "producer": "try_variant_get(j.producer, '$', 'string')",
        "seq": "j.seq",
        "topic": "try_variant_get(j.topic, '$', 'string')",
        "partition": "try_variant_get(j.`partition`, '$', 'bigint')",
        "offset": "j.`offset`",
        "status": "j.status",
        "txn": "j.txn",
        "complete_ns": "j.complete_ns",
    },
    output_types={"producer": "string", "seq": "bigint", "topic": "string", "partition": "bigint",
                  "offset": "bigint", "status": "string", "txn": "bigint", "complete_ns": "bigint"},
    parse=parse_send,
    to_row=_send_row,
    flag=("txn IS NOT NULL", lambda row: row["txn"] is not None),
)

READS = FileKind(
    name=READS_FILE,
    schema="consumer VARIANT, `group` VARIANT, phase STRING, topic VARIANT, `partition` BIGINT, `offset` BIGINT, "
           "producer VARIANT, seq VARIANT, isolation VARIANT, from_producer VARIANT, from_seq BIGINT, "
           "assignment BIGINT, _corrupt STRING",
    good=" AND ".join([
        _is("j.consumer", "STRING"), "(j.`group` IS NULL OR " + _is("j.`group`", "STRING", "VOID") + ")",
        "coalesce(j.phase IN ('live', 'final'), false)", _is("j.topic", "STRING"),
        "j.`partition` IS NOT NULL", "j.`offset` IS NOT NULL",
        _is("j.producer", "STRING", "VOID"), _is("j.seq", "BIGINT", "VOID"),
        "(" + _is("j.producer", "VOID") + " = " + _is("j.seq", "VOID") + ")",
        f"(j.isolation IS NULL OR {_choice('j.isolation', (READ_COMMITTED, READ_UNCOMMITTED))})", _source_ok(),
    ]),
    columns={
        "grp": "try_variant_get(j.`group`, '$', 'string')",
        "phase": "j.phase",
        "topic": "try_variant_get(j.topic, '$', 'string')",
        "partition": "j.`partition`",
        "offset": "j.`offset`",
        "producer": "try_variant_get(j.producer, '$', 'string')",
        "seq": "try_variant_get(j.seq, '$', 'bigint')",
        "committed": f"coalesce(try_variant_get(j.isolation, '$', 'string') = '{READ_COMMITTED}', false)",
        "from_producer": "try_variant_get(j.from_producer, '$', 'string')",
        "from_seq": "j.from_seq",
        "consumer": "try_variant_get(j.consumer, '$', 'string')",
        "assignment": "j.assignment",
    },
    output_types={"grp": "string", "phase": "string", "topic": "string", "partition": "bigint", "offset": "bigint",
                  "producer": "string", "seq": "bigint", "committed": "boolean", "from_producer": "string",
                  "from_seq": "bigint", "consumer": "string", "assignment": "bigint"},
    parse=parse_read,
    to_row=_read_row,
)


def _codes(column: str, values: tuple[str, ...]) -> str:
    """SQL: a string's index in ``values`` (null for null)."""
    whens = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(values))
    return f"CAST(CASE {column} {whens} END AS TINYINT)"


TXNS = FileKind(
    name=TXNS_FILE,
    schema="producer VARIANT, txn BIGINT, outcome STRING, intent VARIANT, _corrupt STRING",
    good=" AND ".join([
        _is("j.producer", "STRING"), "j.txn IS NOT NULL",
        f"coalesce(j.outcome IN ({', '.join(repr(o) for o in OUTCOME_CODES)}), false)",
        f"({_null('j.intent')} OR {_choice('j.intent', INTENT_CODES)})",
    ]),
    columns={
        "producer": "try_variant_get(j.producer, '$', 'string')",
        "txn": "j.txn",
        "outcome": _codes("j.outcome", OUTCOME_CODES),
        # a missing field (SQL null; a JSON null is a VOID variant): not known what the application asked for
        "intent": f"CASE WHEN j.intent IS NULL THEN CAST({INTENT_UNKNOWN_CODE} AS TINYINT) ELSE "
                  + _codes("try_variant_get(j.intent, '$', 'string')", INTENT_CODES) + " END",
    },
    output_types={"producer": "string", "txn": "bigint", "outcome": "tinyint", "intent": "tinyint"},
    parse=parse_txn,
    to_row=_txn_row,
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
    flagged_rows: bool = False  # some valid line meets the kind's ``flag``

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

    One job for all the files: it parses them and fills their caches. It also
    sets each file's ``flagged_rows``: whether a valid line meets its kind's ``flag``.
    """
    from pyspark.sql import functions as F

    if not files:
        return []
    per_file = [f.cached[0].groupBy("_blk").agg(
        F.lit(i).alias("file"), F.count(F.lit(1)).alias("n"), F.expr("min(_key - _blk)").alias("min_row"),
        F.count_if(F.col("_flag")).alias("flagged"),
        F.expr("max(_key) FILTER (WHERE NOT _blank AND NOT _flag)").alias("last_good"),
        F.expr(f"coalesce(bool_or({f.kind.flag[0]}), false)" if f.kind.flag else "false").alias("flag"))
        for i, f in enumerate(files)]
    union = per_file[0]
    for df in per_file[1:]:
        union = union.unionByName(df)
    stats: list[list[tuple[int, int, int, int, int | None]]] = [[] for _ in files]
    for r in sorted(union.collect(), key=lambda r: (r["file"], r["_blk"])):
        stats[r["file"]].append((r["_blk"], r["n"], r["min_row"], r["flagged"], r["last_good"]))
        files[r["file"]].flagged_rows |= r["flag"]
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
                row = _representable(kind.to_row(record), file.label, number)
                accepted.append({"_key": key, **row})
                file.flagged_rows |= kind.flag is not None and kind.flag[1](row)
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
    ``columnar_reader.ParquetSource`` (their Parquet caches). Events are few:
    the driver reads them with the reference's reader, and keeps what the
    judge needs from them.
    """

    sends: Source
    reads: Source | None
    txns: Source | None  # txns.jsonl (None: there is none)
    events: list[dict[str, Any]]
    notes: list[str]
    cut_short: bool
    complete: dict[tuple[str, int], bool]  # per partition with a final-read event: did some read-back finish?
    complete_committed: dict[tuple[str, int], bool]  # the same for the read_committed read-back
    committed: dict[tuple[str, int], dict[str, int]]  # per partition: group -> committed offset
    txn_sends: bool  # some send names a transaction
    names: "Names | None" = None  # set when the records are already encoded (encode.py): the names behind the ids
    # (low, high) of integer columns over all records, when known without a job (Parquet statistics); a column
    # missing here holds no value
    ranges: dict[str, tuple[int, int]] | None = None
    acks_ordered: bool = False  # the conversion proved the acks in order (ack_order.py): no reorder window
    tallies: "tuple[Tallies, Tallies] | None" = None  # the send and read files' (tallies.py), when converted
    shares: list[ShareLine] = field(default_factory=list)  # shares.jsonl's lines, as the reference reads them

    def unpersist(self) -> None:
        for f in (self.sends, self.reads, self.txns):
            if f is not None:
                f.unpersist()


def history_of(history_dir: Path, sends: Source, reads: Source | None, txns: Source | None,
               events: list[dict[str, Any]], notes: list[str], txn_sends: bool, **encoded: Any) -> SparkHistory:
    """The SparkHistory of these sources and events, with shares.jsonl read as the reference reads it (in the
    driver: few lines) and the reference reader's cut-short note."""
    shares_path = history_dir / SHARES
    shares = (read_jsonl(shares_path, f"{history_dir.name}/{SHARES}", parse_share, notes)
              if shares_path.is_file() else [])
    cut_short = not any(e["kind"] == "final-read" for e in events)
    if cut_short:
        notes.append(CUT_SHORT_NOTE)
    return SparkHistory(sends=sends, reads=reads, txns=txns, events=events, notes=notes, cut_short=cut_short,
                        shares=shares,
                        complete=final_read_completeness(events),
                        complete_committed=final_read_completeness(events, committed=True),
                        committed=dict(committed_offsets(events)), txn_sends=txn_sends, **encoded)


def read_history(spark: "SparkSession", history_dir: Path) -> SparkHistory:
    """Read the history files in the reference's order: sends and reads (require_history: both hold something),
    events (a missing file is noted), txns.jsonl when there is one."""
    require_history(history_dir)
    label = history_dir.name
    files: dict[str, FileRead | None] = {}
    try:
        for kind in (SENDS, READS, TXNS):
            path = history_dir / kind.name
            files[kind.name] = prepare_file(spark, path, f"{label}/{kind.name}", kind) if path.is_file() else None
        present = [f for f in files.values() if f is not None]
        stats = dict(zip((f.kind.name for f in present), block_stats(present)))
        notes: list[str] = []
        events: list[dict[str, Any]] = []
        for kind in (SENDS, READS, TXNS):  # sends and reads are there (require_history)
            if kind is TXNS:
                events = read_events(history_dir, notes)
            file = files[kind.name]
            if file is not None:
                finish_file(spark, file, stats[kind.name], notes)
        sends = files[SENDS_FILE]
        assert sends is not None
        return history_of(history_dir, sends, files[READS_FILE], files[TXNS_FILE], events, notes,
                          txn_sends=sends.flagged_rows)
    except BaseException:
        for f in files.values():
            if f is not None:
                f.unpersist()
        raise
