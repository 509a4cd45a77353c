"""The reliability matrix: every run under RUNS_ROOT, one row per configuration, one column per fault.

``kchaos matrix RUNS_ROOT`` reads RUNS_ROOT/<scenario>/<timestamp>/scenario.yaml
and results.json of every finished run and writes RUNS_ROOT/index.html
(links relative to RUNS_ROOT; nothing on the page depends on when it was written).
A row is a configuration: Kafka version and metadata mode, the clients that
ran (results.json ``clients``) and the durability settings; a column is the
faults, each by kind and target. A cell says how many of its runs met their
expectations and what share of the acknowledged writes they lost and
duplicated, is coloured by the worst judged verdict among them (grey only when
no run could be judged: a run cut short proves nothing, it does not fail) and
links to each run's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from verdicts.expect import NOT_JUDGED, UNMET, Assessment, assess, release_numbers
from rundir.documents import read_results, read_scenario, write_atomically
from rundir.layout import INDEX, REPORT, RESULTS, SCENARIO, STAMP_FORMAT, RunDir
from rundir.lines import HistoryError
from verdicts.report import TARGET_WORDS, durability_config, percent, planned_faults, promises, templates


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

    @property
    def judged(self) -> bool:
        return self.verdict != "unjudged"

    @property
    def acked(self) -> int:
        return int(self.counts.get("acked", 0))


@dataclass
class Cell:
    runs: list[Run] = field(default_factory=list)

    @property
    def judged(self) -> list[Run]:
        """The runs that proved something: the rates and the colour come from these alone."""
        return [r for r in self.runs if r.judged]

    @property
    def lost(self) -> int:
        return sum(r.lost for r in self.judged)

    @property
    def duplicated(self) -> int:
        return sum(r.duplicated for r in self.judged)

    @property
    def acked(self) -> int:
        return sum(r.acked for r in self.judged)

    @property
    def met(self) -> int:
        return sum(1 for r in self.runs if r.verdict in ("valid", "anomalies"))

    @property
    def verdict(self) -> str:
        return min((r.verdict for r in self.judged), key=ORDER.index) if self.judged else "unjudged"

    def rate(self, name: str) -> str:
        """Lost or duplicated as a share of the acknowledged writes of the judged runs."""
        return percent(getattr(self, name), self.acked)


def fault_column(scenario: dict[str, Any]) -> str:
    """The faults of a scenario by kind and target ("kill partition-leader"; a nested one after "→")."""
    columns = []
    for f in scenario.get("faults") or []:
        if isinstance(f, dict):
            nested = planned_faults({"faults": [f]})
            columns.append(" → ".join(f"{kind} {target}" for kind, target in nested))
    return " + ".join(sorted(columns)) or "no faults"


def settings_lines(cfg: dict[str, Any]) -> list[str]:
    """A row's durability settings in three short lines, the same order in every row so a column scans."""
    flush = "no fsync" if cfg["flush"] == "OS page cache" else f"fsync {cfg['flush']}"
    return [f"acks={cfg['acks']} · min ISR {cfg['min.insync.replicas']} · RF {cfg['replication factor']}",
            ("idempotent" if cfg["idempotence"] else "not idempotent")
            + (" · unclean election" if cfg["unclean election"] else ""),
            f"{flush} · {cfg['commit']} commit"]


def fault_header(column: str) -> list[tuple[str, str, str]]:
    """A fault column's header as (joiner, kind, target in a word): "+" between faults, "then" before a nested
    one; the full text is its tooltip."""
    parts = []
    for i, fault in enumerate(column.split(" + ")):
        for j, step in enumerate(fault.split(" → ")):
            kind, _, target = step.partition(" ")
            parts.append(("then" if j else "+" if i else "", kind, TARGET_WORDS.get(target, target)))
    return parts


