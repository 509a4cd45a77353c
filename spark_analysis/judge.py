"""The anomalies of DESIGN.md as DataFrame transformations: two grouped shuffles and one window.

By message, sends and reads grouped by (pid, seq) once (``fast_messages``,
``exact_messages``); by position, reads and unconfirmed acks grouped by
(tid, partition, offset) once (``position_table``); by producer and
partition, a window over the acks (``reordered_table``). The inputs carry ids
(encode.py) and every grouping keeps only fixed-width numbers in its buffers,
so Spark aggregates by hash (a ``collect_set``, or a ``min`` over a struct or
a string, would make it sort every row first). Facts from the events enter
the plan as literals, and only aggregates come back to the driver.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from rundir.lines import HistoryError
from spark_analysis.encode import FAIL, INFO, MAX_MASK_GROUPS, OK, Names

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Part = tuple[str, int]

# The tables are grouped on nearly unique keys, where a pre-shuffle partial aggregation only costs time.
BYPASS_PARTIAL = "spark.sql.execution.bypassPartialAggregation"

# tid * PART_KEY + partition: one long per partition, a cheap key for literal maps. Kafka's
# partitions are int32 >= 0; a history naming others is refused (``observed``) rather than misjudged.
PART_KEY = 2 ** 32

# The message table's columns, whichever way a row was judged.
MESSAGE_COLUMNS = ("pid", "seq", "n_sends", "send_key", "status", "tid", "partition", "offset", "n_live",
                   "n_live_ungrouped", "lost", "lost_after_read", "lost_unverifiable", "duplicated", "unexpected",
                   "failed_but_present", "unknown", "unknown_found", "unconfirmed", "skipped", "redelivered")

# SQL: a winning send acknowledged at a known position (an ack), and the columns an ack is kept by
ACKED_AT = f"status = {OK} AND `partition` IS NOT NULL AND `offset` IS NOT NULL"
ACK_COLUMNS = ("pid", "seq", "tid", "partition", "offset", "send_key")


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


Ranges = dict[str, tuple[int, int]]  # column -> (low, high) of its values, where known
MESSAGE_KEY = ("pid", "seq")
POSITION_KEY = ("tid", "partition", "offset")
PACKED_KEY = "_packed_key"
PACKABLE = 2 ** 62  # a range bound farther from zero is not packed (its literal and differences stay far from overflow)


def group_by(table: "DataFrame", columns: tuple[str, ...], ranges: Ranges | None, aggregates: list[str]) -> "DataFrame":
    """``table.groupBy(columns).agg(aggregates)``, grouped on one long when the columns' ranges allow.

    Spark hashes, compares and shuffles one long much faster than a row of
    several columns (benchmarks/PROFILE.md). The packing is mixed radix
    over the known ranges (ids, Parquet statistics), so it is exact; the
    columns, never null here, are computed back from it per group. Without
    ranges (the JSON-lines path), or when they do not fit in 63 bits, the
    columns themselves are the key.
    """
    from pyspark.sql import functions as F

    bounds = [(ranges or {}).get(c) for c in columns]
    if not all(bounds):
        return table.groupBy(*columns).agg(*[F.expr(e) for e in aggregates])
    lows = [low for low, _ in bounds]
    sizes = [high - low + 1 for low, high in bounds]
    if min(sizes) < 1 or math.prod(sizes) > 2 ** 63 or any(abs(v) > PACKABLE for b in bounds for v in b):
        return table.groupBy(*columns).agg(*[F.expr(e) for e in aggregates])
    packed = f"CAST(`{columns[0]}` - ({lows[0]}L) AS BIGINT)"
    for column, low, size in zip(columns[1:], lows[1:], sizes[1:]):
        packed = f"({packed}) * {size}L + (`{column}` - ({low}L))"
    types = dict(table.dtypes)
    unpacked, divisor = [], 1
    for column, low, size in reversed(list(zip(columns, lows, sizes))):
        unpacked.insert(0, f"CAST(({PACKED_KEY} DIV {divisor}L) % {size}L + ({low}L) AS {types[column]}) AS `{column}`")
        divisor *= size
    grouped = table.selectExpr("*", f"{packed} AS {PACKED_KEY}").groupBy(PACKED_KEY).agg(*[F.expr(e) for e in aggregates])
    return grouped.selectExpr(*unpacked, *[f"`{c}`" for c in grouped.columns if c != PACKED_KEY])


# --- facts from the events, as literal maps over ids ----------------------------------------------------


@dataclass
class Facts:
    """Final-read completeness and committed offsets keyed by ids (topics no message names are left out).

    They are few, so they enter the plan as literal maps and comparisons
    (``complete_sql``), not joins.
    """

    complete: dict[tuple[int, int], bool]  # (tid, partition) -> final read complete
    topic_complete: dict[int, bool]  # tid -> every final-read partition of it complete
    committed: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)  # -> [(gid, offset)]

    @staticmethod
    def of(names: Names, complete: dict[Part, bool], committed: dict[Part, dict[str, int]]) -> "Facts":
        tids, gids = names.topic_ids(), names.group_ids()
        by_topic: dict[int, bool] = {}
        parts: dict[tuple[int, int], bool] = {}
        for (topic, partition), done in complete.items():
            if topic in tids:
                parts[(tids[topic], partition)] = done
                by_topic[tids[topic]] = by_topic.get(tids[topic], True) and done
        commits = {(tids[topic], partition): sorted((gids[g], o) for g, o in groups.items())
                   for (topic, partition), groups in committed.items() if topic in tids and groups}
        if any(not 0 <= p < PART_KEY for _, p in [*parts, *commits]):
            raise HistoryError(f"an event names a partition outside 0..{PART_KEY - 1}; check with --engine python")
        return Facts(complete=parts, topic_complete=by_topic, committed=commits)


def _lit_map(entries: dict[Any, "Column"], key: Any, empty_type: str) -> "Column":
    """A literal map column; Spark folds it to one constant."""
    from pyspark.sql import functions as F

    if not entries:
        return F.expr(f"CAST(NULL AS {empty_type})")
    args: list[Column] = []
    for k, v in entries.items():
        args += [key(k), v]
    return F.create_map(*args)


def _part_key(part: tuple[int, int]) -> "Column":
    """A partition's literal-map key: a long, compared far faster than a struct in a map lookup."""
    from pyspark.sql import functions as F

    return F.lit(part[0] * PART_KEY + part[1]).cast("bigint")


