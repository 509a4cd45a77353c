"""A real multi-broker Kafka cluster on Testcontainers, and how to find one again.

Start order: a Docker network of the cluster's own, the metadata quorum --
the ZooKeeper ensemble, or in KRaft mode the dedicated controllers -- until
it has a leader, then every broker in parallel. Ready means every broker is
registered (and, in ZooKeeper mode, a controller broker is elected).
Teardown always runs and leaves no container, network, mount or loop device
behind.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import docker
import docker.errors
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ClusterMetadata
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from clusters import cleanup, config
from clusters.errors import AdminError, ClusterError
from clusters.features import set_feature
from clusters.image import ensure_image
from clusters.kraft_metadata import QuorumState, new_cluster_id, newest, quorum_state
from clusters.request_path import RequestPath
from clusters.node import (LABEL_CLUSTER, LABEL_KRAFT_ID, LABEL_METADATA, LABEL_NODE_ID, LABEL_OWNER, LABEL_ROLE,
                           LABEL_VERSION, LABEL_WORKDIR, Node, Role, tcp_open)
from clusters.spec import ClusterSpec
from clusters.zk_metadata import ZooKeeperMetadata
from clusters.storage import IMAGE_SUFFIX, LoopVolume


log = logging.getLogger(__name__)
RDKAFKA_ADMIN_LOG = logging.getLogger("rdkafka.admin")
T = TypeVar("T")

READY_TIMEOUT_S = 120
UNKNOWN_TOPIC_GRACE_S = 10   # how long a broker may lag behind the controllers on a new topic


def unknown_topic(error: BaseException) -> bool:
    """A broker that has not learned the topic yet (KRaft: it lags the controllers' log)."""
    return isinstance(error, AdminError) and error.code == KafkaError.UNKNOWN_TOPIC_OR_PART


@dataclass(frozen=True)
class PartitionState:
    """Leader and in-sync replicas of one partition, as the cluster reports them."""

    topic: str
    partition: int
    leader: int | None   # broker id, None while leaderless
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"   # the group coordinators' log (Topic.GROUP_METADATA_TOPIC_NAME)
SHARE_GROUP_STATE_TOPIC = "__share_group_state"  # the share coordinators' log (KIP-932)


def java_hash(text: str) -> int:
    """Java's String.hashCode: 31-fold over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except that Integer.MIN_VALUE maps to 0."""
    return 0 if n == -(1 << 31) else abs(n)


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of a coordinator's log (__transaction_state, __consumer_offsets) that holds ``key`` (a
    transactional id, a group id): Utils.abs(key.hashCode()) % partitions, as Kafka's partitionFor computes it."""
    return java_abs(java_hash(key)) % partitions


