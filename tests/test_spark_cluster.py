"""The Spark checker on a real Spark standalone cluster: the same job, the same results as local mode.

The test starts a master and one worker from this machine's pyspark
installation (``spark-class``, as processes it owns, bound to 127.0.0.1 on
free ports), runs ``kchaos check RUN --spark-master spark://...`` against them,
and compares results.json with the local-mode checker's and the reference's.
The cluster is always stopped, even when the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from checkers import reference
from spark_analysis import checker as spark_checker
from test_checker_reference import make_run
from test_spark_checker import PROMISES, everything_at_once

pytestmark = pytest.mark.spark_cluster

BIN = Path(sys.executable).parent
SPARK_HOME = Path(pyspark.__file__).parent  # the pip-installed pyspark is a whole Spark distribution
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_WORKER_DIR": str(workdir / "work"), "SPARK_MASTER_HOST": "127.0.0.1"}


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A JVM in its own process group, so that stopping it also stops the executors it launched."""
    with log.open("wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def master_state(ui_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        return json.loads(response.read())


def wait_for(what: str, ready: Any, procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                pytest.fail(f"{log.name} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"{what} not ready after {START_TIMEOUT_S} s: " + " | ".join(log.read_text()[-1000:] for log in logs))


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(master URL, master web UI port) of a one-worker standalone cluster on 127.0.0.1."""
    workdir = tmp_path_factory.mktemp("spark-cluster")
    env = cluster_env(workdir)
    port, ui_port, worker_port, worker_ui_port = (free_port() for _ in range(4))
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = [workdir / "master.log", workdir / "worker.log"]
    try:
        procs.append(start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                            "--webui-port", str(ui_port)], logs[0], env))
        wait_for("the Spark master", lambda: master_state(ui_port)["status"] == "ALIVE", procs, logs[:1])
        procs.append(start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                            "--port", str(worker_port), "--webui-port", str(worker_ui_port),
                            "--cores", "2", "--memory", "2g", "--work-dir", str(workdir / "work"), url],
                           logs[1], env))
        wait_for("the Spark worker", lambda: master_state(ui_port)["aliveworkers"] >= 1, procs, logs)
        yield url, ui_port
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_check_on_a_standalone_cluster_matches_local_mode(spark_cluster: tuple[str, int], tmp_path: Path) -> None:
    url, ui_port = spark_cluster
    run = make_run(tmp_path, **everything_at_once(), scenario=PROMISES["idempotent"])
    expected = reference.check_run(run)
    local = spark_checker.check_run(run, spark_master="local[2]")

    result = subprocess.run([str(BIN / "kchaos"), "check", str(run), "--spark-master", url],
                            capture_output=True, text=True, timeout=900, env=cluster_env(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr  # anomalies found: expectations not met
    written = json.loads((run / "results.json").read_text())
    assert written["exit_code"] == 1 and written["expectations"]["outcome"] == "unmet"
    on_cluster = {k: v for k, v in written.items() if k in local}  # the checker's part; check adds the run record
    assert on_cluster == local
    assert on_cluster["checker"] == "spark" and expected.pop("checker") == "python"
    on_cluster.pop("checker")
    assert on_cluster == expected
    assert "Using Spark's default log4j profile" not in result.stdout + result.stderr  # a quiet console

    apps = master_state(ui_port)["completedapps"]
    assert [app["name"] for app in apps] == ["kchaos-check"]  # the job really ran on the cluster
