"""Every supported Kafka release, read by the forensics from its own real logs.

tests/data/versions/<mode>-<version>/ are acks1-leader-kill runs on that release (`kchaos run
scenarios/acks1-leader-kill.yaml --set cluster.kafka_version=V --set cluster.metadata=M`), cut down by
scripts/cut_version_logs.py to the loggers the forensics read and one partition's story. Kafka rewords its
log lines between releases (3.5 says "Previous leader epoch was 0." where 3.6 on say "Previous leader None and
previous leader epoch was 0.", and glues "]Loading producer state"): a line that looks like one the forensics
read but that no template reads fails here, for the release that wrote it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from clusters.kafka_versions import SUPPORTED_KAFKA_VERSIONS
from forensics.nodelog import read_lines
from forensics.parse import parse_node_log
from forensics.templates import TEMPLATES, match
from rundir.documents import wall_start

DATA = Path(__file__).parent / "data" / "versions"
CASES = sorted(p for p in DATA.iterdir() if p.is_dir())
# messages that hold a template's cheap first test but are none of the forensics' business, in every release
UNRELATED = re.compile(r"^Loading logs from log dirs |Rewriting /data/kafka/meta\.properties|"
                       r"Fatal error during KafkaServer startup|"
                       r"\] (?:Start|End) processing (?:authorizer futures|enable request processing future)$")
# what a leader kill leaves in any release's logs, that the chains are built from
LEADER_KILL = {"process_start", "started", "become_leader", "become_follower", "truncate"}


def version_of(case: Path) -> tuple[str, str]:
    cluster = yaml.safe_load((case / "scenario.yaml").read_text())["cluster"]
    return cluster["kafka_version"], cluster["metadata"]


def test_every_supported_release_has_real_logs_of_each_mode_it_has() -> None:
    covered = {version_of(case) for case in CASES}
    for version in SUPPORTED_KAFKA_VERSIONS:
        modes = ("kraft",) if version.startswith("4.") else ("zookeeper", "kraft")
        missing = [m for m in modes if (version, m) not in covered]
        assert not missing, f"no logs of Kafka {version} in {', '.join(missing)} mode under {DATA}"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_every_line_that_looks_read_is_read(case: Path) -> None:
    unread = [f"{log.name}:{line.number}: {line.message[:160]}"
              for log in sorted((case / "logs").glob("*.log")) for line in read_lines(log)
              if match(line.message) is None and not UNRELATED.search(line.message)
              and any(n in line.message for t in TEMPLATES for n in t.needles)]
    assert not unread, f"Kafka {version_of(case)[0]} wrote lines no template reads:\n" + "\n".join(unread[:10])


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.name)
def test_a_leader_kill_is_told_in_every_release(case: Path) -> None:
    started = wall_start(yaml.safe_load((case / "scenario.yaml").read_text()))
    assert started is not None
    events = [e for log in sorted((case / "logs").glob("*.log")) for e in parse_node_log(log.stem, log, started)]
    kinds = {e["kind"] for e in events}
    assert LEADER_KILL <= kinds, f"missing {sorted(LEADER_KILL - kinds)}"
    assert kinds & {"isr_shrink", "isr_update", "isr_expand"}, "no ISR change"
    re_elected = [e for e in events if e["kind"] == "become_leader" and e["leader_epoch"] > 0]
    assert re_elected and all(isinstance(e["previous_leader_epoch"], int) for e in re_elected)
    told = [e for e in events if e["kind"] == "truncate" and e.get("reason") is not None and e["to_offset"] > 0]
    assert told, "no truncation with the fetcher's reason for it"
