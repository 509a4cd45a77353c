"""Convert a history file's JSON lines to Parquet with Arrow's C++ JSON reader, by the reference reader's rules.

Why: parsing JSON is most of a Spark check; Arrow parses the same lines many
times faster (benchmarks/PROFILE.md), and Spark then reads typed columns. The
JSON lines stay the contract (docs/run-directory.md); the Parquet files are a cache (see
``cache``). Every line gets the reference reader's verdict: a block of lines
takes Arrow's fast path only when that is provably what the reference would
read (``fast_block``), any other block is read with the reference's own
``LineRules``. Each row keeps its line number (``line``): it orders lines as
the file does and, through ``marks``, finds the whole line again for an example.
"""

from __future__ import annotations

import io
import os
import shutil
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from catalogue.history import SEND_STATUSES
from checkers.history import INTENT_UNKNOWN, parse_read, parse_send, parse_txn
from rundir.layout import READS as READS_FILE, SENDS as SENDS_FILE, TXNS as TXNS_FILE
from rundir.lines import READ_COMMITTED, READ_UNCOMMITTED, BadLine, HistoryError, LineRules, parse_json_line
from spark_analysis.ack_order import AckOrder
from spark_analysis.tallies import Tallies
from spark_analysis.encode import INTENT_CODES, INTENT_UNKNOWN_CODE, OUTCOME_CODES, STATUS_CODES as CODE_OF_STATUS

BLOCK_BYTES = 8 * 2 ** 20  # one unit of work: big enough for Arrow, small enough to keep memory bounded
MARK_BYTES = 256 * 2 ** 10  # an example line is found by reading at most this much of the file
ARROW_BLOCK_BYTES = 2 ** 20
LONG = pa.int64()


DICTIONARIES = ("producers", "topics", "groups", "consumers")  # names stored as ids, each file with its own list
STATUS_CODES = SEND_STATUSES  # status is stored as its index here
# every name a sends line may give a status, and the code each is stored as: an old name (a history written before
# the rename) the code of the status it became (encode.STATUS_CODES)
STATUS_NAMES = tuple(CODE_OF_STATUS)
STATUS_NAME_CODES = pa.array([CODE_OF_STATUS[name] for name in STATUS_NAMES], pa.int8())


@dataclass(frozen=True)
class Layout:
    """How one history file becomes Parquet: what Arrow reads, what the reference requires, what is stored.

    ``json_schema`` holds the fields the reference keeps as they are (each one
    stored); a field the reference keeps only as a flag (a read's isolation:
    read_committed or not) is read through ``flags`` instead.
    """

    name: str  # sends.jsonl
    parquet_name: str  # sends.parquet
    json_schema: pa.Schema  # the fields Arrow reads from each line and the reference keeps
    stored: dict[str, tuple[str, str]]  # Parquet column -> (how: copy | a dictionary | status | code | final, field)
    required: tuple[str, ...]  # JSON fields that may not be null (nor missing)
    choices: dict[str, tuple[str, ...]]  # JSON field -> its only allowed values (a null one: see ``optional``)
    present_if_null: tuple[str, ...]  # fields that may be null but must be there: lines where one is null are re-read
    paired: tuple[tuple[str, str], ...]  # pairs of JSON fields that are null together or not at all
    parse: Callable[[dict[str, Any], int], Any]  # the reference's parser for one line
    values: Callable[[Any], tuple[Any, ...]]  # a reference record -> its JSON fields, in ``read_schema`` order
    # fields among ``choices`` that may be missing or null (a missing one but not a null one, when also in
    # ``absent_if_null``)
    optional: tuple[str, ...] = ()
    # fields that may be missing but not null: lines where one is null may be re-read
    absent_if_null: tuple[str, ...] = ()
    flags: dict[str, tuple[str, str]] = field(default_factory=dict)  # bool Parquet column -> (JSON field, the value)
    # fields whose null and absence mean different things: a block where one is null is read by the rules
    null_or_absent: tuple[str, ...] = ()
    # the stored codes of a choice, where a record may hold more than the JSON may (a field's absence, coded)
    codes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def read_schema(self) -> pa.Schema:
        """What Arrow reads: ``json_schema``, then the fields behind ``flags`` (strings)."""
        extra = [(name, pa.string()) for name, _ in self.flags.values() if name not in self.json_schema.names]
        return pa.schema(list(self.json_schema) + extra)

    @property
    def schema(self) -> pa.Schema:
        """The Parquet schema: the line number, the stored columns (names as int32 ids), then the flags."""
        types = {f.name: f.type for f in self.json_schema}
        kinds = {"status": pa.int8(), "code": pa.int8(), "final": pa.bool_(), **{d: pa.int32() for d in DICTIONARIES}}
        return pa.schema([("line", LONG)] + [(col, kinds.get(how, types[name]))
                                             for col, (how, name) in self.stored.items()]
                         + [(col, pa.bool_()) for col in self.flags])


