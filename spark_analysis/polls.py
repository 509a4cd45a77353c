"""Each consumer's own sequence of reads and each producer's of acknowledgements, on Spark: checkers/polls.py's
definitions, by windows over the encoded rows.

The poll anomalies take two windows, and the second only when needed:

1. the live reads of each (consumer, topic, partition) in file order (``_key``): each read with the one before
   it; a pair that steps back is a finding as it stands, a pair that jumps ahead (more than one offset) is a
   candidate. These pairs are few, and cached.
2. only when some pair jumps ahead: whether a visible record lies between its offsets. The final reads of the
   partition and the candidates, sorted by offset downwards in one window, give each candidate the smallest
   visible offset above where it was (a running minimum); the candidate skipped a record when that offset is
   below where it read next.

``send_nonmonotonic`` is one window over the acknowledgement lines in file order (none runs when the
conversion proved the acks in order: ack_order.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkers.polls import POLL_ANOMALIES, POLL_ANOMALY, PollFinding
from checkers.reference import MAX_EXAMPLES, poll_example

from spark_analysis.encode import OK, Names
from spark_analysis.examples import fetch_lines
from spark_analysis.reader import Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# SQL: a broken pair's anomaly from ``back`` (it stepped back) and ``same`` (one assignment): POLL_ANOMALY's
ANOMALY_SQL = "CASE " + " ".join(f"WHEN {'NOT ' if skipped else ''}back AND {'' if same else 'NOT '}same "
                                 f"THEN '{name}'" for (skipped, same), name in POLL_ANOMALY.items()) + " END"
PAIR_COLUMNS = ("cid", "tid", "`partition`", "previous_offset", "`offset`", "previous_key", "_key", "back", "same")


def broken_pairs(reads: "DataFrame") -> "DataFrame":
    """Every live read with the read before it of its consumer and partition, where it did not read the next
    offset: PAIR_COLUMNS, and ``committed`` (its isolation)."""
    from pyspark.sql import Window, functions as F

    before = Window.partitionBy("cid", "tid", "partition").orderBy("_key")
    return (reads.filter("NOT final")
            .select("cid", "tid", "partition", "offset", "_key", "assignment", "committed",
                    F.lag("offset").over(before).alias("previous_offset"),
                    F.lag("_key").over(before).alias("previous_key"),
                    F.lag("assignment").over(before).alias("previous_assignment"))
            .filter("previous_key IS NOT NULL AND `offset` <> previous_offset + 1")
            .selectExpr(*PAIR_COLUMNS[:-2], "`offset` <= previous_offset AS back",
                        "coalesce(assignment = previous_assignment, false) AS same", "committed"))


def skipped_pairs(reads: "DataFrame", ahead: "DataFrame", committed_read_back: bool) -> "DataFrame":
    """The pairs of ``ahead`` (jumps ahead) with a visible record between their offsets: what the final read of
    the later read's isolation holds there (the read_committed one only when the run had one)."""
    from pyspark.sql import Window, functions as F

    kind = "committed" if committed_read_back else "false"
    finals = reads.filter("final").selectExpr(
        "tid", "`partition`", "committed AS kind", "`offset` AS at", "0 AS is_pair", "`offset` AS visible",
        *[f"CAST(NULL AS {t}) AS {c}" for c, t in (("cid", "INT"), ("previous_offset", "BIGINT"),
                                                    ("offset_next", "BIGINT"), ("previous_key", "BIGINT"),
                                                    ("_key", "BIGINT"), ("same", "BOOLEAN"))])
    pairs = ahead.selectExpr(
        "tid", "`partition`", f"{kind} AS kind", "previous_offset AS at", "1 AS is_pair",
        "CAST(NULL AS BIGINT) AS visible", "cid", "previous_offset", "`offset` AS offset_next", "previous_key",
        "_key", "same")
    # downwards by offset, a pair before the final reads at its own offset: the running minimum is the smallest
    # visible offset above the pair's
    above = (Window.partitionBy("tid", "partition", "kind").orderBy(F.desc("at"), F.desc("is_pair"))
             .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (finals.unionByName(pairs).withColumn("next_visible", F.min("visible").over(above))
            .filter("is_pair = 1 AND next_visible < offset_next")
            .selectExpr("cid", "tid", "`partition`", "previous_offset", "offset_next AS `offset`", "previous_key",
                        "_key", "false AS back", "same"))


def poll_findings(spark: "SparkSession", reads: "DataFrame", committed_read_back: bool, reads_file: Source | None,
                  names: Names) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """The poll anomalies' counts and examples (the reference's ``poll_findings`` and ``poll_examples``)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window, functions as F

    pairs = broken_pairs(reads).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        found = pairs.filter("back").select(*PAIR_COLUMNS)
        if pairs.filter("NOT back").limit(1).count():
            found = found.unionByName(skipped_pairs(reads, pairs.filter("NOT back"), committed_read_back))
        first = Window.partitionBy("anomaly").orderBy("_key")
        rows = (found.withColumn("anomaly", F.expr(ANOMALY_SQL))
                .withColumn("n", F.count(F.lit(1)).over(Window.partitionBy("anomaly")))
                .withColumn("_rank", F.row_number().over(first)).filter(f"_rank <= {MAX_EXAMPLES}").collect())
    finally:
        pairs.unpersist()
    counts = {a: 0 for a in POLL_ANOMALIES}
    chosen: dict[str, list[PollFinding]] = {a: [] for a in POLL_ANOMALIES}
    for r in sorted(rows, key=lambda r: r["_key"]):
        counts[r["anomaly"]] = r["n"]
        chosen[r["anomaly"]].append(PollFinding(r["anomaly"], names.consumers[r["cid"]], names.topics[r["tid"]],
                                                r["partition"], r["previous_offset"], r["offset"],
                                                r["previous_key"], r["_key"]))
    keys = {k for found_ in chosen.values() for f in found_ for k in (f.previous_line, f.line)}
    [lines] = fetch_lines(spark, [reads_file], [keys]) if reads_file is not None and keys else [{}]
    return counts, {a: [poll_example(f, [lines[k] for k in (f.previous_line, f.line) if k in lines])
                        for f in found_] for a, found_ in chosen.items()}


def nonmonotonic_sends(acks: "DataFrame", sends: "DataFrame") -> "DataFrame":
    """pid, seq and send_key (its winning line: the last ok one) of every message acknowledged below an offset its
    producer had been acknowledged in that partition on an earlier line (``acks``: judge.acked_lines' rows of
    every send line)."""
    from pyspark.sql import Window, functions as F

    earlier = (Window.partitionBy("pid", "tid", "partition").orderBy("send_key")
               .rowsBetween(Window.unboundedPreceding, -1))
    flagged = acks.withColumn("_highest", F.max("offset").over(earlier)).filter("`offset` < _highest")
    return (sends.filter(f"status = {OK}").join(flagged.select("pid", "seq").distinct(), ["pid", "seq"], "left_semi")
            .groupBy("pid", "seq").agg(F.max("_key").alias("send_key")))
