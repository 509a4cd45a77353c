"""The share-group role (``workload.share_consumers``, KIP-932) as one part: its typed settings, what makes it
impossible on a cluster or client, the group settings it gives the brokers, its processes and how the trial lets
them finish. The trial reaches it only through :class:`RoleRun` (harness/roles.py); the processes and their
lines are workloads/share_consumer.py's, the judgement checkers/shares.py's.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from clusters.errors import ClusterError
from clusters.kafka_versions import kafka_release
from clusters.share_groups import ShareOffset, share_offsets
from harness.group_protocol import minor_of
from harness.role_settings import BrokerFacts, Scalar
from harness.roles import Ends, RoleRun, TrialSetting
from workloads.client import ClientProcess, Library, WorkloadError
from workloads.share_consumer import ShareConsumerClient, ShareLedger
from workloads.workload import stop_all

if TYPE_CHECKING:
    from clusters.cluster import Cluster
    from workloads.history import History

log = logging.getLogger(__name__)

KEY = "share_consumers"
WHERE = f"workload.{KEY}"
# share groups are generally available from these: brokers and kafka-clients 4.2 (KIP-932), confluent-kafka's
# preview ShareConsumer from 2.15
FIRST_KAFKA = (4, 2)
FIRST_CONFLUENT_KAFKA = (2, 15)
SHARE_VERSION = "share.version"
# the brokers' defaults and bounds of the two group settings the checker judges by (ShareGroupConfig, 4.2 to 4.4)
DELIVERY_LIMIT = ("group.share.delivery.count.limit", 5, "group.share.min.delivery.count.limit", 2,
                  "group.share.max.delivery.count.limit", 10)
LOCK_MS = ("group.share.record.lock.duration.ms", 30_000, "group.share.min.record.lock.duration.ms", 15_000,
           "group.share.max.record.lock.duration.ms", 60_000)
# the group's own settings (GroupConfig): set before the first member joins; the delivery limit is a group
# setting from Kafka 4.3 (4.2 has only the brokers' group.share.delivery.count.limit, and no bounds on it)
GROUP_SETTINGS = {"delivery_limit": "share.delivery.count.limit", "lock_ms": "share.record.lock.duration.ms"}
GROUP_DELIVERY_LIMIT = (4, 3)
DRAIN_POLL_S = 2.0


class ShareConsumersModel(BaseModel):
    """Members of one share group (KIP-932) reading the topic as a queue while the faults hit: each acknowledges
    every record it is given explicitly, with a seeded mix of ACCEPT, RELEASE and REJECT."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(2, ge=1, le=64, description="share consumer processes, in one share group")
    group: str = Field("kchaos-share", description="the share group's group.id")
    client: Library | None = Field(None, description="java (kafka-clients' KafkaShareConsumer, 4.2 or later) or "
                                   "librdkafka (confluent-kafka's preview ShareConsumer, 2.15 or later); null: "
                                   "workload.client")
    client_version: str | None = Field(None, description="a kafka-clients release for java, a confluent-kafka one "
                                       "for librdkafka; null: the cluster's kafka-clients, or .venv's confluent-kafka")
    release: float = Field(0.1, ge=0, le=1, description="the share of deliveries the member RELEASEs (given back "
                           "for another delivery)")
    reject: float = Field(0.05, ge=0, le=1, description="the share of deliveries it REJECTs (archived, never "
                          "delivered again); the rest it ACCEPTs")
    processing_ms: float = Field(0, ge=0, le=600_000, description="time a member holds each polled batch, acquired, "
                                 "before it acknowledges it (where a crash lands)")
    delivery_limit: int | None = Field(None, ge=1, description="the group's share.delivery.count.limit: deliveries "
                                       "of a record before it is archived; null: the brokers' "
                                       "group.share.delivery.count.limit (5 unless set)")
    lock_ms: int | None = Field(None, ge=1, description="the group's share.record.lock.duration.ms: how long a "
                                "member holds an acquired record; null: the brokers' (30000 unless set)")
    config: dict[str, Scalar] = Field({}, description="share consumer settings of either client; group.id and "
                                      "share.acknowledgement.mode are the harness's")

    @model_validator(mode="after")
    def _mix(self) -> "ShareConsumersModel":
        if self.release + self.reject > 1:
            raise ValueError(f"{WHERE}: release + reject is {self.release + self.reject:g}, above 1")
        for key in ("group.id", "share.acknowledgement.mode"):
            if key in self.config:
                raise ValueError(f"{WHERE}.config.{key}: the harness sets it")
        return self


