"""Pure logic of the cluster stage: validation, config rendering, image tags."""

from __future__ import annotations

import pytest

from clusters import config
from clusters.errors import ClusterError
from clusters.image import kafka_tag
from clusters.spec import ClusterSpec, TopicSpec


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
    ({"zookeepers": 2}, "odd number"),
    ({"brokers": 0}, "at least 1"),
    ({"metadata": "kraft"}, "not supported yet"),
])
def test_impossible_cluster_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
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


def test_zoo_cfg_lists_every_server() -> None:
    text = config.zoo_cfg(ClusterSpec(zookeepers=3))
    assert [line for line in text.splitlines() if line.startswith("server.")] == [
        "server.1=zk1:2888:3888", "server.2=zk2:2888:3888", "server.3=zk3:2888:3888"]


def test_image_tag_names_the_version_and_is_stable() -> None:
    assert kafka_tag("3.9.2") == kafka_tag("3.9.2")
    assert kafka_tag("3.9.2").startswith("kchaos-kafka:3.9.2-")
    assert kafka_tag("3.8.1") != kafka_tag("3.9.2")
