"""The Java workload program (workloads/java): built per Kafka version, started in a role, asked about settings.

A Java producer or consumer speaks the same line protocol as the Python
processes, so the harness, history and checkers do not change (issue #19).
Each Kafka version gets its own build, against its own kafka-clients (a
3.9.2 cluster is driven by the 3.9.2 client): Maven resolves the jars of
workloads/java/pom.xml, javac compiles the sources, and the result is cached
under ``.cache/java-workload/<version>/<digest>/`` (the digest covers the pom
and every source, so an edit rebuilds). ``python -m workloads.java_client``
(make setup) builds ahead of time; a missing build is made on first use.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from clusters.image import CACHE_DIR, recipe_digest
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4
from workloads.errors import WorkloadError

log = logging.getLogger(__name__)

JAVA_DIR = Path(__file__).resolve().parent / "java"
POM = JAVA_DIR / "pom.xml"
SOURCES = JAVA_DIR / "src" / "main" / "java"
BUILD_DIR = CACHE_DIR / "java-workload"
MAIN_CLASS = "io.kchaos.workload.Main"
# class data sharing for a faster start; a modest heap and the serial collector: a workload process is one of
# several on a 2-core machine next to the brokers, and must not take a quarter of RAM by default
JVM_FLAGS = ("-Xshare:auto", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err")
CHECK_TIMEOUT_S = 60

Kind = Literal["producer", "consumer"]


def source_files() -> list[Path]:
    """Every Java source of the program, sorted by name (the digest's order)."""
    return sorted(SOURCES.rglob("*.java"), key=lambda p: p.name)


def build_dir(kafka_version: str) -> Path:
    """Where the build of ``kafka_version`` from the current pom and sources lives."""
    digest = recipe_digest(POM.read_bytes(), *(p.read_bytes() for p in source_files()))
    return BUILD_DIR / kafka_version / digest


def _run(cmd: list[str], what: str) -> None:
    """Run a build tool; its failure is one line naming what failed and the tool's last words."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise WorkloadError(f"{what} failed: {cmd[0]} is not installed (run `make setup`)") from None
    if result.returncode != 0:
        tail = [line for line in (result.stderr + result.stdout).strip().splitlines() if line.strip()][-5:]
        raise WorkloadError(f"{what} failed (exit {result.returncode}): {' | '.join(tail)}")


def ensure_built(kafka_version: str) -> Path:
    """The build folder (``libs/``, ``classes/``) of the Java workload for ``kafka_version``, built if missing.

    Built in a scratch folder and renamed into place, so two harnesses
    building at once never see a half-built folder.
    """
    target = build_dir(kafka_version)
    if (target / "classes").exists():
        return target
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        raise WorkloadError("the Java workload needs mvn and javac: run `make setup`")
    log.info("building the Java workload against kafka-clients %s", kafka_version)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        _run(["mvn", "-q", "-B", "-f", str(POM), f"-Dkafka.version={kafka_version}",
              "dependency:copy-dependencies", f"-DoutputDirectory={scratch / 'libs'}"],
             f"resolving kafka-clients {kafka_version} from Maven Central")
        _run(["javac", "--release", "17", "-encoding", "UTF-8", "-nowarn", "-cp", f"{scratch / 'libs'}/*",
              "-d", str(scratch / "classes"), *map(str, source_files())],
             f"compiling the Java workload against kafka-clients {kafka_version}")
        try:
            scratch.rename(target)
        except OSError:  # another harness finished first: its build is as good
            pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def java_command(kafka_version: str, role: str, spec_json: str) -> list[str]:
    """The command of a Java workload process in ``role`` (producer, consumer, reader, pipeline)."""
    return java_tool(kafka_version, MAIN_CLASS, [role, spec_json])


def java_tool(kafka_version: str, main_class: str, args: list[str]) -> list[str]:
    """The command that runs ``main_class`` of the program built for ``kafka_version`` (built on first use)."""
    built = ensure_built(kafka_version)
    return ["java", *JVM_FLAGS, "-cp", f"{built / 'classes'}{os.pathsep}{built / 'libs'}/*", main_class, *args]


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
    except WorkloadError as e:
        print(f"kchaos: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