SENDS = Layout(
    name=SENDS_FILE,
    parquet_name="sends.parquet",
    json_schema=pa.schema([("producer", pa.string()), ("seq", LONG), ("topic", pa.string()),
                           ("partition", LONG), ("offset", LONG), ("status", pa.string()), ("txn", LONG),
                           ("from_producer", pa.string()), ("from_seq", LONG), ("complete_ns", LONG)]),
    stored={"pid": ("producers", "producer"), "seq": ("copy", "seq"), "tid": ("topics", "topic"),
            "partition": ("copy", "partition"), "offset": ("copy", "offset"), "status": ("status", "status"),
            "txn": ("copy", "txn"), "fpid": ("producers", "from_producer"), "fseq": ("copy", "from_seq"),
            "complete_ns": ("copy", "complete_ns")},
    required=("producer", "seq", "topic", "status"),
    choices={"status": STATUS_NAMES},
    present_if_null=("partition",),
    paired=(("from_producer", "from_seq"),),
    parse=parse_send,
    values=lambda s: (s.producer, s.seq, s.topic, s.partition, s.offset, s.status, s.txn, s.from_producer,
                      s.from_seq, s.complete_ns),
)

READS = Layout(
    name=READS_FILE,
    parquet_name="reads.parquet",
    json_schema=pa.schema([("consumer", pa.string()), ("group", pa.string()), ("phase", pa.string()),
                           ("topic", pa.string()), ("partition", LONG), ("offset", LONG), ("producer", pa.string()),
                           ("seq", LONG), ("from_producer", pa.string()), ("from_seq", LONG),
                           ("assignment", LONG)]),
    stored={"gid": ("groups", "group"), "final": ("final", "phase"), "tid": ("topics", "topic"),
            "partition": ("copy", "partition"), "offset": ("copy", "offset"), "pid": ("producers", "producer"),
            "seq": ("copy", "seq"), "fpid": ("producers", "from_producer"), "fseq": ("copy", "from_seq"),
            "cid": ("consumers", "consumer"), "assignment": ("copy", "assignment")},
    required=("consumer", "phase", "topic", "partition", "offset"),
    choices={"phase": ("live", "final"), "isolation": (READ_COMMITTED, READ_UNCOMMITTED)},
    present_if_null=("producer",),
    paired=(("producer", "seq"), ("from_producer", "from_seq")),
    parse=parse_read,
    values=lambda r: (r.consumer, r.group, r.phase, r.topic, r.partition, r.offset, r.producer, r.seq,
                      r.from_producer, r.from_seq, r.assignment, READ_COMMITTED if r.committed else None),
    optional=("isolation",),
    absent_if_null=("isolation",),
    flags={"committed": ("isolation", READ_COMMITTED)},
)

