"""Shared fixtures: one real 3-ZooKeeper + 3-broker cluster for the cluster tests."""

from __future__ import annotations

import faulthandler
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from clusters.cluster import Cluster
from clusters.node import LABEL_CLUSTER
from clusters.spec import ClusterSpec


def pytest_sessionstart(session: pytest.Session) -> None:
    """On a crash in native code (librdkafka, the JVM bridge) print only the crashing
    thread: its frames, with the test that ran, then end up in the last lines of a CI log."""
    faulthandler.enable(file=sys.stderr, all_threads=False)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a short replica lag so that a cut-off follower leaves the ISR within seconds
    spec = ClusterSpec(brokers=3, zookeepers=3, broker_config={"replica.lag.time.max.ms": "8000"})
    c = Cluster.start(spec, tmp_path_factory.mktemp("cluster"))
    try:
        yield c
    finally:
        c.teardown(logs_to=tmp_path_factory.mktemp("cluster-logs"))
        assert_nothing_left(c.cluster_id, c.workdir)


@pytest.fixture
def nothing_left() -> Callable[[str, Path], None]:
    return assert_nothing_left


def assert_nothing_left(cluster_id: str, workdir: Path) -> None:
    """No container, network, mount or loop device of the cluster remains."""
    client = docker.from_env()
    flt = {"label": f"{LABEL_CLUSTER}={cluster_id}"}
    assert client.containers.list(all=True, filters=flt) == []
    assert client.networks.list(filters=flt) == []
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=True).stdout
    assert cluster_id not in loops
    assert str(workdir) not in Path("/proc/mounts").read_text()
