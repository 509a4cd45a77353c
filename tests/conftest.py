"""Shared fixtures: one real 3-ZooKeeper + 3-broker cluster for the cluster tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from clusters.cleanup import remove_orphans
from clusters.cluster import Cluster
from clusters.node import LABEL_CLUSTER
from clusters.spec import ClusterSpec


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # a short replica lag so that a cut-off follower leaves the ISR within seconds
    spec = ClusterSpec(brokers=3, zookeepers=3, broker_config={"replica.lag.time.max.ms": "8000"})
    c = start_owned_cluster(spec, tmp_path_factory.mktemp("cluster"))
    try:
        yield c
    finally:
        c.teardown(logs_to=tmp_path_factory.mktemp("cluster-logs"))
        assert_nothing_left(c.cluster_id, c.workdir)


def start_owned_cluster(spec: ClusterSpec, workdir: Path) -> Cluster:
    """Start a cluster owned by this test process, after removing those of test or harness
    processes that died (a crash in native code skips every teardown)."""
    remove_orphans()
    return Cluster.start(spec, workdir, owner_pid=os.getpid())


@pytest.fixture(scope="session")
def losing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One short acks=1 run that loses data (test_run.LOSING), its run directory and ``kchaos run``'s output: run
    once for every test that reads such a run (end to end, its report), which must not change it."""
    from test_run import KCHAOS, LOSING

    out = tmp_path_factory.mktemp("losing-run")
    result = subprocess.run([*KCHAOS, "run", *LOSING, "--out", str(out)], capture_output=True, text=True,
                            timeout=600, cwd=Path(__file__).resolve().parent.parent)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]  # the scenario expects lost > 0
    runs = [p for p in out.glob("*/*") if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0], result


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
