"""kill: SIGKILL a node's process, and start it again when the fault heals."""

from __future__ import annotations

import random

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError
from faults.targets import TARGETS, choose_targets


class KillFault(Fault):
    kind = "kill"
    targets = TARGETS

    def choose(self, target: str, rng: random.Random) -> list[Node]:
        return [n for n in choose_targets(self.cluster, self.topic, target, rng) if n.running]

    def apply(self, nodes: list[Node]) -> str:
        try:
            for node in nodes:
                node.kill()
        except ClusterError as e:
            raise FaultError(str(e)) from None
        alive = [n.name for n in nodes if n.running]
        if alive:
            raise FaultError(f"kill did not take effect: {', '.join(alive)} still running")
        return f"SIGKILL {', '.join(n.name for n in nodes)}"

    def heal(self, nodes: list[Node]) -> None:
        try:
            for node in nodes:
                self.cluster.recover(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None
