"""Cut a real run's node logs down to test data for one Kafka version (tests/data/versions/<mode>-<version>/).

    .venv/bin/python scripts/cut_version_logs.py RUN_DIR tests/data/versions/kraft-3.5.2

Keeps scenario.yaml (started_at, the version) and, of every node log, the timestamped lines of the loggers
whose messages the forensics read (any logger with one line a template matches), so a format that changes
within a logger shows up as a line no template reads; of the workload topic's partitions only the stories of
the one its brokers truncated most and the one whose ISR changed most, and nothing of __consumer_offsets.
Continuation lines (stack traces) and logs left empty are dropped.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forensics.nodelog import parse_line  # noqa: E402
from forensics.templates import match  # noqa: E402

LOGGER = re.compile(r" \(([\w.$]+)\)\s*$")


def most_told(logs: list[Path], topic: str, *needles: str) -> str:
    """The partition of ``topic`` the most lines holding one of ``needles`` are about ("0" when none is)."""
    told = Counter(m.group(1) for path in logs for text in path.open(encoding="utf-8", errors="replace")
                   if any(n in text for n in needles) for m in [re.search(rf"{re.escape(topic)}-(\d+)\b", text)] if m)
    return told.most_common(1)[0][0] if told else "0"


def main(run_dir: Path, dest: Path) -> None:
    logs = sorted((run_dir / "logs").glob("*.log"))
    loggers: set[str] = set()
    for path in logs:
        for number, text in enumerate(path.open(encoding="utf-8", errors="replace"), 1):
            line = parse_line(number, text)
            found = LOGGER.search(text)
            if line is not None and found is not None and match(line.message) is not None:
                loggers.add(found.group(1))
    (dest / "logs").mkdir(parents=True, exist_ok=True)
    shutil.copy2(run_dir / "scenario.yaml", dest / "scenario.yaml")
    topic = yaml.safe_load((run_dir / "scenario.yaml").read_text())["topic"]["name"]
    keep = {most_told(logs, topic, "Truncating to offset"), most_told(logs, topic, "ISR updated to", "Shrinking ISR")}
    other_partition = re.compile(rf"\b{re.escape(topic)}-(?!(?:{'|'.join(sorted(keep))})\b)\d+\b|__consumer_offsets")
    for path in logs:
        kept = [text for text in path.open(encoding="utf-8", errors="replace")
                if parse_line(0, text) is not None and (m := LOGGER.search(text)) is not None and m.group(1) in loggers
                and not other_partition.search(text)]
        if kept:
            (dest / "logs" / path.name).write_text("".join(kept))
    print(f"{dest}: {len(logs)} logs, {topic} partitions {sorted(keep)}, loggers {', '.join(sorted(loggers))}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
