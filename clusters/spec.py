"""What a cluster and a topic should look like, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from clusters.errors import ClusterError
from clusters.features import SETTABLE
from clusters.kafka_versions import (DEFAULT_KAFKA_VERSION, LAST_ZOOKEEPER_MAJOR, at_least, check_kafka_version,
                                     kafka_major)

MetadataMode = Literal["zookeeper", "kraft"]


@dataclass(frozen=True)
class ClusterSpec:
    """A multi-broker Kafka cluster: version, metadata mode, sizes, config overrides.

    ``zookeepers`` counts in ZooKeeper mode only, ``controllers`` (dedicated
    KRaft controllers) in KRaft mode only.
    """

    kafka_version: str = DEFAULT_KAFKA_VERSION
    metadata: MetadataMode = "zookeeper"
    brokers: int = 3
    zookeepers: int = 3
    controllers: int = 3
    broker_config: dict[str, str] = field(default_factory=dict)
    # KRaft feature levels finalized with kafka-features.sh once the brokers serve, before any topic exists
    features: dict[str, int] = field(default_factory=dict)
    data_size_mb: int = 2048
    broker_heap: str = "-Xms256m -Xmx768m"
    zookeeper_heap: str = "-Xms64m -Xmx256m"
    controller_heap: str = "-Xms128m -Xmx512m"
    # the request path (clusters/proxy/): a proxy process between the workload's clients and each
    # broker, for request-level faults; off, the cluster is exactly as before
    request_path: bool = False
    # the request path between the brokers too (it needs request_path): each broker's inter-broker listener
    # advertises the proxy's port for it on the cluster network's gateway, so replica Fetch, WriteTxnMarkers
    # and (ZooKeeper mode) the controller's requests pass the proxy; KRaft's controller listener stays direct
    inter_broker_request_path: bool = False

    def validate(self) -> None:
        if self.metadata not in ("zookeeper", "kraft"):
            raise ClusterError(f"cluster.metadata must be zookeeper or kraft, not {self.metadata!r}")
        check_kafka_version(self.kafka_version)
        if self.metadata == "zookeeper" and kafka_major(self.kafka_version) > LAST_ZOOKEEPER_MAJOR:
            raise ClusterError(f"Kafka {self.kafka_version} has no ZooKeeper mode (removed in 4.0): "
                               "set cluster.metadata=kraft")
        for name, level in self.features.items():
            self._check_feature(name, level)
        if self.brokers < 1:
            raise ClusterError(f"cluster.brokers must be at least 1, not {self.brokers}")
        if self.metadata == "zookeeper" and (self.zookeepers < 1 or self.zookeepers % 2 == 0):
            raise ClusterError(f"cluster.zookeepers must be an odd number >= 1, not {self.zookeepers}")
        if self.metadata == "kraft" and (self.controllers < 1 or self.controllers % 2 == 0):
            raise ClusterError(f"cluster.controllers must be an odd number >= 1, not {self.controllers}")
        if self.inter_broker_request_path and not self.request_path:
            raise ClusterError("cluster.inter_broker_request_path needs the request path (ClusterSpec.request_path)")
        if self.data_size_mb < 256:
            raise ClusterError(f"cluster.data_size_mb must be at least 256, not {self.data_size_mb}")


    def _check_feature(self, name: str, level: int) -> None:
        if self.metadata != "kraft":
            raise ClusterError(f"cluster.features.{name}: features are KRaft's; ZooKeeper mode has none")
        if name not in SETTABLE:
            raise ClusterError(f"cluster.features.{name}: not a feature kchaos sets (one of {', '.join(SETTABLE)})")
        since = SETTABLE[name]
        if not at_least(self.kafka_version, *since):
            raise ClusterError(f"cluster.features.{name}: Kafka {self.kafka_version} has no such feature (it came "
                               f"in {since[0]}.{since[1]})")
        if isinstance(level, bool) or not isinstance(level, int) or level < 0:
            raise ClusterError(f"cluster.features.{name} must be a level (0, 1, 2 ...), not {level!r}")


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: partitions, replication factor, min.insync.replicas, config."""

    name: str
    partitions: int = 6
    replication_factor: int = 3
    min_insync_replicas: int = 1
    config: dict[str, str] = field(default_factory=dict)

    def validate(self, brokers: int) -> None:
        if self.partitions < 1:
            raise ClusterError(f"topic.partitions must be at least 1, not {self.partitions}")
        if not 1 <= self.replication_factor <= brokers:
            raise ClusterError(
                f"topic.replication_factor={self.replication_factor} is impossible with {brokers} brokers")
        if not 1 <= self.min_insync_replicas <= self.replication_factor:
            raise ClusterError(
                f"topic.min_insync_replicas={self.min_insync_replicas} is above "
                f"replication_factor={self.replication_factor}: no write could ever succeed")
        if "min.insync.replicas" in self.config:
            raise ClusterError("set topic.min_insync_replicas, not min.insync.replicas in topic.config")

    def topic_config(self) -> dict[str, str]:
        return {**{k: str(v) for k, v in self.config.items()},
                "min.insync.replicas": str(self.min_insync_replicas)}
