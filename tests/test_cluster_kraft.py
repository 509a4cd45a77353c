"""Real KRaft clusters: 3 dedicated controllers + 3 brokers on Kafka 3.9 and on the newest 4.x.

One cluster per Kafka version (module fixture): nodes and the quorum, a
power cut right after start, acks=all traffic, a partition-leader kill, an
active-controller kill, a broker cut from the controllers, the CLI on it, a
rolling upgrade (3.9 to 4.x) or a feature changed and back (4.x),
and a teardown that leaves nothing behind.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from clusters.cluster import Cluster
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4
from clusters.node import Node
from clusters.spec import ClusterSpec, TopicSpec
from clusters.topics import create_topic
from faults.partition import PartitionFault
from faults.power_loss import PowerLossFault
from faults.rolling import RollingUpgradeFault
from clusters.features import finalized_level, run_features, set_feature
from conftest import assert_nothing_left, start_owned_cluster  # the module pytest loaded: tests/ has no __init__.py
from waiting import eventually
from helpers import maps_class_archive

pytestmark = pytest.mark.cluster

MESSAGES = 5_000


@pytest.fixture(scope="module", params=[DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4])
def kraft(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    version = request.param
    spec = ClusterSpec(kafka_version=version, metadata="kraft", brokers=3, controllers=3,
                       broker_config={"replica.lag.time.max.ms": "8000"})
    started = time.monotonic()
    cluster = start_owned_cluster(spec, tmp_path_factory.mktemp(f"kraft-{version}"))
    print(f"\nKRaft {version}: 3 controllers + 3 brokers ready in {time.monotonic() - started:.1f}s")
    try:
        yield cluster
    finally:
        cluster.teardown(logs_to=tmp_path_factory.mktemp(f"kraft-{version}-logs"))
        assert_nothing_left(cluster.cluster_id, cluster.workdir)
        assert not cluster.workdir.exists()


def test_nodes_quorum_and_ids(kraft: Cluster) -> None:
    assert sorted(n.name for n in kraft.nodes) == ["broker1", "broker2", "broker3",
                                                   "controller1", "controller2", "controller3"]
    assert sorted(n.node_id for n in kraft.controllers) == [101, 102, 103]
    assert sorted(n.node_id for n in kraft.brokers) == [1, 2, 3]
    assert kraft.metadata_nodes == kraft.controllers and kraft.zookeepers == []
    assert kraft.kraft_cluster_id is not None and len(kraft.kraft_cluster_id) == 22
    mounts = open("/proc/mounts").read()
    for node in kraft.nodes:
        assert node.running and node.pid > 0
    assert [n.name for n in kraft.nodes if not maps_class_archive(n)] == []
    for broker in kraft.brokers:  # broker data on its own loop volume (power-loss)
        assert broker.volume is not None and f"{broker.volume.device} {broker.data_dir} ext4" in mounts
    for controller in kraft.controllers:  # the metadata log on the host bind mount
        assert controller.volume is None and controller.service_port == 9093
        assert (controller.data_dir / "kraft" / "__cluster_metadata-0" / "quorum-state").exists()
    active = kraft.controller()
    assert active in kraft.controllers
    assert kraft.registered_brokers() == {1, 2, 3}

    again = Cluster.attach(kraft.cluster_id)
    assert again.spec.metadata == "kraft" and again.spec.controllers == 3 and again.spec.brokers == 3
    assert again.kraft_cluster_id == kraft.kraft_cluster_id
    assert again.controller().name == active.name


def test_power_loss_right_after_start_restarts_on_the_crash_image(kraft: Cluster) -> None:
    """Runs first: the storage formatted at start must be on the "disk" before any power cut."""
    broker = kraft.brokers[2]
    fault = PowerLossFault(kraft, "unused", random.Random(7))
    assert "restarted on crash images" in fault.apply([broker])
    fault.heal([broker])  # restarted until it serves: registered again and listening
    assert broker.running and broker.node_id in kraft.registered_brokers()


def write_all(cluster: Cluster, topic: str) -> None:
    """MESSAGES writes under acks=all, every one acknowledged."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked: list[int] = []
    for seq in range(MESSAGES):
        producer.produce(topic, value=str(seq).encode(),
                         on_delivery=lambda err, msg: acked.append(int(msg.value())) if err is None else None)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert sorted(acked) == list(range(MESSAGES))


