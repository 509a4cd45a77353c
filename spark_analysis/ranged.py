"""A history file converted to its Parquet cache by many tasks at once: on a Spark cluster's executors.

Why: on a real cluster the driver alone converting gigabytes of JSON lines
is the one part of a check that does not scale out. Here the driver only
cuts the file into byte ranges at line starts (a seek and a readline per
range) and merges what the tasks learnt; each task runs the same
``columnar.Converter`` over its range (the same rules, shape checks, ids and
line marks) and writes one Parquet part. Three small jobs, each a list of
tasks (``Tasks``: a range of task numbers mapped by ``mapInArrow`` on a
cluster, one after another in this process in the tests):

1. count the newlines before each range, so that every task numbers its
   lines as the file does (rows, errors, notes and marks all carry them);
2. convert each range to ``part-NNNNN.parquet`` in a temporary folder beside
   the cache, with the range's own name dictionaries;
3. where a range numbered its names otherwise than the file does (in the
   order the file first shows them, as one conversion numbers them),
   rewrite that part's id columns with the file's ids.

The merge follows the reference reader's rules across ranges: the first
bad line of the file wins, and a line that is not JSON at the end of one
range is an error when a later range has any non-blank line, else the
dropped cut-off last line (with its note). A task that cannot write (or
read) returns why, and the driver raises OSError: ``cache.cached`` then
falls back to the JSON lines, as for a read-only run directory.

On a cluster the executors need two things of their machines: Python with
pyspark's Arrow packages (pyarrow, pandas), which any PySpark cluster has,
and the history at the same path as the driver sees it (a shared folder).
kchaos's own code they are sent with the session (``ship_code``). A history
the executors do not see is a one-line error (``NotShared``) before any
conversion, not a task failing four times.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rundir.lines import HistoryError, LineRules
from spark_analysis import columnar
from spark_analysis.ack_order import AckOrder
from spark_analysis.tallies import Tallies
from spark_analysis.columnar import (BLOCK_BYTES, DICTIONARIES, READS, SENDS, TXNS, Converted, Converter, Layout,
                                     convert_range, install, learners, parquet_writer, remove)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RANGE_BYTES = 64 * 2 ** 20  # one task's share: a few blocks, so each task's reads and writes stay large
META = "_kchaos.meta"  # the folder cache's footer: Spark and Arrow skip names starting with "_"
LAYOUTS = {layout.name: layout for layout in (SENDS, READS, TXNS)}



@dataclass(frozen=True)
class Tasks:
    """Where the tasks run: ``run`` maps a function over items, a task each, results in order; ``slots()`` of them
    run at once (a file is cut into a multiple of them, so that no wave of tasks runs half empty; asked only when
    a file is cut)."""

    run: Callable[[Callable[[Any], Any], list[Any]], list[Any]]
    slots: Callable[[], int] = lambda: 1


def range_bytes(size: int, slots: int, most: int | None = None) -> int:
    """About ``most`` (RANGE_BYTES) bytes a range or less, the file cut into a multiple of ``slots`` ranges."""
    most = most or RANGE_BYTES
    ranges = -(-max(1, -(-size // most)) // slots) * slots
    return max(1, -(-size // ranges))


def cut(path: Path, size: int, range_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
    """(start, end) byte ranges of about ``range_bytes`` that cover the file's first ``size`` bytes, each starting
    at a line start (0, or just after a newline); one range for an empty file."""
    starts = [0]
    with path.open("rb") as f:
        while (nominal := starts[-1] + range_bytes) < size:
            f.seek(nominal - 1)
            f.readline()  # up to and including the first newline at or after ``nominal - 1``
            at = f.tell()
            if at >= size:
                break
            starts.append(at)
    return list(zip(starts, starts[1:] + [size]))


@dataclass(frozen=True)
class Task:
    """One range of one file to convert (everything a task needs, as plain values)."""

    source: str
    layout: str  # the history file's name: LAYOUTS
    label: str
    start: int
    end: int
    lines_before: int
    part: str  # the Parquet part to write
    block_bytes: int = BLOCK_BYTES


@dataclass
class Part:
    """What a task learnt of its range, for the driver to merge (no rows)."""

    lines: int = 0  # number of the range's last line in the file
    rows: int = 0
    marks: list[tuple[int, int]] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)  # the range's own dictionaries
    unparsed: tuple[int, str] | None = None  # a line that is not JSON, held: the file's last one, or an error
    error: str | None = None  # the range's first bad line (HistoryError's message)
    oserror: str | None = None  # why the task could not read its range or write its part
    arrow_blocks: int = 0
    rule_blocks: int = 0
    ack_order: AckOrder | None = None
    tallies: Tallies | None = None

    @property
    def nonblank(self) -> bool:
        """The range holds a line that is not blank (each becomes a row, an error or a held line)."""
        return bool(self.rows or self.error or self.unparsed)


class NotShared(HistoryError):
    """The executors do not see the history the driver sees: the run directory is not shared with them."""


def count_newlines(span: tuple[str, int, int]) -> int | str:
    """Newlines in bytes ``start`` to ``end`` of a file (the task of job 1); why not, when the file is not there
    as the driver saw it (shorter than ``end``, or missing)."""
    source, start, end = span
    count = 0
    try:
        size = os.stat(source).st_size
    except OSError as e:
        return f"{e.strerror or e}"
    if size < end:
        return f"{size} bytes, the driver sees at least {end}"
    with open(source, "rb") as f:
        f.seek(start)
        while start < end:
            data = f.read(min(BLOCK_BYTES, end - start))
            if not data:
                break
            count += data.count(b"\n")
            start += len(data)
    return count


def convert_part(task: Task) -> Part:
    """Convert one range to its part with ``columnar``'s converter, one thread (a task has one core)."""
    layout = LAYOUTS[task.layout]
    try:
        writer = parquet_writer(Path(task.part), layout)
    except OSError as e:
        return Part(oserror=f"{task.part}: {e}")
    converter = Converter(layout, task.label, writer, task.lines_before, task.start)
    try:
        convert_range(Path(task.source), converter, task.start, task.end, workers=1, block_bytes=task.block_bytes)
        writer.close()
    except HistoryError as e:
        writer.close()
        return Part(error=str(e))
    except OSError as e:
        try:
            writer.close()
        except OSError:
            pass
        return Part(oserror=f"{task.source}: {e}")
    done = converter.result([])
    return Part(lines=done.lines, rows=converter.rows, marks=done.marks, names=done.names,
                unparsed=converter.rules.unparsed, arrow_blocks=done.arrow_blocks, rule_blocks=done.rule_blocks,
                ack_order=done.ack_order, tallies=done.tallies)


