"""RUN/report.html, and ``kchaos report RUN`` that (re)writes it.

One self-contained page: a headline sentence with the verdict, the anomalies
as overlapping sets, why the messages were lost (when the forensics know),
the durability settings and their promises, the timeline, the faults with
what each cost, a table per partition, the anomaly examples with the node-log
lines around them, the scenario as run and links to the history and logs.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from catalogue.exits import EXIT_VALID, HarnessError
from checkers.anomalies import DEFINITIONS
from rundir.documents import read_results, read_scenario, write_atomically
from rundir.layout import RunDir
from rundir.lines import HistoryError
from verdicts.expect import Assessment, assess, for_clients
from verdicts.report.chains import NO_BREAKDOWN, SHOWN, chain_rows, fault_counts, unexplained_rows
from verdicts.report.examples import describe_examples, example_positions, seconds_text
from verdicts.report.figure import plotly_script, timeline_html
from verdicts.report.headline import headline, percent, shares
from verdicts.report.latency import MAX_ACKED, MAX_OTHER, encode
from verdicts.report.logs import excerpts
from verdicts.report.scan import NS, Scan, scan_history, use_series
from verdicts.report.settings import client_rows, durability_config, durability_settings, planned_faults, promises
from verdicts.report.versions import version_note
from verdicts.report.windows import add_recovery, fault_label

log = logging.getLogger(__name__)


def templates() -> Environment:
    """The Jinja environment of the offline pages (report and matrix), with their number and setting filters."""
    env = Environment(loader=PackageLoader("verdicts", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = lambda v: (f"{v:,}" if isinstance(v, int) and not isinstance(v, bool)
                                    else ("—" if v is None else v))
    env.filters["setting"] = lambda v: str(v).lower() if isinstance(v, bool) else v
    env.filters["pct"] = lambda n, d: percent(n, d)
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
    use_series(scan, results)
    counts = results.get("counts") or {}
    notes = list(scan.notes) + [n for n in (version_note(scan),) if n]
    scan.totals = {name: counts[name] for name in ("lost", "duplicated", "divergent")
                   if isinstance(counts.get(name), int)}
    breakdown = results.get("breakdown") if isinstance(results.get("breakdown"), dict) else None
    if breakdown is None:
        notes.append(f"counts per partition and per fault: {NO_BREAKDOWN}")
    add_recovery(scan.faults, scan.leaders, scan.part_keys, scan.broker_events)
    cfg = durability_config(scenario) if scenario else None
    planned = planned_faults(scenario)
    expect = for_clients((scenario or {}).get("expect"), scenario)
    per_fault, per_fault_source = fault_counts(results, scan.faults)
    lost_divergent = (breakdown or {}).get("lost_divergent")
    top = headline(results, assessment, cfg, planned, expect, scan.faults, per_fault or [],
                   lost_divergent if isinstance(lost_divergent, int) else 0)
    chains = chain_rows(results)
    examples = describe_examples(results, scan.faults, scan.at_offsets, chains, scan)
    refs = [(s["node"], s["line"]) for c in chains for s in c["steps"] if s["anchor"]]
    refs += [(s["node"], s["line"]) for section in examples for row in section["rows"] for s in row.get("steps", [])
             if s["anchor"]]
    cluster = (scenario or {}).get("cluster") or {}
    topic = (scenario or {}).get("topic") or {}
    page = templates().get_template("report.html.j2").render(
        name=(scenario or {}).get("name", run.path.name), description=(scenario or {}).get("description", ""),
        started_at=(scenario or {}).get("started_at", ""), run_dir=str(run.path),
        results=results, counts=counts, shares=shares(counts), assessment=assessment, expect=expect, top=top,
        facts=_facts(results, scan, scenario), settings=durability_settings(scenario) + client_rows(results),
        promises=promises(cfg) if cfg else [], definitions=DEFINITIONS, plotly=plotly_script(),
        chart=timeline_html(scan, topic.get("replication_factor") if isinstance(topic.get("replication_factor"), int)
                            else None),
        releases=bool(scan.node_versions),
        latency=encode(scan.latency, scan.end_ns), latency_caps=(MAX_ACKED, MAX_OTHER),
        partitions=_partition_rows(scan, breakdown),
        faults=_fault_rows(scan, per_fault), per_fault_source=per_fault_source, chains=chains, shown_chains=SHOWN,
        unexplained=unexplained_rows(results), examples=examples, excerpts=excerpts(run, refs),
        scenario_text=run.scenario.read_text() if run.scenario.is_file() else "", files=_files(run),
        notes=list(results.get("notes") or []) + notes, scan_seconds=f"{scan.seconds:.1f}",
        kafka=f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})" if cluster else "unknown")
    return write_atomically(run.report, page)


def _facts(results: dict[str, Any], scan: Scan, scenario: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """The run in a few numbers, each with its share of the sends where it has one: (key, value, what)."""
    c = results.get("counts") or {}
    planned = ((scenario or {}).get("workload") or {}).get("duration_s")
    facts = [(key, f"{c[key]:,}" if isinstance(c.get(key), int) else "—", what + _share(key, c))
             for key, what in (("sent", "sends"), ("acked", "acknowledged"), ("failed", "failed"),
                               ("unknown", "unknown outcome"), ("reads_live", "reads, live"),
                               ("reads_final", "reads, final read-back"))]
    return facts + [
        ("duration", f"{scan.end_ns / NS:.1f} s", "history span" + (f" (workload {planned} s)" if planned else "")),
        ("faults", f"{len(scan.faults)}", "faults applied"),
        ("leader_changes", f"{len(scan.leader_changes)}", "leader changes seen"),
    ]


def _share(key: str, counts: dict[str, Any]) -> str:
    share = shares(counts).get(key)
    return f" — {share} of sends" if share else ""


PARTITION_COLUMNS = {"lost": "lost", "duplicated": "duplicated", "divergent": "divergent",
                     "unverifiable": "lost_unverifiable"}  # column -> its count in results.json's breakdown


def _partition_rows(scan: Scan, breakdown: dict[str, Any] | None) -> dict[str, Any]:
    """The per-partition table: the checker's counts of each partition (results.json's ``breakdown``; none in
    an older results.json) beside what the scan saw of it (final read, leadership), each anomaly with its
    share, and which anomaly columns any partition needs (a column of zeros is left out)."""
    drawn = dict(zip(scan.part_keys, scan.partitions))
    given = [r for r in (breakdown or {}).get("partitions") or [] if isinstance(r, dict)]
    one_topic = len({r.get("topic") for r in given} | {t for t, _ in scan.part_keys}) == 1
    rows, seen = [], set()
    for r in given:
        key = (r.get("topic"), r.get("partition"))
        seen.add(key)
        p = drawn.get(key)
        label = p.label if p is not None else (
            f"p{key[1]}" if one_topic and key[1] is not None else f"{key[0]}-{'(none)' if key[1] is None else key[1]}")
        rows.append({**_drawn(p), "label": label, "acked": r.get("acked"), "reads_live": r.get("reads_live"),
                     "reads_final": r.get("reads_final"),
                     **{c: r.get(name) for c, name in PARTITION_COLUMNS.items()}})
    rows += [{**_drawn(p), "label": p.label, "acked": None, "reads_live": None, "reads_final": None,
              **dict.fromkeys(PARTITION_COLUMNS)} for key, p in drawn.items() if key not in seen]
    columns = [c for c in PARTITION_COLUMNS if any(isinstance(p[c], int) and p[c] for p in rows)]
    return {"rows": [{"p": p, "shares": {c: percent(p[c], p["reads_final"] if c == "divergent" else p["acked"])
                                         for c in columns}} for p in rows],
            "columns": columns, "counted": breakdown is not None}


def _drawn(p: Any) -> dict[str, Any]:
    """What the scan saw of a partition (none: it saw nothing)."""
    return {"complete": None if p is None else p.complete, "high_watermark": None if p is None else p.high_watermark,
            "leader_changes": 0 if p is None else p.leader_changes, "min_isr": None if p is None else p.min_isr,
            "leader": None if p is None else p.leader}


def _fault_rows(scan: Scan, per_fault: list[Counter[str]] | None) -> list[dict[str, Any]]:
    """The fault table: each window's parts and what it cost, with its share of the run's total (cost None:
    results.json does not say)."""
    total = {k: sum(c.get(k, 0) for c in per_fault or []) for k in ("lost", "duplicated", "divergent")}
    rows = []
    for w, counts in zip(scan.faults, per_fault if per_fault is not None else [None] * len(scan.faults)):
        down, back = w.get("down_ns", w["end_ns"]), w.get("recovered_ns", w["end_ns"])
        rows.append({
            **w, "label": fault_label(w), "start": seconds_text(w["start_ns"]),
            "healed": seconds_text(w["end_ns"]) if w["end_ns"] is not None else "never",
            "down": f"{((down if down is not None else scan.end_ns) - w['start_ns']) / NS:.1f} s",
            "recovering": "—" if down is None or not w.get("recovery") else (
                "not by the end" if back is None else f"{(back - down) / NS:.1f} s"),
            "counts": {k: (None, "") if counts is None else (counts.get(k, 0), percent(counts.get(k, 0), total[k]))
                       for k in total},
        })
    return rows


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
