"""A Spark standalone cluster from pyspark's own distribution: for the tests and the benchmark.

Why: the checker's cluster path (``--spark-master spark://...``: executors in
JVMs of their own, the conversion by ranges on them) is proved and measured
against a real master and workers without installing Spark. Both kinds start
pyspark's ``bin/spark-class`` with the same arguments (``master_args``,
``worker_args``) and a host each binds, and stop everything they started on
leaving the context, whatever happened:

- ``standalone_cluster``: processes on this machine bound to 127.0.0.1 on
  free ports, each in its own process group (stopped with the executors it
  launched); the benchmark's.
- ``container_cluster``: the master and each worker in a container of its
  own on a Docker network of its own (an address each, as on machines of
  their own), each worker pinned to cores of its own (``cpuset``). The
  containers run the kchaos base image (Debian and a JRE) with this machine's
  Python and virtualenv mounted read-only at their own paths: nothing is
  installed in them, and kchaos's code reaches the executors with the session
  (ranged.ship_code). A driver on this machine binds the network's gateway
  address (``Standalone.env``) so that the executors can reach it. The
  containers see only the folders they are given, at the same paths as here,
  which is what a cluster's executors need of a run directory
  (docs/nightly.md); ``read_only`` is one of them mounted read-only, so a run
  directory there is one the executors cannot write.
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
    ui: str  # the master's web UI (its /json/ state)
    pgids: tuple[int, ...] = ()  # processes: the master's and the workers' groups (their CPU time: cpu_seconds)
    read_only: Path | None = None  # containers: the folder the workers see read-only
    driver_ip: str = "127.0.0.1"  # where a driver on this machine listens so that the executors reach it

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as response:
            return json.loads(response.read())

    def env(self, workdir: Path) -> dict[str, str]:
        """The environment of a driver on this machine (``kchaos check``, ``kchaos spark up``) that uses it."""
        return cluster_env(workdir, self.driver_ip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(workdir: Path, local_ip: str = "127.0.0.1") -> dict[str, str]:
    """The environment of the cluster's processes and of a driver talking to it (this Python for the tasks)."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": local_ip, "SPARK_LOG_DIR": str(workdir / "logs"),
            "SPARK_WORKER_DIR": str(workdir / "work"), "SPARK_MASTER_HOST": "127.0.0.1"}


def master_args(port: int, ui_port: int) -> list[str]:
    """The master's ``spark-class`` arguments, but for ``--host``, which each kind of cluster adds."""
    return ["org.apache.spark.deploy.master.Master", "--port", str(port), "--webui-port", str(ui_port)]


def worker_args(url: str, cores: int, memory: str, work_dir: Path) -> list[str]:
    """A worker's, on free ports of this machine (free in a container of its own too), but for ``--host``."""
    return ["org.apache.spark.deploy.worker.Worker", "--port", str(free_port()), "--webui-port", str(free_port()),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir), url]


