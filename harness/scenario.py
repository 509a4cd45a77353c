"""Scenario files: what to run, validated before anything starts.

A scenario names the cluster, the topic, the workload, the faults and their
schedule, a seed and what the verdict is expected to be. Unknown keys, wrong
types and impossible settings are refused with one line naming the key.
``--set a.b.c=value`` overrides any key; inside a ``config`` map the rest of
the path is one Kafka setting (``workload.producers.config.enable.idempotence=true``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from catalogue.exits import HarnessError
from clusters.config_names import config_names
from clusters.errors import ClusterError
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, OLDEST_KAFKA, kafka_release
from clusters.spec import ClusterSpec, TopicSpec
from faults.base import FaultError
from faults.registry import FAULTS
from faults.schedule import SAME, FaultPlan
from faults.targets import CLIENT_TARGETS, TARGETS
from workloads.client import LIBRARIES
from verdicts.expect import EXPECTABLE, EXPECTATION, RELEASE_CONDITION, RENAMED
from harness import consumers_role, pipeline_role, producers_role, share_role
from harness.consumers_role import ConsumersModel
from harness.group_protocol import Brokers, check_role
from harness.pipeline_role import PipelineModel
from harness.producers_role import ProducersModel, TransactionsModel
from harness.role_settings import CLIENT_VERSION, Client, Release, RoleView, Scalar, Strict, group_protocol, own_map
from harness.share_role import ShareConsumersModel, Brokers as ShareBrokers
from harness.kafka_settings import (check_broker_settings, check_consumer_settings, check_java_settings,
                                    check_producer_settings, check_topic_settings)

CONFIG_MAPS = {"config", "broker_config", "librdkafka_config", "java_config", "features"}
ROLES = (producers_role.KEY, consumers_role.KEY, pipeline_role.KEY, share_role.KEY)   # as they are written


class ClusterModel(Strict):
    """The Kafka cluster: its release, how it keeps its metadata, its nodes and their settings."""

    kafka_version: str = Field(DEFAULT_KAFKA_VERSION, description="an Apache Kafka release from 3.5 on whose jars "
                               "Maven Central serves (ZooKeeper mode up to 3.9); its image is built on first use")
    metadata: Literal["zookeeper", "kraft"] = Field("zookeeper", description="how the cluster keeps its metadata: "
                                                    "a ZooKeeper ensemble or dedicated KRaft controllers")
    brokers: int = Field(3, ge=1, le=9, description="the number of brokers (node ids 1..N)")
    zookeepers: int = Field(3, ge=1, le=7, description="ZooKeeper mode only")
    controllers: int = Field(3, ge=1, le=7, description="KRaft mode only: dedicated controllers")
    broker_config: dict[str, Scalar] = Field({}, description="broker settings (server.properties names), checked "
                                             "against the names this Kafka release defines")
    features: dict[str, int] = Field({}, description="KRaft feature levels finalized with kafka-features.sh before "
                                     "any topic exists, e.g. eligible.leader.replicas.version: 0 (Eligible Leader "
                                     "Replicas off; new 4.1+ clusters have them on) or transaction.version: 1 "
                                     "(transactions without KIP-890's version 2); 4.0 and later")
    data_size_mb: int = Field(2048, ge=256, description="the size of each broker's ext4 data file system on its "
                              "own loop device (what disk-full fills and power-loss cuts off)")
    inter_broker_request_path: bool = Field(False, description="the request path between the brokers too (their "
                                            "inter-broker listener goes through the proxy), so request-level faults "
                                            "with roles broker can hold replica Fetch, WriteTxnMarkers and, with "
                                            "ZooKeeper, the controller's requests; KRaft's controller listener "
                                            "stays direct")
    watch_requests: str | None = Field(None, description="Kafka APIs, comma-separated (ShareAcknowledge, "
                                       "ShareFetch, ...): every such request of the workload's clients and the "
                                       "broker's answer to it is a request event (action watched), with what a share "
                                       "request acknowledged and what each partition answered; nothing is held")

    @field_validator("watch_requests")
    @classmethod
    def _watched(cls, apis: str | None) -> str | None:
        if apis is not None:
            from clusters.proxy.wire import api_list  # the wire protocol's tables load only when a scenario names APIs
            api_list(apis)
        return apis


class TopicModel(Strict):
    """The workload's topic, created before the load starts."""

    name: str = Field("kchaos", pattern=r"^[A-Za-z0-9._-]{1,200}$", description="the topic's name")
    partitions: int = Field(6, ge=1, le=1000, description="its number of partitions")
    replication_factor: int = Field(3, ge=1, description="replicas per partition, at most cluster.brokers")
    min_insync_replicas: int = Field(1, ge=1, description="min.insync.replicas: the ISR size below which acks=all "
                                     "writes are refused; at most replication_factor")
    config: dict[str, Scalar] = Field({}, description="other topic settings (e.g. flush.messages), checked against "
                                      "the names this Kafka release defines")


