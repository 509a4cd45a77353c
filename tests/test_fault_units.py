"""Pure logic of the faults: who is cut from whom, and which options a fault takes."""

from __future__ import annotations

import json
import random
from itertools import combinations
from pathlib import Path

import pytest

from catalogue.faults import FAULT_KINDS
from faults.base import Fault, FaultError, FaultOptions
from faults.schedule import SAME, FaultPlan, Nemesis
from rundir.layout import RunDir
from workloads.history import History, RunClock
from faults.partition import PartitionFault, ring_grudges
from faults.registry import FAULTS
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