def _maps(facts: Facts) -> dict[str, "Column"]:
    from pyspark.sql import functions as F

    commits = {part: F.array(*[F.struct(F.lit(g).cast("int").alias("g"), F.lit(o).cast("bigint").alias("o"))
                               for g, o in groups]) for part, groups in facts.committed.items()}
    return {
        "_topic_complete": _lit_map({t: F.lit(d) for t, d in facts.topic_complete.items()},
                                    lambda t: F.lit(t).cast("int"), "map<int,boolean>"),
        "_committed": _lit_map(commits, _part_key, "map<bigint,array<struct<g:int,o:bigint>>>"),
        "_committers": _lit_map({t * PART_KEY + p: F.lit(_mask(g for g, _ in groups)).cast("bigint")
                                 for (t, p), groups in facts.committed.items()},
                                lambda k: F.lit(k).cast("bigint"), "map<bigint,bigint>"),
    }


def _mask(gids: Iterable[int]) -> int:
    """The bit mask of these group ids as a signed 64-bit value (ids past the mask are left out)."""
    mask = sum(1 << g for g in set(gids) if g < MAX_MASK_GROUPS)
    return mask - 2 ** 64 if mask >= 2 ** 63 else mask


def _commits_at(tid: str, partition: str) -> str:
    """SQL: the [(gid, offset)] committed in a partition (empty when none)."""
    return (f"coalesce(try_element_at(_committed, {tid} * {PART_KEY} + {partition}), "
            "CAST(array() AS array<struct<g:int,o:bigint>>))")


