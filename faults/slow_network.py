"""slow-network: limit a node's bandwidth with a tc token-bucket filter (tbf).

tbf shapes what the node sends: replication fetch responses to followers,
fetch responses to consumers, acknowledgements to producers. Only
bandwidth: this kernel has no netem, and latency is not faked.
"""

from __future__ import annotations

from clusters.node import Node
from faults.base import Fault, FaultError

INTERFACE = "eth0"


def tc(node: Node, *args: str) -> str:
    result = node.in_netns("tc", *args)
    if result.returncode != 0:
        raise FaultError(f"tc {' '.join(args)} on {node.name}: {result.stderr.strip()}")
    return result.stdout


class SlowNetworkFault(Fault):
    kind = "slow-network"
    options = {"rate": "1mbit", "burst": "32kbit", "latency": "400ms"}

    def apply(self, nodes: list[Node]) -> str:
        s = self.settings
        for node in nodes:
            tc(node, "qdisc", "add", "dev", INTERFACE, "root", "tbf", "rate", str(s["rate"]),
               "burst", str(s["burst"]), "latency", str(s["latency"]))
            if "tbf" not in tc(node, "qdisc", "show", "dev", INTERFACE):
                raise FaultError(f"slow-network did not take effect on {node.name}")
        return f"tbf rate {s['rate']} on {', '.join(n.name for n in nodes)}"

    def heal(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.running and "tbf" in tc(node, "qdisc", "show", "dev", INTERFACE):
                tc(node, "qdisc", "del", "dev", INTERFACE, "root")
