"""Application consumers in a group, and the final read-back of every partition.

A live consumer "processes" a record by recording it as a ``live`` read, then
commits automatically (the client's timer) or manually after processing, as
the scenario says. The final read-back assigns every partition with no group,
reads from the beginning to the high watermark and records ``final`` reads
plus one ``final-read`` event per partition saying whether it got there.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from workloads.history import RDKAFKA_LOG, History, HistoryWriter, RunClock
from workloads.messages import decode
from workloads.worker import Worker

CommitMode = Literal["auto", "manual"]
BATCH = 500


def read_record(msg: Message, consumer: str, group: str | None, phase: str, clock: RunClock) -> dict[str, Any]:
    producer, seq = decode(msg.value())
    return {"consumer": consumer, "group": group, "phase": phase, "topic": msg.topic(),
            "partition": msg.partition(), "offset": msg.offset(), "producer": producer, "seq": seq,
            "time_ns": clock.now_ns()}


@dataclass
class ConsumerWorker(Worker):
    """One consumer thread of the application's group."""

    name: str
    bootstrap_servers: str
    topic: str
    group: str
    commit: CommitMode
    config: dict[str, Any]
    reads: HistoryWriter
    clock: RunClock
    count: int = 0

    def work(self) -> None:
        consumer = Consumer({"auto.offset.reset": "earliest", **self.config,
                             "bootstrap.servers": self.bootstrap_servers, "group.id": self.group,
                             "client.id": f"kchaos-{self.name}", "enable.auto.commit": self.commit == "auto"},
                            logger=RDKAFKA_LOG)
        consumer.subscribe([self.topic])
        try:
            while not self.stopping:
                batch = [m for m in consumer.consume(BATCH, timeout=0.5) if m.error() is None]
                for msg in batch:
                    self.reads.write(read_record(msg, self.name, self.group, "live", self.clock))
                self.count += len(batch)
                if batch and self.commit == "manual":
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException:
                        pass  # a rebalance or a broker fault: the records will be redelivered
        finally:
            consumer.close()


def read_back(bootstrap_servers: str, topic: str, partitions: int, history: History,
              timeout_s: float = 120) -> bool:
    """Read every partition from the beginning to its high watermark; True when all got there."""
    clock = history.clock
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"kchaos-final-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "isolation.level": "read_uncommitted", "client.id": "kchaos-final-read"},
                        logger=RDKAFKA_LOG)
    try:
        high: dict[int, int] = {}
        for p in range(partitions):
            _, high[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        position = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(position[p] < high[p] for p in position) and time.monotonic() < deadline:
            for msg in consumer.consume(BATCH, timeout=0.5):
                if msg.error() is not None:
                    continue
                if msg.offset() < high[msg.partition()]:
                    history.reads.write(read_record(msg, "final-reader", None, "final", clock))
                position[msg.partition()] = max(position[msg.partition()], msg.offset() + 1)
        for p in range(partitions):
            history.event("final-read", topic=topic, partition=p, high_watermark=high[p],
                          complete=position[p] >= high[p], time_ns=clock.now_ns())
        return all(position[p] >= high[p] for p in position)
    finally:
        consumer.close()
