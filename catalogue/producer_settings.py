"""What a producer really runs with: the scenario's settings over its client's own defaults.

A scenario that does not name idempotence tests what an application that
does not name it gets, and that differs by client: librdkafka is not
idempotent unless asked, Kafka's Java producer (3.0 and later) is, unless a
setting it cannot honour says otherwise (acks other than all, retries 0, more
than 5 requests in flight: then it quietly turns idempotence off, since 3.2;
Kafka 4's refuses more than 5 in flight instead, and scenario validation
says so before a run).
The producers, the checker's promises, the report and the matrix all read it from here.
"""

from __future__ import annotations

from typing import Any

LIBRDKAFKA = "librdkafka"
JAVA = "java"
# librdkafka's names for what Kafka's Java client calls otherwise (both are accepted by librdkafka)
ALIASES = {"request.required.acks": "acks", "message.timeout.ms": "delivery.timeout.ms",
           "max.in.flight": "max.in.flight.requests.per.connection", "message.send.max.retries": "retries"}
DEFAULTS = {
    LIBRDKAFKA: {"acks": "all", "enable.idempotence": "false", "retries": "2147483647",
                 "max.in.flight.requests.per.connection": "1000000", "delivery.timeout.ms": "300000"},
    JAVA: {"acks": "all", "retries": "2147483647", "max.in.flight.requests.per.connection": "5",
           "delivery.timeout.ms": "120000"},
}
IDEMPOTENT_MAX_IN_FLIGHT = 5
SETTINGS = ("acks", "enable.idempotence", "retries", "max.in.flight.requests.per.connection", "delivery.timeout.ms")


def effective_producer(config: dict[str, Any], client: str = LIBRDKAFKA) -> dict[str, str]:
    """acks, enable.idempotence, retries, max.in.flight.requests.per.connection and delivery.timeout.ms as the
    producer runs them (strings; acks ``all`` for -1), from its ``config`` and its ``client``'s defaults."""
    named = {ALIASES.get(k, k): _text(v) for k, v in config.items()}
    out = {**DEFAULTS[client if client in DEFAULTS else LIBRDKAFKA],
           **{k: v for k, v in named.items() if k in SETTINGS}}
    if out["acks"] == "-1":
        out["acks"] = "all"
    transactional = bool(named.get("transactional.id"))
    if "enable.idempotence" in named:
        idempotent = named["enable.idempotence"] == "true"
    elif client == JAVA:
        idempotent = transactional or (
            out["acks"] == "all" and out["retries"] != "0"
            and _int(out["max.in.flight.requests.per.connection"]) <= IDEMPOTENT_MAX_IN_FLIGHT)
    else:
        idempotent = transactional
    out["enable.idempotence"] = "true" if idempotent else "false"
    if idempotent and "max.in.flight.requests.per.connection" not in named:
        out["max.in.flight.requests.per.connection"] = str(IDEMPOTENT_MAX_IN_FLIGHT)  # librdkafka lowers it too
    return out


def producer_client(scenario: dict[str, Any]) -> str:
    """The client a resolved scenario.yaml's producers ran (librdkafka when it does not say)."""
    workload = scenario.get("workload") if isinstance(scenario.get("workload"), dict) else {}
    producers = workload.get("producers") if isinstance(workload.get("producers"), dict) else {}
    client = producers.get("client") or workload.get("client") or LIBRDKAFKA
    return client if client in DEFAULTS else LIBRDKAFKA


def producer_config(scenario: dict[str, Any]) -> dict[str, Any] | None:
    """The producers' settings in a resolved scenario.yaml: config plus their client's own map (None: no config)."""
    workload = scenario.get("workload")
    producers = workload.get("producers") if isinstance(workload, dict) else None
    if not isinstance(producers, dict) or not isinstance(producers.get("config"), dict):
        return None
    own = producers.get(f"{producer_client(scenario)}_config")
    return {**producers["config"], **(own if isinstance(own, dict) else {})}


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip().lower()


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0
