"""What an exploration's trials found, and its page and JUnit file.

``kchaos explore`` (harness/explore/) runs each trial as an ordinary run; ``trial_verdict`` reads that run's
results.json and scenario.yaml and says what it showed. A finding is an anomaly the trial's settings promise
cannot happen: one that makes the verdict invalid under the producers' promises (the catalogue's severities)
and that no setting allows (``allowance``: acks=1 loss is allowed, not a finding), or one the space hunts on
purpose. A run that proved nothing is not judged, never clean. The explorer keeps every trial in
DIR/exploration.json; ``write_page`` and ``write_junit`` draw from that file alone.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from catalogue.anomalies import ANOMALY_LIST
from checkers.anomalies import invalidating
from rundir.documents import read_results, read_scenario, write_atomically
from rundir.layout import RunDir
from rundir.lines import HistoryError
from verdicts.expect import run_not_judged, unverified, unverified_text
from verdicts.report import allowance, durability_config, planned_faults, templates

EXPLORATION = "exploration.json"
INDEX = "index.html"
# a trial's outcome, worst first
OUTCOMES = {
    "finding": "an anomaly its settings promise cannot happen (or one the space hunts)",
    "not_judged": "the run proved nothing (cut short, no fault took effect, an unverified read-back)",
    "error": "the harness could not run it",
    "allowed": "anomalies its settings allow (acks=1 loss, duplicates without idempotence), nothing else",
    "clean": "no anomaly",
    "refused": "the draw could not be run (settings that cannot go together); drawn again",
}


@dataclass
class TrialVerdict:
    outcome: str
    anomalies: list[str] = field(default_factory=list)  # the findings, in catalogue order
    allowed: dict[str, str] = field(default_factory=dict)  # anomaly -> the setting that allows it
    reason: str = ""


def judged_anomalies(results: dict[str, Any], scenario: dict[str, Any] | None,
                     hunt: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """The findings of checked results (in catalogue order), and the anomalies the settings allow."""
    promises = results.get("promises") or {}
    flagged = invalidating(bool(promises.get("idempotent")), bool(promises.get("ordered")))
    counts = results.get("counts") or {}
    cfg, faults = durability_config(scenario), planned_faults(scenario)
    found, allowed = [], {}
    for a in ANOMALY_LIST:
        if not counts.get(a.name) or a.part_of is not None:
            continue
        if a.name in hunt:
            found.append(a.name)
        elif a.name in flagged:
            why = allowance(a.name, cfg, faults)
            if why is None:
                found.append(a.name)
            else:
                allowed[a.name] = why
    return found, allowed


def trial_verdict(run_dir: Path | None, hunt: tuple[str, ...] = ()) -> TrialVerdict:
    """What a trial's run showed: finding, allowed, clean, or not judged (with the reason)."""
    if run_dir is None:
        return TrialVerdict("error", reason="no run directory was made")
    run = RunDir(run_dir)
    try:
        results = read_results(run)
    except HistoryError as e:
        return TrialVerdict("not_judged", reason=str(e))
    scenario = read_scenario(run)
    reasons = run_not_judged(results, scenario)
    if reasons:
        return TrialVerdict("not_judged", reason="; ".join(reasons))
    found, allowed = judged_anomalies(results, scenario, hunt)
    if found:
        return TrialVerdict("finding", found, allowed)
    missing = unverified(results)
    if missing:  # nothing found, but the read-back could not look everywhere
        return TrialVerdict("not_judged", [], allowed, unverified_text(missing))
    return TrialVerdict("allowed" if allowed else "clean", [], allowed)


def verdict_json(v: TrialVerdict) -> dict[str, Any]:
    return asdict(v)


# --- the page and the JUnit file -------------------------------------------------------------------------

def read_exploration(folder: Path) -> dict[str, Any]:
    return json.loads((folder / EXPLORATION).read_text(encoding="utf-8"))


