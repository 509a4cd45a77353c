"""A handle on one node of a cluster: the typed interface faults speak to.

A fault never talks to Docker itself; it asks a :class:`Node` to die, start,
freeze, thaw, or run a command inside its network namespace. Network rules a
fault registers on a node (a cut, a slow link) are put back in the new
namespace of every restart before the node's service runs.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import docker.errors
from docker.models.containers import Container
from tenacity import retry, retry_if_exception, retry_if_result, stop_after_attempt, stop_after_delay, wait_fixed

from clusters.errors import ClusterError
from clusters.storage import LoopVolume

log = logging.getLogger(__name__)

Role = Literal["zookeeper", "broker", "controller"]

LABEL_CLUSTER = "io.kchaos.cluster"
LABEL_ROLE = "io.kchaos.role"
LABEL_NODE_ID = "io.kchaos.node-id"
LABEL_WORKDIR = "io.kchaos.workdir"
LABEL_VERSION = "io.kchaos.kafka-version"
LABEL_OWNER = "io.kchaos.owner-pid"   # the harness process that must tear it down; 0 = kept by hand
LABEL_METADATA = "io.kchaos.metadata"  # zookeeper or kraft
LABEL_KRAFT_ID = "io.kchaos.kraft-cluster-id"  # KRaft mode only: the id every node's storage is formatted with

STOP_TIMEOUT_S = 120  # a controlled shutdown moves every leadership first; Kafka's own default waits as long
FREEZE_ATTEMPTS = 4  # runc refused one pause of a scenario run here, with a test suite running beside it

SERVICE_PORTS: dict[str, int] = {"zookeeper": 2181, "broker": 9092, "controller": 9093}
# what a tool run inside a broker's container bootstraps from: its own PLAINTEXT listener, never the request path
SELF_BOOTSTRAP = f"localhost:{SERVICE_PORTS['broker']}"
# while this file exists in a node's config dir (/etc/kchaos in the container), its entry point waits
# before it starts the service: clusters/images/run-node.sh
HOLD_FILE = "hold"

NetworkRule = Callable[["Node"], None]


def freeze_refused(error: BaseException) -> bool:
    """runc gave up freezing the cgroup (a task did not stop in time, e.g. in uninterruptible I/O on a
    loaded machine); it thawed the node again, so asking once more is safe."""
    return isinstance(error, docker.errors.APIError) and "unable to freeze" in str(error)


def tcp_answer(ip: str, port: int, timeout_s: float = 2) -> Literal["connected", "refused", "silent"]:
    """How ``ip``:``port`` answers the harness's TCP connection: ``silent`` when nothing comes back
    (a DROP rule, or no such host)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout_s):
            return "connected"
    except ConnectionRefusedError:
        return "refused"
    except OSError:
        return "silent"


def tcp_open(ip: str, port: int, timeout_s: float = 2) -> bool:
    """Whether the harness itself can open a TCP connection to ``ip``:``port``."""
    return tcp_answer(ip, port, timeout_s) == "connected"


def tcp_path_open(ip: str, port: int, timeout_s: float = 2) -> bool:
    """Whether packets get from the harness to ``ip`` and back (a refusal counts: the path is open)."""
    return tcp_answer(ip, port, timeout_s) != "silent"


