"""The request-level faults and lossy-network without a cluster: a window that touched nothing is recorded as
not having taken effect (and the run is then not judged as if it had), and lossy-network's iptables rules."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from clusters.request_path import HeldRequest
from faults.base import Fault, FaultError
from faults.delay_requests import DelayRequestsFault
from faults.drop_responses import DropResponsesFault
from faults.lossy_network import LossyNetworkFault, dropped_packets, hook_rules, loss_rules, unloss_rules
from faults.registry import FAULTS
from faults.replay_requests import ReplayRequestsFault
from faults.schedule import FaultPlan, Nemesis
from rundir.documents import fault_windows
from rundir.layout import RunDir
from verdicts.expect import run_not_judged
from verdicts.verdict import run_record
from waiting import eventually
from workloads.history import History, RunClock


class FakePath:
    """The request path as a request fault sees it: rules in, records out."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.rules: list[dict[str, Any]] = []

    def hold(self, apis: list[str], **kwargs: Any) -> str:
        self.rules.append({"apis": apis, **kwargs})
        return f"r{len(self.rules)}"

    def release(self, rule: str, flush: bool = False) -> int:
        return 0

    def held(self) -> list[HeldRequest]:
        return [HeldRequest(**r) for r in self.records]

    def settled(self, rules: list[str], timeout_s: float) -> list[HeldRequest]:
        return [h for h in self.held() if h.rule in rules]   # the records as they stand: nothing is pending here


class FakeCluster:
    def __init__(self, path: FakePath) -> None:
        self.request_path = path


class Broker:
    name, node_id, role, running = "broker2", 2, "broker", True


class Producer:
    name = base_name = "p0"
    role = "producer"


def record(rule: str = "r1", cause: str = "matched", action: str = "response-dropped") -> dict[str, Any]:
    return {"fault": "drop-responses", "rule": rule, "api": "Produce", "api_version": 9, "client": "kchaos-p0",
            "node": 2, "connection": 4, "correlation_id": 7, "cause": cause, "action": action, "held_ns": 10,
            "release_at_ns": 10, "released_ns": 10, "client_closed": False, "response_ns": 20,
            "response_error": "none", "response_forwarded": False, "outcome": "answered", "detail": {}}


@pytest.mark.parametrize("kind", [DelayRequestsFault, DropResponsesFault, ReplayRequestsFault])
def test_a_request_fault_whose_window_matched_nothing_says_it_took_no_effect(kind: type[Fault]) -> None:
    path = FakePath([])
    fault = kind(FakeCluster(path), "t", random.Random(1), {"apis": "Produce"}, clients=[Producer()])  # type: ignore[arg-type]
    fault.apply([Broker()])  # type: ignore[list-item]
    assert path.rules[0]["action"] == kind.action and path.rules[0]["clients"] == ["kchaos-p0", "kchaos-p0.*"]
    fault.heal([Broker()])  # type: ignore[list-item]
    assert fault.no_effect() == f"{kind.kind} matched no request in its window (Produce from producer to broker2)"
    assert fault.evidence(0) == []

    path = FakePath([record(), record(cause="behind")])
    fault = kind(FakeCluster(path), "t", random.Random(1), {"apis": "Produce"}, clients=[Producer()])  # type: ignore[arg-type]
    fault.apply([Broker()])  # type: ignore[list-item]
    fault.heal([Broker()])  # type: ignore[list-item]
    assert fault.no_effect() is None and len(fault.evidence(0)) == 2


def test_the_request_faults_describe_what_they_do() -> None:
    path = FakePath([])
    drop = DropResponsesFault(FakeCluster(path), "t", random.Random(1), {"apis": "Produce,EndTxn"},  # type: ignore[arg-type]
                              clients=[Producer()])  # type: ignore[list-item]
    assert drop.apply([Broker()]) == "drop the answers to Produce, EndTxn from producer to broker2 on every connection"  # type: ignore[list-item]
    replay = ReplayRequestsFault(FakeCluster(path), "t", random.Random(1), {"hold_s": 2.0},  # type: ignore[arg-type]
                                 clients=[Producer()])  # type: ignore[list-item]
    assert replay.apply([Broker()]) == ("replay up to 1 Produce from producer to broker2 2.0 s later on a new "  # type: ignore[list-item]
                                        "connection (every connection)")
    assert path.rules[1]["hold_s"] == 2.0 and path.rules[1]["limit"] == 1 and path.rules[0]["hold_s"] == 0
    with pytest.raises(FaultError, match="drop-responses has no option hold_s"):
        DropResponsesFault.check_options({"hold_s": 1})


