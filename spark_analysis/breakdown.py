"""results.json's ``breakdown`` on Spark: the counts per partition and per fault window (checkers/breakdown.py).

Lost, duplicated and divergent per partition are the ranges' counts summed,
and per fault the ranges' entries charged by their time (anomaly_ranges.py);
what else a partition row counts comes from the files' tallies, which the
conversion counted (tallies.py), or else from the send and read lines grouped
by partition (one job; the winning ok lines are found by message first only
when some message was sent twice), and from the cached findings'
unverifiable acks by partition (only when there are some).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from checkers.breakdown import breakdown_document, fault_rows, partition_rows, ranged_counts
from checkers.series import second_sql

from spark_analysis.encode import OK, Names
from spark_analysis.judge import POSITION_KEY
from spark_analysis.tallies import Tallies, partition_tallies as footer_tallies

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Part = tuple[str, "int | None"]


def partition_tallies(sends: "DataFrame", reads: "DataFrame", repeats: bool
                      ) -> tuple[dict[tuple[int, Any], Counter[str]], list[tuple[int, Any, int, int]]]:
    """(tid, partition) -> acked, reads_live, reads_final, for every partition a send or read line names; and
    the acked per second, (tid, partition, second, n) (results.json's ``series``), from the same job.

    ``acked`` counts the winning ok sends: without repeated send lines every
    ok line; with them, each message's last ok line (the reference's
    winning_sends), at its ``complete_ns``.
    """
    from pyspark.sql import functions as F

    second = f"CASE WHEN status = {OK} AND complete_ns IS NOT NULL THEN {second_sql('complete_ns')} END AS second"
    acked = "0L AS acked" if repeats else f"CAST(status = {OK} AS BIGINT) AS acked"
    named = sends.selectExpr("tid", "`partition`", acked, "0L AS reads_live", "0L AS reads_final",
                             "CAST(NULL AS BIGINT) AS second" if repeats else second)
    if repeats:
        named = named.unionByName(
            sends.filter(f"status = {OK}").groupBy("pid", "seq")
            .agg(F.expr("max_by(tid, _key) AS tid"), F.expr("max_by(`partition`, _key) AS `partition`"),
                 F.expr("max_by(complete_ns, _key) AS complete_ns"))
            .selectExpr("tid", "`partition`", "1L AS acked", "0L AS reads_live", "0L AS reads_final",
                        f"{second_sql('complete_ns')} AS second"))
    read = reads.selectExpr("tid", "`partition`", "0L AS acked", "CAST(NOT final AS BIGINT) AS reads_live",
                            "CAST(final AS BIGINT) AS reads_final", "CAST(NULL AS BIGINT) AS second")
    grouped = named.unionByName(read).groupBy("tid", "partition", "second").agg(
        *[F.sum(c).alias(c) for c in ("acked", "reads_live", "reads_final")])
    totals: dict[tuple[int, Any], Counter[str]] = {}
    per_second = []
    for r in grouped.collect():
        totals.setdefault((r["tid"], r["partition"]), Counter()).update(
            {c: int(r[c]) for c in ("acked", "reads_live", "reads_final")})
        if r["second"] is not None and r["acked"]:
            per_second.append((r["tid"], r["partition"], int(r["second"]), int(r["acked"])))
    return totals, per_second


def spark_breakdown(sends: "DataFrame", reads: "DataFrame", repeats: bool, messages: "DataFrame",
                    positions: "DataFrame", names: Names, counts: dict[str, int], event_parts: set[Part],
                    ranges: list[dict[str, Any]], windows: list[dict[str, Any]],
                    charged: list[tuple[str, int | None, int]], tallies: "tuple[Tallies, Tallies] | None" = None
                    ) -> tuple[dict[str, Any], list[tuple[str, str, Any, int, int]]]:
    """The ``breakdown`` block, and the acked per second as ``series_document`` rows: ``sends`` and ``reads``
    the encoded lines, ``messages`` and ``positions`` the cached findings, ``event_parts`` the partitions of the
    final-read events, ``ranges`` and ``charged`` what anomaly_ranges found, ``tallies`` the files' (send,
    read) when their conversion counted them."""
    topics = names.topics
    if tallies is not None and not repeats:
        totals, per_second = footer_tallies(*tallies, names.topic_ids())
    else:
        totals, per_second = partition_tallies(sends, reads, repeats)
    tallies = {(topics[t], p): c for (t, p), c in totals.items()}
    acked = [("acked", topics[t], p, second, n) for t, p, second, n in per_second]
    unverifiable: dict[Part, Counter[str]] = {}
    if counts["lost_unverifiable"]:
        for r in messages.filter("lost_unverifiable").groupBy("tid", "partition").count().collect():
            unverifiable[(topics[r["tid"]], r["partition"])] = Counter(lost_unverifiable=int(r["count"]))
    lost_divergent = 0
    if counts["lost"] and counts["divergent"]:
        lost_divergent = (messages.filter("lost AND `partition` IS NOT NULL AND `offset` IS NOT NULL")
                          .join(positions.filter("divergent").select(*POSITION_KEY), list(POSITION_KEY), "left_semi")
                          .count())
    rows = partition_rows(set(tallies) | event_parts, tallies, unverifiable, ranged_counts(ranges))
    return breakdown_document(rows, fault_rows(windows, charged), lost_divergent), acked
