"""Pure logic of the rolling faults: what an upgrade by the book needs before it starts, and what it edits."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusters.node import Node
from clusters.spec import ClusterSpec
from faults.base import FaultError
from clusters.features import finalized_level
from faults.rolling import IBP, RollingRestartFault, RollingUpgradeFault, minor_release
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
        RollingUpgradeFault.check_plan("all-brokers", options, spec)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_a_possible_upgrade_passes() -> None:
    RollingUpgradeFault.check_plan("all-brokers", {"to_version": "4.3.1"}, KRAFT)
    RollingUpgradeFault.check_plan("all-brokers", {"to_version": "3.9.2"},
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
