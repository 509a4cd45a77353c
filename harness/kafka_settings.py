"""Kafka settings in a scenario, checked before a cluster starts: a typo must never quietly change a trial.

Client settings are built into a librdkafka client exactly as the workload
builds them (librdkafka refuses unknown or invalid properties at
construction, with no broker contacted). Broker and topic settings are looked
up in the scenario's Kafka version's own definitions (clusters/config_names.py).
Errors are ValueErrors naming the key, for the scenario's pydantic validation.
"""

from __future__ import annotations

import difflib
import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Literal

from confluent_kafka import Consumer, KafkaException, Producer

from clusters.config_names import ConfigNames
from workloads.consumer import CommitMode, consumer_settings
from workloads.errors import WorkloadError
from workloads.java_client import check_config
from workloads.producer import producer_settings

NO_SUCH_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
IGNORED = re.compile(r"Configuration property (\S+) is a (\w+) property and will be ignored")
DOTTED_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+")
# a dotted name ending a NUL-terminated string of the loaded library
LIBRARY_STRING = re.compile(rb"[a-z0-9_.]+(?=\x00)")
# the Java workload writes and reads byte arrays
JAVA_SERDES = frozenset({"key.serializer", "value.serializer", "key.deserializer", "value.deserializer"})

_librdkafka_log = logging.getLogger("kchaos.settings-check")  # librdkafka's warnings, read here, shown nowhere
_librdkafka_log.propagate = False
_librdkafka_log.setLevel(logging.DEBUG)
_librdkafka_log.addHandler(logging.NullHandler())


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean x?)`` with the closest known names, or nothing when none is close."""
    return _suggest(difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.8))


def _suggest(names: list[str]) -> str:
    return f" (did you mean {' or '.join(names)}?)" if names else ""


def check_producer_settings(config: dict[str, Any], transaction_timeout_ms: int | None = None) -> None:
    """``transaction_timeout_ms``: the producers are transactional, and librdkafka checks the settings as such."""
    transactions = None if transaction_timeout_ms is None else {
        "transactional_id": "kchaos-settings-check", "timeout_ms": transaction_timeout_ms}
    _check_client("producer", "workload.producers.config", config,
                  producer_settings(config, "", "p0", transactions))


def check_consumer_settings(config: dict[str, Any], group: str, commit: CommitMode,
                            where: str = "workload.consumers.config") -> None:
    _check_client("consumer", where, config, consumer_settings(config, "", "c0", group, commit))


def check_java_settings(kind: Literal["producer", "consumer"], prefix: str, maps: dict[str, dict[str, Any]],
                        names: ConfigNames, group: str = "", commit: CommitMode = "manual",
                        transaction_timeout_ms: int | None = None) -> None:
    """A Java client's settings: every name one the scenario's kafka-clients defines (the Java client only logs
    an unknown one), none the harness sets itself. ``maps``: where each map is written (config, java_config)."""
    known = names.producer if kind == "producer" else names.consumer
    merged = {k: v for config in maps.values() for k, v in config.items()}
    transactions = None if transaction_timeout_ms is None else {
        "transactional_id": "kchaos-settings-check", "timeout_ms": transaction_timeout_ms}
    settings = producer_settings(merged, "", "p0", transactions) if kind == "producer" else \
        consumer_settings(merged, "", "c0", group, commit)
    for where, config in maps.items():
        for key in config:
            if key in JAVA_SERDES:
                raise ValueError(f"{where}.{key}: the harness sets it itself (byte arrays), so this value would be "
                                 "ignored")
            if key not in known:
                hint = f" (a librdkafka setting: {prefix}.librdkafka_config holds what only librdkafka gets)" \
                    if _is_librdkafka_property(key) else did_you_mean(key, known)
                raise ValueError(f"{where}.{key}: Kafka {names.kafka_version}'s Java {kind} has no such setting{hint}")
        _not_set_by_harness(where, config, settings)
    try:  # the values, as the client itself checks them when it is built (no broker contacted)
        answer = check_config(names.kafka_version, kind,
                              {k: v for k, v in settings.items() if k != "bootstrap.servers"})
    except WorkloadError as e:
        raise ValueError(f"{prefix}: {e}") from None
    if answer.error is not None:
        raise ValueError(f"{prefix}: Kafka {names.kafka_version}'s Java {kind} refuses these settings: "
                         f"{' '.join(answer.error.split())}")


def check_broker_settings(config: dict[str, Any], names: ConfigNames) -> None:
    """Kafka ignores an unknown name in server.properties without a word: refuse it here."""
    for key in config:
        if not names.broker_accepts(key):
            raise ValueError(f"cluster.broker_config.{key}: not a Kafka {names.kafka_version} broker setting, "
                             f"the broker would silently ignore it{did_you_mean(key, names.broker)}")


def check_topic_settings(config: dict[str, Any], names: ConfigNames) -> None:
    for key in config:
        if key not in names.topic:
            raise ValueError(f"topic.config.{key}: not a Kafka {names.kafka_version} topic setting"
                             f"{did_you_mean(key, names.topic)}")


def _not_set_by_harness(where: str, config: dict[str, Any], settings: dict[str, Any]) -> None:
    for key, value in config.items():
        if settings[key] != value:  # bootstrap.servers is "" here: the cluster's, known only once it runs
            shown = f" (to {settings[key]!r} here)" if settings[key] != "" else ""
            raise ValueError(f"{where}.{key}: the harness sets it itself{shown}, so this value would be ignored")


def _check_client(kind: str, where: str, config: dict[str, Any], settings: dict[str, Any]) -> None:
    """Construct the client the workload would (no broker named, none contacted) and read what librdkafka says."""
    _not_set_by_harness(where, config, settings)
    warnings = _Collect()
    _librdkafka_log.addHandler(warnings)
    try:
        client = Producer(settings, logger=_librdkafka_log) if kind == "producer" \
            else Consumer(settings, logger=_librdkafka_log)
    except KafkaException as e:
        raise ValueError(_refusal(where, e.args[0].str())) from None
    except (ValueError, TypeError) as e:  # refused by confluent_kafka itself (group.id, callbacks)
        raise ValueError(f"{where}: {e}") from None
    else:
        client.poll(0)  # serves the warnings librdkafka queued while building the client
        if isinstance(client, Consumer):
            client.close()
    finally:
        _librdkafka_log.removeHandler(warnings)
    for line in warnings.lines:
        ignored = IGNORED.search(line)
        if ignored:
            name, other = ignored.groups()
            key = f"{where}.{name}" if name in config else f"{where} ({name})"
            raise ValueError(f"{key}: a {other} setting, which a {kind} ignores")


def _refusal(where: str, message: str) -> str:
    unknown = NO_SUCH_PROPERTY.search(message)
    if unknown is None:
        return f"{where}: librdkafka refuses it: {message}"
    name = unknown.group(1)
    close = difflib.get_close_matches(name, sorted(_library_names() - {name}), n=4, cutoff=0.8)
    return f"{where}.{name}: librdkafka has no such setting" \
           f"{_suggest([n for n in close if _is_librdkafka_property(n)][:2])}"


@lru_cache(maxsize=1)
def _library_names() -> frozenset[str]:
    """Dotted names in the loaded librdkafka binary: candidates for "did you mean", each confirmed before use.

    librdkafka cannot list its properties through confluent_kafka; its binary
    holds their names. A name merged into a longer one's tail (``linger.ms``
    in ``sticky.partitioning.linger.ms``) is found among the suffixes.
    """
    maps = Path("/proc/self/maps")
    paths = {line.split()[-1] for line in maps.read_text().splitlines() if "librdkafka" in line} \
        if maps.exists() else set()
    names: set[str] = set()
    for path in paths:
        for found in LIBRARY_STRING.findall(Path(path).read_bytes()):
            text = found.decode()
            names.update(text[i:] for i in range(len(text)) if DOTTED_NAME.fullmatch(text[i:]))
    return frozenset(names)


def _is_librdkafka_property(name: str) -> bool:
    """librdkafka itself says whether it knows ``name``: only its "no such property" answer means no.

    The probe's value is empty: no server to contact, no file to open.
    """
    try:
        Producer({name: ""}, logger=_librdkafka_log)
    except KafkaException as e:
        return NO_SUCH_PROPERTY.search(e.args[0].str()) is None
    except (ValueError, TypeError):
        return True
    return True
