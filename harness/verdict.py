"""Check a run directory, write results.json and report.html, and say what it means.

Shared by ``kchaos run`` (at the end of a run) and ``kchaos check RUN``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from checkers.history import HistoryError
from checkers.reference import write_results
from harness.errors import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID, HarnessError
from harness.expect import unmet
from harness.report import write_report
from spark_analysis.engine import DEFAULT_ENGINE, check_run_with

SUMMARY = ("acked", "failed", "indeterminate", "lost", "lost_after_read", "duplicated", "unexpected",
           "failed_but_present", "divergent", "reordered", "consumer_skipped", "consumer_redelivered")


def resolved_scenario(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "scenario.yaml"
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise HarnessError(f"{path}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    return data if isinstance(data, dict) else None


def judge(run_dir: Path, engine: str = DEFAULT_ENGINE, spark_master: str | None = None) -> int:
    """Check ``run_dir`` and return the exit code: 0 expectations met, 1 not met, 2 cannot judge.

    ``engine`` is "spark" (the default) or "python" (the reference); ``spark_master`` a Spark cluster URL.
    """
    if not (run_dir / "history").is_dir():
        raise HarnessError(f"{run_dir}: no history/ folder, not a kchaos run directory")
    try:
        results = check_run_with(engine, run_dir, spark_master)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    write_results(run_dir, results)
    scenario = resolved_scenario(run_dir)
    failures = unmet((scenario or {}).get("expect"), results)
    report = write_report(run_dir, results, scenario, failures)
    counts = results["counts"]
    print("  ".join(f"{k} {counts[k]:,}" for k in SUMMARY if k in counts))
    for note in results.get("notes", []):
        print(f"note: {note}")
    print(f"verdict: {'valid' if results['valid'] else 'anomalies found'}; "
          + ("expectations met" if not failures else "expectations NOT met: " + "; ".join(failures)))
    print(f"report: {report}")
    if results.get("cut_short"):
        print("the run was cut short: the verdict cannot be trusted")
        return EXIT_HARNESS
    return EXIT_VALID if not failures else EXIT_INVALID