def complete_sql(facts: Facts) -> str:
    """SQL: a row's (tid, partition) had a complete final read, as runs of partitions per topic.

    Compared, not looked up: observed metrics evaluate every row, and a few
    comparisons cost less than a set or a map per row.
    """
    done: dict[int, list[int]] = {}
    for (tid, partition), complete in sorted(facts.complete.items()):
        if complete:
            done.setdefault(tid, []).append(partition)
    runs = []
    for tid, partitions in done.items():
        start = partitions[0]
        for before, after in zip(partitions, partitions[1:] + [None]):
            if after != before + 1:
                runs.append(f"(tid = {tid} AND `partition` BETWEEN {start} AND {before})")
                start = after
    return f"({' OR '.join(runs)})" if runs else "false"


def outside_complete_sql(complete: str) -> str:
    """SQL: a row names a partition not known to have had a complete final read (``complete``: complete_sql).

    One test for the counts (``message_metrics``, ``position_metrics``) and for
    looking those partitions up afterwards, so a count never promises rows the
    lookup cannot find.
    """
    return f"(`partition` IS NOT NULL AND NOT {complete})"


def _verdicts(table: "DataFrame", facts: Facts) -> "DataFrame":
    """The flags that follow from status, present, verifiable and the final-read count.

    ``verifiable`` (the send's partition, else its topic, had a complete final
    read) is worked out only for an acknowledged message not found: the rest
    do not need it, and a lookup per row costs.
    """
    table = table.selectExpr("*", f"""CASE WHEN status = {OK} AND NOT present THEN coalesce(
                                        CASE WHEN `partition` IS NOT NULL THEN {complete_sql(facts)}
                                             ELSE try_element_at(_topic_complete, tid) END, false) END
                                    AS verifiable""")
    return table.selectExpr(
        *[c for c in table.columns if c not in ("present", "verifiable", "n_final", "_topic_complete")],
        f"coalesce(status = {OK} AND NOT present AND verifiable, false) AS lost",
        f"coalesce(status = {OK} AND NOT present AND verifiable AND n_live > 0, false) AS lost_after_read",
        f"coalesce(status = {OK} AND NOT present AND NOT verifiable, false) AS lost_unverifiable",
        "n_sends = 0 AS unexpected",
        f"coalesce(status = {FAIL} AND n_final > 0, false) AS failed_but_present",
        f"coalesce(status = {INFO}, false) AS unknown",
        f"coalesce(status = {INFO} AND n_final > 0, false) AS unknown_found",
    )


# --- by message ---------------------------------------------------------------------------------------


# The ``kind`` of a tagged row: a send's status (OK, FAIL, INFO: >= 0), or one of these for a read
LIVE, FINAL = -1, -2
IS_SEND, IS_LIVE, IS_FINAL = "kind >= 0", f"kind = {LIVE}", f"kind = {FINAL}"


def tagged_rows(sends: "DataFrame", reads: "DataFrame") -> "DataFrame":
    """Sends and reads of kchaos messages in one table, for one grouping by message.

    Seven columns, as narrow as the grouping allows (every row is shuffled):
    ``kind`` is a send's status or LIVE/FINAL, ``aux`` a send's rank (its
    line key ``_key``, with OK_RANK set on an ok line) or a read's consumer
    group id.
    """
    return sends.selectExpr(
        "pid", "seq", "status AS kind", f"CASE WHEN status = {OK} THEN _key | {OK_RANK}L ELSE _key END AS aux",
        "tid", "`partition`", "`offset`",
    ).unionByName(reads.filter("pid IS NOT NULL").selectExpr(
        "pid", "seq", f"CAST(CASE WHEN final THEN {FINAL} ELSE {LIVE} END AS TINYINT) AS kind",
        "CAST(gid AS BIGINT) AS aux", "tid", "`partition`", "`offset`",
    ))


# A send line's rank among its message's lines is its line key, plus this bit on an ok line: an
# acknowledgement is never downgraded (an ok line wins over info and fail), else the last line wins.
# Line keys are positions in a file, far below it.
OK_RANK = 2 ** 62
_WINNER = [f"max_by(kind, aux) FILTER (WHERE {IS_SEND}) AS status",
           *[f"max_by({c}, aux) FILTER (WHERE {IS_SEND}) AS {c}" for c in ("tid", "`partition`", "`offset`")]]
