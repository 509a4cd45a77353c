"""Every anomaly a checker reports, and every count results.json holds (docs/architecture.md, "The catalogue").

One ``Anomaly`` per name holds what every stage needs to know of it: the
checkers' validity rule reads ``severity``, the expectations read ``role``
and ``unverified``, ``kchaos check`` reads ``summary``, the report reads
``lead``, ``verb`` and ``denominator``, the checkers' ranges and the
forensics' chains read ``ranges`` and ``chains``.
"""

from __future__ import annotations

from dataclasses import dataclass

# severity: when a count above zero makes the run invalid
VIOLATION = "violation"  # always
IF_IDEMPOTENT = "if_idempotent"  # when the producers promised idempotence
IF_ORDERED = "if_ordered"  # when the producers promised order
COUNTED = "counted"  # never: counted, not a violation

# unverified: what messages an incomplete read-back could not verify can do to the count
UNBOUNDED = "unbounded"  # raise it by any amount; a count name instead bounds the rise by that count


@dataclass(frozen=True)
class Anomaly:
    """One anomaly: its definition and the facts every stage derives from."""

    name: str
    definition: str
    severity: str
    role: str = "producers"  # the workload role whose client it is about: producers, consumers, pipeline
    unverified: str | None = None  # None: unverified messages cannot raise it; UNBOUNDED; or the bounding count
    summary: str | None = "main"  # its group in `kchaos check`'s one-line summary: main, transactions, or none
    lead: int | None = None  # its rank when the report's sentence picks what to lead with (None: never leads)
    verb: str | None = None  # the sentence's clause: "lost {n} of {d} acknowledged writes"
    denominator: tuple[tuple[str, ...], str] | None = None  # the counts it is a share of, summed, and their noun
    part_of: str | None = None  # a subset of another anomaly, shown inside its row
    ranges: bool = False  # results.json lists its time islands per partition (anomaly_ranges)
    # what the forensics explain with a causal chain: "range" (each of its anomaly_ranges, from the node logs),
    # "transaction" (each transaction of its examples, from the history and the request-level faults' lines)
    chains: tuple[str, ...] = ()

    @property
    def flagged(self) -> bool:
        """Shown as a problem in reports (every anomaly but those only counted)."""
        return self.severity != COUNTED

    @property
    def transactional(self) -> bool:
        return self.summary == "transactions"


ACKED = (("acked",), "acknowledged writes")