class Brokers(BrokerFacts):
    """What decides whether the brokers serve share groups and which group settings they allow."""

    def setting(self, name: str, default: int) -> int:
        return int(self.broker_config.get(name, default))

    @property
    def group_delivery_limit(self) -> bool:
        """The release has the group setting share.delivery.count.limit (and bounds on it)."""
        return kafka_release(self.kafka_version)[:2] >= GROUP_DELIVERY_LIMIT

    def bounded(self, bounds: tuple[str, int, str, int, str, int], asked: int | None, field: str) -> int:
        """The group's value of a bounded setting: ``asked``, refused in one line outside the brokers' bounds."""
        name, default, low_name, low, high_name, high = bounds
        if bounds is DELIVERY_LIMIT and not self.group_delivery_limit:
            if asked is not None:
                raise ValueError(f"{WHERE}.delivery_limit: Kafka {self.kafka_version} has no group setting "
                                 f"share.delivery.count.limit ({GROUP_DELIVERY_LIMIT[0]}.{GROUP_DELIVERY_LIMIT[1]} "
                                 f"and later): set cluster.broker_config.{name} instead")
            return self.setting(name, default)
        low, high = self.setting(low_name, low), self.setting(high_name, high)
        value = self.setting(name, default) if asked is None else asked
        if not low <= value <= high:
            said = f"{WHERE}.{field}={value}" if asked is not None else f"cluster.broker_config.{name}={value}"
            raise ValueError(f"{said} is outside the brokers' bounds [{low}, {high}] ({low_name}, {high_name})")
        return value


def check(role: ShareConsumersModel, client: Library, release: str | None, brokers: Brokers) -> None:
    """Refuse, in one line, a share group the brokers or the role's client cannot run."""
    wrong = ([] if brokers.metadata == "kraft" else [f"cluster.metadata={brokers.metadata}"]) + (
        [f"cluster.kafka_version={brokers.kafka_version}"]
        if kafka_release(brokers.kafka_version)[:2] < FIRST_KAFKA else [])
    if wrong:
        raise ValueError(f"{WHERE} needs KRaft and Kafka {FIRST_KAFKA[0]}.{FIRST_KAFKA[1]} or later (share groups "
                         f"generally available), not {' and '.join(wrong)}")
    level = brokers.features.get(SHARE_VERSION)
    if level is not None and level < 1:
        raise ValueError(f"{WHERE}: cluster.features.{SHARE_VERSION}={level} turns share groups off")
    if client == "java":
        clients = release or brokers.kafka_version
        if kafka_release(clients)[:2] < FIRST_KAFKA:
            raise ValueError(f"{WHERE}: kafka-clients {clients} has no generally available share consumer "
                             f"({FIRST_KAFKA[0]}.{FIRST_KAFKA[1]} or later)")
    elif release is not None and minor_of(release) < FIRST_CONFLUENT_KAFKA:
        raise ValueError(f"{WHERE}: confluent-kafka {release} has no share consumer ("
                         f"{FIRST_CONFLUENT_KAFKA[0]}.{FIRST_CONFLUENT_KAFKA[1]} or later, a preview)")
    group_settings(role, brokers)  # a limit or lock outside the brokers' bounds is refused there


def group_settings(role: ShareConsumersModel, brokers: Brokers) -> dict[str, int]:
    """The two settings the checker judges by, as the group will have them."""
    return {"delivery_limit": brokers.bounded(DELIVERY_LIMIT, role.delivery_limit, "delivery_limit"),
            "lock_ms": brokers.bounded(LOCK_MS, role.lock_ms, "lock_ms")}


