"""Pure logic of the faults: who is cut from whom, and which options a fault takes."""

from __future__ import annotations

import json
import random
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest

from catalogue.faults import FAULT_KINDS
from clusters.cluster import (CONSUMER_OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC, Cluster,
                            PartitionState,
                              coordinator_partition, java_hash)
from clusters.errors import ClusterError
from faults.base import Fault, FaultError, FaultOptions
from faults.schedule import SAME, FaultPlan, Nemesis
from rundir.layout import RunDir
from workloads.history import History, RunClock
from faults.partition import PartitionFault, ring_grudges
from faults.registry import FAULTS
from faults.targets import choose_targets
from waiting import eventually


class Named:
    """Stands in for a Node where only its name matters (the ring is pure arithmetic)."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_majority_ring_gives_every_node_a_different_majority(n: int) -> None:
    nodes = [Named(f"n{i}") for i in range(n)]
    grudges = ring_grudges(nodes)  # type: ignore[arg-type]
    sees = {node.name: {m.name for m in nodes} - grudges[node.name] for node in nodes}
    for name, visible in sees.items():
        assert name in visible and len(visible) >= n // 2 + 1
    if n >= 5:
        assert all(sees[a] != sees[b] for a, b in combinations(sees, 2))
    for a in sees:  # the cut is symmetric: a link is either up or down
        for b in grudges[a]:
            assert a in grudges[b]


def test_fault_options_are_checked() -> None:
    PartitionFault.check_options({"mode": "halves"})
    with pytest.raises(FaultError, match="partition mode must be one of"):
        PartitionFault.check_options({"mode": "sideways"})
    with pytest.raises(FaultError, match="kill has no option rate"):
        FAULTS["kill"].check_options({"rate": "1mbit"})
    assert set(FAULTS) == set(FAULT_KINDS)


# --- composed faults: a fault inside another ------------------------------------------------------------


class Recorded(Fault):
    """A fault that only writes down what the nemesis asked of it."""

    kind = "recorded"
    calls: list[tuple[str, str, tuple[str, ...]]] = []

    def choose(self, target: str) -> list[Named]:  # type: ignore[override]
        return [Named(target)]

    def apply(self, nodes: list[Named]) -> str:  # type: ignore[override]
        self.calls.append(("apply", self.settings.tag, tuple(n.name for n in nodes)))
        return "recorded"

    def heal(self, nodes: list[Named]) -> None:  # type: ignore[override]
        self.calls.append(("heal", self.settings.tag, tuple(n.name for n in nodes)))


class RecordedOptions(FaultOptions):
    tag: str = "?"


Recorded.Options = RecordedOptions


def test_a_nested_fault_hits_the_same_victims_inside_its_outer_fault(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAULTS, "recorded", Recorded)
    Recorded.calls = []
    history = History(RunDir(tmp_path), RunClock())
    inner = FaultPlan("recorded", SAME, (0.3, 0.3), 0.3, (("tag", "inner"),), after_s=0.3)
    outer = FaultPlan("recorded", "leader-x", (60, 60), 1.0, (("tag", "outer"),), then=inner)
    nemesis = Nemesis(None, "t", [outer], history, seed=1, warmup_s=0, load_s=1.5)  # type: ignore[arg-type]
    nemesis.start()
    eventually(lambda: nemesis.current == "recorded leader-x + recorded leader-x", 5,
               "the inner fault runs inside the outer one", interval_s=0.01)
    nemesis._thread.join(timeout=5)
    nemesis.stop()
    history.close()
    assert Recorded.calls == [("apply", "outer", ("leader-x",)), ("apply", "inner", ("leader-x",)),
                              ("heal", "inner", ("leader-x",)), ("heal", "outer", ("leader-x",))]
    events = [json.loads(line) for line in (tmp_path / "history" / "events.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["options"]["tag"]) for e in events] == [
        ("start", "outer"), ("start", "inner"), ("heal", "inner"), ("heal", "outer")]


def test_stopping_heals_nested_faults_innermost_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAULTS, "recorded", Recorded)
    Recorded.calls = []
    history = History(RunDir(tmp_path), RunClock())
    inner = FaultPlan("recorded", SAME, (5, 5), 5, (("tag", "inner"),), after_s=0.1)
    outer = FaultPlan("recorded", "n1", (60, 60), 20, (("tag", "outer"),), then=inner)
    nemesis = Nemesis(None, "t", [outer], history, seed=1, warmup_s=0, load_s=60)  # type: ignore[arg-type]
    nemesis.start()
    eventually(lambda: ("apply", "inner", ("n1",)) in Recorded.calls, 5, "the inner fault is applied", interval_s=0.01)
    nemesis.stop()
    history.close()
    assert [c[:2] for c in Recorded.calls] == [("apply", "outer"), ("apply", "inner"), ("heal", "inner"),
                                               ("heal", "outer")]


def test_brokers_mode_cuts_a_target_from_the_other_brokers_only() -> None:
    class Cluster:
        brokers = [Named("broker1"), Named("broker2"), Named("broker3")]
        nodes = brokers + [Named("zk1")]

    fault = PartitionFault(Cluster(), "t", random.Random(1), {"mode": "brokers"})  # type: ignore[arg-type]
    target = Cluster.brokers[1]
    assert {t.name: [p.name for p in peers] for t, peers in fault.grudges([target]).items()} == {
        "broker2": ["broker1", "broker3"]}


@pytest.mark.parametrize("kind", ["delay-requests", "drop-responses", "replay-requests"])
@pytest.mark.parametrize("target", ["controller", "random-node"])
def test_a_request_fault_takes_only_broker_targets(kind: str, target: str) -> None:
    with pytest.raises(FaultError, match=f"{kind} hits a node: target must be one of partition-leader, random-broker"):
        FAULTS[kind].check_target(target)


# --- coordinator targets: which broker coordinates a transactional id, a consumer group ----------------------


@pytest.mark.parametrize("key, java_hash_code, partition", [
    # String.hashCode() and Utils.abs(hashCode) % 50 as Java 17 computes them
    ("kchaos-app", 1941196361, 11),
    ("kchaos-pipeline", -49926278, 28),
    ("g", 103, 3),
    ("polygenelubricants", -(1 << 31), 0),   # Integer.MIN_VALUE: Utils.abs maps it to 0, not to itself
    ("é€", 15587, 37),                       # UTF-16 code units, not UTF-8 bytes
])
def test_a_key_lands_on_the_partition_kafkas_partition_for_gives(key: str, java_hash_code: int,
                                                                 partition: int) -> None:
    assert java_hash(key) == java_hash_code
    assert coordinator_partition(key, 50) == partition


class Broker:
    """Stands in for a broker Node: an id, a name, running or not."""

    role = "broker"

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.name = f"broker{node_id}"
        self.running = True


class Logs(Cluster):
    """A cluster of three brokers whose coordinators' logs (50 partitions, partition p led by broker p % 3 + 1)
    are only what the test says: no container, no admin client."""

    def __init__(self, topics: tuple[str, ...] = (CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC),
                 leaderless: tuple[int, ...] = ()) -> None:
        self.nodes = [Broker(i) for i in (1, 2, 3)]  # type: ignore[list-item]
        self.cluster_id = "fake"
        self.states = {t: [PartitionState(t, p, None if p in leaderless else p % 3 + 1, (1, 2, 3), (1, 2, 3))
                           for p in range(50)] for t in topics}

    def partitions(self, topic: str, timeout: float = 10) -> list[PartitionState]:
        if topic not in self.states:
            raise ClusterError(f"ZooKeeper has no /brokers/topics/{topic}")
        return self.states[topic]


class GroupMember:
    """A consumer or pipeline handle as a fault sees it: a role, a group, maybe a transactional id."""

    role = "consumer"

    def __init__(self, group: str | None, transactional_id: str | None = None) -> None:
        self.group = group
        self.transactional_id = transactional_id


def test_the_group_coordinator_leads_the_groups_consumer_offsets_partition() -> None:
    cluster = Logs()
    assert cluster.group_coordinator("kchaos-app").node_id == 11 % 3 + 1  # type: ignore[union-attr]
    assert cluster.group_coordinator("kchaos-pipeline").node_id == 28 % 3 + 1  # type: ignore[union-attr]
    assert cluster.transaction_coordinator("kchaos-pipeline").node_id == 28 % 3 + 1  # type: ignore[union-attr]
    assert Logs(topics=(TRANSACTION_STATE_TOPIC,)).group_coordinator("kchaos-app") is None  # not created yet
    assert Logs(leaderless=(11,)).group_coordinator("kchaos-app") is None
    assert Logs(leaderless=(11,)).group_coordinator("kchaos-pipeline").node_id == 2  # type: ignore[union-attr]


def test_a_group_coordinator_fault_hits_the_coordinator_of_one_of_its_clients_groups() -> None:
    # three consumers of one group, a pipeline of another (with a transactional id), a producer of none
    clients = [GroupMember("kchaos-app"), GroupMember("kchaos-app"), GroupMember("kchaos-app"),
               GroupMember("kchaos-pipeline", "kchaos-run-pipe0"), GroupMember(None, "kchaos-run-p0")]
    cluster = Logs()
    fault = FAULTS["pause"](cluster, "t", random.Random(3), clients=clients)  # type: ignore[arg-type]
    hit = [n.name for _ in range(40) for n in fault.choose("group-coordinator")]
    assert len(hit) == 40 and set(hit) == {"broker3", "broker2"}   # kchaos-app: 11 → 3; kchaos-pipeline: 28 → 2
    assert 10 < hit.count("broker2") < 30   # each group as likely, however many processes it has
    again = FAULTS["pause"](cluster, "t", random.Random(3), clients=clients)  # type: ignore[arg-type]
    assert [n.name for _ in range(40) for n in again.choose("group-coordinator")] == hit  # the seed reproduces it
    assert choose_targets(cluster, "t", "group-coordinator", random.Random(1)) == []   # no group: nothing to hit
    cluster.nodes[2].running = False  # type: ignore[attr-defined]
    only = FAULTS["pause"](cluster, "t", random.Random(3), clients=clients[:1])  # type: ignore[arg-type]
    assert only.choose("group-coordinator") == []   # its coordinator is down: the schedule skips this time


class ShareLogs(Logs):
    """Logs with __share_group_state and a topic ``t`` of 6 partitions whose id Kafka prints as TOPIC_ID."""

    TOPIC_ID = "EjRWeJCrze8P7cuph2VDIQ"   # Uuid(0x1234567890abcdef, 0x0fedcba987654321).toString()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(topics=(SHARE_GROUP_STATE_TOPIC,), **kwargs)
        self.states["t"] = [PartitionState("t", p, 1, (1, 2, 3), (1, 2, 3)) for p in range(6)]

    def topic_id(self, topic: str) -> str | None:
        return self.TOPIC_ID if topic == "t" else None


class ShareMember(GroupMember):
    role = "share_consumer"


def test_a_share_coordinator_fault_hits_the_broker_keeping_one_share_partitions_state() -> None:
    cluster = ShareLogs()
    # the state partition of each share partition: abs(hashCode("g:<topic id>:<p>")) % 50, led by that % 3 + 1
    wanted = {p: coordinator_partition(f"g:{ShareLogs.TOPIC_ID}:{p}", 50) for p in range(6)}
    assert [cluster.share_coordinator("g", "t", p).node_id for p in range(6)] == \
        [q % 3 + 1 for q in wanted.values()]   # type: ignore[union-attr]
    assert cluster.share_coordinator("g", "unknown", 0) is None
    assert ShareLogs(leaderless=(wanted[0],)).share_coordinator("g", "t", 0) is None
    members = [ShareMember("g"), ShareMember("g"), GroupMember("kchaos-app")]   # a consumer's group is not one
    fault = FAULTS["kill"](cluster, "t", random.Random(5), clients=members)  # type: ignore[arg-type]
    hit = {n.name for _ in range(60) for n in fault.choose("share-coordinator")}
    assert hit == {f"broker{q % 3 + 1}" for q in wanted.values()}
    assert choose_targets(cluster, "t", "share-coordinator", random.Random(1)) == []   # no share group


def test_both_coordinators_are_node_targets_and_broker_targets_of_the_request_faults() -> None:
    for kind in ("delay-requests", "drop-responses", "replay-requests", "pause", "kill"):
        FAULTS[kind].check_target("group-coordinator")
        FAULTS[kind].check_target("txn-coordinator")
