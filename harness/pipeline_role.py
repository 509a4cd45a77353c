"""The exactly-once pipeline (``workload.pipeline``) as one part: its typed settings, what its transactional
producer may not be given, its output topic, and its processes, which after the load process what their input
holds and stop (the last transaction commits); its committed offsets are recorded at the end. The processes and
their lines are workloads/pipeline.py's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import Field

from harness.group_protocol import GroupProtocol
from harness.producers_role import KEY as PRODUCERS, check_timeouts
from harness.role_settings import (GROUP_PROTOCOL, JAVA_CONFIG, LIBRARY_CONFIG, ROLE_CLIENT, ROLE_CLIENT_VERSION,
                                   Client, Release, RoleView, Scalar, Strict, Workload)
from harness.roles import Ends, RoleRun, TrialSetting, watch_assignments
from workloads.observer import record_committed
from workloads.pipeline import PipelineClient
from workloads.txn_policy import DEFAULT_ON_COMMIT_ERROR, ON_COMMIT_ERROR_DESCRIPTION, OnCommitError
from workloads.workload import stop_all

if TYPE_CHECKING:
    from clusters.cluster import Cluster
    from workloads.history import History

log = logging.getLogger(__name__)

KEY = "pipeline"
DEFAULT_TIMEOUT_MS, DEFAULT_COMMIT_TIMEOUT_S = 60_000, 10   # without workload.transactions to take them from


class PipelineModel(Strict):
    """An exactly-once consume-transform-produce application reading the workload's topic."""

    count: int = Field(1, ge=1, le=16, description="pipeline processes, in one consumer group")
    batch: int = Field(100, ge=1, le=100_000, description="input records per transaction at most")
    output_topic: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,200}$",
                                     description="null: the workload topic's name plus .out")
    group: str = Field("kchaos-pipeline", description="the pipeline's consumer group")
    processing_ms: float = Field(0, ge=0, le=600_000, description="time each transaction stays open with its "
                                 "outputs written before it commits (where a crash lands)")
    client: Client | None = ROLE_CLIENT
    client_version: Release | None = ROLE_CLIENT_VERSION
    group_protocol: GroupProtocol | None = GROUP_PROTOCOL
    config: dict[str, Scalar] = Field({}, description="settings of the pipeline's input consumer, e.g. "
                                      "session.timeout.ms: how soon a crashed instance's partitions move")
    librdkafka_config: dict[str, Scalar] = LIBRARY_CONFIG
    java_config: dict[str, Scalar] = JAVA_CONFIG
    timeout_ms: int | None = Field(None, ge=1000, le=900_000, description="transaction.timeout.ms of the "
                                   "pipeline's producer; null: workload.transactions.timeout_ms, else 60000")
    commit_timeout_s: float | None = Field(None, gt=0, le=600, description="as workload.transactions' for the "
                                           "pipeline's commits; null: workload.transactions.commit_timeout_s, else 10")
    on_commit_error: OnCommitError = Field(DEFAULT_ON_COMMIT_ERROR, description=ON_COMMIT_ERROR_DESCRIPTION)


def timeout_ms(w: Workload) -> int:
    """transaction.timeout.ms of the pipeline's producer."""
    if w.pipeline is not None and w.pipeline.timeout_ms is not None:
        return w.pipeline.timeout_ms
    return w.transactions.timeout_ms if w.transactions is not None else DEFAULT_TIMEOUT_MS


def commit_timeout_s(w: Workload) -> float:
    if w.pipeline is not None and w.pipeline.commit_timeout_s is not None:
        return w.pipeline.commit_timeout_s
    return w.transactions.commit_timeout_s if w.transactions is not None else DEFAULT_COMMIT_TIMEOUT_S


def producer_view(w: Workload) -> RoleView:
    """The pipeline's output producer: the producers' settings, on the pipeline's client and release."""
    pipeline = w.role(KEY)
    return RoleView(PRODUCERS, w.producers, pipeline.client, pipeline.release, pipeline.runs)


def output_topic(w: Workload, topic: str) -> str:
    """Its own output_topic, else the workload topic's name plus .out."""
    return w.pipeline.output_topic if w.pipeline is not None and w.pipeline.output_topic else f"{topic}.out"


def check(w: Workload, topic: str, broker_config: dict[str, Scalar]) -> None:
    """Its producer's time-outs the brokers or librdkafka would refuse, and an output topic that is its input."""
    if w.pipeline is None:
        return
    config, its_timeout_ms = producer_view(w).config, timeout_ms(w)
    if "transaction.timeout.ms" in config and w.transactions is None:
        raise ValueError("workload.producers.config.transaction.timeout.ms: the harness sets the pipeline's "
                         "itself: set workload.pipeline.timeout_ms")
    check_timeouts("workload.producers", config, w.role(KEY).client, its_timeout_ms, "workload.pipeline.timeout_ms",
                   broker_config,
                   f"the pipeline's transaction.timeout.ms={its_timeout_ms} (workload.pipeline.timeout_ms)")
    if output_topic(w, topic) == topic:
        raise ValueError("workload.pipeline.output_topic must differ from topic.name (its input)")


class PipelineRun(RoleRun):
    """The pipeline: after the load it processes what its input holds, then stops."""

    finishing = "pipeline catching up"

    def __init__(self, pipelines: list[PipelineClient], topic: str, partitions: int, history: "History") -> None:
        self.pipelines = pipelines
        self.clients = list(pipelines)
        self.topic, self.partitions, self.history = topic, partitions, history
        for pipeline in pipelines:
            watch_assignments(pipeline.input, history)

    @classmethod
    def build(cls, trial: TrialSetting) -> "PipelineRun | None":
        history = trial.history
        w, settings = trial.workload, trial.workload.pipeline
        if settings is None:
            return None
        role = w.role(KEY)
        return cls([PipelineClient(f"pipe{i}", trial.bootstrap, trial.topic, trial.output_topic, settings.group,
                                   f"{trial.transactional_prefix}-pipe{i}", history, batch=settings.batch,
                                   transaction_timeout_ms=timeout_ms(w), commit_timeout_s=commit_timeout_s(w),
                                   on_commit_error=settings.on_commit_error, processing_ms=settings.processing_ms,
                                   producer_config=producer_view(w).config, consumer_config=role.config,
                                   client=role.client, kafka_version=trial.brokers.kafka_version,
                                   client_version=role.release)
                    for i in range(settings.count)], trial.topic, trial.partitions, history)

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

