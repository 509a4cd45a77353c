"""What a producer runs with when the scenario does not say: each client's own defaults decide the promises."""

from __future__ import annotations

from typing import Any

import pytest

from catalogue.producer_settings import effective_producer, producer_config
from checkers.anomalies import Promises, promises_from_scenario


@pytest.mark.parametrize("config, client, idempotent, in_flight", [
    ({}, "librdkafka", "false", "1000000"),
    ({}, "java", "true", "5"),                                   # Java 3.0+: idempotent by default
    ({"acks": 1}, "java", "false", "5"),                         # 3.2+: quietly off when acks is not all
    ({"acks": "-1", "retries": 0}, "java", "false", "5"),
    ({"max.in.flight.requests.per.connection": 6}, "java", "false", "6"),
    ({"acks": 1, "enable.idempotence": True}, "java", "true", "5"),  # named: what was asked (the client refuses it)
    ({"enable.idempotence": "true"}, "librdkafka", "true", "5"),  # librdkafka lowers in-flight to 5 itself
    ({"transactional.id": "t"}, "librdkafka", "true", "5"),
    ({"request.required.acks": 1, "max.in.flight": 1.0}, "librdkafka", "false", "1"),
])
def test_effective_idempotence_and_in_flight(config: dict[str, Any], client: str, idempotent: str,
                                             in_flight: str) -> None:
    effective = effective_producer(config, client)
    assert (effective["enable.idempotence"], effective["max.in.flight.requests.per.connection"]) == (idempotent,
                                                                                                    in_flight)


def test_acks_and_delivery_timeout_by_client_and_alias() -> None:
    assert effective_producer({"request.required.acks": -1, "message.timeout.ms": 3000}) == {
        "acks": "all", "enable.idempotence": "false", "retries": "2147483647",
        "max.in.flight.requests.per.connection": "1000000", "delivery.timeout.ms": "3000"}
    assert effective_producer({}, "java")["delivery.timeout.ms"] == "120000"


def scenario(client: str | None, config: dict[str, Any], **maps: dict[str, Any]) -> dict[str, Any]:
    producers: dict[str, Any] = {"config": config, **maps}
    workload: dict[str, Any] = {"producers": producers}
    if client is not None:
        workload["client"] = client
    return {"workload": workload}


def test_a_java_producer_that_names_nothing_promises_no_duplicates_and_order() -> None:
    assert promises_from_scenario(scenario("java", {}))[0] == Promises(True, True)
    assert promises_from_scenario(scenario(None, {}))[0] == Promises(False, False)
    assert promises_from_scenario(scenario("java", {"acks": 1}))[0] == Promises(False, False)


def test_the_producers_own_client_and_its_own_map_count() -> None:
    s = scenario("librdkafka", {"acks": "all"}, java_config={"max.in.flight.requests.per.connection": 1},
                 librdkafka_config={"queue.buffering.max.messages": 10})
    assert producer_config(s) == {"acks": "all", "queue.buffering.max.messages": 10}
    s["workload"]["producers"]["client"] = "java"
    assert producer_config(s) == {"acks": "all", "max.in.flight.requests.per.connection": 1}
    assert promises_from_scenario(s)[0] == Promises(True, True)


@pytest.mark.parametrize("version", ["3.9.2", "4.3.1"])
@pytest.mark.parametrize("config", [{}, {"acks": "1"}, {"retries": 0}, {"max.in.flight.requests.per.connection": 6},
                                    {"acks": "-1", "max.in.flight.requests.per.connection": 1},
                                    {"enable.idempotence": "false"}, {"transactional.id": "t"}])
def test_what_the_checker_assumes_of_the_java_producer_is_what_it_says(version: str, config: dict[str, Any]) -> None:
    """The rule above against the Java client's own resolved ProducerConfig, for both versions kchaos runs."""
    from workloads.java_client import check_config
    answer = check_config(version, "producer", config)
    if answer.error is not None:  # Kafka 4 refuses more than 5 in flight unless idempotence is turned off by name
        assert version.startswith("4.") and "max.in.flight.requests.per.connection" in config
        return
    said = answer.effective
    said["acks"] = "all" if said["acks"] == "-1" else said["acks"]
    assumed = effective_producer(config, "java")
    assert {k: said[k] for k in ("enable.idempotence", "acks", "retries")} == {
        k: assumed[k] for k in ("enable.idempotence", "acks", "retries")}
    assert said["max.in.flight.requests.per.connection"] == assumed["max.in.flight.requests.per.connection"]
