"""The explorer on a real cluster, on the space whose answer is known (spaces/acks1-known-loss.yaml): trial 1 of
seed 26 puts a slow network and then a leader kill on an acks=1 cluster; the explorer must find the loss, keep it
when the slow network is removed, and write out a scenario with the kill alone.

Three runs of 12 s on a small KRaft cluster (the trial, one candidate, one confirmation), checked by the
reference checker; that a candidate which loses the anomaly is given up is the unit tests' (tests/test_explore.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parent.parent


def test_the_known_answer_space_finds_loss_and_shrinks_it_to_one_leader_kill(tmp_path: Path) -> None:
    out = tmp_path / "explore"
    result = subprocess.run([sys.executable, "-m", "harness.cli", "explore", "spaces/acks1-known-loss.yaml",
                             "--seed", "26", "--trials", "1", "--budget-min", "10", "--out", str(out),
                             "--engine", "python", "--junit", str(tmp_path / "junit.xml")],
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]  # 1: a finding
    data = json.loads((out / "exploration.json").read_text())
    first = data["trials"][0]
    assert first["outcome"] == "finding" and first["anomalies"][0] == "lost", first
    assert [f["kind"] for f in first["faults"]] == ["slow-network", "kill"]
    finding = data["findings"][0]
    shrinking = [t for t in data["trials"] if t["purpose"] == "shrink" and t["finding"] == 1]
    assert [[f["kind"] for f in t["faults"]] for t in shrinking] == [["kill"]], shrinking
    assert "lost" in shrinking[0]["anomalies"]
    shrunk = yaml.safe_load((out / finding["scenario"]).read_text())
    assert [(f["kind"], f["target"]) for f in shrunk["faults"]] == [("kill", "partition-leader")]
    assert finding["rate"] == [1, 1] and shrunk["expect"] == {"lost": ">0"}
    # the runs behind it are ordinary run directories with their reports, linked from the page
    for t in [first, *shrinking]:
        assert (out / t["run_dir"] / "results.json").is_file() and (out / t["report"]).is_file()
    page = (out / "index.html").read_text()
    assert "Finding 1" in page and first["report"] in page
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and int(suite.get("failures", "0")) >= 1
