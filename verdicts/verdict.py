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
from rundir.documents import compose_results, read_events, read_kafka_transactions, read_scenario, write_results
from rundir.layout import RunDir
from rundir.lines import HistoryError
from rundir.phases import PhaseTimer
from rundir.versions import kchaos_version
from spark_analysis.engine import DEFAULT_ENGINE, check_run_with
from spark_analysis.session import remote_url
from verdicts.expect import NOT_JUDGED, Assessment, assess
from verdicts.report import write_report

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run_record(run: RunDir, scenario: dict[str, Any] | None, hanging: int | None = None) -> dict[str, Any]:
    """What results.json says about the run besides the checker's counts: versions, times, the faults' fate.

    Read from scenario.yaml and events.jsonl (fault, client and final-read lines); ``clients`` says which
    client library and version each role (producer, consumer, pipeline, reader) ran, with its settings and,
    for a librdkafka role whose processes said it, the confluent-kafka ``binding`` (a pinned
    workload.client_version shows here; ``librdkafka_version`` is the harness's own, which stays on .venv's).
    A transactional run's record also has ``kafka_transactions``: what Kafka's own tool said before teardown
    (history/kafka-transactions.json) beside the checker's ``hanging`` count (second_opinion).
    """
    events = read_events(run.history, [])
    faults = [e for e in events if e["kind"] == "fault"]
    skipped = [e for e in faults if e.get("phase") == "skipped"]
    # a skipped line naming an application's start (a request fault whose window matched nothing) voids it
    starts = {voided_key(e) for e in faults if e.get("phase") == "start"}
    voided = sum(1 for e in skipped if voided_key(e) in starts)
    client = next((e for e in events if e["kind"] == "client" and e.get("client") == "librdkafka"), None)
    clients: dict[str, Any] = {}  # role -> the client its first process said it was
    for e in events:
        role = e.get("role")
        if e["kind"] == "client" and isinstance(role, str) and role != "harness" and role not in clients:
            clients[role] = {"client": e.get("client"), "version": e.get("version"), "settings": e.get("settings"),
                             **({"binding": e["binding"]} if e.get("binding") else {})}
    started = (scenario or {}).get("started_at")
    last_ns = max((e["time_ns"] for e in events if isinstance(e.get("time_ns"), int)), default=None)
    ended = None
    if isinstance(started, str) and last_ns is not None:
        try:
            ended = (datetime.fromisoformat(started) + timedelta(microseconds=last_ns // 1000)).isoformat()
        except ValueError:
            pass
    transactional = bool(((scenario or {}).get("workload") or {}).get("transactions")) or run.txns.is_file()
    record: dict[str, Any] = {
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
            "applied": sum(1 for e in faults if e.get("phase") == "start") - voided,
            "skipped": len(skipped),
            "skip_reasons": sorted({str(e.get("detail")) for e in skipped}),
        },
    }
    if transactional:
        try:
            record["kafka_transactions"] = second_opinion(read_kafka_transactions(run), hanging)
        except HistoryError as e:
            record["kafka_transactions"] = {**second_opinion(None, hanging),
                                            "summary": f"Kafka's kafka-transactions.sh answers could not be read: {e}"}
    return record


NOT_ASKED = ("Kafka's kafka-transactions.sh was not asked (the run did not reach its end, or was made before kchaos "
             "asked it)")
# transaction states of ``kafka-transactions.sh list`` that hold no open transaction
ENDED_STATES = ("Empty", "CompleteCommit", "CompleteAbort", "Dead")


def second_opinion(asked: dict[str, Any] | None, hanging: int | None) -> dict[str, Any]:
    """Kafka's find-hanging (``asked``: history/kafka-transactions.json, None: never asked) beside the checker's
    ``hanging_transaction`` (partitions whose last stable offset stayed below the high watermark past
    transaction.timeout.ms during the run). Kafka's count is the distinct partitions any broker's replica named
    at the end; ``agree`` is None when no broker could be asked, and ``summary`` says it in one sentence, a
    disagreement included (a transaction kchaos saw hang may have been aborted by its coordinator since)."""
    out: dict[str, Any] = {"kchaos_hanging_transaction": hanging, "kafka_hanging_partitions": None, "agree": None,
                           "brokers": [], "hanging": [], "open_transactions": None, "list_error": None}
    if asked is None:
        out["summary"] = NOT_ASKED
        return out
    out.update(tool=asked.get("tool"), max_transaction_timeout_min=asked.get("max_transaction_timeout_min"),
               list_error=asked.get("list_error"))
    parts: set[tuple[Any, Any]] = set()
    for b in asked.get("brokers") or []:
        rows = b.get("hanging") if b.get("asked") else None
        out["brokers"].append({"broker": b.get("broker"), "node": b.get("node"), "asked": bool(b.get("asked")),
                               "hanging": None if rows is None else len(rows),
                               "why": None if b.get("asked") else b.get("error") or "could not ask"})
        for r in rows or []:
            parts.add((r.get("topic"), r.get("partition")))
            if len(out["hanging"]) < 20:
                out["hanging"].append({"broker": b.get("broker"), **r})
    listed = asked.get("transactions")
    if isinstance(listed, list):
        out["open_transactions"] = [t for t in listed if t.get("state") not in ENDED_STATES]
    answered = [b for b in out["brokers"] if b["asked"]]
    missing = [f"{b['node']} ({b['why']})" for b in out["brokers"] if not b["asked"]]
    if not answered:
        out["summary"] = ("Kafka's find-hanging could not be asked: "
                          + ("; ".join(missing) if missing else "the cluster had no broker"))
        return out
    out["kafka_hanging_partitions"] = len(parts)
    out["agree"] = hanging is not None and len(parts) == hanging
    kafka = (f"Kafka's find-hanging found {len(parts)} partition{'s' if len(parts) != 1 else ''} with a hanging "
             f"transaction at the end of the run (asked {len(answered)} of {len(out['brokers'])} brokers"
             + (f"; could not ask {', '.join(missing)}" if missing else "") + ")")
    ours = "kchaos's count is missing" if hanging is None else f"kchaos counted {hanging}"
    out["summary"] = f"{kafka}; {ours}: " + ("they agree" if out["agree"] else "they DISAGREE")
    return out


def voided_key(e: dict[str, Any]) -> tuple[Any, ...]:
    """What ties a fault's skipped line to the start line of the application it voids (faults/schedule.py)."""
    return (e.get("fault"), e.get("target"), tuple(e.get("targets") or []), e.get("start_ns"))


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
        record = run_record(run, scenario, checked.get("counts", {}).get("hanging_transaction"))
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    explained, notes = None, []
    try:  # the chains add to the verdict, never decide it: a broker-events file that cannot be read is a note
        with timer.phase("chains"):
            explained = explain_run(run, checked)
    except HistoryError as e:
        notes.append(f"no causal chains: {e}")
    kafka_view = record.get("kafka_transactions")
    # a disagreement, or a question no broker answered, is said, not hidden; a history from before kchaos asked
    # (or from another tool) has only the record's own summary
    if kafka_view is not None and not kafka_view.get("agree") and kafka_view["summary"] != NOT_ASKED:
        notes.append(kafka_view["summary"])
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
    if engine == "spark" and spark is None and (remote := remote_url(spark_master)) is not None:
        print(f"checked through the Spark Connect server at {remote}")
    counts = results["counts"]
    print("  ".join(f"{k} {counts[k]:,}" for k in summary_keys(counts) if k in counts))
    for note in results.get("notes", []):
        print(f"note: {note}")
    if results.get("forensics") and (results["forensics"]["chains"] or results["forensics"]["unexplained"]
                                     or results["forensics"].get("transaction_chains")):
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
