"""One trial, start to end: cluster -> workload + faults -> history -> check.

The run directory (runs/<scenario>/<UTC timestamp>/) is written as the run
goes, so a harness killed at any point leaves a history ``kchaos check`` can
read; teardown of the cluster runs on every exit the process survives. The
producers and consumers are processes of their own: the trial kills them on
every exit path, and they exit by themselves when the harness dies (their
stdin closes).
"""

from __future__ import annotations

import functools
import logging
import os
from collections import Counter
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import confluent_kafka
from tenacity import RetryError, retry, stop_after_delay, wait_fixed

from catalogue.exits import HarnessError
from clusters.cleanup import remove_orphans
from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.java_build import JavaBuildError, ensure_built
from clusters.kafka_transactions import ask_cluster
from clusters.proxy.wire import api_list
from clusters.segments import read_batches
from clusters.topics import create_topic
from faults.schedule import Nemesis
from forensics.command import write_run_broker_events
from harness.progress import RunProgress
from harness.consumers_role import ConsumersRun
from harness.pipeline_role import PipelineRun
from harness.producers_role import ProducersRun
from harness.roles import RoleRun, TrialSetting
from harness.scenario import Scenario
from harness.share_role import ShareRun
from rundir import documents
from rundir.layout import RunDir
from rundir.phases import PhaseTimer
from rundir.replica_batches import write_replica_batches
from workloads.child import confluent_kafka_release
from workloads.client import WorkloadError
from workloads.confluent_release import ClientReleaseError, ensure_env
from workloads.consumer import high_watermarks, read_back, read_back_both, record_identity
from workloads.history import History, RunClock
from workloads.observer import LeaderObserver, RequestWatch, StableObserver
from workloads.workload import Workload

log = logging.getLogger(__name__)

HEALTHY_TIMEOUT_S = 90
# the parts of a trial, in its order: the consumer-like roles before the producers, so every one of them is in its
# group when the first message lands
PARTS = (ConsumersRun.build, PipelineRun.build, ShareRun.build, ProducersRun.build)


@dataclass
class RunOutcome:
    run_dir: Path
    harness_error: str | None   # set when the run could not do its job (exit 2)


def write_scenario(run: RunDir, scenario: Scenario, clock: RunClock) -> None:
    """The resolved scenario, with the wall-clock start every time in the history counts from."""
    resolved: dict[str, Any] = scenario.resolved()
    resolved["started_at"] = datetime.fromtimestamp(clock.wall_start, timezone.utc).isoformat()
    documents.write_scenario(run, resolved)


def run_scenario(scenario: Scenario, out_root: Path, timer: PhaseTimer | None = None,
                 on_settled: Callable[[Path], None] | None = None) -> RunOutcome:
    """Run the trial and leave a complete run directory (results are checked by the caller); ``timer`` gets
    each phase's wall seconds; ``on_settled(history_dir)`` is called once the healed cluster is in sync again,
    while the run settles (the check's session starts there: spark_analysis/warm.py)."""
    prepare_client_releases(scenario)
    run = RunDir.create(out_root, scenario.name)
    clock = RunClock()
    write_scenario(run, scenario, clock)
    history = History(run, clock, transactions=scenario.workload.transactional,
                      shares=scenario.workload.share_consumers is not None)
    remove_orphans()
    with RunProgress(scenario.workload.duration_s, timer) as progress:
        progress.phase("starting the cluster")
        cluster = Cluster.start(scenario.cluster_spec(), run.cluster, owner_pid=os.getpid())
        finished = False  # the trial ran to its end (a stopped or failed one goes straight to teardown)
        try:
            create_topic(cluster, scenario.topic_spec())
            if scenario.workload.pipeline is not None:
                create_topic(cluster, scenario.pipeline_topic_spec())
            error = Trial(scenario, cluster, history, progress, transactional_prefix=f"kchaos-{run.path.name}",
                          on_settled=None if on_settled is None else lambda: on_settled(run.history)).run()
            finished = True
        finally:
            history.close()
            if finished and scenario.workload.transactional:
                progress.phase("asking Kafka about its transactions")
                ask_kafka_transactions(run, cluster)
            progress.phase("reading the replicas' disks")
            read_replica_disks(run, cluster, scenario.topics())
            progress.phase("tearing down")
            cluster.teardown(logs_to=run.logs)
            progress.phase("parsing the node logs")
            parse_node_logs(run)
    return RunOutcome(run.path, error)


