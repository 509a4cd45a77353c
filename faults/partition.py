"""partition: drop traffic between nodes with iptables inside their network namespaces.

The plan (who loses whom) is drawn once per application. Both sides of every
cut link get DROP rules in a chain of the fault's own, hooked into INPUT and
OUTPUT of their namespaces and applied from the host with nsenter; every cut
pair is then probed both ways. The rules are registered on the nodes, so a
node restarted inside the cut (a nested kill or power loss) gets them back
before its service starts, and the other side's rules follow its new
address. Healing removes exactly those chains and checks that every pair
reaches each other again.

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

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, TypeVar

from pydantic import Field

from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from clusters.errors import ClusterError
from clusters.node import Node, tcp_path_open
from clusters.spec import ClusterSpec
from faults.base import Fault, FaultError, FaultOptions, FaultSkipped

CHAIN = "KCHAOS"
HOOKS = ("INPUT", "OUTPUT")
Mode = Literal["isolate", "brokers", "halves", "majority-ring", "zookeeper", "clients"]
MIN_RING_NODES = 4        # with fewer, a majority of the ring is every node: nobody loses anybody
HEAL_PROBE_S = 10         # how long a healed pair may take to answer again (a loaded machine)
MAX_AT_ONCE = 32          # nsenter processes at once: halves of 6 nodes probe 18 directions
_chains = itertools.count(1)

Link = tuple[Node, Node]  # a cut pair: neither may reach the other
T = TypeVar("T")
V = TypeVar("V")


def iptables_rules(node: Node) -> list[str]:
    """The filter table of ``node``'s namespace, one ``iptables -S`` line each."""
    result = node.in_netns("iptables", "-w", "-S")
    if result.returncode != 0:
        raise FaultError(f"iptables -S on {node.name}: {result.stderr.strip()}")
    return result.stdout.splitlines()


def iptables_restore(node: Node, lines: list[str]) -> None:
    """Apply ``lines`` to the filter table in one transaction: all of them or none."""
    script = "\n".join(["*filter", *lines, "COMMIT", ""])
    result = node.in_netns("iptables-restore", "-w", "--noflush", stdin=script)
    if result.returncode != 0:
        raise FaultError(f"iptables-restore on {node.name}: {' | '.join(result.stderr.strip().splitlines()[:2])}")


def cut(node: Node, chain: str, addresses: Iterable[str]) -> None:
    """Make ``chain`` in ``node``'s namespace drop exactly the traffic to and from ``addresses``.

    One transaction replaces the chain's rules (and hooks it into INPUT and
    OUTPUT the first time), so a link that stays cut is never open in between.
    """
    present = iptables_rules(node)
    drops = [f"-A {chain} -{way} {address} -j DROP" for address in sorted(addresses) for way in ("s", "d")]
    hooks = [f"-I {hook} 1 -j {chain}" for hook in HOOKS if f"-A {hook} -j {chain}" not in present]
    iptables_restore(node, [f":{chain} - [0:0]", *drops, *hooks])


def mend(node: Node, chain: str) -> None:
    """Remove the chain ``cut`` added, and nothing else, in one transaction."""
    present = iptables_rules(node)
    unhook = [f"-D {hook} -j {chain}" for hook in HOOKS for _ in range(present.count(f"-A {hook} -j {chain}"))]
    delete = [f"-F {chain}", f"-X {chain}"] if f"-N {chain}" in present else []
    if unhook or delete:
        iptables_restore(node, [*unhook, *delete])


def on_each(action: Callable[[V], T], items: list[V]) -> list[T]:
    """``action`` on every item at once (up to 32): each waits on Docker and nsenter, slow on a loaded machine."""
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_AT_ONCE, len(items))) as pool:
        return list(pool.map(action, items))


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


def links_of(grudges: Mapping[Node, Iterable[Node]]) -> list[Link]:
    """Every cut pair once, whichever side the plan named it from."""
    seen: dict[frozenset[str], Link] = {}
    for node, peers in grudges.items():
        for peer in peers:
            seen.setdefault(frozenset((node.name, peer.name)), (node, peer))
    return sorted(seen.values(), key=lambda link: (link[0].name, link[1].name))


