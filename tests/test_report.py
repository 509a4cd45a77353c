"""The per-run report, the reliability matrix and the nightly job, looked at the way a person would.

Most tests build a small run directory by hand (a history with a leader kill
that truncates acknowledged messages, two duplicates, failed and unknown
sends), check it with the reference checker and render it; the page itself
is then opened in headless Chromium and read back from its DOM. One test,
marked ``cluster``, does the same with a real short run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from checkers.reference import check_run
from rundir.documents import write_results
from rundir.layout import RunDir
from harness.cli import main
from verdicts.expect import assess
from verdicts.matrix import write_matrix
from harness.nightly import Variant, nightly, nightly_scenarios
from verdicts.junit import Outcome, junit_xml
from verdicts.report import NS, scan_history, use_series, write_report
from harness.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make setup)")

FAULT_START, FAULT_END = 10 * NS, 18 * NS
LOSS_FROM, LOSS_TO = 10 * NS, 11 * NS  # partition 0 loses what it acknowledged in this second


# --- a run directory made by hand ------------------------------------------------------------------


RESTART, REJOIN = 16 * NS + NS // 2, 18 * NS + NS // 2  # broker1's process starts again; it rejoins every ISR
ELECTED, TRUNCATED = 11 * NS + NS // 5, 17 * NS  # broker2 leads p0 without the lost tail; broker1 drops it


def make_run(root: Path, scenario_file: str = "acks1-leader-kill.yaml", *, lossy: bool = True,
             stamp: str = "20260101T000000.000000Z", seconds: int = 30, rate: int = 50,
             broker_events: bool = True, forensics: bool = False) -> Path:
    """A run directory whose history shows what a leader kill under acks=1 does, with the checker's verdict;
    ``broker_events``: with the node logs' events (history/broker-events.jsonl), ``forensics``: and with
    results.json's causal chains."""
    scenario = load_scenario(REPO / "scenarios" / scenario_file, ["topic.partitions=3"]).resolved()
    scenario["started_at"] = "2026-01-01T00:00:00+00:00"
    run = root / scenario["name"] / stamp
    (run / "history").mkdir(parents=True)
    (run / "logs").mkdir()
    for node in ("broker1", "broker2"):
        (run / "logs" / f"{node}.log").write_text("".join(
            f"[2026-01-01 00:00:{n:02d},000] INFO {node} line {n} (kafka.server.Example)\n" for n in range(1, 31)))
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))

    sends: list[dict[str, Any]] = []
    for producer in ("p0", "p1"):
        for seq in range(seconds * rate):
            invoke = int((seq / rate + 0.5) * NS) + (7_000_000 if producer == "p1" else 0)
            # slower during the fault, but never so much faster from one send to the next that acks reorder
            slow = max(0.0, 1 - abs(invoke - 14 * NS) / (4 * NS))
            latency = 3_000_000 + (seq % 7) * 1_000_000 + int(400_000_000 * slow)
            sends.append({"producer": producer, "seq": seq, "topic": "chaos", "key": str(seq),
                          "partition": seq % 3, "offset": None, "status": "ok", "error": None,
                          "invoke_ns": invoke, "complete_ns": invoke + latency})
    sends.sort(key=lambda s: s["complete_ns"])
    # three failed sends during the fault, one still in flight at the end
    for s in sends[700:703]:
        s.update(status="fail", error="Local: Message timed out", partition=None)
    sends[-1].update(status="unknown", error="in flight at the end", complete_ns=None)

    next_offset = {0: 0, 1: 0, 2: 0}
    lost: list[dict[str, Any]] = []
    truncated_at: int | None = None
    for s in sends:
        if s["status"] != "ok":
            continue
        p = s["partition"]
        if lossy and p == 0 and truncated_at is not None and s["complete_ns"] >= LOSS_TO:
            next_offset[0], truncated_at = truncated_at, None  # the new leader reuses the truncated offsets
        s["offset"] = next_offset[p]
        next_offset[p] += 1
        if lossy and p == 0 and LOSS_FROM <= s["complete_ns"] < LOSS_TO:
            lost.append(s)
            truncated_at = s["offset"] if truncated_at is None else truncated_at
    lost_ids = {(s["producer"], s["seq"]) for s in lost}

    reads: list[dict[str, Any]] = []
    final: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
    for s in sorted((s for s in sends if s["status"] == "ok"), key=lambda s: (s["partition"], s["offset"])):
        if (s["producer"], s["seq"]) in lost_ids:
            continue
        final[s["partition"]].append(s)
    if lossy:  # two messages of partition 2 were written twice (a retry after a lost response)
        final[2] += [s for s in final[2] if s["producer"] == "p1"][5:7]
    end = (seconds + 5) * NS
    for p, messages in final.items():
        for offset, s in enumerate(messages):
            if offset < len(messages) - (2 if lossy and p == 2 else 0):
                reads.append({"consumer": "c0", "group": "chaos-app", "phase": "live", "topic": "chaos",
                              "partition": p, "offset": offset, "producer": s["producer"], "seq": s["seq"],
                              "time_ns": s["complete_ns"] + 200_000_000})
            reads.append({"consumer": "final-reader", "group": None, "phase": "final", "topic": "chaos",
                          "partition": p, "offset": offset, "producer": s["producer"], "seq": s["seq"],
                          "time_ns": end + offset * 1000})

    events: list[dict[str, Any]] = []
    for second in range(1, seconds + 1):
        for p in range(3):
            moved = p == 0 and second * NS > FAULT_START + NS
            isr = [2, 3] if FAULT_START + 2 * NS < second * NS < FAULT_END + NS else [1, 2, 3]
            events.append({"kind": "leader", "topic": "chaos", "partition": p, "leader": 2 if moved else p + 1,
                           "isr": isr, "time_ns": second * NS})
        if second * NS == FAULT_START:
            events.append({"kind": "fault", "fault": "kill", "phase": "start", "target": "partition-leader",
                           "targets": ["broker1"], "start_ns": FAULT_START, "end_ns": None,
                           "detail": "SIGKILL broker1", "time_ns": FAULT_START + 5_000_000})
        if second * NS == FAULT_END:
            events.append({"kind": "fault", "fault": "kill", "phase": "heal", "target": "partition-leader",
                           "targets": ["broker1"], "start_ns": FAULT_START, "end_ns": FAULT_END,
                           "detail": "SIGKILL broker1", "time_ns": FAULT_END + 1000})
    for p, messages in final.items():
        events.append({"kind": "committed", "group": "chaos-app", "topic": "chaos", "partition": p,
                       "offset": len(messages) - (2 if lossy and p == 2 else 0), "time_ns": end - NS})
        events.append({"kind": "final-read", "topic": "chaos", "partition": p, "high_watermark": len(messages),
                       "complete": True, "time_ns": end + NS})

    cut = lost[0]["offset"] if lost else 0
    nodes = [{"kind": "process_start", "node": "broker1", "time_ns": RESTART, "line": 20},
             {"kind": "become_leader", "node": "broker2", "time_ns": ELECTED, "line": 5, "topic": "chaos",
              "partition": 0, "leader": 2, "leader_epoch": 1, "log_end_offset": cut, "isr": [2, 3]},
             {"kind": "truncate", "node": "broker1", "time_ns": TRUNCATED, "line": 22, "topic": "chaos",
              "partition": 0, "to_offset": cut, "reason": "leader_epoch"},
             *({"kind": "isr_expand", "node": f"broker{2 if p == 0 else p + 1}", "time_ns": REJOIN, "line": 24 + p,
                "topic": "chaos", "partition": p, "new_isr": [2, 3, 1]} for p in range(3))]
    for name, lines in (("sends", sends), ("reads", reads), ("events", events),
                        *((("broker-events", nodes),) if broker_events else ())):
        (run / "history" / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    results = check_run(run)
    if forensics and lost:
        results["forensics"] = chains_of(lost)
    write_results(RunDir(run), results)
    write_report(RunDir(run), results, scenario, assess(scenario.get("expect"), results, scenario))
    return run


def chains_of(lost: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json's ``forensics`` for the fixture's loss: one chain, the loss per fault, one unexplained."""
    first, last = lost[0]["offset"], lost[-1]["offset"]
    return {
        "chains": [{"anomaly": "lost", "topic": "chaos", "partition": 0, "count": len(lost),
                    "first_ns": lost[0]["complete_ns"], "last_ns": lost[-1]["complete_ns"], "min_offset": first,
                    "max_offset": last, "fault": 1,
                    "sentence": f"chaos-0: {len(lost)} records (offsets {first}–{last}) acknowledged by broker1 as "
                                "leader in epoch 0 between 10.0 and 11.0 s; broker2 elected without them at 11.2 s; "
                                "broker1 truncated them at 17.0 s",
                    "steps": [{"time_ns": FAULT_START, "node": "broker1", "what": "SIGKILL broker1 at 10.0 s (fault 1)",
                               "line": 0},
                              {"time_ns": ELECTED, "node": "broker2", "what": "broker2 leader in epoch 1", "line": 5},
                              {"time_ns": TRUNCATED, "node": "broker1", "what": f"broker1 truncated to {first}",
                               "line": 22}]}],
        "lost_by_fault": [{"fault": 1, "label": "SIGKILL broker1 at 10.0 s", "lost": len(lost), "duplicated": 0,
                           "divergent": len(lost)},
                          {"fault": None, "label": "unexplained", "lost": 0, "duplicated": 2, "divergent": 0}],
        "unexplained": [{"anomaly": "duplicated", "topic": "chaos", "partition": 2, "count": 2, "first_ns": 0,
                         "last_ns": 0, "why": "no leader change of chaos-2 near these writes"}],
    }


@pytest.fixture(scope="module")
def lossy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), forensics=True)


# --- reading a page back from headless Chromium ---------------------------------------------------------


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Dom(HTMLParser):
    """Every element as (tag, attributes), and the text inside each element that has an id."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text_by_id: dict[str, str] = {}
        self._open: list[str | None] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in VOID:
            self._open.append(a.get("id"))
            if a.get("id"):
                self.text_by_id.setdefault(a["id"], "")

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for i in self._open:
            if i:
                self.text_by_id[i] += data

    def having(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements
                if (tag is None or t == tag) and (cls is None or cls in a.get("class", "").split())
                and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


class Table(HTMLParser):
    """The rows of the table with this id, each a list of its cells' text (spaces collapsed)."""

    def __init__(self, text: str, table_id: str) -> None:
        super().__init__()
        self.id, self.depth, self.rows = table_id, 0, []
        self.cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and (self.depth or dict(attrs).get("id") == self.id):
            self.depth += 1
        elif self.depth and tag == "tr":
            self.rows.append([])
        elif self.depth and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self.depth:
            self.depth -= 1
        elif self.depth and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data + " ")


def chromium(page: Path, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", "--virtual-time-budget=10000", *args,
             page.resolve().as_uri()], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


# Loaded first, it writes every uncaught error, rejected promise and console.error into the page's DOM.
RECORD_ERRORS = ("<script>(function () {\n"
                 "  const seen = [];\n"
                 '  const note = m => { seen.push(String(m)); '
                 'document.documentElement.setAttribute("data-page-errors", JSON.stringify(seen)); };\n'
                 '  window.addEventListener("error", e => note(e.message || "error loading " + '
                 '(e.target && (e.target.src || e.target.href))), true);\n'
                 '  window.addEventListener("unhandledrejection", e => note("unhandled rejection: " + e.reason));\n'
                 "  const error = console.error;\n"
                 '  console.error = (...args) => { note(args.join(" ")); error.apply(console, args); };\n'
                 "})();</script>")


def look_at(page: Path, shots: Path, name: str) -> Dom:
    """Screenshots of the page at 1400 and 800 px wide (shots/<name>-<width>.png), and its DOM once drawn, with
    no page error (uncaught, rejected or console.error) along the way; KCHAOS_SCREENSHOTS=DIR keeps a copy."""
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1400, 800):
        png = shots / f"{name}-{width}.png"
        chromium(page, f"--screenshot={png}", f"--window-size={width},4000")
        assert png.is_file() and png.stat().st_size > 20_000
    instrumented = page.with_name(f".{page.stem}.instrumented.html")  # beside it: its links stay relative
    instrumented.write_text(page.read_text().replace("<head>", "<head>" + RECORD_ERRORS, 1))
    try:
        dom = Dom(chromium(instrumented, "--dump-dom", "--window-size=1400,4000").stdout)
    finally:
        instrumented.unlink()
    root = dom.elements[0][1] if dom.elements else {}
    assert dom.elements[0][0] == "html" and "data-page-errors" not in root, root.get("data-page-errors")
    keep = os.environ.get("KCHAOS_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for png in shots.glob(f"{name}-*.png"):
            shutil.copy(png, Path(keep) / png.name)
    return dom


def assert_report_page(dom: Dom, results: dict[str, Any], status: str, partitions: int = 3) -> None:
    """The headline, the anomalies, a timeline that plotly really drew with data, every send's latency, a strip
    per partition."""
    assert dom.text_by_id["headline"].strip().startswith(f"{status} — ")
    assert dom.having("p", "headline", data_status=status)
    facts = {a["data-count"] for a in dom.having("div", "card") if a.get("data-count")}
    assert {"sent", "acked", "failed", "unknown", "reads_live", "reads_final"} <= facts
    counts = dom.text_by_id["counts"].replace("\n", "").replace(" ", "")
    for name in ("lost", "duplicated", "acked"):
        assert f"{name}{results['counts'][name]:,}" in counts
    # plotly drew the timeline: an SVG, line traces with real paths, bars, and the fault shading
    assert dom.having("div", "js-plotly-plot", id="timeline")
    assert len(dom.having("svg", "main-svg")) >= 2
    lines = [a["d"] for a in dom.having("path", "js-line") if a.get("d")]
    assert len(lines) >= 2 and max(len(d) for d in lines) > 200, "no line trace holds data"
    assert len(dom.having("g", "subplot")) == 4, "the four rows of the timeline were not all drawn"
    assert dom.having("g", "shapelayer"), "fault windows not shaded"
    # the latency row holds a point per send (the page inflated them and handed them to scattergl)
    [timeline] = dom.having("div", id="timeline")
    sends = results["counts"]["sent"]
    assert int(timeline.get("data-latency-points", "0")) == sends
    assert dom.having("canvas", "gl-canvas"), "scattergl drew nothing"
    # one strip per partition: its label on the strips' axis
    labels = {a["data-unformatted"] for a in dom.having("text") if re.fullmatch(r"p\d+", a.get("data-unformatted", ""))}
    assert labels == {f"p{i}" for i in range(partitions)}


# --- the report -----------------------------------------------------------------------------------------


def test_the_streaming_pass_draws_and_the_checker_counts(lossy_run: Path) -> None:
    results = json.loads((lossy_run / "results.json").read_text())
    assert results["counts"]["lost"] > 10 and results["counts"]["duplicated"] == 2
    scan = scan_history(RunDir(lossy_run))
    assert scan.totals == {}  # the legend's counts are the checker's, filled in by the page
    assert not any(scan.lost.v) and not any(scan.acked.v)  # the pass draws no ack or anomaly of its own...
    use_series(scan, results)  # ...they are the checker's, per second (results.json series)
    # every lost message is drawn at the second it was acknowledged (10 s), duplicates at theirs
    assert [s for s, n in enumerate(scan.lost.v) if n] == [10]
    assert sum(scan.lost.v) == results["counts"]["lost"]
    assert sum(scan.duplicated.v) == 2
    assert sum(scan.acked.v) == results["counts"]["acked"] and sum(scan.failed.v) == 3
    assert sum(scan.unknown.v) == 1
    by_label = {p.label: p for p in scan.partitions}
    assert by_label["p0"].leader_changes == 1 and by_label["p0"].min_isr == 2
    old = scan_history(RunDir(lossy_run))
    use_series(old, {k: v for k, v in results.items() if k != "series"})  # results.json checked before series
    assert not any(old.lost.v) and any("no per-second series" in n for n in old.notes)
    assert not hasattr(by_label["p0"], "lost") and not hasattr(scan, "per_fault")  # nothing counted twice
    assert [(w["fault"], w["start_ns"], w["end_ns"]) for w in scan.faults] == [("kill", FAULT_START, FAULT_END)]
    # the checker's counts per partition and per fault: the new leader reused the lost offsets, so every lost
    # message is also divergent, and all came with the kill
    breakdown = results["breakdown"]
    by_partition = {r["partition"]: r for r in breakdown["partitions"]}
    assert by_partition[0]["lost"] == results["counts"]["lost"] and by_partition[2]["duplicated"] == 2
    assert sum(r["acked"] for r in breakdown["partitions"]) == results["counts"]["acked"]
    assert sum(r["reads_final"] for r in breakdown["partitions"]) == results["counts"]["reads_final"]
    assert breakdown["lost_divergent"] == results["counts"]["lost"] == results["counts"]["divergent"]
    assert breakdown["faults"][0]["fault"] == 1 and breakdown["faults"][0]["kind"] == "kill"
    assert breakdown["faults"][0]["lost"] == results["counts"]["lost"]
    # every send has its latency point; the in-flight one too
    assert {status: p.seen for status, p in scan.latency.items()} == {"ok": results["counts"]["acked"],
                                                                       "fail": 3, "unknown": 1}


def test_the_partition_and_fault_tables_show_the_checkers_counts(lossy_run: Path, tmp_path: Path) -> None:
    """Every number of both tables is results.json's, even where a history would give another (here the counts
    are changed by hand); there is no note comparing the two."""
    run = RunDir(Path(shutil.copytree(lossy_run, tmp_path / "run")))
    results = json.loads(run.results.read_text())
    del results["forensics"]  # the checker's per-fault counts, not the node logs'
    for row in results["breakdown"]["partitions"]:
        row.update(acked=1000 + row["partition"], lost=7 if row["partition"] == 0 else 0, divergent=0,
                   duplicated=0, lost_unverifiable=0, reads_live=11, reads_final=22)
    results["breakdown"]["faults"][0].update(lost=7, duplicated=0, divergent=0)
    scenario = yaml.safe_load(run.scenario.read_text())
    page = write_report(run, results, scenario, assess(scenario.get("expect"), results, scenario)).read_text()
    [head, *rows] = Table(page, "partitions").rows
    cells = {row[0]: dict(zip(head, row)) for row in rows}
    assert cells["p0"]["acked"] == "1,000" and cells["p1"]["acked"] == "1,001"
    assert cells["p0"]["lost"].startswith("7 ") and cells["p0"]["reads live / final"] == "11 / 22"
    assert "duplicated" not in head and "divergent" not in head
    [fhead, frow] = Table(page, "faults").rows
    assert dict(zip(fhead, frow))["lost"] == "7 100 % of all"
    assert "on or after its acknowledgement (the checker" in page and "recount" not in page


def test_an_older_results_json_renders_without_counts_per_partition_or_fault(lossy_run: Path, tmp_path: Path) -> None:
    run = RunDir(Path(shutil.copytree(lossy_run, tmp_path / "run")))
    results = json.loads(run.results.read_text())
    del results["forensics"], results["breakdown"]
    scenario = yaml.safe_load(run.scenario.read_text())
    page = write_report(run, results, scenario, assess(scenario.get("expect"), results, scenario)).read_text()
    [head, *rows] = Table(page, "partitions").rows
    assert [row[0] for row in rows] == ["p0", "p1", "p2"]
    assert {dict(zip(head, row))["acked"] for row in rows} == {"—"}
    assert "lost" not in head
    [fhead, frow] = Table(page, "faults").rows
    assert dict(zip(fhead, frow))["lost"] == "—"
    assert "written by an older kchaos" in page and "No counts per partition" in page and "recount" not in page


def test_the_report_is_one_self_contained_file(lossy_run: Path) -> None:
    page = (lossy_run / "report.html").read_text()
    assert "<script src" not in page and 'rel="stylesheet"' not in page
    assert page.count("plotly.js v") == 1, "plotly.js must be embedded exactly once"
    assert page.count("Plotly.newPlot") == 1
    # per-second aggregates and a few bytes a send for the latency plot: the page grows little with the history
    sends = json.loads((lossy_run / "results.json").read_text())["counts"]["sent"]
    assert len(page) < 5_000_000 + 4 * sends
    for text in ("1: kill broker1", "SIGKILL broker1", "p0/", "during fault 1 (kill broker1)",
                 "at its acknowledged offset the reads found instead", 'href="history/sends.jsonl"',
                 'href="logs/broker1.log"', "min.insync.replicas"):
        assert text in page, text


def test_the_headline_says_the_verdict_rate_and_faults_in_one_sentence(lossy_run: Path) -> None:
    dom = Dom((lossy_run / "report.html").read_text())
    counts = json.loads((lossy_run / "results.json").read_text())["counts"]
    lost, acked, backwards = counts["lost"], counts["acked"], counts["send_nonmonotonic"]
    share = f"{100 * lost / acked:.1f} %"
    # the new leader handed out the truncated offsets again: acks after the fault came back below earlier ones
    assert backwards > 0
    assert " ".join(dom.text_by_id["headline"].split()) == (
        f"PASS — acks=1 lost {lost:,} of {acked:,} acknowledged writes ({share}) in 1 of 1 leader kill; also 2 "
        f"duplicated ({100 * 2 / acked:.2g} %) and {backwards:,} send nonmonotonic ({100 * backwards / acked:.2g} %), "
        "as these settings allow.")
    # lost and divergent are one set here: one row, the divergent ones inside it, and nothing red
    [lost_row] = dom.having("li", data_anomaly="lost")
    assert "allowed" in lost_row["class"] and not dom.having("li", data_anomaly="divergent")
    assert f"of which {lost:,} also divergent" in dom.text_by_id["anomalies"]
    assert not dom.having(cls="broken")


def test_the_faults_are_split_into_down_and_recovering_from_the_node_logs(lossy_run: Path) -> None:
    page = (lossy_run / "report.html").read_text()
    [head, row] = Table(page, "faults").rows
    fault = dict(zip(head, row))
    # SIGKILLed at 10 s, its process started at 16.5 s, back in every ISR at 18.5 s; healed (the harness) at 18 s
    assert (fault["start"], fault["down"], fault["recovering"], fault["healed"]) == (
        "10.000 s", "6.5 s", "2.0 s from the node logs", "18.000 s")
    # per fault from results.json's forensics, with its share of the run's loss
    lost = json.loads((lossy_run / "results.json").read_text())["counts"]["lost"]
    assert fault["lost"] == f"{lost:,} 100 % of all" and "from the node logs (forensics;" in page


def test_why_the_messages_were_lost_links_every_step_to_its_log_lines(lossy_run: Path) -> None:
    page = (lossy_run / "report.html").read_text()
    dom = Dom(page)
    why = " ".join(dom.text_by_id["why"].split())
    assert "Why these messages were lost" in why and "broker2 elected without them at 11.2 s" in why
    assert "no leader change of chaos-2 near these writes" in why  # what the forensics could not explain
    links = {a["href"] for a in dom.having("a", "log-link")}
    assert {"#log-broker2-5", "#log-broker1-22"} <= links
    for link in links:  # each link opens an excerpt embedded in the page: the line and three either side
        excerpt = " ".join(dom.text_by_id[link[1:]].split())
        node, line = link[len("#log-"):].rsplit("-", 1)
        assert f"logs/{node}.log line {line}" in excerpt and f"{node} line {line} " in excerpt
        assert f"{node} line {int(line) - 3} " in excerpt and f"{node} line {int(line) + 4} " not in excerpt
    # an example inside the chain shows its sentence; the fault before it is named
    [example] = dom.having("table", "examples", data_anomaly="lost")
    assert "acknowledged by broker1 as leader in epoch 0" in page and "during fault 1 (kill broker1)" in page


def test_the_largest_chains_come_first_and_the_rest_one_click_away(lossy_run: Path, tmp_path: Path) -> None:
    run = RunDir(Path(shutil.copytree(lossy_run, tmp_path / "run")))
    results = json.loads(run.results.read_text())
    [chain] = results["forensics"]["chains"]
    results["forensics"]["chains"] = [{**chain, "count": n, "sentence": f"chain of {n}"} for n in range(1, 8)]
    scenario = yaml.safe_load(run.scenario.read_text())
    dom = Dom(write_report(run, results, scenario, assess(scenario.get("expect"), results, scenario)).read_text())
    shown = [" ".join(t.split()) for t in dom.text_by_id["why"].split("its steps and log lines")][:-1]
    assert [t.split("chain of ")[1] for t in shown] == ["7", "6", "5", "4", "3", "2", "1"]
    assert "2 more" in dom.text_by_id["more-chains"] and "chain of 2" in dom.text_by_id["more-chains"]
    assert "chain of 3" not in dom.text_by_id["more-chains"]


def test_without_forensics_the_examples_point_at_the_node_log_events_of_their_partition(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    page = (run / "report.html").read_text()
    dom = Dom(page)
    assert "why" not in dom.text_by_id  # no chains: no section
    assert "became leader of chaos-0 in epoch 1" in page and "without the message" in page
    assert "truncated chaos-0 to offset" in page and "(it had acknowledged the message as leader)" in page
    assert {"#log-broker2-5", "#log-broker1-22"} <= {a["href"] for a in dom.having("a", "log-link")}
    assert "each counted at the first fault that hit on or after its acknowledgement" in page


def test_without_broker_events_the_isr_observations_tell_the_recovery(tmp_path: Path) -> None:
    run = make_run(tmp_path, broker_events=False)
    page = (run / "report.html").read_text()
    [head, row] = Table(page, "faults").rows
    fault = dict(zip(head, row))
    # down until the heal (18 s); back in every ISR at the first observation listing broker1 again (19 s)
    assert (fault["down"], fault["recovering"]) == ("8.0 s", "1.0 s from the ISR observations")
    dom = Dom(page)
    assert "log-excerpts" not in dom.text_by_id and not dom.having("a", "log-link")


def test_report_cli_rewrites_the_report_and_refuses_a_run_without_results(lossy_run: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    (lossy_run / "report.html").unlink()
    assert main(["report", str(lossy_run)]) == 0
    assert (lossy_run / "report.html").is_file()
    assert "report:" in capsys.readouterr().out
    (tmp_path / "history").mkdir()
    assert main(["report", str(tmp_path)]) == 2
    assert "results.json: missing" in capsys.readouterr().err


def test_a_report_without_history_or_scenario_still_says_the_verdict(tmp_path: Path) -> None:
    results = {"valid": True, "counts": {"sent": 0, "acked": 0, "lost": 0}, "final_read_complete": True}
    page = write_report(RunDir(tmp_path), results, None, assess(None, results)).read_text()
    assert 'data-status="PASS"' in page and "unknown (no scenario.yaml)" in page
    assert "history/sends.jsonl is missing" in page


def test_the_report_shows_kafkas_find_hanging_beside_kchaos_count_and_a_transaction_chain(tmp_path: Path) -> None:
    """A disagreement is shown, not hidden; a transaction's chain is listed with the others."""
    view = {"kchaos_hanging_transaction": 0, "kafka_hanging_partitions": 1, "agree": False,
            "brokers": [{"broker": 1, "node": "broker1", "asked": True, "hanging": 1, "why": None},
                        {"broker": 2, "node": "broker2", "asked": False, "hanging": None, "why": "exit 1"}],
            "open_transactions": [{"transactional_id": "kchaos-r-p1", "state": "Ongoing"}],
            "summary": "Kafka's find-hanging found 1 partition ...; kchaos counted 0: they DISAGREE"}
    chain = {"anomaly": "aborted_read", "producer": "p1", "txn": 812, "count": 2, "steps": [],
             "sentence": "transaction 812 of p1: its messages visible to read_committed although aborted; ..."}
    results = {"valid": False, "counts": {"sent": 10, "acked": 10, "aborted_read": 2, "hanging_transaction": 0},
               "final_read_complete": True, "kafka_transactions": view,
               "forensics": {"chains": [], "unexplained": [], "lost_by_fault": [], "transaction_chains": [chain]}}
    page = write_report(RunDir(tmp_path), results, None, assess(None, results)).read_text()
    assert 'id="kafka-transactions" class="disagree"' in page and "they DISAGREE" in page
    assert "broker2 could not ask (exit 1)" in page and "kchaos-r-p1 Ongoing" in page
    assert 'data-chain="aborted_read">transaction 812 of p1' in page
    assert "Why these messages were shown although not committed" in page


@needs_chromium
def test_the_report_renders_in_chromium(lossy_run: Path, tmp_path: Path) -> None:
    results = json.loads((lossy_run / "results.json").read_text())
    dom = look_at(lossy_run / "report.html", tmp_path / "shots", "report")
    assert_report_page(dom, results, "PASS")
    assert "kill broker1" in dom.text_by_id.get("timeline", ""), "fault label not drawn"
    rows = {a["data-partition"] for a in dom.having("tr") if a.get("data-partition")}
    assert rows == {"p0", "p1", "p2"}
    assert dom.having("table", "examples", data_anomaly="lost")


@needs_chromium
def test_a_link_to_a_log_line_opens_its_excerpt(lossy_run: Path) -> None:
    page = lossy_run / "report.html"
    result = chromium(page, "--dump-dom", "--window-size=1400,4000").stdout
    assert not [a for a in Dom(result).having("details", "log") if "open" in a]
    with tempfile.TemporaryDirectory() as profile:
        opened = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--no-first-run",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
             page.resolve().as_uri() + "#log-broker1-22"], capture_output=True, text=True, timeout=300).stdout
    assert [a["id"] for a in Dom(opened).having("details", "log") if "open" in a] == ["log-broker1-22"]


# --- the matrix -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("matrix")
    make_run(root, "acks1-leader-kill.yaml", stamp="20260101T000000.000000Z")
    make_run(root, "acks1-leader-kill.yaml", stamp="20260102T000000.000000Z")
    cut = make_run(root, "acks1-leader-kill.yaml", stamp="20260104T000000.000000Z")
    results = json.loads((cut / "results.json").read_text())
    write_results(RunDir(cut), {**results, "cut_short": True})  # proved nothing: grey, and in no rate
    make_run(root, "acksall-leader-kill.yaml", lossy=False)
    (root / "acks1-leader-kill" / "20260103T000000.000000Z" / "history").mkdir(parents=True)  # still running
    write_matrix(root)
    return root


def test_the_matrix_adds_up_runs_per_configuration_and_fault(runs_root: Path) -> None:
    page = (runs_root / "index.html").read_text()
    dom = Dom(page)
    cells = dom.having("td", "cell")
    assert len(cells) == 2
    by_verdict = {c["data-verdict"]: c for c in cells}
    lossy = json.loads(next(runs_root.glob("acks1-leader-kill/20260101*/results.json")).read_text())["counts"]
    anomalies = by_verdict["anomalies"]
    # the two judged acks=1 runs add up; the cut-short one counts in no rate and does not turn the cell grey
    assert anomalies["data-lost"] == str(2 * lossy["lost"]) and anomalies["data-acked"] == str(2 * lossy["acked"])
    assert (anomalies["data-duplicated"], anomalies["data-met"], anomalies["data-runs"]) == ("4", "2", "3")
    assert by_verdict["valid"]["data-lost"] == "0"
    text = " ".join(Dom(page).text_by_id["matrix"].split())
    assert f"2/3 met 1 not judged lost {100 * lossy['lost'] / lossy['acked']:.1f} %" in text
    assert "1/1 met lost 0 %" in text
    # rows by Kafka version, metadata mode and the client the processes ran; columns by fault kind and target
    assert "Kafka 3.9.2 ZooKeeper · librdkafka" in text
    assert {c["data-fault"] for c in cells} == {"kill partition-leader"}
    assert Table(page, "matrix").rows[0] == ["configuration", "kill leader"]
    links = [a["href"] for a in dom.having("a", "run")]
    assert len(links) == 4 and all((runs_root / link).is_file() for link in links)
    assert all(link.endswith("report.html") for link in links)
    assert len([a for a in dom.having("a", "run") if "unjudged" in a["class"]]) == 1
    assert "acks=1: the leader alone acknowledges" in page and "acks=all, min.insync=2" in page


def test_runs_on_several_versions_get_a_column_each(runs_root: Path, tmp_path: Path) -> None:
    """The nightly's version axis: a row per scenario and mode, a column per Kafka release and client; a root of
    one version has no such table."""
    assert 'id="versions"' not in (runs_root / "index.html").read_text()
    make_run(tmp_path, "acks1-leader-kill.yaml", stamp="20260101T000000.000000Z")
    newer = make_run(tmp_path, "acks1-leader-kill.yaml", stamp="20260102T000000.000000Z")
    scenario = yaml.safe_load((newer / "scenario.yaml").read_text())
    scenario["cluster"]["kafka_version"] = "3.10.0"  # a column after 3.9.2 by number, not by text
    (newer / "scenario.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    write_matrix(tmp_path)
    table = Table((tmp_path / "index.html").read_text(), "versions")
    assert [c.split(" · ")[0] for c in table.rows[0][1:]] == ["3.9.2", "3.10.0"]
    assert table.rows[1][0] == "acks1-leader-kill · ZooKeeper" and all("1/1 met" in c for c in table.rows[1][1:])


def test_a_cell_of_runs_that_proved_nothing_is_grey(tmp_path: Path) -> None:
    run = make_run(tmp_path, "acks1-leader-kill.yaml")
    write_results(RunDir(run), {**json.loads((run / "results.json").read_text()), "cut_short": True})
    write_matrix(tmp_path)
    [cell] = Dom((tmp_path / "index.html").read_text()).having("td", "cell")
    assert cell["data-verdict"] == "unjudged" and "unjudged" in cell["class"].split()


@needs_chromium
def test_the_matrix_renders_in_chromium(runs_root: Path, tmp_path: Path) -> None:
    dom = look_at(runs_root / "index.html", tmp_path / "shots", "matrix")
    assert len(dom.having("td", "cell")) == 2
    assert {a["data-fault"] for a in dom.having("td", "cell")} == {"kill partition-leader"}
    assert len(dom.having("tr")) >= 3 and dom.having("ul", id="legend")


def test_matrix_cli_on_an_empty_root(tmp_path: Path) -> None:
    assert main(["matrix", str(tmp_path)]) == 0
    assert "No finished run" in (tmp_path / "index.html").read_text()


# --- nightly ------------------------------------------------------------------------------------------------


def test_the_repository_marks_both_leader_kill_scenarios_nightly() -> None:
    chosen, broken = nightly_scenarios(REPO / "scenarios")
    assert not broken
    assert {"acks1-leader-kill", "acksall-leader-kill"} <= {v.name.split("@")[0] for v in chosen}


def test_nightly_runs_each_marked_scenario_and_writes_junit(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("acks1-leader-kill.yaml", "acksall-leader-kill.yaml"):
        shutil.copy(REPO / "scenarios" / name, scenarios / name)
    (scenarios / "manual.yaml").write_text("name: manual\nnightly: false\n")
    (scenarios / "broken.yaml").write_text("name: broken\nnightly: true\nno_such_key: 1\n")
    out = tmp_path / "runs"
    ran: list[str] = []

    def fake_run(variant: Variant, out_dir: Path, log_dir: Path) -> Outcome:
        name, path = variant.name, variant.path
        ran.append(name)
        stamp = f"2026010{len(ran)}T000000.000000Z"
        run = make_run(out_dir, path.name, lossy=path.stem == "acks1-leader-kill", stamp=stamp)
        code = 1 if path.stem == "acksall-leader-kill" else 0
        text = f"run directory: {run}\nverdict: {'valid; expectations NOT met: lost is 0' if code else 'ok'}\n"
        return Outcome(name, path, code, 1.5, text, str(run))

    code = nightly(scenarios, out, out / "junit.xml", runner=fake_run)
    variants = [f"{name}@{mode}" for name in ("acks1-leader-kill", "acksall-leader-kill")
                for mode in ("zookeeper", "kraft")]
    assert sorted(ran) == sorted(variants)
    assert code == 2  # broken.yaml could not be loaded
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "5" and suite.get("failures") == "2"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"broken", *variants}
    assert all(cases[f"acksall-leader-kill@{m}"].find("failure") is not None for m in ("zookeeper", "kraft"))
    assert cases["broken"].find("error") is not None
    ok = cases["acks1-leader-kill@kraft"]
    assert ok.find("failure") is None and ok.find("error") is None
    assert (out / "index.html").is_file()


def test_nightly_runs_a_scenario_once_per_listed_metadata_mode(tmp_path: Path) -> None:
    (tmp_path / "both.yaml").write_text("name: both\nnightly: [zookeeper, kraft]\n")
    (tmp_path / "as-written.yaml").write_text("name: as-written\nnightly: true\n")
    chosen, broken = nightly_scenarios(tmp_path)
    assert not broken
    assert [(v.name, v.overrides) for v in chosen] == [
        ("as-written", ()), ("both@zookeeper", ("cluster.metadata=zookeeper",)),
        ("both@kraft", ("cluster.metadata=kraft",))]


def test_nightly_refuses_an_unknown_metadata_mode(tmp_path: Path) -> None:
    (tmp_path / "odd.yaml").write_text("name: odd\nnightly: [etcd]\n")
    chosen, broken = nightly_scenarios(tmp_path)
    assert chosen == [] and len(broken) == 1 and "nightly" in broken[0].output


def test_junit_for_all_green_has_no_failures() -> None:
    xml = junit_xml([Outcome("a", Path("a.yaml"), 0, 2.0, "verdict: valid; expectations met\n")])
    root = xml.getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert root.find("testsuite/testcase/system-out") is not None


# --- a real short run ------------------------------------------------------------------------------------


@pytest.mark.cluster
@needs_chromium
def test_report_of_a_real_short_run(tmp_path: Path, losing_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    # a leader cut from the cluster while the producers reach it: acks=1 loses every time (test_run.LOSING, run
    # once for this test and test_run's); a copy, so that the report and the matrix written here change nothing
    run = tmp_path / losing_run[0].parent.name / losing_run[0].name
    shutil.copytree(losing_run[0], run, ignore=shutil.ignore_patterns("cluster"))
    started = time.monotonic()
    assert main(["report", str(run)]) == 0
    print(f"report of {run}: {(run / 'report.html').stat().st_size:,} bytes in {time.monotonic() - started:.1f} s")
    results = json.loads((run / "results.json").read_text())
    assert results["counts"]["lost"] > 0 and results["expectations"]["outcome"] == "met"
    dom = look_at(run / "report.html", tmp_path / "shots", "report")
    assert_report_page(dom, results, "PASS")
    assert len({a["data-partition"] for a in dom.having("tr") if a.get("data-partition")}) == 3
    assert write_matrix(tmp_path).is_file()
    mdom = look_at(tmp_path / "index.html", tmp_path / "shots", "matrix")
    assert len(mdom.having("td", "cell")) == 1
    keep = os.environ.get("KCHAOS_KEEP_REPORT")  # a folder to copy the run and screenshots to, to look at them
    if keep:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(run, keep, ignore=shutil.ignore_patterns("cluster"))
        for png in (tmp_path / "shots").glob("*.png"):
            shutil.copy(png, Path(keep) / png.name)