def prepare_client_releases(scenario: Scenario) -> None:
    """The environment of each confluent-kafka release the scenario pins (workload.client_version) and the Java
    program of each kafka-clients release a Java role runs, built before the run directory and the cluster: a
    release pip or Maven cannot install is one line (exit 2) that started and recorded nothing."""
    for version in scenario.workload.pinned_releases:
        try:
            ensure_env(version)
        except ClientReleaseError as e:
            raise HarnessError(str(e)) from None
    for version in scenario.java_client_releases:
        try:
            ensure_built(version)
        except JavaBuildError as e:
            raise HarnessError(str(e)) from None


def read_replica_disks(run: RunDir, cluster: Cluster, topics: list[str]) -> None:
    """history/replica-batches.jsonl from every broker's disk, the last moment it exists. Not having it is a
    warning, never the run's failure: the verdict does not need it, only the forensics' chains do."""
    try:
        write_replica_batches(run, read_batches(cluster.brokers, topics, cluster.spec.kafka_version))
    except (ClusterError, OSError) as e:
        log.warning("the replicas' disks were not read (%s): the chains will not say which replica holds what", e)


def ask_kafka_transactions(run: RunDir, cluster: Cluster) -> None:
    """history/kafka-transactions.json: Kafka's own kafka-transactions.sh (find-hanging on every broker, list), the
    second opinion beside the checker's hanging_transaction. Never the run's failure: what could not be asked
    says why in the file, and a file that could not be written is a warning."""
    try:
        documents.write_kafka_transactions(run, ask_cluster(cluster.brokers, cluster.spec.kafka_version))
    except Exception as e:  # noqa: BLE001 - a second opinion never fails the run
        log.warning("Kafka's view of the transactions was not recorded (%s: %s)", type(e).__name__, e)


def parse_node_logs(run: RunDir) -> None:
    """history/broker-events.jsonl from the logs just copied out. Not having it is a warning, never the run's
    failure: the history the verdict needs is complete without it, and `kchaos forensics RUN` can try again."""
    try:
        write_run_broker_events(run)
    except (OSError, ValueError) as e:  # HistoryError is a ValueError
        log.warning("broker events not written (%s); `kchaos forensics %s` tries again", e, run.path)