class WorkloadModel(Strict):
    """What runs against the cluster: producers, consumers, and optionally transactions and a pipeline."""

    duration_s: float = Field(60, gt=0, le=86_400, description="how long the load runs, warm-up included")
    client: Client = Field("librdkafka", description="the Kafka client of every role that names none, and of the "
                           "final read-back: librdkafka (confluent-kafka) or java (kafka-clients of "
                           "cluster.kafka_version)")
    client_version: Release | None = CLIENT_VERSION
    producers: ProducersModel = ProducersModel()
    consumers: ConsumersModel = ConsumersModel()
    transactions: TransactionsModel | None = None
    pipeline: PipelineModel | None = None
    share_consumers: ShareConsumersModel | None = Field(None, description="members of a share group (KIP-932); "
                                                        "null: none")

    @property
    def transactional(self) -> bool:
        """Transactions somewhere: the read-back reads committed and uncommitted, and the observer samples LSOs."""
        return self.transactions is not None or self.pipeline is not None

    def role(self, key: str) -> RoleView:
        """A role (``producers``, ``consumers``, ``pipeline``, ``share_consumers``) as it runs: its settings, its
        client (its own, else workload.client) and its pinned release (its own, else workload.client_version when it
        runs workload.client: a version belongs to a client kind, so a librdkafka role among Java ones runs the
        locked release). KeyError: the scenario has no such role."""
        settings = getattr(self, key)
        if settings is None:
            raise KeyError(key)
        client: Client = settings.client or self.client
        own = settings.client_version
        release = own if own is not None else self.client_version if client == self.client else None
        return RoleView(key, settings, client, release, runs=getattr(settings, "count", 1) > 0)

    @property
    def roles(self) -> list[RoleView]:
        """Every role that runs processes, in the order they are written."""
        return [view for view in (self.role(key) for key in ROLES if getattr(self, key) is not None) if view.runs]

    @property
    def pinned_releases(self) -> list[str]:
        """Every confluent-kafka release some role runs other than the locked one, each once, in role order."""
        return list(dict.fromkeys(r.release for r in self.roles if r.client == "librdkafka" and r.release))


def known_fault(kind: str) -> str:
    if kind not in FAULTS:
        raise ValueError(f"unknown fault {kind!r}; one of {', '.join(sorted(FAULTS))}")
    return kind


def known_target(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; one of {', '.join(TARGETS)}")
    return target


class FaultFields(Strict):
    """What an outer and a nested fault both say: what, whom, how long, how."""

    kind: str = Field(description="the fault kind (the fault reference lists them)")
    target: str
    duration_s: float = Field(5, gt=0, description="how long it stays on before it heals")
    options: dict[str, Scalar] = Field({}, description="the kind's options (the fault reference lists them)")

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str) -> str:
        return known_fault(kind)

    def check_fits(self, target: str) -> None:
        """The options are the fault's, and ``target`` is one it can hit (ValueError, as pydantic wants)."""
        try:
            FAULTS[self.kind].check_options(self.options)
            if target != SAME:
                FAULTS[self.kind].check_target(target)
        except FaultError as e:
            raise ValueError(str(e)) from None


class NestedFaultModel(FaultFields):
    """A fault applied ``after_s`` into its outer fault and healed before it; ``same`` hits the outer's victims."""

    target: str = Field(SAME, description="same: the outer fault's victims; or a target of its own")
    after_s: float = Field(0, ge=0, description="how long after the outer fault starts it is applied")

    @field_validator("target")
    @classmethod
    def _target(cls, target: str) -> str:
        return target if target == SAME else known_target(target)

    @model_validator(mode="after")
    def _fits(self) -> "NestedFaultModel":
        self.check_fits(self.target)
        return self


