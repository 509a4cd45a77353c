"""A Spark standalone cluster on this machine, from pyspark's own distribution: for the tests and the benchmark.

Why: the checker's cluster path (``--spark-master spark://...``: executors in
JVMs of their own, the conversion by ranges on them) is proved and measured
against a real master and workers without installing Spark. Each process is
started in its own process group bound to 127.0.0.1 on free ports, and
stopped with its group (the executors it launched) on leaving the context,
whatever happened. ``read_only``: the workers run in a mount namespace of
their own where that folder is a read-only bind mount (needs root and
``unshare``), so a run directory there is one the executors cannot write.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent  # the pip-installed pyspark is a whole Spark distribution
START_TIMEOUT_S = 180


class ClusterError(RuntimeError):
    """The master or a worker exited or never became ready (the message ends with its log)."""


@dataclass(frozen=True)
class Standalone:
    url: str  # the master's
    ui_port: int  # the master's web UI (its /json/ state)
    read_only: Path | None  # the folder the workers see read-only, if asked for and possible
    pgids: tuple[int, ...]  # the process groups of the master and the workers (their CPU time: see cpu_seconds)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as response:
            return json.loads(response.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(workdir: Path) -> dict[str, str]:
    """The environment of the cluster's processes and of a driver talking to it (this Python for the tasks)."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_WORKER_DIR": str(workdir / "work"), "SPARK_MASTER_HOST": "127.0.0.1"}


def can_mount() -> bool:
    """Root with unshare: a worker can be given a read-only view of one folder."""
    return os.geteuid() == 0 and shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True).returncode == 0


def start(args: list[str], log: Path, env: dict[str, str], read_only: Path | None = None) -> subprocess.Popen[bytes]:
    """A JVM in its own process group, so that stopping it also stops the executors it launched."""
    command = [str(SPARK_HOME / "bin" / "spark-class"), *args]
    if read_only is not None:
        command = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount --bind -o ro "$0" "$0" && exec "$@"', str(read_only), *command]
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def wait_for(what: str, ready: Callable[[], bool], procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for proc, log in zip(procs, logs):
            if proc.poll() is not None:
                raise ClusterError(f"{log.name} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except (OSError, ValueError):  # not listening yet, or a web UI still starting (not JSON yet)
            pass
        time.sleep(1)
    raise ClusterError(f"{what} not ready after {START_TIMEOUT_S} s: "
                       + " | ".join(log.read_text()[-1000:] for log in logs))


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 1, cores: int = 2, memory: str = "2g",
                       read_only: Path | None = None) -> Iterator[Standalone]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each; ``read_only`` only when
    ``can_mount``."""
    env = cluster_env(workdir)
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = [workdir / "master.log"] + [workdir / f"worker{i}.log" for i in range(workers)]
    read_only = read_only if read_only is not None and can_mount() else None
    try:
        procs.append(start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                            "--webui-port", str(ui_port)], logs[0], env))
        cluster = Standalone(url, ui_port, read_only, (procs[0].pid,))
        wait_for("the Spark master", lambda: cluster.state()["status"] == "ALIVE", procs, logs[:1])
        for i in range(workers):
            procs.append(start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                "--port", str(free_port()), "--webui-port", str(free_port()),
                                "--cores", str(cores), "--memory", memory, "--work-dir", str(workdir / f"work{i}"),
                                url], logs[i + 1], env, read_only))
        cluster = Standalone(url, ui_port, read_only, tuple(p.pid for p in procs))
        wait_for("the Spark workers", lambda: cluster.state()["aliveworkers"] >= workers, procs, logs)
        yield cluster
    finally:
        for proc in reversed(procs):
            stop(proc)


def cpu_seconds(pgids: tuple[int, ...]) -> float:
    """User + system CPU of every process in these groups, with their reaped children's (executors, Python
    workers)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:
            total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")
