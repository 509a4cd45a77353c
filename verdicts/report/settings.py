"""The settings that decide what Kafka promises, and those promises in words (the report's and the matrix's)."""

from __future__ import annotations

from typing import Any


def durability_config(scenario: dict[str, Any] | None) -> dict[str, Any]:
    """The settings that decide what Kafka promises, normalised (also the rows of the matrix)."""
    scenario = scenario or {}
    workload = scenario.get("workload") or {}
    producer = (workload.get("producers") or {}).get("config") or {}
    consumers = workload.get("consumers") or {}
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    acks = str(producer.get("acks", producer.get("request.required.acks", "all")))
    idempotent = _truthy(producer.get("enable.idempotence", False)) or bool(producer.get("transactional.id"))
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
    producer = ((scenario.get("workload") or {}).get("producers") or {}).get("config") or {}
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    cfg = durability_config(scenario)
    flush = [(name, topic_cfg.get(name, broker.get(alias, "default")))
             for name, alias in (("flush.messages", "log.flush.interval.messages"),
                                 ("flush.ms", "log.flush.interval.ms"))]
    return [
        ("Kafka", f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})"),
        ("brokers", cluster.get("brokers", "?")),
        ("acks", producer.get("acks", "all (librdkafka default)")),
        ("enable.idempotence", producer.get("enable.idempotence", False)),
        ("retries", producer.get("retries", "default")),
        ("max.in.flight", producer.get("max.in.flight.requests.per.connection", producer.get("max.in.flight", 1000000))),
        ("delivery.timeout.ms", producer.get("delivery.timeout.ms", "default")),
        ("replication factor", cfg["replication factor"]),
        ("min.insync.replicas", cfg["min.insync.replicas"]),
        ("unclean.leader.election.enable", cfg["unclean election"]),
        *[(name, "default (OS page cache)" if value == "default" else value) for name, value in flush],
        ("consumer commit", cfg["commit"]),
        ("faults", ", ".join(f"{f.get('kind')} {f.get('target')}" for f in scenario.get("faults") or []
                             if isinstance(f, dict)) or "none"),
    ]


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


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"
