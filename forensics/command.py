"""``kchaos forensics RUN``: (re)build history/broker-events.jsonl from RUN/logs/, for any run, past or just ended.

Needs only logs/ and scenario.yaml's ``started_at`` (the wall clock the run's ``*_ns`` times count from); no
Docker, no Kafka client. Rebuilding replaces the file whole, so running it twice gives the same file.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from forensics.parse import Event, parse_node_log
from harness.errors import EXIT_VALID, HarnessError
from rundir.broker_events import write_broker_events
from rundir.documents import read_scenario, wall_start
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


def forensics_cmd(run_dir: Path) -> int:
    """``kchaos forensics RUN``: write the file and say what it holds, one line."""
    run = RunDir(run_dir)
    try:
        run.require()
        path, events = write_run_broker_events(run)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    kinds = Counter(e["kind"] for e in events)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"broker events: {path} ({len(events)} from {len(run.node_logs())} node logs{': ' if kinds else ''}"
          f"{summary})")
    return EXIT_VALID