_COMMON = [f"count_if({IS_SEND}) AS n_sends", f"max(aux) FILTER (WHERE {IS_SEND}) & {OK_RANK - 1}L AS send_key",
           *_WINNER,
           f"count_if({IS_LIVE}) AS n_live",
           f"count_if({IS_LIVE} AND aux IS NULL) AS n_live_ungrouped",
           f"count_if({IS_FINAL}) AS n_final"]


def fast_messages(tagged: "DataFrame", facts: Facts, ranges: Ranges | None = None) -> "DataFrame":
    """One row per message, from fixed-width aggregates only; ``ambiguous`` rows must be judged again.

    Each group keeps the winning send line (the last ok line, else the last
    line: ``max_by`` over the line's rank), the smallest and largest
    final-read position, live-read counts and the bit mask of the consumer
    groups that read it live. From that row follow lost, lost_after_read,
    lost_unverifiable, duplicated, unexpected (read but never sent),
    failed_but_present, unknown (found or not), consumer_skipped and
    consumer_redelivered: exactly, except for two rare kinds of message,
    marked ``ambiguous``: one read at final positions in two or more
    partitions (is it in the winning send's partition? which commits is each
    position below?) and one read live by several groups more often than
    there are groups (which group was handed it twice?). Those few are
    judged again from their reads (``exact_messages``) and replace their
    rows. A message read twice in one partition, the usual duplicate (a
    producer's retry), is not ambiguous: its smallest offset is below every
    commit that any of its offsets is below.

    Columns: those of MESSAGE_COLUMNS, with ``skipped_mask``/``redelivered_mask``
    (bit g: group id g) in place of the arrays, plus ``ambiguous``.
    """
    final = f"FILTER (WHERE {IS_FINAL})"
    grouped = group_by(tagged, MESSAGE_KEY, ranges, [
        *_COMMON,
        *[f"{fn}({c}) {final} AS f_{c.strip('`')}_{fn}" for c in ("tid", "`partition`", "`offset`")
          for fn in ("min", "max")],
        f"bit_or(shiftleft(1L, CAST(aux AS INT))) FILTER (WHERE {IS_LIVE} AND aux IS NOT NULL) AS live_mask",
    ])
    maps = _maps(facts)
    one_partition = "(f_tid_min = f_tid_max AND f_partition_min = f_partition_max)"
    one = f"({one_partition} AND f_offset_min = f_offset_max)"
    table = grouped.select("*", *[m.alias(name) for name, m in maps.items()]).selectExpr(
        "pid", "seq", "n_sends", "send_key", "status", "tid", "`partition`", "`offset`", "n_live", "n_live_ungrouped",
        "n_final",
        f"n_final > 0 AND NOT {one} AS duplicated",
        """coalesce(n_final > 0 AND f_tid_min = tid AND (`partition` IS NULL OR f_partition_min = `partition`),
                    false) AS present""",
        f"""coalesce({ACKED_AT} AND NOT coalesce(n_final > 0 AND {one} AND f_tid_min = tid
                                                   AND f_partition_min = `partition` AND f_offset_min = `offset`,
                                                   false), false) AS unconfirmed""",
        "_topic_complete",
        # the groups that committed this partition at all, less those that read the message live, come first:
        # usually none is left, and the offsets need not be looked at
        f"""CASE WHEN n_final > 0
                  AND (coalesce(try_element_at(_committers, f_tid_min * {PART_KEY} + f_partition_min), 0L)
                       & ~coalesce(live_mask, 0L)) <> 0
            THEN aggregate(
                filter({_commits_at('f_tid_min', 'f_partition_min')}, c -> f_offset_min < c.o),
                0L, (acc, c) -> acc | shiftleft(1L, c.g)) & ~coalesce(live_mask, 0L)
            ELSE 0L END AS skipped_mask""",
        """CASE WHEN bit_count(coalesce(live_mask, 0L)) = 1 AND n_live - n_live_ungrouped > 1 THEN live_mask
                ELSE 0L END AS redelivered_mask""",
        f"""(n_final > 0 AND NOT {one_partition})
            OR (bit_count(coalesce(live_mask, 0L)) > 1
                AND n_live - n_live_ungrouped > bit_count(coalesce(live_mask, 0L))) AS ambiguous""",
    )
    return _verdicts(table, facts)


