"""Check a run directory, write results.json and report.html, and say what it means.

Shared by ``kchaos run`` (at the end of a run) and ``kchaos check RUN``.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from catalogue.exits import EXIT_HARNESS, HarnessError
from checkers.anomalies import summary_keys
from forensics.command import explain_run, explained_line
from rundir.documents import compose_results, read_events, read_scenario, write_results
from rundir.layout import RunDir
from rundir.lines import HistoryError
from rundir.phases import PhaseTimer
from rundir.versions import kchaos_version
from spark_analysis.engine import DEFAULT_ENGINE, check_run_with
from verdicts.expect import NOT_JUDGED, Assessment, assess
from verdicts.report import write_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_record(run: RunDir, scenario: dict[str, Any] | None) -> dict[str, Any]:
    """What results.json says about the run besides the checker's counts: versions, times, the faults' fate.

    Read from scenario.yaml and events.jsonl (fault, client and final-read lines); ``clients`` says which
    client library and version each role (producer, consumer, pipeline, reader) ran, with its settings.
    """
    events = read_events(run.history, [])
    faults = [e for e in events if e["kind"] == "fault"]
    skipped = [e for e in faults if e.get("phase") == "skipped"]
    client = next((e for e in events if e["kind"] == "client" and e.get("client") == "librdkafka"), None)
    clients: dict[str, Any] = {}  # role -> the client its first process said it was
    for e in events:
        role = e.get("role")
        if e["kind"] == "client" and isinstance(role, str) and role != "harness" and role not in clients:
            clients[role] = {"client": e.get("client"), "version": e.get("version"), "settings": e.get("settings")}
    started = (scenario or {}).get("started_at")
    last_ns = max((e["time_ns"] for e in events if isinstance(e.get("time_ns"), int)), default=None)
    ended = None
    if isinstance(started, str) and last_ns is not None:
        try:
            ended = (datetime.fromisoformat(started) + timedelta(microseconds=last_ns // 1000)).isoformat()
        except ValueError:
            pass
    return {
        "kchaos_version": kchaos_version(),
        "kafka_version": ((scenario or {}).get("cluster") or {}).get("kafka_version"),
        "librdkafka_version": None if client is None else client.get("version"),
        "clients": clients,
        "scenario": (scenario or {}).get("name"),
        "run_id": run.run_id,
        "started_at": started if isinstance(started, str) else None,
        "ended_at": ended,
        "faults": {
            "planned": len((scenario or {}).get("faults") or []),
            "applied": sum(1 for e in faults if e.get("phase") == "start"),
            "skipped": len(skipped),
            "skip_reasons": sorted({str(e.get("detail")) for e in skipped}),
        },
    }


def judge(run_dir: Path, engine: str = DEFAULT_ENGINE, spark_master: str | None = None,
          timer: PhaseTimer | None = None, spark: "SparkSession | None" = None) -> int:
    """Check ``run_dir`` and return the exit code: 0 expectations met, 1 not met, 2 not judged.

    ``engine`` is "spark" (the default) or "python" (the reference); ``spark_master`` a Spark cluster URL.
    A run that proved nothing (no history to judge, cut short, no fault took effect) is one line on stderr.
    ``timer`` gets the check's, the chains' and the report's wall seconds; ``spark``, a session to check in.
    """
    timer = timer if timer is not None else PhaseTimer()
    run = RunDir(run_dir)
    try:
        with timer.phase("check"):
            run.require()
            checked = check_run_with(engine, run_dir, spark_master, spark=spark)
        scenario = read_scenario(run)
        record = run_record(run, scenario)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    explained, notes = None, []
    try:  # the chains add to the verdict, never decide it: a broker-events file that cannot be read is a note
        with timer.phase("chains"):
            explained = explain_run(run, checked)
    except HistoryError as e:
        notes.append(f"no causal chains: {e}")
    assessment = assess((scenario or {}).get("expect"), compose_results(checked, record, explained, notes=notes),
                        scenario)
    results = compose_results(checked, record, explained,
                              {"expectations": assessment.as_json(), "exit_code": assessment.exit_code}, notes)
    with timer.phase("report"):
        write_results(run, results)
        report = write_report(run, results, scenario, assessment)
    if assessment.proved_nothing:
        print(f"kchaos: not judged: {'; '.join(assessment.not_judged)} (report: {report})", file=sys.stderr)
        return EXIT_HARNESS
    counts = results["counts"]
    print("  ".join(f"{k} {counts[k]:,}" for k in summary_keys(counts) if k in counts))
    for note in results.get("notes", []):
        print(f"note: {note}")
    if results.get("forensics") and (results["forensics"]["chains"] or results["forensics"]["unexplained"]):
        print(explained_line(results["forensics"]))
    print(f"verdict: {'valid' if results['valid'] else 'anomalies found'}; {expectations_line(assessment)}")
    print(f"report: {report}")
    return assessment.exit_code


def expectations_line(assessment: Assessment) -> str:
    """How the expectations came out, in one line."""
    if assessment.unmet:
        return "expectations NOT met: " + "; ".join(assessment.unmet)
    if assessment.outcome == NOT_JUDGED:
        return "expectations not judged: " + "; ".join(assessment.not_judged)
    return "expectations met"
