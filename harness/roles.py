"""What the trial asks of a role that is one part (harness/share_role.py's ShareRun is the first): its processes,
what it sets up before they start, and how it finishes once the producers have stopped. The trial loops over the
parts and knows none of them by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from workloads.client import ClientProcess

if TYPE_CHECKING:
    from clusters.cluster import Cluster


class RoleRun(Protocol):
    """One role of one trial."""

    clients: list[ClientProcess]

    def prepare(self, cluster: "Cluster") -> None:
        """Before any of its processes starts (WorkloadError: the run cannot go on)."""

    def drain(self, ends: dict[int, int], timeout_s: float) -> bool:
        """Once the producers stopped and the cluster settled: let the processes finish the log (``ends``: each
        partition's high watermark), at most ``timeout_s``, then stop them; False when they did not."""

    @property
    def count(self) -> int:
        """What it has recorded so far (the progress line's reads)."""