def wait_for(what: str, ready: Callable[[], bool], failed: Callable[[], str | None], logs: Callable[[], str]) -> None:
    """Until ``ready``; ClusterError as soon as ``failed`` says why, or after START_TIMEOUT_S with the logs."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if (why := failed()) is not None:
            raise ClusterError(why)
        try:
            if ready():
                return
        except (OSError, ValueError):  # not listening yet, or a web UI still starting (not JSON yet)
            pass
        time.sleep(1)
    raise ClusterError(f"{what} not ready after {START_TIMEOUT_S} s: {logs()}")


def wait_until_up(cluster: Standalone, workers: int, failed: Callable[[], str | None],
                  logs: Callable[[], str]) -> None:
    wait_for("the Spark master", lambda: cluster.state()["status"] == "ALIVE", failed, logs)
    wait_for("the Spark workers", lambda: cluster.state()["aliveworkers"] >= workers, failed, logs)


# --- processes on this machine ---


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A JVM in its own process group, so that stopping it also stops the executors it launched."""
    with log.open("wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@contextmanager
def standalone_cluster(workdir: Path, workers: int = 1, cores: int = 2, memory: str = "2g") -> Iterator[Standalone]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, as processes of this machine."""
    env = cluster_env(workdir)
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    logs = [workdir / "master.log"] + [workdir / f"worker{i}.log" for i in range(workers)]

    def failed() -> str | None:
        return next((f"{log.name} exited with {proc.returncode}: {log.read_text()[-2000:]}"
                     for proc, log in zip(procs, logs) if proc.poll() is not None), None)

    def tails() -> str:
        return " | ".join(log.read_text()[-1000:] for log in logs if log.is_file())

    try:
        here = ["--host", "127.0.0.1"]
        procs.append(start([*master_args(port, ui_port), *here], logs[0], env))
        for i in range(workers):
            procs.append(start([*worker_args(url, cores, memory, workdir / f"work{i}"), *here], logs[i + 1], env))
        cluster = Standalone(url, f"http://127.0.0.1:{ui_port}", tuple(p.pid for p in procs))
        wait_until_up(cluster, workers, failed, tails)
        yield cluster
    finally:
        for proc in reversed(procs):
            stop(proc)


# --- containers ---


def container_mounts(shared: list[Path], read_only: Path | None) -> dict[str, dict[str, str]]:
    """This machine's Python and virtualenv read-only, ``shared`` read-write and ``read_only`` read-only, each at
    its own path (docker's volumes)."""
    python = Path(sys.base_prefix).resolve()
    if python == Path("/usr"):
        raise ClusterError("the containers run this machine's Python at its own path, which cannot be /usr "
                           "(a virtualenv of a Python installed elsewhere: pyenv, /opt, /usr/local)")
    mounts = {str(python): {"bind": str(python), "mode": "ro"},
              str(Path(sys.prefix).resolve()): {"bind": str(Path(sys.prefix).resolve()), "mode": "ro"}}
    for folder in shared:
        mounts[str(folder)] = {"bind": str(folder), "mode": "rw"}
    if read_only is not None:
        mounts[str(read_only)] = {"bind": str(read_only), "mode": "ro"}
    return mounts


MASTER_PORT, MASTER_UI_PORT = 7077, 8080  # Spark's own: each container has an address of its own


@contextmanager
def container_cluster(workdir: Path, shared: list[Path], workers: int = 2, cores: int = 1, memory: str = "1g",
                      read_only: Path | None = None) -> Iterator[Standalone]:
    """A master and ``workers`` workers, each in a container of its own; worker i runs on ``cores`` cores of its
    own (the machine's cores shared out in turn). ``workdir`` (logs, work folders) and ``shared`` are mounted
    read-write, ``read_only`` read-only (it may lie inside a shared folder). Needs a Docker engine."""
    import docker  # only the tests' cluster needs it: the checker never imports this
    from docker.errors import DockerException

    from clusters.image import ensure_base_image
    from clusters.node import LABEL_CLUSTER, LABEL_OWNER, LABEL_ROLE

    try:
        client = docker.from_env()
        image = ensure_base_image(client)
    except DockerException as e:
        raise ClusterError(f"a Docker engine is needed for the cluster's containers: {e}") from None
    cluster_id = f"spark-{os.getpid()}-{free_port()}"
    labels = {LABEL_CLUSTER: cluster_id, LABEL_OWNER: str(os.getpid())}
    mounts = container_mounts([workdir, *shared], read_only)
    env = {"SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable}
    machine_cores = os.cpu_count() or 1
    containers: list[Any] = []
    network = None

    def run(role: str, args: list[str], cpuset: str | None) -> Any:
        # each process binds its container's own address, which only the container knows
        command = ['export SPARK_LOCAL_IP="$(hostname -i)" && exec "$0" "$@" --host "$SPARK_LOCAL_IP"',
                   str(SPARK_HOME / "bin" / "spark-class"), *args]
        container = client.containers.run(
            image, command, name=f"kchaos-{cluster_id}-{role}", entrypoint=["sh", "-c"], detach=True,
            network=network.name, volumes=mounts, environment=env, cpuset_cpus=cpuset,
            labels={**labels, LABEL_ROLE: f"spark-{role}"})
        containers.append(container)
        container.reload()
        return container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]

    def failed() -> str | None:
        for c in containers:
            c.reload()
            if c.status == "exited":
                return f"{c.name} exited: {c.logs(tail=20).decode(errors='replace')}"
        return None

    def tails() -> str:
        return " | ".join(f"{c.name}: {c.logs(tail=10).decode(errors='replace')}" for c in containers)

    try:
        network = client.networks.create(f"kchaos-{cluster_id}", driver="bridge", labels=labels)
        network.reload()
        gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
        master_ip = run("master", master_args(MASTER_PORT, MASTER_UI_PORT), None)
        url = f"spark://{master_ip}:{MASTER_PORT}"
        for i in range(workers):
            own = ",".join(str((i * cores + k) % machine_cores) for k in range(cores))
            run(f"worker{i}", worker_args(url, cores, memory, workdir / f"work{i}"), own)
        cluster = Standalone(url, f"http://{master_ip}:{MASTER_UI_PORT}", read_only=read_only, driver_ip=gateway)
        wait_until_up(cluster, workers, failed, tails)
        yield cluster
    finally:
        for c in reversed(containers):
            try:
                c.remove(force=True)
            except DockerException:
                pass
        if network is not None:
            try:
                network.remove()
            except DockerException:
                pass


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
