"""Pure logic of the cluster stage: validation, config rendering, image tags."""

from __future__ import annotations

import re
from pathlib import Path

import docker.errors
import pytest
from confluent_kafka import KafkaError

from catalogue.exits import HarnessError
from clusters import config
from clusters.cluster import unknown_topic
from clusters.node import freeze_refused
from clusters.errors import AdminError, ClusterError
from clusters.image import kafka_tag, uses_log4j2
from clusters.kraft_metadata import QuorumState, new_cluster_id, newest, quorum_state
from clusters.spec import ClusterSpec, TopicSpec
from clusters.topics import ask_again
from harness.scenario import load_scenario
from helpers import upgrade_past


def test_min_insync_above_rf_is_refused_in_one_line() -> None:
    with pytest.raises(ClusterError) as e:
        TopicSpec("t", replication_factor=3, min_insync_replicas=4).validate(brokers=3)
    assert "min_insync_replicas=4" in str(e.value) and "\n" not in str(e.value)


def test_rf_above_brokers_is_refused() -> None:
    with pytest.raises(ClusterError, match="replication_factor=4 is impossible with 3 brokers"):
        TopicSpec("t", replication_factor=4).validate(brokers=3)


def test_possible_topic_passes_and_carries_min_insync() -> None:
    spec = TopicSpec("t", partitions=6, replication_factor=3, min_insync_replicas=2, config={"flush.messages": 1})
    spec.validate(brokers=3)
    assert spec.topic_config() == {"flush.messages": "1", "min.insync.replicas": "2"}


@pytest.mark.parametrize("kwargs, message", [
    ({"zookeepers": 2}, "cluster.zookeepers must be an odd number"),
    ({"brokers": 0}, "at least 1"),
    ({"metadata": "etcd"}, "must be zookeeper or kraft"),
    ({"metadata": "kraft", "controllers": 2}, "cluster.controllers must be an odd number"),
    ({"metadata": "kraft", "controllers": 0}, "cluster.controllers must be an odd number"),
    ({"kafka_version": "4.3.1"}, "Kafka 4.3.1 has no ZooKeeper mode .*set cluster.metadata=kraft"),
    ({"kafka_version": "latest"}, "cluster.kafka_version must be an Apache Kafka release such as 3.9.2"),
    ({"kafka_version": "3.9"}, "cluster.kafka_version must be an Apache Kafka release such as 3.9.2"),
    ({"kafka_version": "3.4.1"}, "cluster.kafka_version=3.4.1: kchaos runs Kafka 3.5 and later"),
    ({"kafka_version": "4.0.2"}, "Kafka 4.0.2 has no ZooKeeper mode"),
])
def test_impossible_cluster_is_refused_in_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterError, match=message) as e:
        ClusterSpec(**kwargs).validate()  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kwargs", [
    {"metadata": "kraft"},
    {"metadata": "kraft", "kafka_version": "4.3.1", "controllers": 1, "brokers": 1},
    {"metadata": "kraft", "zookeepers": 2},  # ignored in KRaft mode
    {"metadata": "zookeeper", "controllers": 2},  # ignored in ZooKeeper mode
])
def test_possible_cluster_passes(kwargs: dict[str, object]) -> None:
    ClusterSpec(**kwargs).validate()  # type: ignore[arg-type]


def test_server_properties_apply_overrides_after_defaults() -> None:
    spec = ClusterSpec(brokers=3, zookeepers=3, broker_config={"unclean.leader.election.enable": "true",
                                                                "num.io.threads": "8"})
    props = dict(line.split("=", 1) for line in config.server_properties(spec, 2).splitlines())
    assert props["broker.id"] == "2"
    assert props["zookeeper.connect"] == "zk1:2181,zk2:2181,zk3:2181"
    assert props["advertised.listeners"] == "PLAINTEXT://@NODE_IP@:9092"
    assert props["unclean.leader.election.enable"] == "true"
    assert props["num.io.threads"] == "8"


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_zookeeper_broker_has_no_kraft_settings() -> None:
    props = properties(config.server_properties(ClusterSpec(), 1))
    assert props["broker.id"] == "1" and props["zookeeper.session.timeout.ms"] == "6000"
    assert not {"process.roles", "node.id", "controller.quorum.voters"} & set(props)