class Untouched(Fault):
    """A fault that was on and found nothing to act on."""

    kind = "untouched"

    def choose(self, target: str) -> list[Any]:
        return [Broker()]

    def apply(self, nodes: list[Any]) -> str:
        return "watching"

    def heal(self, nodes: list[Any]) -> None:
        pass

    def no_effect(self) -> str | None:
        return "untouched matched no request in its window"


def test_an_application_that_took_no_effect_is_recorded_skipped_and_the_run_not_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FAULTS, "untouched", Untouched)
    history = History(RunDir(tmp_path), RunClock())
    plan = FaultPlan("untouched", "partition-leader", (60, 60), 0.2)
    nemesis = Nemesis(None, "t", [plan], history, seed=1, warmup_s=0, load_s=1)  # type: ignore[arg-type]
    nemesis.start()
    eventually(lambda: nemesis.skipped == 1, 5, "the heal finds it took no effect", interval_s=0.01)
    nemesis.stop()
    history.close()
    assert (nemesis.applied, nemesis.skipped) == (0, 1)
    events = [json.loads(line) for line in (tmp_path / "history" / "events.jsonl").read_text().splitlines()]
    start, heal, skipped = events
    assert [e["phase"] for e in events] == ["start", "heal", "skipped"]
    assert skipped["detail"] == "untouched matched no request in its window"
    assert (skipped["start_ns"], skipped["targets"], skipped["end_ns"]) == (start["start_ns"], ["broker2"],
                                                                            heal["end_ns"])
    assert fault_windows(events[:2]) != [] and fault_windows(events) == []   # no fault N in report or chains
    scenario = {"name": "s", "faults": [{"kind": "untouched", "target": "partition-leader"}]}
    record_ = run_record(RunDir(tmp_path), scenario)
    assert record_["faults"] == {"planned": 1, "applied": 0, "skipped": 1,
                                 "skip_reasons": ["untouched matched no request in its window"]}
    assert run_not_judged(record_, scenario) == [
        "none of the scenario's 1 fault took effect (untouched matched no request in its window)"]


# --- lossy-network ----------------------------------------------------------------------------------------------


def test_lossy_network_rules_drop_at_random_on_the_interface_and_heal_removes_exactly_them() -> None:
    assert loss_rules("KCHAOS-LOSS-1", 0.25, None, []) == [
        ":KCHAOS-LOSS-1 - [0:0]",
        "-A KCHAOS-LOSS-1 -m statistic --mode random --probability 0.250000 -j DROP",
        "-I INPUT 1 -i eth0 -j KCHAOS-LOSS-1", "-I OUTPUT 1 -o eth0 -j KCHAOS-LOSS-1"]
    hooked = ["-P INPUT ACCEPT", "-N KCHAOS-LOSS-1", *hook_rules("KCHAOS-LOSS-1")]
    assert loss_rules("KCHAOS-LOSS-1", 0.05, ["10.1.0.4", "10.1.0.3"], hooked) == [
        ":KCHAOS-LOSS-1 - [0:0]",
        "-A KCHAOS-LOSS-1 -s 10.1.0.3 -m statistic --mode random --probability 0.050000 -j DROP",
        "-A KCHAOS-LOSS-1 -d 10.1.0.3 -m statistic --mode random --probability 0.050000 -j DROP",
        "-A KCHAOS-LOSS-1 -s 10.1.0.4 -m statistic --mode random --probability 0.050000 -j DROP",
        "-A KCHAOS-LOSS-1 -d 10.1.0.4 -m statistic --mode random --probability 0.050000 -j DROP"]
    assert unloss_rules("KCHAOS-LOSS-1", hooked + ["-N KCHAOS-2"]) == [
        "-D INPUT -i eth0 -j KCHAOS-LOSS-1", "-D OUTPUT -o eth0 -j KCHAOS-LOSS-1", "-F KCHAOS-LOSS-1",
        "-X KCHAOS-LOSS-1"]
    assert unloss_rules("KCHAOS-LOSS-1", ["-P INPUT ACCEPT"]) == []


def test_lossy_network_counts_the_packets_its_rules_dropped() -> None:
    listing = ("Chain KCHAOS-LOSS-1 (2 references)\n"
               "    pkts      bytes target     prot opt in     out     source               destination\n"
               "      17     2310 DROP       all  --  *      *       10.1.0.3             0.0.0.0/0            "
               "statistic mode random probability 0.10000000009\n"
               "       4      240 DROP       all  --  *      *       0.0.0.0/0            10.1.0.3             "
               "statistic mode random probability 0.10000000009\n")
    assert dropped_packets(listing) == 21 and dropped_packets("Chain X (0 references)\n") == 0


def test_lossy_network_options_are_checked() -> None:
    LossyNetworkFault.check_options({"probability": 0.5, "peers": "brokers"})
    with pytest.raises(FaultError, match="probability: input should be"):
        LossyNetworkFault.check_options({"probability": 0})
    with pytest.raises(FaultError, match="peers must be one of all, clients, brokers"):
        LossyNetworkFault.check_options({"peers": "zookeeper"})
    assert not LossyNetworkFault.request_level and DropResponsesFault.request_level


