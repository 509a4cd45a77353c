"""The producers (``workload.producers``, with ``workload.transactions``) as one part: their typed settings, what
the brokers or their client would refuse of a transactional producer, and their processes, which write the load
and stop when its time is over. The processes and their lines are workloads/producer.py's.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from harness.role_settings import (JAVA_CONFIG, LIBRARY_CONFIG, ROLE_CLIENT, ROLE_CLIENT_VERSION, Client, Release,
                                   Scalar, Strict, Workload)
from harness.roles import RoleRun, TrialSetting
from workloads.producer import ProducerClient
from workloads.txn_policy import DEFAULT_ON_COMMIT_ERROR, ON_COMMIT_ERROR_DESCRIPTION, OnCommitError
from workloads.workload import stop_all

KEY = "producers"
TRANSACTION_MAX_TIMEOUT = ("transaction.max.timeout.ms", 900_000)  # the brokers' bound on transaction.timeout.ms
MESSAGE_TIMEOUTS = ("message.timeout.ms", "delivery.timeout.ms")    # librdkafka's name and its alias


class ProducersModel(Strict):
    """Processes that write sequence-numbered messages and report every acknowledgement."""

    count: int = Field(2, ge=1, le=64, description="producer processes")
    rate: float | None = Field(None, gt=0, description="messages per second per producer; null: unbounded")
    message_bytes: int = Field(100, ge=16, le=1_000_000, description="the size of each message's value")
    client: Client | None = ROLE_CLIENT
    client_version: Release | None = ROLE_CLIENT_VERSION
    config: dict[str, Scalar] = Field({}, description="producer settings both clients read (acks, "
                                      "enable.idempotence, linger.ms, ...), checked by the client before the run")
    librdkafka_config: dict[str, Scalar] = LIBRARY_CONFIG
    java_config: dict[str, Scalar] = JAVA_CONFIG

    @field_validator("config", "librdkafka_config", "java_config")
    @classmethod
    def _acks(cls, config: dict[str, Scalar]) -> dict[str, Scalar]:
        acks = config.get("acks", config.get("request.required.acks"))
        if acks is not None and str(acks) not in {"0", "1", "-1", "all"}:
            raise ValueError(f"acks must be 0, 1, all or -1, not {acks!r}")
        return config


class TransactionsModel(Strict):
    """Each producer writes in transactions under a transactional.id of its own (a replacement fences it)."""

    size: int = Field(10, ge=1, le=100_000, description="messages per transaction, round-robin over partitions")
    abort_probability: float = Field(0.1, ge=0, le=1, description="transactions aborted on purpose")
    timeout_ms: int = Field(60_000, ge=1000, le=900_000, description="transaction.timeout.ms")
    commit_timeout_s: float = Field(10, gt=0, le=600, description="a commit or abort unanswered this long has an "
                                    "unknown outcome (under on_commit_error replace; retry and abort wait on)")
    on_commit_error: OnCommitError = Field(DEFAULT_ON_COMMIT_ERROR, description=ON_COMMIT_ERROR_DESCRIPTION)


def check_timeouts(where: str, config: dict[str, Any], client: Client, timeout_ms: int, key: str,
                   broker_config: dict[str, Any], what: str | None = None) -> None:
    """A transactional producer's time-outs the brokers or librdkafka would refuse, in one line: ``key`` is the
    scenario's key of its transaction.timeout.ms, ``what`` says what that time-out is where it can be a default."""
    lowered = {k: str(v).lower() for k, v in config.items()}
    for name in MESSAGE_TIMEOUTS:
        if client == "librdkafka" and name in lowered and int(lowered[name]) > timeout_ms:
            raise ValueError(f"{where}.config.{name}={lowered[name]} is above {what or f'{key}={timeout_ms}'}: "
                             "librdkafka refuses a message time-out longer than the transaction's")
    name, default = TRANSACTION_MAX_TIMEOUT
    most = int(broker_config.get(name, default))
    if timeout_ms > most:
        raise ValueError(f"{key}={timeout_ms} is above the brokers' {name}={most}: init_transactions would be "
                         "refused")


def check(w: Workload, broker_config: dict[str, Any]) -> None:
    """Transactions need an idempotent producer and a timeout the brokers accept; the harness names them."""
    if w.transactions is None:
        return
    producers = w.role(KEY)
    config = {k: str(v).lower() for k, v in producers.config.items()}
    if "transactional.id" in config:
        raise ValueError(f"{producers.where}.config.transactional.id: the harness sets it itself (one per "
                         "producer) when workload.transactions is on")
    if config.get("acks", config.get("request.required.acks", "all")) not in ("all", "-1"):
        raise ValueError(f"workload.transactions needs {producers.where}.config.acks=all (a transactional "
                         "producer is idempotent)")
    if config.get("enable.idempotence") == "false":
        raise ValueError("workload.transactions needs enable.idempotence: a transactional producer is idempotent")
    check_timeouts(producers.where, config, producers.client, w.transactions.timeout_ms,
                   "workload.transactions.timeout_ms", broker_config)


class ProducersRun(RoleRun):
    """The producers: they write the load and stop when its time is over."""

    def __init__(self, producers: list[ProducerClient]) -> None:
        self.producers = producers
        self.clients = list(producers)

    @classmethod
    def build(cls, trial: TrialSetting) -> "ProducersRun":
        history = trial.history
        w, role = trial.workload, trial.workload.role(KEY)
        txns = w.transactions

        def transactions(name: str) -> dict[str, Any] | None:
            if txns is None:
                return None
            return {"size": txns.size, "abort_probability": txns.abort_probability, "timeout_ms": txns.timeout_ms,
                    "commit_timeout_s": txns.commit_timeout_s,
                    "transactional_id": f"{trial.transactional_prefix}-{name}", "partitions": trial.partitions,
                    "seed": trial.seed, "on_commit_error": txns.on_commit_error}

        return cls([ProducerClient(f"p{i}", trial.bootstrap, trial.topic, role.config, history.sends,
                                   history.clock, w.producers.rate, w.producers.message_bytes,
                                   transactions=transactions(f"p{i}"),
                                   txns=history.txns if txns is not None else None, client=role.client,
                                   kafka_version=trial.brokers.kafka_version, client_version=role.release)
                    for i in range(w.producers.count)])

    def stop_load(self) -> None:
        """Each flushes; what is still in flight becomes ``unknown``."""
        stop_all(self.producers)

    def counts(self) -> dict[str, int]:
        sent = [p.counts for p in self.producers]
        return {"acked": sum(c.ok for c in sent), "failed": sum(c.fail for c in sent),
                "unknown": sum(c.unknown for c in sent)}
