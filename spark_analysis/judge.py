"""The anomalies of DESIGN.md as DataFrame transformations: two grouped shuffles and one window.

- By message: sends and reads (tagged) are unioned and grouped by
  (producer, seq) once. Each group holds the message's winning send line
  (the last in the file), its distinct final-read positions, its live reads
  and the consumer groups that read it. From that one row follow lost,
  lost_after_read, lost_unverifiable, duplicated, unexpected (read but never
  sent), failed_but_present, unknown (found or not), consumer_skipped and
  consumer_redelivered.
- By position: reads and the winning acknowledgements are unioned and grouped
  by (topic, partition, offset) once: divergent (two different messages seen
  there, or an ack contradicted by a read) and the positions holding a value
  kchaos did not write (unexpected, counted once per position).
- By producer and partition: a window over the acknowledged messages ordered
  by seq finds acks at a lower offset than an earlier seq (reordered).

The few facts taken from events (which partitions had a complete final
read, each group's committed offsets) are small, so they enter the plan as
literal maps, not joins. Only aggregates come back to the driver.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Part = tuple[str, int]

READ_COLUMNS = "_key bigint, grp string, phase string, topic string, `partition` bigint, `offset` bigint, " \
               "producer string, seq bigint"

# The tables are grouped on nearly unique keys, where a pre-shuffle partial aggregation only costs time.
BYPASS_PARTIAL = "spark.sql.execution.bypassPartialAggregation"


@contextmanager
def sql_conf(spark: "SparkSession", key: str, value: str) -> Iterator[None]:
    """Set a runtime SQL option while a plan is made, then put the old value back (tests share a session)."""
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


def empty_reads(spark: "SparkSession") -> "DataFrame":
    return spark.createDataFrame([], READ_COLUMNS)


def _lit_map(entries: dict[Any, "Column"], key: Any, empty_type: str) -> "Column":
    """A literal map column; Spark folds it to one constant."""
    from pyspark.sql import functions as F

    if not entries:
        return F.expr(f"CAST(NULL AS {empty_type})")
    args: list[Column] = []
    for k, v in entries.items():
        args += [key(k), v]
    return F.create_map(*args)


def _part_key(part: Part) -> "Column":
    from pyspark.sql import functions as F

    return F.struct(F.lit(part[0]).cast("string").alias("t"), F.lit(part[1]).cast("bigint").alias("p"))


def complete_maps(complete: dict[Part, bool]) -> tuple["Column", "Column"]:
    """(topic, partition) -> final read complete; topic -> every final-read partition of it complete."""
    from pyspark.sql import functions as F

    by_topic: dict[str, bool] = {}
    for (topic, _), done in complete.items():
        by_topic[topic] = by_topic.get(topic, True) and done
    parts = _lit_map({p: F.lit(done) for p, done in complete.items()}, _part_key,
                     "map<struct<t:string,p:bigint>,boolean>")
    topics = _lit_map({t: F.lit(done) for t, done in by_topic.items()}, lambda t: F.lit(t).cast("string"),
                      "map<string,boolean>")
    return parts, topics


def committed_map(committed: dict[Part, dict[str, int]]) -> "Column":
    """(topic, partition) -> [(group, committed offset)]."""
    from pyspark.sql import functions as F

    entries = {part: F.array(*[F.struct(F.lit(g).cast("string").alias("g"), F.lit(o).cast("bigint").alias("o"))
                               for g, o in sorted(groups.items())])
               for part, groups in committed.items() if groups}
    return _lit_map(entries, _part_key, "map<struct<t:string,p:bigint>,array<struct<g:string,o:bigint>>>")


def message_table(sends: "DataFrame", reads: "DataFrame", complete: dict[Part, bool],
                  committed: dict[Part, dict[str, int]]) -> "DataFrame":
    """One row per message seen anywhere, with every per-message verdict as a column.

    Columns: producer, seq, n_sends, send_key, status, topic, partition,
    offset (of the winning send line), n_live, n_live_ungrouped, skipped and
    redelivered (consumer groups), and the flags lost, lost_after_read,
    lost_unverifiable, duplicated, unexpected, failed_but_present, unknown,
    unknown_found.
    """
    from pyspark.sql import functions as F

    tagged = sends.selectExpr(
        "producer", "seq", "true AS is_send", "_key", "topic", "`partition`", "`offset`", "status",
        "CAST(NULL AS STRING) AS phase", "CAST(NULL AS STRING) AS grp",
    ).unionByName(reads.filter("producer IS NOT NULL").selectExpr(
        "producer", "seq", "false AS is_send", "_key", "topic", "`partition`", "`offset`",
        "CAST(NULL AS STRING) AS status", "phase", "grp",
    ))
    grouped = tagged.groupBy("producer", "seq").agg(
        F.expr("count_if(is_send)").alias("n_sends"),
        F.expr("max(struct(_key, topic, `partition`, `offset`, status)) FILTER (WHERE is_send)").alias("last"),
        F.expr("collect_set(struct(topic, `partition`, `offset`)) FILTER (WHERE NOT is_send AND phase = 'final')")
        .alias("finals"),
        F.expr("count_if(NOT is_send AND phase = 'live')").alias("n_live"),
        F.expr("count_if(NOT is_send AND phase = 'live' AND grp IS NULL)").alias("n_live_ungrouped"),
        F.expr("collect_list(grp) FILTER (WHERE NOT is_send AND phase = 'live')").alias("live_groups"),
    )
    part_complete, topic_complete = complete_maps(complete)
    commits = committed_map(committed)
    table = grouped.select(
        "producer", "seq", "n_sends", "finals", "n_live", "n_live_ungrouped", "live_groups",
        F.col("last._key").alias("send_key"), F.col("last.status").alias("status"),
        F.col("last.topic").alias("topic"), F.col("last.partition").alias("partition"),
        F.col("last.offset").alias("offset"),
        part_complete.alias("_complete"), topic_complete.alias("_topic_complete"), commits.alias("_committed"),
    )
    table = table.selectExpr(
        "*",
        """CASE WHEN `partition` IS NOT NULL
                THEN exists(finals, f -> f.topic = topic AND f.`partition` = `partition`)
                ELSE exists(finals, f -> f.topic = topic) END AS present""",
        """coalesce(CASE WHEN `partition` IS NOT NULL
                         THEN try_element_at(_complete, named_struct('t', topic, 'p', `partition`))
                         ELSE try_element_at(_topic_complete, topic) END, false) AS verifiable""",
        """array_distinct(filter(
               flatten(transform(finals, f -> transform(
                   filter(coalesce(try_element_at(_committed, named_struct('t', f.topic, 'p', f.`partition`)),
                                   CAST(array() AS array<struct<g:string,o:bigint>>)),
                          c -> f.`offset` < c.o),
                   c -> c.g))),
               g -> NOT array_contains(live_groups, g))) AS skipped""",
        "array_distinct(filter(live_groups, g -> size(filter(live_groups, h -> h = g)) > 1)) AS redelivered",
    ).drop("_complete", "_topic_complete", "_committed", "live_groups")
    return table.selectExpr(
        "*",
        "coalesce(status = 'ok' AND NOT present AND verifiable, false) AS lost",
        "coalesce(status = 'ok' AND NOT present AND verifiable AND n_live > 0, false) AS lost_after_read",
        "coalesce(status = 'ok' AND NOT present AND NOT verifiable, false) AS lost_unverifiable",
        "size(finals) > 1 AS duplicated",
        "n_sends = 0 AS unexpected",
        "coalesce(status = 'fail' AND size(finals) > 0, false) AS failed_but_present",
        "coalesce(status = 'info', false) AS unknown",
        "coalesce(status = 'info' AND size(finals) > 0, false) AS unknown_found",
    ).drop("finals", "present", "verifiable")  # cached next: keep it narrow (arrays are slow to cache)


def acked(messages: "DataFrame") -> "DataFrame":
    """The winning sends that were acknowledged at a known position: producer, seq, topic, partition, offset, send_key."""
    return (messages.filter("status = 'ok' AND `partition` IS NOT NULL AND `offset` IS NOT NULL")
            .select("producer", "seq", "topic", "partition", "offset", "send_key"))


def position_table(reads: "DataFrame", acks: "DataFrame") -> "DataFrame":
    """One row per position read or acknowledged: read counts, and whether it is divergent or holds a foreign value.

    Two reads disagree when they saw different messages (a value kchaos did
    not write counts as one more message); an ack is contradicted when the
    position was read and what was read there is not the ack's message.
    """
    from pyspark.sql import functions as F

    tagged = reads.selectExpr(
        "topic", "`partition`", "`offset`", "producer", "seq", "false AS is_ack", "phase",
    ).unionByName(acks.selectExpr(
        "topic", "`partition`", "`offset`", "producer", "seq", "true AS is_ack", "CAST(NULL AS STRING) AS phase",
    ))
    grouped = tagged.groupBy("topic", "partition", "offset").agg(
        F.expr("count_if(NOT is_ack AND phase = 'live')").alias("n_live"),
        F.expr("count_if(NOT is_ack AND phase = 'final')").alias("n_final"),
        F.expr("count_if(NOT is_ack AND producer IS NULL) > 0").alias("foreign"),
        F.expr("min(struct(producer, seq)) FILTER (WHERE NOT is_ack AND producer IS NOT NULL)").alias("rmin"),
        F.expr("max(struct(producer, seq)) FILTER (WHERE NOT is_ack AND producer IS NOT NULL)").alias("rmax"),
        F.expr("min(struct(producer, seq)) FILTER (WHERE is_ack)").alias("amin"),
        F.expr("max(struct(producer, seq)) FILTER (WHERE is_ack)").alias("amax"),
    )
    return grouped.selectExpr(
        "topic", "`partition`", "`offset`", "n_live", "n_final", "foreign",
        """coalesce(n_live + n_final > 0 AND (
               (foreign AND rmin IS NOT NULL) OR rmin <> rmax
               OR (amin IS NOT NULL AND (foreign OR amin <> rmin OR amax <> rmin))), false) AS divergent""",
    )


def reordered_table(acks: "DataFrame") -> "DataFrame":
    """Acknowledged messages at a lower offset than some lower seq of their producer in their partition."""
    from pyspark.sql import Window, functions as F

    earlier = (Window.partitionBy("producer", "topic", "partition").orderBy("seq")
               .rowsBetween(Window.unboundedPreceding, -1))
    return (acks.withColumn("_highest", F.max("offset").over(earlier))
            .filter("`offset` < _highest").drop("_highest"))


@dataclass
class MessageCounts:
    sent: int
    distinct_sent: int
    acked: int
    failed: int
    indeterminate: int
    lost: int
    lost_after_read: int
    lost_unverifiable: int
    duplicated: int
    unexpected: int
    failed_but_present: int
    unknown: int
    unknown_found: int
    consumer_skipped: int
    consumer_redelivered: int
    no_partition: int
    ungrouped_live_reads: int
    send_partitions: set[Part]


def _message_tally(messages: "DataFrame") -> "DataFrame":
    from pyspark.sql import functions as F

    return messages.agg(
        F.expr("coalesce(sum(n_sends), 0)").alias("sent"),
        F.expr("count_if(n_sends > 0)").alias("distinct_sent"),
        F.expr("count_if(status = 'ok')").alias("acked"),
        F.expr("count_if(status = 'fail')").alias("failed"),
        F.expr("count_if(status = 'info')").alias("indeterminate"),
        *[F.expr(f"count_if({flag})").alias(flag) for flag in (
            "lost", "lost_after_read", "lost_unverifiable", "duplicated", "unexpected", "failed_but_present",
            "unknown", "unknown_found")],
        F.expr("coalesce(sum(size(skipped)), 0)").alias("consumer_skipped"),
        F.expr("coalesce(sum(size(redelivered)), 0)").alias("consumer_redelivered"),
        F.expr("count_if(status = 'ok' AND `partition` IS NULL)").alias("no_partition"),
        F.expr("coalesce(sum(n_live_ungrouped), 0)").alias("ungrouped_live_reads"),
        F.expr("collect_set(struct(topic, `partition`)) FILTER (WHERE n_sends > 0 AND `partition` IS NOT NULL)")
        .alias("send_partitions"),
    )


@dataclass
class PositionCounts:
    reads_live: int
    reads_final: int
    divergent: int
    foreign: int
    read_partitions: set[Part]


def _position_tally(positions: "DataFrame") -> "DataFrame":
    from pyspark.sql import functions as F

    return positions.agg(
        F.expr("coalesce(sum(n_live), 0)").alias("reads_live"),
        F.expr("coalesce(sum(n_final), 0)").alias("reads_final"),
        F.expr("count_if(divergent)").alias("divergent"),
        F.expr("count_if(foreign)").alias("foreign"),
        F.expr("collect_set(struct(topic, `partition`)) FILTER (WHERE n_live + n_final > 0)").alias("read_partitions"),
    )


def tallies(messages: "DataFrame", positions: "DataFrame",
            reordered: "DataFrame") -> tuple[MessageCounts, PositionCounts, int]:
    """Every count of the three tables, in one job: one aggregate row each, joined."""
    from pyspark.sql import functions as F

    row = (_message_tally(messages).crossJoin(_position_tally(positions))
           .crossJoin(reordered.agg(F.count(F.lit(1)).alias("out_of_order"))).collect()[0].asDict())
    row["send_partitions"] = {(p["topic"], p["partition"]) for p in row["send_partitions"]}
    row["read_partitions"] = {(p["topic"], p["partition"]) for p in row["read_partitions"]}
    m = MessageCounts(**{f: row[f] for f in MessageCounts.__dataclass_fields__})
    p = PositionCounts(**{f: row[f] for f in PositionCounts.__dataclass_fields__})
    return m, p, int(row["out_of_order"])
