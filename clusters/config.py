"""Config files for nodes, written by the harness and mounted at /etc/kchaos.

``@NODE_IP@`` is replaced by the container's own address when it starts
(see images/run-node.sh), so brokers advertise an address that both the
other brokers and the harness on the host can reach.

Node ids: brokers are 1..N in both modes (so partition leaders and ISRs name
them directly); ZooKeeper nodes have their own myid 1..Z; KRaft controllers
are 101..100+C, unique next to the brokers because KRaft shares one id space.
"""

from __future__ import annotations

from clusters.node import SERVICE_PORTS, Role
from clusters.spec import ClusterSpec

CLIENT_PORT = SERVICE_PORTS["broker"]
# a broker's second listener, for the workload's clients when the request path (clusters/proxy/) is on:
# it advertises the proxy's port for that broker, so a client that bootstraps through the proxy is sent
# back through it for every broker; the brokers and the harness keep the first listener
PROXIED_LISTENER = "PROXIED"
PROXIED_PORT = 9094
# a broker's third listener, when the request path also stands between the brokers
# (ClusterSpec.inter_broker_request_path): inter.broker.listener.name, advertising the request path's
# inter-broker port for that broker on the cluster network's gateway, so replica fetchers, the transaction
# marker sender and (ZooKeeper mode) the controller reach it through the proxy. KRaft's CONTROLLER listener
# (brokers -> controllers) stays direct
INTER_BROKER_LISTENER = "INTERBROKER"
INTER_BROKER_PORT = 9095
CONTROLLER_PORT = SERVICE_PORTS["controller"]
ZK_PORT = SERVICE_PORTS["zookeeper"]
CONTROLLER_ID_BASE = 100
BROKER_LOG_SUBDIR = "kafka"  # a broker's partition logs: /data/kafka, on its own loop-mounted file system
KRAFT_LOG_SUBDIR = "kraft"   # a controller's metadata log: /data/kraft, bind-mounted from the host

LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel$=WARN
log4j.logger.org.apache.kafka.clients.NetworkClient=WARN
log4j.logger.state.change.logger=INFO
log4j.logger.org.apache.zookeeper=INFO
"""

# the same output for Kafka 4.x, which logs to log4j2
LOG4J2 = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.channel.name = kafka.network.RequestChannel$
logger.channel.level = WARN
logger.client.name = org.apache.kafka.clients.NetworkClient
logger.client.level = WARN
logger.state.name = state.change.logger
logger.state.level = INFO
"""


def zookeeper_alias(index: int) -> str:
    return f"zk{index}"


def broker_alias(broker_id: int) -> str:
    return f"broker{broker_id}"


def controller_alias(node_id: int) -> str:
    return f"controller{node_id - CONTROLLER_ID_BASE}"


def node_alias(role: Role, node_id: int) -> str:
    """A node's host name on the cluster network (and its container's suffix)."""
    if role == "zookeeper":
        return zookeeper_alias(node_id)
    if role == "controller":
        return controller_alias(node_id)
    return broker_alias(node_id)


def controller_ids(spec: ClusterSpec) -> list[int]:
    return [CONTROLLER_ID_BASE + i for i in range(1, spec.controllers + 1)]


def quorum_voters(spec: ClusterSpec) -> str:
    """The static KRaft quorum: ``id@host:port`` of every controller."""
    return ",".join(f"{i}@{controller_alias(i)}:{CONTROLLER_PORT}" for i in controller_ids(spec))


def zoo_cfg(spec: ClusterSpec) -> str:
    servers = "\n".join(f"server.{i}={zookeeper_alias(i)}:2888:3888" for i in range(1, spec.zookeepers + 1))
    return f"""\
tickTime=2000
initLimit=10
syncLimit=5
dataDir=/data/zookeeper
clientPort={ZK_PORT}
maxClientCnxns=0
admin.enableServer=false
quorumListenOnAllIPs=true
4lw.commands.whitelist=*
{servers if spec.zookeepers > 1 else ""}
"""


