"""``anomaly_ranges`` on Spark: the time islands of the lost, duplicated and divergent messages (checkers/anomalies.py).

The entries come from what the judge already found and cached (the message
table's ``lost`` and ``duplicated`` rows, the position table's ``divergent``
ones), never from a second reading of the definitions: a duplicated message's
final reads are its reads, and a divergent position's acks are the acks the
examples see. Each entry gets its time from its send line's ``complete_ns``
(one join on the line key, one job).

Up to ENTRIES_IN_DRIVER entries (any run but one that lost most of a big
history) come back to Python, where the reference's own functions group them
into ranges, charge them to faults and count them per second: one job, and
the rules written once. More stay in Spark, checkpointed so that the
history is read once: a window per (anomaly, topic, partition) over time
marks where a new range starts (``lag``) and numbers the ranges (a running
sum of those marks), and only the ranges, charges and seconds come back. The
entry rows pass through the JVM driver only as a broadcast, when there are
at most BROADCAST_KEYS of them (judge.broadcast_if_few), as the checker's
other keys do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkers.anomalies import RANGE_ANOMALIES, RANGE_GAP_NS, RangeEntry, ordered_ranges, range_record
from checkers.anomalies import anomaly_ranges as grouped_ranges
from checkers.breakdown import charged_entries
from checkers.series import entries_per_second, second_sql

from spark_analysis.encode import Encoded, literal_table
from spark_analysis.judge import POSITION_KEY, broadcast_if_few

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

LOST, DUPLICATED, DIVERGENT = (RANGE_ANOMALIES.index(a) for a in ("lost", "duplicated", "divergent"))
NO_SEND = -1  # the send key of an entry no send line places in time (line keys are never negative)
ENTRIES_IN_DRIVER = 100_000  # at most this many entries are grouped by the reference's code, in Python


def anomaly_ranges(messages: "DataFrame", positions: "DataFrame", acks: "DataFrame", enc: Encoded,
                   counts: dict[str, int], windows: list[dict[str, Any]] | None = None
                   ) -> tuple[list[dict[str, Any]], list[tuple[str, int | None, int]],
                              list[tuple[str, str, Any, int, int]]]:
    """results.json's ``anomaly_ranges``, the entries charged to the fault ``windows`` (checkers/breakdown.py:
    (anomaly, 0-based fault index or None, how many)) and the entries per second (checkers/series.py's rows);
    none when nothing is lost, duplicated or divergent.

    ``messages`` and ``positions`` are the judge's cached findings, ``acks``
    every winning ack (``judge.acked``), ``counts`` the results' counts: they
    say which entries there are, and whether they are few enough to broadcast
    or to group in Python.
    """
    from pyspark.sql import functions as F

    rows = entry_rows(messages, positions, acks, enc.reads, counts)
    if rows is None:
        return [], [], []
    topics = enc.names.topics
    few = sum(counts[a] for a in RANGE_ANOMALIES)  # about one entry each
    table = entries(rows, enc.sends, few)
    if few <= ENTRIES_IN_DRIVER:
        found = [RangeEntry(RANGE_ANOMALIES[r["anomaly"]], topics[r["tid"]], r["partition"], r["ns"],
                            r["min_offset"], r["max_offset"]) for r in table.collect()]
        return grouped_ranges(found), charged_entries(found, windows or []), entries_per_second(found)
    table = table.localCheckpoint()  # computed once: the three aggregates below would each read the history
    parts = (islands(table), charges(table, windows or []), seconds(table))
    union = parts[0].withColumn("_part", F.lit(0))
    for i, part in enumerate(parts[1:], 1):
        union = union.unionByName(part.withColumn("_part", F.lit(i)), allowMissingColumns=True)
    collected: list[list[Any]] = [[], [], []]
    for r in union.collect():
        collected[r["_part"]].append(r)
    return ranges_of(collected[0], topics), charged_of(collected[1]), per_second_of(collected[2], topics)


def seconds(table: "DataFrame") -> "DataFrame":
    """The ``entries`` with a time, counted per (anomaly, partition, second)."""
    return (table.filter("ns IS NOT NULL").selectExpr("anomaly", "tid", "`partition`", f"{second_sql('ns')} AS s")
            .groupBy("anomaly", "tid", "partition", "s").count())


def per_second_of(rows: list[Any], topics: list[str]) -> list[tuple[str, str, Any, int, int]]:
    """``seconds``' rows as checkers/series.py's rows."""
    return [(RANGE_ANOMALIES[r["anomaly"]], topics[r["tid"]], r["partition"], int(r["s"]), int(r["count"]))
            for r in rows]


def fault_sql(windows: list[dict[str, Any]], t: str) -> str:
    """SQL: the 0-based index of the fault window a time ``t`` is charged to (checkers.breakdown.FaultClock.after:
    the last to start of those active at t, else the first to start after it; null: none, or t null).

    The windows are in start order; an active window among those started by t has the greatest index, a later
    one the least.
    """
    if not windows:
        return "CAST(NULL AS INT)"
    active, later = [], []
    for i, w in enumerate(windows):
        start, end = int(w["start_ns"] or 0), w["end_ns"]
        until = "" if end is None else f" AND {t} <= {int(end)}L"
        active.append(f"CASE WHEN {t} >= {start}L{until} THEN {i} END")
        later.append(f"CASE WHEN {t} < {start}L THEN {i} END")
    return (f"coalesce(greatest({', '.join(active)}, CAST(NULL AS INT)), "
            f"least({', '.join(later)}, CAST(NULL AS INT)))")


def charges(table: "DataFrame", windows: list[dict[str, Any]]) -> "DataFrame":
    """The ``entries`` counted per (anomaly, fault window charged by their time: ``fault_sql``)."""
    return table.selectExpr("anomaly", f"{fault_sql(windows, 'ns')} AS fault").groupBy("anomaly", "fault").count()


def charged_of(rows: list[Any]) -> list[tuple[str, int | None, int]]:
    """``charges``' rows as (anomaly, fault index or None, entries)."""
    return [(RANGE_ANOMALIES[r["anomaly"]], r["fault"], int(r["count"])) for r in rows]


def collected_ranges(table: "DataFrame", topics: list[str]) -> list[dict[str, Any]]:
    """The ranges of ``entries`` (``islands``), brought to the driver and named as results.json lists them."""
    return ranges_of(islands(table).collect(), topics)


def ranges_of(rows: list[Any], topics: list[str]) -> list[dict[str, Any]]:
    """``islands``' rows as results.json lists the ranges."""
    return ordered_ranges(range_record(RANGE_ANOMALIES[r["anomaly"]], topics[r["tid"]], r["partition"], r["count"],
                                       r["first_ns"], r["last_ns"], r["min_offset"], r["max_offset"]) for r in rows)


def entry_rows(messages: "DataFrame", positions: "DataFrame", acks: "DataFrame", reads: "DataFrame",
               counts: dict[str, int]) -> "DataFrame | None":
    """One row per lost message, per final read of a duplicated message, per divergent position and per ack
    there; None when there is none.

    Columns: ``anomaly`` (its index in RANGE_ANOMALIES), tid, partition, what
    the entry is of (pid and seq: a message; ``at``: a divergent position's
    offset), an offset, and ``send_key``, the send line whose complete_ns
    places it in time (null: none).
    """
    parts = []
    if counts["lost"]:
        parts.append(messages.filter("lost").selectExpr(f"{LOST} AS anomaly", "tid", "`partition`", "pid", "seq",
                                                        "CAST(NULL AS BIGINT) AS at", "`offset`", "send_key"))
    if counts["duplicated"]:
        keys = broadcast_if_few(messages.filter("duplicated").select("pid", "seq", "send_key"), counts["duplicated"])
        parts.append(reads.filter("final AND pid IS NOT NULL").join(keys, ["pid", "seq"]).selectExpr(
            f"{DUPLICATED} AS anomaly", "tid", "`partition`", "pid", "seq", "CAST(NULL AS BIGINT) AS at",
            "`offset`", "send_key"))
    if counts["divergent"]:
        divergent = positions.filter("divergent").select(*POSITION_KEY)
        at_position = [f"{DIVERGENT} AS anomaly", "tid", "`partition`", "CAST(NULL AS INT) AS pid",
                       "CAST(NULL AS BIGINT) AS seq", "`offset` AS at", "`offset`"]
        parts.append(divergent.selectExpr(*at_position, "CAST(NULL AS BIGINT) AS send_key"))
        parts.append(acks.join(broadcast_if_few(divergent, counts["divergent"]), list(POSITION_KEY))
                     .selectExpr(*at_position, "send_key"))
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


def entries(rows: "DataFrame", sends: "DataFrame", few: int) -> "DataFrame":
    """The entries of ``entry_rows``: anomaly, tid, partition, ns, min_offset, max_offset.

    ``ns`` is the send line's complete_ns (``sends``: the encoded send lines),
    for a divergent position the smallest of its acks'. The rows (``few``:
    about as many as there are anomalies) are broadcast to the send lines: an
    inner join, so that the rows are the side broadcast (an outer join would
    have to broadcast the send lines); a row without a send line meets the
    one extra line NO_SEND, which has no time. The rows are shuffled once, by
    (anomaly, tid, partition): the grouping into entries, the window and the
    ranges (``islands``) all keep that partitioning.
    """
    from pyspark.sql import functions as F

    times = sends.selectExpr("_key AS _send", "complete_ns").unionByName(
        literal_table(rows.sparkSession, [("_send", "bigint"), ("complete_ns", "bigint")], [(NO_SEND, None)]))
    keyed = rows.withColumn("_send", F.expr(f"coalesce(send_key, {NO_SEND}L)"))
    timed = broadcast_if_few(keyed, few).join(times, "_send").repartition("anomaly", "tid", "partition")
    return timed.groupBy("anomaly", "tid", "partition", "pid", "seq", "at").agg(
        F.min("complete_ns").alias("ns"), F.min("offset").alias("min_offset"), F.max("offset").alias("max_offset"))


def islands(table: "DataFrame") -> "DataFrame":
    """The ranges of ``entries``: per (anomaly, tid, partition), entries in time order, a new range where one is
    more than RANGE_GAP_NS after the one before (``lag``), numbered by a running sum of those starts; the
    entries without a time are one range of their own (island -1).

    A difference too large for a long (histories may hold any 64-bit time) is
    a gap too: ``try_subtract`` gives null there.
    """
    from pyspark.sql import Window, functions as F

    in_time = Window.partitionBy("anomaly", "tid", "partition").orderBy("ns")
    so_far = in_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    starts = table.withColumn("_prev", F.lag("ns").over(in_time)).withColumn("_start", F.expr(
        f"CASE WHEN ns IS NULL THEN 0 WHEN _prev IS NULL OR coalesce(try_subtract(ns, _prev) > {RANGE_GAP_NS}L, true)"
        " THEN 1 ELSE 0 END"))
    numbered = starts.withColumn("_island", F.when(F.col("ns").isNull(), F.lit(-1)).otherwise(
        F.sum("_start").over(so_far)))
    return numbered.groupBy("anomaly", "tid", "partition", "_island").agg(
        F.count(F.lit(1)).alias("count"), F.min("ns").alias("first_ns"), F.max("ns").alias("last_ns"),
        F.min("min_offset").alias("min_offset"), F.max("max_offset").alias("max_offset"))
