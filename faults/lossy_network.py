"""lossy-network: drop a fraction of a node's packets at random (iptables' ``statistic`` match), the flaky
network Jepsen calls ``packet``.

Each packet into or out of the node's interface on the chosen path is dropped with probability
``probability``, independently (a round trip is lost about twice as often). The rules live in a chain of the
fault's own, hooked into INPUT and OUTPUT of the node's network namespace for its interface only (a node's
traffic with itself, on loopback, is untouched), applied from the host through the Node interface. They are
registered on the node, and for ``peers: brokers`` on the peers too, so a restart inside the fault gets them
back, naming the current addresses, before the node's service starts. Healing reads the chain's packet
counters (the heal line's detail says how many packets each node dropped), removes exactly that chain and
checks it is gone; a window in which no packet was dropped is recorded as not having taken effect.

Options: ``probability`` (0 < p <= 1, default 0.1); ``peers``: ``all`` (every packet on the interface),
``clients`` (to and from the harness's clients: the workload, or the request path that speaks for it) or
``brokers`` (to and from the other brokers: replication).
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import Field

from clusters.errors import ClusterError
from clusters.node import Node
from clusters.spec import ClusterSpec
from faults.base import Fault, FaultError, FaultOptions
from faults.partition import iptables_restore, iptables_rules, on_each

CHAIN = "KCHAOS-LOSS"
INTERFACE = "eth0"
HOOKS = (("INPUT", "-i"), ("OUTPUT", "-o"))
Peers = Literal["all", "clients", "brokers"]
_chains = itertools.count(1)


def hook_rules(chain: str) -> list[str]:
    """How ``iptables -S`` shows the chain's hooks: the node's interface only, both ways."""
    return [f"-A {hook} {way} {INTERFACE} -j {chain}" for hook, way in HOOKS]


def loss_rules(chain: str, probability: float, peers: list[str] | None, present: list[str]) -> list[str]:
    """iptables-restore lines that make ``chain`` drop each packet to or from ``peers`` (None: every packet)
    with ``probability``, replacing its rules in one transaction and hooking it in the first time."""
    statistic = f"-m statistic --mode random --probability {probability:.6f} -j DROP"
    if peers is None:
        drops = [f"-A {chain} {statistic}"]
    else:
        drops = [f"-A {chain} -{way} {address} {statistic}" for address in sorted(set(peers)) for way in ("s", "d")]
    hooks = [f"-I {hook} 1 {way} {INTERFACE} -j {chain}" for (hook, way), line in zip(HOOKS, hook_rules(chain))
             if line not in present]
    return [f":{chain} - [0:0]", *drops, *hooks]


def unloss_rules(chain: str, present: list[str]) -> list[str]:
    """iptables-restore lines that remove ``chain`` and its hooks, and nothing else."""
    unhook = [line.replace("-A ", "-D ", 1) for line in hook_rules(chain) for _ in range(present.count(line))]
    return [*unhook, *([f"-F {chain}", f"-X {chain}"] if f"-N {chain}" in present else [])]


def dropped_packets(listing: str) -> int:
    """The packets the DROP rules of an ``iptables -nvxL CHAIN`` listing counted."""
    total = 0
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[0].isdigit() and fields[2] == "DROP":
            total += int(fields[0])
    return total


class LossyNetworkOptions(FaultOptions):
    probability: float = Field(0.1, gt=0, le=1, description="the chance each packet is dropped")
    peers: Peers = Field("all", description="whose packets: all (every packet on the interface), clients (the "
                         "harness's clients) or brokers (the other brokers: replication)")


class LossyNetworkFault(Fault):
    kind = "lossy-network"
    Options = LossyNetworkOptions
    settings: LossyNetworkOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chain = f"{CHAIN}-{next(_chains)}"
        self.victims: list[Node] = []
        self.dropped: dict[str, int] = {}

    @classmethod
    def check_plan(cls, target: str, options: LossyNetworkOptions, spec: ClusterSpec) -> None:
        """With the request path between the brokers, their traffic comes from the host's address, as the clients'
        does: peers brokers would miss it, peers clients would take it too."""
        peers = options.peers
        if spec.inter_broker_request_path and peers != "all":
            raise FaultError(f"lossy-network peers {peers} picks packets by address, and with "
                             "cluster.inter_broker_request_path the brokers reach each other through the request "
                             "path on the host, from the clients' address: use peers all")

    def _peer_nodes(self) -> list[Node]:
        """The nodes whose addresses the rules name (peers brokers): the other brokers."""
        return [b for b in self.cluster.brokers if b not in self.victims] if self.settings.peers == "brokers" else []

    def _addresses(self, node: Node) -> list[str] | None:
        peers = self.settings.peers
        if peers == "all":
            return None
        if peers == "clients":
            return [self.cluster.client_address]
        return [b.ip for b in self.cluster.brokers if b is not node and b.running]

    def _install(self, node: Node) -> None:
        present = iptables_rules(node)
        iptables_restore(node, loss_rules(self.chain, self.settings.probability, self._addresses(node),
                                          present))
        now = iptables_rules(node)
        if f"-N {self.chain}" not in now or not all(h in now for h in hook_rules(self.chain)):
            raise FaultError(f"lossy-network did not take effect on {node.name}: {self.chain} is not hooked in")

    def _enforce(self, _restarted: Node | None = None) -> None:
        """Every running victim's rules, naming the peers by their current addresses."""
        try:
            on_each(self._install, [n for n in self.victims if n.running])
        except ClusterError as e:
            raise FaultError(str(e)) from None

    def apply(self, nodes: list[Node]) -> str:
        self.victims = list(nodes)
        for node in {n.name: n for n in [*nodes, *self._peer_nodes()]}.values():
            node.network_rules[self.chain] = self._enforce
        self._enforce()
        s = self.settings
        return f"drop {s.probability:g} of packets ({s.peers}) on {', '.join(n.name for n in nodes)}"

    def heal(self, nodes: list[Node]) -> None:
        for node in [*self.victims, *self._peer_nodes()]:
            node.network_rules.pop(self.chain, None)
        try:
            running = [n for n in self.victims if n.running]
            listings = on_each(lambda n: n.in_netns("iptables", "-w", "-nvxL", self.chain), running)
            self.dropped = {n.name: dropped_packets(r.stdout) for n, r in zip(running, listings) if r.returncode == 0}
            on_each(lambda n: iptables_restore(n, lines) if (lines := unloss_rules(self.chain, iptables_rules(n)))
                    else None, running)
            for node in running:
                if any(self.chain in line for line in iptables_rules(node)):
                    raise FaultError(f"lossy-network did not heal on {node.name}: {self.chain} is still there")
        except ClusterError as e:
            raise FaultError(str(e)) from None

    def healed(self) -> str:
        return "dropped " + ", ".join(f"{name} {n} packets" for name, n in sorted(self.dropped.items()))

    def no_effect(self) -> str | None:
        if not self.victims or sum(self.dropped.values()) > 0:
            return None
        return (f"lossy-network dropped no packet on {', '.join(n.name for n in self.victims)} "
                f"(probability {self.settings.probability}, peers {self.settings.peers})")