def _kraft_common(spec: ClusterSpec, node_id: int) -> dict[str, str]:
    """What every KRaft node needs to find the quorum."""
    return {
        "node.id": str(node_id),
        "controller.quorum.voters": quorum_voters(spec),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        # the controller fences a broker whose heartbeats stop for 6 s (default 9 s), the
        # KRaft twin of zookeeper.session.timeout.ms below: faults of a few seconds move leadership
        "broker.session.timeout.ms": "6000",
    }


def broker_defaults(spec: ClusterSpec, broker_id: int, proxied: str | None = None,
                    inter_broker: str | None = None) -> dict[str, str]:
    """Settings a test broker needs; durability settings stay at Kafka's defaults.

    ``proxied`` (host:port of the request path's port for this broker) adds the PROXIED listener, which
    advertises that address; inter-broker traffic stays on PLAINTEXT unless ``inter_broker`` (host:port of
    the request path's inter-broker port for this broker) adds the INTERBROKER listener, which advertises
    it and is the inter-broker listener.
    """
    internal_rf = str(min(3, spec.brokers))
    if spec.metadata == "kraft":
        metadata = {"process.roles": "broker", **_kraft_common(spec, broker_id)}
    else:
        metadata = {
            "broker.id": str(broker_id),
            "zookeeper.connect": ",".join(f"{zookeeper_alias(i)}:{ZK_PORT}" for i in range(1, spec.zookeepers + 1)),
            # a dead broker is noticed after 6 s instead of 18 s, so faults of a few
            # seconds move leadership as a real outage would
            "zookeeper.session.timeout.ms": "6000",
        }
    extra = [(name, port, address) for name, port, address in
             ((PROXIED_LISTENER, PROXIED_PORT, proxied), (INTER_BROKER_LISTENER, INTER_BROKER_PORT, inter_broker))
             if address is not None]
    listeners = {
        "listeners": ",".join([f"PLAINTEXT://0.0.0.0:{CLIENT_PORT}"] +
                              [f"{name}://0.0.0.0:{port}" for name, port, _ in extra]),
        "advertised.listeners": ",".join([f"PLAINTEXT://@NODE_IP@:{CLIENT_PORT}"] +
                                         [f"{name}://{address}" for name, _, address in extra]),
    }
    if extra:
        protocols = metadata.get("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT")
        listeners["listener.security.protocol.map"] = ",".join([protocols] + [f"{n}:PLAINTEXT" for n, _, _ in extra])
        listeners["inter.broker.listener.name"] = INTER_BROKER_LISTENER if inter_broker is not None else "PLAINTEXT"
    return {
        **metadata,
        **listeners,
        "log.dirs": f"/data/{BROKER_LOG_SUBDIR}",
        "offsets.topic.replication.factor": internal_rf,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": str(min(2, spec.brokers)),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.segment.bytes": str(64 * 1024 * 1024),
    }


def controller_defaults(spec: ClusterSpec, node_id: int) -> dict[str, str]:
    """Settings of a dedicated KRaft controller: its own listener and metadata log under /data."""
    return {
        "process.roles": "controller",
        **_kraft_common(spec, node_id),
        "listeners": f"CONTROLLER://0.0.0.0:{CONTROLLER_PORT}",
        "log.dirs": f"/data/{KRAFT_LOG_SUBDIR}",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }


def server_properties(spec: ClusterSpec, node_id: int, role: Role = "broker", proxied: str | None = None,
                      inter_broker: str | None = None) -> str:
    """server.properties of a broker or a KRaft controller; ``spec.broker_config`` comes last.

    Controllers get the overrides too: in KRaft the controller elects leaders,
    so cluster-wide defaults such as unclean.leader.election.enable or
    min.insync.replicas are read from its own static config. ``proxied``, ``inter_broker``: see
    broker_defaults.
    """
    defaults = (controller_defaults(spec, node_id) if role == "controller"
                else broker_defaults(spec, node_id, proxied, inter_broker))
    settings = {**defaults, **{k: str(v) for k, v in spec.broker_config.items()}}
    return "".join(f"{k}={v}\n" for k, v in settings.items())
