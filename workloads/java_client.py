"""The Java workload program (workloads/java): built per Kafka version, started in a role, asked about settings.

A Java producer or consumer speaks the same line protocol as the Python
processes, so the harness, history and checkers need not know which client ran.
Each Kafka version gets its own build, against its own kafka-clients (a
3.9.2 cluster is driven by the 3.9.2 client); the build and its cache are
clusters/java_build.py's, since the same program reads the brokers' segment
files. ``python -m workloads.java_client`` builds ahead of time; a missing
build is made on first use.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from clusters.java_build import JavaBuildError, ensure_built, java_tool
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4
from workloads.errors import WorkloadError

MAIN_CLASS = "io.kchaos.workload.Main"
CHECK_TIMEOUT_S = 60

Kind = Literal["producer", "consumer"]


def java_command(kafka_version: str, role: str, spec_json: str) -> list[str]:
    """The command of a Java workload process in ``role`` (producer, consumer, reader, pipeline), built on first
    use; a build that fails is a WorkloadError, the workload's one error."""
    try:
        return java_tool(kafka_version, MAIN_CLASS, [role, spec_json])
    except JavaBuildError as e:
        raise WorkloadError(str(e)) from None


@dataclass(frozen=True)
class ConfigCheck:
    """What the Java client of one version says of a scenario's settings."""

    unknown: list[str]          # names the client does not define (it would ignore them with a warning)
    error: str | None           # the ConfigException message for a bad value or combination
    effective: dict[str, str]   # the durability settings it would run with (its defaults filled in)


def check_config(kafka_version: str, kind: Kind, config: dict[str, Any]) -> ConfigCheck:
    """Ask the Java client of ``kafka_version`` about ``config`` (Java property names) for a ``kind`` client."""
    return _check(kafka_version, kind, json.dumps(config, sort_keys=True))


@lru_cache(maxsize=256)
def _check(kafka_version: str, kind: Kind, config_json: str) -> ConfigCheck:
    cmd = [*java_command(kafka_version, "check-config", kind), config_json]  # Main check-config <kind> <json>
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise WorkloadError(f"checking {kind} settings with the Java client {kafka_version} took over "
                            f"{CHECK_TIMEOUT_S}s") from None
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = [line for line in result.stderr.strip().splitlines() if line.strip()][-1:]
        raise WorkloadError(f"checking {kind} settings with the Java client {kafka_version} failed "
                            f"(exit {result.returncode}){': ' + tail[0] if tail else ''}")
    data = json.loads(lines[-1])
    return ConfigCheck(list(data["unknown"]), data["error"], {str(k): str(v) for k, v in data["effective"].items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Java workload program for Kafka versions.")
    parser.add_argument("--kafka-version", action="append",
                        help=f"repeat for several (default: {DEFAULT_KAFKA_VERSION} and {NEWEST_KAFKA_4})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        for version in args.kafka_version or [DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4]:
            print(ensure_built(version))
    except JavaBuildError as e:
        print(f"kchaos: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
