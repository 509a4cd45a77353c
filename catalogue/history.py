"""The fields of every history file and of the workload processes' line protocol (docs/run-directory.md).

Readers ignore fields they do not know; these tuples say which fields each
writer puts on a line, in the order it writes them, so the writers (Python
and Java) and the readers (both checkers) can be tested against one list.
"""

from __future__ import annotations

# --- history/*.jsonl --------------------------------------------------------------------------------------

SEND_FIELDS = ("producer", "seq", "topic", "key", "partition", "offset", "status", "error", "invoke_ns",
               "complete_ns", "txn")
SEND_STATUSES = ("ok", "fail", "unknown")  # acknowledged | definitely not written | outcome unknown
# the old name of a status, in histories written before the rename, and the status it is read as (both checkers,
# the report): such sends were ``info`` until their status, count and anomaly became the one word ``unknown``
SEND_STATUS_ALIASES = {"info": "unknown"}
# a send's error when its transaction's abort took it out of librdkafka's queue: status unknown, for retries are
# purged too and their first attempt may be in the log. (The Java client's TransactionAbortedException stays fail:
# its abort fails only batches never given a sequence, that is never sent; a sent batch is retried before EndTxn.)
PURGE_ERRORS = ("_PURGE_QUEUE",)
# a send of an exactly-once pipeline also names the input it was made from
PIPELINE_SEND_FIELDS = ("from_producer", "from_seq")

READ_FIELDS = ("consumer", "group", "phase", "topic", "partition", "offset", "producer", "seq", "time_ns",
               "isolation")
# a record an exactly-once pipeline wrote also names the input it came from
PIPELINE_READ_FIELDS = ("from_producer", "from_seq")
# a live read also says which of its consumer process's assignments it was polled in: the number of assignment
# changes (ASSIGNMENT_CHANGES) the process had seen, so two reads of one partition with the same number had no
# rebalance between them (absent: a history written before it was recorded)
LIVE_READ_FIELDS = ("assignment",)
READ_PHASES = ("live", "final")
ISOLATIONS = ("read_committed", "read_uncommitted")

# shares.jsonl (share groups, KIP-932): one line per delivery of a record to a member, and one per acknowledgement
# its client reported the result of; ``kind`` names which. ``delivery`` is the broker's delivery count (1 at the
# first), and a delivery and its acknowledgement share (member, topic, partition, offset, delivery)
SHARE_FIELDS: dict[str, tuple[str, ...]] = {
    "delivered": ("member", "group", "topic", "partition", "offset", "producer", "seq", "delivery", "time_ns"),
    # result: ok (the client reported it done), fail (it reported an error: ``error``), unknown (no word on it)
    "acknowledged": ("member", "group", "topic", "partition", "offset", "delivery", "ack", "result", "error",
                     "time_ns"),
}
SHARE_ACKS = ("accept", "release", "reject")
SHARE_RESULTS = SEND_STATUSES

TXN_FIELDS = ("producer", "txn", "outcome", "intent", "error", "invoke_ns", "complete_ns", "begin_ns")
TXN_OUTCOMES = ("committed", "aborted", "unknown")
# what the application asked for; null: it never asked; the field absent: not known
TXN_INTENTS = ("commit", "abort")

# events.jsonl: the fields of each kind of line, besides ``kind`` itself
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "fault": ("fault", "phase", "target", "options", "targets", "start_ns", "end_ns", "detail", "time_ns"),
    "leader": ("topic", "partition", "leader", "isr", "time_ns"),
    "committed": ("group", "topic", "partition", "offset", "time_ns"),
    # last_stable_offset: only the read_committed read-back's
    "final-read": ("topic", "partition", "high_watermark", "complete", "time_ns", "isolation", "last_stable_offset"),
    "stable": ("topic", "partition", "high_watermark", "last_stable_offset", "time_ns"),
    # a workload process's has process and settings (a librdkafka one its binding too, from its K line); the
    # harness's own (role harness) its Python binding
    "client": ("client", "version", "binding", "process", "role", "settings", "time_ns"),
    "pipeline": ("group", "input_topic", "output_topic", "time_ns"),
    # a share group the run's share consumers joined, with the group settings the checker judges by: how many
    # deliveries a record gets before it is archived, and how long a member holds an acquired record
    "share-group": ("group", "topic", "delivery_limit", "lock_ms", "time_ns"),
    # what the brokers said of the share group per partition once its members had stopped: every record below
    # start_offset is acknowledged or archived; lag: how many from there to the end are not (null: not said)
    "share-offsets": ("group", "topic", "partition", "start_offset", "lag", "time_ns"),
    # a consumer process's partitions changed (a rebalance callback with partitions): ``assignment`` is the
    # process's count of such changes after this one, the number its later live reads carry
    "assignment": ("process", "group", "topic", "assignment", "change", "partitions", "time_ns"),
    # a request a request-level fault held, dropped or replayed, written after the fault healed; listener:
    # the request path's listener it came on (clients, or inter-broker: a broker's own request)
    "request": ("fault", "api", "api_version", "client", "node", "connection", "correlation_id", "action", "cause",
                "held_ns", "released_ns", "response_ns", "response_error", "client_closed", "outcome", "detail",
                "listener"),
    # a rolling fault's steps, written after it healed, so the report can draw each node's release over time:
    # restarted (``node`` stopped at stopped_ns, serving on ``version`` from time_ns, back in every ISR it left at
    # in_sync_ns: null for a controller) or raised (``setting`` raised to ``value`` for the whole cluster)
    "node-version": ("fault", "step", "node", "role", "from_version", "version", "stopped_ns", "time_ns",
                     "in_sync_ns", "setting", "value"),
}
FAULT_PHASES = ("start", "heal", "skipped")
# what a consumer's rebalance callback said: partitions given, taken back, or lost (taken without a revoke)
ASSIGNMENT_CHANGES = ("assigned", "revoked", "lost")
NODE_VERSION_STEPS = ("restarted", "raised")

# --- the line protocol a workload process speaks on its stdout (workloads/protocol.py parses it) -----------

# tag -> the fields after it, space-separated, ``-`` for null; the last field of S and O may hold spaces
LINE_FIELDS: dict[str, tuple[str, ...]] = {
    "H": ("pid",),
    "K": ("library", "version", "settings_json"),
    "I": ("first_seq", "count", "invoke_ns"),
    "X": ("first_seq", "count"),
    "S": ("status", "seq", "partition", "offset", "complete_ns", "error"),
    "J": ("seq", "from_producer", "from_seq", "invoke_ns"),
    "T": ("txn", "begin_ns"),
    "C": ("txn", "intent", "invoke_ns"),
    "O": ("txn", "outcome", "complete_ns", "error"),
    "P": ("count", "poll_ns"),
    "A": ("assignment", "change", "partitions", "time_ns"),
    "R": ("partition", "offset", "producer", "seq", "time_ns"),
    "V": ("partition", "offset", "producer", "seq", "delivery", "time_ns"),
    "Q": ("partition", "offset", "delivery", "ack", "result", "time_ns", "error"),
    "F": ("partition", "position"),
    "D": (),
    "E": (),
}
LINE_NULL = "-"
# fields a line may carry after its own: the Java read-back's R names the input of a pipeline's output; a Python
# process's K the binding that runs its librdkafka (one word, confluent-kafka/<version>)
LINE_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {"R": ("from_producer", "from_seq"), "K": ("binding",)}
