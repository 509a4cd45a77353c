"""The settings that decide what Kafka promises, and those promises in words (the report's and the matrix's)."""

from __future__ import annotations

from typing import Any

from catalogue.faults import fault_kind
from catalogue.producer_settings import ALIASES, effective_producer, producer_client, producer_config


def durability_config(scenario: dict[str, Any] | None) -> dict[str, Any]:
    """The settings that decide what Kafka promises, normalised (also the rows of the matrix)."""
    scenario = scenario or {}
    workload = scenario.get("workload") or {}
    producer = effective_producer(producer_config(scenario) or {}, producer_client(scenario))
    consumers = workload.get("consumers") or {}
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    acks = producer["acks"]
    idempotent = producer["enable.idempotence"] == "true" or bool(workload.get("transactions"))
    unclean = topic_cfg.get("unclean.leader.election.enable", broker.get("unclean.leader.election.enable", False))
    flush_messages = topic_cfg.get("flush.messages", broker.get("log.flush.interval.messages"))
    flush_ms = topic_cfg.get("flush.ms", broker.get("log.flush.interval.ms"))
    flush = []
    if flush_messages is not None:
        flush.append(f"every {flush_messages} msg")
    if flush_ms is not None:
        flush.append(f"every {flush_ms} ms")
    commit = consumers.get("commit", "auto")
    if (consumers.get("config") or {}).get("enable.auto.commit") is not None:
        commit = f"{commit} (enable.auto.commit={consumers['config']['enable.auto.commit']})"
    return {
        "client": producer_client(scenario),
        "metadata": cluster.get("metadata", "zookeeper"),
        "acks": "all" if acks == "-1" else acks,
        "min.insync.replicas": topic.get("min_insync_replicas", "?"),
        "replication factor": topic.get("replication_factor", "?"),
        "unclean election": _truthy(unclean),
        "idempotence": idempotent,
        "flush": ", ".join(flush) or "OS page cache",
        "commit": commit,
    }