def mask_groups(mask: str) -> str:
    """SQL: the group ids of a bit mask, ascending."""
    return f"filter(sequence(0, {MAX_MASK_GROUPS - 1}), g -> (shiftright({mask}, g) & 1L) = 1L)"


def from_fast(fast: "DataFrame") -> "DataFrame":
    """The unambiguous rows of ``fast_messages`` in the MESSAGE_COLUMNS layout."""
    return fast.filter("NOT ambiguous").selectExpr(
        *[c for c in MESSAGE_COLUMNS if c not in ("skipped", "redelivered")],
        *[f"CASE WHEN {c}_mask = 0 THEN CAST(array() AS array<int>) ELSE {mask_groups(f'{c}_mask')} END AS {c}"
          for c in ("skipped", "redelivered")])


def exact_messages(tagged: "DataFrame", facts: Facts, ranges: Ranges | None = None) -> "DataFrame":
    """One row per message with set-valued aggregates: right for every message, but sort-based and slow.

    Used for the ambiguous messages of ``fast_messages`` (their rows only),
    or for all of them when there are too many consumer groups for a mask.
    """
    grouped = group_by(tagged, MESSAGE_KEY, ranges, [
        *_COMMON,
        f"collect_set(struct(tid, `partition`, `offset`)) FILTER (WHERE {IS_FINAL}) AS finals",
        f"collect_list(CAST(aux AS INT)) FILTER (WHERE {IS_LIVE}) AS live_groups",
    ])
    maps = _maps(facts)
    table = grouped.select("*", *[m.alias(name) for name, m in maps.items()]).selectExpr(
        "pid", "seq", "n_sends", "send_key", "status", "tid", "`partition`", "`offset`", "n_live", "n_live_ungrouped",
        "n_final",
        "size(finals) > 1 AS duplicated",
        """CASE WHEN `partition` IS NOT NULL
                THEN exists(finals, f -> f.tid = tid AND f.`partition` = `partition`)
                ELSE exists(finals, f -> f.tid = tid) END AS present""",
        f"""coalesce({ACKED_AT} AND NOT coalesce(size(finals) = 1 AND finals[0].tid = tid
                                                   AND finals[0].`partition` = `partition`
                                                   AND finals[0].`offset` = `offset`, false), false) AS unconfirmed""",
        "_topic_complete",
        f"""array_sort(array_distinct(filter(
               flatten(transform(finals, f -> transform(
                   filter({_commits_at('f.tid', 'f.`partition`')}, c -> f.`offset` < c.o), c -> c.g))),
               g -> NOT array_contains(live_groups, g)))) AS skipped""",
        "array_sort(array_distinct(filter(live_groups, g -> size(filter(live_groups, h -> h = g)) > 1))) "
        "AS redelivered",
    )
    return _verdicts(table, facts).select(*MESSAGE_COLUMNS)


def acked(messages: "DataFrame") -> "DataFrame":
    """The winning sends that were acknowledged at a known position: pid, seq, tid, partition, offset, send_key."""
    return messages.filter(ACKED_AT).select(*ACK_COLUMNS)


def acked_lines(sends: "DataFrame") -> "DataFrame":
    """``acked`` straight from the send lines: the same rows when no message was sent twice (no winner to
    pick), without grouping the messages again."""
    return sends.filter(ACKED_AT).withColumnRenamed("_key", "send_key").select(*ACK_COLUMNS)


# --- by position --------------------------------------------------------------------------------------


