"""The KRaft quorum as the controllers record it: who leads, in which epoch.

In KRaft mode the "controller" in a broker's metadata is a random broker, not the
active controller, and the AdminClient here cannot ask the quorum itself.
Every controller, though, writes its view of the election (leader id and
epoch) to ``quorum-state`` in its metadata log dir at each transition,
atomically (a temp file renamed). That dir is on the host bind mount, so the
harness reads it with no JVM and no request: the highest epoch is the newest
election and its leader is the active controller. A killed or frozen
controller's file is simply older.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

METADATA_PARTITION = "__cluster_metadata-0"


@dataclass(frozen=True)
class QuorumState:
    """One controller's last recorded election: its epoch and leader (None while voting)."""

    epoch: int
    leader: int | None


def quorum_state(log_dir: Path) -> QuorumState | None:
    """The election a controller last recorded under ``log_dir``; None before its first one."""
    try:
        doc = json.loads((log_dir / METADATA_PARTITION / "quorum-state").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    leader = int(doc.get("leaderId", -1))
    return QuorumState(int(doc.get("leaderEpoch", -1)), leader if leader >= 0 else None)


def newest(states: Iterable[QuorumState | None]) -> QuorumState | None:
    """The newest election: the highest epoch, and within it a view that knows the leader."""
    return max((s for s in states if s is not None), key=lambda s: (s.epoch, s.leader is not None), default=None)


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka prints a Uuid: 22 URL-safe base64 characters.

    Never one that starts with '-', which the StorageTool's command line
    would take for an option (Kafka's own Uuid.randomUuid avoids it too).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
