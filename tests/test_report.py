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
import shutil
import subprocess
import sys
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
from verdicts.report import NS, latency_bucket, bucket_ms, scan_history, write_report
from harness.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make setup)")

FAULT_START, FAULT_END = 10 * NS, 18 * NS
LOSS_FROM, LOSS_TO = 10 * NS, 11 * NS  # partition 0 loses what it acknowledged in this second


# --- a run directory made by hand ------------------------------------------------------------------


def make_run(root: Path, scenario_file: str = "acks1-leader-kill.yaml", *, lossy: bool = True,
             stamp: str = "20260101T000000.000000Z", seconds: int = 30, rate: int = 50) -> Path:
    """A run directory whose history shows what a leader kill under acks=1 does, with the checker's verdict."""
    scenario = load_scenario(REPO / "scenarios" / scenario_file, ["topic.partitions=3"]).resolved()
    scenario["started_at"] = "2026-01-01T00:00:00+00:00"
    run = root / scenario["name"] / stamp
    (run / "history").mkdir(parents=True)
    (run / "logs").mkdir()
    (run / "logs" / "broker1.log").write_text("[2026-01-01 00:00:10] broker1 killed\n")
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
    sends[-1].update(status="info", error="in flight at the end", complete_ns=None)

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

    for name, lines in (("sends", sends), ("reads", reads), ("events", events)):
        (run / "history" / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    results = check_run(run)
    write_results(RunDir(run), results)
    write_report(RunDir(run), results, scenario, assess(scenario.get("expect"), results, scenario))
    return run


@pytest.fixture(scope="module")
def lossy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"))


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


def chromium(page: Path, *args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def rendered(page: Path, screenshot: Path) -> Dom:
    chromium(page, f"--screenshot={screenshot}", "--window-size=1400,3000")
    assert screenshot.is_file() and screenshot.stat().st_size > 20_000
    return Dom(chromium(page, "--dump-dom"))


def assert_report_page(dom: Dom, results: dict[str, Any]) -> None:
    """The verdict, the counts and a timeline that plotly really drew with data."""
    assert dom.text_by_id["verdict"].strip() == ("valid" if results["valid"] else "anomalies found")
    assert dom.text_by_id["expectations"].strip() in ("expectations met", "expectations not met")
    cards = {a["data-count"] for a in dom.having("div", "card") if a.get("data-count")}
    assert {"lost", "duplicated", "divergent", "reordered", "unknown", "acked", "failed", "indeterminate",
            "reads_live", "reads_final"} <= cards
    counts = dom.text_by_id["counts"]
    for name in ("lost", "duplicated", "acked"):
        assert f"{name}{results['counts'][name]:,}" in counts.replace("\n", "").replace(" ", "")
    # plotly drew the timeline: an SVG, line traces with real paths, bars, and the fault shading
    assert dom.having("div", "js-plotly-plot", id="timeline")
    assert len(dom.having("svg", "main-svg")) >= 2
    lines = [a["d"] for a in dom.having("path", "js-line") if a.get("d")]
    assert len(lines) >= 5 and max(len(d) for d in lines) > 200, "no line trace holds data"
    assert len(dom.having("g", "subplot")) == 4, "the four rows of the timeline were not all drawn"
    assert len(dom.having("g", "bars")) == 2, "no lost/duplicated bar trace"
    assert len(dom.having("g", "point")) > 0, "the bar traces hold no bars"


# --- the report -----------------------------------------------------------------------------------------


def test_the_streaming_pass_agrees_with_the_checker(lossy_run: Path) -> None:
    results = json.loads((lossy_run / "results.json").read_text())
    assert results["counts"]["lost"] > 10 and results["counts"]["duplicated"] == 2
    scan = scan_history(RunDir(lossy_run))
    assert scan.totals == {name: results["counts"][name] for name in ("lost", "duplicated", "divergent")}
    # every lost message sits at the second it was acknowledged (10 s), duplicates at theirs
    assert [s for s, n in enumerate(scan.lost.v) if n] == [10]
    assert sum(scan.duplicated.v) == 2
    assert sum(scan.acked.v) == results["counts"]["acked"] and sum(scan.failed.v) == 3
    assert sum(scan.unknown.v) == 1
    by_label = {p.label: p for p in scan.partitions}
    assert by_label["p0"].lost == results["counts"]["lost"] and by_label["p2"].duplicated == 2
    assert by_label["p0"].leader_changes == 1 and by_label["p0"].min_isr == 2
    assert [(w["fault"], w["start_ns"], w["end_ns"]) for w in scan.faults] == [("kill", FAULT_START, FAULT_END)]


def test_latency_buckets_are_within_a_few_percent() -> None:
    for ms in (0.004, 0.5, 3.0, 17.0, 250.0, 4000.0, 30000.0):
        got = bucket_ms(latency_bucket(int(ms * 1e6)))
        assert abs(got - ms) <= max(ms * 0.07, 0.001), (ms, got)


def test_the_report_is_one_self_contained_file(lossy_run: Path) -> None:
    page = (lossy_run / "report.html").read_text()
    assert "<script src" not in page and 'rel="stylesheet"' not in page
    assert page.count("plotly.js v") == 1, "plotly.js must be embedded exactly once"
    assert page.count("Plotly.newPlot") == 1
    # the timeline holds per-second aggregates, not messages: the page does not grow with the history
    assert len(page) < 5_500_000
    for text in ("anomalies found", "expectations met", "1: kill broker1", "SIGKILL broker1", "p0/",
                 "during kill broker1", "at its acknowledged offset the reads found instead",
                 'href="history/sends.jsonl"', 'href="logs/broker1.log"', "min.insync.replicas"):
        assert text in page, text


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
    assert 'id="verdict">valid<' in page and "unknown (no scenario.yaml)" in page
    assert "history/sends.jsonl is missing" in page


@needs_chromium
def test_the_report_renders_in_chromium(lossy_run: Path) -> None:
    results = json.loads((lossy_run / "results.json").read_text())
    dom = rendered(lossy_run / "report.html", lossy_run / "report.png")
    assert_report_page(dom, results)
    assert any("kill broker1" in t for t in (dom.text_by_id.get("timeline", ""),)), "fault label not drawn"
    assert dom.having("g", "shapelayer"), "fault windows not shaded"
    assert dom.having("g", "bars"), "lost/duplicated bars not drawn"
    rows = {a["data-partition"] for a in dom.having("tr") if a.get("data-partition")}
    assert rows == {"p0", "p1", "p2"}
    assert dom.having("table", "examples", data_anomaly="lost")


# --- the matrix -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("matrix")
    make_run(root, "acks1-leader-kill.yaml", stamp="20260101T000000.000000Z")
    make_run(root, "acks1-leader-kill.yaml", stamp="20260102T000000.000000Z")
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
    assert by_verdict["anomalies"]["data-lost"] == str(2 * lossy["lost"])
    assert by_verdict["anomalies"]["data-duplicated"] == "4"
    assert by_verdict["valid"]["data-lost"] == "0"
    links = [a["href"] for a in dom.having("a", "run")]
    assert len(links) == 3 and all((runs_root / link).is_file() for link in links)
    assert all(link.endswith("report.html") for link in links)
    assert "acks=1: the leader alone acknowledges" in page and "acks=all, min.insync=2" in page


@needs_chromium
def test_the_matrix_renders_in_chromium(runs_root: Path) -> None:
    dom = rendered(runs_root / "index.html", runs_root / "index.png")
    assert len(dom.having("td", "cell")) == 2
    assert {a["data-fault"] for a in dom.having("td", "cell")} == {"kill"}
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
def test_report_of_a_real_short_run(tmp_path: Path) -> None:
    # a leader cut from the cluster while the producers reach it: acks=1 loses every time
    args = [sys.executable, "-m", "harness.cli", "run", "scenarios/partition-leader-acks1.yaml",
            "--set", "workload.duration_s=30", "--set", "schedule.warmup_s=5", "--set", "faults.0.interval_s=[9,9]",
            "--set", "faults.0.duration_s=12", "--set", "topic.partitions=3", "--set", "workload.producers.rate=2000",
            "--out", str(tmp_path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]  # it expects lost > 0
    run = next(p for p in tmp_path.glob("*/*") if p.is_dir())
    started = time.monotonic()
    assert main(["report", str(run)]) == 0
    print(f"report of {run}: {(run / 'report.html').stat().st_size:,} bytes in {time.monotonic() - started:.1f} s")
    results = json.loads((run / "results.json").read_text())
    assert results["counts"]["lost"] > 0 and results["expectations"]["outcome"] == "met"
    dom = rendered(run / "report.html", run / "report.png")
    assert_report_page(dom, results)
    assert dom.having("g", "shapelayer"), "fault windows not shaded"
    assert len({a["data-partition"] for a in dom.having("tr") if a.get("data-partition")}) == 3
    assert write_matrix(tmp_path).is_file()
    mdom = rendered(tmp_path / "index.html", tmp_path / "index.png")
    assert len(mdom.having("td", "cell")) == 1
    keep = os.environ.get("KCHAOS_KEEP_REPORT")  # a folder to copy the run and screenshots to, to look at them
    if keep:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(run, keep, ignore=shutil.ignore_patterns("cluster"))
        shutil.copy(tmp_path / "index.png", Path(keep) / "index.png")
