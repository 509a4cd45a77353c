"""What the brokers say of a share group's progress: per partition, the share-partition start offset (every
record below it acknowledged or archived) and the lag above it, from Admin.listShareGroupOffsets through the
Java program's ``ShareOffsets`` (kafka-clients 4.2 and later; confluent-kafka's admin client has no such call)."""

from __future__ import annotations

import json
import subprocess
from typing import NamedTuple

from clusters.errors import ClusterError
from clusters.java_build import JavaBuildError, java_tool

SHARE_OFFSETS = "io.kchaos.workload.ShareOffsets"
TIMEOUT_S = 60


class ShareOffset(NamedTuple):
    start_offset: int
    lag: int | None   # None: the brokers did not say


def share_offsets(kafka_version: str, bootstrap_servers: str, group: str, topic: str,
                  partitions: int) -> dict[int, ShareOffset]:
    """partition -> its ShareOffset (a partition the group holds no state for is left out); ClusterError, one
    line, when the brokers could not be asked."""
    try:
        cmd = java_tool(kafka_version, SHARE_OFFSETS, [bootstrap_servers, group, topic, str(partitions)])
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (JavaBuildError, subprocess.TimeoutExpired) as e:
        raise ClusterError(f"the share group's offsets could not be asked: {e}") from None
    if done.returncode != 0:
        tail = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise ClusterError(f"the share group's offsets could not be asked: exit {done.returncode}"
                           + (f": {tail[-1][:300]}" if tail else ""))
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return {int(p): ShareOffset(int(v["start_offset"]), None if v["lag"] is None else int(v["lag"]))
                for p, v in answer.items()}
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise ClusterError(f"the share group's offsets: not the answer expected ({e})") from None
