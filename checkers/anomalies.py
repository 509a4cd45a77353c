"""The anomalies every kchaos checker reports, what the producers promised, what makes a run valid, and the notes.

Kept apart from the reference checker so that the Spark checker, the report
and the harness share one list of names, one set of definitions, one
validity rule (docs/architecture.md, "The catalogue") and one wording of every note.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from catalogue.anomalies import ANOMALIES as ANOMALIES, COUNTS as COUNTS  # re-exported for the checkers
from catalogue.anomalies import ANOMALY_INFO, ANOMALY_LIST, IF_IDEMPOTENT, IF_ORDERED, VIOLATION, with_severity
from catalogue.producer_settings import effective_producer, producer_client, producer_config
from rundir.documents import SCHEMA_VERSION

# The names, definitions and counts results.json holds are the catalogue's (docs/architecture.md, "The catalogue").
DEFINITIONS = {a.name: a.definition for a in ANOMALY_LIST}

# The one-line summary `kchaos check` prints, in this order: the tallies and the sends of unknown outcome, then the
# anomalies of each group.
SUMMARY = ("acked", "failed", "unknown", *(a.name for a in ANOMALY_LIST if a.summary == "main"))
TRANSACTION_SUMMARY = ("txns_committed", "txns_aborted", "txns_unknown",
                       *(a.name for a in ANOMALY_LIST if a.summary == "transactions"))


def summary_keys(counts: dict[str, int]) -> tuple[str, ...]:
    """The counts of the one-line summary: the transaction ones only for runs that had transactions."""
    if any(counts.get(k) for k in TRANSACTION_SUMMARY):
        return SUMMARY + TRANSACTION_SUMMARY
    return SUMMARY

# --- anomaly_ranges: where and when the victims sit -------------------------------------------------

# A fault's effect is bounded in time, so the victims of one fault form a time island: entries of one anomaly in
# one partition closer than RANGE_GAP_NS to the previous one are one range. Every message would be too large for
# results.json; the ranges say where and when each anomaly happened (forensics' causal chains, issue #20).
RANGE_ANOMALIES = tuple(a.name for a in ANOMALY_LIST if a.ranges)
RANGE_GAP_NS = 1_000_000_000


class RangeEntry(NamedTuple):
    """One victim before grouping: a lost message, a duplicated message in one partition, or a divergent position.

    ``ns``: the winning send's complete_ns (lost, duplicated), the earliest
    complete_ns of the acks at the position (divergent); None when unknown.
    """

    anomaly: str
    topic: str
    partition: int | None
    ns: int | None
    min_offset: int | None
    max_offset: int | None


def anomaly_ranges(entries: Iterable[RangeEntry]) -> list[dict[str, Any]]:
    """The time islands of the entries, per (anomaly, topic, partition), in ``ordered_ranges`` order.

    A new range starts where an entry's ns exceeds the previous one's by more
    than RANGE_GAP_NS; the entries without ns are one range of their own.
    """
    by_partition: dict[tuple[str, str, int | None], list[RangeEntry]] = defaultdict(list)
    for entry in entries:
        by_partition[(entry.anomaly, entry.topic, entry.partition)].append(entry)
    ranges = []
    for (anomaly, topic, partition), group in by_partition.items():
        islands: list[list[RangeEntry]] = []
        last_ns = 0
        for ns, entry in sorted(((e.ns, e) for e in group if e.ns is not None), key=lambda timed: timed[0]):
            if not islands or ns - last_ns > RANGE_GAP_NS:
                islands.append([])
            islands[-1].append(entry)
            last_ns = ns
        untimed = [e for e in group if e.ns is None]
        for island in islands + ([untimed] if untimed else []):
            offsets = [o for e in island for o in (e.min_offset, e.max_offset) if o is not None]
            ranges.append(range_record(anomaly, topic, partition, len(island), island[0].ns, island[-1].ns,
                                       min(offsets, default=None), max(offsets, default=None)))
    return ordered_ranges(ranges)


def range_record(anomaly: str, topic: str, partition: int | None, count: int, first_ns: int | None,
                 last_ns: int | None, min_offset: int | None, max_offset: int | None) -> dict[str, Any]:
    """One range as results.json lists it: one shape, in one key order, from both engines."""
    return {"anomaly": anomaly, "topic": topic, "partition": partition, "count": count, "first_ns": first_ns,
            "last_ns": last_ns, "min_offset": min_offset, "max_offset": max_offset}


def ordered_ranges(ranges: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """By anomaly (RANGE_ANOMALIES' order), topic, partition, then first_ns; a null partition or first_ns last."""
    return sorted(ranges, key=lambda r: (RANGE_ANOMALIES.index(r["anomaly"]), r["topic"],
                                         r["partition"] is None, r["partition"] or 0,
                                         r["first_ns"] is None, r["first_ns"] or 0))


# --- the notes: what the counts alone would hide, worded once for both checkers ---------------------

NO_SCENARIO_NOTE = "no scenario.yaml: assuming the producers promised neither idempotence nor order"
NO_PRODUCER_CONFIG_NOTE = ("scenario.yaml has no workload.producers.config: assuming librdkafka's defaults "
                           "(no idempotence, many requests in flight)")
CUT_SHORT_NOTE = "the run was cut short: no final read-back was recorded, so loss cannot be judged"


def repeated_sends_note(repeats: int) -> str:
    """The note when (producer, seq) pairs appear on several send lines."""
    return (f"{repeats} send lines repeated an earlier (producer, seq); an ok line wins over unknown and fail "
            "(an acknowledgement is never downgraded), else the last line")


def judgement_notes(*, lost_unverifiable: int, unordered: int, no_partition: int, foreign_positions: int,
                    ungrouped_live_reads: int) -> list[str]:
    """The notes on what could not be judged and what was judged leniently, in the order results.json lists them.

    ``unordered``: acknowledged messages out of seq order whose producers did
    not promise order (so not counted as reordered); ``foreign_positions``:
    positions holding a value kchaos did not write.
    """
    notes = []
    if lost_unverifiable:
        notes.append(f"{lost_unverifiable} acknowledged messages were not found, but the final read of "
                     "their partition was incomplete: counted as lost_unverifiable, not lost")
    if unordered:
        notes.append(f"{unordered} acknowledged messages are out of seq order in their partition, but the "
                     "producers did not promise order: not counted as reordered")
    if no_partition:
        notes.append(f"{no_partition} acknowledged sends name no partition: judged against their whole topic")
    if foreign_positions:
        notes.append(f"{foreign_positions} positions hold a value kchaos did not write (no producer/seq): "
                     "counted as unexpected")
    if ungrouped_live_reads:
        notes.append(f"{ungrouped_live_reads} live reads name no consumer group: they count for lost_after_read "
                     "only, not for consumer_skipped or consumer_redelivered")
    return notes


# librdkafka's transaction.timeout.ms and the broker's transaction.abort.timed.out.transaction.cleanup.interval.ms:
# an open transaction may hold back read_committed readers this long before the coordinator aborts it.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
DEFAULT_TXN_CLEANUP_INTERVAL_MS = 10_000
TXN_CLEANUP_SETTING = "transaction.abort.timed.out.transaction.cleanup.interval.ms"


def transaction_notes(*, txns_unknown: int, pipeline_unprocessed: int, pipeline_unverifiable: int) -> list[str]:
    """The notes on transactions whose outcome nobody knows and pipeline input that could not be judged."""
    notes = []
    if txns_unknown:
        notes.append(f"{txns_unknown} transactions ended with an unknown outcome (commit timed out or the process "
                     "died): their messages are neither lost when missing nor aborted_read when seen, unless the "
                     "application never asked to commit")
    if pipeline_unprocessed:
        notes.append(f"{pipeline_unprocessed} acknowledged pipeline inputs lie at or above the pipeline's committed "
                     "offset (not processed yet): not judged for pipeline_lost")
    if pipeline_unverifiable:
        notes.append(f"{pipeline_unverifiable} processed pipeline inputs have no output record, but the "
                     "read_committed read-back of the output topic was incomplete: not counted as pipeline_lost")
    return notes


@dataclass(frozen=True)
class Promises:
    """What the producers' configuration guarantees, which decides whether duplicates and reorders count.

    ``hanging_after_ms``: how long a transaction may keep a partition's last
    stable offset below its high watermark before the coordinator must have
    ended it (the producers' transaction timeout plus the broker's clean-up
    interval); longer is a hanging transaction.
    """

    idempotent: bool
    ordered: bool
    hanging_after_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS + DEFAULT_TXN_CLEANUP_INTERVAL_MS


def promises_from_scenario(scenario: dict[str, Any] | None) -> tuple[Promises, str | None]:
    """Promises of the producers of a resolved scenario.yaml, and a note when they had to be assumed.

    Idempotent: as the producers' client runs them (catalogue/producer_settings.py:
    librdkafka only when asked, the Java client by default), or the
    transactions workload (which implies it). Ordered: idempotent (both
    clients keep order across retries then), or one request in flight.
    """
    if scenario is None:
        return Promises(idempotent=False, ordered=False), NO_SCENARIO_NOTE
    hanging_after_ms = _hanging_after_ms(scenario)
    config = producer_config(scenario)
    if config is None:
        return Promises(idempotent=False, ordered=False, hanging_after_ms=hanging_after_ms), NO_PRODUCER_CONFIG_NOTE
    effective = effective_producer(config, producer_client(scenario))
    idempotent = effective["enable.idempotence"] == "true" or _transactions(scenario) is not None
    return Promises(idempotent=idempotent,
                    ordered=idempotent or effective["max.in.flight.requests.per.connection"] == "1",
                    hanging_after_ms=hanging_after_ms), None


def _transactions(scenario: dict[str, Any]) -> dict[str, Any] | None:
    workload = scenario.get("workload")
    txns = workload.get("transactions") if isinstance(workload, dict) else None
    return txns if isinstance(txns, dict) else None


def _hanging_after_ms(scenario: dict[str, Any]) -> int:
    """transaction.timeout.ms (the transactions workload's, else the producers' config) plus the clean-up interval."""
    timeout = (_transactions(scenario) or {}).get("timeout_ms")
    if timeout is None:
        timeout = (producer_config(scenario) or {}).get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
    cluster = scenario.get("cluster")
    brokers = cluster.get("broker_config") if isinstance(cluster, dict) else None
    cleanup = (brokers or {}).get(TXN_CLEANUP_SETTING, DEFAULT_TXN_CLEANUP_INTERVAL_MS)
    try:
        return int(timeout) + int(cleanup)
    except (TypeError, ValueError):
        return DEFAULT_TRANSACTION_TIMEOUT_MS + DEFAULT_TXN_CLEANUP_INTERVAL_MS


def invalidating(idempotent: bool, ordered: bool) -> tuple[str, ...]:
    """The anomalies that make a run invalid under these promises, in catalogue order (the catalogue's rule,
    docs/anomalies.md): violations always, duplicates where idempotent, reorders where order was promised. A part
    of another anomaly (lost_after_read, of lost) is judged by its whole."""
    severities = [VIOLATION, *([IF_IDEMPOTENT] if idempotent else []), *([IF_ORDERED] if ordered else [])]
    return tuple(name for name in with_severity(*severities) if ANOMALY_INFO[name].part_of is None)


def validity(counts: dict[str, int], promises: Promises) -> bool:
    """No anomaly that makes a run invalid under the producers' promises (``invalidating``)."""
    return not any(counts[name] for name in invalidating(promises.idempotent, promises.ordered))


def results_document(checker: str, counts: dict[str, int], promises: Promises, cut_short: bool,
                     incomplete: list[tuple[str, int]], examples: dict[str, list[Any]],
                     notes: list[str], ranges: list[dict[str, Any]], breakdown: dict[str, Any],
                     series: dict[str, Any], unread_committed: list[tuple[str, int]] = ()) -> dict[str, Any]:
    """The results.json shape, one place for every engine so they cannot drift apart (``ranges``:
    ``anomaly_ranges``; ``breakdown``: checkers/breakdown.py; ``series``: checkers/series.py;
    ``unread_committed``: the partitions of transactional sends the read_committed read-back left no final-read
    event for, incomplete too)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "checker": checker,
        "valid": validity(counts, promises),
        "promises": {"idempotent": promises.idempotent, "ordered": promises.ordered,
                     "hanging_after_ms": promises.hanging_after_ms},
        "counts": counts,
        "final_read_complete": not cut_short and not incomplete,
        "incomplete_partitions": [[topic, partition] for topic, partition in incomplete],
        "unread_committed_partitions": [[topic, partition] for topic, partition in unread_committed],
        "cut_short": cut_short,
        "examples": examples,
        "anomaly_ranges": ranges,
        "breakdown": breakdown,
        "series": series,
        "notes": notes,
    }
