"""KIP-848's consumer group protocol as a scenario setting, refused before anything starts where it cannot work.

``group_protocol`` of the consumers or the pipeline becomes that role's client setting ``group.protocol``
(librdkafka and kafka-clients both read it: classic or consumer). ``consumer`` works only where:

- the brokers serve it: KRaft, Kafka 4.0 or later on every release the scenario runs, group.version not 0
  and ``group.coordinator.rebalance.protocols`` naming consumer (otherwise KafkaApis answers the client's
  ConsumerGroupHeartbeat UNSUPPORTED_VERSION: ``isConsumerGroupProtocolEnabled``);
- the role's client has it generally available: librdkafka 2.12, kafka-clients 4.0;
- the role's settings hold none of the classic protocol's: each client refuses them when it is built
  (librdkafka's ``rd_kafka_conf_finalize``, kafka-clients' ``CONSUMER_PROTOCOL_UNSUPPORTED_CONFIGS``).

``classic`` works everywhere, but only a client that has the setting can be given it: librdkafka 2.4 and
kafka-clients 3.7 brought it (an older librdkafka refuses the unknown property when it is built, an older Java
client ignores it), and on older ones classic, their only protocol, is what null gives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import libversion

from clusters.kafka_versions import kafka_release

GroupProtocol = Literal["classic", "consumer"]
SETTING = "group.protocol"
OLDEST_KAFKA = (4, 0)        # the brokers' consumer protocol is generally available (and ZooKeeper is gone)
OLDEST_LIBRDKAFKA = (2, 12)  # early access from 2.4, preview from 2.10
OLDEST_KAFKA_CLIENTS = (4, 0)
FIRST_LIBRDKAFKA, FIRST_KAFKA_CLIENTS = (2, 4), (3, 7)  # the first releases with a group.protocol setting
REBALANCE_PROTOCOLS = "group.coordinator.rebalance.protocols"
GROUP_VERSION = "group.version"
TURNED_OFF = "the brokers would answer its heartbeats UNSUPPORTED_VERSION"
SESSION = "cluster.broker_config.group.consumer.session.timeout.ms"
HEARTBEAT = "cluster.broker_config.group.consumer.heartbeat.interval.ms"
# what each client refuses with group.protocol=consumer, and why: librdkafka's own words (2.12 to 2.16), and
# where the setting lives now for kafka-clients, whose ConfigException says only "<key> cannot be set when
# group.protocol=CONSUMER" (4.0 to 4.4; group.protocol.type is no Java setting at all)
LIBRDKAFKA_REFUSES = {
    "session.timeout.ms": f"it is defined broker side ({SESSION})",
    "heartbeat.interval.ms": f"it is defined broker side ({HEARTBEAT})",
    "partition.assignment.strategy": "use group.remote.assignor instead (the brokers assign the partitions)",
    "group.protocol.type": "it is the classic protocol's",
}
JAVA_REFUSES = {
    "session.timeout.ms": f"the session timeout is the brokers' ({SESSION})",
    "heartbeat.interval.ms": f"the heartbeat interval is the brokers' ({HEARTBEAT})",
    "partition.assignment.strategy": "the brokers assign the partitions (group.remote.assignor names their "
                                     "assignor)",
}
MINOR = re.compile(r"^(\d+)\.(\d+)")


@dataclass(frozen=True)
class Brokers:
    """What decides whether the brokers serve the consumer protocol."""

    metadata: str
    releases: list[tuple[str, str]]  # (release, where the scenario names it), cluster.kafka_version first
    features: dict[str, int]
    broker_config: dict[str, Any]


def minor_of(release: str) -> tuple[int, int]:
    """``2.12.0rc1`` as (2, 12): a confluent-kafka or kafka-clients release's major and minor."""
    found = MINOR.match(release)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def locked_librdkafka() -> str:
    """The librdkafka of .venv's confluent-kafka (already loaded: the settings check builds clients with it)."""
    return libversion()[0]


