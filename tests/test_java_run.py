"""A whole trial on Kafka's Java client: `--set workload.client=java` end to end, and a mixed one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers import jsonl
from test_run import KCHAOS, LOSING, only_run_dir

pytestmark = pytest.mark.cluster


def test_a_short_losing_run_on_the_java_client_is_caught_and_says_which_client_ran(tmp_path: Path) -> None:
    result = subprocess.run([*KCHAOS, "run", *LOSING, "--set", "workload.client=java", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]  # the scenario expects lost > 0
    run = only_run_dir(tmp_path)
    results = json.loads((run / "results.json").read_text())
    clients = results["clients"]
    assert {role: (c["client"], c["version"]) for role, c in clients.items()} == {
        "producer": ("java", "3.9.2"), "consumer": ("java", "3.9.2"), "reader": ("java", "3.9.2")}
    # acks=1 as the file says: the Java producer then turns its default idempotence off, and says so
    assert clients["producer"]["settings"]["acks"] == "1"
    assert clients["producer"]["settings"]["enable.idempotence"] == "false"
    assert results["final_read_complete"] is True and results["counts"]["lost"] > 0
    assert results["counts"]["reads_live"] > 0
    reads = jsonl(run / "history" / "reads.jsonl")
    assert {r["consumer"] for r in reads if r["phase"] == "final"} == {"final-reader"}
    assert {r["isolation"] for r in reads if r["phase"] == "live"} == {"read_uncommitted"}  # the Java default
    sends = jsonl(run / "history" / "sends.jsonl")
    assert all(s["offset"] is not None for s in sends if s["status"] == "ok")
    assert "producer client" in (run / "report.html").read_text()


def test_java_producers_with_librdkafka_consumers_and_read_back(tmp_path: Path) -> None:
    # the roles' clients mixed is what this proves, not loss: a quiet 10 s run (the losing one is the test above)
    result = subprocess.run([*KCHAOS, "run", *LOSING, "--set", "workload.producers.client=java",
                             "--set", "workload.duration_s=10", "--set", "faults=[]", "--set", "expect={}",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    results = json.loads((only_run_dir(tmp_path) / "results.json").read_text())
    assert {role: c["client"] for role, c in results["clients"].items()} == {"producer": "java",
                                                                             "consumer": "librdkafka"}
    assert results["final_read_complete"] is True and results["counts"]["acked"] > 0
