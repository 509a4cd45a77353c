"""The verdict stage on hand-made run directories: what `kchaos check` concludes, and that the matrix and the
nightly's JUnit conclude the same; runs that proved nothing are never a pass."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from rundir.documents import SCHEMA_VERSION
from rundir.versions import kchaos_version
from verdicts.matrix import find_runs
from verdicts.junit import Outcome, junit_xml
from test_checker_reference import final_read, read, send, write_jsonl

RUN_STAMP = "20260101T000000.000000Z"


def run_dir(root: Path, sends: list, reads: list, events: list, expect: dict | None = None,
            faults: list | None = None) -> Path:
    """A run directory of scenario ``s`` with this history."""
    run = root / "s" / RUN_STAMP
    (run / "history").mkdir(parents=True)
    scenario = {"name": "s", "started_at": "2026-01-01T00:00:00+00:00", "cluster": {"kafka_version": "3.9.2"},
                "workload": {"producers": {"config": {"acks": "1"}}}, "faults": faults or [], "expect": expect}
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    write_jsonl(run / "history" / "sends.jsonl", sends)
    write_jsonl(run / "history" / "reads.jsonl", reads)
    write_jsonl(run / "history" / "events.jsonl", events)
    return run


def ten_acks_read_back_to(upto: int, root: Path, **kwargs) -> Path:
    """10 acks in one partition; the read-back stopped at ``upto`` (complete only when it reached 10)."""
    return run_dir(root, [send("p0", i) for i in range(10)], [read("p0", i, i) for i in range(upto)],
                   [{"kind": "client", "client": "librdkafka", "version": "2.16.0", "time_ns": 5},
                    {**final_read(high_watermark=10, complete=upto == 10), "time_ns": 2_500_000_000}], **kwargs)


def check(run: Path, capsys: pytest.CaptureFixture[str], engine: str = "python") -> tuple[int, str, str]:
    code = main(["check", str(run), "--engine", engine])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("engine", ["python", "spark"])
def test_an_incomplete_read_back_does_not_pass_an_expectation_it_could_break(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    run = ten_acks_read_back_to(3, tmp_path, expect={"lost": 0})
    code, out, _ = check(run, capsys, engine)
    assert code == 2, out
    assert "expectations not judged: lost: 0 not judged" in out and "lost could be 0..7" in out
    results = json.loads((run / "results.json").read_text())
    assert results["counts"]["lost_unverifiable"] == 7
    assert results["expectations"]["outcome"] == "not judged" and results["exit_code"] == 2
    [cell_run], _ = find_runs(tmp_path)
    assert cell_run.verdict == "unjudged"
    junit = junit_xml([Outcome("s", run, code, 1.0, out)]).getroot()
    assert junit.get("errors") == "1" and junit.find(".//error") is not None


@pytest.mark.parametrize("engine", ["python", "spark"])
def test_a_transactional_run_without_its_read_committed_read_back_is_not_judged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    """The read_uncommitted read-back finished and the read_committed one left nothing: the committed messages
    were never verified, so valid is not claimed (exit 2), and the reason line says why."""
    sends = [{**send("p0", i), "txn": 0} for i in range(3)]
    run = run_dir(tmp_path, sends, [{**read("p0", i, i), "isolation": "read_uncommitted"} for i in range(3)],
                  [{**final_read(high_watermark=4), "isolation": "read_uncommitted", "time_ns": 2_500_000_000}])
    write_jsonl(run / "history" / "txns.jsonl", [{"producer": "p0", "txn": 0, "outcome": "committed",
                                                  "intent": "commit"}])
    code, out, _ = check(run, capsys, engine)
    assert code == 2, out
    assert "verdict: valid; expectations not judged: valid not judged: the read_committed read-back left no " \
           "final-read event for 1 partition with transactional sends" in out
    results = json.loads((run / "results.json").read_text())
    assert results["counts"]["lost_unverifiable"] == 3 and results["final_read_complete"] is False
    assert results["unread_committed_partitions"] == [["t", 0]] and results["exit_code"] == 2


def test_a_complete_run_meets_its_expectation_and_says_what_ran(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    run = ten_acks_read_back_to(10, tmp_path, expect={"lost": 0})
    code, out, _ = check(run, capsys)
    assert code == 0 and "expectations met" in out
    path = run / "results.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    results = json.loads(path.read_text())
    assert {k: results[k] for k in ("schema_version", "kchaos_version", "kafka_version", "librdkafka_version",
                                    "scenario", "run_id", "started_at", "ended_at", "exit_code")} == {
        "schema_version": SCHEMA_VERSION, "kchaos_version": kchaos_version(), "kafka_version": "3.9.2",
        "librdkafka_version": "2.16.0", "scenario": "s", "run_id": f"s/{RUN_STAMP}",
        "started_at": "2026-01-01T00:00:00+00:00", "ended_at": "2026-01-01T00:00:02.500000+00:00", "exit_code": 0}
    assert results["expectations"] == {"outcome": "met", "unmet": [], "not_judged": []}
    [cell_run], _ = find_runs(tmp_path)
    assert cell_run.verdict == "valid"


def test_results_and_report_say_which_client_each_role_ran(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = ten_acks_read_back_to(10, tmp_path)
    java = {"acks": "all", "enable.idempotence": "true", "max.in.flight.requests.per.connection": "5"}
    with (run / "history" / "events.jsonl").open("a") as events:
        for event in ({"kind": "client", "client": "java", "version": "3.9.2", "process": "p0", "role": "producer",
                       "settings": java, "time_ns": 6},
                      {"kind": "client", "client": "java", "version": "3.9.2", "process": "p0.1", "role": "producer",
                       "settings": java, "time_ns": 7},
                      {"kind": "client", "client": "librdkafka", "version": "2.5.0", "binding": "confluent-kafka 2.5.0",
                       "process": "c0", "role": "consumer", "settings": {"isolation.level": "read_committed"},
                       "time_ns": 8}):
            events.write(json.dumps(event) + "\n")
    assert check(run, capsys)[0] == 0
    results = json.loads((run / "results.json").read_text())
    assert results["clients"] == {
        "producer": {"client": "java", "version": "3.9.2", "settings": java},
        "consumer": {"client": "librdkafka", "version": "2.5.0", "settings": {"isolation.level": "read_committed"},
                     "binding": "confluent-kafka 2.5.0"}}
    assert results["librdkafka_version"] == "2.16.0"  # the harness's own (a pinned workload.client_version aside)
    report = (run / "report.html").read_text()
    assert "producer client" in report and "java 3.9.2 (acks=all, enable.idempotence=true" in report
    assert "librdkafka 2.5.0 through confluent-kafka 2.5.0 (isolation.level=read_committed)" in report


@pytest.mark.parametrize("change, said", [
    (lambda h: (h / "reads.jsonl").unlink(), "history/reads.jsonl is missing"),
    (lambda h: (h / "reads.jsonl").write_text(""), "history/reads.jsonl is empty"),
    (lambda h: (h / "sends.jsonl").unlink(), "history/sends.jsonl is missing"),
    (lambda h: (h / "sends.jsonl").write_text("\n"), "history/sends.jsonl is empty"),
])
def test_a_run_missing_its_history_is_not_judged_and_keeps_what_it_had(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change, said: str) -> None:
    run = ten_acks_read_back_to(10, tmp_path, expect={"lost": 0})
    assert check(run, capsys)[0] == 0
    before = (run / "results.json").read_text()
    change(run / "history")
    code, out, err = check(run, capsys)
    assert code == 2 and out == ""
    assert one_line(err).startswith(f"kchaos: not judged: {said}")
    assert (run / "results.json").read_text() == before  # nothing already recorded is lost


def test_a_run_cut_short_is_one_line_not_judged_with_its_counts_kept(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = run_dir(tmp_path, [send("p0", i) for i in range(3)], [read("p0", 0, 0, phase="live")], [])
    code, out, err = check(run, capsys)
    assert code == 2 and out == ""
    assert "the run was cut short" in one_line(err)
    results = json.loads((run / "results.json").read_text())
    assert results["cut_short"] is True and results["counts"]["acked"] == 3 and results["exit_code"] == 2


def test_a_chaos_run_whose_faults_never_happened_is_not_judged(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    skipped = {"kind": "fault", "fault": "partition", "phase": "skipped", "target": "partition-leader",
               "targets": [], "start_ns": 5, "end_ns": 5, "detail": "no partition-leader to hit right now",
               "time_ns": 5}
    faults = [{"kind": "partition", "target": "partition-leader"}]
    run = run_dir(tmp_path, [send("p0", i) for i in range(3)], [read("p0", i, i) for i in range(3)],
                  [skipped, skipped, final_read(high_watermark=3)], expect={"lost": 0}, faults=faults)
    code, out, err = check(run, capsys)
    assert code == 2 and out == ""
    assert one_line(err).startswith("kchaos: not judged: none of the scenario's 1 fault took effect "
                                    "(no partition-leader to hit right now)")
    results = json.loads((run / "results.json").read_text())
    assert results["faults"] == {"planned": 1, "applied": 0, "skipped": 2,
                                 "skip_reasons": ["no partition-leader to hit right now"]}
    [cell_run], _ = find_runs(tmp_path)
    assert cell_run.verdict == "unjudged"

