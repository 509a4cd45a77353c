"""clusters/segments.py's reader of the brokers' disks (the Java program's SegmentBatches: Kafka's FileRecords)
against Kafka's own DumpLogSegments on the same real segments.

tests/data/segments/txn-{0,1}/ are broker1's segments of a two-partition topic written by a 3.9.2 cluster:
a transactional producer's four committed transactions (its two aborted ones were purged before they were
sent) with their commit markers, then an idempotent producer's 500 records. Both Kafka versions' builds read
them (the on-disk format is the same; the classes moved to a package of their own in 4.3).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusters.image import kafka_jars
from clusters.kafka_versions import kafka_major
from clusters.segments import read_segment_batches

SEGMENTS = Path(__file__).parent / "data" / "segments"
FILES = sorted(SEGMENTS.glob("txn-*/*.log"))
VERSIONS = ["3.9.2", "4.3.1"]

# DumpLogSegments' names for the header fields -> replica-batches.jsonl's
THEIR_NAMES = {"baseOffset": "base_offset", "lastOffset": "last_offset", "count": "count",
               "producerId": "producer_id", "producerEpoch": "producer_epoch", "baseSequence": "base_sequence",
               "lastSequence": "last_sequence", "partitionLeaderEpoch": "leader_epoch",
               "CreateTime": "create_time_ms"}
THEIR_FLAGS = {"isTransactional": "transactional", "isControl": "control"}


def dump_log_segments(version: str, node: str, files: list[Path]) -> list[dict[str, Any]]:
    """Kafka's own tool over ``files`` (batch headers, no --deep-iteration), its text read back."""
    tool = "org.apache.kafka.tools.DumpLogSegments" if kafka_major(version) >= 4 else "kafka.tools.DumpLogSegments"
    done = subprocess.run(["java", "-Xmx256m", "-cp", f"{kafka_jars(version)}/*", tool, "--files",
                           ",".join(map(str, files))], capture_output=True, text=True, check=True, timeout=120)
    batches, place = [], None
    for line in done.stdout.splitlines():
        if line.startswith("Dumping "):
            found = re.search(r"([^/]+)-(\d+)/\d+\.log$", line)
            assert found, line
            place = {"node": node, "topic": found[1], "partition": int(found[2])}
        elif line.startswith("baseOffset: "):
            pairs = dict(re.findall(r"(\w+): (\S+)", line))
            assert place is not None
            batches.append({**place, **{ours: int(pairs[theirs]) for theirs, ours in THEIR_NAMES.items()},
                            **{ours: pairs[theirs] == "true" for theirs, ours in THEIR_FLAGS.items()}})
    return batches


def ours(version: str, files: dict[str, list[Path]]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_segment_batches(files, version).splitlines()]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_batch_header_reads_as_dump_log_segments_prints_it(version: str) -> None:
    theirs = dump_log_segments(version, "broker1", FILES)
    mine = ours(version, {"broker1": FILES})
    assert mine == theirs
    for partition in (0, 1):  # each: four transactions' batches, each followed by its marker, then one batch
        kinds = [(b["transactional"], b["control"]) for b in mine if b["partition"] == partition]
        assert kinds == [(True, False), (True, True)] * 4 + [(False, False)]
    assert all(b["base_sequence"] == -1 and b["count"] == 1 for b in mine if b["control"])
    assert [b["count"] for b in mine if not b["transactional"]] == [250, 250]
    assert [(b["partition"], b["base_offset"]) for b in mine] == sorted((b["partition"], b["base_offset"])
                                                                       for b in mine)


def test_nodes_come_in_name_order_and_a_node_without_segments_is_left_out() -> None:
    mine = ours(VERSIONS[0], {"broker2": FILES[1:], "broker1": FILES[:1], "broker3": []})
    assert [b["node"] for b in mine] == sorted(b["node"] for b in mine)
    assert {(b["node"], b["partition"]) for b in mine} == {("broker1", 0), ("broker2", 1)}
    assert read_segment_batches({"broker1": []}, VERSIONS[0]) == ""


def test_a_torn_tail_ends_its_segment_with_a_warning_and_keeps_the_batches_before_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A power cut can leave zeroes after the last whole batch; the batches before them are what the disk holds,
    and the other segments are still read."""
    intact = ours(VERSIONS[0], {"broker1": FILES})
    torn = tmp_path / FILES[0].parent.name / FILES[0].name
    torn.parent.mkdir()
    shutil.copyfile(FILES[0], torn)
    with torn.open("ab") as f:
        f.write(bytes(4096))
    mine = ours(VERSIONS[0], {"broker1": [torn, FILES[1]]})
    assert mine == intact
    assert "read up to a corrupt batch" in caplog.text and str(torn) in caplog.text