def position_table(reads: "DataFrame", acks: "DataFrame", ranges: Ranges | None = None) -> "DataFrame":
    """One row per position read or acknowledged: read counts, and whether it is divergent or holds a foreign value.

    Two reads disagree when they saw different messages (a value kchaos did
    not write counts as one more message); an ack is contradicted when the
    position was read and what was read there is not the ack's message, or
    when another message was acknowledged there, read or not. All messages
    seen are one when the smallest and largest pid and seq agree.

    ``acks`` need only be the unconfirmed ones (``unconfirmed`` in the message
    table): an ack whose message's final reads are all at its position, and
    only there, cannot decide anything. Another message read there already
    makes the reads disagree; another ack there is unconfirmed itself, as its
    message was not read (only) there. Most acks are confirmed, so the
    grouping shuffles the reads and a few acks, not all of them (a history
    without final reads confirms none: then all of them, as before).
    """
    tagged = reads.selectExpr(
        "tid", "`partition`", "`offset`", "pid", "seq", "false AS is_ack", "final",
    ).unionByName(acks.selectExpr(
        "tid", "`partition`", "`offset`", "pid", "seq", "true AS is_ack", "CAST(NULL AS BOOLEAN) AS final",
    ))
    read, ack = "NOT is_ack AND pid IS NOT NULL", "is_ack"
    grouped = group_by(tagged, POSITION_KEY, ranges, [
        "count_if(NOT is_ack AND NOT final) AS n_live",
        "count_if(NOT is_ack AND final) AS n_final",
        "count_if(NOT is_ack AND pid IS NULL) > 0 AS foreign",
        *[f"{fn}({c}) FILTER (WHERE {cond}) AS {tag}_{c}_{fn}" for tag, cond in (("r", read), ("a", ack))
          for c in ("pid", "seq") for fn in ("min", "max")],
    ])
    return grouped.selectExpr(
        "tid", "`partition`", "`offset`", "n_live", "n_final", "foreign",
        """coalesce((n_live + n_final > 0 AND (
               (foreign AND r_pid_min IS NOT NULL)
               OR r_pid_min <> r_pid_max OR r_seq_min <> r_seq_max
               OR (a_pid_min IS NOT NULL AND (foreign OR a_pid_min <> r_pid_min OR a_seq_min <> r_seq_min))))
               OR a_pid_min <> a_pid_max OR a_seq_min <> a_seq_max, false)
           AS divergent""",
    )


def reordered_table(acks: "DataFrame") -> "DataFrame":
    """Acknowledged messages at a lower offset than some lower seq of their producer in their partition."""
    from pyspark.sql import Window, functions as F

    earlier = (Window.partitionBy("pid", "tid", "partition").orderBy("seq")
               .rowsBetween(Window.unboundedPreceding, -1))
    return (acks.withColumn("_highest", F.max("offset").over(earlier))
            .filter("`offset` < _highest").drop("_highest"))


# --- counts -------------------------------------------------------------------------------------------


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
    outside_complete: int  # winning sends naming a partition not known to have had a complete final read

    def __add__(self, other: "MessageCounts") -> "MessageCounts":
        return MessageCounts(**{f: getattr(self, f) + getattr(other, f) for f in MessageCounts.__dataclass_fields__})


FLAGS = ("lost", "lost_after_read", "lost_unverifiable", "duplicated", "unexpected", "failed_but_present", "unknown",
         "unknown_found")

# SQL: a row of the message table shows an anomaly (and is kept for the examples); per layout
# ("unconfirmed" rows are kept too: the position table needs their acks)
FAST_FINDINGS = " OR ".join([*FLAGS, "skipped_mask <> 0", "redelivered_mask <> 0", "ambiguous", "unconfirmed"])
EXACT_FINDINGS = " OR ".join([*FLAGS, "size(skipped) > 0", "size(redelivered) > 0", "unconfirmed"])
POSITION_FINDINGS = "divergent OR foreign"


