"""Kafka's own DumpLogSegments over every broker's copy of a topic, read on the host before teardown.

The brokers' data dirs are host folders (each its own loop-mounted file system), so the tool runs on the
host's JRE with the version's jars from the set-up cache: a broker that is down at the end still has its
disk read. Only the batch headers are printed (no ``--deep-iteration``): base and last offset, producer id,
producer epoch, base sequence and the partition leader epoch that wrote the batch, which is what tells
replicas and duplicates apart (one leader epoch writes one batch at an offset). forensics.segments parses it.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from clusters.config import BROKER_LOG_SUBDIR
from clusters.errors import ClusterError
from clusters.image import kafka_jars
from clusters.kafka_versions import kafka_major
from clusters.node import Node

log = logging.getLogger(__name__)

DUMP_TIMEOUT_S = 300
HEAP = "-Xmx512m"


def dump_class(version: str) -> str:
    """DumpLogSegments moved from core (Scala) to the tools module in Kafka 4."""
    return "org.apache.kafka.tools.DumpLogSegments" if kafka_major(version) >= 4 else "kafka.tools.DumpLogSegments"


def segment_files(node: Node, topics: Iterable[str]) -> list[Path]:
    """The .log segments of ``topics``' partitions on this broker's disk, in partition and offset order."""
    log_dir = node.data_dir / BROKER_LOG_SUBDIR
    wanted = set(topics)
    dirs = [d for d in log_dir.iterdir() if d.is_dir() and d.name.rpartition("-")[0] in wanted] \
        if log_dir.is_dir() else []
    dirs.sort(key=lambda d: (d.name.rpartition("-")[0], int(d.name.rpartition("-")[2] or -1)))
    return [f for d in dirs for f in sorted(d.glob("*.log"))]


def dump_batches(brokers: Iterable[Node], topics: Iterable[str], version: str) -> dict[str, str]:
    """Each broker's DumpLogSegments output for ``topics`` (batch headers), by node name; one JVM per broker, in
    parallel. A broker with no segment of these topics is left out; a tool that fails is a ClusterError."""
    libs = kafka_jars(version)
    topics = list(topics)
    files = {n.name: segment_files(n, topics) for n in brokers}
    jobs = {name: f for name, f in files.items() if f}

    def dump(name: str) -> tuple[str, str]:
        cmd = ["java", HEAP, "-cp", f"{libs}/*", dump_class(version), "--files", ",".join(map(str, jobs[name]))]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ClusterError(f"DumpLogSegments on {name}'s disk: {e}") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ClusterError(f"DumpLogSegments on {name}'s disk exited {done.returncode}: {tail}")
        return name, done.stdout

    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        return dict(pool.map(dump, sorted(jobs)))
