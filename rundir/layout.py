"""Where everything of a run lives, and whether what a stage needs is there.

    runs/<scenario>/<UTC timestamp>/
      scenario.yaml  history/{sends,reads,events,shares,broker-events,replica-batches}.jsonl  results.json  report.html
      logs/  cluster/
    runs/index.html  runs/junit.xml  runs/nightly-logs/   (the matrix and the nightly's, over all runs)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rundir.lines import HistoryError, parse_json_line

SCENARIO = "scenario.yaml"
RESULTS = "results.json"
REPORT = "report.html"
HISTORY = "history"
LOGS = "logs"
CLUSTER = "cluster"  # the nodes' data and config while the cluster runs
SENDS, READS, EVENTS = "sends.jsonl", "reads.jsonl", "events.jsonl"
TXNS = "txns.jsonl"  # one line per transaction outcome (transactional workloads only)
SHARES = "shares.jsonl"  # one line per share-group delivery and acknowledgement (share consumers only)
STAMP_FORMAT = "%Y%m%dT%H%M%S.%fZ"  # a run directory's name: when it started, UTC
BROKER_EVENTS = "broker-events.jsonl"  # elections, ISR changes, truncations parsed from logs/ (kchaos forensics)
REPLICA_BATCHES = "replica-batches.jsonl"  # every replica's record batch headers, read before teardown
KAFKA_TRANSACTIONS = "kafka-transactions.json"  # what Kafka's kafka-transactions.sh said before teardown
NODE_LOG_SUFFIX = ".log"  # logs/<node>.log: one file per node, named after the node (broker1, zk1, controller1)
INDEX = "index.html"  # the matrix, at the root of a tree of runs
JUNIT = "junit.xml"  # the nightly's JUnit file, at the root of a tree of runs (unless --junit says elsewhere)
NIGHTLY_LOGS = "nightly-logs"  # the nightly's log and outcome record of each run, at the root of a tree of runs


@dataclass(frozen=True)
class RunDir:
    """One run directory, by path; nothing is read until asked."""

    path: Path

    @classmethod
    def create(cls, root: Path, scenario_name: str) -> "RunDir":
        """A new, empty run directory (with history/) under ``root``, stamped with the UTC time."""
        stamp = datetime.now(timezone.utc).strftime(STAMP_FORMAT)
        run = cls(Path(root) / scenario_name / stamp)
        run.history.mkdir(parents=True)
        return run

    @property
    def run_id(self) -> str:
        """``<scenario>/<timestamp>``: the two last parts of the path."""
        return f"{self.path.parent.name}/{self.path.name}"

    @property
    def scenario(self) -> Path:
        return self.path / SCENARIO

    @property
    def results(self) -> Path:
        return self.path / RESULTS

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def history(self) -> Path:
        return self.path / HISTORY

    @property
    def logs(self) -> Path:
        return self.path / LOGS

    @property
    def cluster(self) -> Path:
        return self.path / CLUSTER

    @property
    def sends(self) -> Path:
        return self.history / SENDS

    @property
    def reads(self) -> Path:
        return self.history / READS

    @property
    def events(self) -> Path:
        return self.history / EVENTS

    @property
    def txns(self) -> Path:
        return self.history / TXNS

    @property
    def shares(self) -> Path:
        return self.history / SHARES

    @property
    def broker_events(self) -> Path:
        return self.history / BROKER_EVENTS

    @property
    def replica_batches(self) -> Path:
        return self.history / REPLICA_BATCHES

    @property
    def kafka_transactions(self) -> Path:
        return self.history / KAFKA_TRANSACTIONS

    def node_logs(self) -> dict[str, Path]:
        """Each node's copied-out log by node name (``logs/broker1.log`` -> ``broker1``), sorted; {} without logs/."""
        if not self.logs.is_dir():
            return {}
        return {p.name[:-len(NODE_LOG_SUFFIX)]: p for p in sorted(self.logs.iterdir())
                if p.name.endswith(NODE_LOG_SUFFIX) and p.is_file()}

    def require(self) -> None:
        """A run directory at all: one with a history/ folder (HistoryError, one line)."""
        if not self.history.is_dir():
            raise HistoryError(f"{self.path}: no history/ folder, not a kchaos run directory")


class NotJudged(HistoryError):
    """The history holds nothing to judge (no sends, or nothing read back): the run proved nothing."""


def require_history(history_dir: Path) -> None:
    """Refuse a history with no send or no read to judge (NotJudged, one line); both checkers call it first.

    Judged anyway, a missing reads.jsonl would call every acknowledged message
    lost, and a missing sends.jsonl every read unexpected.
    """
    if not history_dir.is_dir():
        raise HistoryError(f"{history_dir}: no history directory")
    for name, meaning in ((SENDS, "no send was recorded"), (READS, "nothing was read back")):
        path = history_dir / name
        if not path.is_file():
            raise NotJudged(f"not judged: history/{name} is missing ({meaning})")
        if not _holds_a_line(path):
            raise NotJudged(f"not judged: history/{name} is empty ({meaning})")


def _holds_a_line(path: Path) -> bool:
    """Whether the file has a complete JSON line, or a bad one the reader will report (not only a cut-off one)."""
    with path.open("rb") as f:
        lines = (raw for raw in f if raw.strip())
        first = next(lines, None)
        if first is None:
            return False
        try:
            parse_json_line(first)
            return True
        except ValueError:
            return next(lines, None) is not None