class FaultModel(FaultFields):
    target: str = Field("partition-leader", description="a node target; random-client for client faults")
    interval_s: tuple[float, float] = Field((10.0, 15.0), description="from this fault's start to the next "
                                            "application's start, drawn from [min, max] with the seed (one number: "
                                            "exactly that); never before this one healed")
    then: NestedFaultModel | None = Field(None, description="a fault nested in this one: applied after_s into it "
                                          "and healed before it")

    @model_validator(mode="before")
    @classmethod
    def _client_default(cls, raw: Any) -> Any:
        """A client fault with no target hits any workload client, not a partition leader; a fault with one
        target (a rolling restart: all brokers) hits that one."""
        if isinstance(raw, dict) and "target" not in raw and raw.get("kind") in FAULTS:
            targets = FAULTS[raw["kind"]].targets
            if targets == CLIENT_TARGETS:
                return {**raw, "target": "random-client"}
            if len(targets) == 1:
                return {**raw, "target": targets[0]}
        return raw

    @field_validator("target")
    @classmethod
    def _target(cls, target: str) -> str:
        return known_target(target)

    @field_validator("interval_s", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Any:
        return (value, value) if isinstance(value, (int, float)) else value

    @model_validator(mode="after")
    def _bounds(self) -> "FaultModel":
        lo, hi = self.interval_s
        if not 0 < lo <= hi:
            raise ValueError(f"interval_s must be a positive [min, max], not [{lo}, {hi}]")
        self.check_fits(self.target)
        if self.then is not None and self.then.target == SAME:
            self.then.check_fits(self.target)  # `same` hits this fault's victims: the nested kind must take them
        if self.then is not None and self.then.after_s + self.then.duration_s > self.duration_s:
            raise ValueError(f"then: after_s + duration_s = {self.then.after_s + self.then.duration_s:g} s "
                             f"outlasts the outer fault's duration_s = {self.duration_s:g} s")
        return self

    def plan(self) -> FaultPlan:
        nested = self.then
        then = None if nested is None else FaultPlan(
            nested.kind, nested.target, (nested.duration_s, nested.duration_s), nested.duration_s,
            tuple(sorted(nested.options.items())), after_s=nested.after_s)
        return FaultPlan(self.kind, self.target, self.interval_s, self.duration_s,
                         tuple(sorted(self.options.items())), then=then)


class ScheduleModel(Strict):
    """When the faults may start, and how the run ends."""

    warmup_s: float = Field(10, ge=0, description="load without faults before the first one")
    settle_s: float = Field(10, ge=0, description="after healing, before the final read-back")
    final_read_timeout_s: float = Field(120, gt=0, description="how long the read-back may take to reach every "
                                        "partition's high watermark; a partition it misses is not judged")


class Scenario(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$", description="the run directory's folder: "
                      "runs/<name>/<timestamp>; the loader gives it the file's stem when the file names none",
                      json_schema_extra={"default_from": "the file's stem"})
    description: str = Field("", description="one line on what the file shows, for the report")
    nightly: Union[bool, list[Literal["zookeeper", "kraft"]]] = Field(
        False, description="true: the nightly runs the file as written; a list of metadata modes: once in each")
    seed: int = Field(0, description="every random choice (fault times, victims) comes from it")
    cluster: ClusterModel = ClusterModel()
    topic: TopicModel = TopicModel()
    workload: WorkloadModel = WorkloadModel()
    faults: list[FaultModel] = Field([], description="the faults, taking turns after the warm-up: each holds "
                                       "for duration_s and heals, and the next starts its interval_s after it started")
    schedule: ScheduleModel = ScheduleModel()
    expect: dict[str, Union[bool, int, str, dict[str, Union[int, str]]]] | None = Field(
        None, description="what the verdict must say: a count per anomaly (0, \">0\", \"<=5\"), valid, per client "
        "(librdkafka, java) or per release (kafka<3.6); null: valid")

    @field_validator("expect")
    @classmethod
    def _expect(cls, expect: dict[str, Any] | None) -> dict[str, Any] | None:
        for key, value in (expect or {}).items():
            if key in RENAMED:
                raise ValueError(f"cannot expect {key!r}: it is called {RENAMED[key]!r} now")
            if key not in EXPECTABLE:
                raise ValueError(f"cannot expect {key!r}; one of {', '.join(EXPECTABLE)}")
            if key == "valid":
                if not isinstance(value, bool):
                    raise ValueError("expect.valid must be true or false")
                continue
            by_client = value if isinstance(value, dict) else {"": value}
            for client, count in by_client.items():
                where = f"expect.{key}.{client}" if client else f"expect.{key}"
                if client and client not in LIBRARIES and not RELEASE_CONDITION.match(client):
                    raise ValueError(f"{where}: an expectation per client names librdkafka or java, one per "
                                     "release a condition like kafka<3.6 or kafka>=4.0")
                if isinstance(count, bool) or not (isinstance(count, int) or EXPECTATION.match(str(count))):
                    raise ValueError(f"{where} must be a count or a comparison like \">0\", not {count!r}")
        return expect

    @model_validator(mode="after")
    def _possible(self) -> "Scenario":
        try:
            self.cluster_spec().validate()
            self.topic_spec().validate(self.cluster.brokers)
        except ClusterError as e:
            raise ValueError(str(e)) from None
        self._faults_can_act()
        self._client_versions_possible()
        self._group_protocol_possible()
        self._roles_possible()
        self._fault_targets_exist()
        self._kafka_settings_exist()
        return self

    def share_brokers(self) -> ShareBrokers:
        c = self.cluster
        return ShareBrokers(c.metadata, c.kafka_version, dict(c.features), dict(c.broker_config))

    def _roles_possible(self) -> None:
        """What each role refuses of its own settings, and of the cluster it runs on."""
        w, broker_config = self.workload, dict(self.cluster.broker_config)
        producers_role.check(w, broker_config)
        consumers_role.check(w)
        pipeline_role.check(w, self.topic.name, broker_config)
        if w.share_consumers is not None:
            share = w.role(share_role.KEY)
            share_role.check(w.share_consumers, share.client, share.release, self.share_brokers())

    def _client_versions_possible(self) -> None:
        """A Java role's client_version is a kafka-clients release the Java program is built against: 3.5.0 on."""
        for role in self.workload.roles:
            if role.client == "java" and role.release is not None and kafka_release(role.release)[:2] < OLDEST_KAFKA:
                oldest = ".".join(map(str, OLDEST_KAFKA))
                raise ValueError(f"{role.where}.client_version={role.release}: the role runs java, and kchaos builds "
                                 f"its Java program against kafka-clients {oldest}.0 and later (a confluent-kafka "
                                 "release belongs to a librdkafka role)")

    def _group_protocol_possible(self) -> None:
        """group.protocol=consumer only where the brokers and the role's client serve KIP-848, and without the
        classic settings its client refuses (harness/group_protocol.py)."""
        w, c = self.workload, self.cluster
        releases = [(c.kafka_version, "cluster.kafka_version")]
        for i, outer in enumerate(self.faults):
            for where, fault in ((f"faults.{i}", outer), (f"faults.{i}.then", outer.then)):
                if fault is not None and fault.kind == "rolling-upgrade" and fault.options.get("to_version"):
                    releases.append((str(fault.options["to_version"]), f"{where}.options.to_version"))
        brokers = Brokers(c.metadata, releases, dict(c.features), dict(c.broker_config))
        for role in (w.role(consumers_role.KEY), *([w.role(pipeline_role.KEY)] if w.pipeline is not None else [])):
            check_role(role.where, role.settings.group_protocol,
                       {"config": dict(role.settings.config), f"{role.client}_config": own_map(role.settings,
                                                                                               role.client)},
                       role.client, role.release or (c.kafka_version if role.client == "java" else None), brokers)

    @property
    def java_client_releases(self) -> list[str]:
        """Every kafka-clients release some Java role runs, each once, in role order, and the cluster's when a share
        group asks the brokers for its offsets: the Java program is built against each before the cluster starts."""
        releases = [r.release or self.cluster.kafka_version for r in self.workload.roles if r.client == "java"]
        if self.workload.share_consumers is not None:  # the brokers' word on a share group comes through it
            releases.append(self.cluster.kafka_version)
        return list(dict.fromkeys(releases))

    def _fault_targets_exist(self) -> None:
        """A fault aimed at a role or a coordinator the workload does not have is refused, not a quiet no-op."""
        w = self.workload
        for i, fault in enumerate(self.faults):
            for where, target in ((f"faults.{i}", fault.target),
                                  (f"faults.{i}.then", fault.then.target if fault.then is not None else None)):
                if target == "pipeline" and w.pipeline is None:
                    raise ValueError(f"{where}: target pipeline, but the workload has no pipeline")
                if target in ("share_consumer", "share-coordinator") and w.share_consumers is None:
                    raise ValueError(f"{where}: target {target}, but the workload has no share consumers")
                if target == "txn-coordinator" and not w.transactional:
                    raise ValueError(f"{where}: target txn-coordinator, but the workload has no transactions")
                if (target == "group-coordinator" and w.consumers.count == 0 and w.pipeline is None
                        and w.share_consumers is None):
                    raise ValueError(f"{where}: target group-coordinator, but the workload has no consumer group "
                                     "(no consumers, no pipeline)")

    @property
    def pipeline_output_topic(self) -> str:
        return pipeline_role.output_topic(self.workload, self.topic.name)

    def _kafka_settings_exist(self) -> None:
        """Every Kafka setting is one its client, broker or topic reads: a typo never quietly changes the trial."""
        w = self.workload
        timeout_ms = None if w.transactions is None else w.transactions.timeout_ms
        # (the role, kind, its group and commit mode, the transaction.timeout.ms a producer runs with)
        roles: list[tuple[RoleView, str, str, str, int | None]] = [
            (w.role(producers_role.KEY), "producer", "", "manual", timeout_ms),
            (w.role(consumers_role.KEY), "consumer", w.consumers.group, w.consumers.commit, None)]
        if w.pipeline is not None:
            pipeline, its_producer = w.role(pipeline_role.KEY), pipeline_role.producer_view(w)
            pipeline_timeout_ms = pipeline_role.timeout_ms(w)
            roles.append((pipeline, "consumer", w.pipeline.group, "manual", None))
            if (its_producer.client, its_producer.release, pipeline_timeout_ms) != (
                    roles[0][0].client, roles[0][0].release, timeout_ms):
                # its producer runs the producers' settings on its client, transactional with its own time-out
                roles.append((its_producer, "producer", "", "manual", pipeline_timeout_ms))
        for role, kind, group, commit, role_timeout_ms in roles:
            where, settings = role.where, role.settings
            if role.client == "java":
                try:
                    names = config_names(role.release or self.cluster.kafka_version)
                except ClusterError as e:
                    raise ValueError(str(e)) from None
                check_java_settings(kind, where, {f"{where}.config": dict(settings.config),  # type: ignore[arg-type]
                                                  f"{where}.java_config": dict(settings.java_config),
                                                  f"{where}.group_protocol": group_protocol(settings)},
                                    names, group, commit, role_timeout_ms)
            elif kind == "producer":
                check_producer_settings(role.config, role_timeout_ms)
            else:
                check_consumer_settings(role.config, group, commit, f"{where}.config")  # type: ignore[arg-type]
        if self.cluster.broker_config or self.topic.config:
            try:
                names = config_names(self.cluster.kafka_version)
            except ClusterError as e:
                raise ValueError(str(e)) from None
            check_broker_settings(dict(self.cluster.broker_config), names)
            check_topic_settings(dict(self.topic.config), names)

    def _faults_can_act(self) -> None:
        """Every fault (and nested fault) could do something on this cluster: no silent no-op."""
        spec = self.cluster_spec()
        for i, fault in enumerate(self.faults):
            nested = fault.then
            checks = [(f"faults.{i}", fault.kind, fault.target, fault.options)]
            if nested is not None:
                target = fault.target if nested.target == SAME else nested.target
                checks.append((f"faults.{i}.then", nested.kind, target, nested.options))
                if nested.target == SAME:
                    try:
                        FAULTS[fault.kind].check_inner(FAULTS[fault.kind].check_options(fault.options),
                                                       FAULTS[nested.kind])
                    except FaultError as e:
                        raise ValueError(f"faults.{i}.then: {e}") from None
            for where, kind, target, options in checks:
                try:
                    FAULTS[kind].check_plan(target, FAULTS[kind].check_options(options), spec)
                except FaultError as e:
                    raise ValueError(f"{where}: {e}") from None

    def cluster_spec(self) -> ClusterSpec:
        c = self.cluster
        return ClusterSpec(kafka_version=c.kafka_version, metadata=c.metadata, brokers=c.brokers,
                           zookeepers=c.zookeepers, controllers=c.controllers, data_size_mb=c.data_size_mb,
                           broker_config={k: _kafka_value(v) for k, v in c.broker_config.items()},
                           features=dict(c.features),
                           request_path=c.inter_broker_request_path or c.watch_requests is not None or any(
                               FAULTS[f.kind].request_level
                               or (f.then is not None and FAULTS[f.then.kind].request_level)
                               for f in self.faults),
                           inter_broker_request_path=c.inter_broker_request_path)

    def topics(self) -> list[str]:
        """The topics the workload writes: its own, and a pipeline's output."""
        return [self.topic.name] + ([self.pipeline_output_topic] if self.workload.pipeline is not None else [])

    def topic_spec(self) -> TopicSpec:
        t = self.topic
        return TopicSpec(t.name, t.partitions, t.replication_factor, t.min_insync_replicas,
                         {k: _kafka_value(v) for k, v in t.config.items()})

    def pipeline_topic_spec(self) -> TopicSpec:
        """The pipeline's output topic: the workload topic's shape under another name."""
        t = self.topic
        return TopicSpec(self.pipeline_output_topic, t.partitions, t.replication_factor, t.min_insync_replicas,
                         {k: _kafka_value(v) for k, v in t.config.items()})

    def fault_plans(self) -> list[FaultPlan]:
        return [f.plan() for f in self.faults]

    def resolved(self) -> dict[str, Any]:
        """Every default filled in, as written to the run's scenario.yaml."""
        return self.model_dump(mode="json")


def _kafka_value(value: Scalar) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def apply_override(raw: dict[str, Any], assignment: str) -> None:
    """Apply one ``key.path=value`` to the raw scenario (the value is read as YAML).

    A number in the path indexes a list (``faults.0.duration_s=10``).
    """
    key, sep, text = assignment.partition("=")
    if not sep or not key:
        raise HarnessError(f"--set {assignment!r}: expected key=value")
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError as e:
        raise HarnessError(f"--set {key}{yaml_problem(e)}") from None
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        where = ".".join(parts[:i + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise HarnessError(f"--set {key}: {where} is not an existing list item")
            node = node[int(part)]
            continue
        if not isinstance(node, dict):
            raise HarnessError(f"--set {key}: {'.'.join(parts[:i])} is not a section")
        if node.get(part) is None:
            node[part] = {}
        if part in CONFIG_MAPS:
            node[part][".".join(parts[i + 1:])] = value
            return
        node = node[part]
    if isinstance(node, list):
        if not parts[-1].isdigit() or int(parts[-1]) >= len(node):
            raise HarnessError(f"--set {key}: {'.'.join(parts)} is not an existing list item")
        node[int(parts[-1])] = value
    elif isinstance(node, dict):
        node[parts[-1]] = value
    else:
        raise HarnessError(f"--set {key}: {'.'.join(parts[:-1])} is not a section")


def yaml_problem(error: yaml.YAMLError) -> str:
    """`` line N: not valid YAML (problem)`` in one line, whatever kind of YAML error it is."""
    mark, position = getattr(error, "problem_mark", None), getattr(error, "position", None)
    where = f" line {mark.line + 1}" if mark is not None else f" character {position}" if position is not None else ""
    problem = getattr(error, "problem", None) or getattr(error, "reason", None) or str(error)
    return f"{where}: not valid YAML ({' '.join(problem.split())})"


def one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def read_mapping(path: Path, what: str = "scenario") -> dict[str, Any]:
    """A YAML file of keys (a scenario, an exploration's space); HarnessError (one line) on any problem."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such {what} file") from None
    except IsADirectoryError:
        raise HarnessError(f"{path}: a directory, not a {what} file") from None
    except OSError as e:
        raise HarnessError(f"{path}: cannot read the {what} file ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise HarnessError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    except yaml.YAMLError as e:
        raise HarnessError(f"{path}{yaml_problem(e)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise HarnessError(f"{path}: a {what} is a mapping of keys, not a {type(raw).__name__}")
    return raw


def load_scenario(path: Path, overrides: list[str] = (), seed: int | None = None) -> Scenario:  # type: ignore[assignment]
    """Read, override and validate a scenario file; HarnessError (one line) on any problem."""
    raw = read_mapping(path)
    raw.setdefault("name", path.stem)
    for assignment in overrides:
        apply_override(raw, assignment)
    if seed is not None:
        raw["seed"] = seed
    try:
        return Scenario.model_validate(raw)
    except ValidationError as e:
        raise HarnessError(f"{path}: {one_line(e)}") from None
