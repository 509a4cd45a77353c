"""The nightly's summary: each run's outcome as a JUnit test case (1: a failure, 2: an error) and one line.

``kchaos nightly`` (harness/nightly.py) runs the scenarios; what it concludes
from their exit codes and output is written here, from what the runs left.
Each outcome is also kept as a record beside its log
(OUT/nightly-logs/<run>.outcome.json and <run>.log), so the JUnit file of a
nightly split into shards can be rebuilt from the shards' folders alone
(``kchaos matrix SHARD... --junit FILE``) exactly as one nightly would have
written it: the JUnit file is always written from the records, in the
nightly's own order.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catalogue.exits import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID, HarnessError

UNMET_LINE = re.compile(r"^verdict: .*$", re.MULTILINE)
LOG_TAIL = 6000


@dataclass
class Outcome:
    name: str
    path: Path
    code: int
    seconds: float
    output: str
    run_dir: str | None = None
    order: int = 0  # the run's place in the whole nightly set (broken files first), whichever shard ran it

    @property
    def summary(self) -> str:
        verdict = UNMET_LINE.findall(self.output)
        if verdict:
            return verdict[-1]
        lines = [line for line in self.output.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {self.code}"



def junit_xml(outcomes: list[Outcome]) -> ET.ElementTree:
    failures = sum(1 for o in outcomes if o.code == EXIT_INVALID)
    errors = sum(1 for o in outcomes if o.code not in (EXIT_VALID, EXIT_INVALID))
    total = sum(o.seconds for o in outcomes)
    suites = ET.Element("testsuites", name="kchaos nightly", tests=str(len(outcomes)), failures=str(failures),
                        errors=str(errors), time=f"{total:.1f}")
    suite = ET.SubElement(suites, "testsuite", name="kchaos.nightly", tests=str(len(outcomes)),
                          failures=str(failures), errors=str(errors), skipped="0", time=f"{total:.1f}")
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname="kchaos.nightly", name=o.name, file=str(o.path),
                             time=f"{o.seconds:.1f}")
        if o.code == EXIT_INVALID:
            ET.SubElement(case, "failure", message=o.summary, type="ExpectationsNotMet").text = o.output[-LOG_TAIL:]
        elif o.code != EXIT_VALID:
            ET.SubElement(case, "error", message=o.summary, type=f"ExitCode{o.code}").text = o.output[-LOG_TAIL:]
        ET.SubElement(case, "system-out").text = o.output[-LOG_TAIL:]
    ET.indent(suites)
    return ET.ElementTree(suites)


def summary_line(o: Outcome) -> str:
    """One run in the nightly's closing list: ok, FAILED (expectations not met) or ERROR (not judged)."""
    state = {EXIT_VALID: "ok", EXIT_INVALID: "FAILED"}.get(o.code, "ERROR")
    return f"{state:7} {o.name} ({o.seconds:.0f} s) {o.summary}"


def nightly_exit_code(outcomes: list[Outcome]) -> int:
    """2 when some run was not judged, else 1 when some expectation was not met, else 0."""
    if any(o.code not in (EXIT_VALID, EXIT_INVALID) for o in outcomes):
        return EXIT_HARNESS
    return EXIT_INVALID if any(o.code == EXIT_INVALID for o in outcomes) else EXIT_VALID


# --- the records a nightly leaves in OUT/nightly-logs/ ---------------------------------------------------

OUTCOME_SUFFIX = ".outcome.json"
SHARD_SUFFIX = ".shard.json"
TIMINGS = "timings.json"


def save_outcome(log_dir: Path, outcome: Outcome, root: Path) -> Path:
    """Write <name>.log (the run's whole output) and <name>.outcome.json; the run directory relative to root."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{outcome.name}.log").write_text(outcome.output, encoding="utf-8")
    run_dir = outcome.run_dir
    if run_dir is not None:
        try:
            run_dir = Path(run_dir).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:  # somewhere else: kept as it was printed
            pass
    record = {"name": outcome.name, "file": str(outcome.path), "code": outcome.code, "seconds": outcome.seconds,
              "run_dir": run_dir, "order": outcome.order}
    path = log_dir / f"{outcome.name}{OUTCOME_SUFFIX}"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def outcome_records(log_dir: Path) -> list[Path]:
    """Every outcome record in log_dir, by file name."""
    return sorted(log_dir.glob(f"*{OUTCOME_SUFFIX}")) if log_dir.is_dir() else []


def load_outcomes(log_dir: Path) -> list[Outcome]:
    """The outcomes recorded in log_dir, in the nightly's order (a bad record: one-line HarnessError)."""
    outcomes = []
    for path in outcome_records(log_dir):
        try:
            r = json.loads(path.read_text(encoding="utf-8"))
            log = log_dir / f"{r['name']}.log"
            output = log.read_text(encoding="utf-8") if log.is_file() else ""
            outcomes.append(Outcome(str(r["name"]), Path(r["file"]), int(r["code"]), float(r["seconds"]), output,
                                    r.get("run_dir"), int(r.get("order", 0))))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise HarnessError(f"{path}: not a kchaos nightly outcome record ({type(e).__name__}: {e})") from None
    return sorted(outcomes, key=lambda o: (o.order, o.name))


