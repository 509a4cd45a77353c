"""A minimal self-contained HTML report: the verdict, the counts and the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

VIOLATIONS = ("lost", "lost_after_read", "duplicated", "unexpected", "failed_but_present", "divergent",
              "reordered", "consumer_skipped")


def durability_settings(scenario: dict[str, Any] | None) -> list[tuple[str, Any]]:
    if not scenario:
        return [("scenario", "unknown (no scenario.yaml)")]
    producer = scenario["workload"]["producers"]["config"]
    cluster, topic, consumers = scenario["cluster"], scenario["topic"], scenario["workload"]["consumers"]
    broker, topic_cfg = cluster.get("broker_config", {}), topic.get("config", {})
    return [
        ("Kafka", f"{cluster['kafka_version']} ({cluster['metadata']})"),
        ("acks", producer.get("acks", "all (librdkafka default)")),
        ("enable.idempotence", producer.get("enable.idempotence", False)),
        ("retries", producer.get("retries", "default")),
        ("max.in.flight", producer.get("max.in.flight.requests.per.connection", producer.get("max.in.flight", 1000000))),
        ("replication factor", topic["replication_factor"]),
        ("min.insync.replicas", topic["min_insync_replicas"]),
        ("unclean.leader.election.enable",
         topic_cfg.get("unclean.leader.election.enable", broker.get("unclean.leader.election.enable", False))),
        ("flush", topic_cfg.get("flush.messages", broker.get("log.flush.interval.messages", "default (OS page cache)"))),
        ("consumer commit", consumers["commit"]),
        ("faults", ", ".join(f"{f['kind']} {f['target']}" for f in scenario.get("faults", [])) or "none"),
    ]


def write_report(run_dir: Path, results: dict[str, Any], scenario: dict[str, Any] | None,
                 unmet: list[str]) -> Path:
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape())
    html = env.get_template("report.html.j2").render(
        name=(scenario or {}).get("name", run_dir.name), description=(scenario or {}).get("description", ""),
        results=results, unmet=unmet, expect=(scenario or {}).get("expect") or {},
        settings=durability_settings(scenario), violations=VIOLATIONS)
    path = run_dir / "report.html"
    path.write_text(html)
    return path
