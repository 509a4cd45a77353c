"""DumpLogSegments' batch headers into replica batches: which replica holds which offsets, written by whom.

One batch per line of the tool's output (``baseOffset: 0 lastOffset: 997 count: 998 baseSequence: 0 …``),
under the ``Dumping <dir>/<topic>-<partition>/<segment>.log`` line that names its partition. The same
format in Kafka 3.9 (kafka.tools) and 4.x (org.apache.kafka.tools). A batch is identified across replicas by
(partition, leader_epoch, base_offset): one leader epoch writes one batch at an offset, and a follower copies
it whole, so two replicas holding that triple hold the same records.
"""

from __future__ import annotations

import re
from typing import Any

Batch = dict[str, Any]

_PARTITION_DIR = re.compile(r"(?P<topic>[^/]+)-(?P<partition>\d+)/\d+\.log$")
_PAIR = re.compile(r"(\w+): (\S+)")
# the tool's names -> ours (the history's snake case); the rest of a header (crc, size, position…) is dropped
_FIELDS = {"baseOffset": "base_offset", "lastOffset": "last_offset", "count": "count",
           "producerId": "producer_id", "producerEpoch": "producer_epoch", "baseSequence": "base_sequence",
           "lastSequence": "last_sequence", "partitionLeaderEpoch": "leader_epoch", "CreateTime": "create_time_ms"}
_FLAGS = {"isTransactional": "transactional", "isControl": "control"}


def parse_dump(node: str, text: str) -> list[Batch]:
    """Every batch header in one broker's DumpLogSegments output, with its node, topic and partition; lines that
    are not batch headers (log4j's warnings, ``Log starting offset``, record lines) are skipped."""
    batches: list[Batch] = []
    topic, partition = None, None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            found = _PARTITION_DIR.search(line)
            topic, partition = (found["topic"], int(found["partition"])) if found else (None, None)
        elif line.startswith("baseOffset: ") and topic is not None:
            pairs = dict(_PAIR.findall(line))
            batch: Batch = {"node": node, "topic": topic, "partition": partition}
            batch.update({ours: int(pairs[theirs]) for theirs, ours in _FIELDS.items() if theirs in pairs})
            batch.update({ours: pairs[theirs] == "true" for theirs, ours in _FLAGS.items() if theirs in pairs})
            batches.append(batch)
    return batches


def parse_dumps(outputs: dict[str, str]) -> list[Batch]:
    """The batches of every broker's output, by node then partition then offset."""
    batches = [b for node in sorted(outputs) for b in parse_dump(node, outputs[node])]
    batches.sort(key=lambda b: (b["node"], b["topic"], b["partition"], b.get("base_offset", -1)))
    return batches