@dataclass(eq=False)  # a node is itself: compared and hashed by identity
class Node:
    """One container of the cluster: a broker, a ZooKeeper node or a controller."""

    name: str          # the node's host name on the cluster network, e.g. broker2
    role: Role
    node_id: int       # broker.id, ZooKeeper myid or controller node.id
    container: Container
    network: str
    data_dir: Path     # host folder mounted at /data in the container
    volume: LoopVolume | None = None
    config_dir: Path | None = None   # host folder mounted at /etc/kchaos: where the hold file goes
    # fault name -> what it re-applies in the node's new network namespace at every start
    network_rules: dict[str, NetworkRule] = field(default_factory=dict)
    earlier_logs: bytes = b""  # what the containers a rolling upgrade replaced had logged

    def __str__(self) -> str:
        return self.name

    def refresh(self) -> None:
        container = self.container
        try:
            container.reload()
        except docker.errors.NotFound:
            if self.container is container:
                raise
            self.container.reload()  # replaced meanwhile (a rolling upgrade): ask the new one

    @property
    def status(self) -> str:
        """Docker's view: running, paused, exited, ..."""
        self.refresh()
        return str(self.container.status)

    @property
    def version(self) -> str:
        """The Kafka release the node's container runs (a rolling upgrade changes it)."""
        return str(self.container.labels.get(LABEL_VERSION, "unknown"))

    def set_server_setting(self, name: str, value: str) -> None:
        """Set one line of the node's server.properties (in its config dir), read when it next starts: what an
        operator edits between two rolls."""
        path = None if self.config_dir is None else self.config_dir / "server.properties"
        if path is None or not path.is_file():
            raise ClusterError(f"{self.name} has no server.properties in its config dir to set {name} in")
        lines = [line for line in path.read_text().splitlines() if not line.startswith(f"{name}=")]
        path.write_text("\n".join([*lines, f"{name}={value}"]) + "\n")

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def ip(self) -> str:
        """Address on the cluster network (may change across restarts)."""
        self.refresh()
        return str(self.container.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"])

    @property
    def pid(self) -> int:
        """Host PID of the node's main (JVM) process; 0 when it is not running."""
        self.refresh()
        return int(self.container.attrs["State"]["Pid"])

    def kill(self) -> None:
        """SIGKILL the node's process and wait until it is gone."""
        try:
            self.container.kill(signal="SIGKILL")
        except docker.errors.APIError as e:
            if "is not running" not in str(e):
                raise ClusterError(f"could not kill {self.name}: {e.explanation}") from None
        self._await_status({"exited", "dead"}, "exit after SIGKILL")

    def start(self) -> None:
        """Start a stopped node again on the same data directory.

        A started container gets a new network namespace, empty of the rules
        faults had put in the old one. When some are registered, the entry
        point holds the service back (the hold file) until every rule is
        applied and verified in the new namespace: the node never talks to
        anyone without them. A rule that fails leaves the node killed, never
        running unprotected.
        """
        if not self.network_rules:
            self._start_container()
            return
        if self.config_dir is None:
            raise ClusterError(f"{self.name} has no config dir to hold its start in: its network rules "
                               "could not be re-applied before it runs")
        hold = self.config_dir / HOLD_FILE
        hold.touch()
        try:
            self._start_container()
            held_since = time.monotonic()
            for rule in list(self.network_rules.values()):
                rule(self)
            log.info("%s: %s re-applied in %.1fs before its service started", self.name,
                     ", ".join(self.network_rules), time.monotonic() - held_since)
        except BaseException:
            with contextlib.suppress(ClusterError, docker.errors.DockerException):
                self.kill()
            raise
        finally:
            hold.unlink(missing_ok=True)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the node as an operator does: SIGTERM, so a broker shuts down in a controlled way (its leaderships
        moved first); SIGKILL only if it is still running after ``timeout_s``."""
        try:
            self.container.stop(timeout=int(timeout_s))
        except docker.errors.APIError as e:
            raise ClusterError(f"could not stop {self.name}: {e.explanation}") from None
        self._await_status({"exited", "dead"}, "stop")

    def recreate(self, image: str, labels: dict[str, str]) -> None:
        """Replace the stopped node's container with one of ``image``: the same name, host name, network alias,
        mounts (its data and config dirs), kchaos environment and command, ``labels`` changed (a rolling upgrade:
        the node comes back on another Kafka's jars over the same disk). Left stopped; :meth:`start` starts it."""
        if self.running:
            raise ClusterError(f"{self.name} is running: stop it before it is replaced")
        old = self.container
        old.reload()
        config, host = old.attrs["Config"], old.attrs["HostConfig"]
        api = old.client.api  # type: ignore[union-attr]
        env = [e for e in config["Env"] or [] if e.startswith("KCHAOS_")]
        try:
            # made under a name of its own and handed to the node before the old one goes: other threads
            # asking this node's status meanwhile see a stopped node, never a container that is gone
            created = api.create_container(
                image, command=config["Cmd"], name=f"{old.name}-next", hostname=config["Hostname"],
                environment=env, labels={**config["Labels"], **labels},
                host_config=api.create_host_config(binds=host["Binds"], network_mode=self.network),
                networking_config=api.create_networking_config(
                    {self.network: api.create_endpoint_config(aliases=[self.name])}))
            self.container = old.client.containers.get(created["Id"])  # type: ignore[union-attr]
            # the log goes with the container: kept, so the run's logs/ and forensics see the whole story
            self.earlier_logs += bytes(old.logs(stdout=True, stderr=True))
            old.remove()
            self.container.rename(old.name)
        except docker.errors.APIError as e:
            raise ClusterError(f"could not replace {self.name}'s container with one of {image}: "
                               f"{e.explanation}") from None

    def _start_container(self) -> None:
        self.container.start()
        self._await_status({"running"}, "start")

    def pause(self) -> None:
        """Freeze every process of the node (cgroup freezer)."""
        self._freeze()
        self._await_status({"paused"}, "freeze")

    @retry(retry=retry_if_exception(freeze_refused), stop=stop_after_attempt(FREEZE_ATTEMPTS), wait=wait_fixed(0.5),
           reraise=True)
    def _freeze(self) -> None:
        self.container.pause()

    def unpause(self) -> None:
        self.container.unpause()
        self._await_status({"running"}, "thaw")

    def logs(self) -> bytes:
        """Everything the node logged: its containers' before a rolling upgrade replaced them, then its own."""
        return self.earlier_logs + bytes(self.container.logs(stdout=True, stderr=True))

    def log_tail(self, lines: int = 5) -> str:
        tail = self.container.logs(stdout=True, stderr=True, tail=lines).decode(errors="replace")
        return " | ".join(line.strip() for line in tail.splitlines() if line.strip())

    def in_netns(self, *cmd: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a host command inside this node's network namespace (iptables, tc, ...)."""
        pid = self.pid
        if pid == 0:
            raise ClusterError(f"{self.name} is not running: no network namespace to enter")
        return subprocess.run(["nsenter", "-t", str(pid), "-n", *cmd], input=stdin, capture_output=True, text=True)

    def exec(self, *cmd: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a command inside the node's container (its image's tools: Kafka's jars and java), cut off after
        ``timeout_s`` (coreutils ``timeout`` in the container: exit 124); stdout and stderr apart."""
        if not self.running:
            raise ClusterError(f"{self.name} is not running: nothing to run {cmd[0]} in")
        argv = ["timeout", "-k", "5", str(max(1, int(timeout_s))), *cmd]
        try:
            code, (out, err) = self.container.exec_run(argv, demux=True)
        except docker.errors.APIError as e:
            raise ClusterError(f"could not run {cmd[0]} in {self.name}: {e.explanation}") from None
        return subprocess.CompletedProcess(argv, int(code), (out or b"").decode(errors="replace"),
                                           (err or b"").decode(errors="replace"))

    @property
    def service_port(self) -> int:
        """The port the node serves on: ZooKeeper's client port, the broker listener or the KRaft controller's."""
        return SERVICE_PORTS[self.role]

    def can_reach(self, ip: str, port: int, timeout_s: float = 2) -> bool:
        """Whether packets get from this node's namespace to ``ip`` and back: a TCP connection, or a
        refusal from a port nothing listens on yet (a node held before its service starts). A DROP
        rule on either side shows as a time-out."""
        probe = self.in_netns("env", "LC_ALL=C", "timeout", str(timeout_s), "bash", "-c",
                              f"exec 3<>/dev/tcp/{ip}/{port}")
        return probe.returncode == 0 or "Connection refused" in probe.stderr

    def _await_status(self, wanted: set[str], action: str, seconds: float = 30) -> None:
        @retry(stop=stop_after_delay(seconds), wait=wait_fixed(0.1),
               retry=retry_if_result(lambda s: s not in wanted), retry_error_callback=lambda s: s.outcome.result())
        def poll() -> str:
            return self.status

        status = poll()
        if status not in wanted:
            raise ClusterError(f"{self.name} did not {action} within {seconds:.0f}s (status {status})")
