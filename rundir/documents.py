"""scenario.yaml, results.json and the events the verdict needs: read and written only here.

One error policy for every reader: a file that is there but unusable is a
one-line ``HistoryError`` naming it; a scenario.yaml that is absent is None
(``kchaos check`` then assumes no promises and says so).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from rundir.layout import EVENTS, KAFKA_TRANSACTIONS, RESULTS, SCENARIO, TXNS, RunDir
from rundir.lines import READ_COMMITTED, HistoryError, field_of, parse_event, read_history_file

# results.json's layout; 2 added the run record (versions, times, faults, expectations, exit code); 3 the
# per-second ``series``, the send status ``unknown`` (was info) and no ``indeterminate`` count (``unknown`` is it).
SCHEMA_VERSION = 3

Part = tuple[str, int]  # (topic, partition)


# --- scenario.yaml -----------------------------------------------------------------------------------


def read_scenario(run: RunDir) -> dict[str, Any] | None:
    """The resolved scenario.yaml, or None when there is none."""
    if not run.scenario.is_file():
        return None
    try:
        scenario = yaml.safe_load(run.scenario.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise HistoryError(f"{SCENARIO}{where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError:
        raise HistoryError(f"{SCENARIO}: not valid UTF-8") from None
    if not isinstance(scenario, dict):
        raise HistoryError(f"{SCENARIO}: expected a mapping, not {type(scenario).__name__}")
    return scenario


def wall_start(scenario: dict[str, Any] | None) -> datetime | None:
    """The wall-clock instant the run's time line counts from (scenario.yaml's ``started_at``, UTC when it names no
    zone), or None when the scenario has none or not an ISO 8601 time."""
    started = (scenario or {}).get("started_at")
    if isinstance(started, datetime):  # YAML reads an unquoted timestamp as a datetime
        moment = started
    elif isinstance(started, str):
        try:
            moment = datetime.fromisoformat(started)
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def write_scenario(run: RunDir, resolved: dict[str, Any]) -> None:
    """The resolved scenario, every default filled in, as the run starts."""
    run.scenario.write_text(yaml.safe_dump(resolved, sort_keys=False))


# --- results.json ------------------------------------------------------------------------------------


# results.json's parts besides the checker's document (whose keys checkers/anomalies.py's results_document orders),
# in the order they follow it: the run record (verdicts/verdict.py's run_record), the causal chains, the expectations.
# kafka_transactions: Kafka's own find-hanging beside the checker's hanging_transaction (transactional runs only)
RUN_RECORD_KEYS = ("kchaos_version", "kafka_version", "librdkafka_version", "clients", "scenario", "run_id",
                   "started_at", "ended_at", "faults", "kafka_transactions")
FORENSICS_KEY = "forensics"
EXPECTATIONS_KEYS = ("expectations", "exit_code")


def compose_results(checker: dict[str, Any], record: dict[str, Any] | None = None,
                    forensics: dict[str, Any] | None = None, expectations: dict[str, Any] | None = None,
                    notes: Iterable[str] = ()) -> dict[str, Any]:
    """results.json from its parts, in one fixed order; none of the parts is changed.

    The checker's document comes first as it is, ``notes`` (what the later
    stages have to say) after its own notes; then the run record's keys
    (RUN_RECORD_KEYS), ``forensics``, and the expectations' (EXPECTATIONS_KEYS:
    the assessment and the exit code). A part that is None is left out, and a
    key a part lacks; a key it has that is not its own is a ValueError. Every
    writer of results.json (``kchaos check``, ``kchaos forensics``) composes it
    here, so the same parts always give the same bytes.
    """
    document = dict(checker)
    if notes:
        document["notes"] = [*checker.get("notes", []), *notes]
    document.update(_in_order(record, RUN_RECORD_KEYS))
    if forensics is not None:
        document[FORENSICS_KEY] = forensics
    document.update(_in_order(expectations, EXPECTATIONS_KEYS))
    return document


def _in_order(part: dict[str, Any] | None, keys: tuple[str, ...]) -> list[tuple[str, Any]]:
    if part is None:
        return []
    if not part.keys() <= set(keys):
        raise ValueError(f"not a key of this part of results.json: {', '.join(sorted(part.keys() - set(keys)))}")
    return [(key, part[key]) for key in keys if key in part]


def results_parts(results: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any] | None,
                                                    dict[str, Any] | None]:
    """A results.json taken apart again (checker, run record, forensics, expectations; None: absent), for a
    stage that replaces one part of a written document: ``compose_results(*parts)`` gives it back."""
    later = {*RUN_RECORD_KEYS, FORENSICS_KEY, *EXPECTATIONS_KEYS}
    checker = {k: v for k, v in results.items() if k not in later}
    record = {k: results[k] for k in RUN_RECORD_KEYS if k in results}
    expectations = {k: results[k] for k in EXPECTATIONS_KEYS if k in results}
    return checker, record or None, results.get(FORENSICS_KEY), expectations or None


def write_results(run: RunDir, results: dict[str, Any]) -> Path:
    """Write RUN/results.json atomically, so a reader never sees half a verdict."""
    return write_atomically(run.results, json.dumps(results, indent=2) + "\n")


def write_jsonl_atomically(target: Path, objects: Iterable[dict[str, Any]]) -> Path:
    """Replace a history file rebuilt whole (not appended as the run goes) with these objects, one compact JSON
    line each, in one atomic step."""
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(target, "".join(_compact_json(o) + "\n" for o in objects))


_compact_json = json.JSONEncoder(separators=(",", ":")).encode


def write_atomically(target: Path, text: str) -> Path:
    """Replace ``target`` with ``text`` (UTF-8) in one step, for files rebuilt whole: a reader sees the old file or
    the new one, never half of it; readable by all (0644) like the rest of the run directory (mkstemp makes 0600)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=f"{target.suffix}.tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_results(run: RunDir) -> dict[str, Any]:
    """RUN/results.json as written by ``kchaos check`` (HistoryError when missing or not one)."""
    if not run.results.is_file():
        raise HistoryError(f"{run.results}: missing; `kchaos check {run.path}` writes it")
    try:
        results = json.loads(run.results.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise HistoryError(f"{run.results}: not valid JSON ({e})") from None
    if not isinstance(results, dict) or not isinstance(results.get("counts"), dict):
        raise HistoryError(f"{run.results}: not a kchaos {RESULTS} (no counts)")
    return results


# --- history/kafka-transactions.json ------------------------------------------------------------------


def write_kafka_transactions(run: RunDir, document: dict[str, Any]) -> Path:
    """What Kafka's kafka-transactions.sh said before teardown (clusters/kafka_transactions.py's ask_cluster)."""
    run.kafka_transactions.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(run.kafka_transactions, json.dumps(document, indent=2) + "\n")


def read_kafka_transactions(run: RunDir) -> dict[str, Any] | None:
    """history/kafka-transactions.json, or None when the run did not ask (not transactional, or older);
    HistoryError when it is there but not a JSON object."""
    if not run.kafka_transactions.is_file():
        return None
    try:
        document = json.loads(run.kafka_transactions.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise HistoryError(f"history/{KAFKA_TRANSACTIONS}: not valid JSON ({e})") from None
    if not isinstance(document, dict):
        raise HistoryError(f"history/{KAFKA_TRANSACTIONS}: expected an object, not {type(document).__name__}")
    return document


# --- events.jsonl ------------------------------------------------------------------------------------


def read_events(history_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every line of history/events.jsonl (a missing file is noted: no events)."""
    return read_history_file(history_dir, EVENTS, parse_event, notes, "no events recorded")


def parse_txn_line(obj: dict[str, Any], line: int) -> dict[str, Any]:
    """A txns.jsonl line as it is (the forensics read its times), once it names its producer and transaction."""
    field_of(obj, "producer", str)
    field_of(obj, "txn", int)
    return obj


def read_txns(history_dir: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Every line of history/txns.jsonl (a missing file is noted: the run had no transactions)."""
    return read_history_file(history_dir, TXNS, parse_txn_line, notes, "no transactions recorded")


class FaultWindows:
    """The faults that took effect, one window each (fault, target, targets, detail, start_ns, end_ns and, once its
    start line says it had taken effect, applied_ns), gathered from events.jsonl's fault lines as they come and
    numbered from 1 in start order: the one "fault N" of the report and of the causal chains."""

    def __init__(self) -> None:
        self._windows: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(self, e: dict[str, Any]) -> None:
        """One fault line; a skipped fault never took effect and has no window, and a skipped line naming an
        application's start (a request fault whose window matched nothing: faults/schedule.py) voids its window."""
        if e.get("kind") != "fault":
            return
        t, targets = e.get("time_ns"), e.get("targets") or []
        key = (e.get("fault"), e.get("target"), tuple(targets), e.get("start_ns"))
        if e.get("phase") == "skipped":
            self._windows.pop(key, None)
            return
        w = self._windows.setdefault(key, {"fault": e.get("fault"), "target": e.get("target"),
                                           "targets": list(targets), "detail": e.get("detail"),
                                           "start_ns": e.get("start_ns") if e.get("start_ns") is not None else t,
                                           "end_ns": None})
        if e.get("phase") == "heal" or e.get("end_ns") is not None:
            w["end_ns"] = e.get("end_ns") if e.get("end_ns") is not None else t
        if e.get("phase") == "start":  # written once the fault had taken effect (a killed process is gone by then)
            w["applied_ns"] = t if t is not None else w["start_ns"]

    def ordered(self) -> list[dict[str, Any]]:
        """The windows in start order, each with its ``index`` (from 1)."""
        ordered = sorted(self._windows.values(), key=lambda w: w["start_ns"] or 0)
        for i, w in enumerate(ordered, 1):
            w["index"] = i
        return ordered


def fault_windows(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The faults of these events that took effect, numbered (FaultWindows)."""
    windows = FaultWindows()
    for e in events:
        windows.add(e)
    return windows.ordered()


def final_read_completeness(events: list[dict[str, Any]], committed: bool = False) -> dict[Part, bool]:
    """Per partition with a final-read event: did some read-back reach the high watermark?

    ``committed``: the read_committed read-back's events, else the others
    (read_uncommitted, or no isolation named: histories from before transactions).
    """
    complete: dict[Part, bool] = {}
    for e in events:
        if e["kind"] == "final-read" and (e.get("isolation") == READ_COMMITTED) == committed:
            part = (e["topic"], e["partition"])
            complete[part] = complete.get(part, False) or e["complete"]
    return complete


def committed_offsets(events: list[dict[str, Any]]) -> dict[Part, dict[str, int]]:
    """Per partition, each group's committed offset at the end (the last event wins; null: none)."""
    latest: dict[tuple[str, str, int], int | None] = {}
    for e in events:
        if e["kind"] == "committed":
            latest[(e["group"], e["topic"], e["partition"])] = e["offset"]
    committed: dict[Part, dict[str, int]] = defaultdict(dict)
    for (group, topic, partition), offset in latest.items():
        if offset is not None:
            committed[(topic, partition)][group] = offset
    return committed


def pipelines(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(group, input topic, output topic) of each exactly-once pipeline the run had, from its ``pipeline`` events."""
    return sorted({(e["group"], e["input_topic"], e["output_topic"]) for e in events if e["kind"] == "pipeline"})