def reachable(probes: list[Link]) -> list[Link]:
    """The probes ``(a, b)`` in which ``a`` still reaches ``b``'s service port (all at once: a cut
    probe costs its whole time-out)."""
    answers = on_each(lambda p: p[0].can_reach(p[1].ip, p[1].service_port), probes)
    return [probe for probe, open_ in zip(probes, answers) if open_]


def both_ways(links: Iterable[Link]) -> list[Link]:
    return [probe for a, b in links for probe in ((a, b), (b, a))]


class PartitionOptions(FaultOptions):
    mode: Mode = Field("isolate", description="whom it cuts from whom (faults/partition.py's docstring says it for "
                       "each mode)")


class PartitionFault(Fault):
    kind = "partition"
    Options = PartitionOptions
    settings: PartitionOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.chain = f"{CHAIN}-{next(_chains)}"   # its own: a nested partition never removes this one's rules
        self.links: list[Link] = []               # the cut pairs of the current application
        self.cut_from_clients: list[Node] = []    # mode clients: the nodes the harness's clients lose

    @classmethod
    def check_plan(cls, target: str, options: PartitionOptions, spec: ClusterSpec) -> None:
        """Refuse a mode and target that can never cut a link on this cluster."""
        mode = options.mode
        if spec.inter_broker_request_path and mode != "zookeeper":
            raise FaultError(f"partition mode {mode} cuts nodes by address, and with cluster.inter_broker_request_path "
                             "the brokers reach each other through the request path on the host: the cut would miss "
                             "their traffic or cut it with the clients' (only mode zookeeper is exact there)")
        if mode == "zookeeper" and target == "controller" and spec.metadata == "kraft":
            raise FaultError("partition mode zookeeper cuts its targets from the KRaft controllers, and target "
                             "controller is one of them: nothing to cut")
        if mode == "brokers":
            hit = {"all-brokers": spec.brokers, "majority-brokers": spec.brokers // 2 + 1}.get(target, 1)
            if target != "random-node" and hit >= spec.brokers:
                raise FaultError(f"partition mode brokers cuts its targets from the other brokers, and target "
                                 f"{target} leaves none of the {spec.brokers}: nothing to cut")
        if mode == "majority-ring":
            nodes = spec.brokers + (spec.controllers if spec.metadata == "kraft" else spec.zookeepers)
            if nodes < MIN_RING_NODES:
                raise FaultError(f"partition mode majority-ring needs at least {MIN_RING_NODES} nodes; with "
                                 f"{nodes} every majority is all of them: nothing to cut")

    @classmethod
    def check_inner(cls, options: PartitionOptions, inner: type[Fault]) -> None:
        """A node restarted or thawed while cut from the metadata quorum (isolate, zookeeper) cannot register
        again (a thawed broker whose session expired must), so the inner fault's heal, which waits until it
        serves, could never finish (the catalogue says which kinds restart or stop a node; a restarted client
        needs no quorum)."""
        mode = options.mode
        if inner.victim == "node" and (inner.restarts or inner.stops_process) and mode in ("isolate", "zookeeper"):
            what = "restarts" if inner.restarts else "thaws"
            raise FaultError(f"{inner.kind} nested in a partition in mode {mode} {what} its victim while it is "
                             "cut from the metadata quorum: it could never register and the fault never heal "
                             "(mode brokers keeps the quorum reachable)")

    def choose(self, target: str) -> list[Node]:
        if self.settings.mode in ("halves", "majority-ring"):
            return sorted((n for n in self.cluster.nodes if n.running), key=lambda n: n.name)
        if self.settings.mode == "brokers" and target == "partition-leader" and not self.cluster.kraft:
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
        """For each target: the nodes it must not reach. Random modes draw from the run's RNG: call once."""
        mode = self.settings.mode
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
        mode = self.settings.mode
        if mode == "clients":
            self.cut_from_clients = list(nodes)
        else:
            self.links = links_of(self.grudges(nodes))
            if not self.links:
                raise FaultSkipped(f"{mode} on {', '.join(n.name for n in nodes)} cuts no link")
        for node in self._sides():
            node.network_rules[self.chain] = self._restore
        try:
            self._enforce()
            self._verify_cut(self.links, self.cut_from_clients)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        return f"{mode}: {self._describe()}"

    def heal(self, nodes: list[Node]) -> None:
        sides = self._sides()
        for node in sides:
            node.network_rules.pop(self.chain, None)
        try:
            on_each(lambda node: mend(node, self.chain) if node.running else None, sides)
            self._verify_healed()
        except ClusterError as e:
            raise FaultError(str(e)) from None
        self.links, self.cut_from_clients = [], []

    # ------------------------------------------------------------------ rules

    def _sides(self) -> list[Node]:
        """Every node that holds rules of this fault: both ends of each cut link."""
        ends = {n.name: n for link in self.links for n in link}
        ends.update((n.name, n) for n in self.cut_from_clients)
        return sorted(ends.values(), key=lambda n: n.name)

    def _enforce(self) -> None:
        """Give every running side the rules of the plan, naming its peers by their current addresses."""
        sides = self._sides()
        addresses = {n.name: ip for n, ip in zip(sides, on_each(lambda n: n.ip if n.running else "", sides)) if ip}
        drops: dict[str, set[str]] = {n: set() for n in addresses}
        for a, b in self.links:
            if a.name in addresses and b.name in addresses:
                drops[a.name].add(addresses[b.name])
                drops[b.name].add(addresses[a.name])
        if self.cut_from_clients:
            client = self.cluster.client_address
            for node in self.cut_from_clients:
                if node.name in drops:
                    drops[node.name].add(client)
        on_each(lambda node: cut(node, self.chain, drops[node.name]), [n for n in sides if n.name in drops])

    def _restore(self, node: Node) -> None:
        """A side restarted in a new namespace (held before its service runs): its rules back, the other
        sides' rules on its new address, and its links checked cut both ways."""
        try:
            self._enforce()
            self._verify_cut([link for link in self.links if node in link],
                             [n for n in self.cut_from_clients if n is node])
        except ClusterError as e:
            raise FaultError(str(e)) from None

    # ----------------------------------------------------------------- checks

    def _verify_cut(self, links: list[Link], from_clients: list[Node]) -> None:
        """Every link drops traffic both ways (between running nodes); the clients reach no cut node."""
        running = [(a, b) for a, b in links if a.running and b.running]
        leaks = reachable(both_ways(running))
        if leaks:
            a, b = leaks[0]
            raise FaultError(f"partition did not take effect: {a.name} still reaches {b.name}"
                             + (f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""))
        for node in from_clients:
            if tcp_path_open(node.ip, node.service_port):
                raise FaultError(f"partition did not take effect: clients still reach {node.name}")

    def _verify_healed(self) -> None:
        """Every pair that was cut (between running nodes) reaches each other again, both ways."""
        probes = both_ways((a, b) for a, b in self.links if a.running and b.running)

        @retry(stop=stop_after_delay(HEAL_PROBE_S), wait=wait_fixed(0.5), retry=retry_if_result(bool),
               retry_error_callback=lambda state: state.outcome.result())
        def blocked() -> list[Link]:
            nonlocal probes
            open_again = reachable(probes)
            probes = [p for p in probes if p not in open_again]
            return probes

        still = blocked()
        if still:
            a, b = still[0]
            raise FaultError(f"partition did not heal: {a.name} still cannot reach {b.name}")
        for node in self.cut_from_clients:
            if node.running and not tcp_path_open(node.ip, node.service_port):
                raise FaultError(f"partition did not heal: clients still cannot reach {node.name}")

    def _describe(self) -> str:
        if self.cut_from_clients:
            return "clients -/- " + ", ".join(n.name for n in self.cut_from_clients)
        peers: dict[str, list[str]] = {}
        for a, b in self.links:
            peers.setdefault(a.name, []).append(b.name)
        return "; ".join(f"{a} -/- {', '.join(bs)}" for a, bs in peers.items())
