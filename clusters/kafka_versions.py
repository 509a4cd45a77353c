"""Which Kafka releases kchaos runs: known without Docker or a client library (the CLI's defaults)."""

from __future__ import annotations

import re

from clusters.errors import ClusterError

DEFAULT_KAFKA_VERSION = "3.9.2"
# the 4.x that `make setup` prepares beside the default and the 4.x cluster tests run
NEWEST_KAFKA_4 = "4.3.1"
# the releases the version tests cover (tests/test_kafka_versions.py, real logs of each in tests/data);
# any other release from OLDEST_KAFKA on runs too, built on demand, but is not covered
SUPPORTED_KAFKA_VERSIONS = ("3.5.2", "3.7.2", "3.9.2", "4.0.2", "4.3.1", "4.4.0")
OLDEST_KAFKA = (3, 5)  # KRaft without early-access caveats, and the tools and log lines the harness reads
LAST_ZOOKEEPER_MAJOR = 3  # ZooKeeper mode was removed in 4.0
RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def kafka_release(version: str, setting: str = "cluster.kafka_version") -> tuple[int, int, int]:
    """``3.9.2`` as (3, 9, 2); anything that is not an Apache Kafka release number is a one-line ClusterError
    naming the ``setting`` it came from."""
    found = RELEASE.match(version)
    if found is None:
        raise ClusterError(f"{setting} must be an Apache Kafka release such as 3.9.2, not {version!r}")
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def kafka_major(version: str) -> int:
    """The major version of a Kafka release such as ``3.9.2``; a bad one is a one-line ClusterError."""
    return kafka_release(version)[0]


def check_kafka_version(version: str, setting: str = "cluster.kafka_version") -> None:
    """Refuse a release older than kchaos runs (ClusterError, one line); whether Maven Central serves it is
    found out when its jars are resolved."""
    if kafka_release(version, setting)[:2] < OLDEST_KAFKA:
        oldest = ".".join(map(str, OLDEST_KAFKA))
        raise ClusterError(f"{setting}={version}: kchaos runs Kafka {oldest} and later "
                           f"(covered by its tests: {', '.join(SUPPORTED_KAFKA_VERSIONS)})")


def at_least(version: str, major: int, minor: int) -> bool:
    """Whether ``version`` is ``major.minor`` or later."""
    return kafka_release(version)[:2] >= (major, minor)
