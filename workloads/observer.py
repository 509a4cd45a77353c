"""What the cluster looked like during the run: leaders and ISRs, last stable offsets, committed offsets."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from clusters.cluster import Cluster, admin_result
from clusters.errors import ClusterError
from workloads.consumer import ask_ends, collect_ends
from workloads.history import RDKAFKA_LOG, History
from workloads.worker import Worker

log = logging.getLogger(__name__)


@dataclass
class LeaderObserver(Worker):
    """Writes each partition's leader and ISR to events.jsonl once a second."""

    cluster: Cluster
    topic: str
    history: History
    interval_s: float = 1.0
    name: str = "leaders"

    def observe(self) -> None:
        try:
            states = self.cluster.partitions(self.topic, timeout=self.interval_s * 3)
        except ClusterError as e:  # ZooKeeper unreachable for a moment: the next second will tell
            log.debug("leader observation failed: %s", e)
            return
        now = self.history.clock.now_ns()
        for s in states:
            self.history.event("leader", topic=s.topic, partition=s.partition, leader=s.leader,
                               isr=list(s.isr), time_ns=now)

    def work(self) -> None:
        while not self.stopping:
            self.observe()
            self._stop.wait(self.interval_s)


@dataclass
class RequestWatch:
    """Notes every request of ``apis`` on the clients' listener and the broker's answer to it (the scenario's
    cluster.watch_requests): ``request`` events with action ``watched``, written when it stops. Nothing is held:
    it is how a run shows what a share member acknowledged and what each partition's leader said of it."""

    cluster: Cluster
    apis: list[str]
    history: History
    answer_wait_s: float = 5.0
    _rule: str | None = field(default=None, init=False)

    def start(self) -> None:
        path = self.cluster.request_path
        assert path is not None, "cluster.watch_requests starts the request path"
        self._rule = path.hold(self.apis, hold_s=0.0, connections="all", fault="watch", action="watch")

    def stop(self) -> None:
        """Stop watching; once the answers still due came (at most answer_wait_s), write what it saw."""
        path = self.cluster.request_path
        if path is None or self._rule is None:
            return
        try:
            path.release(self._rule)
            seen = path.settled([self._rule], self.answer_wait_s)
        except ClusterError as e:   # the proxy died: the run's other evidence stands
            log.warning("the request watch could not be read: %s", e)
            return
        finally:
            self._rule = None
        for h in seen:
            self.history.event("request", **h.event(self.history.clock.origin_ns))
        log.info("watched %d requests (%s)", len(seen), ", ".join(self.apis))


@dataclass
class StableObserver(Worker):
    """Writes each partition's high watermark and last stable offset to events.jsonl once a second.

    A last stable offset stuck below the high watermark is an open
    transaction nobody ends: read_committed readers cannot pass it
    (``hanging_transaction``). The LSO is asked before the high watermark
    (one connection per leader answers in order), so a sample never shows it
    above. A partition whose leader is frozen is left out of the samples
    until it answers again.
    """

    cluster: Cluster
    topics: dict[str, int]     # topic -> partitions
    history: History
    interval_s: float = 1.0
    name: str = "stable"
    _admin: AdminClient | None = field(default=None, init=False, repr=False)

    def admin(self) -> AdminClient:
        """Its own client: after an error it takes a new one (see collect_ends), not the cluster's."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap_servers,
                                       "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 2000},
                                      logger=RDKAFKA_LOG)
        return self._admin

    def observe(self) -> None:
        timeout_s = self.interval_s * 3
        errors: list[str] = []
        for topic, partitions in self.topics.items():
            try:
                asked = [ask_ends(self.admin(), topic, partitions, isolation, timeout_s)
                         for isolation in ("read_committed", "read_uncommitted")]
            except KafkaException as e:
                errors.append(e.args[0].name())
                continue
            deadline = time.monotonic() + timeout_s
            stable, high = (collect_ends(requests, deadline, errors) for requests in asked)
            now = self.history.clock.now_ns()
            for p in sorted(stable.keys() & high.keys()):
                self.history.event("stable", topic=topic, partition=p, high_watermark=high[p],
                                   last_stable_offset=stable[p], time_ns=now)
        if errors:
            log.debug("stable offsets not observed (%s): asking through a new admin client", ", ".join(errors))
            self._admin = None

    def work(self) -> None:
        while not self.stopping:
            self.observe()
            self._stop.wait(self.interval_s)


def record_committed(cluster: Cluster, group: str, topic: str, partitions: int, history: History) -> None:
    """One ``committed`` event per partition: the group's committed offset at the end (null: none)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin_result(cluster.admin().list_consumer_group_offsets([request], request_timeout=30)[group], 30,
                          f"read the committed offsets of group {group!r}")
    for tp in result.topic_partitions:
        history.event("committed", group=group, topic=tp.topic, partition=tp.partition,
                      offset=tp.offset if tp.offset >= 0 else None, time_ns=history.clock.now_ns())