def message_metrics(skipped: str, redelivered: str, complete: str, counted: str = "true") -> list[str]:
    """Aggregates over the message table, counting the rows where ``counted`` holds.

    Written without FILTER clauses, which observed metrics refuse; the
    partition range covers every row. Rows with a send partition outside
    ``complete`` (complete_sql) are only counted: the few histories that have
    any look for those partitions afterwards, so that no check pays for a
    set built per row.
    """
    def when(value: str) -> str:
        return f"CASE WHEN {counted} THEN {value} END"

    return [
        f"coalesce(sum({when('n_sends')}), 0) AS sent",
        f"count_if({counted} AND n_sends > 0) AS distinct_sent",
        f"count_if({counted} AND status = {OK}) AS acked",
        f"count_if({counted} AND status = {FAIL}) AS failed",
        f"count_if({counted} AND status = {INFO}) AS indeterminate",
        *[f"count_if({counted} AND {flag}) AS {flag}" for flag in FLAGS],
        f"coalesce(sum({when(skipped)}), 0) AS consumer_skipped",
        f"coalesce(sum({when(redelivered)}), 0) AS consumer_redelivered",
        f"count_if({counted} AND status = {OK} AND `partition` IS NULL) AS no_partition",
        f"coalesce(sum({when('n_live_ungrouped')}), 0) AS ungrouped_live_reads",
        f"count_if({counted} AND n_sends > 0 AND {outside_complete_sql(complete)}) AS outside_complete",
        "min(`partition`) AS partition_min", "max(`partition`) AS partition_max",
    ]


def fast_message_metrics(complete: str) -> list[str]:
    """``message_metrics`` of ``fast_messages``: the unambiguous rows, and how many are ambiguous."""
    return [*message_metrics("bit_count(skipped_mask)", "bit_count(redelivered_mask)", complete, "NOT ambiguous"),
            "count_if(ambiguous) AS ambiguous"]


def exact_message_metrics(complete: str) -> list[str]:
    """``message_metrics`` of rows in the MESSAGE_COLUMNS layout (none ambiguous)."""
    return [*message_metrics("size(skipped)", "size(redelivered)", complete), "0L AS ambiguous"]


def position_metrics(complete: str) -> list[str]:
    """Aggregates over the position table (read partitions outside ``complete``: as in ``message_metrics``)."""
    return [
        "coalesce(sum(n_live), 0) AS reads_live",
        "coalesce(sum(n_final), 0) AS reads_final",
        "count_if(divergent) AS divergent",
        "count_if(foreign) AS foreign",
        f"count_if(n_live + n_final > 0 AND {outside_complete_sql(complete)}) AS outside_complete",
        "min(`partition`) AS partition_min", "max(`partition`) AS partition_max",
    ]


def observed(table: "DataFrame", metrics: list[str], keep: str) -> tuple["DataFrame", dict[str, Any]]:
    """In one pass over ``table``: its rows where ``keep`` holds (few: the findings), cached, and
    ``metrics`` aggregated over all its rows. The caller unpersists the rows.

    Caching the whole table for the counts and the findings would cost much
    of what computing it does; the observation rides along the pass that keeps them.
    """
    from pyspark import StorageLevel
    from pyspark.sql import Observation, functions as F

    seen = Observation()  # a fresh name: a plan cached by an earlier check is never reused unobserved
    kept = table.observe(seen, *[F.expr(m) for m in metrics]).filter(keep).persist(StorageLevel.MEMORY_AND_DISK)
    kept.count()
    row = dict(seen.get)
    low, high = row["partition_min"], row["partition_max"]
    if (low is not None and low < 0) or (high is not None and high >= PART_KEY):
        kept.unpersist()
        raise HistoryError(f"a partition number outside 0..{PART_KEY - 1} ({low}..{high}); "
                           "check with --engine python")
    return kept, row


def message_counts(row: dict[str, Any]) -> MessageCounts:
    """The counts of a ``message_metrics`` row."""
    return MessageCounts(**{f: row[f] for f in MessageCounts.__dataclass_fields__})


@dataclass
class PositionCounts:
    reads_live: int
    reads_final: int
    divergent: int
    foreign: int
    outside_complete: int  # positions read in a partition not known to have had a complete final read

    @staticmethod
    def of(row: dict[str, Any]) -> "PositionCounts":
        """The counts of a ``position_metrics`` row."""
        return PositionCounts(*(row[f] for f in PositionCounts.__dataclass_fields__))
