"""The request path on a real cluster: clients go through it for every broker, and a Produce request held
by it reaches the broker late, on its own connection, after its client gave up on it, while a new
connection passes. With the request path between the brokers too, a transaction coordinator's
WriteTxnMarkers held by it reach the partition leader late."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from clusters.cluster import Cluster
from clusters.spec import ClusterSpec, TopicSpec
from clusters.topics import create_topic
from tests.conftest import assert_nothing_left, start_owned_cluster

pytestmark = pytest.mark.cluster

HOLD_S = 6.0


def owned_cluster(spec: ClusterSpec, factory: pytest.TempPathFactory, name: str) -> Iterator[Cluster]:
    c = start_owned_cluster(spec, factory.mktemp(name))
    try:
        yield c
    finally:
        c.teardown(logs_to=factory.mktemp(f"{name}-logs"))
        assert_nothing_left(c.cluster_id, c.workdir)
        assert c.request_path is not None and not c.request_path.running


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from owned_cluster(ClusterSpec(brokers=3, zookeepers=1, request_path=True), tmp_path_factory, "proxied")


def high_watermark(cluster: Cluster, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "hw"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1]
    finally:
        consumer.close()


def read_values(cluster: Cluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"r-{topic}",
                        "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < count and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(100, timeout=1) if m.error() is None]
    consumer.close()
    return values


def test_clients_reach_every_broker_through_the_request_path(proxied: Cluster) -> None:
    path = proxied.request_path
    assert path is not None
    producer = Producer({"bootstrap.servers": proxied.client_bootstrap_servers})
    brokers = producer.list_topics(timeout=10).brokers
    assert {b.id: f"{b.host}:{b.port}" for b in brokers.values()} == {i: path.address(i) for i in (1, 2, 3)}
    # the harness's own view (the first listener) still names the brokers themselves
    direct = proxied.metadata().brokers
    assert {b.host for b in direct.values()} == {b.ip for b in proxied.brokers}


def test_a_held_produce_reaches_the_broker_late_while_a_new_connection_passes(proxied: Cluster) -> None:
    path = proxied.request_path
    assert path is not None
    topic = TopicSpec(f"held-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(proxied, topic)
    leader = proxied.leader(topic.name, 0)
    assert leader is not None

    reports: list[tuple[bytes, str | None, float]] = []

    def report(err: KafkaError | None, msg: object) -> None:
        reports.append((msg.value(), err.name() if err else None, time.monotonic()))  # type: ignore[attr-defined]

    # short time-outs: the client gives up on the held request long before it is delivered
    p1 = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "client.id": "kchaos-p1", "acks": "all",
                   "request.timeout.ms": 1500, "message.timeout.ms": 2500, "retries": 0, "linger.ms": 0,
                   "on_delivery": report})
    p1.produce(topic.name, b"warm", partition=0)
    assert p1.flush(20) == 0 and reports[-1][1] is None   # its connection to the leader is open now

    rule = path.hold(["Produce"], broker=leader.node_id, hold_s=HOLD_S, clients=["kchaos-p1"])
    held_at = time.monotonic()
    p1.produce(topic.name, b"late", partition=0)
    p1.poll(0)
    time.sleep(0.5)

    # another client on a new connection to the same broker passes at once
    p2 = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "client.id": "kchaos-p1-retry",
                   "acks": "all", "on_delivery": report})
    p2.produce(topic.name, b"passes", partition=0)
    assert p2.flush(HOLD_S / 2) == 0
    passed = next(r for r in reports if r[0] == b"passes")
    assert passed[1] is None and passed[2] - held_at < HOLD_S / 2

    p1.flush(HOLD_S)
    late = next(r for r in reports if r[0] == b"late")
    assert late[1] is not None and late[2] - held_at < HOLD_S, "the client saw its request time out"
    assert high_watermark(proxied, topic.name) == 2, "the held record is not in the log yet"

    deadline = time.monotonic() + HOLD_S + 10
    while high_watermark(proxied, topic.name) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    arrived = time.monotonic()
    assert arrived - held_at >= HOLD_S - 0.5
    assert read_values(proxied, topic.name, 3) == [b"warm", b"passes", b"late"]

    assert path.release(rule) == 0
    held = [h for h in path.held() if h.rule == rule]
    matched = [h for h in held if h.cause == "matched"]
    assert len(matched) == 1
    (h,) = matched
    assert (h.api, h.client, h.node, h.action) == ("Produce", "kchaos-p1", leader.node_id, "delayed")
    assert h.released_ns is not None and (h.released_ns - h.held_ns) / 1e9 >= HOLD_S
    assert h.detail["partitions"] == [f"{topic.name}-0"] and h.detail["acks"] == -1
    assert h.outcome == "answered" and h.response_error == "none"
    # librdkafka closes a connection whose request timed out: the late answer went nowhere
    assert h.client_closed and h.response_forwarded is False
    stats = path.stats()
    assert stats["pending"] == 0 and stats["rules"][rule]["matched"] == 1


class FakeProducer:
    """A workload client handle as the fault sees one: a name and a role."""

    name = base_name = "p9"
    role = "producer"
    running = True


def test_the_delay_requests_fault_holds_and_proves_it(proxied: Cluster) -> None:
    import random

    from faults.delay_requests import DelayRequestsFault

    topic = TopicSpec(f"fault-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(proxied, topic)
    fault = DelayRequestsFault(proxied, topic.name, random.Random(1),
                               {"apis": "Produce", "hold_s": 3.0, "roles": "producer"},
                               clients=[FakeProducer()])  # type: ignore[list-item]
    (leader,) = fault.choose("partition-leader")
    producer = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "client.id": "kchaos-p9",
                         "acks": "all", "linger.ms": 0})
    producer.produce(topic.name, b"warm", partition=0)
    assert producer.flush(20) == 0
    origin = time.monotonic_ns()
    detail = fault.apply([leader])
    assert detail == f"hold Produce from producer to {leader.name} for 3.0 s on connections open now"
    producer.produce(topic.name, b"held", partition=0)
    assert producer.flush(20) == 0   # the default time-outs outlast the hold: a late acknowledgement
    fault.heal([leader])
    (line,) = [e for e in fault.evidence(origin) if e["cause"] == "matched"]
    assert (line["fault"], line["api"], line["client"], line["node"], line["action"]) == \
        ("delay-requests", "Produce", "kchaos-p9", leader.node_id, "delayed")
    assert line["released_ns"] - line["held_ns"] >= 3e9 and line["held_ns"] > 0
    assert line["response_error"] == "none" and line["outcome"] == "answered" and not line["client_closed"]


def fake_client(name: str, role: str = "producer") -> object:
    """A workload client handle as a fault sees one: a name and a role."""
    return type("FakeClient", (), {"name": name, "base_name": name, "role": role, "running": True})()


def test_the_drop_responses_fault_leaves_the_write_in_the_log_and_the_client_timed_out(proxied: Cluster) -> None:
    import random

    from faults.drop_responses import DropResponsesFault

    topic = TopicSpec(f"drop-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(proxied, topic)
    fault = DropResponsesFault(proxied, topic.name, random.Random(1), {"apis": "Produce"},
                               clients=[fake_client("p8")])  # type: ignore[list-item]
    (leader,) = fault.choose("partition-leader")
    reports: list[tuple[bytes, str | None]] = []
    producer = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "client.id": "kchaos-p8",
                         "acks": "all", "enable.idempotence": False, "retries": 0, "linger.ms": 0,
                         "request.timeout.ms": 1500, "message.timeout.ms": 3000,
                         "on_delivery": lambda err, msg: reports.append((msg.value(), err.name() if err else None))})
    # a first write with no fault, so that the new partition's followers fetch before the one that matters: its
    # acks=all answer must not wait on their first fetch past the 1.5 s the request gives the broker (a loaded
    # machine answered REQUEST_TIMED_OUT once)
    producer.produce(topic.name, b"warm", partition=0)
    producer.flush(10)
    assert reports == [(b"warm", None)]
    reports.clear()
    origin = time.monotonic_ns()
    assert fault.apply([leader]) == f"drop the answers to Produce from producer to {leader.name} on every connection"
    producer.produce(topic.name, b"unknown", partition=0)
    producer.flush(10)
    assert reports and reports[0][0] == b"unknown" and reports[0][1] is not None, "the client saw no acknowledgement"
    fault.heal([leader])
    assert fault.no_effect() is None
    # the broker took the write all the same: read it back from the broker directly
    assert read_values(proxied, topic.name, 2) == [b"warm", b"unknown"]
    (line,) = [e for e in fault.evidence(origin) if e["cause"] == "matched"]
    assert (line["fault"], line["api"], line["client"], line["node"], line["action"]) == \
        ("drop-responses", "Produce", "kchaos-p8", leader.node_id, "response-dropped")
    assert line["response_error"] == "none" and line["outcome"] == "answered"
    assert line["detail"]["partitions"] == [f"{topic.name}-0"]
    assert all(e["outcome"] == "discarded" for e in fault.evidence(origin) if e["cause"] == "behind")
    producer.flush(5)


def test_the_replay_requests_fault_writes_a_plain_produce_twice_and_an_idempotent_one_once(proxied: Cluster) -> None:
    import random

    from faults.replay_requests import ReplayRequestsFault

    counts = {}
    for idempotent in (False, True):
        topic = TopicSpec(f"replay-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3,
                          min_insync_replicas=2)
        create_topic(proxied, topic)
        name = "p6" if idempotent else "p7"
        fault = ReplayRequestsFault(proxied, topic.name, random.Random(1), {"apis": "Produce", "hold_s": 1.0},
                                    clients=[fake_client(name)])  # type: ignore[list-item]
        (leader,) = fault.choose("partition-leader")
        producer = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "client.id": f"kchaos-{name}",
                             "acks": "all", "enable.idempotence": idempotent, "linger.ms": 0})
        origin = time.monotonic_ns()
        fault.apply([leader])
        producer.produce(topic.name, b"once", partition=0)
        assert producer.flush(20) == 0
        fault.heal([leader])   # waits until the copy went and was answered
        (line,) = fault.evidence(origin)
        assert (line["fault"], line["api"], line["client"], line["action"], line["outcome"]) == \
            ("replay-requests", "Produce", f"kchaos-{name}", "replayed", "answered")
        assert (line["released_ns"] - line["held_ns"] >= 1e9
                and line["detail"]["replay_connection"] != line["connection"])
        assert line["response_error"] == "none"   # a duplicate batch is answered as a success, not written
        counts[idempotent] = high_watermark(proxied, topic.name)
        assert read_values(proxied, topic.name, counts[idempotent]) == [b"once"] * counts[idempotent]
    assert counts == {False: 2, True: 1}


def test_the_lossy_network_fault_drops_packets_and_heal_removes_its_rules(proxied: Cluster) -> None:
    import random

    from faults.lossy_network import LossyNetworkFault
    from faults.partition import iptables_rules

    topic = TopicSpec(f"lossy-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=2)
    create_topic(proxied, topic)
    fault = LossyNetworkFault(proxied, topic.name, random.Random(1), {"probability": 0.2, "peers": "clients"})
    (leader,) = fault.choose("partition-leader")
    assert fault.apply([leader]) == f"drop 0.2 of packets (clients) on {leader.name}"
    rules = iptables_rules(leader)
    assert f"-A INPUT -i eth0 -j {fault.chain}" in rules and any(
        f"-A {fault.chain} -s {proxied.client_address}/32" in r and "--probability 0.2" in r for r in rules)
    producer = Producer({"bootstrap.servers": proxied.client_bootstrap_servers, "acks": "all", "linger.ms": 0})
    for i in range(200):
        producer.produce(topic.name, str(i).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0   # TCP retransmits what was lost
    fault.heal([leader])
    assert fault.dropped[leader.name] > 0 and fault.no_effect() is None
    assert fault.healed() == f"dropped {leader.name} {fault.dropped[leader.name]} packets"
    assert not any(fault.chain in r for r in iptables_rules(leader)) and not leader.network_rules


@pytest.fixture(scope="module")
def between_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    spec = ClusterSpec(brokers=3, zookeepers=1, request_path=True, inter_broker_request_path=True)
    yield from owned_cluster(spec, tmp_path_factory, "between-brokers")


def test_write_txn_markers_held_between_brokers_reach_the_leader_late(between_brokers: Cluster) -> None:
    from faults.delay_requests import broker_client_ids

    path = between_brokers.request_path
    assert path is not None and path.inter_broker_host == between_brokers.client_address
    # min ISR 3: an acknowledged write needs both followers, which fetch through the request path
    topic = TopicSpec(f"markers-{uuid.uuid4().hex[:6]}", partitions=1, replication_factor=3, min_insync_replicas=3)
    create_topic(between_brokers, topic)
    leader = between_brokers.leader(topic.name, 0)
    assert leader is not None
    brokers = broker_client_ids(b.node_id for b in between_brokers.brokers)
    fetches = path.hold(["Fetch"], broker=leader.node_id, hold_s=0, clients=brokers, connections="all", limit=1)
    producer = Producer({"bootstrap.servers": between_brokers.client_bootstrap_servers, "client.id": "kchaos-p4",
                         "transactional.id": f"markers-{uuid.uuid4().hex[:6]}", "linger.ms": 0})
    producer.init_transactions(30)

    def transaction(value: bytes) -> float:
        producer.begin_transaction()
        producer.produce(topic.name, value, partition=0)
        producer.commit_transaction(30)
        return time.monotonic()

    consumer = Consumer({"bootstrap.servers": between_brokers.bootstrap_servers, "group.id": "markers",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic.name, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []

    def read_until(value: bytes, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while value not in values and time.monotonic() < deadline:
            values.extend(m.value() for m in consumer.consume(10, timeout=0.5) if m.error() is None)
        return time.monotonic()

    transaction(b"warm")
    read_until(b"warm", 20)   # its markers written: the transaction is complete
    rule = path.hold(["WriteTxnMarkers"], broker=leader.node_id, hold_s=HOLD_S, clients=brokers, connections="all")
    held_at = time.monotonic()
    committed_at = transaction(b"late")   # EndTxn is answered once the coordinator prepared the commit
    assert committed_at - held_at < HOLD_S / 2
    visible_at = read_until(b"late", HOLD_S + 15)
    consumer.close()
    assert values == [b"warm", b"late"] and visible_at - held_at >= HOLD_S - 0.5, "visible only once the marker came"
    assert transaction(b"next") - visible_at < 10   # the next transaction completes
    path.release(rule)
    path.release(fetches)

    records = path.held()
    (fetch,) = [h for h in records if h.rule == fetches]
    assert (fetch.api, fetch.listener, fetch.node) == ("Fetch", "inter-broker", leader.node_id)
    assert fetch.client is not None and fetch.client.startswith("broker-") and "-fetcher-" in fetch.client
    matched = [h for h in records if h.rule == rule and h.cause == "matched"]
    assert matched, "the coordinator's WriteTxnMarkers passed the request path"
    first = matched[0]
    assert (first.api, first.listener, first.node, first.action) == ("WriteTxnMarkers", "inter-broker",
                                                                      leader.node_id, "delayed")
    assert first.client is not None and first.client.endswith("-txn-marker-sender")
    assert first.detail["markers"][0]["committed"] is True
    assert [f"{topic.name}-0"] in [m["partitions"] for m in first.detail["markers"]]
    assert first.released_ns is not None and (first.released_ns - first.held_ns) / 1e9 >= HOLD_S
    assert first.outcome == "answered" and first.response_error == "none" and first.response_forwarded