TXNS = Layout(
    name=TXNS_FILE,
    parquet_name="txns.parquet",
    json_schema=pa.schema([("producer", pa.string()), ("txn", LONG), ("outcome", pa.string()),
                           ("intent", pa.string())]),
    stored={"pid": ("producers", "producer"), "txn": ("copy", "txn"), "outcome": ("code", "outcome"),
            "intent": ("code", "intent")},
    required=("producer", "txn", "outcome"),
    choices={"outcome": OUTCOME_CODES, "intent": INTENT_CODES},
    present_if_null=(),
    paired=(),
    parse=parse_txn,
    values=lambda t: (t.producer, t.txn, t.outcome, t.intent),
    optional=("intent",),
    null_or_absent=("intent",),  # null: the application never asked; absent: not known (INTENT_UNKNOWN)
    codes={"intent": INTENT_CODES + (INTENT_UNKNOWN,)},
)
assert TXNS.codes["intent"].index(INTENT_UNKNOWN) == INTENT_UNKNOWN_CODE


class Dictionaries:
    """A file's names as ids, in the order first seen; Spark maps them to the history's ids (see columnar_reader)."""

    def __init__(self) -> None:
        self.ids: dict[str, dict[str, int]] = {d: {} for d in DICTIONARIES}

    def encode(self, kind: str, column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
        """int32 ids for a string column (null stays null)."""
        ids = self.ids[kind]
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        out = []
        for chunk in chunks:
            encoded = pc.dictionary_encode(chunk)
            mapping = pa.array([ids.setdefault(name, len(ids)) for name in encoded.dictionary.to_pylist()],
                               pa.int32())
            out.append(pc.take(mapping, encoded.indices))
        return pa.chunked_array(out, pa.int32())

    def names(self) -> dict[str, list[str]]:
        return {kind: list(ids) for kind, ids in self.ids.items()}


def stored_table(raw: pa.Table, layout: Layout, lines: pa.Array, dictionaries: Dictionaries) -> pa.Table:
    """The Parquet rows of a table of JSON fields (validated): names to ids, a status to its code (STATUS_CODES), a
    choice (outcome, intent) to its index in ``choices`` (null stays null), phase to final, and the flags."""
    columns: list[Any] = [lines]
    for how, name in layout.stored.values():
        column = raw.column(name)
        if how == "copy":
            columns.append(column)
        elif how == "status":
            columns.append(pc.take(STATUS_NAME_CODES, pc.index_in(column, value_set=pa.array(STATUS_NAMES))))
        elif how == "code":
            codes = layout.codes.get(name, layout.choices[name])
            columns.append(pc.cast(pc.index_in(column, value_set=pa.array(codes)), pa.int8()))
        elif how == "final":
            columns.append(pc.equal(column, "final"))
        else:
            columns.append(dictionaries.encode(how, column))
    for name, value in layout.flags.values():
        columns.append(pc.fill_null(pc.equal(raw.column(name), value), False))
    return pa.table(columns, schema=layout.schema)


@dataclass
class Converted:
    """What a conversion learnt besides the rows: the reader's notes, the line count and where lines start."""

    notes: list[str]
    lines: int
    marks: list[tuple[int, int]]  # (line number, byte offset of its start), ascending
    names: dict[str, list[str]]  # dictionary -> names, by id
    arrow_blocks: int = 0  # blocks read by Arrow alone
    rule_blocks: int = 0  # blocks read line by line by the reference's rules
    ack_order: AckOrder | None = None  # the send file's: are its acks proved in order (ack_order.py)
    tallies: Tallies | None = None  # a send or read file's lines counted per partition (tallies.py)


# --- one block ------------------------------------------------------------------------------------


@dataclass
class FastBlock:
    """A block Arrow read on its own; ``recheck`` are rows where a null may be what the reference refuses."""

    table: pa.Table  # the JSON fields, as Arrow read them
    lines: int
    marks: list[tuple[int, int]]  # (lines before, byte offset) within the block
    recheck: list[int]


def line_marks(block: bytes) -> tuple[int, list[tuple[int, int]]]:
    """(lines in the block, [(lines before, offset of a line start)] about every MARK_BYTES); one pass."""
    marks = []
    lines = pos = 0
    end = len(block)
    while True:
        newline = block.find(b"\n", pos + MARK_BYTES)
        if newline < 0 or newline + 1 >= end:
            break
        lines += block.count(b"\n", pos, newline + 1)
        pos = newline + 1
        marks.append((lines, pos))
    lines += block.count(b"\n", pos)
    if end and block[-1] != 0x0A:
        lines += 1  # the file's last line, without a newline
    return lines, marks


def _valid_utf8(buffer: pa.Buffer) -> bool:
    offsets = pa.array([0, buffer.size], pa.int64()).buffers()[1]
    try:
        pa.Array.from_buffers(pa.large_string(), 1, [None, offsets, buffer]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def fast_block(block: bytes, layout: Layout) -> FastBlock | None:
    """Arrow's reading of a block of whole lines, or None when only the reference's rules can settle it.

    Arrow's result is provably what the reference would read when:

    - the block is valid UTF-8 (Arrow does not look inside the fields it skips);
    - every line is one JSON object: each line starts with ``{`` and ends with
      ``}``, and Arrow found as many objects as there are lines. A line holding
      two objects would need another holding none, which is blank (it does not
      start with ``{``) or continues a multi-line object (after a line ending in
      a structural ``}``, the next character of a value is ``,``, ``}`` or ``]``);
    - Arrow's typed columns already reject what the reference rejects: a string
      where an integer belongs, a fraction, an integer beyond 64 bits, a key
      given twice. What Arrow cannot tell, a missing field from a null one, is
      checked: required fields must not be null, and the few lines where a field
      that may be null but must be present is null, or where one that may be
      missing but not null is null while the block may name it, are parsed again
      with the reference's parser (``recheck``).

    Any other block (a cut-off or bad line, blank lines, ``\\r\\n`` endings, a
    repeated key, ...) is read line by line with ``LineRules``, so errors, notes
    and odd-but-valid lines come out exactly as the reference reads them; so is
    the last line when the file does not end with a newline.
    """
    if not block.startswith(b"{") or not block.endswith(b"}\n"):
        return None
    lines, marks = line_marks(block)
    if block.count(b"}\n{") != lines - 1:  # some line does not start with "{" or end with "}"
        return None
    buffer = pa.py_buffer(block)
    if not _valid_utf8(buffer):
        return None
    try:
        table = pj.read_json(pa.BufferReader(buffer),
                             read_options=pj.ReadOptions(use_threads=False, block_size=ARROW_BLOCK_BYTES),
                             parse_options=pj.ParseOptions(explicit_schema=layout.read_schema,
                                                           unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != lines:
        return None
    for name in layout.required + layout.null_or_absent:
        if table.column(name).null_count:
            return None
    for name, allowed in layout.choices.items():
        column = table.column(name)
        if column.null_count == len(column) and name in layout.optional:
            continue
        if not pc.all(pc.is_in(column, pa.array(allowed), skip_nulls=True), min_count=0).as_py():
            return None
    for a, b in (tuple(table.column(f) for f in pair) for pair in layout.paired):
        if a.null_count != b.null_count or (a.null_count and not pc.all(
                pc.equal(pc.is_null(a), pc.is_null(b))).as_py()):
            return None
    recheck: set[int] = set()
    for name in layout.present_if_null + layout.absent_if_null:
        column = table.column(name)
        if column.null_count and (name in layout.present_if_null or _may_name(block, name)):
            recheck.update(pc.indices_nonzero(pc.is_null(column)).to_pylist())
    return FastBlock(table, lines, marks, sorted(recheck))


def _may_name(block: bytes, name: str) -> bool:
    """Some line of the block may hold the key ``name`` (spelt out, or with escapes: any backslash will do, and
    finding one costs a memchr): whether a null there is a JSON null or a missing field, only the reference's
    parser can tell."""
    return b"\\" in block or b'"' + name.encode() + b'"' in block


def records_table(records: list[Any], layout: Layout, label: str) -> tuple[pa.Table, pa.Array]:
    """(JSON fields, line numbers) of lines read by the reference's rules; values Parquet cannot hold stop the check."""
    rows = [layout.values(r) for r in records]
    columns = []
    for i, json_field in enumerate(layout.read_schema):
        values = [row[i] for row in rows]
        try:
            columns.append(pa.array(values, json_field.type))
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, UnicodeEncodeError):
            line, why = next((r.line, why) for r, v in zip(records, values) if (why := _unstorable(v)))
            raise HistoryError(f"{label} line {line}: field '{json_field.name}' {why}; "
                               "check with --engine python") from None
    return pa.table(columns, schema=layout.read_schema), pa.array([r.line for r in records], LONG)


def _unstorable(value: Any) -> str | None:
    """Why Parquet cannot hold a value the reference accepts (Python's integers and strings have no such limits)."""
    if type(value) is int and not -(2 ** 63) <= value < 2 ** 63:
        return "does not fit in 64 bits"
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode (a lone surrogate)"
    return None


# --- one file -------------------------------------------------------------------------------------


def blocks(path: Path, size: int, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """Bytes ``start`` to ``end`` of the file (``start`` a line start) in blocks of whole lines (each ends with a
    newline), then whatever follows the last newline."""
    rest = b""
    with path.open("rb") as f:
        f.seek(start)
        left = end - start if end is not None else None
        while left is None or left > 0:
            data = f.read(size if left is None else min(size, left))
            if not data:
                break
            if left is not None:
                left -= len(data)
            data = rest + data if rest else data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield data[:cut]
    if rest:
        yield rest


def learners(layout: Layout) -> tuple[AckOrder | None, Tallies | None]:
    """What a conversion learns of a file besides its rows, empty: a send file's acks' order, a send or read
    file's tallies (for one whole file, and for the merge of a cluster's ranges alike)."""
    return (AckOrder() if layout.name == SENDS_FILE else None,
            Tallies() if layout.name in (SENDS_FILE, READS_FILE) else None)


class Converter:
    """Writes one file's rows to a Parquet writer in file order, choosing per block Arrow or the reference's rules."""

    def __init__(self, layout: Layout, label: str, writer: pq.ParquetWriter, lines: int = 0, offset: int = 0) -> None:
        """``lines`` and ``offset``: the lines and bytes of the file before the first block (a range of it)."""
        self.layout = layout
        self.label = label
        self.writer = writer
        self.rules = LineRules(label, layout.parse)
        self.lines = lines  # lines before the next block
        self.offset = offset  # bytes before the next block
        self.rows = 0  # rows written
        self.marks: list[tuple[int, int]] = [(lines + 1, offset)]
        self._numbers = pa.array([], LONG)
        self.dictionaries = Dictionaries()
        self.arrow_blocks = self.rule_blocks = 0
        self.ack_order, self.tallies = learners(layout)

    def add(self, block: bytes, fast: FastBlock | None) -> None:
        if fast is not None and self.rules.unparsed is None and self._rechecked(block, fast):
            raw, numbers = fast.table, self._line_numbers(fast.lines)
            lines, marks = fast.lines, fast.marks
            self.arrow_blocks += 1
        else:
            lines, marks = line_marks(block)
            records = self.rules.feed(((self.lines + i, raw) for i, raw in enumerate(io.BytesIO(block), 1)), [])
            raw, numbers = records_table(records, self.layout, self.label)
            self.rule_blocks += 1
        if raw.num_rows:
            stored = stored_table(raw, self.layout, numbers, self.dictionaries)
            self.writer.write_table(stored)
            self.rows += raw.num_rows
            topics = list(self.dictionaries.ids["topics"])
            if self.ack_order is not None:
                self.ack_order.add(stored, list(self.dictionaries.ids["producers"]), topics)
            if self.tallies is not None:
                self.tallies.add(stored, topics)
        self.marks += [(self.lines + before + 1, self.offset + at) for before, at in marks]
        self.lines += lines
        self.offset += len(block)

    def _rechecked(self, block: bytes, fast: FastBlock) -> bool:
        """The lines where a may-be-null field is null: does the reference find the field there?"""
        if not fast.recheck:
            return True
        lines = block.split(b"\n")
        for row in fast.recheck:
            try:
                self.layout.parse(parse_json_line(lines[row] + b"\n"), self.lines + row + 1)
            except (BadLine, ValueError):
                return False  # the block is read again by the rules, which report the first bad line
        return True

    def _line_numbers(self, count: int) -> pa.Array:
        """self.lines + 1 ... self.lines + count, from one growing sequence (no Python loop per row)."""
        if len(self._numbers) < count:
            self._numbers = pc.cumulative_sum(pa.repeat(pa.scalar(1, LONG), max(count, 2 * len(self._numbers))))
        return pc.add(self._numbers.slice(0, count), self.lines)

    def finish(self, notes: list[str]) -> Converted:
        """At the end of the file: the rules' note on a held cut-off last line, and what was learnt."""
        self.rules.finish(notes)
        return self.result(notes)

    def result(self, notes: list[str]) -> Converted:
        return Converted(notes=notes, lines=self.lines, marks=self.marks, names=self.dictionaries.names(),
                         arrow_blocks=self.arrow_blocks, rule_blocks=self.rule_blocks, ack_order=self.ack_order,
                         tallies=self.tallies)


def parquet_writer(path: Path, layout: Layout) -> pq.ParquetWriter:
    """A cache's Parquet writer (the whole file's, or one range's part)."""
    return pq.ParquetWriter(path, layout.schema, compression="snappy", use_dictionary=_dictionary_columns(layout),
                            column_encoding={"line": "DELTA_BINARY_PACKED"})


def convert_range(source: Path, converter: Converter, start: int = 0, end: int | None = None,
                  workers: int | None = None, block_bytes: int | None = None) -> Converter:
    """Feed ``converter`` bytes ``start`` to ``end`` of ``source`` (``start`` a line start): the work of one
    conversion, whether of the whole file here or of one range of it on an executor (ranged.py).

    Blocks are read by ``workers`` threads at once (Arrow lets go of the GIL),
    and written in file order; at most a few blocks are in memory.
    """
    workers = workers or max(1, os.cpu_count() or 1)
    pending: deque[tuple[bytes, Future[FastBlock | None] | None]] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="kchaos-convert") as pool:
        for block in blocks(source, block_bytes or BLOCK_BYTES, start, end):
            whole = block.endswith(b"\n")
            pending.append((block, pool.submit(fast_block, block, converter.layout) if whole else None))
            while len(pending) > workers:
                done, future = pending.popleft()
                converter.add(done, future.result() if future is not None else None)
        while pending:
            done, future = pending.popleft()
            converter.add(done, future.result() if future is not None else None)
    return converter


def install(tmp: Path, target: Path) -> None:
    """Put a new cache (a file, or a folder of parts) in place of the old one, whichever kind that was."""
    if target.is_dir() or (tmp.is_dir() and target.exists()):  # rename cannot put one kind over the other
        aside = target.with_name(f".{target.name}.{os.getpid()}.old")
        os.replace(target, aside)
        os.replace(tmp, target)
        remove(aside)
    else:
        os.replace(tmp, target)


def remove(path: Path) -> None:
    """A cache or its leftovers, a file or a folder (gone already is fine)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def convert(source: Path, layout: Layout, label: str, target: Path, metadata: Callable[[Converted], dict[str, str]],
            workers: int | None = None) -> Converted:
    """Write ``target`` (atomically) from ``source`` in this process; HistoryError at the first line the reference
    rejects."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    writer = parquet_writer(tmp, layout)
    try:
        converted = convert_range(source, Converter(layout, label, writer), workers=workers).finish([])
        writer.add_key_value_metadata(metadata(converted))
        writer.close()
        install(tmp, target)
        return converted
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise


def _dictionary_columns(layout: Layout) -> list[str]:
    """Columns with few distinct values (ids, codes), where Parquet's dictionary encoding pays."""
    return [col for col, (how, _) in layout.stored.items() if how not in ("copy", "final")]
