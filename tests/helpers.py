"""What the tests share: a fresh topic, a history file's lines, what a node's JVM maps, scenario overrides."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from clusters.cluster import Cluster
from clusters.kafka_versions import SUPPORTED_KAFKA_VERSIONS
from clusters.node import Node
from clusters.spec import TopicSpec
from clusters.topics import create_topic
from harness.scenario import Scenario


def new_topic(cluster: Cluster, prefix: str, partitions: int = 3, min_insync: int = 1) -> str:
    """A topic of its own for one test (RF 3), named ``<prefix>-<random>``."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, TopicSpec(name, partitions=partitions, replication_factor=3, min_insync_replicas=min_insync))
    return name


def jsonl(path: Path) -> list[dict[str, Any]]:
    """Every line of a history file (none when it was never written)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def maps_class_archive(node: Node) -> bool:
    """Whether the node's JVM (the container's first process) has the image's class-data-sharing archive mapped:
    with -Xshare:auto a JVM that cannot use the archive starts without it and says nothing."""
    return "/opt/kafka/classes.jsa" in Path(f"/proc/{node.pid}/maps").read_text()


def upgrade_past(version: str, scenario: Scenario) -> list[str]:
    """Overrides that keep a scenario's rolling upgrades possible when its cluster starts on ``version``: they
    go to the newest supported release instead."""
    return [f"faults.{i}.options.to_version={SUPPORTED_KAFKA_VERSIONS[-1]}" for i, f in enumerate(scenario.faults)
            if f.kind == "rolling-upgrade" and version != SUPPORTED_KAFKA_VERSIONS[-1]]
