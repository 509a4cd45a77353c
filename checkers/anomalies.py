"""The anomalies every kchaos checker reports, what the producers promised, what makes a run valid, and the notes.

Kept apart from the reference checker so that the Spark checker, the report
and the harness share one list of names, one set of definitions, one
validity rule (DESIGN.md, "Anomalies") and one wording of every note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rundir.documents import SCHEMA_VERSION

ANOMALIES = ("lost", "lost_after_read", "duplicated", "unexpected", "failed_but_present", "divergent",
             "reordered", "consumer_skipped", "consumer_redelivered", "unknown")

DEFINITIONS = {
    "lost": "status ok, and absent from the final read of its partition although that read was complete",
    "lost_after_read": "a lost message that some live consumer had already read",
    "duplicated": "present at two or more distinct (partition, offset) positions in the final read",
    "unexpected": "read (any phase) but never sent",
    "failed_but_present": "status fail (definitely not written), yet present in the final read",
    "divergent": "one (topic, partition, offset) seen holding different messages (an ack's offset vs a read, "
                 "two reads, or two acks)",
    "reordered": "for one producer that promises order (idempotent, or one request in flight) and one "
                 "partition, seq order and offset order disagree among acknowledged messages",
    "consumer_skipped": "in the final read below the group's committed offset, but never processed live by "
                        "the group",
    "consumer_redelivered": "processed live more than once by the group (at-least-once redelivery: counted, "
                            "not a violation)",
    "unknown": "info sends: found or not found, reported with their counts, never called lost",
}

# Counts results.json holds besides one per anomaly, in the order it lists them.
TALLIES = ("sent", "acked", "failed", "indeterminate", "reads_live", "reads_final")
EXTRA_COUNTS = ("unknown_found", "unknown_not_found", "lost_unverifiable")
COUNTS = TALLIES + ANOMALIES + EXTRA_COUNTS

# Always a violation, whatever the producers promised.
VIOLATIONS = ("lost", "divergent", "unexpected", "failed_but_present", "consumer_skipped")
# Only counted, never a problem in themselves: at-least-once redelivery, and sends whose outcome is unknown.
COUNTED_ONLY = ("consumer_redelivered", "unknown")
# Shown as problems in reports: every anomaly but those only counted.
FLAGGED = tuple(a for a in ANOMALIES if a not in COUNTED_ONLY)
# The one-line summary `kchaos check` prints, in this order.
SUMMARY = ("acked", "failed", "indeterminate", *(a for a in ANOMALIES if a != "unknown"))

# --- the notes: what the counts alone would hide, worded once for both checkers ---------------------

NO_SCENARIO_NOTE = "no scenario.yaml: assuming the producers promised neither idempotence nor order"
NO_PRODUCER_CONFIG_NOTE = ("scenario.yaml has no workload.producers.config: assuming librdkafka's defaults "
                           "(no idempotence, many requests in flight)")
CUT_SHORT_NOTE = "the run was cut short: no final read-back was recorded, so loss cannot be judged"


def repeated_sends_note(repeats: int) -> str:
    """The note when (producer, seq) pairs appear on several send lines."""
    return (f"{repeats} send lines repeated an earlier (producer, seq); an ok line wins over info and fail "
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


@dataclass(frozen=True)
class Promises:
    """What the producers' configuration guarantees, which decides whether duplicates and reorders count."""

    idempotent: bool
    ordered: bool


def promises_from_scenario(scenario: dict[str, Any] | None) -> tuple[Promises, str | None]:
    """Promises of the producers of a resolved scenario.yaml, and a note when they had to be assumed.

    Idempotent: enable.idempotence true, or a transactional.id (which implies
    it). Ordered: idempotent (librdkafka keeps order across retries then), or
    at most one request in flight.
    """
    if scenario is None:
        return Promises(idempotent=False, ordered=False), NO_SCENARIO_NOTE
    config = _producer_config(scenario)
    if config is None:
        return Promises(idempotent=False, ordered=False), NO_PRODUCER_CONFIG_NOTE
    idempotent = _is_true(config.get("enable.idempotence")) or _is_set(config.get("transactional.id"))
    in_flight = config.get("max.in.flight.requests.per.connection", config.get("max.in.flight"))
    return Promises(idempotent=idempotent, ordered=idempotent or _is_one(in_flight)), None


def _producer_config(scenario: dict[str, Any]) -> dict[str, Any] | None:
    node: Any = scenario
    for key in ("workload", "producers", "config"):
        if not isinstance(node, dict) or not isinstance(node.get(key), dict):
            return None
        node = node[key]
    return node


def _is_true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _is_set(value: Any) -> bool:
    return value is not None and str(value).strip() != ""


def _is_one(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return value == 1
    return str(value).strip() == "1"


def validity(counts: dict[str, int], promises: Promises) -> bool:
    """DESIGN.md's rule: no violation, no duplicate where idempotent, no reorder where order was promised."""
    if any(counts[name] for name in VIOLATIONS):
        return False
    if promises.idempotent and counts["duplicated"]:
        return False
    if promises.ordered and counts["reordered"]:
        return False
    return True


def results_document(checker: str, counts: dict[str, int], promises: Promises, cut_short: bool,
                     incomplete: list[tuple[str, int]], examples: dict[str, list[Any]],
                     notes: list[str]) -> dict[str, Any]:
    """The results.json shape, one place for every engine so they cannot drift apart."""
    return {
        "schema_version": SCHEMA_VERSION,
        "checker": checker,
        "valid": validity(counts, promises),
        "promises": {"idempotent": promises.idempotent, "ordered": promises.ordered},
        "counts": counts,
        "final_read_complete": not cut_short and not incomplete,
        "incomplete_partitions": [[topic, partition] for topic, partition in incomplete],
        "cut_short": cut_short,
        "examples": examples,
        "notes": notes,
    }
