"""kill: SIGKILL a node's process, and start it again when the fault heals."""

from __future__ import annotations

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError


def kill_all(nodes: list[Node]) -> None:
    """SIGKILL every node and check that each process is gone."""
    try:
        for node in nodes:
            node.kill()
    except ClusterError as e:
        raise FaultError(str(e)) from None
    alive = [n.name for n in nodes if n.running]
    if alive:
        raise FaultError(f"kill did not take effect: {', '.join(alive)} still running")


class KillFault(Fault):
    kind = "kill"

    def apply(self, nodes: list[Node]) -> str:
        kill_all(nodes)
        return f"SIGKILL {', '.join(n.name for n in nodes)}"

    def heal(self, nodes: list[Node]) -> None:
        self.recover(nodes)
