"""A share group's deliveries (KIP-932) judged the plainest way: the reference checker's, and the Spark checker's
oracle.

shares.jsonl says each delivery of a record to a member (with the broker's
delivery count) and what the member's client reported of its acknowledgement.
A record's deliveries are taken in time order (then by delivery count); each
one after the first is a redelivery, explained by the delivery before it:

- its acknowledgement was an ACCEPT or a REJECT the client reported done: the
  record was settled, and may never come again (``share_redelivered_after_accept``),
  unless the redelivery was to the same member, its own acknowledgement failed
  because the record was no longer acquired (``InvalidRecordStateException``)
  and the record never came again (``share_redelivered_stale_ack``, counted):
  the brokers had given the member the record again before the earlier
  delivery's acknowledgement arrived, and applied it to the new delivery
  (an acknowledgement names a member and offsets, not a delivery count), so
  what the client handed to the application after the ACCEPT was already
  settled;
- a RELEASE reported done (``share_redelivered_released``), an acknowledgement
  reported failed or never answered (``share_redelivered_failed_ack``), or no
  acknowledgement reported by the time of the redelivery, the member having
  crashed or stalled past its lock (``share_redelivered_expired``):
  at-least-once redelivery, counted.

A redelivery whose delivery count is not above the one before it
(``share_delivery_count_repeated``, counted) is one the brokers gave out
again after forgetting a delivery: KIP-932 keeps an acquisition in the
share-partition leader's memory only, so a leader that crashes loses its
in-flight deliveries, and the record may then be delivered once more than
its count says.

A delivery count below a record's highest that no member was seen to get
(``share_delivery_unseen``, counted, one per missing count) is one the
brokers gave out that no member's client returned: acquired for a ShareFetch
whose answer was lost, or for a member that crashed before its client
returned the records; its lock expired and the next delivery came at a
higher count. A record whose unseen delivery was its last at the limit is
archived without a member having seen it (``share_settled_unseen``).

A record is settled when some acknowledgement of it was an ACCEPT or REJECT
reported done, or when it was delivered the group's limit of times (archived
then, whatever its last acknowledgement was: ``share_archived`` when that was
not an ACCEPT or REJECT). Every record of the read_uncommitted final read (a
share group reads uncommitted unless told otherwise) should be settled by the
end of the run: an acknowledged one never delivered is ``share_lost``; one
delivered but never settled is ``share_unsettled`` at or above the start offset
the brokers gave for its partition once the members stopped (they have not
settled it either), or ``share_settled_unseen`` below it or where they said
nothing of the partition was unsettled (lag 0) (the brokers settled
it without a word to the members: they took an acknowledgement whose member
crashed before its client answered, or one the client reported failed; or
archived the record after a delivery at the limit that a crashed member's
client had fetched but not returned). A record delivered more times than the
limit by the brokers' own count is ``share_over_delivered``.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any, NamedTuple

from catalogue.anomalies import ANOMALY_LIST, SHARE_COUNTS
from rundir.lines import BadLine, choice_of, field_of

# every anomaly judged here, in the catalogue's order
SHARE_ANOMALIES = tuple(a.name for a in ANOMALY_LIST if a.role == "share_consumers")
[SHARE_TALLY] = SHARE_COUNTS
DELIVERED, ACKNOWLEDGED = "delivered", "acknowledged"
KINDS = {DELIVERED: DELIVERED, ACKNOWLEDGED: ACKNOWLEDGED}
ACKS = {a: a for a in ("accept", "release", "reject")}
RESULTS = {r: r for r in ("ok", "fail", "unknown")}
SETTLING = ("accept", "reject")
# the redelivery anomaly of what the delivery before it came to (its acknowledgement and what the client said)
AFTER_SETTLED, AFTER_RELEASE, AFTER_FAILED, AFTER_NOTHING, AFTER_STALE = (
    "share_redelivered_after_accept", "share_redelivered_released", "share_redelivered_failed_ack",
    "share_redelivered_expired", "share_redelivered_stale_ack")
# the error each client reports for an acknowledgement of a record no longer acquired (Java, librdkafka)
NOT_ACQUIRED = ("InvalidRecordStateException", "INVALID_RECORD_STATE")
# a delivery whose count is not above the one before it: the brokers forgot a delivery
REPEATED = "share_delivery_count_repeated"
# a delivery count below a record's highest that no member was seen to get
UNSEEN = "share_delivery_unseen"
# anomalies counted per delivery; the others per record
PER_DELIVERY = (AFTER_RELEASE, AFTER_FAILED, AFTER_NOTHING, AFTER_STALE, REPEATED, UNSEEN)

Record = tuple[str, int, int]  # topic, partition, offset
ALL_SETTLED = 2**63 - 1  # the brokers' word that no record of a partition is unsettled, as an offset
_intern = sys.intern


class ShareLine(NamedTuple):
    """One line of shares.jsonl: a delivery (ack, result and error None) or an acknowledgement (producer, seq
    None)."""

    kind: str
    member: str
    topic: str
    partition: int
    offset: int
    delivery: int
    time_ns: int
    producer: str | None
    seq: int | None
    ack: str | None
    result: str | None
    error: str | None
    line: int


def parse_share(obj: dict[str, Any], line: int) -> ShareLine:
    kind = choice_of(obj, "kind", KINDS)
    delivered = kind == DELIVERED
    producer = field_of(obj, "producer", str, nullable=True) if delivered else None
    seq = field_of(obj, "seq", int, nullable=True) if delivered else None
    if (producer is None) != (seq is None):
        raise BadLine("fields 'producer' and 'seq' must both be set or both be null")
    return ShareLine(kind, _intern(field_of(obj, "member", str)), _intern(field_of(obj, "topic", str)),
                     field_of(obj, "partition", int), field_of(obj, "offset", int), field_of(obj, "delivery", int),
                     field_of(obj, "time_ns", int), None if producer is None else _intern(producer), seq,
                     None if delivered else choice_of(obj, "ack", ACKS),
                     None if delivered else choice_of(obj, "result", RESULTS),
                     None if delivered else field_of(obj, "error", str, nullable=True), line)


class Delivery(NamedTuple):
    time_ns: int
    delivery: int
    member: str
    ack: str | None      # None: no acknowledgement reported
    result: str | None
    line: int
    ack_ns: int | None = None  # when the client reported what came of the acknowledgement
    error: str | None = None   # the error the client reported for it


class ShareFindings(NamedTuple):
    """The records (or, for the redeliveries, the deliveries) each share anomaly found, and the tally."""

    records: dict[str, set[Record]]
    redeliveries: dict[str, int]
    deliveries: int

    def count(self, anomaly: str) -> int:
        return self.redeliveries[anomaly] if anomaly in PER_DELIVERY else len(self.records[anomaly])

    def counts(self) -> dict[str, int]:
        return {SHARE_TALLY: self.deliveries, **{a: self.count(a) for a in SHARE_ANOMALIES}}


def share_settings(events: Iterable[dict[str, Any]]) -> tuple[int | None, dict[tuple[str, int], int]]:
    """The share group's delivery limit (None: the run had no share group) and, per (topic, partition), the offset
    below which the brokers said every record was settled once the members stopped: the share-partition start
    offset, or past any offset when they said nothing above it was unsettled (lag 0; the start offset moves on
    lazily)."""
    limit, starts = None, {}
    for e in events:
        if e.get("kind") == "share-group":
            limit = int(e["delivery_limit"])
        elif e.get("kind") == "share-offsets":
            starts[(e["topic"], int(e["partition"]))] = ALL_SETTLED if e.get("lag") == 0 else int(e["start_offset"])
    return limit, starts


def deliveries_of(lines: Iterable[ShareLine]) -> tuple[dict[Record, list[Delivery]], int]:
    """Each record's deliveries in time order (then by delivery count, member and line), each with its
    acknowledgement, and how many deliveries there were. An acknowledgement belongs to the latest delivery before
    it (in file order) with its member, record and delivery count: after a share-partition leader crash the
    brokers may give a member the same record at the same count again (a second acknowledgement of one delivery
    replaces the first)."""
    delivered: list[ShareLine] = []
    acks: list[ShareLine | None] = []
    latest: dict[tuple[str, Record, int], int] = {}
    for s in lines:
        key = (s.member, (s.topic, s.partition, s.offset), s.delivery)
        if s.kind == DELIVERED:
            latest[key] = len(delivered)
            delivered.append(s)
            acks.append(None)
        elif key in latest:
            acks[latest[key]] = s
    records: dict[Record, list[Delivery]] = defaultdict(list)
    for s, a in zip(delivered, acks):
        records[(s.topic, s.partition, s.offset)].append(
            Delivery(s.time_ns, s.delivery, s.member, None if a is None else a.ack, None if a is None else a.result,
                     s.line, None if a is None else a.time_ns, None if a is None else a.error))
    for ds in records.values():
        ds.sort(key=lambda d: (d.time_ns, d.delivery, d.member, d.line))
    return records, len(delivered)


def settles(d: Delivery) -> bool:
    return d.ack in SETTLING and d.result == "ok"


def after(before: Delivery, d: Delivery, last: bool) -> str:
    """The redelivery anomaly of ``d``, which came after ``before`` (``last``: the record's last delivery): an
    ACCEPT or REJECT reported done settled the record whenever it was reported, unless it settled ``d`` itself
    (the same member, whose acknowledgement of ``d`` then failed as not acquired, and nothing after it: a stale
    acknowledgement); otherwise what the client had reported by the time of ``d`` explains it, and nothing
    reported by then means the lock had expired (a member stalled, or crashed, and acknowledged late or never)."""
    if settles(before):
        stale = last and d.member == before.member and d.result == "fail" and d.error in NOT_ACQUIRED
        return AFTER_STALE if stale else AFTER_SETTLED
    if before.ack is None or (before.ack_ns is not None and before.ack_ns > d.time_ns):
        return AFTER_NOTHING
    return AFTER_FAILED if before.result != "ok" else AFTER_RELEASE


def share_findings(lines: list[ShareLine], events: list[dict[str, Any]],
                   final: dict[Record, tuple[str | None, int | None]], acked: set[tuple[str, int]],
                   complete: dict[tuple[str, int], bool]) -> ShareFindings:
    """Every share anomaly of a run. ``final``: each record of the read_uncommitted final read and the message it
    holds; ``acked``: the acknowledged messages; ``complete``: whether each partition's final read got to its end
    (a record the read did not reach is judged by nothing)."""
    records: dict[str, set[Record]] = {a: set() for a in SHARE_ANOMALIES if a not in PER_DELIVERY}
    redeliveries = {a: 0 for a in PER_DELIVERY}
    limit, starts = share_settings(events)
    if limit is None:
        return ShareFindings(records, redeliveries, 0)
    by_record, count = deliveries_of(lines)
    for record, ds in by_record.items():
        for i, (before, d) in enumerate(zip(ds, ds[1:]), 2):
            anomaly = after(before, d, i == len(ds))
            if anomaly == AFTER_SETTLED:
                records[anomaly].add(record)
            else:
                redeliveries[anomaly] += 1
            if d.delivery <= before.delivery:
                redeliveries[REPEATED] += 1
        highest = max(d.delivery for d in ds)
        redeliveries[UNSEEN] += highest - len({d.delivery for d in ds})
        if highest > limit:
            records["share_over_delivered"].add(record)
        last = ds[-1]
        if last.delivery >= limit and not settles(last):
            records["share_archived"].add(record)
    topics = {t for t, _ in complete}
    for record, message in final.items():
        topic, partition, offset = record
        if topic not in topics or not complete.get((topic, partition), False):
            continue
        ds = by_record.get(record)
        if not ds:
            if message in acked:
                records["share_lost"].add(record)
            continue
        if any(settles(d) for d in ds) or max(d.delivery for d in ds) >= limit:
            continue
        start = starts.get((topic, partition))
        records["share_settled_unseen" if start is not None and offset < start else "share_unsettled"].add(record)
    return ShareFindings(records, redeliveries, count)


def share_examples(findings: ShareFindings | None, lines: list[ShareLine],
                   final: dict[Record, tuple[str | None, int | None]], limit: int) -> dict[str, list[dict[str, Any]]]:
    """The first ``limit`` records of each share anomaly that names records (by topic, partition, offset), each
    with its deliveries: one shape for both engines (the anomalies counted per delivery have none)."""
    if findings is None:
        return {a: [] for a in SHARE_ANOMALIES}
    chosen = {**{a: [] for a in PER_DELIVERY}, **{a: sorted(rs)[:limit] for a, rs in findings.records.items()}}
    wanted = {r for rs in chosen.values() for r in rs}
    by_record, _ = deliveries_of(s for s in lines if (s.topic, s.partition, s.offset) in wanted)
    return {a: [share_example(r, final.get(r, (None, None)), by_record.get(r, [])) for r in rs]
            for a, rs in chosen.items()}


def share_example(record: Record, message: tuple[str | None, int | None], ds: list[Delivery]) -> dict[str, Any]:
    topic, partition, offset = record
    return {"topic": topic, "partition": partition, "offset": offset, "producer": message[0], "seq": message[1],
            "deliveries": [{"member": d.member, "delivery": d.delivery, "ack": d.ack, "result": d.result,
                            "time_ns": d.time_ns} for d in ds]}
