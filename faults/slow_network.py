"""slow-network: limit a node's bandwidth with a tc token-bucket filter (tbf).

tbf shapes what the node sends: replication fetch responses to followers,
fetch responses to consumers, acknowledgements to producers. Only
bandwidth: this kernel has no netem, and latency is not faked. The shaping
is registered on the node, so a restart inside the fault gets it back
before the node's service starts.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import Field

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError, FaultOptions

INTERFACE = "eth0"
_names = itertools.count(1)


def tc(node: Node, *args: str) -> str:
    result = node.in_netns("tc", *args)
    if result.returncode != 0:
        raise FaultError(f"tc {' '.join(args)} on {node.name}: {result.stderr.strip()}")
    return result.stdout


def shaped(node: Node) -> bool:
    return "tbf" in tc(node, "qdisc", "show", "dev", INTERFACE)


class SlowNetworkOptions(FaultOptions):
    rate: str = Field("1mbit", description="the bandwidth tbf lets through (tc's units)")
    burst: str = Field("32kbit", description="the bucket's size (tc's units)")
    latency: str = Field("400ms", description="how long a packet may wait in the bucket before tbf drops it")


class SlowNetworkFault(Fault):
    kind = "slow-network"
    Options = SlowNetworkOptions
    settings: SlowNetworkOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = f"slow-network-{next(_names)}"   # its key among the node's network rules

    def apply(self, nodes: list[Node]) -> str:
        for node in nodes:
            node.network_rules[self.name] = self._shape
        try:
            for node in nodes:
                self._shape(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        return f"tbf rate {self.settings.rate} on {', '.join(n.name for n in nodes)}"

    def _shape(self, node: Node) -> None:
        """Put the token bucket on the node's interface (``replace``: also right after a restart)."""
        s = self.settings
        tc(node, "qdisc", "replace", "dev", INTERFACE, "root", "tbf", "rate", s.rate, "burst", s.burst,
           "latency", s.latency)
        if not shaped(node):
            raise FaultError(f"slow-network did not take effect on {node.name}")

    def heal(self, nodes: list[Node]) -> None:
        for node in nodes:
            node.network_rules.pop(self.name, None)
        try:
            for node in nodes:
                if node.running and shaped(node):
                    tc(node, "qdisc", "del", "dev", INTERFACE, "root")
                if node.running and shaped(node):
                    raise FaultError(f"slow-network did not heal on {node.name}: tbf still on {INTERFACE}")
        except ClusterError as e:
            raise FaultError(str(e)) from None
