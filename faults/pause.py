"""pause: freeze every process of a node (cgroup freezer) and thaw it later.

A long GC pause, from the cluster's point of view: the node holds its
sockets and its ZooKeeper session but answers nothing. Held longer than
zookeeper.session.timeout.ms, the broker's session expires and the
controller moves its leaderships away while it is frozen.
"""

from __future__ import annotations

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError


class PauseFault(Fault):
    kind = "pause"

    def apply(self, nodes: list[Node]) -> str:
        try:
            for node in nodes:
                node.pause()
        except ClusterError as e:
            raise FaultError(str(e)) from None
        return f"freeze {', '.join(n.name for n in nodes)}"

    def heal(self, nodes: list[Node]) -> None:
        try:
            for node in nodes:
                if node.status == "paused":
                    node.unpause()
        except ClusterError as e:
            raise FaultError(str(e)) from None
        self.recover(nodes)  # a thawed broker whose session expired re-registers by itself; wait for it