class Trial:
    """The workload processes, the observer and the nemesis around one cluster."""

    def __init__(self, scenario: Scenario, cluster: Cluster, history: History, progress: RunProgress,
                 transactional_prefix: str = "kchaos", on_settled: Callable[[], None] | None = None) -> None:
        """``transactional_prefix``: the run's own, so a transactional.id never meets one of another run;
        ``on_settled``: called once the cluster is in sync again after the faults."""
        self.scenario = scenario
        self.on_settled = on_settled
        self.cluster = cluster
        self.history = history
        self.progress = progress
        topic = scenario.topic.name
        trial = TrialSetting(scenario.workload, topic, scenario.topic.partitions, scenario.pipeline_output_topic,
                             scenario.seed, scenario.share_brokers(),
                             cluster.client_bootstrap_servers,  # through the request path when it has one
                             history, transactional_prefix)
        self.parts: list[RoleRun] = [part for build in PARTS if (part := build(trial)) is not None]
        self.workload = Workload([c for part in self.parts for c in part.clients])
        for client in self.workload.clients:
            client.on_identity = lambda name, identity, role=client.role: record_identity(history, name, role,
                                                                                          identity)
        self.observer = LeaderObserver(cluster, topic, history)
        self.topics = {topic: scenario.topic.partitions}
        if scenario.workload.pipeline is not None:
            self.topics[scenario.pipeline_output_topic] = scenario.topic.partitions
        self.stable = StableObserver(cluster, self.topics, history) if scenario.workload.transactional else None
        watched = scenario.cluster.watch_requests
        self.watch = RequestWatch(cluster, api_list(watched), history) if watched else None

    def run(self) -> str | None:
        """Returns a harness error (a fault that failed, a workload process that died), or None."""
        try:
            return self._run()
        finally:
            self.workload.abort()  # every exit path (SIGTERM, Ctrl-C, errors): no process outlives the trial

    def _run(self) -> str | None:
        s = self.scenario
        self.progress.phase("starting clients")
        library, binding = confluent_kafka.libversion()[0], confluent_kafka_release()
        self.history.event("client", client="librdkafka", version=library, binding=f"confluent-kafka {binding}",
                           role="harness", time_ns=self.history.clock.now_ns())  # its admin requests
        if self.watch is not None:
            self.watch.start()
        try:
            for part in self.parts:
                part.prepare(self.cluster)
            self.workload.start()
        except WorkloadError as e:
            raise HarnessError(f"the workload could not start: {e}") from None
        load_start = self.history.clock.seconds()
        load_end = load_start + s.workload.duration_s
        nemesis = Nemesis(self.cluster, s.topic.name, s.fault_plans(), self.history, s.seed,
                          warmup_s=load_start + s.schedule.warmup_s, load_s=load_end,
                          clients=self.workload.clients)
        for part in self.parts:
            part.started()
        self.observer.start()
        if self.stable is not None:
            self.stable.start()
        nemesis.start()
        try:
            self.progress.phase("load")
            while self.history.clock.seconds() < load_end and nemesis.error is None:
                self._show(nemesis.current, self.history.clock.seconds() - load_start)
                time.sleep(0.5)
        finally:
            self.progress.phase("healing")
            nemesis.stop()
        for part in self.parts:
            part.stop_load()
        self.progress.phase("settling")
        self._settle(s.schedule.settle_s)
        ends = functools.cache(self.cluster_ends)   # asked once, by the first part that needs them
        for part in self.parts:
            if part.finishing is not None:
                self.progress.phase(part.finishing)
                part.drain(ends, s.schedule.final_read_timeout_s)
        for part in self.parts:
            part.stop()
        if self.watch is not None:
            self.watch.stop()
        self.observer.stop()
        self.observer.join()
        for part in self.parts:
            part.finish(self.cluster)
        self.progress.phase("final read")
        read = read_back_both if s.workload.transactional else read_back
        try:
            for topic, partitions in self.topics.items():
                read(self.cluster.bootstrap_servers, topic, partitions, self.history, s.schedule.final_read_timeout_s,
                     client=s.workload.client, kafka_version=s.cluster.kafka_version)
        except WorkloadError as e:  # the Java reader died: what it read stays, the run is not judged
            raise HarnessError(str(e)) from None
        finally:
            if self.stable is not None:
                self.stable.stop()
                self.stable.join()
        self._show("none", s.workload.duration_s)
        errors = ([str(nemesis.error)] if nemesis.error else []) + self.workload.failures
        return "; ".join(errors) if errors else None

    def cluster_ends(self) -> dict[int, int]:
        """Each partition of the workload's topic and its high watermark now (what the parts finish)."""
        try:
            return high_watermarks(self.cluster.bootstrap_servers, self.scenario.topic.name,
                                   self.scenario.topic.partitions)
        except confluent_kafka.KafkaException as e:
            raise HarnessError(f"the topic's ends could not be read: {e.args[0].str()}") from None

    def _show(self, fault: str, elapsed_s: float) -> None:
        counts: Counter[str] = Counter(acked=0, failed=0, unknown=0, reads=0)
        for part in self.parts:
            counts.update(part.counts())
        self.progress.update(elapsed_s, fault=fault, **counts)

    def _settle(self, settle_s: float) -> None:
        """Wait for every node to serve and every partition to have a leader and a full ISR."""
        started = time.monotonic()
        try:
            self.cluster.wait_ready(timeout=HEALTHY_TIMEOUT_S)
        except ClusterError as e:
            raise HarnessError(f"the cluster did not recover after the faults were healed: {e}") from None
        rf = self.scenario.topic.replication_factor

        @retry(stop=stop_after_delay(HEALTHY_TIMEOUT_S), wait=wait_fixed(1))
        def in_sync() -> None:
            states = self.cluster.partitions(self.scenario.topic.name)
            assert all(p.leader is not None and len(p.isr) == rf for p in states)

        try:
            in_sync()
        except RetryError:
            log.warning("some partitions still have no leader or a short ISR; reading back anyway")
        self.observer.observe()
        if self.on_settled is not None:
            self.on_settled()
        while time.monotonic() - started < settle_s:
            self._show("none", self.scenario.workload.duration_s)
            time.sleep(0.5)