def durability_settings(scenario: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Every setting that matters for durability, as (name, value) rows for the report."""
    if not scenario:
        return [("scenario", "unknown (no scenario.yaml)")]
    client = producer_client(scenario)
    named = producer_config(scenario) or {}
    producer = effective_producer(named, client)
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    cfg = durability_config(scenario)
    flush = [(name, topic_cfg.get(name, broker.get(alias, "default")))
             for name, alias in (("flush.messages", "log.flush.interval.messages"),
                                 ("flush.ms", "log.flush.interval.ms"))]
    return [
        ("Kafka", f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})"
                  + "".join(f", then {(f.get('options') or {}).get('to_version', '?')} by a rolling upgrade (the "
                            "timeline's rolling-upgrade band; its detail has each node's step)"
                            for f in scenario.get("faults") or []
                            if isinstance(f, dict) and f.get("kind") == "rolling-upgrade")),
        ("brokers", cluster.get("brokers", "?")),
        ("producer client", client),
        *[(name, value if _named(name, named) else f"{value} ({client} default)") for name, value in producer.items()],
        ("replication factor", cfg["replication factor"]),
        ("min.insync.replicas", cfg["min.insync.replicas"]),
        ("unclean.leader.election.enable", cfg["unclean election"]),
        *[(name, "default (OS page cache)" if value == "default" else value) for name, value in flush],
        ("consumer commit", cfg["commit"]),
        ("faults", ", ".join(f"{f.get('kind')} {f.get('target')}" for f in scenario.get("faults") or []
                             if isinstance(f, dict)) or "none"),
    ]


def client_rows(results: dict[str, Any]) -> list[tuple[str, Any]]:
    """One row per workload role: the client library and version its processes said they ran (through which
    binding, when they said), and the settings they ran with (results.json ``clients``, from the processes' own
    K lines)."""
    rows = []
    for role, info in sorted((results.get("clients") or {}).items()):
        if not isinstance(info, dict):
            continue
        settings = info.get("settings") if isinstance(info.get("settings"), dict) else {}
        shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()) if v not in (None, "None", "null"))
        binding = f" through {info['binding']}" if info.get("binding") else ""
        rows.append((f"{role} client", f"{info.get('client')} {info.get('version')}{binding}"
                     + (f" ({shown})" if shown else "")))
    return rows


def promises(cfg: dict[str, Any]) -> list[str]:
    """What Kafka promises for one durability configuration, in a few short sentences."""
    said = []
    acks, isr, rf = cfg["acks"], cfg["min.insync.replicas"], cfg["replication factor"]
    if acks == "0":
        said.append("acks=0: nothing is acknowledged by a broker, any fault may lose writes")
    elif acks == "1":
        said.append("acks=1: the leader alone acknowledges; a leader that dies before its followers copy "
                    "the tail loses acknowledged writes")
    elif isinstance(isr, int) and isr >= 2:
        said.append(f"acks=all, min.insync={isr}: an acknowledged write is on ≥{isr} replicas; no loss while "
                    f"fewer than {isr} brokers fail at once")
    else:
        said.append("acks=all but min.insync=1: the ISR may shrink to the leader alone, which then acknowledges "
                    "by itself; loss is possible")
    if isinstance(rf, int) and isinstance(isr, int) and rf <= isr and acks == "all":
        said.append(f"RF {rf} ≤ min.insync {isr}: one broker down stops writes")
    if cfg["unclean election"]:
        said.append("unclean election: an out-of-sync replica may become leader and drop acknowledged writes")
    said.append("idempotent: retries neither duplicate nor reorder" if cfg["idempotence"]
                else "not idempotent: retries may duplicate and reorder")
    if cfg["flush"] == "OS page cache":
        said.append("no fsync: power loss on every replica at once can lose acknowledged writes")
    else:
        said.append(f"fsync {cfg['flush']}")
    said.append("consumer commits after processing: at-least-once" if str(cfg["commit"]).startswith("manual")
                else "auto commit: offsets may be committed before processing")
    return said


def _named(setting: str, config: dict[str, Any]) -> bool:
    """The scenario set it (under its name or librdkafka's alias), rather than the client's default deciding."""
    return setting in config or any(ALIASES[alias] == setting for alias in config if alias in ALIASES)


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


def planned_faults(scenario: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The scenario's faults as (kind, target), a nested ``then:`` fault after its outer one."""
    out = []
    for f in (scenario or {}).get("faults") or []:
        while isinstance(f, dict):
            out.append((str(f.get("kind")), str(f.get("target"))))
            f = f.get("then")
    return out


# What a fault of every node does at once: with no fsync, nothing unflushed survives it.
WHOLE_CLUSTER = ("all-brokers", "majority-brokers")
# Loss, and what comes with it: a truncated offset is handed to a later write (divergent), which puts the
# acknowledgements out of seq order (reordered), even from an idempotent producer, and below offsets acknowledged
# before them (send_nonmonotonic).
LOSS = ("lost", "lost_after_read", "divergent", "reordered", "send_nonmonotonic")


def _loses_unsynced(kind: str) -> bool:
    """The fault kind takes what its victims had not yet fsynced (a power loss)."""
    known = fault_kind(kind)
    return known is not None and known.loses_unsynced


def allowance(anomaly: str, cfg: dict[str, Any], faults: list[tuple[str, str]]) -> str | None:
    """The setting that lets ``anomaly`` happen without Kafka breaking a promise, in a few words (``promises``
    says the same in sentences); None when these settings promise it cannot happen."""
    acks, isr = cfg["acks"], cfg["min.insync.replicas"]
    if anomaly in LOSS:
        if acks in ("0", "1"):
            return f"acks={acks}"
        if cfg["unclean election"]:
            return "unclean leader election"
        if not (isinstance(isr, int) and isr >= 2):
            return "acks=all with min.insync.replicas=1"
        if cfg["flush"] == "OS page cache" and any(_loses_unsynced(k) and t in WHOLE_CLUSTER for k, t in faults):
            return "no fsync before a power loss of several brokers"
        return None
    if anomaly == "duplicated":
        return None if cfg["idempotence"] else "retries without idempotence"
    if anomaly == "consumer_skipped":
        return "auto commit" if str(cfg["commit"]).startswith("auto") else None
    if anomaly in ("consumer_redelivered", "unknown"):
        return "at-least-once delivery" if anomaly == "consumer_redelivered" else "timeouts"
    return None