# ------------------------------------------------------------------------- the request path between brokers

def test_role_broker_needs_the_inter_broker_request_path_and_is_refused_in_one_line_without_it(tmp_path: Path) -> None:
    from catalogue.exits import HarnessError
    from clusters.spec import ClusterSpec
    from harness.scenario import load_scenario

    options = {"apis": "WriteTxnMarkers", "roles": "broker"}
    for kind in (DelayRequestsFault, DropResponsesFault, ReplayRequestsFault):
        with pytest.raises(FaultError, match="roles broker needs the request path between the brokers: set "
                                             "cluster.inter_broker_request_path: true"):
            kind.check_plan("partition-leader", kind.check_options(options), ClusterSpec(request_path=True))
        kind.check_plan("partition-leader", kind.check_options(options),
                        ClusterSpec(request_path=True, inter_broker_request_path=True))
    fault = ("faults: [{kind: delay-requests, target: partition-leader, duration_s: 10,\n"
             "          options: {apis: WriteTxnMarkers, hold_s: 4, roles: broker}}]\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(fault)
    with pytest.raises(HarnessError) as e:
        load_scenario(scenario)
    assert "faults.0: delay-requests: roles broker needs the request path between the brokers" in str(e.value)
    assert "\n" not in str(e.value)   # HarnessError: exit 2
    scenario.write_text("cluster: {inter_broker_request_path: true}\n" + fault)
    spec = load_scenario(scenario).cluster_spec()
    assert spec.request_path and spec.inter_broker_request_path
    # no request-level fault: the path all the same
    scenario.write_text("cluster: {inter_broker_request_path: true}\n")
    assert load_scenario(scenario).cluster_spec().request_path
    scenario.write_text("faults: [{kind: kill}]\n")
    assert not load_scenario(scenario).cluster_spec().inter_broker_request_path


def test_faults_that_pick_traffic_by_address_are_refused_when_the_brokers_talk_through_the_request_path() -> None:
    from clusters.spec import ClusterSpec
    from faults.partition import PartitionFault

    spec = ClusterSpec(request_path=True, inter_broker_request_path=True)
    for mode in ("isolate", "brokers", "halves", "clients"):
        with pytest.raises(FaultError, match=f"partition mode {mode} cuts nodes by address"):
            PartitionFault.check_plan("partition-leader", PartitionFault.check_options({"mode": mode}), spec)
    PartitionFault.check_plan("partition-leader", PartitionFault.check_options({"mode": "zookeeper"}), spec)
    brokers = PartitionFault.check_options({"mode": "brokers"})
    PartitionFault.check_plan("partition-leader", brokers, ClusterSpec(request_path=True))
    for peers in ("brokers", "clients"):
        with pytest.raises(FaultError, match=f"lossy-network peers {peers} picks packets by address"):
            LossyNetworkFault.check_plan("partition-leader", LossyNetworkFault.check_options({"peers": peers}), spec)
    LossyNetworkFault.check_plan("partition-leader", LossyNetworkFault.check_options({"peers": "all"}), spec)
    peers_brokers = LossyNetworkFault.check_options({"peers": "brokers"})
    LossyNetworkFault.check_plan("partition-leader", peers_brokers, ClusterSpec())


def test_role_broker_matches_the_brokers_own_client_ids() -> None:
    from clusters.proxy.core import client_matches

    class Brokers(FakeCluster):
        brokers = [Broker(), type("B", (), {"node_id": 1})(), type("B", (), {"node_id": 3})()]

    path = FakePath([])
    fault = DelayRequestsFault(Brokers(path), "t", random.Random(1),  # type: ignore[arg-type]
                               {"apis": "WriteTxnMarkers,Fetch", "roles": "producer,broker"}, clients=[Producer()])  # type: ignore[list-item]
    assert fault.apply([Broker()]) == ("hold WriteTxnMarkers, Fetch from producer/broker to broker2 for 6.0 s on "  # type: ignore[list-item]
                                       "connections open now")
    clients = tuple(path.rules[0]["clients"])
    assert clients == ("kchaos-p0", "kchaos-p0.*", "broker-*", "AddPartitionsManager-client-*", "1", "2", "3")
    for client_id in ("broker-2-fetcher-0", "broker-1-txn-marker-sender", "AddPartitionsManager-client-3", "2",
                      "kchaos-p0.1"):
        assert client_matches(client_id, clients), client_id
    for client_id in ("kchaos-c0", "4", "rdkafka", "broker"):
        assert not client_matches(client_id, clients), client_id