def check_role(where: str, own: str | None, maps: dict[str, dict[str, Any]], client: str, release: str | None,
               brokers: Brokers) -> None:
    """One consumer role (``where``): ``own`` its group_protocol, ``maps`` its config and its client's map by
    name, ``release`` its client's (a pinned confluent-kafka, None: the locked one; kafka-clients always named).
    ValueError, one line, where the protocol cannot work."""
    said = f"{where}.group_protocol={own}"
    for name, config in maps.items():
        if SETTING in config:
            if own is not None:
                raise ValueError(f"{where}: set group_protocol or {name}.{SETTING}, not both")
            said = f"{where}.{name}.{SETTING}={config[SETTING]}"
    protocol = own if own is not None else next((str(c[SETTING]).lower() for c in reversed(maps.values())
                                                 if SETTING in c), None)
    if protocol is None:
        return
    _client_has_it(said, client, release)
    if protocol != "consumer":
        return
    _brokers_serve(said, brokers)
    _client_serves(said, client, release)
    refused = JAVA_REFUSES if client == "java" else LIBRDKAFKA_REFUSES
    for name, config in maps.items():
        for key, value in config.items():
            if key not in refused or (client == "java" and not str(value).strip()):  # Java skips a blank value
                continue
            if client == "java":
                raise ValueError(f"{where}.{name}.{key}: Kafka's Java consumer refuses it with group.protocol="
                                 f"consumer ({key} cannot be set when group.protocol=CONSUMER): {refused[key]}")
            raise ValueError(f"{where}.{name}.{key}: librdkafka refuses it with group.protocol=consumer: "
                             f"{refused[key]}")


def _brokers_serve(said: str, brokers: Brokers) -> None:
    oldest, named = min(brokers.releases, key=lambda r: kafka_release(r[0]))
    wrong = ([] if brokers.metadata == "kraft" else [f"cluster.metadata={brokers.metadata}"]) + (
        [f"{named}={oldest}"] if kafka_release(oldest)[:2] < OLDEST_KAFKA else [])
    if wrong:
        raise ValueError(f"{said} needs KRaft and Kafka 4.0 or later on every release the scenario runs, not "
                         f"{' and '.join(wrong)}")
    level = brokers.features.get(GROUP_VERSION)
    if level is not None and level < 1:
        raise ValueError(f"{said}: cluster.features.{GROUP_VERSION}={level} turns the consumer group protocol "
                         f"off ({TURNED_OFF})")
    protocols = brokers.broker_config.get(REBALANCE_PROTOCOLS)
    if protocols is not None and "consumer" not in {p.strip().lower() for p in str(protocols).split(",")}:
        raise ValueError(f"{said}: cluster.broker_config.{REBALANCE_PROTOCOLS}={protocols} leaves out consumer "
                         f"({TURNED_OFF})")


def _client_has_it(said: str, client: str, release: str | None) -> None:
    first = FIRST_KAFKA_CLIENTS if client == "java" else FIRST_LIBRDKAFKA
    if minor_of(_library(release)) < first:
        raise ValueError(f"{said}: {_runs(client, release)} has no group.protocol setting (it came in "
                         f"{_client_name(client)} {first[0]}.{first[1]}): leave it unset, classic is its only "
                         "protocol")


def _client_serves(said: str, client: str, release: str | None) -> None:
    oldest = OLDEST_KAFKA_CLIENTS if client == "java" else OLDEST_LIBRDKAFKA
    if minor_of(_library(release)) < oldest:
        raise ValueError(f"{said} needs {_client_name(client)} {oldest[0]}.{oldest[1]} or later (where it is "
                         f"generally available), not {_runs(client, release)}")


def _library(release: str | None) -> str:
    """The release whose major and minor decide (a confluent-kafka wheel bundles the librdkafka of its own; a
    Java role's release is always named)."""
    return release if release is not None else locked_librdkafka()


def _client_name(client: str) -> str:
    return "kafka-clients" if client == "java" else "librdkafka"


def _runs(client: str, release: str | None) -> str:
    """What the role runs, as the message names it."""
    if client == "java":
        return f"kafka-clients {release}"
    return f"confluent-kafka {release}" if release is not None else \
        f"the locked confluent-kafka's librdkafka {locked_librdkafka()}"