@dataclass
class Merged:
    """The parts' metadata as one conversion's, and for each part the map of its ids to the file's (None: same)."""

    converted: Converted
    remaps: list[dict[str, list[int]] | None]


def merge(parts: list[Part], layout: Layout, label: str) -> Merged:
    """One file's conversion from its ranges' (in file order), by the rules one reader would follow.

    OSError when a task could not do its work; HistoryError at the file's first bad line.
    """
    for part in parts:
        if part.oserror is not None:
            raise OSError(part.oserror)
    rules = LineRules(label, layout.parse)
    for part in parts:
        if part.nonblank:
            rules.more_lines()
        if part.error is not None:
            raise HistoryError(part.error)
        if part.unparsed is not None:
            rules.unparsed = (part.unparsed[0], part.unparsed[1])
    notes: list[str] = []
    rules.finish(notes)
    ids: dict[str, dict[str, int]] = {kind: {} for kind in DICTIONARIES}
    remaps: list[dict[str, list[int]] | None] = []
    for part in parts:
        remap = {kind: [ids[kind].setdefault(name, len(ids[kind])) for name in part.names.get(kind, [])]
                 for kind in DICTIONARIES}
        changed = {kind: m for kind, m in remap.items() if m != list(range(len(m)))}
        remaps.append(changed or None)
    ack_order, tallies = learners(layout)
    for part in parts:
        if ack_order is not None and part.ack_order is not None:
            ack_order.follow(part.ack_order)
        if tallies is not None and part.tallies is not None:
            tallies.follow(part.tallies)
    converted = Converted(notes=notes, lines=parts[-1].lines, marks=[m for p in parts for m in p.marks],
                          names={kind: list(names) for kind, names in ids.items()},
                          arrow_blocks=sum(p.arrow_blocks for p in parts),
                          rule_blocks=sum(p.rule_blocks for p in parts), ack_order=ack_order, tallies=tallies)
    return Merged(converted, remaps)


def remap_part(job: tuple[str, str, dict[str, list[int]]]) -> str | None:
    """Rewrite a part's id columns with the file's ids (the task of job 3); why not, when it cannot."""
    path, layout_name, remap = job
    layout = LAYOUTS[layout_name]
    try:
        table = pq.read_table(path, schema=layout.schema)
        for column, (how, _) in layout.stored.items():
            if how in remap:
                index = table.schema.get_field_index(column)
                mapped = pc.take(pa.array(remap[how], pa.int32()), table.column(column))
                table = table.set_column(index, column, mapped)
        tmp = Path(path).with_name(f".{Path(path).name}.tmp")
        writer = parquet_writer(tmp, layout)
        writer.write_table(table)
        writer.close()
        os.replace(tmp, path)
    except OSError as e:
        return f"{path}: {e}"
    return None