class Cluster:
    """A running cluster: its nodes, how to reach it, and who leads what."""

    def __init__(self, spec: ClusterSpec, nodes: list[Node], cluster_id: str, workdir: Path,
                 kraft_cluster_id: str | None = None) -> None:
        self.spec = spec
        self.nodes = nodes
        self.cluster_id = cluster_id
        self.workdir = workdir
        self.kraft_cluster_id = kraft_cluster_id   # KRaft mode: the id every node's storage is formatted with
        self._admin: AdminClient | None = None
        self._zk: ZooKeeperMetadata | None = None
        # the request path's proxy (spec.request_path): started before the brokers, which advertise its ports
        self.request_path: RequestPath | None = None
        self._topic_ids: dict[str, str] = {}

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
        # The reaper's image cannot be pulled here, and kchaos removes what it starts itself; set on the
        # configuration object, not the environment, when a cluster starts rather than at import.
        testcontainers_config.ryuk_disabled = True
        cluster_id = cluster_id or "kc" + secrets.token_hex(3)
        workdir = workdir.resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        image = ensure_image(spec.kafka_version)
        kraft_id = new_cluster_id() if spec.metadata == "kraft" else None
        labels = {LABEL_CLUSTER: cluster_id, LABEL_WORKDIR: str(workdir), LABEL_VERSION: spec.kafka_version,
                  LABEL_OWNER: str(owner_pid), LABEL_METADATA: spec.metadata,
                  **({LABEL_KRAFT_ID: kraft_id} if kraft_id else {})}
        network = Network(docker_network_kw={"labels": labels})
        network.name = f"kchaos-{cluster_id}"
        cluster = cls(spec, [], cluster_id, workdir, kraft_id)
        try:
            network.create()
            if kraft_id:
                cluster._start_nodes(image, network, labels, "controller", config.controller_ids(spec))
            else:
                cluster._start_nodes(image, network, labels, "zookeeper", range(1, spec.zookeepers + 1))
            cluster._await(cluster._metadata_ready, f"{cluster._quorum_name} elects a leader",
                           cluster.metadata_nodes)
            if spec.request_path:
                # between the brokers too: it listens where they reach this machine, the network's gateway
                gateway = cluster.client_address if spec.inter_broker_request_path else None
                cluster.request_path = RequestPath.start(range(1, spec.brokers + 1), workdir / "request-path",
                                                         inter_broker_host=gateway)
            cluster._start_nodes(image, network, labels, "broker", range(1, spec.brokers + 1))
            cluster.route_clients()
            cluster._await(cluster._brokers_ready, "every broker registers and a controller is elected",
                           cluster.brokers)
            for name, level in spec.features.items():
                set_feature(cluster.brokers[0], name, level)
        except BaseException:
            cluster.teardown()
            raise
        return cluster

    def _start_nodes(self, image: str, network: Network, labels: dict[str, str], role: Role,
                     node_ids: Iterable[int]) -> None:
        """Start the nodes of one role in parallel (JVM start-up is most of the wait)."""
        prepared = [self._prepare_node(image, network, labels, role, i) for i in node_ids]
        _in_parallel([lambda c=c: c.start() for c, _ in prepared])
        self.nodes.extend(self._attach_node(c, n) for c, n in prepared)

    def _prepare_node(self, image: str, network: Network, labels: dict[str, str], role: Role,
                      node_id: int) -> tuple[DockerContainer, tuple[str, Role, int, Path, LoopVolume | None]]:
        name = config.node_alias(role, node_id)
        node_dir = self.workdir / name
        etc = node_dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "log4j.properties").write_text(config.LOG4J)   # read by Kafka 3.x
        (etc / "log4j2.properties").write_text(config.LOG4J2)  # read by Kafka 4.x
        data = node_dir / "data"
        volume = None
        if role == "zookeeper":
            (etc / "zoo.cfg").write_text(config.zoo_cfg(self.spec))
            (data / "zookeeper").mkdir(parents=True, exist_ok=True)
            (data / "zookeeper" / "myid").write_text(f"{node_id}\n")
            heap = self.spec.zookeeper_heap
        elif role == "controller":  # its metadata log on the plain bind mount, like ZooKeeper's data
            (etc / "server.properties").write_text(config.server_properties(self.spec, node_id, "controller"))
            data.mkdir(parents=True, exist_ok=True)
            heap = self.spec.controller_heap
        else:
            path = self.request_path
            proxied = path.address(node_id) if path is not None else None
            inter_broker = path.inter_broker_address(node_id) if path is not None and path.inter_broker_host else None
            (etc / "server.properties").write_text(config.server_properties(self.spec, node_id, proxied=proxied,
                                                                            inter_broker=inter_broker))
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
        if self.kraft_cluster_id:  # run-node.sh formats the storage with it before Kafka starts
            container.with_env("KCHAOS_KRAFT_CLUSTER_ID", self.kraft_cluster_id)
        return container, (name, role, node_id, data, volume)

    def _attach_node(self, container: DockerContainer,
                     meta: tuple[str, Role, int, Path, LoopVolume | None]) -> Node:
        name, role, node_id, data, volume = meta
        return Node(name, role, node_id, container.get_wrapped_container(),
                    f"kchaos-{self.cluster_id}", data, volume, config_dir=data.parent / "etc")

    @classmethod
    def attach(cls, cluster_id: str | None = None) -> "Cluster":
        """Find a running cluster started by ``kchaos cluster up`` (the newest one by default)."""
        client = docker.from_env()
        # one cluster named: only its containers are listed (another harness may be removing its own meanwhile)
        label = LABEL_CLUSTER if cluster_id is None else f"{LABEL_CLUSTER}={cluster_id}"
        found = client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        if not found and cluster_id is not None:
            running = {c.labels[LABEL_CLUSTER] for c in client.containers.list(
                all=True, filters={"label": LABEL_CLUSTER}, ignore_removed=True)}
            raise ClusterError(f"no kchaos cluster {cluster_id!r}; running: {', '.join(sorted(running)) or 'none'}")
        if not found:
            raise ClusterError("no kchaos cluster is running: start one with `kchaos cluster up`")
        if cluster_id is None:
            cluster_id = max(found, key=lambda c: c.attrs["Created"]).labels[LABEL_CLUSTER]
        mine = [c for c in found if c.labels[LABEL_CLUSTER] == cluster_id]
        labels = mine[0].labels
        workdir = Path(labels[LABEL_WORKDIR])
        nodes = []
        for c in sorted(mine, key=lambda c: (c.labels[LABEL_ROLE], int(c.labels[LABEL_NODE_ID]))):
            role: Role = c.labels[LABEL_ROLE]  # type: ignore[assignment]
            node_id = int(c.labels[LABEL_NODE_ID])
            name = config.node_alias(role, node_id)
            nodes.append(Node(name, role, node_id, c, f"kchaos-{cluster_id}", workdir / name / "data",
                              config_dir=workdir / name / "etc"))
        counts = Counter(n.role for n in nodes)
        metadata = labels.get(LABEL_METADATA, "zookeeper")  # clusters started before KRaft carry no label
        quorum = {"controllers": counts["controller"]} if metadata == "kraft" else {"zookeepers": counts["zookeeper"]}
        spec = ClusterSpec(kafka_version=labels.get(LABEL_VERSION, "unknown"), metadata=metadata,  # type: ignore[arg-type]
                           brokers=counts["broker"], **quorum)
        return cls(spec, nodes, cluster_id, workdir, labels.get(LABEL_KRAFT_ID))

    # ----------------------------------------------------------------- lookups

    @property
    def brokers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "broker"]

    @property
    def zookeepers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "zookeeper"]

    @property
    def controllers(self) -> list[Node]:
        """The dedicated KRaft controllers (none in ZooKeeper mode)."""
        return [n for n in self.nodes if n.role == "controller"]

    @property
    def metadata_nodes(self) -> list[Node]:
        """The nodes that hold the cluster's metadata: the ZooKeeper ensemble or the KRaft controllers."""
        return [n for n in self.nodes if n.role in ("zookeeper", "controller")]

    @property
    def kraft(self) -> bool:
        return self.spec.metadata == "kraft"

    @property
    def _quorum_name(self) -> str:
        return "KRaft controller quorum" if self.kraft else "ZooKeeper ensemble"

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
    def client_bootstrap_servers(self) -> str:
        """Where the workload's clients bootstrap: the request path's ports when it is on (every broker
        then advertises its proxied address to them), else the brokers themselves."""
        if self.request_path is not None:
            return self.request_path.bootstrap_servers
        return self.bootstrap_servers

    def route_clients(self, brokers: Iterable[Node] | None = None) -> None:
        """Point the request path at each broker's proxied listener, and its inter-broker listener when the
        request path stands between the brokers too (a restarted broker may have a new address)."""
        path = self.request_path
        if path is None:
            return
        for b in brokers if brokers is not None else self.brokers:
            if b.running:
                ip = b.ip
                path.route(b.node_id, ip, config.PROXIED_PORT)
                if path.inter_broker_host is not None:
                    path.route(b.node_id, ip, config.INTER_BROKER_PORT, listener="inter-broker")

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
                                      logger=RDKAFKA_ADMIN_LOG)
        return self._admin

    def forget_admin(self) -> None:
        """Drop the AdminClient; the next call makes a new one that learns the cluster afresh."""
        self._admin = None

    def metadata(self, timeout: float = 10) -> ClusterMetadata:
        """The cluster as one broker sees it: the live brokers and the controller.

        A plain Metadata request (``list_topics``), answered in the calling
        thread. Not the admin API's DescribeCluster or DescribeTopics: in
        librdkafka 2.16 their answer to a broker that is rejoining after a
        restart can fail an assertion (rdkafka_admin.c, ``rko_result``) and
        abort the whole process.
        """
        try:
            return self.admin().list_topics(timeout=timeout)
        except KafkaException as e:
            raise AdminError.answered("describe the cluster", e.args[0]) from None

    def broker_views(self, topic: str | None = None, timeout: float = 5) -> list[ClusterMetadata]:
        """Each running broker's own metadata, from the brokers that answer within ``timeout``.

        A broker cut off from the KRaft controllers keeps its stale metadata
        image (it still lists itself, still leads), so a KRaft answer is the
        one most brokers give. Each broker is asked through a client that
        knows only it: a new client's first request goes to its bootstrap
        broker.
        """
        def ask(broker: Node) -> ClusterMetadata | None:
            if not broker.running:   # a stopped broker would only cost the whole timeout
                return None
            client = AdminClient({"bootstrap.servers": f"{broker.ip}:{config.CLIENT_PORT}",
                                  "socket.timeout.ms": int(timeout * 1000)}, logger=RDKAFKA_ADMIN_LOG)
            try:
                return client.list_topics(topic, timeout=timeout)
            except KafkaException:
                return None
            finally:
                del client   # destroyed here, in this thread: no request of it is pending

        answers = _in_parallel([lambda b=b: ask(b) for b in self.brokers])
        return [a for a in answers if a is not None]

    def partitions(self, topic: str, timeout: float = 10) -> list[PartitionState]:
        """Leader, replicas and ISR of every partition of ``topic``, as the controller recorded them.

        ZooKeeper mode reads ZooKeeper itself; KRaft mode takes what most
        brokers say, each from its metadata image, which follows the
        controllers' log (the AdminClient cannot ask the quorum).
        """
        if not self.kraft:
            return self._partitions_from_zookeeper(topic)
        return self._partitions_from_brokers(topic, timeout)

    @retry(retry=retry_if_exception(unknown_topic),
           stop=stop_after_delay(UNKNOWN_TOPIC_GRACE_S), wait=wait_fixed(0.5), reraise=True)
    def _partitions_from_brokers(self, topic: str, timeout: float) -> list[PartitionState]:
        """Brokers learn a new topic from the controllers' log one after another: those that do
        not know it yet are not counted, and while none does they are asked again for a few seconds."""
        views = self.broker_views(topic, min(timeout, 5))
        if not views:
            raise AdminError(f"cannot describe topic {topic!r}: no broker answered")
        found = [v.topics[topic] for v in views if v.topics[topic].error is None]
        if not found:
            error = views[0].topics[topic].error
            raise AdminError.answered(f"describe topic {topic!r}", error)
        ids = sorted({p for t in found for p in t.partitions})
        return [most_common(PartitionState(topic, p.id, p.leader if p.leader >= 0 else None,
                                           tuple(p.replicas), tuple(p.isrs))
                            for t in found if (p := t.partitions.get(i)) is not None)
                for i in ids]

    def _zookeeper(self) -> ZooKeeperMetadata:
        if self._zk is None:
            self._zk = ZooKeeperMetadata(",".join(f"{n.ip}:{config.ZK_PORT}" for n in self.zookeepers))
        return self._zk

    def registered_brokers(self) -> set[int]:
        """Ids of the brokers the cluster counts as alive.

        ZooKeeper mode: live ZooKeeper sessions. KRaft mode: the unfenced brokers
        (the controller fences one whose heartbeats stop for broker.session.timeout.ms).
        """
        if not self.kraft:
            return self._zookeeper().broker_ids()
        views = self.broker_views()
        if not views:
            raise ClusterError("cannot describe the cluster: no broker answered")
        return {b.node_id for b in self.brokers if sum(b.node_id in v.brokers for v in views) * 2 > len(views)}

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

    def transaction_coordinator(self, transactional_id: str) -> Node | None:
        """The broker coordinating ``transactional_id``: the leader of its __transaction_state partition.

        Kafka places a transactional id on partition abs(id.hashCode()) mod the
        log's partition count (TransactionStateManager.partitionFor); None
        while that partition has no leader or the log does not exist yet.
        """
        return self._coordinator(TRANSACTION_STATE_TOPIC, transactional_id)

    def group_coordinator(self, group: str) -> Node | None:
        """The broker coordinating consumer group ``group``: the leader of its __consumer_offsets partition.

        Kafka places a group on partition abs(group.hashCode()) mod the log's
        partition count (GroupMetadataManager.partitionFor, and the KIP-848
        coordinator's GroupCoordinatorService.partitionFor alike); None while
        that partition has no leader or the log does not exist yet (Kafka
        creates it at the first FindCoordinator of a group).
        """
        return self._coordinator(CONSUMER_OFFSETS_TOPIC, group)

    def share_coordinator(self, group: str, topic: str, partition: int) -> Node | None:
        """The broker keeping the state of share group ``group``'s share partition ``topic``-``partition``: the
        leader of its __share_group_state partition.

        Kafka places a share partition on partition abs(key.hashCode()) mod the log's partition count, the key
        being "group:topicId:partition" with the topic id in Kafka's base64 form (ShareCoordinatorService.
        partitionFor, SharePartitionKey.asCoordinatorKey); None while that partition has no leader, the log
        does not exist yet (the first share group's first fetch creates it) or the topic is unknown.
        """
        topic_id = self.topic_id(topic)
        return None if topic_id is None else self._coordinator(SHARE_GROUP_STATE_TOPIC,
                                                               f"{group}:{topic_id}:{partition}")

    def topic_id(self, topic: str) -> str | None:
        """``topic``'s id as Kafka prints it (base64, as in kafka-topics.sh --describe), asked once; None when
        no broker answers with it."""
        if topic not in self._topic_ids:
            try:
                described = self.admin().describe_topics(TopicCollection([topic]), request_timeout=5)
                self._topic_ids[topic] = str(described[topic].result(timeout=10).topic_id)
            except (KafkaException, TimeoutError):   # a future's timeout is the builtin since 3.11
                return None
        return self._topic_ids[topic]

    def _coordinator(self, log: str, key: str) -> Node | None:
        """The leader of the partition of the coordinators' ``log`` that holds ``key``; None without one."""
        try:
            states = self.partitions(log)
        except ClusterError:
            return None
        if not states:
            return None
        wanted = coordinator_partition(key, len(states))
        leader = next((p.leader for p in states if p.partition == wanted), None)
        return self.broker(leader) if leader is not None else None

    def controller(self) -> Node:
        """The active controller: a broker in ZooKeeper mode, the quorum leader in KRaft mode.

        ZooKeeper mode reads the election's winner from ZooKeeper (a broker's
        metadata may still name the last one); in KRaft mode a broker's metadata
        names a random broker as "controller", so the leader is read from the
        controllers' own election records.
        """
        if self.kraft:
            return self._active_controller()
        controller = self._zookeeper().controller_id()
        if controller is None:
            raise ClusterError("the cluster has no active controller")
        return self.broker(controller)

    def _quorum(self) -> QuorumState | None:
        """The newest KRaft election any controller recorded."""
        return newest(quorum_state(self._kraft_log_dir(n)) for n in self.controllers)

    @staticmethod
    def _kraft_log_dir(node: Node) -> Path:
        return node.data_dir / config.KRAFT_LOG_SUBDIR

    def _active_controller(self) -> Node:
        """The leader of the newest KRaft election, as long as its process runs."""
        election = self._quorum()
        if election is None or election.leader is None:
            raise ClusterError("the KRaft quorum has no active controller (no leader elected)")
        node = next((n for n in self.controllers if n.node_id == election.leader), None)
        if node is None:
            raise ClusterError(f"the KRaft quorum is led by node {election.leader}, not a controller of this cluster")
        status = node.status
        if status != "running":
            raise ClusterError(f"the KRaft quorum has no active controller: {node.name}, the last leader, is {status}")
        return node

    # --------------------------------------------------------------- readiness

    def _metadata_ready(self) -> list[Node]:
        """Metadata nodes not yet serving (an empty list means the quorum is ready)."""
        return self._controllers_ready() if self.kraft else self._zookeeper_ready()

    def _controllers_ready(self) -> list[Node]:
        """Controllers not yet following the newest election's leader (all of them while none leads)."""
        election = self._quorum()
        if election is None or election.leader is None:
            return self.controllers
        return [n for n in self.controllers if not self._in_quorum(n, election)]

    def _in_quorum(self, node: Node, election: QuorumState) -> bool:
        """A controller is in the quorum when it has recorded the newest election and listens."""
        return quorum_state(self._kraft_log_dir(node)) == election and tcp_open(node.ip, config.CONTROLLER_PORT)

    def _zookeeper_ready(self) -> list[Node]:
        """ZooKeeper nodes not yet serving (an empty list means ready)."""
        modes = {n.name: zookeeper_mode(n.ip) for n in self.zookeepers}
        if sum(m in ("leader", "standalone") for m in modes.values()) != 1:
            return self.zookeepers
        return [n for n in self.zookeepers if modes[n.name] not in ("leader", "follower", "standalone")]

    def _brokers_ready(self) -> list[Node]:
        """Brokers not registered yet, or in ZooKeeper mode all of them while no controller is elected.

        (In KRaft mode the controllers were ready before any broker started.)
        """
        try:
            found = self.metadata(timeout=5)
        except ClusterError:
            return self.brokers
        missing = [b for b in self.brokers if b.node_id not in found.brokers]
        if not missing and not self.kraft and found.controller_id < 0:
            return self.brokers
        return missing

    def recover(self, node: Node, timeout: float = READY_TIMEOUT_S) -> None:
        """Start ``node`` and keep restarting it until it serves again, like a service manager would.

        A broker restarted before ZooKeeper expired its old session exits
        (its registration still exists); starting it again a moment later works.
        A KRaft controller serves once it follows the quorum's current leader.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not node.running:
                node.start()
                if node.role == "broker" and self.spec.inter_broker_request_path:
                    # the other brokers (the ZooKeeper-mode controller first) reach it through the request
                    # path as soon as it registers: point it at the new address now
                    self.route_clients([node])
            if self._serves(node):
                if node.role == "broker":
                    self.route_clients([node])
                return
            time.sleep(1)
        raise ClusterError(f"{node.name} did not serve again within {timeout:.0f}s; log tail: {node.log_tail()}")

    def replace_version(self, node: Node, version: str) -> None:
        """Put a stopped node on Kafka ``version``'s image (built if missing), over the same disk and config:
        a rolling upgrade's step. It stays stopped; :meth:`recover` starts it."""
        node.recreate(ensure_image(version), {LABEL_VERSION: version})

    def _serves(self, node: Node) -> bool:
        if node.role == "zookeeper":
            return zookeeper_mode(node.ip) in ("leader", "follower", "standalone")
        if node.role == "controller":
            return node not in self._controllers_ready()
        try:
            registered = node.node_id in self.registered_brokers()
        except ClusterError:
            return False
        # registration comes before the listener accepts connections: wait for both
        return registered and tcp_open(node.ip, node.service_port)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait until every metadata node (ZooKeeper or KRaft controller) serves and every broker is registered."""
        self._await(self._metadata_ready, f"{self._quorum_name} serves", self.metadata_nodes, timeout)
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
        # destroy the AdminClient here, in the caller's thread: left to the
        # garbage collector it may be destroyed from its own librdkafka
        # thread (an admin future's callback), which aborts the process
        self._admin = None
        if self._zk is not None:
            self._zk.close()
            self._zk = None
        if self.request_path is not None:
            self.request_path.stop()
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


def most_common(answers: Iterable[T]) -> T:
    """The answer given most often (the first of those tied)."""
    return Counter(answers).most_common(1)[0][0]


def admin_result(future: Future[Any], timeout: float, what: str) -> Any:
    """The result of an AdminClient future; a Kafka error or a time-out becomes a one-line ClusterError."""
    try:
        return future.result(timeout=timeout)
    except KafkaException as e:
        raise AdminError.answered(what, e.args[0]) from None
    except TimeoutError:
        raise AdminError(f"cannot {what}: no answer within {timeout:.0f}s") from None


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


def _in_parallel(actions: list[Callable[[], T]]) -> list[T]:
    with ThreadPoolExecutor(max_workers=max(1, len(actions))) as pool:
        return [future.result() for future in [pool.submit(a) for a in actions]]
