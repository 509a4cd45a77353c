"""The producer and consumer processes of one trial, started, counted and stopped together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workloads.client import ClientProcess
from workloads.consumer import ConsumerClient
from workloads.pipeline import PipelineClient
from workloads.producer import ProducerClient


@dataclass
class Workload:
    producers: list[ProducerClient]
    consumers: list[ConsumerClient]
    pipelines: list[PipelineClient] = field(default_factory=list)
    others: list[ClientProcess] = field(default_factory=list)  # the processes of the roles that are parts

    @property
    def clients(self) -> list[ClientProcess]:
        return [*self.consumers, *self.pipelines, *self.others, *self.producers]

    def start(self) -> None:
        """Start every process (consumers first: they are in the group when the first message lands)."""
        for client in self.clients:
            client.start()
        for client in self.clients:
            client.wait_started()

    def stop_producers(self) -> None:
        """Stop producing: each flushes, what is still in flight becomes ``unknown``."""
        stop_all(self.producers)

    def stop_consumers(self) -> None:
        stop_all(self.consumers)

    def drain_pipelines(self, partitions: int, timeout_s: float) -> bool:
        """Let every pipeline process what its input (of ``partitions``) holds, then stop it (its last
        transaction commits)."""
        caught_up = all([p.wait_caught_up(partitions, timeout_s) for p in self.pipelines])
        stop_all(self.pipelines)
        return caught_up

    def abort(self) -> None:
        """Kill every process for good; safe on any exit path and after a normal stop."""
        for client in self.clients:
            client.abort()

    @property
    def failures(self) -> list[str]:
        """Workload processes that died without being killed by a fault."""
        return [f for client in self.clients for f in client.failures]

    def counts(self) -> dict[str, int]:
        """What the harness has recorded so far (the progress line)."""
        sent = [p.counts for p in self.producers]
        return {"acked": sum(c.ok for c in sent), "failed": sum(c.fail for c in sent),
                "unknown": sum(c.unknown for c in sent), "reads": sum(c.count for c in self.consumers)}


def stop_all(clients: Sequence[ClientProcess]) -> None:
    """Ask every process to stop before waiting for any: they flush or finish their batch side by side."""
    for client in clients:
        client.ask_to_stop()
    for client in clients:
        client.stop()
