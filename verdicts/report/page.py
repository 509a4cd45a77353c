"""RUN/report.html, and ``kchaos report RUN`` that (re)writes it.

One self-contained page: the verdict and every count, the durability
settings and their promises, the timeline, a table per partition, the
anomaly examples, the scenario as run and links to the history and logs.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from checkers.anomalies import ANOMALIES, DEFINITIONS, FLAGGED
from harness.errors import EXIT_VALID, HarnessError
from rundir.documents import read_results, read_scenario, write_atomically
from rundir.layout import RunDir
from rundir.lines import HistoryError
from verdicts.expect import Assessment, assess, for_clients
from verdicts.report.examples import describe_examples, example_positions, seconds_text
from verdicts.report.figure import plotly_script, timeline_html
from verdicts.report.scan import NS, Scan, fault_label, scan_history
from verdicts.report.settings import client_rows, durability_config, durability_settings, promises

log = logging.getLogger(__name__)


def templates() -> Environment:
    """The Jinja environment of the offline pages (report and matrix), with their number and setting filters."""
    env = Environment(loader=PackageLoader("verdicts", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = lambda v: f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else ("—" if v is None else v)
    env.filters["setting"] = lambda v: str(v).lower() if isinstance(v, bool) else v
    return env


def _files(run: RunDir) -> list[tuple[str, str]]:
    """The run's files the page links to, as (path relative to the run, size)."""
    links = []
    for path in (run.sends, run.reads, run.events, run.results, run.scenario):
        if path.exists():
            links.append((path.relative_to(run.path).as_posix(), _size(path.stat().st_size)))
    if run.logs.is_dir():
        links += [(p.relative_to(run.path).as_posix(), _size(p.stat().st_size))
                  for p in sorted(run.logs.iterdir()) if p.is_file()]
    return links


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def write_report(run: RunDir, results: dict[str, Any], scenario: dict[str, Any] | None,
                 assessment: Assessment) -> Path:
    """Write RUN/report.html and return its path."""
    try:
        scan = scan_history(run, example_positions(results))
    except Exception as e:  # noqa: BLE001 - a report without a timeline beats a run that ends in a traceback
        log.exception("reading the history for the report failed")
        scan = Scan(notes=[f"the report could not read the history ({type(e).__name__}: {e}): no timeline"])
    counts = results.get("counts") or {}
    notes = list(scan.notes)
    for name in ("lost", "duplicated", "divergent"):
        if name in counts and scan.totals.get(name) != counts[name]:
            notes.append(f"the timeline and partition table recount {name} from the history as "
                         f"{scan.totals.get(name):,}; the checker counted {counts[name]:,} (the counts above are the "
                         "checker's)")
    chart = timeline_html(scan)
    scenario = scenario or None
    scenario_text = run.scenario.read_text() if run.scenario.is_file() else ""
    faults = [{**w, "label": fault_label(w), "start": seconds_text(w["start_ns"]),
               "end": seconds_text(w["end_ns"]) if w["end_ns"] is not None else "never healed",
               "length": f"{((w['end_ns'] or scan.end_ns) - w['start_ns']) / NS:.1f} s"} for w in scan.faults]
    cluster = (scenario or {}).get("cluster") or {}
    headline = {
        "acked": counts.get("acked"), "failed": counts.get("failed"), "unknown": counts.get("indeterminate"),
        "reads_live": counts.get("reads_live"), "reads_final": counts.get("reads_final"),
        "duration": f"{scan.end_ns / NS:.1f} s",
        "planned": (((scenario or {}).get("workload") or {}).get("duration_s")),
        "kafka": f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})" if cluster else "unknown",
        "faults": len(scan.faults),
    }
    page = templates().get_template("report.html.j2").render(
        name=(scenario or {}).get("name", run.path.name), description=(scenario or {}).get("description", ""),
        started_at=(scenario or {}).get("started_at", ""), run_dir=str(run.path),
        results=results, counts=counts, assessment=assessment, expect=for_clients((scenario or {}).get("expect"), scenario),
        settings=durability_settings(scenario) + client_rows(results),
        promises=promises(durability_config(scenario)) if scenario else [],
        violations=FLAGGED, anomalies=ANOMALIES, definitions=DEFINITIONS, headline=headline,
        plotly=plotly_script(), chart=chart, partitions=scan.partitions, faults=faults,
        examples=describe_examples(results, scan.faults, scan.at_offsets), scenario_text=scenario_text,
        files=_files(run), notes=list(results.get("notes") or []) + notes, scan_seconds=f"{scan.seconds:.1f}",
        leader_changes=len(scan.leader_changes))
    return write_atomically(run.report, page)


def report_cmd(run_dir: Path) -> int:
    """``kchaos report RUN``: (re)write RUN/report.html from RUN/results.json and RUN/history."""
    run = RunDir(run_dir)
    try:
        run.require()
        results = read_results(run)
        scenario = read_scenario(run)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    started = time.monotonic()
    path = write_report(run, results, scenario, assess((scenario or {}).get("expect"), results, scenario))
    print(f"report: {path} ({_size(path.stat().st_size)}, {time.monotonic() - started:.1f} s)")
    return EXIT_VALID
