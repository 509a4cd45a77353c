"""The GitHub workflows: actionlint finds nothing (when it is installed), and the nightly is split into shards
whose runs are kept even when they fail and merged into one matrix and JUnit file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
NIGHTLY = REPO / ".github" / "workflows" / "nightly.yml"
ACTIONLINT = shutil.which("actionlint") or next(
    (str(p) for p in [REPO / ".venv" / "bin" / "actionlint"] if os.access(p, os.X_OK)), None)


@pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed (make lint-workflows installs it)")
def test_actionlint_finds_nothing() -> None:
    result = subprocess.run(["bash", "scripts/lint-workflows.sh"], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_nightly_runs_in_shards_keeps_each_and_merges_them() -> None:
    jobs = yaml.safe_load(NIGHTLY.read_text())["jobs"]
    chaos, merge = jobs["chaos"], jobs["merge"]
    assert "needs.plan.outputs.shards" in str(chaos["strategy"]["matrix"]["shard"])
    assert chaos["strategy"]["fail-fast"] is False
    run = " ".join(str(s.get("run", "")) for s in chaos["steps"])
    assert "make chaos-nightly SHARD=" in run and "GITHUB_STEP_SUMMARY" in run
    upload = next(s for s in chaos["steps"] if "upload-artifact" in str(s.get("uses")))
    assert upload["if"] == "always()"
    assert set(merge["needs"]) == {"plan", "chaos"} and merge["if"].startswith("always()")
    steps = " ".join(str(s.get("run", "")) for s in merge["steps"])
    assert "kchaos matrix shards/*/ --out runs --junit runs/junit.xml" in steps
    assert any("download-artifact" in str(s.get("uses")) for s in merge["steps"])


def test_the_docs_workflow_builds_the_site_strictly_and_keeps_it() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "docs.yml").read_text())
    steps = workflow["jobs"]["site"]["steps"]
    assert any(s.get("run") == "make docs" for s in steps)
    upload = next(s for s in steps if "upload-artifact" in str(s.get("uses")))
    assert upload["with"]["path"] == "site/" and upload["with"]["if-no-files-found"] == "error"
    assert "--strict" in (REPO / "Makefile").read_text().split("\ndocs:")[1].split("\n\n")[0]


def test_the_nightly_sweeps_the_checkers_over_more_generated_histories_than_make_test() -> None:
    steps = yaml.safe_load(NIGHTLY.read_text())["jobs"]["checker-sweep"]["steps"]
    run = " ".join(str(s.get("run", "")) for s in steps)
    assert "KCHAOS_GENERATED_HISTORIES=200" in run and "test_generated_histories_agree" in run
