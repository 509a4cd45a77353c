"""The build of the project's Java program (workloads/java), per Kafka version, and the command that runs it.

One program holds the Java workload (producer, consumer, reader, pipeline:
workloads/java_client.py) and the reader of the brokers' segment files
(clusters/segments.py), so it is built here, below both stages. Each Kafka
version gets its own build, against its own kafka-clients (a 3.9.2 cluster is
driven and read by the 3.9.2 client): Maven resolves the jars of
workloads/java/pom.xml, javac compiles the sources, and the result is cached
under ``.cache/java-workload/<version>/<digest>/`` (the digest covers the pom
and every source, so an edit rebuilds). ``make setup`` builds ahead of time
(clusters/prepare.py); a missing build is made on first use.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from clusters.image import CACHE_DIR, filled_in_place, recipe_digest, tool_failure
from clusters.kafka_versions import kafka_release

log = logging.getLogger(__name__)

# the program's sources sit with the workload it mostly is; only their path is named here, nothing is imported
JAVA_DIR = Path(__file__).resolve().parent.parent / "workloads" / "java"
POM = JAVA_DIR / "pom.xml"
SOURCES = JAVA_DIR / "src" / "main" / "java"
# the share consumer's sources: compiled only against kafka-clients that have KafkaShareConsumer (4.1 on; kchaos
# runs the role on 4.2 and later, where share groups are generally available)
SHARE_SOURCES = JAVA_DIR / "src" / "share" / "java"
SHARE_CLIENTS = (4, 1)
BUILD_DIR = CACHE_DIR / "java-workload"
# class data sharing for a faster start; a modest heap and the serial collector: a workload process is one of
# several on a 2-core machine next to the brokers, and must not take a quarter of RAM by default
JVM_FLAGS = ("-Xshare:auto", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.logFile=System.err")


class JavaBuildError(RuntimeError):
    """The Java program could not be built: a build tool missing, Maven or javac failed (one line)."""


def source_files(kafka_version: str | None = None) -> list[Path]:
    """The Java sources of the program built for ``kafka_version`` (None: every one, the digest's), sorted by
    name."""
    share = kafka_version is None or kafka_release(kafka_version)[:2] >= SHARE_CLIENTS
    return sorted([*SOURCES.rglob("*.java"), *(SHARE_SOURCES.rglob("*.java") if share else ())],
                  key=lambda p: p.name)


def build_dir(kafka_version: str) -> Path:
    """Where the build of ``kafka_version`` from the current pom and sources lives."""
    digest = recipe_digest(POM.read_bytes(), *(p.read_bytes() for p in source_files()))
    return BUILD_DIR / kafka_version / digest


def _run(cmd: list[str], what: str) -> None:
    """Run a build tool; its failure is one line naming what failed and the tool's last words."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise JavaBuildError(f"{what} failed: {cmd[0]} is not installed (run `make setup`)") from None
    if result.returncode != 0:
        raise JavaBuildError(tool_failure(what, result))


def ensure_built(kafka_version: str) -> Path:
    """The build folder (``libs/``, ``classes/``) of the Java program for ``kafka_version``, built if missing.

    Built in a scratch folder and renamed into place, so two harnesses
    building at once never see a half-built folder.
    """
    target = build_dir(kafka_version)
    if (target / "classes").exists():
        return target
    if shutil.which("mvn") is None or shutil.which("javac") is None:
        raise JavaBuildError("the Java workload needs mvn and javac: run `make setup`")
    log.info("building the Java workload against kafka-clients %s", kafka_version)
    with filled_in_place(target) as scratch:
        _run(["mvn", "-q", "-B", "-f", str(POM), f"-Dkafka.version={kafka_version}",
              "dependency:copy-dependencies", f"-DoutputDirectory={scratch / 'libs'}"],
             f"resolving kafka-clients {kafka_version} from Maven Central")
        _run(["javac", "--release", "17", "-encoding", "UTF-8", "-nowarn", "-cp", f"{scratch / 'libs'}/*",
              "-d", str(scratch / "classes"), *map(str, source_files(kafka_version))],
             f"compiling the Java workload against kafka-clients {kafka_version}")
    return target


def java_tool(kafka_version: str, main_class: str, args: list[str]) -> list[str]:
    """The command that runs ``main_class`` of the program built for ``kafka_version`` (built on first use)."""
    built = ensure_built(kafka_version)
    return ["java", *JVM_FLAGS, "-cp", f"{built / 'classes'}{os.pathsep}{built / 'libs'}/*", main_class, *args]
