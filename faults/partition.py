"""partition: drop traffic between nodes with iptables inside their network namespaces.

Every rule lives in a chain of its own (``KCHAOS``) hooked into INPUT and
OUTPUT of the node's namespace, applied from the host with nsenter; healing
unhooks and deletes that chain, so it removes exactly what the fault added.
A DROP in both directions on one side is enough to cut a link.

Modes (``options: {mode: ...}``):

* ``isolate``       the targets lose every other node (clients still reach them)
* ``brokers``       the targets lose the other brokers only: they still reach the
                    metadata quorum and the clients, so a leader's followers fall
                    out of its ISR while it goes on acknowledging writes. With
                    ZooKeeper, ``partition-leader`` then means a leader that is
                    also the controller: an ISR shrinks only through the
                    controller, a broker there, and the cut would hide it
* ``halves``        all nodes split into two random halves
* ``majority-ring`` each node sees a majority, no two the same majority (Jepsen's)
* ``zookeeper``     the targets lose the metadata quorum only: the ZooKeeper
                    ensemble, or in KRaft mode the controllers
* ``clients``       the harness's clients lose the targets; the cluster does not
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clusters.errors import ClusterError
from clusters.node import Node, tcp_open
from faults.base import Fault, FaultError

CHAIN = "KCHAOS"
MODES = ("isolate", "brokers", "halves", "majority-ring", "zookeeper", "clients")


def iptables(node: Node, *args: str, check: bool = True) -> bool:
    result = node.in_netns("iptables", "-w", *args)
    if check and result.returncode != 0:
        raise FaultError(f"iptables {' '.join(args)} on {node.name}: {result.stderr.strip()}")
    return result.returncode == 0


def cut(node: Node, addresses: list[str]) -> None:
    """Drop everything between ``node`` and ``addresses``."""
    iptables(node, "-N", CHAIN, check=False)
    for hook in ("INPUT", "OUTPUT"):
        if not iptables(node, "-C", hook, "-j", CHAIN, check=False):
            iptables(node, "-I", hook, "1", "-j", CHAIN)
    for address in addresses:
        iptables(node, "-A", CHAIN, "-s", address, "-j", "DROP")
        iptables(node, "-A", CHAIN, "-d", address, "-j", "DROP")


def mend(node: Node) -> None:
    """Remove the chain ``cut`` added, and nothing else."""
    for hook in ("INPUT", "OUTPUT"):
        while iptables(node, "-C", hook, "-j", CHAIN, check=False):
            iptables(node, "-D", hook, "-j", CHAIN)
    if iptables(node, "-L", CHAIN, "-n", check=False):
        iptables(node, "-F", CHAIN)
        iptables(node, "-X", CHAIN)


def ring_grudges(nodes: list[Node]) -> dict[str, set[str]]:
    """Who cannot see whom in a majority ring: each node sees the ``k`` nearest on either side."""
    n = len(nodes)
    majority = n // 2 + 1
    k = math.ceil((majority - 1) / 2)
    grudges: dict[str, set[str]] = {}
    for i, node in enumerate(nodes):
        near = {nodes[(i + d) % n].name for d in range(-k, k + 1)}
        grudges[node.name] = {m.name for m in nodes if m.name not in near}
    return grudges


class PartitionFault(Fault):
    kind = "partition"
    options = {"mode": "isolate"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cut: dict[str, list[str]] = {}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        super().check_options(options)
        if options.get("mode", "isolate") not in MODES:
            raise FaultError(f"partition mode must be one of {', '.join(MODES)}, not {options['mode']!r}")

    def choose(self, target: str) -> list[Node]:
        if self.settings["mode"] in ("halves", "majority-ring"):
            return sorted((n for n in self.cluster.nodes if n.running), key=lambda n: n.name)
        if self.settings["mode"] == "brokers" and target == "partition-leader" and not self.cluster.kraft:
            return self._controller_if_leader()
        return super().choose(target)

    def _controller_if_leader(self) -> list[Node]:
        """A leader shrinks its ISR through the controller; with ZooKeeper the controller is a broker, so
        a leader cut from the other brokers can shrink it only when it is the controller itself."""
        try:
            controller = self.cluster.controller()
            leads = any(p.leader == controller.node_id for p in self.cluster.partitions(self.topic))
        except ClusterError:
            return []
        return [controller] if leads and controller.running else []

    def grudges(self, nodes: list[Node]) -> dict[Node, list[Node]]:
        """For each node that gets rules: the nodes it must not reach."""
        mode = self.settings["mode"]
        everyone = sorted(self.cluster.nodes, key=lambda n: n.name)
        if mode == "isolate":
            return {t: [n for n in everyone if n is not t] for t in nodes}
        if mode == "brokers":
            return {t: [b for b in self.cluster.brokers if b not in nodes] for t in nodes}
        if mode == "zookeeper":
            quorum = self.cluster.metadata_nodes
            return {t: list(quorum) for t in nodes if t not in quorum}
        shuffled = list(nodes)
        self.rng.shuffle(shuffled)
        if mode == "halves":
            half = len(shuffled) // 2
            return {t: shuffled[half:] for t in shuffled[:half]}
        names = ring_grudges(shuffled)
        by_name = {n.name: n for n in shuffled}
        return {t: [by_name[m] for m in sorted(names[t.name])] for t in shuffled if names[t.name]}

    def apply(self, nodes: list[Node]) -> str:
        if self.settings["mode"] == "clients":
            client = self.cluster.client_address
            plan = {t: [client] for t in nodes}
        else:
            plan = {t: [p.ip for p in peers] for t, peers in self.grudges(nodes).items()}
            probes = {t: peers[0] for t, peers in self.grudges(nodes).items() if peers}
        try:
            for node, addresses in plan.items():
                self._cut[node.name] = addresses
                cut(node, addresses)
            if self.settings["mode"] == "clients":
                for node in plan:
                    if tcp_open(node.ip, node.service_port):
                        raise FaultError(f"partition did not take effect: clients still reach {node.name}")
            else:
                for node, peer in probes.items():
                    if node.can_reach(peer.ip, peer.service_port):
                        raise FaultError(f"partition did not take effect: {node.name} still reaches {peer.name}")
        except ClusterError as e:
            raise FaultError(str(e)) from None
        cuts = "; ".join(f"{n.name} -/- {', '.join(a)}" for n, a in plan.items())
        return f"{self.settings['mode']}: {cuts}"

    def heal(self, nodes: list[Node]) -> None:
        try:
            for node in self.cluster.nodes:
                if node.name in self._cut and node.running:
                    mend(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        self._cut.clear()
