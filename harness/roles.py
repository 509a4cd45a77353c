"""What the trial asks of a role: each role of the workload is one part that owns its typed settings, its
refusals, its processes and what it does at each step of the trial: set up before they start, say it started, stop
the load, finish once the producers have stopped and the cluster settled, stop, and record what the brokers say of
it. The trial builds the parts and loops over them, knowing none by name (harness/run.py). The parts are
harness/consumers_role.py, pipeline_role.py, share_role.py and producers_role.py, in the trial's order: consumers
first (in the group when the first message lands), then the pipeline, the other consumer-like roles, and the
producers last.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workloads.client import ClientProcess
from workloads.consumer import record_assignment

from harness.role_settings import BrokerFacts, Workload

if TYPE_CHECKING:
    from clusters.cluster import Cluster
    from workloads.history import History

Ends = Callable[[], dict[int, int]]   # each partition of the workload's topic and its high watermark, asked once


@dataclass(frozen=True)
class TrialSetting:
    """What a part is built from: the scenario's workload, topic, seed and brokers, where its clients connect, the
    history they write, and the run's prefix of transactional.ids (its own, so one never meets another run's)."""

    workload: Workload
    topic: str
    partitions: int
    output_topic: str     # the pipeline's
    seed: int
    brokers: BrokerFacts
    bootstrap: str
    history: "History"
    transactional_prefix: str


class RoleRun:
    """One role of one trial. Every step but ``clients`` does nothing unless the role needs it."""

    clients: list[ClientProcess]
    finishing: str | None = None   # the progress line's phase while ``drain`` runs (None: it has nothing to drain)

    @classmethod
    def build(cls, trial: TrialSetting) -> "RoleRun | None":
        """The role's part of this trial, None when the scenario runs no process of it."""
        raise NotImplementedError

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


def watch_assignments(consumer: Any, history: "History") -> None:
    """Each rebalance of a consumer process becomes an ``assignment`` event."""
    consumer.on_assignment = lambda name, change, c=consumer: record_assignment(history, name, c.group, c.topic,
                                                                                change)