def clear_outcomes(log_dir: Path) -> None:
    """Forget the outcome and shard records of an earlier nightly (its logs stay until overwritten)."""
    if log_dir.is_dir():
        for path in [*log_dir.glob(f"*{OUTCOME_SUFFIX}"), *log_dir.glob(f"*{SHARD_SUFFIX}")]:
            path.unlink()


def save_timings(log_dir: Path, outcomes: list[Outcome]) -> Path:
    """The wall time of each judged run (exit 0 or 1) of a whole nightly, unsharded or merged, as
    timings.json: what later shards balance by. A shard never writes it, so shards run one after the
    other into one folder all read the same one."""
    log_dir.mkdir(parents=True, exist_ok=True)
    judged = {o.name: o.seconds for o in outcomes if o.code in (EXIT_VALID, EXIT_INVALID)}
    path = log_dir / TIMINGS
    path.write_text(json.dumps(dict(sorted(judged.items())), indent=2) + "\n", encoding="utf-8")
    return path


def load_timings(log_dir: Path) -> dict[str, float]:
    """timings.json of log_dir ({} when there is none; a bad one is a one-line HarnessError)."""
    path = log_dir / TIMINGS
    if not path.is_file():
        return {}
    try:
        timings = json.loads(path.read_text(encoding="utf-8"))
        return {str(name): float(seconds) for name, seconds in timings.items()}
    except (ValueError, AttributeError, TypeError, UnicodeDecodeError) as e:
        raise HarnessError(f"{path}: not a kchaos nightly timings file ({type(e).__name__}: {e})") from None


def save_shard(log_dir: Path, shard: str, record: dict[str, Any]) -> Path:
    """What one shard ran and how long it took (``shard``: ``K/N``), for the merged step summary."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"shard-{shard.replace('/', '-of-')}{SHARD_SUFFIX}"
    path.write_text(json.dumps({"shard": shard, **record}, indent=2) + "\n", encoding="utf-8")
    return path


def load_shards(log_dir: Path) -> list[dict[str, Any]]:
    """The shard records in log_dir, shard 1 first."""
    shards = []
    for path in sorted(log_dir.glob(f"*{SHARD_SUFFIX}")) if log_dir.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            index, count = (int(x) for x in str(record["shard"]).split("/"))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise HarnessError(f"{path}: not a kchaos nightly shard record ({type(e).__name__}: {e})") from None
        shards.append(((count, index), record))
    return [record for _, record in sorted(shards, key=lambda s: s[0])]


def write_junit(outcomes: list[Outcome], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(outcomes).write(path, encoding="utf-8", xml_declaration=True)
    return path


def step_summary(outcomes: list[Outcome], shards: list[dict[str, Any]]) -> str:
    """Markdown for a GitHub step summary: each shard's wall time, then one row per run."""
    lines = [f"- shard {s['shard']}: {len(s.get('runs') or [])} run(s) in {float(s['wall_s']) / 60:.1f} min "
             f"(expected {float(s['expected_s']) / 60:.1f} min)" for s in shards]
    lines += [""] if lines else []
    lines += ["| scenario | result | seconds |", "|---|---|---|"]
    for o in outcomes:
        state = {EXIT_VALID: "ok", EXIT_INVALID: "failure"}.get(o.code, "error")
        if o.code != EXIT_VALID:
            state += f": {o.summary}"
        lines.append(f"| {o.name} | {state.replace('|', '/')} | {o.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def append_step_summary(text: str) -> None:
    """Add text to the GitHub step summary when GITHUB_STEP_SUMMARY names one; else nothing."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text)
