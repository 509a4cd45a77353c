"""rolling-restart and rolling-upgrade: what an operator does to every broker in turn, under load.

Each node in turn is stopped as an operator stops it (SIGTERM: a broker's controlled shutdown moves its
leaderships away first), started again (on another Kafka's image, for an upgrade), and the roll goes on only
once it serves and is back in every ISR of the workload's topic it was in before: the by-the-book roll that
Strimzi and the upgrade notes describe. An upgrade of a KRaft cluster rolls the controllers first, then the
brokers, and then raises the ``metadata.version`` feature to the new release's (``kafka-features.sh upgrade
--metadata``); one of a ZooKeeper cluster, whose brokers must run with ``inter.broker.protocol.version``
pinned to the old release while they differ, raises that setting and rolls the brokers a second time.
Healing has nothing to undo: it checks that every node serves. Each node's step and each setting raised
become ``node-version`` lines of events.jsonl once the fault healed (``evidence``): the report draws every
node's release over time from them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field
from tenacity import RetryError, retry, retry_if_result, stop_after_delay, wait_fixed

from catalogue.history import NODE_VERSION_STEPS
from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.features import raise_metadata_version
from clusters.kafka_versions import LAST_ZOOKEEPER_MAJOR, check_kafka_version, kafka_release
from clusters.node import Node
from clusters.spec import ClusterSpec
from faults.base import Fault, FaultError, FaultOptions, FaultSkipped

IBP = "inter.broker.protocol.version"
METADATA_VERSION = "metadata.version"
RESTARTED, RAISED = NODE_VERSION_STEPS


@dataclass(frozen=True)
class RollStep:
    """One step of a roll, its times on the machine's monotonic clock: kept until the fault heals, then written as
    an events.jsonl ``node-version`` line, since the fault's detail gives each node's durations but not when."""

    fault: str
    at_ns: int  # the node serving again, or the setting raised
    node: str | None = None
    role: str | None = None
    from_version: str | None = None
    version: str | None = None
    stopped_ns: int | None = None  # its process had stopped
    in_sync_ns: int | None = None  # back in every ISR it left (a broker that led or followed some)
    setting: str | None = None  # raised for the whole cluster: IBP or metadata.version
    value: str | None = None

    def event(self, origin_ns: int) -> dict[str, Any]:
        """The line's fields, times on the run's clock (``origin_ns``: its origin)."""
        if self.setting is not None:
            return {"fault": self.fault, "step": RAISED, "setting": self.setting, "value": self.value,
                    "time_ns": self.at_ns - origin_ns}
        return {"fault": self.fault, "step": RESTARTED, "node": self.node, "role": self.role,
                "from_version": self.from_version, "version": self.version,
                "stopped_ns": None if self.stopped_ns is None else self.stopped_ns - origin_ns,
                "time_ns": self.at_ns - origin_ns,
                "in_sync_ns": None if self.in_sync_ns is None else self.in_sync_ns - origin_ns}


def minor_release(version: str) -> str:
    """``3.9.2`` as ``3.9``: how inter.broker.protocol.version and metadata.version name a release."""
    major, minor, _ = kafka_release(version)
    return f"{major}.{minor}"


def back_in_sync(cluster: Cluster, topic: str, node: Node, partitions: set[int], wait_s: float) -> float:
    """Wait until ``node`` is in the ISR of each of ``partitions`` again; the seconds it took (FaultError when it
    is not within ``wait_s``)."""
    began = time.monotonic()

    @retry(stop=stop_after_delay(wait_s), wait=wait_fixed(0.5), retry=retry_if_result(bool))
    def missing() -> set[int]:
        try:
            states = cluster.partitions(topic)
        except ClusterError:
            return set(partitions)
        return {s.partition for s in states if s.partition in partitions and node.node_id not in s.isr}

    try:
        missing()
    except RetryError as e:
        left = sorted(e.last_attempt.result())
        raise FaultError(f"{node.name} was not back in the ISR of {topic} partitions {left} within {wait_s:g} s: "
                         "the roll stopped there") from None
    return time.monotonic() - began


class RollingOptions(FaultOptions):
    isr_wait_s: float = Field(180, gt=0, description="how long a restarted broker may take to be back in every ISR "
                                                     "it left before the run stops")


class UpgradeOptions(RollingOptions):
    to_version: str = Field("", description="the Kafka release the nodes come back on (required), newer than "
                                            "cluster.kafka_version")


class RollingRestartFault(Fault):
    """Every broker in turn: controlled shutdown, start, back in every ISR it left, next."""

    kind = "rolling-restart"
    Options = RollingOptions
    settings: RollingOptions
    targets = ("all-brokers",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[RollStep] = []

    def apply(self, nodes: list[Node]) -> str:
        return "; ".join(self.roll(node) for node in nodes)

    def evidence(self, origin_ns: int) -> list[dict[str, Any]]:
        """A ``node-version`` line for each node it restarted and each setting it raised, even when the roll
        stopped half-way."""
        return [step.event(origin_ns) for step in self.steps]

    def raised(self, setting: str, value: str) -> None:
        """Note that ``setting`` now says ``value`` for the whole cluster."""
        self.steps.append(RollStep(self.kind, time.monotonic_ns(), setting=setting, value=value))

    def roll(self, node: Node, version: str | None = None) -> str:
        """Stop ``node`` gracefully, start it (on ``version``'s image when given), wait until it serves and, a
        broker, is back in sync; what it took, for the detail."""
        led = set()
        if node.role == "broker":
            try:
                led = {s.partition for s in self.cluster.partitions(self.topic) if node.node_id in s.isr}
            except ClusterError as e:
                raise FaultError(f"cannot see {self.topic}'s ISRs before stopping {node.name}: {e}") from None
        was = node.version
        began = time.monotonic_ns()
        try:
            node.stop()
            stopped = time.monotonic_ns()
            if version is not None:
                self.cluster.replace_version(node, version)
            self.cluster.recover(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        step = RollStep(self.kind, time.monotonic_ns(), node.name, node.role, was, version or was, stopped)
        self.steps.append(step)
        said = f"{node.name}{'' if version is None else f' to {version}'}: stopped in {(stopped - began) / 1e9:.1f} " \
               f"s, serving after {(step.at_ns - began) / 1e9:.1f} s"
        if led:
            synced = back_in_sync(self.cluster, self.topic, node, led, self.settings.isr_wait_s)
            self.steps[-1] = replace(step, in_sync_ns=step.at_ns + int(synced * 1e9))
            said += f", in every ISR it left after {(step.at_ns - began) / 1e9 + synced:.1f} s"
        return said

    def heal(self, nodes: list[Node]) -> None:
        self.recover([n for n in self.cluster.nodes if not n.running])


class RollingUpgradeFault(RollingRestartFault):
    """The roll, each node coming back on ``to_version``'s image; then the version setting raised."""

    kind = "rolling-upgrade"
    Options = UpgradeOptions
    settings: UpgradeOptions

    @classmethod
    def check_plan(cls, target: str, options: UpgradeOptions, spec: ClusterSpec) -> None:
        to = options.to_version
        if not to:
            raise FaultError("rolling-upgrade needs options.to_version, the Kafka release the nodes come back on")
        try:
            check_kafka_version(to, "rolling-upgrade to_version")
            newer = kafka_release(to) > kafka_release(spec.kafka_version)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        if not newer:
            raise FaultError(f"rolling-upgrade to_version={to} is not newer than cluster.kafka_version="
                             f"{spec.kafka_version}")
        if spec.metadata == "zookeeper":
            if kafka_release(to)[0] > LAST_ZOOKEEPER_MAJOR:
                raise FaultError(f"rolling-upgrade to {to}: Kafka 4 has no ZooKeeper mode (a ZooKeeper cluster "
                                 "migrates to KRaft first)")
            pinned = spec.broker_config.get(IBP)
            if pinned != minor_release(spec.kafka_version):
                raise FaultError(f"rolling-upgrade of a ZooKeeper cluster: pin cluster.broker_config.{IBP} to "
                                 f"{minor_release(spec.kafka_version)} (the release it starts on), as the upgrade "
                                 f"notes say; it is raised to {minor_release(to)} once every broker runs {to}")

    def apply(self, nodes: list[Node]) -> str:
        to = self.settings.to_version
        if all(n.version == to for n in nodes):
            raise FaultSkipped(f"every broker runs {to} already")
        # KRaft: the controllers first (a newer broker may need what only a newer quorum serves)
        order = sorted(self.cluster.controllers, key=lambda n: n.node_id) + nodes
        said = [self.roll(node, to) for node in order if node.version != to]
        if self.cluster.kraft:
            said.append(self.finish_kraft_upgrade(nodes[0], minor_release(to)))
        else:
            try:
                for node in nodes:
                    node.set_server_setting(IBP, minor_release(to))
            except ClusterError as e:
                raise FaultError(str(e)) from None
            self.raised(IBP, minor_release(to))
            said.append(f"{IBP} raised to {minor_release(to)}, brokers rolled again")
            said += [self.roll(node) for node in nodes]
        return "; ".join(said)

    def finish_kraft_upgrade(self, broker: Node, release: str) -> str:
        try:
            level = raise_metadata_version(broker, release)
        except ClusterError as e:
            raise FaultError(str(e)) from None
        self.raised(METADATA_VERSION, level)
        return f"{METADATA_VERSION} raised to {level}"
