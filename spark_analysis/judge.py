"""The catalogue's anomalies as DataFrame transformations: two grouped shuffles and one window.

By message, sends and reads grouped by (pid, seq) once (``fast_messages``,
``exact_messages``); by position, reads and unconfirmed acks grouped by
(tid, partition, offset) once (``position_table``); by producer and
partition, a window over the acks (``reordered_table``). The inputs carry ids
(encode.py) and every grouping keeps only fixed-width numbers in its buffers,
so Spark aggregates by hash (a ``collect_set``, or a ``min`` over a struct or
a string, would make it sort every row first). Facts from the events enter
the plan as literals, and only aggregates come back to the driver.

Transactions (``Scope``): the message grouping also judges each
transactional message against the read_committed read-back and its
transaction's outcome (``txn_codes``, a broadcast join: a run has far fewer
transactions than messages), and a third grouping, by (pid, txn), counts
transactions and finds the torn ones (``transaction_table``).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from rundir.lines import HistoryError
from spark_analysis.encode import (FAIL, INTENT_UNKNOWN_CODE, MAX_MASK_GROUPS, OK, OUTCOME_CODES, UNKNOWN_STATUS, Names,
                                   literal_table)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Part = tuple[str, int]

# The tables are grouped on nearly unique keys, where a pre-shuffle partial aggregation only costs time.
BYPASS_PARTIAL = "spark.sql.execution.bypassPartialAggregation"

# tid * PART_KEY + partition: one long per partition, a cheap key for literal maps. Kafka's
# partitions are int32 >= 0; a history naming others is refused (``observed``) rather than misjudged.
PART_KEY = 2 ** 32

# The message table's columns, whichever way a row was judged (without transactions or pipelines, the columns
# of those are constants: txn null, flags false, counts 0).
MESSAGE_COLUMNS = ("pid", "seq", "n_sends", "send_key", "status", "tid", "partition", "offset", "n_live",
                   "n_live_ungrouped", "lost", "lost_after_read", "lost_unverifiable", "duplicated", "unexpected",
                   "failed_but_present", "unknown", "unknown_found", "unconfirmed", "skipped", "redelivered",
                   "txn", "aborted_read", "txn_missing", "txn_unverifiable", "pipeline_lost", "pipeline_duplicated",
                   "pipe_unprocessed", "pipe_unverifiable")

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


# A table of up to this many rows (keys, findings) is broadcast to the other side of a join rather than shuffled.
BROADCAST_KEYS = 1_000_000


def broadcast_if_few(table: "DataFrame", rows: int) -> "DataFrame":
    """``table`` marked for a broadcast join when it has at most BROADCAST_KEYS rows (``rows``, counted before)."""
    from pyspark.sql import functions as F

    return F.broadcast(table) if rows <= BROADCAST_KEYS else table


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
    grouped = (table.selectExpr("*", f"{packed} AS {PACKED_KEY}").groupBy(PACKED_KEY)
               .agg(*[F.expr(e) for e in aggregates]))
    return grouped.selectExpr(*unpacked, *[f"`{c}`" for c in grouped.columns if c != PACKED_KEY])


# --- facts from the events, as literal maps over ids ----------------------------------------------------


@dataclass
class Facts:
    """Final-read completeness and committed offsets keyed by ids (topics no message names are left out).

    They are few, so they enter the plan as literal maps and comparisons
    (``complete_sql``), not joins. ``complete``/``topic_complete`` are the
    read_uncommitted read-back's (or an old history's only one),
    ``complete_c``/``topic_complete_c`` the read_committed one's; a topic is
    complete when every partition either read-back has an event for is.
    """

    complete: dict[tuple[int, int], bool]  # (tid, partition) -> final read complete
    topic_complete: dict[int, bool]  # tid -> every final-read partition of it complete
    committed: dict[tuple[int, int], list[tuple[int, int]]] = field(default_factory=dict)  # -> [(gid, offset)]
    complete_c: dict[tuple[int, int], bool] = field(default_factory=dict)
    topic_complete_c: dict[int, bool] = field(default_factory=dict)

    @staticmethod
    def of(names: Names, complete: dict[Part, bool], committed: dict[Part, dict[str, int]],
           complete_c: dict[Part, bool] | None = None) -> "Facts":
        tids, gids = names.topic_ids(), names.group_ids()
        complete_c = complete_c or {}

        def by_ids(done: dict[Part, bool]) -> tuple[dict[tuple[int, int], bool], dict[int, bool]]:
            parts = {(tids[t], p): d for (t, p), d in done.items() if t in tids}
            by_topic = {tids[t]: all(done.get(part, False) for part in topic_parts)
                        for t, topic_parts in topic_partitions(complete, complete_c).items() if t in tids}
            return parts, by_topic

        (parts, by_topic), (parts_c, by_topic_c) = by_ids(complete), by_ids(complete_c)
        commits = {(tids[topic], partition): sorted((gids[g], o) for g, o in groups.items())
                   for (topic, partition), groups in committed.items() if topic in tids and groups}
        if any(not 0 <= p < PART_KEY for _, p in [*parts, *parts_c, *commits]):
            raise HistoryError(f"an event names a partition outside 0..{PART_KEY - 1}; check with --engine python")
        return Facts(complete=parts, topic_complete=by_topic, committed=commits, complete_c=parts_c,
                     topic_complete_c=by_topic_c)


def topic_partitions(*completes: dict[Part, bool]) -> dict[str, list[Part]]:
    """Per topic, the partitions any read-back has a final-read event for (the reference's topic_partitions)."""
    found: dict[str, list[Part]] = {}
    for part in sorted(set().union(*completes)):
        found.setdefault(part[0], []).append(part)
    return found


def topic_complete(topic: str, done: dict[Part, bool], parts: dict[str, list[Part]]) -> bool:
    """Every partition of the topic (``topic_partitions``) had a complete read-back in ``done``."""
    return bool(parts.get(topic)) and all(done.get(p, False) for p in parts[topic])


@dataclass(frozen=True)
class Pipeline:
    """An exactly-once pipeline of the run, in ids (``pipeline`` events): what judges its input."""

    gid: int | None  # its consumer group (None: no commit event names it, so nothing is below its offsets)
    input_tid: int | None  # its input topic (None: no message names it)
    output_complete: bool  # the read_committed read-back of its output topic was complete


@dataclass(frozen=True)
class Scope:
    """What a history holds beyond plain sends and reads: the columns the judge must work out.

    A history without transactions or pipelines pays nothing for them: its
    plan has no transaction column, aggregate or join.
    """

    txn: bool = False  # some send names a transaction
    pipelines: tuple[Pipeline, ...] = ()


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
        "_topic_complete_c": _lit_map({t: F.lit(d) for t, d in facts.topic_complete_c.items()},
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


def complete_sql(facts: Facts, committed: bool = False) -> str:
    """SQL: a row's (tid, partition) had a complete final read (``committed``: read_committed read-back), as
    runs of partitions per topic.

    Compared, not looked up: observed metrics evaluate every row, and a few
    comparisons cost less than a set or a map per row.
    """
    done: dict[int, list[int]] = {}
    for (tid, partition), complete in sorted((facts.complete_c if committed else facts.complete).items()):
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


def _verdicts(table: "DataFrame", facts: Facts, scope: Scope, codes: "DataFrame | None") -> "DataFrame":
    """The flags that follow from status, present, verifiable and the final-read count.

    ``verifiable`` (the send's partition, else its topic, had a complete final
    read) is worked out only for an acknowledged message not found: the rest
    do not need it, and a lookup per row costs.

    A transactional message (``txn`` not null) is looked for in the
    read_committed read-back (``present_c``, ``n_cfinal``) and is acknowledged
    only when its transaction committed (``code`` 0, from ``codes``: see
    ``txn_codes``); its other columns follow the reference's judge_ack,
    judge_transactions and aborted_read. Pipelines: see ``_pipeline_columns``.
    """
    from pyspark.sql import functions as F

    plain = f"""coalesce(CASE WHEN `partition` IS NOT NULL THEN {complete_sql(facts)}
                         ELSE try_element_at(_topic_complete, tid) END, false)"""
    if scope.txn:
        table = table.join(F.broadcast(codes), ["pid", "txn"], "left")
        acked = f"(status = {OK} AND (txn IS NULL OR code = 0))"
        seen, n_seen = "CASE WHEN txn IS NULL THEN present ELSE present_c END", \
            "CASE WHEN txn IS NULL THEN n_final ELSE n_cfinal END"
        missing = f"(txn IS NOT NULL AND status <> {FAIL} AND NOT present_c)"  # a member the committed read lacks
        verifiable = f"""CASE WHEN txn IS NULL AND status = {OK} AND NOT present THEN {plain}
                              WHEN {missing} THEN coalesce(
                                  CASE WHEN `partition` IS NOT NULL THEN {complete_sql(facts, committed=True)}
                                       ELSE try_element_at(_topic_complete_c, tid) END, false) END"""
        txn_columns = [
            "coalesce(txn IS NOT NULL AND n_committed > 0 AND NOT coalesce(code IN (0, 2), true), false) "
            "AS aborted_read",
            f"coalesce({missing}, false) AS txn_missing",
            f"coalesce({missing} AND NOT verifiable, false) AS txn_unverifiable",
        ]
    else:
        acked, seen, n_seen = f"status = {OK}", "present", "n_final"
        verifiable = f"CASE WHEN status = {OK} AND NOT present THEN {plain} END"
        txn_columns = ["CAST(NULL AS BIGINT) AS txn", "false AS aborted_read", "false AS txn_missing",
                       "false AS txn_unverifiable"]
    table = table.selectExpr("*", f"{verifiable} AS verifiable")
    helpers = {"present", "verifiable", "n_final", "_topic_complete", "_topic_complete_c", "_committed",
               "_committers", "present_c", "n_cfinal", "n_committed", "n_out", "out_multi", "final_off", "code"}
    return table.selectExpr(
        *[c for c in table.columns if c not in helpers],
        f"coalesce({acked} AND NOT {seen} AND verifiable, false) AS lost",
        f"coalesce({acked} AND NOT {seen} AND verifiable AND n_live > 0, false) AS lost_after_read",
        f"coalesce({acked} AND NOT {seen} AND NOT verifiable, false) AS lost_unverifiable",
        "n_sends = 0 AND n_live + n_final > 0 AS unexpected" if scope.pipelines else "n_sends = 0 AS unexpected",
        f"coalesce(status = {FAIL} AND {n_seen} > 0, false) AS failed_but_present",
        f"coalesce(status = {UNKNOWN_STATUS}, false) AS unknown",
        f"coalesce(status = {UNKNOWN_STATUS} AND {n_seen} > 0, false) AS unknown_found",
        *txn_columns,
        *_pipeline_columns(scope, acked),
    )


def _pipeline_columns(scope: Scope, acked: str) -> list[str]:
    """SQL: pipeline_lost, pipeline_duplicated, and per message how many pipelines left it unprocessed or
    unverifiable (the reference's judge_pipelines).

    An acknowledged input below the pipeline group's committed offset of its
    partition must have exactly one output record (``n_out`` positions); its
    offset is the ack's, else the lowest one the final read found it at
    (``final_off``).
    """
    if not scope.pipelines:
        return ["false AS pipeline_lost", "false AS pipeline_duplicated", "0 AS pipe_unprocessed",
                "0 AS pipe_unverifiable"]
    at = "coalesce(`offset`, final_off)"
    lost, unprocessed, unverifiable = [], [], []
    for p in scope.pipelines:
        if p.input_tid is None:
            continue
        upto = ("CAST(NULL AS BIGINT)" if p.gid is None else
                f"""CASE WHEN `partition` IS NOT NULL
                    THEN try_element_at(filter({_commits_at('tid', '`partition`')}, c -> c.g = {p.gid}), 1).o END""")
        applies = f"({acked} AND tid = {p.input_tid})"
        judged = f"({applies} AND {at} < {upto} AND n_out = 0)"
        unprocessed.append(f"CAST(coalesce({applies} AND ({at} IS NULL OR {upto} IS NULL OR {at} >= {upto}), false)"
                           " AS INT)")
        (lost if p.output_complete else unverifiable).append(f"coalesce({judged}, false)")
    inputs = sorted({p.input_tid for p in scope.pipelines if p.input_tid is not None})
    return [
        f"({' OR '.join(lost) or 'false'}) AS pipeline_lost",
        f"coalesce({acked} AND tid IN ({', '.join(map(str, inputs)) or 'NULL'}) AND out_multi, false) "
        "AS pipeline_duplicated",
        f"({' + '.join(unprocessed) or '0'}) AS pipe_unprocessed",
        f"({' + '.join(f'CAST({u} AS INT)' for u in unverifiable) or '0'}) AS pipe_unverifiable",
    ]


# --- by message ---------------------------------------------------------------------------------------


# The ``kind`` of a tagged row: a send's status (OK, FAIL, UNKNOWN_STATUS: >= 0), or one of these for a read: LIVE
# and FINAL, their read_committed forms (only with transactions: see ``Kinds``), or an OUTPUT row, a pipeline's output
# record in the read_committed read-back grouped with the input it was made from.
LIVE, FINAL, LIVE_C, FINAL_C, OUTPUT = -1, -2, -3, -4, -5
IS_SEND, IS_FINAL_C, IS_OUTPUT = "kind >= 0", f"kind = {FINAL_C}", f"kind = {OUTPUT}"


@dataclass(frozen=True)
class Kinds:
    """SQL: a tagged row is a live or a final read. Without transactions no read is tagged read_committed, and
    the tests are the plain equalities of before."""

    live: str
    final: str

    @staticmethod
    def of(scope: Scope) -> "Kinds":
        if scope.txn:
            return Kinds(f"kind IN ({LIVE}, {LIVE_C})", f"kind IN ({FINAL}, {FINAL_C})")
        return Kinds(f"kind = {LIVE}", f"kind = {FINAL}")


def tagged_rows(sends: "DataFrame", reads: "DataFrame", scope: Scope = Scope()) -> "DataFrame":
    """Sends and reads of kchaos messages in one table, for one grouping by message.

    Seven columns, as narrow as the grouping allows (every row is shuffled):
    ``kind`` is a send's status or a read's kind, ``aux`` a send's rank (its
    line key ``_key``, with OK_RANK set on an ok line) or a read's consumer
    group id. With transactions an eighth, the send's ``txn``; with pipelines,
    OUTPUT rows: each output record the read_committed read-back found, keyed
    by its input's (pid, seq), at its own position.
    """
    txn = ["txn"] if scope.txn else []
    read_kind = (f"""CASE WHEN final THEN CASE WHEN committed THEN {FINAL_C} ELSE {FINAL} END
                          ELSE CASE WHEN committed THEN {LIVE_C} ELSE {LIVE} END END""" if scope.txn
                 else f"CASE WHEN final THEN {FINAL} ELSE {LIVE} END")
    no_txn = ["CAST(NULL AS BIGINT) AS txn"] if scope.txn else []
    tagged = sends.selectExpr(
        "pid", "seq", "status AS kind", f"CASE WHEN status = {OK} THEN _key | {OK_RANK}L ELSE _key END AS aux",
        "tid", "`partition`", "`offset`", *txn,
    ).unionByName(reads.filter("pid IS NOT NULL").selectExpr(
        "pid", "seq", f"CAST({read_kind} AS TINYINT) AS kind", "CAST(gid AS BIGINT) AS aux", "tid", "`partition`",
        "`offset`", *no_txn,
    ))
    if scope.pipelines:
        tagged = tagged.unionByName(reads.filter("pid IS NOT NULL AND final AND committed AND fpid IS NOT NULL")
                                    .selectExpr("fpid AS pid", "fseq AS seq", f"CAST({OUTPUT} AS TINYINT) AS kind",
                                                "CAST(NULL AS BIGINT) AS aux", "tid", "`partition`", "`offset`",
                                                *no_txn))
    return tagged


# A send line's rank among its message's lines is its line key, plus this bit on an ok line: an
# acknowledgement is never downgraded (an ok line wins over unknown and fail), else the last line wins.
# Line keys are positions in a file, far below it.
OK_RANK = 2 ** 62


def _common(scope: Scope) -> list[str]:
    """The aggregates both message tables share: the winning send line, and read counts."""
    k = Kinds.of(scope)
    winner = [f"max_by({c}, aux) FILTER (WHERE {IS_SEND}) AS {c}"
              for c in ("tid", "`partition`", "`offset`", *(["txn"] if scope.txn else []))]
    return [f"count_if({IS_SEND}) AS n_sends", f"max(aux) FILTER (WHERE {IS_SEND}) & {OK_RANK - 1}L AS send_key",
            f"max_by(kind, aux) FILTER (WHERE {IS_SEND}) AS status", *winner,
            f"count_if({k.live}) AS n_live",
            f"count_if({k.live} AND aux IS NULL) AS n_live_ungrouped",
            f"count_if({k.final}) AS n_final",
            *([f"count_if(kind IN ({LIVE_C}, {FINAL_C})) AS n_committed"] if scope.txn else [])]


_CARRIED = ("pid", "seq", "n_sends", "send_key", "status", "tid", "`partition`", "`offset`", "n_live",
            "n_live_ungrouped", "n_final", "_topic_complete", "_topic_complete_c", "_committed")


def _scope_columns(scope: Scope) -> list[str]:
    """The columns the verdicts need of a message table beyond ``_CARRIED``, per scope (both tables name them
    alike)."""
    return (["txn", "n_committed", "n_cfinal", "present_c"] if scope.txn else []) + (
        ["n_out", "out_multi", "final_off"] if scope.pipelines else [])


def fast_messages(tagged: "DataFrame", facts: Facts, ranges: Ranges | None = None, scope: Scope = Scope(),
                  codes: "DataFrame | None" = None) -> "DataFrame":
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

    With transactions, the read_committed final reads are counted too: an
    unambiguous message's are in its one final-read partition, so whether its
    partition holds them follows from the count. With pipelines, the smallest
    and largest output position tell one output record from several.

    Columns: those of MESSAGE_COLUMNS, with ``skipped_mask``/``redelivered_mask``
    (bit g: group id g) in place of the arrays, plus ``ambiguous``.
    """
    k = Kinds.of(scope)
    final = f"FILTER (WHERE {k.final})"
    grouped = group_by(tagged, MESSAGE_KEY, ranges, [
        *_common(scope),
        *[f"{fn}({c}) {final} AS f_{c.strip('`')}_{fn}" for c in ("tid", "`partition`", "`offset`")
          for fn in ("min", "max")],
        f"bit_or(shiftleft(1L, CAST(aux AS INT))) FILTER (WHERE {k.live} AND aux IS NOT NULL) AS live_mask",
        *([f"count_if({IS_FINAL_C}) AS n_cfinal", f"min(`offset`) FILTER (WHERE {IS_FINAL_C}) AS cf_offset_min"]
          if scope.txn else []),
        *([f"{fn}({c}) FILTER (WHERE {IS_OUTPUT}) AS o_{c.strip('`')}_{fn}" for c in ("tid", "`partition`", "`offset`")
           for fn in ("min", "max")] + [f"count_if({IS_OUTPUT}) AS n_out"] if scope.pipelines else []),
    ])
    maps = _maps(facts)
    # what the groups must have been handed: a transactional message only where read_committed readers saw it
    # (in the one final-read partition of an unambiguous message)
    read_back, lowest = (("CASE WHEN txn IS NULL THEN n_final > 0 ELSE n_cfinal > 0 END",
                          "CASE WHEN txn IS NULL THEN f_offset_min ELSE cf_offset_min END") if scope.txn
                         else ("n_final > 0", "f_offset_min"))
    one_partition = "(f_tid_min = f_tid_max AND f_partition_min = f_partition_max)"
    one = f"({one_partition} AND f_offset_min = f_offset_max)"
    in_partition = "f_tid_min = tid AND (`partition` IS NULL OR f_partition_min = `partition`)"
    extra = {
        "txn": "txn", "n_committed": "n_committed", "n_cfinal": "n_cfinal",
        "present_c": f"coalesce(n_cfinal > 0 AND {in_partition}, false) AS present_c",
        "n_out": "n_out",
        "out_multi": "n_out > 0 AND NOT (o_tid_min = o_tid_max AND o_partition_min = o_partition_max "
                     "AND o_offset_min = o_offset_max) AS out_multi",
        "final_off": "CASE WHEN n_final > 0 AND f_tid_min = tid AND f_partition_min = `partition` THEN f_offset_min "
                     "END AS final_off",
    }
    table = grouped.select("*", *[m.alias(name) for name, m in maps.items()]).selectExpr(
        *_CARRIED,
        *[extra[c] for c in _scope_columns(scope)],
        f"n_final > 0 AND NOT {one} AS duplicated",
        f"coalesce(n_final > 0 AND {in_partition}, false) AS present",
        f"""coalesce({ACKED_AT} AND NOT coalesce(n_final > 0 AND {one} AND f_tid_min = tid
                                                   AND f_partition_min = `partition` AND f_offset_min = `offset`,
                                                   false), false) AS unconfirmed""",
        # the groups that committed this partition at all, less those that read the message live, come first:
        # usually none is left, and the offsets need not be looked at
        f"""CASE WHEN {read_back}
                  AND (coalesce(try_element_at(_committers, f_tid_min * {PART_KEY} + f_partition_min), 0L)
                       & ~coalesce(live_mask, 0L)) <> 0
            THEN aggregate(
                filter({_commits_at('f_tid_min', 'f_partition_min')}, c -> {lowest} < c.o),
                0L, (acc, c) -> acc | shiftleft(1L, c.g)) & ~coalesce(live_mask, 0L)
            ELSE 0L END AS skipped_mask""",
        """CASE WHEN bit_count(coalesce(live_mask, 0L)) = 1 AND n_live - n_live_ungrouped > 1 THEN live_mask
                ELSE 0L END AS redelivered_mask""",
        f"""(n_final > 0 AND NOT {one_partition})
            OR (bit_count(coalesce(live_mask, 0L)) > 1
                AND n_live - n_live_ungrouped > bit_count(coalesce(live_mask, 0L))) AS ambiguous""",
    )
    return _verdicts(table, facts, scope, codes)


def mask_groups(mask: str) -> str:
    """SQL: the group ids of a bit mask, ascending."""
    return f"filter(sequence(0, {MAX_MASK_GROUPS - 1}), g -> (shiftright({mask}, g) & 1L) = 1L)"


def from_fast(fast: "DataFrame") -> "DataFrame":
    """The unambiguous rows of ``fast_messages`` in the MESSAGE_COLUMNS layout."""
    return fast.filter("NOT ambiguous").selectExpr(
        *[c for c in MESSAGE_COLUMNS if c not in ("skipped", "redelivered")],
        *[f"CASE WHEN {c}_mask = 0 THEN CAST(array() AS array<int>) ELSE {mask_groups(f'{c}_mask')} END AS {c}"
          for c in ("skipped", "redelivered")])


def exact_messages(tagged: "DataFrame", facts: Facts, ranges: Ranges | None = None, scope: Scope = Scope(),
                   codes: "DataFrame | None" = None) -> "DataFrame":
    """One row per message with set-valued aggregates: right for every message, but sort-based and slow.

    Used for the ambiguous messages of ``fast_messages`` (their rows only),
    or for all of them when there are too many consumer groups for a mask.
    """
    k = Kinds.of(scope)
    positions = "collect_set(struct(tid, `partition`, `offset`))"
    grouped = group_by(tagged, MESSAGE_KEY, ranges, [
        *_common(scope),
        f"{positions} FILTER (WHERE {k.final}) AS finals",
        f"collect_list(CAST(aux AS INT)) FILTER (WHERE {k.live}) AS live_groups",
        *([f"{positions} FILTER (WHERE {IS_FINAL_C}) AS cfinals"] if scope.txn else []),
        *([f"{positions} FILTER (WHERE {IS_OUTPUT}) AS outs"] if scope.pipelines else []),
    ])
    maps = _maps(facts)

    def held(finals: str) -> str:
        return f"""CASE WHEN `partition` IS NOT NULL
                   THEN exists({finals}, f -> f.tid = tid AND f.`partition` = `partition`)
                   ELSE exists({finals}, f -> f.tid = tid) END"""

    extra = {
        "txn": "txn", "n_committed": "n_committed", "n_cfinal": "size(cfinals) AS n_cfinal",
        "present_c": f"{held('cfinals')} AS present_c",
        "n_out": "size(outs) AS n_out", "out_multi": "size(outs) > 1 AS out_multi",
        "final_off": "array_min(transform(filter(finals, f -> f.tid = tid AND f.`partition` = `partition`), "
                     "f -> f.`offset`)) AS final_off",
    }
    # what the groups must have been handed: a transactional message only where read_committed readers saw it
    handed = "CASE WHEN txn IS NULL THEN finals ELSE cfinals END" if scope.txn else "finals"
    table = grouped.select("*", *[m.alias(name) for name, m in maps.items()]).selectExpr(
        *_CARRIED,
        *[extra[c] for c in _scope_columns(scope)],
        "size(finals) > 1 AS duplicated",
        f"{held('finals')} AS present",
        f"""coalesce({ACKED_AT} AND NOT coalesce(size(finals) = 1 AND finals[0].tid = tid
                                                   AND finals[0].`partition` = `partition`
                                                   AND finals[0].`offset` = `offset`, false), false) AS unconfirmed""",
        f"""array_sort(array_distinct(filter(
               flatten(transform({handed}, f -> transform(
                   filter({_commits_at('f.tid', 'f.`partition`')}, c -> f.`offset` < c.o), c -> c.g))),
               g -> NOT array_contains(live_groups, g)))) AS skipped""",
        "array_sort(array_distinct(filter(live_groups, g -> size(filter(live_groups, h -> h = g)) > 1))) "
        "AS redelivered",
    )
    return _verdicts(table, facts, scope, codes).select(*MESSAGE_COLUMNS)


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
    without final reads confirms none: then all of them).
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
    aborted_read: int = 0
    # winning transactional sends naming a partition the read_committed read-back did not read to the end (or left
    # no final-read event for)
    outside_complete_c: int = 0
    pipeline_lost: int = 0
    pipeline_duplicated: int = 0
    pipeline_unprocessed: int = 0
    pipeline_unverifiable: int = 0

    def __add__(self, other: "MessageCounts") -> "MessageCounts":
        return MessageCounts(**{f: getattr(self, f) + getattr(other, f) for f in MessageCounts.__dataclass_fields__})


FLAGS = ("lost", "lost_after_read", "lost_unverifiable", "duplicated", "unexpected", "failed_but_present", "unknown",
         "unknown_found", "aborted_read", "pipeline_lost", "pipeline_duplicated")
SCOPED = ("aborted_read", "pipeline_lost", "pipeline_duplicated")  # always false without transactions and pipelines

# SQL: a row of the message table shows an anomaly (and is kept for the examples); per layout
# ("unconfirmed" rows are kept too: the position table needs their acks; so are the members of transactions
# the read_committed read-back lacks, for torn_transaction)
FAST_FINDINGS = " OR ".join([*FLAGS, "skipped_mask <> 0", "redelivered_mask <> 0", "ambiguous", "unconfirmed",
                             "txn_missing"])
EXACT_FINDINGS = " OR ".join([*FLAGS, "size(skipped) > 0", "size(redelivered) > 0", "unconfirmed", "txn_missing"])
POSITION_FINDINGS = "divergent OR foreign"


def message_metrics(skipped: str, redelivered: str, complete: str, scope: Scope, counted: str = "true",
                    complete_c: str = "false") -> list[str]:
    """Aggregates over the message table, counting the rows where ``counted`` holds.

    Written without FILTER clauses, which observed metrics refuse; the
    partition range covers every row. Rows with a send partition outside
    ``complete`` (complete_sql) are only counted: the few histories that have
    any look for those partitions afterwards, so that no check pays for a
    set built per row. The counts of transactions and pipelines only where
    the scope has them (``MessageCounts`` has them 0 otherwise); so with
    ``complete_c`` (complete_sql of the read_committed read-back) for the
    transactional sends.
    """
    def when(value: str) -> str:
        return f"CASE WHEN {counted} THEN {value} END"

    scoped = scope.txn or bool(scope.pipelines)
    return [
        f"coalesce(sum({when('n_sends')}), 0) AS sent",
        f"count_if({counted} AND n_sends > 0) AS distinct_sent",
        f"count_if({counted} AND status = {OK}) AS acked",
        f"count_if({counted} AND status = {FAIL}) AS failed",
        *[f"count_if({counted} AND {flag}) AS {flag}" for flag in FLAGS if scoped or flag not in SCOPED],
        f"coalesce(sum({when(skipped)}), 0) AS consumer_skipped",
        f"coalesce(sum({when(redelivered)}), 0) AS consumer_redelivered",
        f"count_if({counted} AND status = {OK} AND `partition` IS NULL) AS no_partition",
        f"coalesce(sum({when('n_live_ungrouped')}), 0) AS ungrouped_live_reads",
        f"count_if({counted} AND n_sends > 0 AND {outside_complete_sql(complete)}) AS outside_complete",
        *([f"count_if({counted} AND n_sends > 0 AND txn IS NOT NULL AND {outside_complete_sql(complete_c)}) "
           "AS outside_complete_c"] if scope.txn else []),
        *([f"coalesce(sum({when('pipe_unprocessed')}), 0) AS pipeline_unprocessed",
           f"coalesce(sum({when('pipe_unverifiable')}), 0) AS pipeline_unverifiable"] if scope.pipelines else []),
        "min(`partition`) AS partition_min", "max(`partition`) AS partition_max",
    ]


def fast_message_metrics(complete: str, scope: Scope, complete_c: str = "false") -> list[str]:
    """``message_metrics`` of ``fast_messages``: the unambiguous rows, and how many are ambiguous."""
    return [*message_metrics("bit_count(skipped_mask)", "bit_count(redelivered_mask)", complete, scope,
                             "NOT ambiguous", complete_c),
            "count_if(ambiguous) AS ambiguous"]


def exact_message_metrics(complete: str, scope: Scope, complete_c: str = "false") -> list[str]:
    """``message_metrics`` of rows in the MESSAGE_COLUMNS layout (none ambiguous)."""
    return [*message_metrics("size(skipped)", "size(redelivered)", complete, scope, complete_c=complete_c),
            "0L AS ambiguous"]


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
    # fills the cache; unlike count(), no last stage to add up the rows (a job of its own under adaptive execution)
    kept.write.format("noop").mode("overwrite").save()
    row = dict(seen.get)
    low, high = row.get("partition_min"), row.get("partition_max")
    if (low is not None and low < 0) or (high is not None and high >= PART_KEY):
        kept.unpersist()
        raise HistoryError(f"a partition number outside 0..{PART_KEY - 1} ({low}..{high}); "
                           "check with --engine python")
    return kept, row


def message_counts(row: dict[str, Any]) -> MessageCounts:
    """The counts of a ``message_metrics`` row."""
    return MessageCounts(**{f: row[f] for f in MessageCounts.__dataclass_fields__ if f in row})


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


# --- by transaction -----------------------------------------------------------------------------------

# SQL over a txns row (outcome, intent: OUTCOME_CODES, INTENT_CODES): 0 committed, 1 aborted, 2 unknown after the
# application asked to commit or with no intent field (it may have committed), 3 unknown otherwise (it never asked to
# commit). A transaction with sends but no txns line is unknown too, and may have committed (the reference's
# may_commit).
TXN_CODE = ("CAST(CASE outcome WHEN 0 THEN 0 WHEN 1 THEN 1 ELSE "
            f"CASE WHEN intent IN (0, {INTENT_UNKNOWN_CODE}) THEN 2 ELSE 3 END END AS TINYINT)")
COMMITTED_CODE, ABORTED_CODE = 0, 1


def txn_codes(txns: "DataFrame | None", spark: "SparkSession") -> "DataFrame":
    """(pid, txn, code) per transaction of txns.jsonl: its last line wins (none: no rows)."""
    from pyspark.sql import functions as F

    if txns is None:
        return literal_table(spark, [("pid", "int"), ("txn", "bigint"), ("code", "tinyint")], [])
    return txns.groupBy("pid", "txn").agg(F.expr(f"max_by({TXN_CODE}, _key) AS code"))


def transaction_table(txns: "DataFrame | None", members: "DataFrame", missing: "DataFrame",
                      ranges: Ranges | None = None) -> "DataFrame":
    """One row per transaction, of txns.jsonl or named by a winning send: its outcome code, its members and how
    many the read_committed read-back lacks, and whether it is torn.

    ``members``: the winning sends (pid, seq, txn, status): the send lines
    themselves when no message was sent twice; ``missing``: the message
    table's ``txn_missing`` rows (pid, txn, txn_unverifiable). A transaction
    is torn when some of its members (sends not failed) are visible and some
    missing, and every missing one's partition was read back in full (the
    reference's judge_transactions). Transactions are few next to their
    messages, and each side is counted before it is grouped with the others.
    """
    null_code, null_key = "CAST(NULL AS TINYINT) AS code", "CAST(NULL AS BIGINT) AS line"
    parts = [members.filter("txn IS NOT NULL").selectExpr("pid", "txn", "1 AS src", null_code, null_key,
                                                          f"status <> {FAIL} AS flag"),
             missing.selectExpr("pid", "txn", "2 AS src", null_code, null_key, "txn_unverifiable AS flag")]
    if txns is not None:
        parts.append(txns.selectExpr("pid", "txn", "0 AS src", f"{TXN_CODE} AS code", "_key AS line", "false AS flag"))
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    grouped = group_by(union, ("pid", "txn"), ranges, [
        "max_by(code, line) FILTER (WHERE src = 0) AS code",
        "count_if(src = 1 AND flag) AS members",
        "count_if(src = 2) AS missing",
        "count_if(src = 2 AND flag) AS unverifiable",
    ])
    return grouped.selectExpr("pid", "txn", "code", "members", "missing",
                              "missing > 0 AND members > missing AND unverifiable = 0 AS torn")


# Aggregates of ``transaction_table``: the counts of results.json by outcome, and the torn transactions.
TXN_METRICS = [f"count_if(code = {COMMITTED_CODE}) AS txns_committed",
               f"count_if(code = {ABORTED_CODE}) AS txns_aborted",
               f"count_if(code IS NULL OR code > {ABORTED_CODE}) AS txns_unknown",
               "count_if(torn) AS torn_transaction"]


def outcome_name(code: int | None) -> str:
    """A transaction's outcome as txns.jsonl words it."""
    return OUTCOME_CODES[min(code, 2)] if code is not None else OUTCOME_CODES[2]
