"""The partition's plan, its probes, its heal check and its rules across restarts, on a simulated network.

Each fake node keeps an iptables state (chains, hooks, DROP rules) that its
``in_netns`` updates from the very commands the fault sends, and
``can_reach`` answers from both ends' rules: what the fault probes, what it
cut and what it reports can be compared without Docker.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from itertools import permutations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from clusters.node import HOLD_FILE, Node
from clusters.spec import ClusterSpec
from faults.base import FaultError, FaultSkipped
from faults.partition import PartitionFault


class FakeNetwork:
    def __init__(self) -> None:
        self.by_ip: dict[str, FakeNode] = {}
        self.probes: list[tuple[str, str]] = []
        self.ignored: set[tuple[str, str]] = set()   # (node, address): a rule its iptables silently drops

    def connects(self, a: "FakeNode", b: "FakeNode") -> bool:
        """A SYN from a to b and its answer back both pass every hooked chain on the way."""
        return not (a.drops("OUTPUT", a.ip, b.ip) or b.drops("INPUT", a.ip, b.ip)
                    or b.drops("OUTPUT", b.ip, a.ip) or a.drops("INPUT", b.ip, a.ip))


class FakeNode:
    """Stands in for a Node: a name, an address, a role, and an iptables that only remembers."""

    def __init__(self, net: FakeNetwork, name: str, role: str, ip: str) -> None:
        self.net, self.name, self.role, self.ip = net, name, role, ip
        self.node_id = int(name[-1])
        self.running = True
        self.service_port = {"zookeeper": 2181, "broker": 9092, "controller": 9093}[role]
        self.network_rules: dict[str, Any] = {}
        self.new_namespace()
        net.by_ip[ip] = self

    def new_namespace(self) -> None:
        self.chains: dict[str, list[tuple[str, str]]] = {}
        self.hooks: dict[str, list[str]] = {"INPUT": [], "OUTPUT": []}

    def restart(self, new_ip: str | None = None) -> None:
        """What Node.start does: a new, empty namespace, then every registered rule while held."""
        self.new_namespace()
        if new_ip:
            del self.net.by_ip[self.ip]
            self.ip = new_ip
            self.net.by_ip[new_ip] = self
        for rule in list(self.network_rules.values()):
            rule(self)

    def drops(self, hook: str, src: str, dst: str) -> bool:
        return any((way == "s" and addr == src) or (way == "d" and addr == dst)
                   for chain in self.hooks[hook] for way, addr in self.chains.get(chain, []))

    def can_reach(self, ip: str, port: int) -> bool:
        peer = self.net.by_ip[ip]
        self.net.probes.append((self.name, peer.name))
        return self.net.connects(self, peer)

    def in_netns(self, *cmd: str, stdin: str | None = None) -> SimpleNamespace:
        args = [a for a in cmd if a != "-w"]
        if args[0] == "iptables-restore":
            return self._restore(stdin or "")
        assert args[0] == "iptables", cmd
        if args[1:] == ["-S"]:
            return SimpleNamespace(returncode=0, stdout=self._listing(), stderr="")
        return SimpleNamespace(returncode=0 if self._iptables(args[1:]) else 1, stdout="", stderr="")

    def _listing(self) -> str:
        lines = [f"-N {chain}" for chain in self.chains]
        lines += [f"-A {hook} -j {chain}" for hook, chains in self.hooks.items() for chain in chains]
        lines += [f"-A {chain} -{way} {addr}/32 -j DROP" for chain, rules in self.chains.items() for way, addr in rules]
        return "\n".join(lines) + "\n"

    def _restore(self, script: str) -> SimpleNamespace:
        for line in script.splitlines():
            if line.startswith(":"):
                self.chains[line[1:].split()[0]] = []
            elif line.startswith("-"):
                self._iptables(line.split())
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    def _iptables(self, a: list[str]) -> bool:
        op = a[0]
        if op == "-N":
            return self.chains.setdefault(a[1], []) is not None
        if op == "-C":
            return a[3] in self.hooks[a[1]]
        if op == "-I":
            self.hooks[a[1]].insert(0, a[-1])
            return True
        if op == "-A":
            way, addr = a[2][1], a[3].removesuffix("/32")
            if (self.name, addr) not in self.net.ignored:
                self.chains[a[1]].append((way, addr))
            return True
        if op == "-L":
            return a[1] in self.chains
        if op == "-D":
            self.hooks[a[1]].remove(a[3])
        elif op == "-F":
            self.chains[a[1]] = []
        elif op == "-X":
            del self.chains[a[1]]
        return True


class FakeCluster:
    def __init__(self, zookeepers: int = 3, brokers: int = 3) -> None:
        self.net = FakeNetwork()
        self.kraft = False
        self.client_address = "10.0.0.1"
        self.zookeepers_ = [FakeNode(self.net, f"zk{i}", "zookeeper", f"10.0.1.{i}") for i in range(1, zookeepers + 1)]
        self.brokers = [FakeNode(self.net, f"broker{i}", "broker", f"10.0.2.{i}") for i in range(1, brokers + 1)]
        self.nodes = self.zookeepers_ + self.brokers

    @property
    def metadata_nodes(self) -> list[FakeNode]:
        return self.zookeepers_

    def node(self, name: str) -> FakeNode:
        return next(n for n in self.nodes if n.name == name)

    def cut_pairs(self) -> set[tuple[str, str]]:
        """Every ordered pair of nodes whose traffic is dropped now."""
        return {(a.name, b.name) for a, b in permutations(self.nodes, 2) if not self.net.connects(a, b)}


def partition(cluster: FakeCluster, mode: str, seed: int = 1) -> PartitionFault:
    return PartitionFault(cluster, "t", random.Random(seed), {"mode": mode})  # type: ignore[arg-type]


def reported_pairs(detail: str) -> set[tuple[str, str]]:
    """The cut pairs a detail line names ("halves: zk1 -/- broker2, zk3; ..."), both ways."""
    pairs = set()
    for group in detail.split(": ", 1)[1].split("; "):
        a, peers = group.split(" -/- ")
        for b in peers.split(", "):
            pairs |= {(a, b), (b, a)}
    return pairs


PLANS = [("halves", None), ("majority-ring", None), ("isolate", "broker2"), ("brokers", "broker1"),
         ("zookeeper", "broker3")]


def targets(cluster: FakeCluster, mode: str, target: str | None) -> list[FakeNode]:
    return sorted(cluster.nodes, key=lambda n: n.name) if target is None else [cluster.node(target)]


@pytest.mark.parametrize("mode,target", PLANS)
@pytest.mark.parametrize("seed", range(8))
def test_the_probes_check_exactly_the_pairs_the_plan_cut_both_ways(mode: str, target: str | None, seed: int) -> None:
    cluster = FakeCluster()
    fault = partition(cluster, mode, seed)
    detail = fault.apply(targets(cluster, mode, target))  # type: ignore[arg-type]
    cut = cluster.cut_pairs()
    assert cut, "the plan cut nothing"
    assert set(cluster.net.probes) == cut
    assert reported_pairs(detail) == cut  # events.jsonl says what was done


def test_a_link_the_rules_missed_is_caught_whichever_peer_it_is() -> None:
    cluster = FakeCluster()
    broker2, zk3 = cluster.node("broker2"), cluster.node("zk3")
    cluster.net.ignored |= {(broker2.name, zk3.ip), (zk3.name, broker2.ip)}  # that one link stays open
    with pytest.raises(FaultError, match="partition did not take effect: (broker2 still reaches zk3|zk3 still "
                                         "reaches broker2)"):
        partition(cluster, "isolate").apply([broker2])  # type: ignore[list-item]


@pytest.mark.parametrize("mode,target", PLANS)
def test_heal_removes_every_rule_and_checks_the_pairs_reach_again(mode: str, target: str | None) -> None:
    cluster = FakeCluster()
    fault = partition(cluster, mode)
    victims = targets(cluster, mode, target)
    fault.apply(victims)  # type: ignore[arg-type]
    fault.heal(victims)  # type: ignore[arg-type]
    assert cluster.cut_pairs() == set()
    assert all(not n.chains and n.hooks == {"INPUT": [], "OUTPUT": []} for n in cluster.nodes)
    assert all(n.network_rules == {} for n in cluster.nodes)


def test_a_heal_that_left_a_link_cut_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("faults.partition.HEAL_PROBE_S", 1)
    cluster = FakeCluster()
    fault = partition(cluster, "brokers")
    broker1, broker2 = cluster.node("broker1"), cluster.node("broker2")
    fault.apply([broker1])  # type: ignore[list-item]
    broker1.chains["LEFTOVER"] = [("d", broker2.ip)]  # a drop the heal does not own keeps the link down
    broker1.hooks["OUTPUT"].append("LEFTOVER")
    with pytest.raises(FaultError, match="partition did not heal: broker1 still cannot reach broker2"):
        fault.heal([cluster.node("broker1")])  # type: ignore[list-item]


def test_a_nested_partition_heals_only_its_own_rules() -> None:
    cluster = FakeCluster()
    outer, inner = partition(cluster, "brokers"), partition(cluster, "zookeeper")
    broker1 = cluster.node("broker1")
    outer.apply([broker1])  # type: ignore[list-item]
    outer_cut = cluster.cut_pairs()
    inner.apply([broker1])  # type: ignore[list-item]
    inner.heal([broker1])  # type: ignore[list-item]
    assert cluster.cut_pairs() == outer_cut


@pytest.mark.parametrize("new_ip", [None, "10.0.2.99"])
def test_a_side_restarted_inside_the_cut_is_cut_again_before_it_runs(new_ip: str | None) -> None:
    cluster = FakeCluster()
    fault = partition(cluster, "brokers")
    broker1 = cluster.node("broker1")
    fault.apply([broker1])  # type: ignore[list-item]
    cut = cluster.cut_pairs()
    broker2 = cluster.node("broker2")
    broker1.restart(new_ip)
    assert cluster.cut_pairs() == cut
    # the far side's own rules follow the new address too: the cut holds on both ends
    assert any(addr == broker1.ip for chain in broker2.chains.values() for _, addr in chain)
    broker2.restart()
    assert cluster.cut_pairs() == cut
    fault.heal([broker1])  # type: ignore[list-item]
    assert cluster.cut_pairs() == set()


def test_a_node_down_when_cut_is_cut_when_it_comes_back() -> None:
    cluster = FakeCluster()
    broker3 = cluster.node("broker3")
    broker3.running = False
    fault = partition(cluster, "isolate")
    fault.apply([cluster.node("broker1")])  # type: ignore[list-item]
    broker3.running = True
    broker3.restart()
    assert ("broker1", "broker3") in cluster.cut_pairs() and ("broker3", "broker1") in cluster.cut_pairs()


def test_a_plan_empty_at_run_time_is_skipped_before_any_rule() -> None:
    cluster = FakeCluster()
    with pytest.raises(FaultSkipped, match="cuts no link"):
        partition(cluster, "zookeeper").apply([cluster.node("zk2")])  # type: ignore[list-item]
    with pytest.raises(FaultSkipped, match="cuts no link"):
        partition(cluster, "brokers").apply(cluster.brokers)  # type: ignore[arg-type]
    assert all(not n.chains and not n.network_rules for n in cluster.nodes)


ZK = ClusterSpec()
KRAFT = ClusterSpec(metadata="kraft")


@pytest.mark.parametrize("mode,target,spec,why", [
    ("zookeeper", "controller", KRAFT, "target controller is one of them"),
    ("brokers", "all-brokers", ZK, "leaves none of the 3"),
    ("brokers", "all-brokers", KRAFT, "leaves none of the 3"),
    ("brokers", "partition-leader", ClusterSpec(brokers=1), "leaves none of the 1"),
    ("brokers", "majority-brokers", ClusterSpec(brokers=2), "leaves none of the 2"),
    ("majority-ring", "partition-leader", ClusterSpec(brokers=2, zookeepers=1), "needs at least 4 nodes"),
])
def test_plans_that_can_never_cut_are_refused_at_validation(mode: str, target: str, spec: ClusterSpec,
                                                           why: str) -> None:
    with pytest.raises(FaultError, match=why):
        PartitionFault.check_plan(target, PartitionFault.check_options({"mode": mode}), spec)


@pytest.mark.parametrize("mode,target,spec", [
    ("zookeeper", "controller", ZK), ("zookeeper", "random-node", KRAFT), ("brokers", "majority-brokers", ZK),
    ("brokers", "partition-leader", KRAFT), ("brokers", "controller", KRAFT), ("isolate", "all-brokers", ZK),
    ("halves", "partition-leader", ClusterSpec(brokers=1, zookeepers=1)), ("majority-ring", "controller", ZK),
    ("clients", "all-brokers", ZK),
])
def test_plans_that_can_cut_are_accepted(mode: str, target: str, spec: ClusterSpec) -> None:
    PartitionFault.check_plan(target, PartitionFault.check_options({"mode": mode}), spec)


# --- Node.start: the hold file keeps the service back while the rules go in -------------------------------


class FakeContainer:
    def __init__(self) -> None:
        self.status = "exited"
        self.attrs: dict[str, Any] = {"State": {"Pid": 0}}

    def reload(self) -> None:
        pass

    def start(self) -> None:
        self.status, self.attrs["State"]["Pid"] = "running", 4242

    def kill(self, signal: str) -> None:
        self.status, self.attrs["State"]["Pid"] = "exited", 0


@pytest.fixture
def stopped_node(tmp_path: Path) -> Iterator[Node]:
    yield Node("broker1", "broker", 1, FakeContainer(), "net", tmp_path / "data",  # type: ignore[arg-type]
               config_dir=tmp_path)


def test_start_holds_the_service_until_every_rule_is_in(stopped_node: Node, tmp_path: Path) -> None:
    seen = []
    stopped_node.network_rules["cut"] = lambda n: seen.append((n.status, (tmp_path / HOLD_FILE).exists()))
    stopped_node.start()
    assert seen == [("running", True)]
    assert not (tmp_path / HOLD_FILE).exists() and stopped_node.running


def test_a_rule_that_fails_leaves_the_node_killed_not_running_unprotected(stopped_node: Node,
                                                                          tmp_path: Path) -> None:
    def broken(node: Node) -> None:
        raise FaultError("iptables failed")

    stopped_node.network_rules["cut"] = broken
    with pytest.raises(FaultError, match="iptables failed"):
        stopped_node.start()
    assert stopped_node.status == "exited" and not (tmp_path / HOLD_FILE).exists()


def test_detail_names_pairs_in_a_stable_format() -> None:
    cluster = FakeCluster()
    detail = partition(cluster, "brokers").apply([cluster.node("broker1")])  # type: ignore[list-item]
    assert re.fullmatch(r"brokers: broker1 -/- broker2, broker3", detail)
