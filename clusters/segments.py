"""Every broker's record batch headers of the workload's topics, read on the host before teardown.

The brokers' data dirs are host folders (each its own loop-mounted file system), so the reading runs on the
host's JRE: a broker that is down at the end still has its disk read. The reader is the Java workload
program's ``SegmentBatches``: Kafka's own ``FileRecords`` (what DumpLogSegments iterates) from the
kafka-clients of the cluster's version, printing each batch header as the JSON line
history/replica-batches.jsonl holds (rundir/replica_batches.py): base and last offset, producer id, producer
epoch, base sequence and the partition leader epoch that wrote the batch, which is what tells replicas and
duplicates apart (one leader epoch writes one batch at an offset).

The headers are read by the program rather than by DumpLogSegments, whose text output (hundreds of bytes a
batch) costs a JVM per node and a parse here in every run's overhead (benchmarks/README.md).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterable
from pathlib import Path

from clusters.config import BROKER_LOG_SUBDIR
from clusters.errors import ClusterError
from clusters.java_build import JavaBuildError, java_tool
from clusters.node import Node

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 300
SEGMENT_BATCHES = "io.kchaos.workload.SegmentBatches"


def segment_files(node: Node, topics: Iterable[str]) -> list[Path]:
    """The .log segments of ``topics``' partitions on this broker's disk, in topic, partition and offset order."""
    log_dir = node.data_dir / BROKER_LOG_SUBDIR
    wanted = set(topics)
    dirs = [d for d in log_dir.iterdir() if d.is_dir() and d.name.rpartition("-")[0] in wanted] \
        if log_dir.is_dir() else []
    dirs.sort(key=lambda d: (d.name.rpartition("-")[0], int(d.name.rpartition("-")[2] or -1)))
    return [f for d in dirs for f in sorted(d.glob("*.log"))]


def read_batches(brokers: Iterable[Node], topics: Iterable[str], version: str) -> str:
    """Every batch header of ``topics`` on the brokers' disks, as JSON lines by node, topic, partition and
    offset. A broker with no segment of these topics is left out."""
    topics = list(topics)
    return read_segment_batches({n.name: segment_files(n, topics) for n in brokers}, version)


def read_segment_batches(files: dict[str, list[Path]], version: str) -> str:
    """The batch headers of each node's segment files (each in ``<topic>-<partition>/`` as on a broker's disk),
    as JSON lines in node order, then the files' order; one JVM for all. A reader that fails is a ClusterError;
    a segment read only up to a torn batch is a warning (its batches before it are kept)."""
    args = [f"{node}={','.join(map(str, files[node]))}" for node in sorted(files) if files[node]]
    if not args:
        return ""
    try:
        cmd = java_tool(version, SEGMENT_BATCHES, args)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired, JavaBuildError) as e:
        raise ClusterError(f"reading the brokers' segments: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClusterError(f"reading the brokers' segments exited {done.returncode}: {tail}")
    for line in done.stderr.splitlines():
        if line.startswith("kchaos segment-batches: "):
            log.warning("%s", line.removeprefix("kchaos "))
    return done.stdout
