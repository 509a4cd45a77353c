"""group_protocol (KIP-848): the role's client setting group.protocol on both clients, refused in one line where
the brokers, the client release or the role's other settings cannot take the consumer protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from catalogue.exits import HarnessError
from harness import pipeline_role
from harness.scenario import Scenario, load_scenario

KRAFT_4 = "cluster: {kafka_version: 4.3.1, metadata: kraft}\n"  # the 4.x release make setup prepares


def load(tmp_path: Path, text: str, overrides: list[str] = ()) -> Scenario:  # type: ignore[assignment]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_scenario(path, overrides)


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(HarnessError) as e:
        load(tmp_path, text)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_the_setting_reaches_every_consumer_and_pipeline_process_of_either_client(tmp_path: Path,
                                                                                 client: str) -> None:
    text = (KRAFT_4 + f"workload:\n  client: {client}\n  consumers: {{group_protocol: consumer, config: "
            "{auto.commit.interval.ms: 100}}\n  pipeline: {group_protocol: consumer}\n")
    w = load(tmp_path, text).workload
    assert w.role("consumers").config == {"auto.commit.interval.ms": 100, "group.protocol": "consumer"}
    assert w.role("pipeline").config == {"group.protocol": "consumer"}
    assert "group.protocol" not in w.role("producers").config
    assert "group.protocol" not in pipeline_role.producer_view(w).config
    # a role on the other client gets it too, and null leaves the client's default alone
    other = "java" if client == "librdkafka" else "librdkafka"
    w = load(tmp_path, text, [f"workload.pipeline.client={other}", "workload.consumers.group_protocol=null"]).workload
    assert (w.role("pipeline").client, w.role("pipeline").config) == (other, {"group.protocol": "consumer"})
    assert w.role("consumers").config == {"auto.commit.interval.ms": 100}


@pytest.mark.parametrize("cluster", ["{}", "{metadata: kraft}", "{kafka_version: 4.3.1, metadata: kraft}"])
@pytest.mark.parametrize("client", ["librdkafka", "java"])
def test_classic_is_accepted_on_every_cluster_and_client_with_the_classic_settings(tmp_path: Path, cluster: str,
                                                                                   client: str) -> None:
    text = (f"cluster: {cluster}\nworkload:\n  client: {client}\n  consumers: {{group_protocol: classic, config: "
            "{session.timeout.ms: 6000, heartbeat.interval.ms: 2000}}\n"
            "  pipeline: {group_protocol: classic, config: {session.timeout.ms: 6000}}\n")
    w = load(tmp_path, text).workload
    assert w.role("consumers").config["group.protocol"] == w.role("pipeline").config["group.protocol"] == "classic"


def test_the_consumer_protocol_runs_through_an_upgrade_between_4_x_releases_with_fast_broker_side_timeouts(
        tmp_path: Path) -> None:
    """What a crash scenario sets instead of session.timeout.ms, and the assignor setting both clients keep."""
    text = ("cluster:\n  kafka_version: 4.0.2\n  metadata: kraft\n  broker_config:\n"
            "    group.consumer.session.timeout.ms: 6000\n    group.consumer.min.session.timeout.ms: 6000\n"
            "    group.consumer.heartbeat.interval.ms: 2000\n    group.consumer.min.heartbeat.interval.ms: 1000\n"
            "    group.coordinator.rebalance.protocols: classic,consumer\n"
            "  features: {group.version: 1}\n"
            "workload: {consumers: {group_protocol: consumer, config: {group.remote.assignor: uniform}}}\n"
            "faults: [{kind: rolling-upgrade, options: {to_version: 4.3.1}}]\n")
    assert load(tmp_path, text).workload.role("consumers").config["group.protocol"] == "consumer"


@pytest.mark.parametrize("text, message", [
    ("workload: {consumers: {group_protocol: cooperative}}",
     "workload.consumers.group_protocol: Input should be 'classic' or 'consumer'"),
    (KRAFT_4 + "workload: {consumers: {group_protocol: consumer, config: {group.protocol: consumer}}}",
     "workload.consumers: set group_protocol or config.group.protocol, not both"),
    (KRAFT_4 + "workload: {pipeline: {group_protocol: classic, librdkafka_config: {group.protocol: classic}}}",
     "workload.pipeline: set group_protocol or librdkafka_config.group.protocol, not both"),
    # the brokers
    ("workload: {consumers: {group_protocol: consumer}}",
     "workload.consumers.group_protocol=consumer needs KRaft and Kafka 4.0 or later on every release the scenario "
     "runs, not cluster.metadata=zookeeper and cluster.kafka_version=3.9.2"),
    ("cluster: {metadata: kraft}\nworkload: {pipeline: {config: {group.protocol: consumer}}}",
     "workload.pipeline.config.group.protocol=consumer needs KRaft and Kafka 4.0 or later on every release the "
     "scenario runs, not cluster.kafka_version=3.9.2"),
    ("cluster: {metadata: kraft}\nworkload: {consumers: {group_protocol: consumer}}\n"
     "faults: [{kind: rolling-upgrade, options: {to_version: 4.0.2}}]",
     "not cluster.kafka_version=3.9.2"),
    ("cluster: {kafka_version: 4.0.2, metadata: kraft, features: {group.version: 0}}\n"
     "workload: {consumers: {group_protocol: consumer}}",
     "workload.consumers.group_protocol=consumer: cluster.features.group.version=0 turns the consumer group "
     "protocol off (the brokers would answer its heartbeats UNSUPPORTED_VERSION)"),
    ("cluster: {kafka_version: 4.0.2, metadata: kraft, broker_config: {group.coordinator.rebalance.protocols: "
     "classic}}\nworkload: {consumers: {group_protocol: consumer}}",
     "workload.consumers.group_protocol=consumer: cluster.broker_config.group.coordinator.rebalance.protocols="
     "classic leaves out consumer (the brokers would answer its heartbeats UNSUPPORTED_VERSION)"),
    # the client's release
    (KRAFT_4 + "workload: {consumers: {group_protocol: consumer, client_version: 2.10.0}}",
     "workload.consumers.group_protocol=consumer needs librdkafka 2.12 or later (where it is generally "
     "available), not confluent-kafka 2.10.0"),
    (KRAFT_4 + "workload: {client: java, pipeline: {group_protocol: consumer, client_version: 3.9.2}}",
     "workload.pipeline.group_protocol=consumer needs kafka-clients 4.0 or later (where it is generally "
     "available), not kafka-clients 3.9.2"),
    ("workload: {consumers: {group_protocol: classic, client_version: 2.3.0}}",
     "workload.consumers.group_protocol=classic: confluent-kafka 2.3.0 has no group.protocol setting (it came in "
     "librdkafka 2.4): leave it unset, classic is its only protocol"),
    ("cluster: {kafka_version: 3.5.2}\nworkload: {client: java, consumers: {group_protocol: classic}}",
     "workload.consumers.group_protocol=classic: kafka-clients 3.5.2 has no group.protocol setting (it came in "
     "kafka-clients 3.7)"),
    # the classic settings each client refuses with group.protocol=consumer, in its own words
    (KRAFT_4 + "workload: {consumers: {group_protocol: consumer, config: {session.timeout.ms: 6000}}}",
     "workload.consumers.config.session.timeout.ms: librdkafka refuses it with group.protocol=consumer: it is "
     "defined broker side (cluster.broker_config.group.consumer.session.timeout.ms)"),
    (KRAFT_4 + "workload: {pipeline: {group_protocol: consumer, librdkafka_config: {heartbeat.interval.ms: 500}}}",
     "workload.pipeline.librdkafka_config.heartbeat.interval.ms: librdkafka refuses it with group.protocol="
     "consumer: it is defined broker side (cluster.broker_config.group.consumer.heartbeat.interval.ms)"),
    (KRAFT_4 + "workload: {consumers: {group_protocol: consumer, config: {partition.assignment.strategy: range}}}",
     "workload.consumers.config.partition.assignment.strategy: librdkafka refuses it with group.protocol=consumer: "
     "use group.remote.assignor instead"),
    (KRAFT_4 + "workload: {consumers: {group_protocol: consumer, librdkafka_config: {group.protocol.type: "
     "consumer}}}",
     "workload.consumers.librdkafka_config.group.protocol.type: librdkafka refuses it with group.protocol=consumer"),
    (KRAFT_4 + "workload: {client: java, consumers: {group_protocol: consumer, config: {session.timeout.ms: 6000}}}",
     "workload.consumers.config.session.timeout.ms: Kafka's Java consumer refuses it with group.protocol=consumer "
     "(session.timeout.ms cannot be set when group.protocol=CONSUMER): the session timeout is the brokers' "
     "(cluster.broker_config.group.consumer.session.timeout.ms)"),
    (KRAFT_4 + "workload: {client: java, pipeline: {group_protocol: consumer, java_config: {heartbeat.interval.ms: "
     "500}}}",
     "workload.pipeline.java_config.heartbeat.interval.ms: Kafka's Java consumer refuses it with group.protocol="
     "consumer (heartbeat.interval.ms cannot be set when group.protocol=CONSUMER)"),
    (KRAFT_4 + "workload: {client: java, consumers: {group_protocol: consumer, java_config: "
     "{partition.assignment.strategy: org.apache.kafka.clients.consumer.RangeAssignor}}}",
     "workload.consumers.java_config.partition.assignment.strategy: Kafka's Java consumer refuses it with "
     "group.protocol=consumer (partition.assignment.strategy cannot be set when group.protocol=CONSUMER): the "
     "brokers assign the partitions"),
])
def test_where_the_consumer_protocol_cannot_work_is_refused_in_one_line(tmp_path: Path, text: str,
                                                                       message: str) -> None:
    assert message in refusal(tmp_path, text)


def test_a_locked_librdkafka_before_2_12_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No release pinned: the locked confluent-kafka's librdkafka decides, read from the loaded library."""
    monkeypatch.setattr("harness.group_protocol.locked_librdkafka", lambda: "2.10.1")
    assert ("workload.consumers.group_protocol=consumer needs librdkafka 2.12 or later (where it is generally "
            "available), not the locked confluent-kafka's librdkafka 2.10.1"
            in refusal(tmp_path, KRAFT_4 + "workload: {consumers: {group_protocol: consumer}}"))