def read_all(cluster: Cluster, topic: TopicSpec) -> set[int]:
    """Every value in the topic, read from the start as the harness's final read does (no committed-offset
    lookup: on a fresh KRaft cluster the first group coordinator answers NOT_COORDINATOR for a moment, and
    librdkafka's assign() then never fetches the offsets again)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"g-{topic.name}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic.name, p, OFFSET_BEGINNING) for p in range(topic.partitions)])
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < MESSAGES and time.monotonic() < deadline:
        seen.update(int(m.value()) for m in consumer.consume(1000, timeout=1) if m.error() is None)
    consumer.close()
    return seen


def test_acks_all_traffic_reads_back_whole(kraft: Cluster) -> None:
    topic = TopicSpec(f"t-{uuid.uuid4().hex[:6]}", partitions=3, replication_factor=3, min_insync_replicas=2)
    create_topic(kraft, topic)
    states = kraft.partitions(topic.name)
    assert all(len(s.isr) == 3 and s.leader in s.isr for s in states)
    write_all(kraft, topic.name)
    assert read_all(kraft, topic) == set(range(MESSAGES))


def test_killed_leader_is_replaced_by_an_isr_member(kraft: Cluster) -> None:
    topic = TopicSpec(f"k-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(kraft, topic)
    before = kraft.partitions(topic.name)[0]
    victim = kraft.leader(topic.name, 0)
    assert victim is not None and victim.node_id == before.leader
    victim.kill()
    assert not victim.running

    def new_leader() -> int | None:
        leader = kraft.partitions(topic.name)[0].leader
        return leader if leader not in (None, victim.node_id) else None

    leader = eventually(new_leader, 60, "another replica leads once the controller fences the dead one")
    assert leader in before.isr
    kraft.recover(victim)
    assert victim.node_id in kraft.registered_brokers()
    kraft.wait_ready()


def test_killed_active_controller_is_replaced_and_recovers(kraft: Cluster) -> None:
    victim = kraft.controller()
    victim.kill()

    def successor() -> Node | None:
        active = kraft.controller()
        return active if active is not victim else None

    elected = eventually(successor, 60, f"a controller other than {victim.name} is elected")
    assert elected in kraft.controllers and elected.running  # type: ignore[union-attr]
    kraft.recover(victim)
    assert victim.running
    kraft.wait_ready()
    # the quorum takes metadata writes again: a new topic gets leaders and a full ISR
    create_topic(kraft, TopicSpec(f"c-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3))


def test_broker_cut_from_the_controllers_is_fenced_until_healed(kraft: Cluster) -> None:
    broker = kraft.brokers[0]
    fault = PartitionFault(kraft, "unused", random.Random(7), {"mode": "zookeeper"})
    detail = fault.apply([broker])
    try:
        assert detail.startswith(f"zookeeper: {broker.name} -/- ")
        assert not any(broker.can_reach(c.ip, 9093) for c in kraft.controllers)
        assert broker.can_reach(kraft.brokers[1].ip, 9092)  # only the controllers are cut
        eventually(lambda: broker.node_id not in kraft.registered_brokers(), 45,
                   "the controller fences the broker whose heartbeats stopped")
    finally:
        fault.heal([broker])
    assert all(broker.can_reach(c.ip, 9093) for c in kraft.controllers)
    eventually(lambda: broker.node_id in kraft.registered_brokers(), 60, "the broker is unfenced again")


def test_cli_status_names_the_active_controller(kraft: Cluster) -> None:
    kchaos = [sys.executable, "-m", "harness.cli"]
    status = subprocess.run([*kchaos, "cluster", "status", "--id", kraft.cluster_id],
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert f"Kafka {kraft.spec.kafka_version}, kraft" in status.stdout
    assert "controller3" in status.stdout and "controller " in status.stdout
    assert f"active controller: {kraft.controller().name}" in status.stdout


@pytest.mark.parametrize("args, message", [
    (["--metadata", "kraft", "--controllers", "2"], "cluster.controllers must be an odd number"),
    (["--kafka-version", NEWEST_KAFKA_4], "has no ZooKeeper mode"),
])
def test_cli_refuses_impossible_kraft_clusters_in_one_line(args: list[str], message: str) -> None:
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "up", *args],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert message in bad.stderr and bad.stderr.strip().count("\n") == 0


def test_a_roll_by_the_book_keeps_what_was_acknowledged(kraft: Cluster) -> None:
    """Last on each cluster. On 3.9: the rolling upgrade to the newest 4.x (controllers, then brokers, each back
    in every ISR it left before the next; then metadata.version raised): every node runs 4.x, every ISR is
    whole, every write acknowledged before the roll reads back after it. On 4.x: a feature finalized and
    taken back with kafka-features.sh (the rolling restart is the upgrade's roll without the new image)."""
    broker = kraft.brokers[0]
    if kraft.spec.kafka_version != DEFAULT_KAFKA_VERSION:
        set_feature(broker, "eligible.leader.replicas.version", 0)
        assert finalized_level(run_features(broker, "describe"), "eligible.leader.replicas.version") == "0"
        set_feature(broker, "eligible.leader.replicas.version", 1)
        assert finalized_level(run_features(broker, "describe"), "eligible.leader.replicas.version") == "1"
        return
    before = kraft.spec.kafka_version
    topic = TopicSpec(f"roll-{uuid.uuid4().hex[:6]}", partitions=3, replication_factor=3, min_insync_replicas=2)
    create_topic(kraft, topic)
    write_all(kraft, topic.name)
    fault = RollingUpgradeFault(kraft, topic.name, random.Random(1), {"to_version": NEWEST_KAFKA_4})
    detail = fault.apply(sorted(kraft.brokers, key=lambda n: n.node_id))
    print(f"\n{detail}")
    assert {n.name: n.version for n in kraft.nodes} == {n.name: NEWEST_KAFKA_4 for n in kraft.nodes}
    # a node's log holds both releases' lines: the replaced container's too, for logs/ and the forensics
    assert all(f"Kafka version: {v}".encode() in n.logs() for n in kraft.nodes for v in (before, NEWEST_KAFKA_4))
    assert detail.count("in every ISR it left after") == 3
    assert f"metadata.version raised to {NEWEST_KAFKA_4.rsplit('.', 1)[0]}-" in detail
    assert all(len(s.isr) == 3 for s in kraft.partitions(topic.name))
    assert read_all(kraft, topic) == set(range(MESSAGES))
