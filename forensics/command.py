"""``kchaos forensics RUN``: (re)build history/broker-events.jsonl from RUN/logs/, for any run, past or just ended.

Needs only logs/ and scenario.yaml's ``started_at`` (the wall clock the run's ``*_ns`` times count from); no
Docker, no Kafka client. Rebuilding replaces the file whole, so running it twice gives the same file.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from typing import Any

from catalogue.exits import EXIT_VALID, HarnessError
from forensics.chains import EXPLAINED, Explainer, TransactionExplainer
from forensics.parse import Event, parse_node_log
from forensics.sequence_reuse import SequenceReuse
from rundir.broker_events import read_broker_events, write_broker_events
from rundir.documents import (compose_results, read_events, read_results, read_scenario, read_txns, results_parts,
                               wall_start, write_results)
from rundir.replica_batches import read_replica_batches
from rundir.layout import LOGS, SCENARIO, RunDir
from rundir.lines import HistoryError


def build_broker_events(run: RunDir) -> list[Event]:
    """Every node's events on the run's time line, in time order (ties: node, then line); HistoryError (one line)
    when the run has no node logs or no start time to put them on."""
    logs = run.node_logs()
    if not logs:
        raise HistoryError(f"{run.path}: no node logs in {LOGS}/ (a run copies them out when its cluster stops)")
    started = wall_start(read_scenario(run))
    if started is None:
        raise HistoryError(f"{run.scenario}: no started_at, so the node logs' times cannot be put on the run's "
                           f"time line" if run.scenario.is_file() else
                           f"{run.path}: no {SCENARIO}, whose started_at puts the node logs' times on the run's "
                           f"time line")
    events = [e for node, path in logs.items() for e in parse_node_log(node, path, started)]
    events.sort(key=lambda e: (e["time_ns"], e["node"], e["line"]))
    return events


def write_run_broker_events(run: RunDir) -> tuple[Path, list[Event]]:
    """Parse RUN/logs/ and write history/broker-events.jsonl; returns the file and its events."""
    events = build_broker_events(run)
    return write_broker_events(run, events), events


def explain_run(run: RunDir, results: dict[str, Any]) -> dict[str, Any] | None:
    """results.json's ``forensics``: a chain per anomaly range (``anomaly_ranges``, written by the checker), the
    counts per fault and what no chain explains, from the run's events, broker events and replica batches.
    None when the results hold no ranges (a checker from before them)."""
    ranges = results.get("anomaly_ranges")
    if ranges is None:
        return None
    notes: list[str] = []
    batches = read_replica_batches(run.history, notes) if run.replica_batches.is_file() else None
    started = wall_start(read_scenario(run))
    events = read_events(run.history, notes)
    started_ms = None if started is None else int(started.timestamp() * 1000)
    txns = read_txns(run.history, notes) if run.txns.is_file() else []
    # first the acknowledgements of records a purged retry had already written (a reused sequence), whose log no
    # fault cut: the ranges they do not explain go on to the leader and log chains
    reused, rest = SequenceReuse(ranges, run.sends, run.reads, txns, events, batches, started_ms, notes).explain()
    explained = Explainer(events, read_broker_events(run.history, notes), batches,
                          results.get("examples"), started_ms).explain(rest, reused)
    # per transaction of the examples: its outcome, and the held request of its producer that reached a broker
    # while it was open (request lines), else the faults under way
    explained["transaction_chains"] = TransactionExplainer(events, txns, results.get("examples"), reused).explain()
    explained["notes"] = notes
    return explained


def explained_line(forensics: dict[str, Any]) -> str:
    """How many of each anomaly the chains explain, and by how many chains, in one line."""
    rows = forensics["lost_by_fault"]
    told = {a: sum(r[a] for r in rows if r["fault"] is not None) for a in EXPLAINED}
    left = {a: sum(r[a] for r in rows if r["fault"] is None) for a in EXPLAINED}
    parts = [f"{a} {told[a]:,} of {told[a] + left[a]:,}" for a in EXPLAINED if told[a] + left[a]]
    txn = forensics.get("transaction_chains") or []
    late = sum(1 for c in txn if c.get("request"))
    return (f"chains: {len(forensics['chains'])} explain {', '.join(parts) or 'nothing'}"
            + (f"; {len(forensics['unexplained'])} ranges unexplained" if forensics["unexplained"] else "")
            + (f"; {len(txn)} transactions told ({late} by a late request)" if txn else ""))


def forensics_cmd(run_dir: Path) -> int:
    """``kchaos forensics RUN``: write the file and say what it holds, one line; with results.json, explain its
    anomalies again from it (results.json's ``forensics``; ``kchaos report RUN`` redraws the report)."""
    run = RunDir(run_dir)
    try:
        run.require()
        path, events = write_run_broker_events(run)
        results = read_results(run) if run.results.is_file() else None
        explained = None if results is None else explain_run(run, results)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    kinds = Counter(e["kind"] for e in events)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"broker events: {path} ({len(events)} from {len(run.node_logs())} node logs{': ' if kinds else ''}"
          f"{summary})")
    if results is not None and explained is not None:
        checker, record, _, expectations = results_parts(results)
        write_results(run, compose_results(checker, record, explained, expectations))
        print(explained_line(explained))
    return EXIT_VALID
