"""Pure logic of the rolling faults: what an upgrade by the book needs before it starts, and what it edits."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from clusters.node import Node
from clusters.spec import ClusterSpec
from faults.base import FaultError
from clusters.features import finalized_level
from faults.rolling import IBP, RollingRestartFault, RollingUpgradeFault, minor_release
from faults.schedule import FaultPlan, Nemesis
from rundir.layout import RunDir
from workloads.history import History, RunClock
from harness.scenario import load_scenario
from catalogue.exits import HarnessError
from verdicts.report.settings import durability_settings

SCENARIO = Path(__file__).parent.parent / "scenarios" / "rolling-upgrade.yaml"
KRAFT = ClusterSpec(kafka_version="3.9.2", metadata="kraft")


def test_minor_release_is_what_the_version_settings_name() -> None:
    assert (minor_release("3.7.2"), minor_release("4.3.1")) == ("3.7", "4.3")


@pytest.mark.parametrize("options, spec, said", [
    ({}, KRAFT, "rolling-upgrade needs options.to_version"),
    ({"to_version": "3.9.1"}, KRAFT, "to_version=3.9.1 is not newer than cluster.kafka_version=3.9.2"),
    ({"to_version": "4.0"}, KRAFT, "rolling-upgrade to_version must be an Apache Kafka release such as 3.9.2"),
    ({"to_version": "3.4.0"}, ClusterSpec(kafka_version="3.5.2", metadata="kraft"),
     "rolling-upgrade to_version=3.4.0: kchaos runs Kafka 3.5 and later"),
    ({"to_version": "4.3.1"}, ClusterSpec(kafka_version="3.9.2", broker_config={IBP: "3.9"}),
     "Kafka 4 has no ZooKeeper mode"),
    ({"to_version": "3.9.2"}, ClusterSpec(kafka_version="3.7.2"),
     f"pin cluster.broker_config.{IBP} to 3.7 (the release it starts on)"),
    ({"to_version": "3.9.2"}, ClusterSpec(kafka_version="3.7.2", broker_config={IBP: "3.9"}),
     f"pin cluster.broker_config.{IBP} to 3.7"),
])
def test_an_upgrade_that_is_not_by_the_book_is_refused(options: dict[str, str], spec: ClusterSpec, said: str) -> None:
    with pytest.raises(FaultError) as refused:
        RollingUpgradeFault.check_plan("all-brokers", RollingUpgradeFault.check_options(options), spec)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_possible_upgrade_passes() -> None:
    RollingUpgradeFault.check_plan("all-brokers", RollingUpgradeFault.check_options({"to_version": "4.3.1"}), KRAFT)
    RollingUpgradeFault.check_plan("all-brokers", RollingUpgradeFault.check_options({"to_version": "3.9.2"}),
                                   ClusterSpec(kafka_version="3.7.2", broker_config={IBP: "3.7"}))


def test_a_rolling_fault_hits_every_broker_by_default_and_only_them() -> None:
    s = load_scenario(SCENARIO, [])
    assert s.faults[0].target == "all-brokers"
    with pytest.raises(HarnessError, match="rolling-restart hits a node: target must be one of all-brokers"):
        load_scenario(SCENARIO, ["faults.0.kind=rolling-restart", "faults.0.options={}",
                                 "faults.0.target=partition-leader"])
    with pytest.raises(HarnessError, match="faults.0: rolling-upgrade to_version=3.9.2 is not newer"):
        load_scenario(SCENARIO, ["faults.0.options.to_version=3.9.2"])
    assert RollingRestartFault.targets == ("all-brokers",)


def test_a_setting_is_set_once_in_server_properties(tmp_path: Path) -> None:
    (tmp_path / "server.properties").write_text(f"broker.id=1\n{IBP}=3.7\nlog.dirs=/data\n")
    node = Node("broker1", "broker", 1, None, "net", tmp_path, config_dir=tmp_path)  # type: ignore[arg-type]
    node.set_server_setting(IBP, "3.9")
    lines = (tmp_path / "server.properties").read_text().splitlines()
    assert lines == ["broker.id=1", "log.dirs=/data", f"{IBP}=3.9"]
    with pytest.raises(Exception, match="has no server.properties"):
        Node("b", "broker", 2, None, "net", tmp_path, config_dir=tmp_path / "none").set_server_setting(IBP, "3.9")  # type: ignore[arg-type]


def test_the_finalized_metadata_version_is_read_from_kafka_features_describe() -> None:
    """The lines as kafka-features.sh describe printed them on a 3.5.2 broker (tab-separated cells) and a 4.3.1
    one (padded)."""
    out = ("Feature: metadata.version\tSupportedMinVersion: 3.0-IV1\tSupportedMaxVersion: 3.5-IV2\t"
           "FinalizedVersionLevel: 3.5-IV2\tEpoch: 357\n")
    assert finalized_level(out, "metadata.version") == "3.5-IV2"
    assert finalized_level(out, "transaction.version") is None
    padded = ("Feature: eligible.leader.replicas.version          SupportedMinVersion: 0                "
              "SupportedMaxVersion: 1                FinalizedVersionLevel: 1                Epoch: 27\n"
              "Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          "
              "SupportedMaxVersion: 4.3-IV0          FinalizedVersionLevel: 4.3-IV0          Epoch: 27\n")
    assert finalized_level(padded, "metadata.version") == "4.3-IV0"  # as 4.3.1 prints it
    assert finalized_level(padded, "eligible.leader.replicas.version") == "1"


def test_the_report_says_the_release_a_rolling_upgrade_brings() -> None:
    s = load_scenario(SCENARIO, []).resolved()
    kafka = dict(durability_settings(s))["Kafka"]
    assert kafka.startswith("3.9.2 (kraft), then 4.3.1 by a rolling upgrade")


# --- what the roll writes down: a node-version line per node restarted and per setting raised --------------


class RollNode:
    """Stands in for a Node a roll restarts: a name, a role, the release its container runs, whether it runs."""

    def __init__(self, name: str, role: str, node_id: int, version: str) -> None:
        self.name, self.role, self.node_id, self.version = name, role, node_id, version
        self.running = True
        self.settings: dict[str, str] = {}

    def stop(self) -> None:
        self.running = False

    def set_server_setting(self, name: str, value: str) -> None:
        self.settings[name] = value


class RollCluster:
    """Stands in for a Cluster: a replaced node runs the new release, a recovered one runs and is in every ISR."""

    def __init__(self, kraft: bool, version: str = "3.9.2") -> None:
        self.kraft = kraft
        self.brokers = [RollNode(f"broker{i}", "broker", i, version) for i in (1, 2, 3)]
        self.controllers = [RollNode(f"controller{i}", "controller", 100 + i, version) for i in (1, 2)] if kraft else []
        self.nodes = self.controllers + self.brokers

    def partitions(self, topic: str) -> list[SimpleNamespace]:
        isr = [n.node_id for n in self.brokers if n.running]
        return [SimpleNamespace(partition=p, isr=isr) for p in (0, 1)]

    def replace_version(self, node: RollNode, version: str) -> None:
        node.version = version

    def recover(self, node: RollNode) -> None:
        node.running = True


def test_a_kraft_upgrade_writes_when_each_node_came_back_on_the_new_release_and_the_raise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("faults.rolling.raise_metadata_version", lambda broker, release: f"{release}-IV0")
    cluster = RollCluster(kraft=True)
    history = History(RunDir(tmp_path), RunClock())
    plan = FaultPlan("rolling-upgrade", "all-brokers", (60, 60), 0, (("to_version", "4.3.1"),))
    nemesis = Nemesis(cluster, "t", [plan], history, seed=1, warmup_s=0, load_s=60)  # type: ignore[arg-type]
    assert nemesis._apply(plan, list(cluster.brokers)) is not None
    nemesis._heal_innermost()
    history.close()
    events = [json.loads(line) for line in (tmp_path / "history" / "events.jsonl").read_text().splitlines()]
    assert [(e["kind"], e.get("phase")) for e in events[:2]] == [("fault", "start"), ("fault", "heal")]
    steps = events[2:]
    assert all(e["kind"] == "node-version" and e["fault"] == "rolling-upgrade" for e in steps)
    restarted = [e for e in steps if e["step"] == "restarted"]
    assert [e["node"] for e in restarted] == ["controller1", "controller2", "broker1", "broker2", "broker3"]
    assert {(e["from_version"], e["version"]) for e in restarted} == {("3.9.2", "4.3.1")}
    for e in restarted:
        assert events[0]["start_ns"] <= e["stopped_ns"] <= e["time_ns"] <= events[1]["end_ns"]
        assert (e["in_sync_ns"] is None) == (e["role"] == "controller")
        assert e["in_sync_ns"] is None or e["time_ns"] <= e["in_sync_ns"]
    assert [e["time_ns"] for e in restarted] == sorted(e["time_ns"] for e in restarted)  # one node at a time
    (raise_line,) = [e for e in steps if e["step"] == "raised"]
    assert (raise_line["setting"], raise_line["value"]) == ("metadata.version", "4.3-IV0")
    assert raise_line["time_ns"] >= restarted[-1]["in_sync_ns"] and "node" not in raise_line


def test_a_zookeeper_upgrade_writes_the_protocol_raise_between_its_two_rolls() -> None:
    cluster = RollCluster(kraft=False, version="3.7.2")
    fault = RollingUpgradeFault(cluster, "t", random.Random(1), {"to_version": "3.9.2"})  # type: ignore[arg-type]
    fault.apply(list(cluster.brokers))  # type: ignore[arg-type]
    lines = fault.evidence(0)
    assert [(e.get("node"), e.get("from_version"), e.get("version"), e.get("setting")) for e in lines] == [
        ("broker1", "3.7.2", "3.9.2", None), ("broker2", "3.7.2", "3.9.2", None), ("broker3", "3.7.2", "3.9.2", None),
        (None, None, None, IBP),
        ("broker1", "3.9.2", "3.9.2", None), ("broker2", "3.9.2", "3.9.2", None), ("broker3", "3.9.2", "3.9.2", None)]
    assert lines[3]["value"] == "3.9" and all(n.settings == {IBP: "3.9"} for n in cluster.brokers)
    origin = lines[0]["time_ns"]
    assert fault.evidence(origin)[0]["time_ns"] == 0  # on the run's clock


def test_a_rolling_restart_writes_each_node_back_on_the_release_it_ran() -> None:
    cluster = RollCluster(kraft=True)
    fault = RollingRestartFault(cluster, "t", random.Random(1), {})  # type: ignore[arg-type]
    fault.apply(list(cluster.brokers))  # type: ignore[arg-type]
    assert [(e["node"], e["step"], e["version"]) for e in fault.evidence(0)] == [
        (f"broker{i}", "restarted", "3.9.2") for i in (1, 2, 3)]
