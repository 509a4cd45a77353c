"""Producers, topics and consumer groups as small integers, so that the judge's groupings are hash aggregations.

Why: Spark aggregates by hash only when every aggregation buffer is a
fixed-width value; ``min(struct(producer, seq))`` or ``max_by(topic, ...)``
over strings force a sort-based aggregation, several times slower. With ids
the judge keeps only numbers in its buffers (see judge.py), and its shuffles
carry ints instead of strings.

Ids are assigned in name order (Spark and Python order UTF-8 strings alike),
so ordering by id is ordering by name: the examples are still the smallest
(producer, seq) or (topic, partition, offset). The names are few (clients,
topics, groups of one run) and are collected once, in one small job; the
producers' ids are joined in with a broadcast dictionary, topics' and groups'
through literal maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from catalogue.history import SEND_STATUS_ALIASES, SEND_STATUSES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Part = tuple[str, int]

# a send's status is stored as its index in the catalogue's SEND_STATUSES; every string a sends line may hold for it
# -> that code (an old name, in a history written before the rename, gets the code of the status it became)
STATUS_CODES = {**{s: i for i, s in enumerate(SEND_STATUSES)},
                **{old: SEND_STATUSES.index(new) for old, new in SEND_STATUS_ALIASES.items()}}
OK, FAIL, UNKNOWN_STATUS = (STATUS_CODES[s] for s in SEND_STATUSES)
OUTCOME_CODES = ("committed", "aborted", "unknown")  # a transaction's outcome is stored as its index here
INTENT_CODES = ("commit", "abort")  # what the application asked for (null: nothing), stored as its index
INTENT_UNKNOWN_CODE = len(INTENT_CODES)  # a txns line with no intent field: not known (checkers.history.INTENT_UNKNOWN)
MAX_MASK_GROUPS = 64  # consumer groups whose ids fit a bit mask in one 64-bit long

SENDS_COLUMNS = ("_key bigint, pid int, seq bigint, tid int, `partition` bigint, `offset` bigint, status tinyint, "
                 "txn bigint, complete_ns bigint")
# committed: read with isolation read_committed; fpid, fseq: the input a pipeline's output record was made from;
# cid: the consumer process; assignment: a live read's (catalogue.history LIVE_READ_FIELDS)
READS_COLUMNS = ("_key bigint, gid int, final boolean, tid int, `partition` bigint, `offset` bigint, pid int, "
                 "seq bigint, committed boolean, fpid int, fseq bigint, cid int, assignment bigint")
TXNS_COLUMNS = "_key bigint, pid int, txn bigint, outcome tinyint, intent tinyint"  # codes: OUTCOME_CODES, INTENT_CODES


@dataclass
class Names:
    """id -> name, for producers, topics, consumer groups and consumer processes (each list in name order)."""

    producers: list[str]
    topics: list[str]
    groups: list[str]
    consumers: list[str]

    def topic_ids(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.topics)}

    def group_ids(self) -> dict[str, int]:
        return {g: i for i, g in enumerate(self.groups)}

    def consumer_ids(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.consumers)}


@dataclass
class Encoded:
    """The history with ids: sends (SENDS_COLUMNS), reads (READS_COLUMNS), txns (TXNS_COLUMNS; None: no
    txns.jsonl), and the names behind the ids."""

    sends: "DataFrame"
    reads: "DataFrame"
    names: Names
    txns: "DataFrame | None" = None


def collect_names(sends: "DataFrame", reads: "DataFrame | None", txns: "DataFrame | None",
                  extra_groups: set[str]) -> Names:
    """Every producer, topic, group and consumer named in the history, in one job (plus the groups of commit
    events)."""
    parts = [sends.selectExpr("0 AS kind", "producer AS name"), sends.selectExpr("1 AS kind", "topic AS name")]
    if reads is not None:
        parts += [reads.selectExpr("0 AS kind", "producer AS name"), reads.selectExpr("1 AS kind", "topic AS name"),
                  reads.selectExpr("2 AS kind", "grp AS name"), reads.selectExpr("0 AS kind", "from_producer AS name"),
                  reads.selectExpr("3 AS kind", "consumer AS name")]
    if txns is not None:
        parts.append(txns.selectExpr("0 AS kind", "producer AS name"))
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    found: list[set[str]] = [set(), set(), set(extra_groups), set()]
    for row in union.filter("name IS NOT NULL").distinct().collect():
        found[row["kind"]].add(row["name"])
    producers, topics, groups, consumers = (sorted_names(names) for names in found)
    return Names(producers=producers, topics=topics, groups=groups, consumers=consumers)


def sorted_names(names: set[str]) -> list[str]:
    """In Spark's order, by UTF-8 bytes (the same as Python's order of code points, but be explicit)."""
    return sorted(names, key=lambda name: name.encode("utf-8", "surrogatepass"))


def literal_ids(ids: dict[str, int], column: str) -> "Column":
    """name -> id through a literal map (few names), null for null."""
    from pyspark.sql import functions as F

    if not ids:
        return F.lit(None).cast("int")
    args: list[Any] = []
    for name, i in ids.items():
        args += [F.lit(name), F.lit(i)]
    return F.try_element_at(F.create_map(*args), F.col(column))


def sql_literal(value: Any) -> str:
    """A Python value as a Spark SQL literal: integers as written, strings as UTF-8 hex (no escaping to get
    wrong), None as NULL."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    raise TypeError(f"no SQL literal for {value!r}")


