"""The Spark checker: a run's history in, the same results.json as the reference checker out.

The stages, and the jobs they run (only aggregates come back to the driver):

1. reader: each file is parsed once, checked line by line and cached
   (one job per file; events are aggregated to per-partition facts).
2. judge: the message table (one shuffle by (producer, seq)) and the position
   table (one shuffle by (topic, partition, offset)) are built and cached,
   and counted (one job each); the reorder window counts out-of-order acks.
3. examples, only when something was found: one ranking job, a few small
   lookups, and one filtered text scan per file for the lines shown.

Counts, ``valid``, notes and examples follow checkers/reference.py exactly;
tests/test_spark_checker.py holds the two to the same results.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkers.anomalies import ANOMALIES, COUNTS, Promises, promises_from_scenario, results_document
from checkers.history import SENDS_FILE, HistoryError
from checkers.reference import SCENARIO_FILE, load_scenario

from spark_analysis import examples as ex
from spark_analysis.judge import (BYPASS_PARTIAL, acked, empty_reads, message_table, position_table,
                                  reordered_table, sql_conf, tallies)
from spark_analysis.reader import SparkHistory, read_history

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHECKER = "spark"


def check_run(run_dir: Path, spark: "SparkSession | None" = None, spark_master: str | None = None) -> dict[str, Any]:
    """Check RUN/history under the promises of RUN/scenario.yaml (or none, noted), on Spark.

    Uses ``spark`` if given, else the active session, else starts one
    (local mode on every core, or ``spark_master``) and stops it afterwards.
    """
    history_dir = run_dir / "history"
    if not history_dir.is_dir():  # the cheap checks come before Spark starts
        raise HistoryError(f"{history_dir}: no history directory")
    if not (history_dir / SENDS_FILE).is_file():
        raise HistoryError(f"{history_dir.name}/{SENDS_FILE}: missing")
    from spark_analysis.session import spark_session

    own = spark is None
    if spark is None:
        from pyspark.sql import SparkSession

        own = SparkSession.getActiveSession() is None
        size = sum(f.stat().st_size for f in history_dir.iterdir() if f.is_file())
        spark = spark_session(spark_master, history_bytes=size)
    try:
        history = read_history(spark, history_dir)
        try:
            promises, note = promises_from_scenario(load_scenario(run_dir / SCENARIO_FILE))
            results = judge_history(spark, history, promises)
        finally:
            history.unpersist()
    finally:
        if own:
            spark.stop()
    if note:
        results["notes"].insert(0, note)
    return results


def check(spark: "SparkSession", history_dir: Path, promises: Promises) -> dict[str, Any]:
    """Judge RUN/history under the given promises (the reference's ``check``, from files)."""
    history = read_history(spark, history_dir)
    try:
        return judge_history(spark, history, promises)
    finally:
        history.unpersist()


def judge_history(spark: "SparkSession", history: SparkHistory, promises: Promises) -> dict[str, Any]:
    """The results.json dict for a history read by ``read_history``."""
    from pyspark import StorageLevel

    notes = list(history.notes)
    sends = history.sends.records
    assert sends is not None
    reads = history.reads.records if history.reads is not None and history.reads.records is not None \
        else empty_reads(spark)
    cached = []
    try:
        with sql_conf(spark, BYPASS_PARTIAL, "true"):  # the plan is made when persist() is called
            messages = message_table(sends, reads, history.complete, history.committed) \
                .persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(messages)
        acks = acked(messages)
        with sql_conf(spark, BYPASS_PARTIAL, "true"):
            positions = position_table(reads, acks).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(positions)
        reordered = reordered_table(acks)
        mc, pc, out_of_order = tallies(messages, positions, reordered)
        repeats = mc.sent - mc.distinct_sent
        if repeats:
            notes.append(f"{repeats} send lines repeated an earlier (producer, seq); the last line of each was used")

        counts = {
            "sent": mc.sent,
            "acked": mc.acked,
            "failed": mc.failed,
            "indeterminate": mc.indeterminate,
            "reads_live": pc.reads_live,
            "reads_final": pc.reads_final,
            "lost": mc.lost,
            "lost_after_read": mc.lost_after_read,
            "duplicated": mc.duplicated,
            "unexpected": mc.unexpected + pc.foreign,
            "failed_but_present": mc.failed_but_present,
            "divergent": pc.divergent,
            "reordered": out_of_order if promises.ordered else 0,
            "consumer_skipped": mc.consumer_skipped,
            "consumer_redelivered": mc.consumer_redelivered,
            "unknown": mc.unknown,
            "unknown_found": mc.unknown_found,
            "unknown_not_found": mc.unknown - mc.unknown_found,
            "lost_unverifiable": mc.lost_unverifiable,
        }
        counts = {name: int(counts[name]) for name in COUNTS}

        parts = mc.send_partitions | pc.read_partitions | set(history.complete)
        incomplete = sorted(p for p in parts if not history.complete.get(p, False))

        # The reference's add_notes, in its order.
        if mc.lost_unverifiable:
            notes.append(f"{mc.lost_unverifiable} acknowledged messages were not found, but the final read of "
                         "their partition was incomplete: counted as lost_unverifiable, not lost")
        if out_of_order and not promises.ordered:
            notes.append(f"{out_of_order} acknowledged messages are out of seq order in their partition, but the "
                         "producers did not promise order: not counted as reordered")
        if mc.no_partition:
            notes.append(f"{mc.no_partition} acknowledged sends name no partition: judged against their whole topic")
        if pc.foreign:
            notes.append(f"{pc.foreign} positions hold a value kchaos did not write (no producer/seq): "
                         "counted as unexpected")
        if mc.ungrouped_live_reads:
            notes.append(f"{mc.ungrouped_live_reads} live reads name no consumer group: they count for "
                         "lost_after_read only, not for consumer_skipped or consumer_redelivered")

        if any(counts[a] for a in ANOMALIES):
            chosen = ex.smallest(ex.candidates(messages, positions, reordered if promises.ordered else None))
            examples = ex.examples(spark, chosen, reads, acks, history.sends, history.reads)
        else:
            examples = {a: [] for a in ANOMALIES}

        return results_document(CHECKER, counts, promises, history.cut_short, incomplete, examples, notes)
    finally:
        for df in cached:
            df.unpersist()

