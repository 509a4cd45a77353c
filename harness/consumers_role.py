"""The consumer group (``workload.consumers``) as one part: its typed settings, and its processes, which read the
topic live until every role drained; its committed offsets are recorded at the end. The processes and their lines
are workloads/consumer.py's; whether the group protocol it names can work is harness/group_protocol.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from harness.group_protocol import GroupProtocol
from harness.role_settings import (GROUP_PROTOCOL, JAVA_CONFIG, LIBRARY_CONFIG, ROLE_CLIENT, ROLE_CLIENT_VERSION,
                                   Client, Release, Scalar, Strict, Workload)
from harness.roles import RoleRun, TrialSetting, watch_assignments
from workloads.consumer import ConsumerClient
from workloads.observer import record_committed
from workloads.workload import stop_all

if TYPE_CHECKING:
    from clusters.cluster import Cluster
    from workloads.history import History

KEY = "consumers"
ISOLATION = "isolation.level"


class ConsumersModel(Strict):
    """Application consumers in one group, reading the topic live while the faults hit."""

    count: int = Field(1, ge=0, le=64, description="consumer processes (0: none)")
    group: str = Field("kchaos-app", description="their group.id")
    commit: Literal["auto", "manual"] = Field("auto", description="auto: the client's timer commits what was "
                                              "polled; manual: a synchronous commit after processing")
    processing_ms: float = Field(0, ge=0, le=600_000, description="time the application spends on each polled "
                                 "batch before its records count as processed")
    isolation: Literal["read_committed", "read_uncommitted"] | None = Field(
        None, description="isolation.level; null: read_committed when transactions or a pipeline run, else the "
        "client's default")
    client: Client | None = ROLE_CLIENT
    client_version: Release | None = ROLE_CLIENT_VERSION
    group_protocol: GroupProtocol | None = GROUP_PROTOCOL
    config: dict[str, Scalar] = Field({}, description="consumer settings both clients read (session.timeout.ms, "
                                      "auto.commit.interval.ms, ...); group.id and enable.auto.commit are the "
                                      "harness's")
    librdkafka_config: dict[str, Scalar] = LIBRARY_CONFIG
    java_config: dict[str, Scalar] = JAVA_CONFIG


def isolation(w: Workload) -> str | None:
    """The consumers' isolation.level (None: the client's own default): read_committed where transactions run."""
    if w.consumers.isolation is not None:
        return w.consumers.isolation
    return "read_committed" if w.transactional else None


def check(w: Workload) -> None:
    if ISOLATION in w.role(KEY).config and w.consumers.isolation is not None:
        raise ValueError(f"workload.consumers: set isolation or config.{ISOLATION}, not both")


class ConsumersRun(RoleRun):
    """The consumer group: it reads until every role drained, and its committed offsets are recorded at the end."""

    def __init__(self, consumers: list[ConsumerClient], group: str, topic: str, partitions: int,
                 history: "History") -> None:
        self.consumers = consumers
        self.clients = list(consumers)
        self.group, self.topic, self.partitions, self.history = group, topic, partitions, history
        for consumer in consumers:
            watch_assignments(consumer, history)

    @classmethod
    def build(cls, trial: TrialSetting) -> "ConsumersRun | None":
        history = trial.history
        w, role = trial.workload, trial.workload.role(KEY)
        if not role.runs:
            return None
        settings = w.consumers
        return cls([ConsumerClient(f"c{i}", trial.bootstrap, trial.topic, settings.group, settings.commit,
                                   role.config, history.reads, history.clock, settings.processing_ms,
                                   isolation=isolation(w), client=role.client,
                                   kafka_version=trial.brokers.kafka_version, client_version=role.release)
                    for i in range(settings.count)], settings.group, trial.topic, trial.partitions, history)

    def stop(self) -> None:
        stop_all(self.consumers)

    def finish(self, cluster: "Cluster") -> None:
        record_committed(cluster, self.group, self.topic, self.partitions, self.history)

    def counts(self) -> dict[str, int]:
        return {"reads": sum(c.count for c in self.consumers)}