class ShareRun(RoleRun):
    """The share group of one trial: its members, the settings it was given, and the ledger that says when it
    has settled the whole log."""

    finishing = "share group finishing"

    def __init__(self, role: ShareConsumersModel, client: Library, release: str | None, brokers: Brokers,
                 topic: str, seed: int, bootstrap: str, history: "History") -> None:
        assert history.shares is not None
        self.role = role
        self.topic = topic
        self.direct = bootstrap   # the brokers' own listeners, set by prepare: asks never meet a request fault
        self.kafka_version = brokers.kafka_version  # ShareOffsets' build: Scenario.java_client_releases has it
        self.history = history
        self.settings = group_settings(role, brokers)
        self.group_delivery_limit = brokers.group_delivery_limit
        self.ledger = ShareLedger(self.settings["delivery_limit"])
        self.clients: list[ClientProcess] = [
            ShareConsumerClient(f"s{i}", bootstrap, topic, role.group, dict(role.config), history.shares,
                                history.clock, self.ledger, seed, role.release, role.reject, role.processing_ms,
                                client=client, kafka_version=brokers.kafka_version, client_version=release)
            for i in range(role.count)]

    @classmethod
    def build(cls, trial: TrialSetting) -> "ShareRun | None":
        w, b = trial.workload, trial.brokers
        if w.share_consumers is None:
            return None
        view = w.role(KEY)
        return cls(w.share_consumers, view.client, view.release,
                   Brokers(b.metadata, b.kafka_version, b.features, b.broker_config), trial.topic, trial.seed,
                   trial.bootstrap, trial.history)

    def prepare(self, cluster: "Cluster") -> None:
        """Give the group its settings before any member joins (it reads the log from its start, not its end), and
        record them: the checker judges by them."""
        from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                           ResourceType)

        self.direct = cluster.bootstrap_servers
        entries = [ConfigEntry("share.auto.offset.reset", "earliest",
                               incremental_operation=AlterConfigOpType.SET)]
        entries += [ConfigEntry(GROUP_SETTINGS[k], str(v), incremental_operation=AlterConfigOpType.SET)
                    for k, v in self.settings.items() if k != "delivery_limit" or self.group_delivery_limit]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = ConfigResource(ResourceType.GROUP, self.role.group, incremental_configs=entries)
        try:
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(timeout=30)
        except Exception as e:  # noqa: BLE001 - any refusal means the run cannot say what the group did
            raise WorkloadError(f"the share group {self.role.group} could not be given its settings: {e}") from None
        self.history.event("share-group", group=self.role.group, topic=self.topic,
                           delivery_limit=self.settings["delivery_limit"], lock_ms=self.settings["lock_ms"],
                           time_ns=self.history.clock.now_ns())

    def drain(self, ends: Ends, timeout_s: float) -> bool:
        """Wait until the group has settled every offset below the topic's ``ends`` (partition -> high
        watermark), as the members' reports or the brokers say, at most ``timeout_s``; then stop the members and
        record what the brokers say of each partition (``share-offsets`` events). False: some offsets were left."""
        return self._drain(ends(), timeout_s)

    def _drain(self, ends: dict[int, int], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        done = False
        while not done and time.monotonic() < deadline:
            done = self.ledger.behind(ends) == 0 or self._brokers_settled(ends)
            if not done:
                time.sleep(DRAIN_POLL_S)
        if not done:
            log.warning("the share group left %d records unsettled after %.0fs (as its members report them)",
                        self.ledger.behind(ends), timeout_s)
        stop_all(self.clients)
        self._record_offsets(len(ends))
        return done

    def _ask(self, partitions: int) -> dict[int, ShareOffset]:
        return share_offsets(self.kafka_version, self.direct, self.role.group, self.topic, partitions)

    def _brokers_settled(self, ends: dict[int, int]) -> bool:
        """The brokers say every partition is settled to its end: its start offset reached it, or nothing above
        the start offset is unsettled (lag 0: the start offset moves on lazily)."""
        try:
            offsets = self._ask(len(ends))
        except ClusterError as e:
            log.info("%s", e)
            return False
        return all(p in offsets and (offsets[p].start_offset >= end or offsets[p].lag == 0)
                   for p, end in ends.items())

    def _record_offsets(self, partitions: int) -> None:
        """A ``share-offsets`` event per partition; not having them is a warning (the checker then judges
        unsettled records by the members' reports alone)."""
        try:
            offsets = self._ask(partitions)
        except ClusterError as e:
            log.warning("%s", e)
            return
        now = self.history.clock.now_ns()
        for p, o in sorted(offsets.items()):
            self.history.event("share-offsets", group=self.role.group, topic=self.topic, partition=p,
                               start_offset=o.start_offset, lag=o.lag, time_ns=now)

    def counts(self) -> dict[str, int]:
        return {"reads": sum(c.count for c in self.clients if isinstance(c, ShareConsumerClient))}
