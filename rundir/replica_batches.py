"""history/replica-batches.jsonl: every replica's record batches of the workload's topics, as its disk held them
when the run ended (batch headers only, read with Kafka's FileRecords before the cluster was torn down:
clusters/segments.py).

Written once, whole, by ``kchaos run`` (the disks are gone afterwards, so unlike broker-events.jsonl it cannot
be rebuilt). Every line has ``node``, ``topic``, ``partition``, ``base_offset``, ``last_offset``, ``count``,
``producer_id``, ``producer_epoch``, ``base_sequence``, ``last_sequence``, ``leader_epoch`` (the partition
leader epoch that appended the batch), ``transactional``, ``control`` and ``create_time_ms``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rundir.documents import write_atomically
from rundir.layout import REPLICA_BATCHES, RunDir
from rundir.lines import field_of, read_history_file


def write_replica_batches(run: RunDir, lines: str) -> Path:
    """Replace history/replica-batches.jsonl with these JSON lines (clusters/segments.read_batches' output)."""
    run.replica_batches.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(run.replica_batches, lines)


def parse_replica_batch(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """The fields a batch is placed by: its replica, partition, offsets and the leader epoch that wrote it."""
    field_of(obj, "node", str)
    field_of(obj, "topic", str)
    for name in ("partition", "base_offset", "last_offset", "leader_epoch"):
        field_of(obj, name, int)
    return obj


def read_replica_batches(history_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every line of history/replica-batches.jsonl; a missing file is noted (the disks were not read)."""
    return read_history_file(history_dir, REPLICA_BATCHES, parse_replica_batch, notes,
                             "the replicas' disks were not read before the cluster was torn down")
