"""The reliability matrix: every run under RUNS_ROOT, one row per durability configuration, one column per fault.

``kchaos matrix RUNS_ROOT`` reads RUNS_ROOT/<scenario>/<timestamp>/scenario.yaml
and results.json of every finished run and writes RUNS_ROOT/index.html
(links relative to RUNS_ROOT; nothing on the page depends on when it was written). A
cell adds up lost and duplicated messages over its runs, is coloured by the
worst verdict among them and links to each run's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from verdicts.expect import NOT_JUDGED, UNMET, Assessment, assess
from rundir.documents import read_results, read_scenario, write_atomically
from rundir.layout import INDEX, REPORT, RESULTS, SCENARIO, STAMP_FORMAT, RunDir
from rundir.lines import HistoryError
from verdicts.report import durability_config, promises, templates


# worst first: a cell takes the colour of its worst run
VERDICTS = {
    "unmet": ("expectations not met", "the scenario expected something else: a regression or a surprise"),
    "unjudged": ("not judged", "the run proved nothing (cut short, no fault took effect), or an expectation "
                               "depends on messages its final read could not verify"),
    "anomalies": ("anomalies, as expected", "Kafka lost or duplicated data, and the scenario said it would"),
    "valid": ("valid", "no anomaly"),
}
ORDER = list(VERDICTS)


@dataclass
class Run:
    scenario: str
    stamp: str
    path: Path
    link: str  # relative to RUNS_ROOT
    config: dict[str, Any]
    faults: str
    verdict: str
    lost: int
    duplicated: int
    counts: dict[str, int]
    unmet: list[str]


@dataclass
class Cell:
    runs: list[Run] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.runs)

    @property
    def duplicated(self) -> int:
        return sum(r.duplicated for r in self.runs)

    @property
    def verdict(self) -> str:
        return min((r.verdict for r in self.runs), key=ORDER.index)


def fault_kinds(scenario: dict[str, Any]) -> str:
    kinds = sorted({str(f.get("kind")) for f in scenario.get("faults") or [] if isinstance(f, dict)})
    return " + ".join(kinds) or "no faults"


def verdict_of(results: dict[str, Any], assessment: Assessment) -> str:
    """A run's cell colour, from the one rule ``kchaos check`` and the nightly's exit codes follow."""
    if assessment.outcome == UNMET:
        return "unmet"
    if assessment.outcome == NOT_JUDGED:
        return "unjudged"
    return "valid" if results.get("valid") else "anomalies"


def find_runs(root: Path) -> tuple[list[Run], list[str]]:
    """Every run directory under root with a scenario.yaml and a results.json; and what was skipped, why."""
    runs, skipped = [], []
    for results_path in sorted(root.glob(f"*/*/{RESULTS}")):
        run = RunDir(results_path.parent)
        rel = run.path.relative_to(root)
        try:
            results = read_results(run)
            scenario = read_scenario(run)
        except (OSError, HistoryError) as e:
            skipped.append(f"{rel}: {e}")
            continue
        if scenario is None:
            skipped.append(f"{rel}: no {SCENARIO}")
            continue
        assessment = assess(scenario.get("expect"), results, scenario)
        counts = results["counts"]
        link = rel / (REPORT if run.report.is_file() else RESULTS)
        runs.append(Run(scenario=str(scenario.get("name", rel.parts[0])), stamp=rel.parts[-1], path=run.path,
                        link=link.as_posix(), config=durability_config(scenario), faults=fault_kinds(scenario),
                        verdict=verdict_of(results, assessment), lost=int(counts.get("lost", 0)),
                        duplicated=int(counts.get("duplicated", 0)), counts=counts,
                        unmet=assessment.unmet + assessment.not_judged))
    return runs, skipped


def _config_key(config: dict[str, Any]) -> tuple:
    return tuple(str(v) for v in config.values())


def build_matrix(runs: list[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows (one per configuration, strongest acks last) and the fault columns."""
    columns = sorted({r.faults for r in runs}, key=lambda f: (f == "no faults", f))
    rows: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        row = rows.setdefault(_config_key(r.config), {"config": r.config, "cells": {},
                                                      "promises": promises(r.config)})
        row["cells"].setdefault(r.faults, Cell()).runs.append(r)
    acks_rank = {"0": 0, "1": 1, "all": 2}
    ordered = sorted(rows.values(), key=lambda row: (acks_rank.get(str(row["config"]["acks"]), 3),
                                                     _config_key(row["config"])))
    for i, row in enumerate(ordered, 1):
        row["id"] = f"C{i}"
    return ordered, columns


def newest_run(runs: list[Run]) -> str:
    """When the newest run started (from its stamp): the page says this, not when it was written, so the same
    runs always make the same page (a merged nightly's is byte for byte an unsharded one's)."""
    started = []
    for r in runs:
        try:
            started.append(datetime.strptime(r.stamp, STAMP_FORMAT).replace(tzinfo=timezone.utc))
        except ValueError:
            continue
    return max(started).strftime("%Y-%m-%d %H:%M UTC") if started else "unknown"


def write_matrix(root: Path) -> Path:
    """Write root/index.html from every finished run under root; the same runs give the same bytes."""
    root = Path(root)
    runs, skipped = find_runs(root)
    rows, columns = build_matrix(runs)
    page = templates().get_template("matrix.html.j2").render(
        rows=rows, columns=columns, verdicts=VERDICTS, runs=len(runs), skipped=skipped,
        settings=list(rows[0]["config"]) if rows else [], newest=newest_run(runs))
    return write_atomically(root / INDEX, page)
