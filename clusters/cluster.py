"""A real multi-broker Kafka cluster on Testcontainers, and how to find one again.

Start order: a Docker network of the cluster's own, the ZooKeeper ensemble
(until it has a leader), then every broker in parallel. Ready means every
broker is registered and a controller is elected. Teardown always runs and
leaves no container, network, mount or loop device behind.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import docker
import docker.errors
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from tenacity import retry, stop_after_delay, wait_fixed

from clusters import cleanup, config
from clusters.errors import ClusterError
from clusters.image import ensure_image
from clusters.node import (LABEL_CLUSTER, LABEL_NODE_ID, LABEL_OWNER, LABEL_ROLE, LABEL_VERSION, LABEL_WORKDIR, Node,
                           Role, tcp_open)
from clusters.spec import ClusterSpec
from clusters.zk_metadata import ZooKeeperMetadata
from clusters.storage import IMAGE_SUFFIX, LoopVolume

# The reaper's image cannot be pulled here; kchaos removes what it starts itself.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
from testcontainers.core.container import DockerContainer  # noqa: E402
from testcontainers.core.network import Network  # noqa: E402

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 120


@dataclass(frozen=True)
class PartitionState:
    """Leader and in-sync replicas of one partition, as the cluster reports them."""

    topic: str
    partition: int
    leader: int | None   # broker id, None while leaderless
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class Cluster:
    """A running cluster: its nodes, how to reach it, and who leads what."""

    def __init__(self, spec: ClusterSpec, nodes: list[Node], cluster_id: str, workdir: Path) -> None:
        self.spec = spec
        self.nodes = nodes
        self.cluster_id = cluster_id
        self.workdir = workdir
        self._admin: AdminClient | None = None
        self._zk: ZooKeeperMetadata | None = None

    # ------------------------------------------------------------------ start

    @classmethod
    def start(cls, spec: ClusterSpec, workdir: Path, cluster_id: str | None = None,
              owner_pid: int = 0) -> "Cluster":
        """Build the image if needed, start every node and wait until ready.

        ``owner_pid`` is the process that will tear the cluster down (0: kept
        until ``kchaos cluster down``); a later run removes clusters whose owner
        died. On any failure everything started so far is torn down before the
        error propagates.
        """
        spec.validate()
        cluster_id = cluster_id or "kc" + secrets.token_hex(3)
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        image = ensure_image(spec.kafka_version)
        labels = {LABEL_CLUSTER: cluster_id, LABEL_WORKDIR: str(workdir), LABEL_VERSION: spec.kafka_version,
                  LABEL_OWNER: str(owner_pid)}
        network = Network(docker_network_kw={"labels": labels})
        network.name = f"kchaos-{cluster_id}"
        cluster = cls(spec, [], cluster_id, workdir)
        try:
            network.create()
            zk = [cluster._prepare_node(image, network, labels, "zookeeper", i)
                  for i in range(1, spec.zookeepers + 1)]
            _in_parallel([lambda c=c: c.start() for c, _ in zk])
            cluster.nodes.extend(cluster._attach_node(c, n) for c, n in zk)
            cluster._await(cluster._zookeeper_ready, "ZooKeeper ensemble elects a leader", cluster.zookeepers)
            brokers = [cluster._prepare_node(image, network, labels, "broker", i)
                       for i in range(1, spec.brokers + 1)]
            _in_parallel([lambda c=c: c.start() for c, _ in brokers])
            cluster.nodes.extend(cluster._attach_node(c, n) for c, n in brokers)
            cluster._await(cluster._brokers_ready, "every broker registers and a controller is elected",
                           cluster.brokers)
        except BaseException:
            cluster.teardown()
            raise
        return cluster

    def _prepare_node(self, image: str, network: Network, labels: dict[str, str],
                      role: Role, node_id: int) -> tuple[DockerContainer, tuple[str, Role, int, Path, LoopVolume | None]]:
        name = config.zookeeper_alias(node_id) if role == "zookeeper" else config.broker_alias(node_id)
        node_dir = self.workdir / name
        etc = node_dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "log4j.properties").write_text(config.LOG4J)
        data = node_dir / "data"
        volume = None
        if role == "zookeeper":
            (etc / "zoo.cfg").write_text(config.zoo_cfg(self.spec))
            (data / "zookeeper").mkdir(parents=True, exist_ok=True)
            (data / "zookeeper" / "myid").write_text(f"{node_id}\n")
            heap = self.spec.zookeeper_heap
        else:
            (etc / "server.properties").write_text(config.server_properties(self.spec, node_id))
            volume = LoopVolume(node_dir / f"{self.cluster_id}-{name}{IMAGE_SUFFIX}", data,
                                self.spec.data_size_mb).create()
            heap = self.spec.broker_heap
        container = (
            DockerContainer(image)
            .with_name(f"kchaos-{self.cluster_id}-{name}")
            .with_network(network)
            .with_network_aliases(name)
            .with_kwargs(labels={**labels, LABEL_ROLE: role, LABEL_NODE_ID: str(node_id)}, hostname=name)
            .with_env("KCHAOS_HEAP", heap)
            .with_volume_mapping(str(etc), "/etc/kchaos", "ro")
            .with_volume_mapping(str(data), "/data", "rw")
            .with_command(role)
        )
        return container, (name, role, node_id, data, volume)

    def _attach_node(self, container: DockerContainer,
                     meta: tuple[str, Role, int, Path, LoopVolume | None]) -> Node:
        name, role, node_id, data, volume = meta
        return Node(name, role, node_id, container.get_wrapped_container(),
                    f"kchaos-{self.cluster_id}", data, volume)

    @classmethod
    def attach(cls, cluster_id: str | None = None) -> "Cluster":
        """Find a running cluster started by ``kchaos cluster up`` (the newest one by default)."""
        client = docker.from_env()
        found = client.containers.list(all=True, filters={"label": LABEL_CLUSTER})
        if not found:
            raise ClusterError("no kchaos cluster is running: start one with `kchaos cluster up`")
        ids = {c.labels[LABEL_CLUSTER] for c in found}
        if cluster_id is None:
            cluster_id = max(found, key=lambda c: c.attrs["Created"]).labels[LABEL_CLUSTER]
        elif cluster_id not in ids:
            raise ClusterError(f"no kchaos cluster {cluster_id!r}; running: {', '.join(sorted(ids))}")
        mine = [c for c in found if c.labels[LABEL_CLUSTER] == cluster_id]
        workdir = Path(mine[0].labels[LABEL_WORKDIR])
        nodes = []
        for c in sorted(mine, key=lambda c: (c.labels[LABEL_ROLE], int(c.labels[LABEL_NODE_ID]))):
            role: Role = c.labels[LABEL_ROLE]  # type: ignore[assignment]
            node_id = int(c.labels[LABEL_NODE_ID])
            name = config.zookeeper_alias(node_id) if role == "zookeeper" else config.broker_alias(node_id)
            nodes.append(Node(name, role, node_id, c, f"kchaos-{cluster_id}", workdir / name / "data"))
        brokers = sum(n.role == "broker" for n in nodes)
        spec = ClusterSpec(brokers=brokers, zookeepers=len(nodes) - brokers,
                           kafka_version=mine[0].labels.get(LABEL_VERSION, "unknown"))
        return cls(spec, nodes, cluster_id, workdir)

    # ----------------------------------------------------------------- lookups

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "broker"]

    @property
    def zookeepers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "zookeeper"]

    def broker(self, broker_id: int) -> Node:
        for n in self.brokers:
            if n.node_id == broker_id:
                return n
        raise ClusterError(f"no broker with id {broker_id} in cluster {self.cluster_id}")

    @property
    def bootstrap_servers(self) -> str:
        """Broker addresses reachable from the host (the containers' bridge IPs)."""
        return ",".join(f"{b.ip}:{config.CLIENT_PORT}" for b in self.brokers if b.running)

    @property
    def client_address(self) -> str:
        """The harness's own address on the cluster network (the bridge's gateway)."""
        network = docker.from_env().networks.get(f"kchaos-{self.cluster_id}")
        return str(network.attrs["IPAM"]["Config"][0]["Gateway"])

    def admin(self) -> AdminClient:
        """One AdminClient per cluster: it must outlive the futures it returns."""
        if self._admin is None:
            # frequent metadata refreshes: after a fault the controller and leaders move
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers,
                                       "socket.timeout.ms": 5000, "request.timeout.ms": 5000,
                                       "topic.metadata.refresh.interval.ms": 2000},
                                      logger=logging.getLogger("rdkafka.admin"))
        return self._admin

    def forget_admin(self) -> None:
        """Drop the AdminClient; the next call makes a new one that learns the cluster afresh."""
        self._admin = None

    def describe(self, timeout: float = 10) -> Any:
        """The cluster as the brokers see it: registered brokers and the controller."""
        return admin_result(self.admin().describe_cluster(request_timeout=timeout), timeout, "describe the cluster")

    def partitions(self, topic: str, timeout: float = 10) -> list[PartitionState]:
        """Leader, replicas and ISR of every partition of ``topic``, as the controller recorded them."""
        if self.zookeepers:
            return self._partitions_from_zookeeper(topic)
        futures = self.admin().describe_topics(TopicCollection([topic]), request_timeout=timeout)
        desc = admin_result(futures[topic], timeout, f"describe topic {topic!r}")
        return [PartitionState(topic, p.id, p.leader.id if p.leader is not None and p.leader.id >= 0 else None,
                               tuple(r.id for r in p.replicas), tuple(r.id for r in p.isr))
                for p in sorted(desc.partitions, key=lambda p: p.id)]

    def _zookeeper(self) -> ZooKeeperMetadata:
        if self._zk is None:
            self._zk = ZooKeeperMetadata(",".join(f"{n.ip}:{config.ZK_PORT}" for n in self.zookeepers))
        return self._zk

    def registered_brokers(self) -> set[int]:
        """Ids of the brokers the cluster counts as alive (ZooKeeper sessions in ZooKeeper mode)."""
        if self.zookeepers:
            return self._zookeeper().broker_ids()
        return {n.id for n in self.describe().nodes}

    def _partitions_from_zookeeper(self, topic: str) -> list[PartitionState]:
        zk = self._zookeeper()
        states = []
        for partition, replicas in sorted(zk.replicas(topic).items()):
            leader, isr = zk.state(topic, partition)
            states.append(PartitionState(topic, partition, leader, tuple(replicas), tuple(isr)))
        return states

    def leader(self, topic: str, partition: int) -> Node | None:
        """The broker leading ``topic``/``partition`` now, or None while there is none."""
        for p in self.partitions(topic):
            if p.partition == partition:
                return self.broker(p.leader) if p.leader is not None else None
        raise ClusterError(f"topic {topic!r} has no partition {partition}")

    def controller(self, timeout: float = 10) -> Node:
        """The active controller broker."""
        desc = self.describe(timeout)
        if desc.controller is None or desc.controller.id < 0:
            raise ClusterError("the cluster has no active controller")
        return self.broker(desc.controller.id)

    # --------------------------------------------------------------- readiness

    def _zookeeper_ready(self) -> list[Node]:
        """ZooKeeper nodes not yet serving (an empty list means ready)."""
        modes = {n.name: zookeeper_mode(n.ip) for n in self.zookeepers}
        if sum(m in ("leader", "standalone") for m in modes.values()) != 1:
            return self.zookeepers
        return [n for n in self.zookeepers if modes[n.name] not in ("leader", "follower", "standalone")]

    def _brokers_ready(self) -> list[Node]:
        """Brokers not registered yet, or all of them while no controller is elected."""
        try:
            desc = self.describe(timeout=5)
        except ClusterError:
            return self.brokers
        registered = {n.id for n in desc.nodes}
        missing = [b for b in self.brokers if b.node_id not in registered]
        if not missing and (desc.controller is None or desc.controller.id < 0):
            return self.brokers
        return missing

    def recover(self, node: Node, timeout: float = READY_TIMEOUT_S) -> None:
        """Start ``node`` and keep restarting it until it serves again, like a service manager would.

        A broker restarted before ZooKeeper expired its old session exits
        (its registration still exists); starting it again a moment later works.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not node.running:
                node.start()
            if self._serves(node):
                return
            time.sleep(1)
        raise ClusterError(f"{node.name} did not serve again within {timeout:.0f}s; log tail: {node.log_tail()}")

    def _serves(self, node: Node) -> bool:
        if node.role == "zookeeper":
            return zookeeper_mode(node.ip) in ("leader", "follower", "standalone")
        try:
            registered = node.node_id in self.registered_brokers()
        except ClusterError:
            return False
        # registration comes before the listener accepts connections: wait for both
        return registered and tcp_open(node.ip, node.service_port)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until every ZooKeeper node serves and every broker is registered."""
        self._await(self._zookeeper_ready, "ZooKeeper ensemble serves", self.zookeepers, timeout)
        self._await(self._brokers_ready, "every broker registers and a controller is elected", self.brokers, timeout)

    def _await(self, not_ready: Callable[[], list[Node]], what: str, nodes: list[Node],
               timeout: float = READY_TIMEOUT_S) -> None:
        started = time.monotonic()

        @retry(stop=stop_after_delay(timeout), wait=wait_fixed(0.5), reraise=True)
        def check() -> None:
            dead = [n for n in nodes if n.status != "running"]
            if dead:
                raise _NeverReady(dead, f"{dead[0].name} exited")
            waiting = not_ready()
            if waiting:
                raise _Waiting(waiting)

        try:
            check()
        except _NeverReady as e:
            node = e.nodes[0]
            raise ClusterError(f"{what}: {e.why} while starting; log tail: {node.log_tail()}") from None
        except _Waiting as e:
            node = e.nodes[0]
            raise ClusterError(f"{what}: {node.name} not ready after {timeout:.0f}s; "
                               f"log tail: {node.log_tail()}") from None
        log.info("%s after %.1fs", what, time.monotonic() - started)

    # ---------------------------------------------------------------- teardown

    def copy_logs(self, dest: Path) -> None:
        """Copy every node's log into ``dest``/<node>.log."""
        dest.mkdir(parents=True, exist_ok=True)
        for n in self.nodes:
            try:
                (dest / f"{n.name}.log").write_bytes(n.logs())
            except docker.errors.DockerException as e:
                log.warning("could not copy the log of %s: %s", n.name, e)

    def teardown(self, logs_to: Path | None = None) -> None:
        """Remove containers, network, mounts and loop devices; safe to call twice."""
        if logs_to is not None:
            self.copy_logs(logs_to)
        if self._zk is not None:
            self._zk.close()
            self._zk = None
        cleanup.remove_cluster(self.cluster_id)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()