def convert_ranges(source: Path, layout: Layout, label: str, target: Path,
                   metadata: Callable[[Converted], dict[str, str]], tasks: Tasks,
                   most_bytes: int | None = None, block_bytes: int | None = None) -> Converted:
    """Write ``target`` as a folder of Parquet parts and ``META`` (its footer), converted by ``tasks``, in ranges
    of at most about ``most_bytes`` (RANGE_BYTES).

    The same contract as ``columnar.convert``: HistoryError at the first bad line and no cache left; OSError
    when the cache cannot be written here or by the tasks.
    """
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    remove(tmp)
    tmp.mkdir()
    try:
        size = source.stat().st_size
        spans = cut(source, size, range_bytes(size, tasks.slots(), most_bytes))
        counts = tasks.run(count_newlines, [(str(source), start, end) for start, end in spans])
        if unseen := next((why for why in counts if isinstance(why, str)), None):
            raise NotShared(f"the Spark executors cannot read {source} ({unseen}): on a cluster the run directory "
                            "must be at the same path on the driver's machine and on every worker's (a shared "
                            "folder)")
        before = [sum(counts[:i]) for i in range(len(spans))]  # type: ignore[arg-type]  # all ints by now
        work = [Task(str(source), layout.name, label, start, end, lines, str(tmp / f"part-{i:05d}.parquet"),
                     block_bytes or columnar.BLOCK_BYTES) for i, ((start, end), lines) in enumerate(zip(spans, before))]
        merged = merge(tasks.run(convert_part, work), layout, label)
        jobs = [(task.part, layout.name, remap) for task, remap in zip(work, merged.remaps) if remap]
        failed = [why for why in (tasks.run(remap_part, jobs) if jobs else []) if why]
        if failed:
            raise OSError(failed[0])
        pq.write_metadata(layout.schema.with_metadata(metadata(merged.converted)), tmp / META)
        install(tmp, target)
        return merged.converted
    except BaseException:
        remove(tmp)
        raise


def on_executors(spark: "SparkSession") -> Tasks:
    """One Spark task per item, on the session's executors (as many at once as they have cores).

    The items go out as a DataFrame of their numbers, one per partition,
    mapped by Arrow batches: no RDD, so the same code serves an in-process
    session and a Spark Connect server's. The tasks import kchaos's conversion, which is sent with them
    (``ship_code``)."""
    ship_code(spark)

    def run(function: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if not items:
            return []
        sent = [pickle.dumps(item) for item in items]

        def tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                numbers = batch.column(0).to_pylist()
                results = [pickle.dumps(function(pickle.loads(sent[n]))) for n in numbers]
                yield pa.RecordBatch.from_arrays([pa.array(numbers, pa.int64()), pa.array(results, pa.binary())],
                                                 names=["n", "result"])

        rows = spark.range(0, len(items), 1, len(items)).mapInArrow(tasks, "n bigint, result binary").collect()
        results = {row["n"]: pickle.loads(row["result"]) for row in rows}
        return [results[n] for n in range(len(items))]

    return Tasks(run, functools.cache(lambda: executor_slots(spark)))  # asked only when a file is converted


def ship_code(spark: "SparkSession") -> None:
    """Send kchaos's packages the driver has loaded, zipped, to the session's executors (their Python path), so
    that a cluster needs no kchaos installed. The zip is named by its content: the same code is the same file,
    which Spark accepts again within a session."""
    from spark_analysis.session import is_connect

    zipped = code_zip()
    if is_connect(spark):
        if zipped.name not in getattr(spark, "_kchaos_shipped", ()):
            spark.addArtifacts(str(zipped), pyfile=True)
            spark._kchaos_shipped = {*getattr(spark, "_kchaos_shipped", ()), zipped.name}  # type: ignore[attr-defined]
    else:
        spark.sparkContext.addPyFile(str(zipped))


@functools.cache
def code_zip() -> Path:
    """kchaos's packages (the top-level ones of the modules loaded from this checkout), as one zip of their
    ``.py`` files in the temporary folder."""
    root = Path(__file__).resolve().parent.parent
    packages = sorted({name.split(".")[0] for name, module in list(sys.modules.items())
                       if (root / name.split(".")[0] / "__init__.py").is_file()
                       and str(getattr(module, "__file__", "") or "").startswith(str(root))})
    files = sorted(f for package in packages for f in (root / package).rglob("*.py"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    target = Path(tempfile.gettempdir()) / f"kchaos-code-{digest.hexdigest()[:16]}.zip"
    if not target.is_file():
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
            for f in files:
                z.write(f, f.relative_to(root).as_posix())
        tmp.replace(target)
    return target


def executor_slots(spark: "SparkSession") -> int:
    """How many tasks the executors run at once: the partitions of a range with Spark's default parallelism
    (a Connect session has no SparkContext to ask)."""
    from pyspark.sql import functions as F

    numbered = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p"))
    return 1 + int(numbered.agg(F.max("p")).first()[0])


# Without Spark: the tasks one after another (the tests; the same results as on executors).
IN_THIS_PROCESS = Tasks(lambda function, items: [function(item) for item in items])


def parts_of(path: Path) -> list[Path]:
    """The Parquet files of a cache: itself, or a folder's parts in file order."""
    return sorted(path.glob("part-*.parquet")) if path.is_dir() else [path]


def footer_path(path: Path) -> Path:
    """Where a cache keeps its footer entries: in its own file, or in a folder's ``META``."""
    return path / META if path.is_dir() else path
