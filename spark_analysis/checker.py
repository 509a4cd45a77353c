"""The Spark checker: a run's history in, the same results.json as the reference checker out.

The stages, and the jobs they run (only aggregates come back to the driver):

1. reader: by default sends.jsonl and reads.jsonl are converted to their
   Parquet caches first (columnar.py, cache.py; only when stale, before
   Spark starts, with Arrow, every line held to the reference reader's
   rules; on a cluster, once the session is up, by its executors, one task
   per range of lines: ranged.py), and Spark reads those with names already as ids; txns.jsonl too,
   once the events are read (by the driver, with the reference's reader).
   Or (``history_format="json"``, or a cache that cannot be written) Spark
   parses the JSON lines itself (reader.py: one job parses and checks every
   file; names are given ids in one more small job).
2. judge: one job builds the message table (one shuffle by (pid, seq)),
   counts it (observed metrics) and caches only its findings, with the
   acks their own final reads do not confirm; the few ambiguous messages are
   judged again from their own rows. One more job does the same for the
   position table (one shuffle by (tid, partition, offset) of the reads and
   those unconfirmed acks); one runs the reorder window over every ack (the
   acknowledged send lines themselves unless some message was sent twice),
   unless the conversion proved them in order (ack_order.py).
   With transactions, the message table also judges each transactional
   message against the read_committed read-back and its transaction's
   outcome (a broadcast join with txns.jsonl), and keeps the members that
   read-back lacks; one more job groups those, the members and txns.jsonl by
   transaction (counts by outcome, torn transactions). Pipelines add their
   output records to the message grouping, keyed by the input they name.
   Hanging transactions come from the events, in the driver.
3. examples, only when something was found: one ranking job, a few small
   lookups, and the lines shown read back from the JSON lines.
4. anomaly_ranges, only when something is lost, duplicated or divergent: one
   job places the cached findings in time (anomaly_ranges.py).

Counts, ``valid``, notes and examples follow checkers/reference.py exactly;
tests/test_spark_checker.py holds the two to the same results.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalogue.anomalies import ANOMALIES, COUNTS
from checkers.anomalies import (Promises, judgement_notes, promises_from_scenario, repeated_sends_note,
                                results_document, transaction_notes)
from checkers.polls import SEND_ANOMALY, SEQUENCE_ANOMALIES
from checkers.reference import hanging_partitions
from checkers.series import series_document
from rundir.documents import fault_windows, pipelines, read_scenario
from rundir.layout import RunDir, require_history
from rundir.lines import HistoryError

from spark_analysis import examples as ex
from spark_analysis.anomaly_ranges import anomaly_ranges
from spark_analysis.breakdown import spark_breakdown
from spark_analysis.polls import nonmonotonic_sends, poll_findings
from spark_analysis.shares import no_shares, share_findings
from spark_analysis.encode import MAX_MASK_GROUPS, Encoded, Names, collect_names, encode, no_reads
from spark_analysis.judge import (BYPASS_PARTIAL, EXACT_FINDINGS, FAST_FINDINGS, POSITION_FINDINGS, TXN_METRICS, Facts,
                                  MessageCounts, Pipeline, PositionCounts, Scope, acked, acked_lines, broadcast_if_few,
                                  complete_sql, exact_message_metrics, exact_messages, fast_message_metrics,
                                  fast_messages, from_fast, message_counts, observed, outside_complete_sql,
                                  position_metrics, position_table, reordered_table, sql_conf, tagged_rows,
                                  topic_complete, topic_partitions, transaction_table, txn_codes)
from spark_analysis import columnar_reader, reader as json_reader
from spark_analysis.cache import ParquetFile
from spark_analysis.columnar_reader import conversion_tasks, convert_history
from spark_analysis.reader import SparkHistory
from spark_analysis.session import (connect_session, converts_on_executors, end_session, history_bytes, master_of,
                                    master_url, remote_url, spark_session)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CHECKER = "spark"
# the counts of transaction_table's aggregates (TXN_METRICS' ``... AS <count>``)
TXN_COUNTS = tuple(metric.rsplit(" AS ", 1)[1] for metric in TXN_METRICS)
INPUT_FORMATS = ("parquet", "json")
INPUT_ENV = "KCHAOS_SPARK_INPUT"


def check_run(run_dir: Path, spark: "SparkSession | None" = None, spark_master: str | None = None,
              history_format: str | None = None) -> dict[str, Any]:
    """Check RUN/history under the promises of RUN/scenario.yaml (or none, noted), on Spark.

    Uses ``spark`` if given, else the active session, else starts one
    (local mode on every core, or ``spark_master``) and stops it afterwards.
    ``history_format`` (else KCHAOS_SPARK_INPUT, else "parquet"): "parquet"
    converts the JSON lines to their Parquet caches first (when stale) and
    Spark reads those, or the JSON lines when a cache cannot be written;
    "json" has Spark parse the JSON lines itself.
    """
    history_dir = run_dir / "history"
    require_history(history_dir)  # the cheap checks come before Spark starts
    parquet = input_format(history_format) == "parquet"
    own = False
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        own = spark is None
        if own and (remote := remote_url(spark_master)) is not None:
            # a Spark Connect session starts nothing: it is opened first, and its server's master decides who
            # converts
            spark = connect_session(remote, history_bytes(history_dir))
    # this process converts before an in-process session starts; a cluster's executors once the session is up
    early = parquet and not converts_on_executors(master_of(spark) if spark else master_url(spark_master))
    files = convert_history(history_dir) if early else None
    if spark is None:
        spark = spark_session(spark_master, history_bytes=history_bytes(history_dir))
    broken = True
    try:
        if parquet and not early:
            files = convert_history(history_dir, conversion_tasks(spark))
        history = read_history(spark, history_dir, files)
        try:
            promises, note = promises_from_scenario(read_scenario(RunDir(run_dir)))
            results = judge_history(spark, history, promises)
        finally:
            history.unpersist()
        broken = False
    finally:
        if own:
            end_session(spark, broken)
    if note:
        results["notes"].insert(0, note)
    return results


def partitions_of(table: "DataFrame", where: str) -> set[tuple[int, int]]:
    """The (tid, partition) of the rows where ``where`` holds (few: a job's worth of distinct pairs)."""
    return {(r["tid"], r["partition"]) for r in table.filter(where).select("tid", "partition").distinct().collect()}


def input_format(history_format: str | None = None) -> str:
    """"parquet" or "json": the argument, else KCHAOS_SPARK_INPUT, else "parquet"."""
    chosen = history_format or os.environ.get(INPUT_ENV) or "parquet"
    if chosen not in INPUT_FORMATS:
        raise HistoryError(f"unknown history format {chosen!r} ({INPUT_ENV}); choose one of {', '.join(INPUT_FORMATS)}")
    return chosen


def read_history(spark: "SparkSession", history_dir: Path,
                 files: "dict[str, ParquetFile | None] | None") -> SparkHistory:
    """From the Parquet caches when there are ``files``, else from the JSON lines."""
    if files is not None:
        history = columnar_reader.read_history(spark, history_dir, files)
        if history is not None:
            return history
    return json_reader.read_history(spark, history_dir)


def check(spark: "SparkSession", history_dir: Path, promises: Promises,
          history_format: str | None = None) -> dict[str, Any]:
    """Judge RUN/history under the given promises (the reference's ``check``, from files)."""
    parquet = input_format(history_format) == "parquet"
    files = columnar_reader.convert_history(history_dir, conversion_tasks(spark)) if parquet else None
    history = read_history(spark, history_dir, files)
    try:
        return judge_history(spark, history, promises)
    finally:
        history.unpersist()


def judge_history(spark: "SparkSession", history: SparkHistory, promises: Promises) -> dict[str, Any]:
    """The results.json dict for a history read by ``read_history``."""
    from pyspark import StorageLevel

    notes = list(history.notes)
    assert history.sends.records is not None
    reads = history.reads.records if history.reads is not None else None
    txns = history.txns.records if history.txns is not None else None
    pipes = pipelines(history.events)
    if history.names is not None:  # read from the Parquet caches: already encoded
        names = history.names
        enc = Encoded(history.sends.records, reads if reads is not None else no_reads(spark), names, txns)
    else:
        names = collect_names(history.sends.records, reads, txns,
                              {g for gs in history.committed.values() for g in gs})
        enc = encode(spark, history.sends.records, reads, txns, names, sources=bool(pipes))
    facts = Facts.of(names, history.complete, history.committed, history.complete_committed)
    scope = scope_of(history, names, pipes)
    ranges = None if history.ranges is None else {  # ids run from 0; the rest as the Parquet statistics say
        **history.ranges, "pid": (0, len(names.producers) - 1), "tid": (0, len(names.topics) - 1)}
    tagged = tagged_rows(enc.sends, enc.reads, scope)
    codes = txn_codes(enc.txns, spark) if scope.txn else None
    complete, complete_c = complete_sql(facts), complete_sql(facts, committed=True)
    cached = []
    try:
        fast_mode = len(names.groups) <= MAX_MASK_GROUPS
        with sql_conf(spark, BYPASS_PARTIAL, "true"):  # the plan is made when persist() is called
            if fast_mode:
                table = fast_messages(tagged, facts, ranges, scope, codes)
                found, row = observed(table, fast_message_metrics(complete, scope, complete_c), FAST_FINDINGS)
            else:  # too many consumer groups for a bit mask: every message the exact way
                table = exact_messages(tagged, facts, ranges, scope, codes)
                found, row = observed(table, exact_message_metrics(complete, scope, complete_c), EXACT_FINDINGS)
        cached.append(found)
        mc, ambiguous = message_counts(row), int(row["ambiguous"])
        if not fast_mode:
            messages = found
        elif ambiguous:
            keys = found.filter("ambiguous").select("pid", "seq")
            rows = tagged.join(broadcast_if_few(keys, ambiguous), ["pid", "seq"], "left_semi")
            exact = exact_messages(rows, facts, ranges, scope, codes).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(exact)
            mc = mc + message_counts(exact.selectExpr(*exact_message_metrics(complete, scope, complete_c))
                                     .collect()[0].asDict())
            messages = from_fast(found).unionByName(exact)
        else:
            messages = from_fast(found)
        repeats = mc.sent - mc.distinct_sent
        if repeats:
            notes.append(repeated_sends_note(repeats))
        # the reorder window and the examples see every ack; a message sent twice has a winning line: only then
        # must the acks come from the message table
        if not repeats:
            acks = acked_lines(enc.sends)
        else:
            acks = acked(table).persist(StorageLevel.MEMORY_AND_DISK)  # reorder and examples both read it
            cached.append(acks)
        unconfirmed = acked(messages.filter("unconfirmed"))  # from the cached findings: few rows
        with sql_conf(spark, BYPASS_PARTIAL, "true"):
            positions, row = observed(position_table(enc.reads, unconfirmed, ranges), position_metrics(complete),
                                      POSITION_FINDINGS)
        cached.append(positions)
        pc = PositionCounts.of(row)
        reordered, out_of_order = None, 0  # the conversion proved the acks in order: none is reordered
        if not history.acks_ordered:
            reordered = reordered_table(acks).persist(StorageLevel.MEMORY_AND_DISK)  # few rows; examples use them
            cached.append(reordered)
            out_of_order = reordered.count()

        # transactions: counted by outcome, and torn ones found, from the winning sends (the send lines when no
        # message was sent twice) and the members the read_committed read-back lacks (cached findings)
        members = (table if repeats else enc.sends).select("pid", "seq", "txn", "status")
        missing = messages.filter("txn_missing").select("pid", "seq", "txn", "txn_unverifiable")
        tc = {name: 0 for name in TXN_COUNTS}
        torn: list[dict[str, Any]] = []
        if scope.txn or enc.txns is not None:
            if not scope.txn:  # a txns.jsonl, but no send in a transaction
                members, missing = members.filter("false"), missing.filter("false")
            torn_rows, row = observed(transaction_table(enc.txns, members, missing, ranges), TXN_METRICS, "torn")
            cached.append(torn_rows)
            tc = {name: int(row[name]) for name in tc}
            if tc["torn_transaction"]:
                torn = [r.asDict() for r in torn_rows.orderBy("pid", "txn").limit(ex.MAX_EXAMPLES).collect()]
        hanging = hanging_partitions(history.events, promises.hanging_after_ms)
        backwards = None  # the conversion proved the acks in order: none went down in offset either
        if not history.acks_ordered:
            backwards = nonmonotonic_sends(acked_lines(enc.sends), enc.sends).persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(backwards)
        polls, poll_examples = poll_findings(spark, enc.reads, bool(history.complete_committed), history.reads,
                                             names) if pc.reads_live else ({}, {})
        shares, share_examples = share_findings(spark, history.shares, history.events, enc.reads, enc.sends, names,
                                                history.complete, ex.MAX_EXAMPLES)

        counts = spark_counts(mc, pc, tc, out_of_order, hanging, promises,
                              {SEND_ANOMALY: 0 if backwards is None else backwards.count(), **polls, **shares})

        # the partitions named outside the complete ones, looked for only when there are some (the reference's
        # incomplete_partitions); with repeated send lines the winning ones decide, from the message table; and
        # every partition the read_committed read-back did not read to the end, or left no final-read event for
        # where a transactional send names it (the reference's unread_committed)
        outside = outside_complete_sql(complete)
        named = (partitions_of(table if repeats else enc.sends, outside) if mc.outside_complete else set()) | (
            partitions_of(enc.reads, outside) if pc.outside_complete else set())
        parts = {(names.topics[t], p) for t, p in named} | set(history.complete)
        named_c = partitions_of(table if repeats else enc.sends,
                                f"txn IS NOT NULL AND {outside_complete_sql(complete_c)}"
                                ) if mc.outside_complete_c else set()
        unread_committed = sorted({(names.topics[t], p) for t, p in named_c} - history.complete_committed.keys())
        incomplete = sorted({p for p in parts if not history.complete.get(p, False)}
                            | {p for p, done in history.complete_committed.items() if not done}
                            | set(unread_committed))

        notes += judgement_notes(lost_unverifiable=mc.lost_unverifiable,
                                 unordered=0 if promises.ordered else out_of_order,
                                 no_partition=mc.no_partition, foreign_positions=pc.foreign,
                                 ungrouped_live_reads=mc.ungrouped_live_reads)
        notes += transaction_notes(txns_unknown=counts["txns_unknown"],
                                   pipeline_unprocessed=counts["pipeline_unprocessed"],
                                   pipeline_unverifiable=counts["pipeline_unverifiable"])

        if any(counts[a] for a in ANOMALIES):
            chosen = ex.smallest(ex.candidates(messages, positions, reordered if promises.ordered and out_of_order
                                               else None, backwards if counts[SEND_ANOMALY] else None))
            examples = ex.examples(spark, chosen, enc.reads, acks, history.sends, history.reads, names)
            examples["torn_transaction"] = ex.torn_examples(spark, torn, members, missing, names)
            examples["hanging_transaction"] = [hanging[p] for p in heapq.nsmallest(ex.MAX_EXAMPLES, hanging)]
            examples |= poll_examples | share_examples
        else:
            examples = {a: [] for a in ANOMALIES}

        windows = fault_windows(history.events)
        ranges, charged, ranged_seconds = anomaly_ranges(messages, positions, acks, enc, counts, windows)
        breakdown, acked_seconds = spark_breakdown(enc.sends, enc.reads, bool(repeats), messages, positions, names,
                                                   counts, set(history.complete) | set(history.complete_committed),
                                                   ranges, windows, charged, history.tallies)
        return results_document(CHECKER, counts, promises, history.cut_short, incomplete, examples, notes, ranges,
                                breakdown, series_document([*acked_seconds, *ranged_seconds]), unread_committed)
    finally:
        for df in cached:
            df.unpersist()


def spark_counts(mc: MessageCounts, pc: PositionCounts, tc: dict[str, int], out_of_order: int,
                 hanging: dict[Any, Any], promises: Promises,
                 sequences: dict[str, int] | None = None) -> dict[str, int]:
    """results.json's counts, in its order: each the message, position or transaction aggregate of its own name
    (judge.py's ``... AS <count>``), but for the few that combine several or come from the events, and the
    sequences' and the share group's (``sequences``: polls.py's and shares.py's counts; one not given is none)."""
    combined = {"unexpected": mc.unexpected + pc.foreign, "reordered": out_of_order if promises.ordered else 0,
                "hanging_transaction": len(hanging), "unknown_not_found": mc.unknown - mc.unknown_found}
    measured = {**{a: 0 for a in SEQUENCE_ANOMALIES}, **no_shares()[0], **asdict(mc), **asdict(pc), **tc,
                **combined, **(sequences or {})}
    return {name: int(measured[name]) for name in COUNTS}


def scope_of(history: SparkHistory, names: Names, pipes: list[tuple[str, str, str]]) -> Scope:
    """What the judge must work out beyond plain sends and reads: transactions, and each pipeline in ids."""
    parts = topic_partitions(history.complete, history.complete_committed)
    tids, gids = names.topic_ids(), names.group_ids()
    return Scope(txn=history.txn_sends, pipelines=tuple(
        Pipeline(gid=gids.get(group), input_tid=tids.get(input_topic),
                 output_complete=topic_complete(output_topic, history.complete_committed, parts))
        for group, input_topic, output_topic in pipes))
