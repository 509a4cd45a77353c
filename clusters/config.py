"""Config files for nodes, written by the harness and mounted at /etc/kchaos.

``@NODE_IP@`` is replaced by the container's own address when it starts
(see images/run-node.sh), so brokers advertise an address that both the
other brokers and the harness on the host can reach.
"""

from __future__ import annotations

from clusters.spec import ClusterSpec

CLIENT_PORT = 9092
ZK_PORT = 2181

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


def zookeeper_alias(index: int) -> str:
    return f"zk{index}"


def broker_alias(broker_id: int) -> str:
    return f"broker{broker_id}"


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


def broker_defaults(spec: ClusterSpec) -> dict[str, str]:
    """Settings a test cluster needs; durability settings stay at Kafka's defaults."""
    internal_rf = str(min(3, spec.brokers))
    return {
        "listeners": f"PLAINTEXT://0.0.0.0:{CLIENT_PORT}",
        "advertised.listeners": f"PLAINTEXT://@NODE_IP@:{CLIENT_PORT}",
        "log.dirs": "/data/kafka",
        "zookeeper.connect": ",".join(f"{zookeeper_alias(i)}:{ZK_PORT}" for i in range(1, spec.zookeepers + 1)),
        "offsets.topic.replication.factor": internal_rf,
        "transaction.state.log.replication.factor": internal_rf,
        "transaction.state.log.min.isr": str(min(2, spec.brokers)),
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.segment.bytes": str(64 * 1024 * 1024),
        # a dead broker is noticed after 6 s instead of 18 s, so faults of a few
        # seconds move leadership as a real outage would
        "zookeeper.session.timeout.ms": "6000",
    }


def server_properties(spec: ClusterSpec, broker_id: int) -> str:
    settings = {"broker.id": str(broker_id), **broker_defaults(spec),
                **{k: str(v) for k, v in spec.broker_config.items()}}
    return "".join(f"{k}={v}\n" for k, v in settings.items())