ANOMALY_LIST = (
    Anomaly("lost", "status ok, and absent from the final read of its partition although that read was complete",
            VIOLATION, unverified="lost_unverifiable", lead=0, verb="lost {n} of {d} acknowledged writes",
            denominator=ACKED, ranges=True, chains=("range", "transaction")),
    Anomaly("lost_after_read", "a lost message that some live consumer had already read", VIOLATION,
            unverified="lost_unverifiable", denominator=(("lost",), "lost"), part_of="lost"),
    Anomaly("duplicated", "present at two or more distinct (partition, offset) positions in the final read",
            IF_IDEMPOTENT, unverified=UNBOUNDED, lead=1, verb="duplicated {n} of {d} acknowledged writes",
            denominator=ACKED, ranges=True, chains=("range",)),
    Anomaly("unexpected", "read (any phase) but never sent", VIOLATION, unverified=UNBOUNDED, lead=7,
            verb="returned {n} records nobody sent", denominator=(("reads_final",), "records read back")),
    Anomaly("failed_but_present", "status fail (definitely not written), yet present in the final read", VIOLATION,
            unverified=UNBOUNDED, lead=8, verb="stored {n} of {d} writes reported failed",
            denominator=(("failed",), "failed writes")),
    Anomaly("divergent", "one (topic, partition, offset) seen holding different messages (an ack's offset vs a "
            "read, two reads, or two acks)", VIOLATION, unverified=UNBOUNDED, lead=11,
            verb="let {n} offsets hold different messages", denominator=(("reads_final",), "offsets read back"),
            ranges=True, chains=("range",)),
    Anomaly("reordered", "for one producer that promises order (idempotent, or one request in flight) and one "
            "partition, seq order and offset order disagree among acknowledged messages", IF_ORDERED, lead=9,
            verb="reordered {n} of {d} acknowledged writes", denominator=ACKED),
    Anomaly("consumer_skipped", "in the final read below the group's committed offset, but never processed live "
            "by the group", VIOLATION, role="consumers", unverified=UNBOUNDED, lead=2,
            verb="skipped {n} of {d} acknowledged records in the consumer group",
            denominator=(("acked",), "acknowledged records")),
    Anomaly("consumer_redelivered", "processed live more than once by the group (at-least-once redelivery: "
            "counted, not a violation)", COUNTED, role="consumers", denominator=(("reads_live",), "live reads")),
    Anomaly("poll_skipped", "two successive live reads of one partition by one consumer process, in one "
            "assignment, with a record between their offsets that the final read holds and the consumer's isolation "
            "shows (counted per pair of reads)", VIOLATION, role="consumers", unverified=UNBOUNDED, lead=12,
            verb="let a consumer skip over records {n} times within one assignment",
            denominator=(("reads_live",), "live reads")),
    Anomaly("poll_nonmonotonic", "a live read of a partition by one consumer process at or below the offset it read "
            "there before, in the same assignment (counted per read)", VIOLATION, role="consumers", lead=13,
            verb="sent a consumer back {n} times within one assignment",
            denominator=(("reads_live",), "live reads")),
    Anomaly("poll_skipped_rebalance", "a poll_skipped pair of reads with a rebalance between them (their assignments "
            "differ, or one was not recorded): counted, not a violation", COUNTED, role="consumers",
            unverified=UNBOUNDED, summary=None, denominator=(("reads_live",), "live reads")),
    Anomaly("poll_nonmonotonic_rebalance", "a poll_nonmonotonic read with a rebalance since the read it goes back "
            "from (at-least-once redelivery after a rebalance: counted, not a violation)", COUNTED,
            role="consumers", summary=None, denominator=(("reads_live",), "live reads")),
    Anomaly("send_nonmonotonic", "an acknowledgement at a lower offset than an acknowledgement sends.jsonl lists "
            "before it for the same producer and partition (counted per message)", VIOLATION, lead=14,
            verb="acknowledged {n} of {d} writes below an offset their producer had been acknowledged before",
            denominator=ACKED),
    Anomaly("share_lost", "an acknowledged write in the read_uncommitted final read that no member of the share group "
            "was ever given (counted per record)", VIOLATION, role="share_consumers", unverified=UNBOUNDED, lead=15,
            verb="never gave {n} of {d} acknowledged records to the share group", denominator=ACKED),
    Anomaly("share_unsettled", "a record of the final read that members were given but never settled (no ACCEPT or "
            "REJECT reported done, fewer deliveries than the limit), at or above its partition's share-partition "
            "start offset once the members stopped, the brokers' lag there not 0: they had not settled it either "
            "(counted per record)",
            VIOLATION, role="share_consumers", unverified=UNBOUNDED, lead=16,
            verb="left {n} of {d} acknowledged records unsettled in the share group", denominator=ACKED),
    Anomaly("share_redelivered_after_accept", "a record given to a member again after an ACCEPT or REJECT of an "
            "earlier delivery that the client reported done (counted per record)", VIOLATION,
            role="share_consumers", lead=17, verb="gave {n} records out again after the share group accepted them",
            denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_over_delivered", "a record given to a member at a delivery count above the share group's "
            "delivery limit (counted per record)", VIOLATION,
            role="share_consumers", lead=18, verb="gave {n} records out more often than the delivery limit",
            denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_redelivered_released", "a delivery after a RELEASE of the delivery before it, reported done: "
            "counted, not a violation", COUNTED, role="share_consumers", summary=None,
            denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_redelivered_failed_ack", "a delivery after an acknowledgement of the delivery before it that "
            "the client had reported failed (or unanswered) by then: counted, not a violation", COUNTED,
            role="share_consumers", summary=None, denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_redelivered_expired", "a delivery after one whose acknowledgement its client had not reported by "
            "then, or never (its member crashed or stalled past its acquisition lock): counted, not a violation",
            COUNTED, role="share_consumers", summary=None,
            denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_redelivered_stale_ack", "a delivery to the same member after its ACCEPT or REJECT of the "
            "delivery before it, reported done, whose own acknowledgement failed as not acquired, the record never "
            "coming again: the brokers had given the record out again before the earlier acknowledgement arrived "
            "and applied it to this delivery (an acknowledgement names a member and offsets, not a delivery "
            "count): counted, not a violation", COUNTED, role="share_consumers", summary=None,
            denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_delivery_count_repeated", "a delivery at a delivery count not above the one before it: the "
            "brokers forgot a delivery (KIP-932 keeps acquisitions in the share-partition leader's memory, so a "
            "leader that crashes loses its in-flight deliveries); counted, not a violation", COUNTED,
            role="share_consumers", summary=None, denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_delivery_unseen", "a delivery count the brokers gave a record that no member's client returned: "
            "the record came at a higher count first, or after a gap in its counts (the brokers acquired it for a "
            "fetch whose answer was lost, or for a member that crashed before its client returned it, and the "
            "lock expired); one per missing count, counted, not a violation", COUNTED,
            role="share_consumers", summary=None, denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_archived", "a record whose last delivery was at the delivery limit and not accepted or rejected: "
            "archived by the brokers, never delivered again (counted, not a violation)", COUNTED,
            role="share_consumers", summary=None, denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("share_settled_unseen", "a record members were given but never settled as they report it, below its "
            "partition's share-partition start offset once the members stopped, or in a partition whose lag the "
            "brokers said was 0: the brokers settled it without a "
            "word to the members (took an acknowledgement whose member crashed before its client answered, or one "
            "the client reported failed; or archived the record after a delivery at the limit that a crashed "
            "member's client had fetched but not returned); counted, not a violation", COUNTED,
            role="share_consumers", summary=None, denominator=(("share_deliveries",), "share deliveries")),
    Anomaly("unknown", "sends of status unknown (may or may not have been written): found or not found, reported "
            "with their counts, never called lost", COUNTED, summary=None, denominator=(("sent",), "sends")),
    Anomaly("aborted_read", "a read_committed read of a message whose transaction aborted or never committed",
            VIOLATION, unverified=UNBOUNDED, summary="transactions", lead=3,
            verb="showed {n} records of unfinished transactions to read_committed readers",
            denominator=(("reads_live", "reads_final"), "reads"), chains=("transaction",)),
    Anomaly("torn_transaction", "a transaction whose messages are partly visible to read_committed readers "
            "(counted per transaction)", VIOLATION, unverified=UNBOUNDED, summary="transactions", lead=4,
            verb="tore {n} of {d} transactions",
            denominator=(("txns_committed", "txns_aborted", "txns_unknown"), "transactions"), chains=("transaction",)),
    Anomaly("pipeline_lost", "an exactly-once pipeline's committed input (below the pipeline's committed offset) "
            "with no output record in the read_committed final read", VIOLATION, role="pipeline",
            unverified="pipeline_unverifiable", summary="transactions", lead=5, verb="lost {n} pipeline inputs"),
    Anomaly("pipeline_duplicated", "an exactly-once pipeline's input with output records at two or more positions",
            VIOLATION, role="pipeline", unverified=UNBOUNDED, summary="transactions", lead=6,
            verb="duplicated the output of {n} pipeline inputs"),
    Anomaly("hanging_transaction", "liveness: a partition whose last stable offset stayed below its high "
            "watermark past transaction.timeout.ms (counted per partition)", VIOLATION, summary="transactions",
            lead=10, verb="left {n} partitions behind a hanging transaction"),
)
ANOMALY_INFO: dict[str, Anomaly] = {a.name: a for a in ANOMALY_LIST}
ANOMALIES: tuple[str, ...] = tuple(a.name for a in ANOMALY_LIST)

# --- the other counts results.json holds, in the order it lists them -------------------------------------

# (the sends of status unknown are not a tally: the anomaly ``unknown`` counts them)
TALLIES = ("sent", "acked", "failed", "reads_live", "reads_final")
# unknown sends split by whether the final read found them; acknowledged messages not found where the read-back
# of their partition was incomplete
EXTRA_COUNTS = ("unknown_found", "unknown_not_found", "lost_unverifiable")
# transactions by outcome (txns.jsonl; one with sends but no line is unknown), and pipeline inputs not judged:
# not yet processed (at or above the pipeline's committed offset), or the output's read-back was incomplete
TXN_COUNTS = ("txns_committed", "txns_aborted", "txns_unknown", "pipeline_unprocessed", "pipeline_unverifiable")
# a share group's deliveries (shares.jsonl), over every member
SHARE_COUNTS = ("share_deliveries",)
COUNTS = TALLIES + ANOMALIES + EXTRA_COUNTS + TXN_COUNTS + SHARE_COUNTS
# what a tally is a share of, for the report
TALLY_DENOMINATORS: dict[str, tuple[tuple[str, ...], str]] = {
    "acked": (("sent",), "sends"), "failed": (("sent",), "sends"),
}


def with_severity(*severities: str) -> tuple[str, ...]:
    """The anomalies of these severities, in catalogue order."""
    return tuple(a.name for a in ANOMALY_LIST if a.severity in severities)