def test_kraft_broker_properties() -> None:
    spec = ClusterSpec(metadata="kraft", brokers=3, controllers=3, broker_config={"num.io.threads": "8"})
    props = properties(config.server_properties(spec, 2, "broker"))
    assert props["process.roles"] == "broker"
    assert props["node.id"] == "2" and "broker.id" not in props
    assert props["controller.quorum.voters"] == "101@controller1:9093,102@controller2:9093,103@controller3:9093"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert "CONTROLLER:PLAINTEXT" in props["listener.security.protocol.map"].split(",")
    assert props["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert props["advertised.listeners"] == "PLAINTEXT://@NODE_IP@:9092"
    assert props["log.dirs"] == "/data/kafka"  # on the broker's loop volume
    assert props["broker.session.timeout.ms"] == "6000"
    assert props["num.io.threads"] == "8"
    assert not any(k.startswith("zookeeper.") for k in props)
    # durability settings stay at Kafka's defaults
    assert not {"min.insync.replicas", "unclean.leader.election.enable", "log.flush.interval.messages"} & set(props)


def test_kraft_controller_properties() -> None:
    spec = ClusterSpec(metadata="kraft", controllers=3, broker_config={"unclean.leader.election.enable": "true"})
    props = properties(config.server_properties(spec, 103, "controller"))
    assert props["process.roles"] == "controller"
    assert props["node.id"] == "103"
    assert props["listeners"] == "CONTROLLER://0.0.0.0:9093"
    assert "advertised.listeners" not in props
    assert props["log.dirs"] == "/data/kraft"  # the metadata log, on the host bind mount
    assert props["controller.quorum.voters"].count("@") == 3
    assert props["broker.session.timeout.ms"] == "6000"
    # the controller elects leaders in KRaft: cluster-wide overrides reach it too
    assert props["unclean.leader.election.enable"] == "true"
    assert not any(k.startswith("zookeeper.") for k in props)


def test_kraft_node_ids_and_names_do_not_collide() -> None:
    spec = ClusterSpec(metadata="kraft", brokers=9, controllers=5)
    ids = config.controller_ids(spec)
    assert ids == [101, 102, 103, 104, 105] and not set(ids) & set(range(1, spec.brokers + 1))
    assert [config.node_alias("controller", i) for i in ids[:2]] == ["controller1", "controller2"]
    assert config.node_alias("broker", 2) == "broker2" and config.node_alias("zookeeper", 2) == "zk2"


def test_kraft_cluster_id_is_a_22_char_url_safe_uuid() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id) and not cluster_id.startswith("-")


def test_newest_election_wins(tmp_path: Path) -> None:
    def record(name: str, doc: str | None) -> Path:
        log_dir = tmp_path / name
        (log_dir / "__cluster_metadata-0").mkdir(parents=True)
        if doc is not None:
            (log_dir / "__cluster_metadata-0" / "quorum-state").write_text(doc)
        return log_dir

    old_leader = record("c1", '{"leaderId":101,"leaderEpoch":2,"votedId":-1,"data_version":0}')
    voting = record("c2", '{"leaderId":-1,"leaderEpoch":3,"votedId":103,"data_version":0}')
    follower = record("c3", '{"leaderId":103,"leaderEpoch":3,"votedId":103,"data_version":0}')
    fresh = record("c4", None)
    states = [quorum_state(d) for d in (old_leader, voting, follower, fresh)]
    assert states[0] == QuorumState(2, 101) and states[1] == QuorumState(3, None) and states[3] is None
    assert newest(states) == QuorumState(3, 103)
    assert newest(states[:2]) == QuorumState(3, None)  # an election under way: no leader yet
    assert newest([None]) is None


def test_logging_backend_follows_the_kafka_version() -> None:
    assert not uses_log4j2("3.9.2") and uses_log4j2("4.0.0") and uses_log4j2("4.3.1")
    assert "ConsoleAppender" in config.LOG4J and "appender.stdout.type = Console" in config.LOG4J2


def test_zoo_cfg_lists_every_server() -> None:
    text = config.zoo_cfg(ClusterSpec(zookeepers=3))
    assert [line for line in text.splitlines() if line.startswith("server.")] == [
        "server.1=zk1:2888:3888", "server.2=zk2:2888:3888", "server.3=zk3:2888:3888"]


def test_image_tag_names_the_version_and_is_stable() -> None:
    assert kafka_tag("3.9.2") == kafka_tag("3.9.2")
    assert kafka_tag("3.9.2").startswith("kchaos-kafka:3.9.2-")
    assert kafka_tag("3.8.1") != kafka_tag("3.9.2")


SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario_runs_on_kraft(path: Path) -> None:
    scenario = load_scenario(path, ["cluster.metadata=kraft"])
    spec = scenario.cluster_spec()
    assert spec.metadata == "kraft" and spec.controllers == 3
    newest_kafka = load_scenario(path, ["cluster.metadata=kraft", "cluster.kafka_version=4.3.1",
                                        "cluster.controllers=1", *upgrade_past("4.3.1", scenario)])
    assert newest_kafka.cluster_spec().controllers == 1


def test_kafka_4_scenario_without_kraft_is_refused_in_one_line() -> None:
    with pytest.raises(HarnessError, match="no ZooKeeper mode") as e:
        load_scenario(SCENARIOS / "acks1-leader-kill.yaml", ["cluster.kafka_version=4.3.1"])
    assert "\n" not in str(e.value)


def test_only_an_unknown_topic_answer_is_asked_again() -> None:
    assert unknown_topic(AdminError("cannot describe topic 't': unknown", KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert not unknown_topic(AdminError("cannot describe topic 't': no answer within 10s"))
    assert not unknown_topic(AdminError("cannot describe topic 't': denied", KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not unknown_topic(ClusterError("no kchaos cluster is running"))


def test_only_a_refused_freeze_is_tried_again() -> None:
    refused = docker.errors.APIError("500 Server Error: Cannot pause container abc: OCI runtime pause failed: "
                                     "unable to freeze: unknown")
    assert freeze_refused(refused)
    assert not freeze_refused(docker.errors.APIError("409 Client Error: Container abc is not running"))
    assert not freeze_refused(ClusterError("unable to freeze"))


def test_create_topics_is_asked_again_after_no_answer_a_moved_controller_or_a_broker_it_misses() -> None:
    for code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                 KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT, KafkaError.INVALID_REPLICATION_FACTOR):
        assert ask_again(KafkaError(code)), code
    for code in (KafkaError.INVALID_CONFIG, KafkaError.POLICY_VIOLATION,
                 KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.TOPIC_EXCEPTION):
        assert not ask_again(KafkaError(code)), code