def sql_in(column: str, values: Iterable[Any]) -> str:
    """SQL: ``column`` is one of ``values`` (false for none)."""
    listed = ", ".join(sql_literal(v) for v in values)
    return f"`{column}` IN ({listed})" if listed else "false"


def literal_table(spark: "SparkSession", columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> "DataFrame":
    """A few rows as a DataFrame of literals, made in the JVM from one SQL text: ``createDataFrame`` on a
    Python list starts a Python worker to unpickle them, and a Column per value goes through Py4J, both
    slow (benchmarks/PROFILE.md)."""
    typed = ", ".join(f"CAST(col{i + 1} AS {kind}) AS `{name}`" for i, (name, kind) in enumerate(columns))
    if not rows:  # the columns, none of the values
        return spark.range(0).selectExpr(*[f"CAST(NULL AS {kind}) AS `{name}`" for name, kind in columns])
    values = ", ".join("(" + ", ".join(sql_literal(v) for v in row) + ")" for row in rows)
    return spark.sql(f"SELECT {typed} FROM VALUES {values}")


def no_reads(spark: "SparkSession") -> "DataFrame":
    """The encoded reads of a history without reads.jsonl: no rows, READS_COLUMNS."""
    return spark.createDataFrame([], READS_COLUMNS)


def encode(spark: "SparkSession", sends: "DataFrame", reads: "DataFrame | None", txns: "DataFrame | None",
           names: Names, sources: bool) -> Encoded:
    """Replace names by ids, status by a code (STATUS_CODES: 0 ok, 1 fail, 2 unknown) and phase by ``final``.

    ``sources``: the judge needs the inputs of output records (fpid): only then is from_producer looked up.
    """
    from pyspark.sql import functions as F

    producers = F.broadcast(literal_table(spark, [("pid", "int"), ("producer", "string")],
                                          list(enumerate(names.producers))))
    topic_id = literal_ids(names.topic_ids(), "topic")
    group_id = literal_ids(names.group_ids(), "grp")
    consumer_id = literal_ids(names.consumer_ids(), "consumer")
    status = F.expr(" ".join(["CASE status"] + [f"WHEN '{s}' THEN {c}" for s, c in STATUS_CODES.items()] + ["END"]))
    enc_sends = (sends.join(producers, "producer")
                 .select("_key", "pid", "seq", topic_id.cast("int").alias("tid"), "partition", "offset",
                         status.cast("tinyint").alias("status"), "txn", "complete_ns"))
    if reads is None:
        enc_reads = no_reads(spark)
    else:
        if sources:
            reads = reads.join(producers.withColumnsRenamed({"pid": "fpid", "producer": "from_producer"}),
                               "from_producer", "left")
        else:
            reads = reads.withColumn("fpid", F.lit(None).cast("int"))
        enc_reads = (reads.join(producers, "producer", "left")
                     .select("_key", group_id.cast("int").alias("gid"), F.expr("phase = 'final'").alias("final"),
                             topic_id.cast("int").alias("tid"), "partition", "offset", "pid", "seq", "committed",
                             "fpid", F.col("from_seq").alias("fseq"), consumer_id.cast("int").alias("cid"),
                             "assignment"))
    enc_txns = None if txns is None else txns.join(producers, "producer").select(
        "_key", "pid", "txn", "outcome", "intent")
    return Encoded(sends=enc_sends, reads=enc_reads, names=names, txns=enc_txns)
