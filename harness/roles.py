"""What the trial asks of a role: each role of the workload is one part that owns its processes and what it does
at each step of the trial: set up before they start, say it started, stop the load, finish once the producers have
stopped and the cluster settled, stop, and record what the brokers say of it. The trial loops over the parts and
knows none of them by name (harness/run.py); the share group's part is harness/share_role.py's ShareRun.

The parts' order is the trial's: consumers first (in the group when the first message lands), then the pipeline,
the other consumer-like roles, and the producers last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workloads.client import ClientProcess
from workloads.consumer import ConsumerClient, record_assignment
from workloads.observer import record_committed
from workloads.pipeline import PipelineClient
from workloads.producer import ProducerClient
from workloads.workload import stop_all

if TYPE_CHECKING:
    from clusters.cluster import Cluster
    from workloads.history import History

log = logging.getLogger(__name__)

Ends = Callable[[], dict[int, int]]   # each partition of the workload's topic and its high watermark, asked once


class RoleRun:
    """One role of one trial. Every step but ``clients`` does nothing unless the role needs it."""

    clients: list[ClientProcess]
    finishing: str | None = None   # the progress line's phase while ``drain`` runs (None: it has nothing to drain)

    def prepare(self, cluster: "Cluster") -> None:
        """Before any process of any role starts (WorkloadError: the run cannot go on)."""

    def started(self) -> None:
        """Once every process has started, before the faults."""

    def stop_load(self) -> None:
        """The load's time is over: a role that writes the load stops."""

    def drain(self, ends: Ends, timeout_s: float) -> bool:
        """Once the producers stopped and the cluster settled: let the processes finish the log, at most
        ``timeout_s``, then stop them; False when they did not."""
        return True

    def stop(self) -> None:
        """After every role drained: the processes still running stop."""

    def finish(self, cluster: "Cluster") -> None:
        """After every process stopped: what the brokers say of the role, as events."""

    def counts(self) -> dict[str, int]:
        """What it has recorded so far (the progress line: acked, failed, unknown, reads)."""
        return {}


class ProducersRun(RoleRun):
    """The producers (``workload.producers``): they write the load and stop when its time is over."""

    def __init__(self, producers: list[ProducerClient]) -> None:
        self.producers = producers
        self.clients = list(producers)

    def stop_load(self) -> None:
        """Each flushes; what is still in flight becomes ``unknown``."""
        stop_all(self.producers)

    def counts(self) -> dict[str, int]:
        sent = [p.counts for p in self.producers]
        return {"acked": sum(c.ok for c in sent), "failed": sum(c.fail for c in sent),
                "unknown": sum(c.unknown for c in sent)}


class ConsumersRun(RoleRun):
    """The consumer group (``workload.consumers``): it reads until every role drained, and its committed offsets
    are recorded at the end."""

    def __init__(self, consumers: list[ConsumerClient], group: str, topic: str, partitions: int,
                 history: "History") -> None:
        self.consumers = consumers
        self.clients = list(consumers)
        self.group, self.topic, self.partitions, self.history = group, topic, partitions, history
        for consumer in consumers:
            watch_assignments(consumer, history)

    def stop(self) -> None:
        stop_all(self.consumers)

    def finish(self, cluster: "Cluster") -> None:
        if self.consumers:
            record_committed(cluster, self.group, self.topic, self.partitions, self.history)

    def counts(self) -> dict[str, int]:
        return {"reads": sum(c.count for c in self.consumers)}


class PipelineRun(RoleRun):
    """The exactly-once pipeline (``workload.pipeline``): after the load it processes what its input holds, then
    stops (its last transaction commits); its committed offsets are recorded at the end."""

    finishing = "pipeline catching up"

    def __init__(self, pipelines: list[PipelineClient], topic: str, partitions: int, history: "History") -> None:
        self.pipelines = pipelines
        self.clients = list(pipelines)
        self.topic, self.partitions, self.history = topic, partitions, history
        for pipeline in pipelines:
            watch_assignments(pipeline.input, history)

    def started(self) -> None:
        for pipeline in self.pipelines[:1]:
            self.history.event("pipeline", group=pipeline.group, input_topic=pipeline.input_topic,
                               output_topic=pipeline.topic, time_ns=self.history.clock.now_ns())

    def drain(self, ends: Ends, timeout_s: float) -> bool:
        caught_up = all([p.wait_caught_up(self.partitions, timeout_s) for p in self.pipelines])
        stop_all(self.pipelines)
        if not caught_up:
            log.warning("the pipeline did not process all its input: the history says how much it left")
        return caught_up

    def finish(self, cluster: "Cluster") -> None:
        for pipeline in self.pipelines[:1]:
            record_committed(cluster, pipeline.group, self.topic, self.partitions, self.history)


def watch_assignments(consumer: Any, history: "History") -> None:
    """Each rebalance of a consumer process becomes an ``assignment`` event."""
    consumer.on_assignment = lambda name, change, c=consumer: record_assignment(history, name, c.group, c.topic,
                                                                                change)