def row_config(scenario: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """What a row of the matrix is: Kafka and its metadata mode, the clients that ran, the durability settings."""
    cfg = durability_config(scenario)
    cluster = scenario.get("cluster") or {}
    metadata = {"zookeeper": "ZooKeeper", "kraft": "KRaft"}.get(cfg.pop("metadata"), "?")
    return {"kafka": f"{cluster.get('kafka_version', '?')} {metadata}",
            "client": clients_text(results) or cfg["client"], **{k: v for k, v in cfg.items() if k != "client"}}


def clients_text(results: dict[str, Any]) -> str:
    """The client libraries and versions the workload's processes said they ran ("java 3.9.2"; by role when
    they differ); the checker's own read-back client is left out."""
    ran = {role: f"{info.get('client')} {info.get('version')}" for role, info in (results.get("clients") or {}).items()
           if isinstance(info, dict) and role != "reader"}
    if len(set(ran.values())) == 1:
        return next(iter(ran.values()))
    return ", ".join(f"{role} {text}" for role, text in sorted(ran.items()))


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
                        link=link.as_posix(), config=row_config(scenario, results), faults=fault_column(scenario),
                        verdict=verdict_of(results, assessment), lost=int(counts.get("lost", 0)),
                        duplicated=int(counts.get("duplicated", 0)), counts=counts,
                        unmet=assessment.unmet + assessment.not_judged))
    return runs, skipped


def _config_key(config: dict[str, Any]) -> tuple:
    return tuple(str(v) for v in config.values())


def build_matrix(runs: list[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows (one per configuration: by Kafka, client, then strongest acks last) and the fault columns; each row
    says whether it starts a new group of one Kafka and client."""
    columns = sorted({r.faults for r in runs}, key=lambda f: (f == "no faults", f))
    rows: dict[tuple, dict[str, Any]] = {}
    for r in runs:
        row = rows.setdefault(_config_key(r.config), {"config": r.config, "cells": {},
                                                      "settings": settings_lines(r.config),
                                                      "promises": promises(r.config)})
        row["cells"].setdefault(r.faults, Cell()).runs.append(r)
    acks_rank = {"0": 0, "1": 1, "all": 2}
    ordered = sorted(rows.values(), key=lambda row: (row["config"]["kafka"], row["config"]["client"],
                                                     acks_rank.get(str(row["config"]["acks"]), 3),
                                                     _config_key(row["config"])))
    group = None
    for i, row in enumerate(ordered, 1):
        row["id"] = f"C{i}"
        row["group"] = f"Kafka {row['config']['kafka']} · {row['config']['client']}"
        row["new_group"], group = row["group"] != group, row["group"]
    return ordered, columns


def version_column(run: Run) -> str:
    """A run's column in the by-version table: the Kafka release and the client that ran ("3.9.2 · java 3.9.2")."""
    return f"{run.config['kafka'].split(' ')[0]} · {run.config['client']}"


def release_order(column: str) -> tuple:
    """Columns by Kafka release as numbers (3.10 after 3.9), then by client."""
    release, _, client = column.partition(" · ")
    return release_numbers(release), client


def build_versions(runs: list[Run]) -> tuple[list[dict[str, Any]], list[str]]:
    """The runs by version: a row per scenario and metadata mode, a column per Kafka release and client (the
    nightly's version axis); no rows when every run ran one version, so the page shows no such table."""
    columns = sorted({version_column(r) for r in runs}, key=release_order)
    if len(columns) < 2:
        return [], columns
    rows: dict[str, dict[str, Any]] = {}
    for r in runs:
        name = f"{r.scenario} · {r.config['kafka'].split(' ', 1)[-1]}"
        rows.setdefault(name, {"name": name, "cells": {}})["cells"].setdefault(version_column(r), Cell()).runs.append(r)
    return [rows[name] for name in sorted(rows)], columns


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
    by_version, version_columns = build_versions(runs)
    page = templates().get_template("matrix.html.j2").render(
        rows=rows, columns=columns, verdicts=VERDICTS, runs=len(runs), skipped=skipped,
        by_version=by_version, version_columns=version_columns,
        headers={c: fault_header(c) for c in columns}, newest=newest_run(runs))
    return write_atomically(root / INDEX, page)
