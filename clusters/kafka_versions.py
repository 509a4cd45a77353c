"""Which Kafka releases kchaos runs: known without Docker or a client library (the CLI's defaults)."""

from __future__ import annotations

from clusters.errors import ClusterError

DEFAULT_KAFKA_VERSION = "3.9.2"
# the newest 4.x whose artifacts Maven Central serves in full (4.4.0's kafka-tools-api is missing)
NEWEST_KAFKA_4 = "4.3.1"


def kafka_major(version: str) -> int:
    """The major version of a Kafka release such as ``3.9.2``; a bad one is a one-line ClusterError."""
    head = version.split(".", 1)[0]
    if not head.isdigit() or "." not in version:
        raise ClusterError(f"cluster.kafka_version must look like 3.9.2, not {version!r}")
    return int(head)
