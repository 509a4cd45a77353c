"""A share group's deliveries on Spark: checkers/shares.py's definitions, by one window over the deliveries.

shares.jsonl is read by the reference's reader in the driver (its lines are
far fewer than the sends and reads: one per delivery and one per
acknowledgement) and handed to Spark as one table. Each
acknowledgement finds its delivery (the latest before it with its member,
record and delivery count: one window), and one window per record in time
order gives each delivery the one before it: what that came to names the
redelivery, and a count not above its own says a delivery was forgotten.
Per record, the aggregates say whether it was settled, delivered past the
limit or archived; the read_uncommitted final read (the encoded reads) says
which records should have been settled, the acknowledged sends which of them
were writes, and the brokers' start offsets (events, in the driver) which
unsettled ones the brokers had settled unseen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkers.shares import (AFTER_FAILED, AFTER_NOTHING, AFTER_RELEASE, AFTER_SETTLED, AFTER_STALE, NOT_ACQUIRED,
                             PER_DELIVERY, REPEATED, SETTLING, SHARE_ANOMALIES, SHARE_TALLY, UNSEEN, Delivery,
                             ShareLine, share_example, share_settings)
from spark_analysis.encode import OK, Names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# ShareLine's fields, in its order
SCHEMA = ("kind string, member string, topic string, `partition` bigint, `offset` bigint, delivery bigint, "
          "time_ns bigint, producer string, seq bigint, ack string, result string, error string, _line bigint")
RECORD = ("topic", "partition", "offset")
SETTLES = f"(ack IN ({', '.join(repr(a) for a in SETTLING)}) AND result = 'ok')"
# what the delivery before a redelivery came to (checkers/shares.py ``after``)
STALE_SQL = (f"_last = 1 AND member = prev_member AND coalesce(result = 'fail' AND error IN "
             f"({', '.join(repr(e) for e in NOT_ACQUIRED)}), false)")
AFTER_SQL = (f"CASE WHEN prev_ack IN ({', '.join(repr(a) for a in SETTLING)}) AND prev_result = 'ok' "
             f"THEN CASE WHEN {STALE_SQL} THEN '{AFTER_STALE}' ELSE '{AFTER_SETTLED}' END "
             f"WHEN prev_ack IS NULL OR prev_ack_ns > time_ns THEN '{AFTER_NOTHING}' "
             f"WHEN prev_result <> 'ok' THEN '{AFTER_FAILED}' ELSE '{AFTER_RELEASE}' END")


def no_shares() -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    return {SHARE_TALLY: 0, **{a: 0 for a in SHARE_ANOMALIES}}, {a: [] for a in SHARE_ANOMALIES}


def share_findings(spark: "SparkSession", lines: list[ShareLine], events: list[dict[str, Any]], reads: "DataFrame",
                   sends: "DataFrame", names: Names, complete: dict[tuple[str, int], bool],
                   max_examples: int) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    """The share anomalies' counts (and the deliveries tally) and examples (checkers/shares.py's share_findings
    and share_examples); ``lines``: shares.jsonl, read by the reference's reader (the same notes, the same
    one-line errors)."""
    from pyspark.sql import Window, functions as F

    limit, starts = share_settings(events)
    if limit is None:
        return no_shares()
    table = spark.createDataFrame([tuple(line) for line in lines], SCHEMA)  # by position: ShareLine names it line
    keys = ["member", *RECORD, "delivery"]
    # an acknowledgement belongs to the latest delivery before it with its member, record and count; the last
    # acknowledgement of a delivery counts
    before = Window.partitionBy(*keys).orderBy("_line").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    owned = (table.withColumn("_owner", F.last(F.expr("CASE WHEN kind = 'delivered' THEN _line END"),
                                               ignorenulls=True).over(before))
             .filter("kind = 'acknowledged' AND _owner IS NOT NULL"))
    acks = (owned.withColumn("_n", F.row_number().over(Window.partitionBy("_owner").orderBy(F.desc("_line"))))
            .filter("_n = 1").selectExpr("_owner AS _line", "ack", "result", "error", "time_ns AS ack_ns"))
    order = Window.partitionBy(*RECORD).orderBy("time_ns", "delivery", "member", "_line")
    deliveries = (table.filter("kind = 'delivered'").select(*keys, "time_ns", "_line")
                  .join(acks, "_line", "left")
                  .withColumn("prev_ack", F.lag("ack").over(order))
                  .withColumn("prev_result", F.lag("result").over(order))
                  .withColumn("prev_ack_ns", F.lag("ack_ns").over(order))
                  .withColumn("prev_member", F.lag("member").over(order))
                  .withColumn("redelivery", F.lag("_line").over(order).isNotNull())
                  .withColumn("prev_delivery", F.lag("delivery").over(order))
                  .withColumn("repeated", F.expr("coalesce(delivery <= prev_delivery, false)"))
                  .withColumn("settles", F.expr(f"coalesce({SETTLES}, false)"))
                  .withColumn("_last", F.row_number().over(order.orderBy(F.desc("time_ns"), F.desc("delivery"),
                                                                            F.desc("member"), F.desc("_line")))))
    deliveries = deliveries.withColumn("after", F.expr(f"CASE WHEN redelivery THEN {AFTER_SQL} END")).cache()
    try:
        return _judge(spark, deliveries, limit, starts, reads, sends, names, complete, max_examples)
    finally:
        deliveries.unpersist()


def _judge(spark: "SparkSession", deliveries: "DataFrame", limit: int, starts: dict[tuple[str, int], int],
           reads: "DataFrame", sends: "DataFrame", names: Names, complete: dict[tuple[str, int], bool],
           max_examples: int) -> tuple[dict[str, int], dict[str, list[dict[str, Any]]]]:
    from pyspark.sql import functions as F

    counts = {SHARE_TALLY: 0, **{a: 0 for a in SHARE_ANOMALIES}}
    for r in deliveries.groupBy("after").agg(F.count(F.lit(1)).alias("n"),
                                             F.sum(F.col("repeated").cast("int")).alias("repeated")).collect():
        counts[SHARE_TALLY] += r["n"]
        counts[REPEATED] += r["repeated"] or 0
        if r["after"] in PER_DELIVERY:
            counts[r["after"]] = r["n"]
    per_record = deliveries.groupBy(*RECORD).agg(
        F.max(F.expr(f"after = '{AFTER_SETTLED}'")).alias("after_settled"),
        F.max("delivery").alias("max_delivery"),
        F.countDistinct("delivery").alias("counts_seen"),
        F.max("settles").alias("any_settles"),
        F.max(F.expr("CASE WHEN _last = 1 THEN delivery END")).alias("last_delivery"),
        F.max(F.expr("_last = 1 AND settles")).alias("last_settles"))
    flagged = per_record.selectExpr(
        *RECORD, "coalesce(after_settled, false) AS share_redelivered_after_accept",
        f"max_delivery > {limit} AS share_over_delivered",
        f"(last_delivery >= {limit} AND NOT last_settles) AS share_archived",
        f"NOT (any_settles OR max_delivery >= {limit}) AS unsettled",
        f"max_delivery - counts_seen AS {UNSEEN}")
    topics = spark.createDataFrame([(i, t) for i, t in enumerate(names.topics)], "tid int, topic string")
    producers = spark.createDataFrame([(i, p) for i, p in enumerate(names.producers)], "pid int, producer string")
    done = spark.createDataFrame([(t, p) for (t, p), ok in complete.items() if ok] or [("", -1)],
                                 "topic string, `partition` bigint")
    start = spark.createDataFrame([(t, p, o) for (t, p), o in starts.items()] or [("", -1, 0)],
                                  "topic string, `partition` bigint, start_offset bigint")
    acked = sends.filter(f"status = {OK}").select("pid", "seq").distinct().withColumn("acked", F.lit(True))
    final = (reads.filter("final AND NOT committed").join(topics, "tid")
             .select("topic", "partition", "offset", "pid", "seq").dropDuplicates([*RECORD]))
    judged = (final.join(done, ["topic", "partition"], "left_semi").join(acked, ["pid", "seq"], "left")
              .join(flagged, list(RECORD), "left").join(start, ["topic", "partition"], "left")
              .selectExpr(*RECORD, "unsettled IS NULL AND coalesce(acked, false) AS share_lost",
                          "coalesce(unsettled, false) AND (start_offset IS NULL OR `offset` >= start_offset) "
                          "AS share_unsettled",
                          "coalesce(unsettled, false) AND start_offset IS NOT NULL AND `offset` < start_offset "
                          "AS share_settled_unseen"))
    by_record = [a for a in SHARE_ANOMALIES if a not in PER_DELIVERY]
    from_final = ("share_lost", "share_unsettled", "share_settled_unseen")
    rows = (flagged.select(*RECORD, *[F.col(a).cast("int").alias(a) for a in by_record if a not in from_final],
                           UNSEEN)
            .unionByName(judged.select(*RECORD, *[F.col(a).cast("int").alias(a) for a in from_final]),
                         allowMissingColumns=True))
    # persisted: the counts come in one job, and the examples of what was found from the same rows (the final
    # read's joins run once)
    rows = rows.persist()
    try:
        found = rows.agg(*[F.sum(F.coalesce(F.col(a), F.lit(0))).alias(a) for a in (*by_record, UNSEEN)]).collect()[0]
        counts[UNSEEN] = int(found[UNSEEN] or 0)
        chosen: dict[str, list[tuple[str, int, int]]] = {}
        for a in by_record:
            counts[a] = int(found[a] or 0)
            chosen[a] = [tuple(r) for r in rows.filter(f"{a} = 1").select(*RECORD).orderBy(*RECORD)
                         .limit(max_examples).collect()] if counts[a] else []
    finally:
        rows.unpersist()
    return counts, examples(spark, deliveries, reads, names, topics, producers, chosen)


def examples(spark: "SparkSession", deliveries: "DataFrame", reads: "DataFrame", names: Names,
             topics: "DataFrame", producers: "DataFrame",
             chosen: dict[str, list[tuple[str, int, int]]]) -> dict[str, list[dict[str, Any]]]:
    """checkers/shares.py's share_example of each chosen record: its final-read message and its deliveries."""
    wanted = sorted({r for rs in chosen.values() for r in rs})
    if not wanted:
        return {a: [] for a in SHARE_ANOMALIES}
    records = spark.createDataFrame(wanted, "topic string, `partition` bigint, `offset` bigint")
    messages = {(r["topic"], r["partition"], r["offset"]): (r["producer"], r["seq"]) for r in
                reads.filter("final AND NOT committed").join(topics, "tid").join(producers, "pid", "left")
                .join(records, list(RECORD), "left_semi").select(*RECORD, "producer", "seq").collect()}
    found: dict[tuple[str, int, int], list[Delivery]] = {}
    for r in (deliveries.join(records, list(RECORD), "left_semi")
              .orderBy("time_ns", "delivery", "member", "_line").collect()):
        found.setdefault((r["topic"], r["partition"], r["offset"]), []).append(
            Delivery(r["time_ns"], r["delivery"], r["member"], r["ack"], r["result"], 0, r["ack_ns"], r["error"]))
    return {**{a: [] for a in SHARE_ANOMALIES},
            **{a: [share_example(rec, messages.get(rec, (None, None)), found.get(rec, [])) for rec in rs]
               for a, rs in chosen.items()}}