class _Waiting(Exception):
    def __init__(self, nodes: list[Node]) -> None:
        super().__init__(", ".join(n.name for n in nodes))
        self.nodes = nodes


class _NeverReady(Exception):
    """A node died while the cluster was starting: waiting longer will not help."""

    def __init__(self, nodes: list[Node], why: str) -> None:
        super().__init__(why)
        self.nodes = nodes
        self.why = why


def admin_result(future: Future[Any], timeout: float, what: str) -> Any:
    """The result of an AdminClient future; a Kafka error or a time-out becomes a one-line ClusterError."""
    try:
        return future.result(timeout=timeout)
    except KafkaException as e:
        raise ClusterError(f"cannot {what}: {e.args[0].str()}") from None
    except TimeoutError:
        raise ClusterError(f"cannot {what}: no answer within {timeout:.0f}s") from None


def zookeeper_mode(ip: str, timeout: float = 2) -> str | None:
    """Ask a ZooKeeper node (four-letter word ``srvr``) for its mode: leader, follower, standalone."""
    try:
        with socket.create_connection((ip, config.ZK_PORT), timeout=timeout) as s:
            s.sendall(b"srvr")
            reply = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")
    except OSError:
        return None
    for line in reply.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def _in_parallel(actions: list[Callable[[], object]]) -> None:
    with ThreadPoolExecutor(max_workers=max(1, len(actions))) as pool:
        for future in [pool.submit(a) for a in actions]:
            future.result()
