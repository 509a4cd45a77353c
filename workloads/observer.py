"""What the cluster looked like during the run: leaders and ISRs, committed offsets."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from clusters.cluster import Cluster, admin_result
from clusters.errors import ClusterError
from workloads.history import History
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


def record_committed(cluster: Cluster, group: str, topic: str, partitions: int, history: History) -> None:
    """One ``committed`` event per partition: the group's committed offset at the end (null: none)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin_result(cluster.admin().list_consumer_group_offsets([request], request_timeout=30)[group], 30,
                          f"read the committed offsets of group {group!r}")
    for tp in result.topic_partitions:
        history.event("committed", group=group, topic=tp.topic, partition=tp.partition,
                      offset=tp.offset if tp.offset >= 0 else None, time_ns=history.clock.now_ns())
