"""Benchmark the Spark checker (and the reference, while it fits) on synthetic histories of N million sends.

    .venv/bin/python benchmarks/spark_checker.py --millions 1 10 50 [--dir DIR] [--keep] [--reuse] [--json]
        [--transactional | --both] [--standalone WORKERS]

For each N it writes a run directory with N million sends, a live read and a
final read of every acknowledged one, the final-read and committed events of
every partition, and a sprinkling of every anomaly (lost, lost after a read,
duplicated, divergent, unexpected and foreign values, failed but present,
in-doubt sends found and not, reordered acks, redelivered and skipped
messages). The JSON lines are written by Spark itself (``to_json`` on
generated columns, then the part files concatenated in order), which is
about as fast as the disk.

``--transactional`` (``--both``: as well) writes a transactional history
instead (directory ``<N>M-txn``): every producer sends in transactions of
ten messages, one in ten aborted on purpose and a few with an unknown
outcome (the commit timed out, or the producer died before asking), with a
txns.jsonl line for each; two read-backs, read_uncommitted (every message
written) and read_committed (every message of a transaction that committed,
or may have); both read-backs' final-read events and last stable offset
samples; and a few planted anomalies: aborted messages the read_committed
read-back saw (aborted_read, torn_transaction) and committed ones it missed
(lost, torn_transaction), besides failed and in-doubt sends.

Each measurement runs in a fresh child process, so that its peak memory is
its own, and so is its CPU time (user + system, JVM and Python): on a shared
machine the wall-clock figures depend on the others' load, the CPU seconds
much less (on an idle 2-core machine a check takes about half of them). For
Spark (``spark``): the conversion of the JSON lines to their Parquet caches
(any old cache is deleted first), the session start and the check, apart and
in total, the driver JVM's peak resident set (in local mode the executors live
in it) and the Python process's (the conversion); with ``--json`` also Spark
parsing the JSON lines itself (``spark-json``). For the reference (``python``)
the Python process's peak. The reference is only run up to
``--python-max-millions`` (default 2): it holds every send and read as Python
tuples, over a gigabyte per million sends with their reads, and takes minutes
per million on this kind of machine.

Beside Spark, the yardstick of issue #21: DuckDB (``duckdb`` and
``duckdb-json``, plain histories only, when it is installed:
``.venv/bin/pip install duckdb``; the checker never imports it) computes
six of the counts, lost, lost_after_read, duplicated, failed_but_present,
consumer_redelivered and divergent, on 2 threads with one CTE chain that
follows the catalogue's definitions as checkers/reference.py reads them
(``DUCKDB_QUERY``): from the Parquet caches Spark's conversion just wrote
(so it runs right after ``spark``), and from the JSON lines (read by DuckDB,
a line's number from ``WITH ORDINALITY``, without the reference reader's
checks of each line). A line per size then puts Spark's convert, start and
check seconds beside DuckDB's, with the ratios (Spark's check ÷ DuckDB from
Parquet: the issue wants at most 2; Spark's convert + start + check ÷ DuckDB
from the JSON lines) and whether the six counts agree with Spark's (and the
reference's, when it ran). The synthetic histories' final reads are all
complete, so ``lost`` there never depends on completeness; the query still
asks for it.

``--standalone WORKERS`` also starts a Spark standalone master and WORKERS
workers on this machine (spark_analysis/standalone.py, the tests' cluster;
the cores shared out among the workers) and checks each history twice more:
in local mode with the conversion run as Spark tasks by ranges
(``spark-tasks``: KCHAOS_SPARK_CONVERT=executors) and on the cluster
(``standalone``: the executors convert, then check). There the session
starts before the conversion, and CPU s adds the cluster's processes
(workers, executors and their Python workers) to the driver's. A line per
size puts the three conversion times side by side, each with the load.

The generated data is deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from producer_vs_kafka import load  # noqa: E402  (benchmarks/ is the script's folder)
from spark_analysis.encode import STATUS_CODES  # noqa: E402  (no pyspark: its imports are for type checks only)

PRODUCERS = 8
PARTITIONS = 12
TOPIC = "chaos"
GROUP = "chaos-app"


# --- generating a history -----------------------------------------------------------------------


def generate(run: Path, millions: float) -> dict[str, int]:
    """Write RUN/history/*.jsonl for ``millions`` million sends; returns the line counts."""
    from pyspark.sql import functions as F

    from spark_analysis.session import new_session, spark_conf

    n = int(millions * 1_000_000)
    history = run / "history"
    if history.exists():
        shutil.rmtree(history)
    history.mkdir(parents=True)
    spark = new_session({**spark_conf("local[*]"), "spark.app.name": "kchaos-bench-generate"})
    try:
        ids = spark.range(0, n, numPartitions=max(4, n // 2_000_000))
        # Message id i: producer p(i % 8), seq i // 8, partition i % 12 at offset i // 12, so that each
        # producer's seqs and offsets grow together in every partition (no reorder unless planted).
        base = ids.selectExpr(
            "id",
            f"concat('p', CAST(id % {PRODUCERS} AS STRING)) AS producer",
            f"id DIV {PRODUCERS} AS seq",
            f"id % {PARTITIONS} AS part",
            f"id DIV {PARTITIONS} AS off",
            """CASE WHEN id % 1000 = 7 THEN 'fail' WHEN id % 1000 = 13 THEN 'unknown' ELSE 'ok' END AS status""",
        )
        sends = base.selectExpr(
            "id",
            "to_json(named_struct("
            "'producer', producer, 'seq', seq, 'topic', '" + TOPIC + "', 'key', CAST(seq AS STRING),"
            " 'partition', CASE WHEN status = 'unknown' AND id % 2000 = 13 THEN NULL ELSE part END,"
            # reordered: a few acks sit below an earlier seq's offset of the same producer and partition
            " 'offset', CASE WHEN status <> 'ok' THEN NULL WHEN id % 1000003 = 101 THEN off - 24 ELSE off END,"
            " 'status', status, 'error', CASE WHEN status = 'ok' THEN NULL ELSE 'timed out' END,"
            " 'invoke_ns', id * 1000, 'complete_ns', id * 1000 + 5000000), map('ignoreNullFields', 'false')) AS j",
        )
        written = base.filter(
            "status = 'ok' OR (status = 'fail' AND id % 7000 = 7) OR (status = 'unknown' AND id % 2000 = 13)")
        live = written.filter("id % 300007 <> 9").selectExpr(  # the rest: skipped below the commit
            "id",
            f"to_json(named_struct('consumer', concat('c', CAST(id % 4 AS STRING)), 'group', '{GROUP}',"
            f" 'phase', 'live', 'topic', '{TOPIC}', 'partition', part, 'offset', off, 'producer', producer,"
            " 'seq', seq, 'time_ns', id * 1000 + 9000000)) AS j",
        )
        redelivered = live.filter("id % 50021 = 0")
        final = written.filter("id % 100003 <> 5").selectExpr(  # the rest: lost (read live first)
            "id", "part", "off",
            """CASE WHEN id % 200003 = 11 THEN 'p9' ELSE producer END AS producer""",  # divergent + unexpected
            "seq",
        )
        duplicates = written.filter("id % 100019 = 3").selectExpr(
            "id", "part", f"off + {n} AS off", "producer", "seq")  # a second position, past every real offset
        foreign = spark.range(0, max(1, n // 1_000_000)).selectExpr(
            "id", f"id % {PARTITIONS} AS part", f"{2 * n} + id AS off", "CAST(NULL AS STRING) AS producer",
            "CAST(NULL AS BIGINT) AS seq")
        finals = final.unionByName(duplicates).unionByName(foreign).selectExpr(
            "part", "off",
            f"to_json(named_struct('consumer', 'final-reader', 'group', CAST(NULL AS STRING), 'phase', 'final',"
            f" 'topic', '{TOPIC}', 'partition', part, 'offset', off, 'producer', producer, 'seq', seq,"
            " 'time_ns', off), map('ignoreNullFields', 'false')) AS j",
        )
        counts = {"sends": n}
        # spark.range hands each task a contiguous run of ids, so the parts come out in id order unsorted
        _write_lines(sends.select("j"), history / "sends.jsonl", run / "tmp-sends")
        _write_lines(live.unionByName(redelivered).select("j"), history / "reads.jsonl", run / "tmp-live")
        _write_lines(finals.select("j"), history / "reads.jsonl", run / "tmp-final", append=True)
        high = {r["part"]: r["high"] for r in base.filter("status = 'ok'").groupBy("part")
                .agg(F.max("off").alias("high")).collect()}
        with (history / "events.jsonl").open("w") as f:
            for p in range(PARTITIONS):
                hw = int(high.get(p, -1)) + 1
                f.write(json.dumps({"kind": "committed", "group": GROUP, "topic": TOPIC, "partition": p,
                                    "offset": hw, "time_ns": 1}) + "\n")
                f.write(json.dumps({"kind": "final-read", "topic": TOPIC, "partition": p, "high_watermark": hw,
                                    "complete": True, "time_ns": 2}) + "\n")
        counts["reads"] = sum(1 for _ in (history / "reads.jsonl").open("rb"))
        (run / "scenario.yaml").write_text("name: bench\nworkload:\n  producers:\n    config:\n"
                                           "      enable.idempotence: true\n")
        return counts
    finally:
        spark.stop()


TXN_SIZE = 10  # messages per transaction


def generate_transactional(run: Path, millions: float) -> dict[str, int]:
    """Write RUN/history/*.jsonl (txns.jsonl too) of a transactional run of ``millions`` million sends."""
    from spark_analysis.session import new_session, spark_conf

    n = int(millions * 1_000_000)
    history = run / "history"
    if history.exists():
        shutil.rmtree(history)
    history.mkdir(parents=True)
    spark = new_session({**spark_conf("local[*]"), "spark.app.name": "kchaos-bench-generate"})
    try:
        # Message id i: producer p(i % 8), seq i // 8, transaction seq // 10 of its producer; partition i % 12
        # at offset i // 12. A transaction's fate by its number: one in ten aborted on purpose, a few unknown
        # (1 in 1000 after a commit that timed out: may have committed; 1 in 1000 never asked to commit).
        fate = ("CASE WHEN txn % 10 = 3 THEN 'aborted' WHEN txn % 1000 = 7 THEN 'unknown-commit' "
                "WHEN txn % 1000 = 8 THEN 'unknown' ELSE 'committed' END")
        base = spark.range(0, n, numPartitions=max(4, n // 2_000_000)).selectExpr(
            "id",
            f"concat('p', CAST(id % {PRODUCERS} AS STRING)) AS producer",
            f"id DIV {PRODUCERS} AS seq",
            f"id DIV {PRODUCERS * TXN_SIZE} AS txn",
            f"id % {PARTITIONS} AS part",
            f"id DIV {PARTITIONS} AS off",
            "CASE WHEN id % 1000 = 7 THEN 'fail' WHEN id % 1000 = 13 THEN 'unknown' ELSE 'ok' END AS status",
        ).selectExpr("*", f"{fate} AS fate")
        sends = base.selectExpr(
            "id",
            "to_json(named_struct("
            "'producer', producer, 'seq', seq, 'topic', '" + TOPIC + "', 'key', CAST(seq AS STRING),"
            " 'partition', part, 'offset', CASE WHEN status = 'ok' THEN off END,"
            " 'status', status, 'error', CASE WHEN status = 'ok' THEN NULL ELSE 'timed out' END,"
            " 'invoke_ns', id * 1000, 'complete_ns', id * 1000 + 5000000, 'txn', txn),"
            " map('ignoreNullFields', 'false')) AS j",
        )
        written = base.filter("status = 'ok' OR id % 2 = 1")  # half the failed and in-doubt sends reached the log
        # read_committed sees committed transactions (and those that may have committed), less a few planted
        # losses, plus half of a few aborted transactions it must never see
        visible = written.filter("(fate IN ('committed', 'unknown-commit') AND id % 1000033 <> 21)"
                                 f" OR (fate = 'aborted' AND txn % 10007 = 3 AND seq % {TXN_SIZE} < 5)")

        def read_back(rows: Any, consumer: str, isolation: str) -> Any:
            return rows.selectExpr(
                "part", "off",
                f"to_json(named_struct('consumer', '{consumer}', 'group', CAST(NULL AS STRING), 'phase', 'final',"
                f" 'topic', '{TOPIC}', 'partition', part, 'offset', off, 'producer', producer, 'seq', seq,"
                f" 'time_ns', off, 'isolation', '{isolation}'), map('ignoreNullFields', 'false')) AS j")

        _write_lines(read_back(written, "final-reader", "read_uncommitted").select("j"), history / "reads.jsonl",
                     run / "tmp-final")
        _write_lines(read_back(visible, "final-reader-committed", "read_committed").select("j"),
                     history / "reads.jsonl", run / "tmp-committed", append=True)
        _write_lines(sends.select("j"), history / "sends.jsonl", run / "tmp-sends")
        txns = base.filter(f"seq % {TXN_SIZE} = 0").selectExpr(
            "to_json(named_struct('producer', producer, 'txn', txn,"
            " 'outcome', CASE fate WHEN 'aborted' THEN 'aborted' WHEN 'committed' THEN 'committed' ELSE 'unknown' END,"
            " 'intent', CASE fate WHEN 'aborted' THEN 'abort' WHEN 'unknown' THEN NULL ELSE 'commit' END,"
            " 'error', CASE WHEN fate LIKE 'unknown%' THEN 'commit timed out' END,"
            " 'begin_ns', id * 1000, 'invoke_ns', CASE WHEN fate = 'unknown' THEN NULL ELSE id * 1000 + 8000000 END,"
            " 'complete_ns', id * 1000 + 9000000), map('ignoreNullFields', 'false')) AS j")
        _write_lines(txns, history / "txns.jsonl", run / "tmp-txns")
        high = {r["part"]: r["high"] for r in base.groupBy("part").agg({"off": "max"})
                .withColumnRenamed("max(off)", "high").collect()}
        with (history / "events.jsonl").open("w") as f:
            for p in range(PARTITIONS):
                hw = int(high.get(p, -1)) + 1
                for second in range(0, 120, 10):  # the last stable offset moving up with the high watermark
                    f.write(json.dumps({"kind": "stable", "topic": TOPIC, "partition": p,
                                        "high_watermark": hw * second // 120 + 1,
                                        "last_stable_offset": hw * second // 120,
                                        "time_ns": second * 1_000_000_000}) + "\n")
                for isolation in ("read_uncommitted", "read_committed"):
                    f.write(json.dumps({"kind": "final-read", "topic": TOPIC, "partition": p, "high_watermark": hw,
                                        "complete": True, "time_ns": 130_000_000_000, "isolation": isolation,
                                        **({"last_stable_offset": hw} if isolation == "read_committed" else {})})
                            + "\n")
        counts = {"sends": n, "reads": sum(1 for _ in (history / "reads.jsonl").open("rb"))}
        (run / "scenario.yaml").write_text("name: bench-txn\nworkload:\n  producers:\n    config:\n"
                                           "      enable.idempotence: true\n  transactions:\n    size: 10\n")
        return counts
    finally:
        spark.stop()


def _write_lines(df: Any, target: Path, tmp: Path, append: bool = False) -> None:
    """Write one JSON document per row, in order, to ``target`` (Spark writes parts; they are concatenated)."""
    df.write.mode("overwrite").text(str(tmp))
    with target.open("ab" if append else "wb") as out:
        for part in sorted(tmp.glob("part-*")):
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 16 * 2 ** 20)
    shutil.rmtree(tmp)


# --- measuring ----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (the figure that does not depend on other load)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_hwm_bytes(pid: int) -> int:
    """Peak resident set of a process (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_spark(run: Path, history_format: str = "parquet") -> dict[str, Any]:
    """The conversion (by the driver before the session starts, or by tasks after: KCHAOS_SPARK_CONVERT, a
    cluster's SPARK_MASTER), the session's start and the check, each timed; any old cache is deleted first."""
    from spark_analysis.checker import check_run
    from spark_analysis.columnar import remove
    from spark_analysis.columnar_reader import conversion_tasks, convert_history
    from spark_analysis.session import (converts_on_executors, history_bytes, is_connect, jvm_pid, master_url,
                                        spark_session)

    history = run / "history"
    for cache in history.glob("*.parquet"):
        remove(cache)
    by_tasks = history_format == "parquet" and converts_on_executors(master_url())
    started = time.perf_counter()
    if history_format == "parquet" and not by_tasks:
        convert_history(history)
    convert_s = time.perf_counter() - started
    started = time.perf_counter()
    spark = spark_session(history_bytes=history_bytes(history))
    if by_tasks:  # a cluster's executors start after the session: the start includes them (a first, empty job)
        spark.range(0, 2, 1, 2).count()
    session_s = time.perf_counter() - started
    if by_tasks:
        started = time.perf_counter()
        convert_history(history, conversion_tasks(spark))
        convert_s = time.perf_counter() - started
    pid = None if is_connect(spark) else jvm_pid(spark)  # a Connect server's: the parent measures it (``server``)
    started = time.perf_counter()
    results = check_run(run, spark, history_format=history_format)
    check_s = time.perf_counter() - started
    peak = vm_hwm_bytes(pid) if pid else 0
    cpu = (cpu_seconds(pid) if pid else 0.0) + cpu_seconds(os.getpid())
    spark.stop()
    return {"convert_s": convert_s, "session_s": session_s, "check_s": check_s, "peak_rss": peak, "cpu_s": cpu,
            "python_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "counts": results["counts"], "valid": results["valid"]}


def measure_python(run: Path) -> dict[str, Any]:
    from checkers.reference import check_run

    started = time.perf_counter()
    results = check_run(run)
    check_s = time.perf_counter() - started
    return {"convert_s": 0.0, "session_s": 0.0, "check_s": check_s, "peak_rss": 0, "cpu_s": cpu_seconds(os.getpid()),
            "python_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "counts": results["counts"], "valid": results["valid"]}


# --- the same counts on DuckDB (issue #21's yardstick; DuckDB is the benchmark's, never the checker's) ---------

DUCKDB_COUNTS = ("lost", "lost_after_read", "duplicated", "failed_but_present", "consumer_redelivered", "divergent")
DUCKDB_THREADS = 2  # the machine's cores, as the issue measured

# What a plain (not transactional) history says, whatever the source: sends(line, pid, seq, tid, partition,
# offset, status) and reads(gid, final, tid, partition, offset, pid, seq); names are ids from the Parquet
# caches, strings from the JSON lines. status: 0 ok, 1 fail, 2 unknown (encode.STATUS_CODES, which also codes the
# old name of a status in a history kept from before its rename).
JSON_VIEWS = """
CREATE VIEW sends AS
  SELECT ordinality AS line, producer AS pid, seq, topic AS tid, "partition", "offset",
         CASE status """ + " ".join(f"WHEN '{s}' THEN {c}" for s, c in STATUS_CODES.items()) + """ END AS status
  FROM read_json('{sends}', format = 'newline_delimited', columns = {{producer: 'VARCHAR', seq: 'BIGINT',
       topic: 'VARCHAR', "partition": 'BIGINT', "offset": 'BIGINT', status: 'VARCHAR'}})
       WITH ORDINALITY;
CREATE VIEW reads AS
  SELECT "group" AS gid, phase = 'final' AS final, topic AS tid, "partition", "offset", producer AS pid, seq
  FROM read_json('{reads}', format = 'newline_delimited', columns = {{"group": 'VARCHAR', phase: 'VARCHAR',
       topic: 'VARCHAR', "partition": 'BIGINT', "offset": 'BIGINT', producer: 'VARCHAR', seq: 'BIGINT'}});
"""

PARQUET_VIEWS = """
CREATE VIEW sends AS
  SELECT line, {send_pid} AS pid, seq, {send_tid} AS tid, "partition", "offset", status
  FROM read_parquet('{sends}');
CREATE VIEW reads AS
  SELECT {read_gid} AS gid, final, {read_tid} AS tid, "partition", "offset", {read_pid} AS pid, seq
  FROM read_parquet('{reads}');
"""

# One CTE chain, each step one of the catalogue's definitions as checkers/reference.py reads it.
DUCKDB_QUERY = """
WITH
-- each message's send: the last ok line, else the last line (an acknowledgement is never downgraded)
winners AS (
  SELECT pid, seq, arg_max({status: status, tid: tid, "partition": "partition", "offset": "offset"},
                           (status = 0, line)) AS s
  FROM sends GROUP BY pid, seq),
sent AS (SELECT pid, seq, s.status, s.tid, s."partition", s."offset" FROM winners),
-- the distinct positions at which the final read found each message
final_positions AS (SELECT DISTINCT pid, seq, tid, "partition", "offset" FROM reads WHERE final AND pid IS NOT NULL),
-- live reads per (group, message); the null group counts for lost_after_read, not for redelivery
live AS (SELECT gid, pid, seq, count(*) AS n FROM reads WHERE NOT final AND pid IS NOT NULL GROUP BY ALL),
-- ok, absent from the final read of its partition (no partition: of its topic) although that read was complete
lost AS (
  SELECT pid, seq FROM sent s
  WHERE status = 0 AND "partition" IS NOT NULL
    AND (tid, "partition") IN (SELECT (tid, "partition") FROM complete_partitions)
    AND NOT EXISTS (SELECT 1 FROM final_positions f
                    WHERE f.pid = s.pid AND f.seq = s.seq AND f.tid = s.tid AND f."partition" = s."partition")
  UNION ALL
  SELECT pid, seq FROM sent s
  WHERE status = 0 AND "partition" IS NULL AND tid IN (SELECT tid FROM complete_topics)
    AND NOT EXISTS (SELECT 1 FROM final_positions f WHERE f.pid = s.pid AND f.seq = s.seq AND f.tid = s.tid)),
lost_after_read AS (SELECT pid, seq FROM lost WHERE (pid, seq) IN (SELECT (pid, seq) FROM live)),
-- at two or more distinct positions in the final read
duplicated AS (SELECT pid, seq FROM final_positions GROUP BY pid, seq HAVING count(*) > 1),
-- definitely not written, yet somewhere in the final read
failed_but_present AS (
  SELECT pid, seq FROM sent WHERE status = 1 AND (pid, seq) IN (SELECT (pid, seq) FROM final_positions)),
-- processed live more than once by one group
consumer_redelivered AS (SELECT gid, pid, seq FROM live WHERE gid IS NOT NULL AND n > 1),
-- one position holding different messages: the reads there (any phase, a foreign value included) and the acks
-- there; a position nobody read is divergent when two acks there disagree
divergent AS (
  SELECT tid, "partition", "offset"
  FROM (SELECT tid, "partition", "offset", pid, seq FROM reads
        UNION ALL
        SELECT tid, "partition", "offset", pid, seq FROM sent
        WHERE status = 0 AND "partition" IS NOT NULL AND "offset" IS NOT NULL)
  GROUP BY ALL
  -- two messages differ in producer or seq; a foreign value (pid null) differs from any message
  HAVING min(pid) <> max(pid) OR min(seq) <> max(seq) OR count(pid) NOT IN (0, count(*)))
SELECT (SELECT count(*) FROM lost), (SELECT count(*) FROM lost_after_read), (SELECT count(*) FROM duplicated),
       (SELECT count(*) FROM failed_but_present), (SELECT count(*) FROM consumer_redelivered),
       (SELECT count(*) FROM divergent)
"""


def id_map(column: str, local: list[str], history: list[str]) -> str:
    """SQL for a file's ids of ``local`` names as ids of ``history`` (a literal list; null stays null)."""
    ids = {name: i for i, name in enumerate(history)}
    mapping = [ids[name] for name in local]
    if mapping == list(range(len(mapping))):
        return column
    return f"[{', '.join(map(str, mapping))}][{column} + 1]"


def parquet_views(history: Path) -> tuple[str, Callable[[str], Any]]:
    """The views over the caches Spark converted (their footers name the ids), and topic name -> id."""
    from spark_analysis.columnar import DICTIONARIES
    from spark_analysis.columnar_reader import convert_history
    from spark_analysis.encode import sorted_names

    files = convert_history(history)
    assert files is not None, "no Parquet cache (a read-only run directory?)"
    sends, reads = files["sends.jsonl"], files["reads.jsonl"]
    assert sends is not None and reads is not None
    names = {kind: sorted_names(set(sends.names[kind]) | set(reads.names[kind])) for kind in DICTIONARIES}
    views = PARQUET_VIEWS.format(
        sends=sends.path, reads=reads.path,
        send_pid=id_map("pid", sends.names["producers"], names["producers"]),
        send_tid=id_map("tid", sends.names["topics"], names["topics"]),
        read_pid=id_map("pid", reads.names["producers"], names["producers"]),
        read_tid=id_map("tid", reads.names["topics"], names["topics"]),
        read_gid=id_map("gid", reads.names["groups"], names["groups"]))
    topic_ids = {name: i for i, name in enumerate(names["topics"])}
    return views, lambda topic: topic_ids.get(topic, -1)  # a topic no line names matches no row


def completeness(history: Path) -> tuple[list[tuple[str, int]], list[str]]:
    """(partitions whose final read was complete, topics all of whose final-read partitions were), from the
    events as the reference reads them (Judge.topic_complete)."""
    from rundir.documents import final_read_completeness, read_events

    events = read_events(history, [])
    complete = final_read_completeness(events)
    parts = complete.keys() | final_read_completeness(events, committed=True).keys()
    topics = {topic for topic, _ in parts}
    return ([p for p, done in complete.items() if done],
            [t for t in topics if all(complete.get(p, False) for p in parts if p[0] == t)])


def completeness_tables(con: Any, history: Path, topic_key: Callable[[str], Any], topic_type: str) -> None:
    """complete_partitions(tid, partition) and complete_topics(tid) for the query, topics as the views name them."""
    partitions, topics = completeness(history)
    con.execute(f'CREATE TEMP TABLE complete_partitions (tid {topic_type}, "partition" BIGINT)')
    con.execute(f"CREATE TEMP TABLE complete_topics (tid {topic_type})")
    if partitions:
        con.executemany("INSERT INTO complete_partitions VALUES (?, ?)", [(topic_key(t), p) for t, p in partitions])
    if topics:
        con.executemany("INSERT INTO complete_topics VALUES (?)", [(topic_key(t),) for t in topics])


def measure_duckdb(run: Path, source: str = "parquet") -> dict[str, Any]:
    """The six counts of DUCKDB_COUNTS with DuckDB on DUCKDB_THREADS threads, from the Parquet caches (as the
    Spark checker left them) or from the JSON lines."""
    import duckdb  # the benchmark's alone; main() runs this only when it is installed

    history = run / "history"
    started = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {DUCKDB_THREADS}")
    session_s = time.perf_counter() - started
    started = time.perf_counter()
    if source == "parquet":
        views, topic_key = parquet_views(history)
        topic_type = "INTEGER"
    else:
        views = JSON_VIEWS.format(sends=history / "sends.jsonl", reads=history / "reads.jsonl")
        topic_key, topic_type = (lambda topic: topic), "VARCHAR"
    con.execute(views)
    completeness_tables(con, history, topic_key, topic_type)
    row = con.execute(DUCKDB_QUERY).fetchone()
    check_s = time.perf_counter() - started
    con.close()
    return {"convert_s": 0.0, "session_s": session_s, "check_s": check_s, "peak_rss": 0,
            "cpu_s": cpu_seconds(os.getpid()),
            "python_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "counts": dict(zip(DUCKDB_COUNTS, map(int, row))), "valid": None}


def in_child(engine: str, run: Path, cluster: Any = None, server: Any = None) -> dict[str, Any]:
    """Measure in a fresh process, so that its memory peak and start-up are its own; ``spark-tasks`` in local mode
    with the conversion as Spark tasks, ``standalone`` on ``cluster`` (whose CPU is added to the child's),
    ``server`` through the warm checker server ``server`` (its CPU added, its peak resident set the peak)."""
    from spark_analysis.session import CONVERT_ENV
    from spark_analysis.standalone import cluster_env, cpu_seconds

    env = dict(os.environ)
    if engine == "spark-tasks":
        env[CONVERT_ENV] = "executors"
    if engine == "standalone":
        env = cluster_env(run) | {"SPARK_MASTER": cluster.url,
                                  "PYSPARK_SUBMIT_ARGS": f"--conf spark.executor.memory={EXECUTOR_MEMORY} "
                                                         "pyspark-shell"}
        before = cpu_seconds(cluster.pgids)
    if engine.startswith("server"):
        env["SPARK_REMOTE"] = server.url
        before = cpu_seconds((server.pid,))
    measure = "spark" if engine in ("spark-tasks", "standalone") or engine.startswith("server") else engine
    proc = subprocess.run([sys.executable, __file__, "--measure", measure, str(run)], capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{engine} on {run} failed: {proc.stderr[-3000:]}")
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    if engine == "standalone":
        time.sleep(2)  # the executors end with the application: their CPU reaches the workers' children's times
        measured["cpu_s"] += cpu_seconds(cluster.pgids) - before
    if engine.startswith("server"):
        measured["cpu_s"] += cpu_seconds((server.pid,)) - before
        measured["peak_rss"] = vm_hwm_bytes(server.pid)
    return measured


def through_the_server(name: str, results: dict[str, dict[str, Any]]) -> str:
    """The checks through the warm server against the in-process one: medians, and the ratio to DuckDB's."""
    import statistics

    checks = [r for engine, r in results.items() if engine.startswith("server-")]
    check = statistics.median(r["check_s"] for r in checks)
    whole = statistics.median(r["convert_s"] + r["session_s"] + r["check_s"] for r in checks)
    spark = results["spark"]
    line = (f"# {name}: through the warm server, median of {len(checks)}: check {check:.1f} s, with conversion and "
            f"session {whole:.1f} s; in-process: check {spark['check_s']:.1f} s, with the session's start "
            f"{spark['convert_s'] + spark['session_s'] + spark['check_s']:.1f} s")
    if "duckdb" in results:
        line += f"; DuckDB {results['duckdb']['check_s']:.1f} s: {check / results['duckdb']['check_s']:.1f}x"
    return line


EXECUTOR_MEMORY = "3g"  # as the local-mode driver's, which holds the executors there
WORKER_MEMORY = "4g"


def conversions(name: str, results: dict[str, dict[str, Any]], workers: int) -> str:
    """The conversion's seconds: by the driver, by Spark tasks in local mode, by the standalone cluster's
    executors; each with the 1-minute load average before and after its engine's measurement."""
    parts = [f"{label} {results[engine]['convert_s']:.1f} s [load {results[engine]['load']}]"
             for engine, label in (("spark", "driver (local mode, 2 threads)"), ("spark-tasks", "tasks in local mode"),
                                   ("standalone", f"standalone executors ({workers} workers)")) if engine in results]
    return f"# {name} conversion: " + " | ".join(parts)


def side_by_side(name: str, results: dict[str, dict[str, Any]]) -> str:
    """Spark's phases beside DuckDB's two figures, the ratios issue #21 sets (check ÷ DuckDB from Parquet at most 2;
    convert + start + check ÷ DuckDB from the JSON lines), and whether the six counts agree."""
    spark = results["spark"]
    whole = spark["convert_s"] + spark["session_s"] + spark["check_s"]
    duck = {engine: results[engine]["session_s"] + results[engine]["check_s"] for engine in ("duckdb", "duckdb-json")}
    differ = [count + " " + " / ".join(f"{engine} {r['counts'][count]}" for engine, r in results.items())
              for count in DUCKDB_COUNTS if len({r["counts"][count] for r in results.values()}) > 1]
    return (f"# {name} side by side [{load()}]: spark convert {spark['convert_s']:.1f} s, start "
            f"{spark['session_s']:.1f} s, check {spark['check_s']:.1f} s (all {whole:.1f} s) | duckdb "
            f"({DUCKDB_THREADS} threads) from Parquet {duck['duckdb']:.1f} s, from the JSON lines "
            f"{duck['duckdb-json']:.1f} s | spark check ÷ duckdb Parquet {spark['check_s'] / duck['duckdb']:.1f}×, "
            f"spark all ÷ duckdb JSON lines {whole / duck['duckdb-json']:.1f}× | "
            + ("the six counts agree" if not differ else "counts DISAGREE: " + "; ".join(differ)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kchaos-bench"))
    parser.add_argument("--python-max-millions", type=float, default=2.0,
                        help="run the reference only up to this size (memory and time grow past usefulness)")
    parser.add_argument("--keep", action="store_true", help="keep the generated histories")
    parser.add_argument("--json", action="store_true", help="also time Spark parsing the JSON lines itself")
    parser.add_argument("--reuse", action="store_true", help="check histories kept by an earlier --keep as they are")
    kinds = parser.add_mutually_exclusive_group()
    kinds.add_argument("--transactional", action="store_true",
                       help="transactional histories (<N>M-txn) instead of plain ones")
    kinds.add_argument("--both", action="store_true", help="plain and transactional histories of each size")
    parser.add_argument("--standalone", type=int, metavar="WORKERS",
                        help="also convert and check as Spark tasks: in local mode, and on a standalone cluster of "
                             "this many workers that the benchmark starts")
    parser.add_argument("--server", type=int, metavar="CHECKS",
                        help="also check through a warm checker server (`kchaos spark up`, started for the benchmark "
                             "and warmed), this many times, each in a fresh process as a nightly's runs do")
    parser.add_argument("--measure", nargs=2, metavar=("ENGINE", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        engine, run = args.measure
        measure = {"spark": measure_spark, "spark-json": lambda r: measure_spark(r, "json"),
                   "duckdb": measure_duckdb, "duckdb-json": lambda r: measure_duckdb(r, "json"),
                   "python": measure_python}[engine]
        print(json.dumps(measure(Path(run))))
        return 0

    print(f"# load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    duckdb = importlib.util.find_spec("duckdb") is not None
    if not duckdb:
        print("# duckdb is not installed, so no DuckDB figures: .venv/bin/pip install duckdb (benchmarks/README.md)",
              flush=True)
    print(f"{'sends':>8} {'reads':>8} {'engine':>10} {'convert s':>9} {'start s':>8} {'check s':>8} {'total s':>8} "
          f"{'CPU s':>7} {'JVM peak':>9} {'Py peak':>8}  anomalies", flush=True)
    kinds = ([False, True] if args.both else [args.transactional])
    with ExitStack() as stack:
        cluster = None
        if args.standalone:
            from spark_analysis.standalone import standalone_cluster

            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the cluster is stopped on the way out
            cores = max(1, (os.cpu_count() or 2) // args.standalone)
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kchaos-bench-standalone-")))
            cluster = stack.enter_context(standalone_cluster(workdir, args.standalone, cores, WORKER_MEMORY))
            print(f"# standalone cluster {cluster.url}: {args.standalone} workers of {cores} cores, "
                  f"executors of {EXECUTOR_MEMORY}", flush=True)
        server = None
        if args.server:  # started by `kchaos spark up` in a child: this process stays a classic one (generate())
            from spark_analysis.server_state import SERVER_ENV, read_state
            from spark_analysis.standalone import free_port

            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kchaos-bench-server-")))
            env = {**os.environ, SERVER_ENV: str(folder)}
            kchaos = [sys.executable, "-m", "harness.cli", "spark"]
            stack.callback(subprocess.run, [*kchaos, "down"], env=env, capture_output=True)
            started = time.perf_counter()
            subprocess.run([*kchaos, "up", "--port", str(free_port())], env=env, check=True, capture_output=True)
            server = read_state(folder)
            assert server is not None and server.warm_s is not None
            print(f"# checker server {server.url}: up and warm in {time.perf_counter() - started:.1f} s "
                  f"(its warm-up check {server.warm_s:.1f} s)", flush=True)
        return run_sizes(args, kinds, duckdb, cluster, server)


def run_sizes(args: argparse.Namespace, kinds: list[bool], duckdb: bool, cluster: Any, server: Any = None) -> int:
    """Generate (or reuse) each history and measure every engine on it."""
    try:
        for millions, transactional in ((m, t) for m in args.millions for t in kinds):
            run = args.dir / f"{millions:g}M{'-txn' if transactional else ''}"
            started = time.perf_counter()
            if args.reuse and (run / "history" / "reads.jsonl").is_file():
                lines = {name: sum(1 for _ in (run / "history" / f"{name}.jsonl").open("rb"))
                         for name in ("sends", "reads")}
                verb = "reused"
            else:
                lines = (generate_transactional if transactional else generate)(run, millions)
                verb = "generated"
            size = sum(f.stat().st_size for f in (run / "history").glob("*.jsonl"))
            print(f"# {run.name}: {verb} {lines['sends']:,} sends and {lines['reads']:,} reads "
                  f"({size / 2 ** 30:.1f} GiB) in {time.perf_counter() - started:.0f} s", flush=True)
            # DuckDB right after Spark: it reads the caches Spark's conversion wrote (spark-json deletes them)
            engines = ["spark"] + (["duckdb", "duckdb-json"] if duckdb and not transactional else []) + (
                ["spark-json"] if args.json else []) + (["python"] if millions <= args.python_max_millions else []) + (
                ["spark-tasks", "standalone"] if cluster is not None else []) + (
                [f"server-{i + 1}" for i in range(args.server)] if server is not None else [])
            results = {}
            for engine in engines:
                before = os.getloadavg()[0]
                m = in_child(engine, run, cluster, server)
                results[engine] = m | {"engine": engine, "load": f"{before:.1f} → {os.getloadavg()[0]:.1f}"}
                found = {k: v for k, v in m["counts"].items() if v and k not in (
                    "sent", "acked", "failed", "reads_live", "reads_final")}
                whole = m["convert_s"] + m["session_s"] + m["check_s"]
                print(f"{lines['sends'] / 1e6:>7.1f}M {lines['reads'] / 1e6:>7.1f}M {engine:>10} "
                      f"{m['convert_s']:>9.1f} {m['session_s']:>8.1f} {m['check_s']:>8.1f} {whole:>8.1f} "
                      f"{m['cpu_s']:>7.0f} {m['peak_rss'] / 2 ** 30:>8.2f}G "
                      f"{m['python_peak_rss'] / 2 ** 30:>7.2f}G  {found}", flush=True)
                print(f"# load average {os.getloadavg()[0]:.1f}", flush=True)
            if "python" in results:
                same = all(r["counts"] == results["python"]["counts"] for r in results.values()
                           if not r["engine"].startswith("duckdb"))
                print(f"# {run.name}: spark and python counts {'agree' if same else 'DISAGREE'}", flush=True)
            if "duckdb" in results:
                print(side_by_side(run.name, results), flush=True)
            if server is not None:
                print(through_the_server(run.name, results), flush=True)
            if cluster is not None:
                print(conversions(run.name, results, args.standalone), flush=True)
            if not args.keep:
                shutil.rmtree(run)
            if millions > args.python_max_millions and transactional == kinds[-1] and millions == min(
                    m for m in args.millions if m > args.python_max_millions):
                print(f"# python engine skipped above {args.python_max_millions:g}M sends: it keeps every line as "
                      "Python tuples in one process (see --python-max-millions)", flush=True)
    finally:
        if not args.keep and args.dir.exists() and not any(args.dir.iterdir()):
            args.dir.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