def coverage(trials: list[dict[str, Any]]) -> dict[str, list[tuple[str, int, int]]]:
    """Per part of the space (fault kind and target, each setting's values): (value, trials, findings), from
    the trials drawn (not the shrinker's)."""
    drawn = [t for t in trials if t["purpose"] == "explore" and t["outcome"] != "refused"]
    parts: dict[str, Counter[str]] = {}
    found: dict[str, Counter[str]] = {}
    for t in drawn:
        keys = [("faults", f"{f['kind']} {f.get('target', '(default target)')}") for f in t["faults"]]
        keys += [("faults", f"{f['kind']} then {f['then']['kind']}") for f in t["faults"] if f.get("then")]
        keys += [(k, json.dumps(v)) for k, v in t["settings"].items()]
        for part, value in set(keys):
            parts.setdefault(part, Counter())[value] += 1
            found.setdefault(part, Counter())[value] += t["outcome"] == "finding"
    return {part: [(v, n, found[part][v]) for v, n in sorted(c.items())] for part, c in sorted(parts.items())}


def write_page(folder: Path) -> Path:
    """FOLDER/index.html: the trials in order, what parts of the space they covered, each finding with its
    shrunk scenario, its rate and the runs behind it."""
    data = read_exploration(folder)
    trials = data["trials"]
    counts = Counter(t["outcome"] for t in trials if t["purpose"] == "explore" and t["outcome"] != "refused")
    html = templates().get_template("exploration.html.j2").render(
        data=data, trials=trials, counts=counts, outcomes=OUTCOMES, coverage=coverage(trials),
        refused=sum(1 for t in trials if t["outcome"] == "refused"))
    path = folder / INDEX
    write_atomically(path, html)
    return path


def write_junit(folder: Path, path: Path) -> Path:
    """One test case per drawn trial (skipped when not judged) and one per finding (a failure)."""
    data = read_exploration(folder)
    drawn = [t for t in data["trials"] if t["purpose"] == "explore" and t["outcome"] != "refused"]
    findings = data["findings"]
    skipped = sum(1 for t in drawn if t["outcome"] in ("not_judged", "error"))
    total = sum(t["seconds"] for t in data["trials"])
    suites = ET.Element("testsuites", name=f"kchaos explore {data['space']}", tests=str(len(drawn) + len(findings)),
                        failures=str(len(findings)), errors="0", time=f"{total:.1f}")
    suite = ET.SubElement(suites, "testsuite", name=f"kchaos.explore.{data['space']}",
                          tests=str(len(drawn) + len(findings)), failures=str(len(findings)), errors="0",
                          skipped=str(skipped), time=f"{total:.1f}")
    for t in drawn:
        case = ET.SubElement(suite, "testcase", classname=f"kchaos.explore.{data['space']}", name=t["name"],
                             file=t["scenario"], time=f"{t['seconds']:.1f}")
        if t["outcome"] in ("not_judged", "error"):
            ET.SubElement(case, "skipped", message=f"{t['outcome']}: {t['reason']}")
        ET.SubElement(case, "system-out").text = trial_line(t)
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=f"kchaos.explore.{data['space']}",
                             name=f"finding {f['id']}: {f['anomaly']}", file=f["scenario"], time="0")
        ET.SubElement(case, "failure", message=finding_line(f), type="Finding").text = "\n".join(f["steps"])
    ET.indent(suites)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
    return path


def trial_line(t: dict[str, Any]) -> str:
    said = t["outcome"] + (f" ({', '.join(t['anomalies'])})" if t["anomalies"] else "")
    if t["allowed"]:
        said += "; allowed: " + ", ".join(f"{a} ({why})" for a, why in t["allowed"].items())
    return said + (f"; {t['reason']}" if t["reason"] else "")


def finding_line(f: dict[str, Any]) -> str:
    shown, runs = f["rate"]
    return (f"{f['anomaly']} shown in {shown} of {runs} runs of the shrunk scenario {f['scenario']} "
            f"(found by {f['trial']}; {len(f['steps'])} steps kept)")
