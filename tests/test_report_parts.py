"""The report's parts on small inputs made by hand: the headline sentence, the fault windows, the packed latency
points, the rate axis and the matrix's keys. The whole page, in Chromium, is test_report.py's."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rundir.layout import RunDir
from verdicts.expect import MET, NOT_JUDGED, UNMET, Assessment, assess
from verdicts.matrix import clients_text, fault_column, settings_lines
from verdicts.report import NS
from verdicts.report.examples import describe_examples
from verdicts.report.figure import latency_title, rate_ceiling, timeline_figure
from faults.targets import TARGETS
from verdicts.report.headline import TARGET_WORDS, anticipated, headline, percent
from verdicts.report.latency import Points, decode, encode, new_points
from verdicts.report.scan import Scan, scan_history
from verdicts.report.page import write_report
from verdicts.report.settings import allowance
from verdicts.report.versions import version_note, version_spans
from verdicts.report.windows import Blame, add_recovery, fault_context

ACKS1 = {"client": "librdkafka", "metadata": "zookeeper", "acks": "1", "min.insync.replicas": 1,
         "replication factor": 3, "unclean election": False, "idempotence": False, "flush": "OS page cache",
         "commit": "manual"}
ACKSALL = {**ACKS1, "acks": "all", "min.insync.replicas": 2, "idempotence": True}


def kill(start_s: float, end_s: float | None, node: str = "broker2", target: str = "partition-leader") -> dict:
    return {"fault": "kill", "target": target, "targets": [node], "detail": f"SIGKILL {node}",
            "start_ns": int(start_s * NS), "end_ns": None if end_s is None else int(end_s * NS)}


def results(**counts: int) -> dict[str, Any]:
    base = {"sent": 468_100, "acked": 468_057, "failed": 0, "reads_live": 0,
            "reads_final": 466_841, "lost": 0, "lost_after_read": 0, "duplicated": 0, "divergent": 0}
    return {"valid": not any(counts.get(k) for k in ("lost", "divergent")), "counts": {**base, **counts},
            "final_read_complete": True}


# --- the headline ------------------------------------------------------------------------------------------


def test_every_fault_target_has_a_word_in_the_headline_and_the_matrix() -> None:
    assert set(TARGETS) <= set(TARGET_WORDS)


def test_a_loss_the_settings_allow_passes_in_one_sentence() -> None:
    windows = [kill(10, 15), kill(25, 30), kill(40, 45)]
    top = headline(results(lost=1216, divergent=1216), Assessment(MET), ACKS1, [("kill", "partition-leader")],
                   {"lost": ">0"}, windows, [Counter(lost=1000), Counter(), Counter(lost=216)], 1216)
    assert top.sentence == ("PASS — acks=1 lost 1,216 of 468,057 acknowledged writes (0.26 %) in 2 of 3 leader "
                            "kills, as these settings allow.")
    assert (top.status, top.css) == ("PASS", "pass")
    # lost and divergent are the same offsets: one row, the overlap inside it; amber, never red
    assert [(r["name"], r["tone"]) for r in top.rows] == [("lost", "allowed")]
    assert top.rows[0]["subsets"][0].startswith("of which 1,216 also divergent")
    assert top.tones["lost"] == top.tones["divergent"] == "allowed"


def test_a_broken_promise_fails_and_says_which_expectation_broke() -> None:
    top = headline(results(lost=12, divergent=12), Assessment(UNMET, unmet=["lost is 12, expected 0"]), ACKSALL,
                   [("kill", "partition-leader")], {"lost": 0}, [kill(10, 15)], [Counter(lost=12)], 12)
    assert top.sentence == ("FAIL — acks=all, min.insync.replicas=2 lost 12 of 468,057 acknowledged writes "
                            "(0.0026 %) in 1 of 1 leader kill; expectation broken: lost is 12, expected 0.")
    assert top.tones["lost"] == "broken" and top.rows[0]["why"] == "breaks an expectation"


def test_an_anomaly_expected_but_not_found_is_red_among_those_not_found() -> None:
    top = headline(results(), Assessment(UNMET, unmet=["lost is 0, expected >0"]), ACKS1, [], {"lost": ">0"},
                   [kill(1, 2)], [Counter()], 0)
    assert top.sentence.endswith("; expectation broken: lost is 0, expected >0.")
    assert ("lost", "broken", ">0") in top.zero and ("duplicated", "", None) in top.zero


def test_an_anomaly_no_expectation_covers_is_red_when_it_breaks_a_promise() -> None:
    top = headline(results(duplicated=3), Assessment(MET), ACKSALL, [], {"lost": 0}, [kill(10, 15)],
                   [Counter(duplicated=3)], 0)
    assert top.sentence.startswith("PASS — the idempotent producer duplicated 3 of 468,057 acknowledged writes")
    assert top.sentence.endswith("which these settings promise cannot happen (duplicated; no expectation "
                                 "covers it).")
    assert top.tones["duplicated"] == "broken"


def test_an_anomaly_the_scenario_expects_is_not_red() -> None:
    top = headline(results(lost=5, divergent=5), Assessment(MET), ACKSALL, [], {"lost": ">0"}, [kill(1, 2)],
                   [Counter(lost=5)], 5)
    assert top.sentence.endswith(", as the scenario expects.") and top.tones["lost"] == "allowed"


def test_a_run_cut_short_is_not_judged() -> None:
    assessment = Assessment(NOT_JUDGED, not_judged=["the run was cut short: no final read-back was recorded"],
                            proved_nothing=True)
    top = headline({**results(), "cut_short": True}, assessment, ACKS1, [], {}, [], [], 0)
    assert top.sentence == ("NOT JUDGED — the run was cut short: no final read-back was recorded; 468,057 writes "
                            "were acknowledged before that.")
    assert top.css == "unjudged"


def test_a_clean_run_says_every_write_came_back() -> None:
    top = headline(results(), Assessment(MET), ACKSALL, [], {"lost": 0}, [kill(1, 2), kill(5, 6)], [], 0)
    assert top.sentence == ("PASS — all 468,057 acknowledged writes were read back exactly once through 2 leader "
                            "kills.")
    assert ("lost", "", 0) in top.zero and not [r for r in top.rows if r["tone"]]


@pytest.mark.parametrize("n, d, text", [(1216, 468_057, "0.26 %"), (12, 400_000, "0.003 %"), (1, 10**9, "< 0.001 %"),
                                        (5, 10, "50 %"), (2996, 3000, "99.9 %"), (0, 7, "0 %"), (3, 0, "")])
def test_percentages_keep_two_figures_and_never_round_to_all(n: int, d: int, text: str) -> None:
    assert percent(n, d) == text


def test_what_the_settings_allow() -> None:
    assert allowance("lost", ACKS1, []) == "acks=1"
    assert allowance("lost", ACKSALL, []) is None
    assert allowance("lost", {**ACKSALL, "min.insync.replicas": 1}, []) == "acks=all with min.insync.replicas=1"
    assert allowance("lost", {**ACKSALL, "unclean election": True}, []) == "unclean leader election"
    assert allowance("lost", ACKSALL, [("power-loss", "all-brokers")]) == \
        "no fsync before a power loss of several brokers"
    assert allowance("lost", ACKSALL, [("power-loss", "random-broker")]) is None
    assert (allowance("duplicated", ACKS1, []) == "retries without idempotence"
            and not allowance("duplicated", ACKSALL, []))
    assert allowance("consumer_skipped", {**ACKSALL, "commit": "auto"}, []) == "auto commit"
    assert allowance("aborted_read", ACKS1, []) is None
    assert [anticipated(v) for v in (">0", ">=1", 3, 0, "==0", "<=10", None)] == \
        [True] * 3 + [False] * 2 + [True, False]


# --- fault windows ---------------------------------------------------------------------------------------------


def test_a_write_is_blamed_on_the_fault_that_hit_after_it_and_a_read_on_the_one_before() -> None:
    faults = [kill(10, 15), kill(20, 25), kill(21, 22, node="broker3")]
    blame = Blame(faults)
    assert [blame.after(int(t * NS)) for t in (5, 12, 17, 21.5, 23, 30)] == [0, 0, 1, 2, 1, None]
    assert [blame.before(int(t * NS)) for t in (5, 12, 17, 21.5, 30)] == [None, 0, 0, 2, 1]
    assert fault_context(int(9.5 * NS), faults, acknowledged=True) == "0.50 s before fault 1 (kill broker2) began"
    assert fault_context(int(17 * NS), faults) == "2.00 s after fault 1 (kill broker2) healed"
    assert fault_context(int(12 * NS), faults) == "during fault 1 (kill broker2), 2.00 s in"


def observations(*states: tuple[float, tuple[int, ...]]) -> dict[int, list[tuple[int, Any, tuple[int, ...]]]]:
    return {0: [(int(t * NS), 1, isr) for t, isr in states]}


def test_down_lasts_until_the_process_starts_and_recovering_until_it_is_back_in_sync() -> None:
    window = kill(10, 18)
    events = [{"kind": "process_start", "node": "broker2", "time_ns": 16 * NS},
              {"kind": "isr_expand", "node": "broker1", "time_ns": int(18.4 * NS), "topic": "t", "partition": 0,
               "new_isr": [1, 3, 2]}]
    obs = observations((9, (1, 2, 3)), (12, (1, 3)), (19, (1, 2, 3)))
    add_recovery([window], obs, [("t", 0)], events)
    assert (window["down_ns"], window["recovered_ns"]) == (16 * NS, int(18.4 * NS))
    assert window["recovery"] == "from the node logs"


def test_without_node_logs_an_observation_after_the_broker_left_the_isr_says_when_it_was_back() -> None:
    window = kill(10, 18)
    # still listed at 11 s (the controller had not noticed), out at 12 s, listed again from 19 s
    add_recovery([window], observations((9, (1, 2, 3)), (11, (1, 2, 3)), (12, (1, 3)), (19, (1, 2, 3))),
                 [("t", 0)], [])
    assert (window["down_ns"], window["recovered_ns"], window["recovery"]) == (
        18 * NS, 19 * NS, "from the ISR observations")


def test_a_later_fault_on_the_same_broker_does_not_push_back_the_first_recovery() -> None:
    first, second = kill(10, 18), kill(30, 38)
    obs = observations((9, (1, 2, 3)), (12, (1, 3)), (19, (1, 2, 3)), (32, (1, 3)), (40, (1, 2, 3)))
    add_recovery([first, second], obs, [("t", 0)], [])
    assert (first["recovered_ns"], second["recovered_ns"]) == (19 * NS, 40 * NS)


def test_a_fault_nested_inside_another_on_the_same_broker_does_not_cut_the_outer_ones_recovery_short() -> None:
    outer, inner = {**kill(10, 40), "fault": "partition"}, kill(20, 30)
    obs = observations((9, (1, 2, 3)), (12, (1, 3)), (42, (1, 2, 3)))
    add_recovery([outer, inner], obs, [("t", 0)], [])
    assert outer["recovered_ns"] == 42 * NS
    # the outer fault had already taken the broker out of every ISR: the inner one has nothing of its own
    assert (inner["recovered_ns"], inner["recovery"]) == (30 * NS, "")


def test_a_broker_never_back_in_sync_is_said_so() -> None:
    window = kill(10, 18)
    add_recovery([window], observations((9, (1, 2, 3)), (12, (1, 3)), (30, (1, 3))), [("t", 0)], [])
    assert window["recovered_ns"] is None and "not back in every ISR" in window["recovery"]


# --- the latency points ---------------------------------------------------------------------------------------


def test_the_packed_latencies_decode_to_what_was_sent() -> None:
    rng = random.Random(1)
    points = new_points()
    sent = []
    t = 5 * NS
    for _ in range(20_000):
        t += rng.randrange(0, 400_000)
        latency = int(rng.lognormvariate(15, 1.5))
        invoke = t - rng.randrange(0, 50_000_000)  # completion order: invoke times go back and forth
        points["ok"].add(invoke, latency)
        sent.append((invoke, latency))
    points["unknown"].add(t, -1)  # still in flight at the end
    encoded = encode(points, t + 2 * NS)
    xs, ys = decode(encoded)["ok"]
    for (invoke, latency), x, y in zip(sent, xs, ys):
        assert abs(x - invoke / NS) <= 1e-4 + 1e-9  # 0.1 ms
        assert abs(y - latency / 1e6) <= latency / 1e6 * 6e-4 + 1e-6  # 0.05 %
    assert decode(encoded)["unknown"][1][0] == pytest.approx(2000, rel=1e-3)  # drawn at the end of the history
    # a few bytes a point, base64 included, even for this noise (a real history, whose sends complete in
    # batches, packs into less): a million sends cost a few megabytes, where JSON numbers cost 20
    assert len(encoded["series"]["ok"]["data"]) / 20_000 < 5


def test_an_old_info_send_is_drawn_as_unknown(tmp_path: Path) -> None:
    """A history written before the status was renamed says ``info`` where it now says ``unknown``: the report
    draws it with the unknown sends (rate and latency)."""
    (tmp_path / "history").mkdir()
    sends = [{"producer": "p0", "seq": seq, "topic": "t", "partition": 0, "status": status,
              "invoke_ns": seq * NS, "complete_ns": seq * NS + 5_000_000}
             for seq, status in enumerate(("ok", "fail", "unknown", "info"))]
    (tmp_path / "history" / "sends.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sends))
    scan = scan_history(RunDir(tmp_path))
    assert {status: p.seen for status, p in scan.latency.items()} == {"ok": 1, "unknown": 2, "fail": 1}
    assert (sum(scan.failed.v), sum(scan.unknown.v)) == (1, 2)


def test_past_the_cap_every_kth_point_is_kept() -> None:
    p = Points(cap=10)
    for i in range(100):
        p.add(i, i)
    assert (p.seen, p.stride, list(p.invoke)) == (100, 16, list(range(0, 100, 16)))
    assert len(p.invoke) <= 10


# --- the rate axis ------------------------------------------------------------------------------------------------


def test_the_rate_axis_is_cut_above_catch_up_spikes_but_not_above_a_steady_rate() -> None:
    steady = [8000.0] * 60
    spiky = list(steady)
    spiky[20], spiky[40] = 140_000.0, 90_000.0
    ceiling = rate_ceiling([spiky])
    assert ceiling is not None and 8000 < ceiling < 90_000
    assert rate_ceiling([steady]) is None
    assert rate_ceiling([[8000.0] * 50 + [20_000.0] * 3]) is None  # 2.5× the typical rate stays on the axis


# --- the matrix's keys ---------------------------------------------------------------------------------------------


def test_the_matrix_keys_on_fault_kind_and_target_and_on_the_clients_that_ran() -> None:
    scenario = {"faults": [{"kind": "partition", "target": "partition-leader",
                            "then": {"kind": "power-loss", "target": "same"}},
                           {"kind": "kill", "target": "txn-coordinator"}]}
    assert fault_column(scenario) == "kill txn-coordinator + partition partition-leader → power-loss same"
    java = {"client": "java", "version": "3.9.2"}
    assert clients_text({"clients": {"producer": java, "consumer": java,
                                     "reader": {"client": "librdkafka", "version": "2.16.0"}}}) == "java 3.9.2"
    assert clients_text({"clients": {"producer": java, "consumer": {"client": "librdkafka", "version": "2.16.0"}}}) \
        == "consumer librdkafka 2.16.0, producer java 3.9.2"
    assert settings_lines(ACKS1) == ["acks=1 · min ISR 1 · RF 3", "not idempotent", "no fsync · manual commit"]


def test_the_latency_title_says_when_points_were_thinned() -> None:
    scan = Scan()
    assert "drawn" not in latency_title(scan)
    scan.latency["ok"] = Points(cap=10)
    for i in range(25):
        scan.latency["ok"].add(i, i)
    assert latency_title(scan).endswith("— drawn: every 4th of 25 acknowledged")


# --- the release row: each node's Kafka release over time ---------------------------------------------------


def restarted(node: str, stopped_s: float, served_s: float, was: str = "3.9.2", now: str = "4.3.1",
              synced_s: float | None = None) -> dict[str, Any]:
    """A rolling fault's node-version line for one node it restarted."""
    return {"kind": "node-version", "fault": "rolling-upgrade", "step": "restarted", "node": node,
            "role": "controller" if node.startswith("controller") else "broker", "from_version": was, "version": now,
            "stopped_ns": int(stopped_s * NS), "time_ns": int(served_s * NS),
            "in_sync_ns": None if synced_s is None else int(synced_s * NS)}


RAISED = {"kind": "node-version", "fault": "rolling-upgrade", "step": "raised", "setting": "metadata.version",
          "value": "4.3-IV0", "time_ns": 40 * NS}
ROLL = {"fault": "rolling-upgrade", "target": "all-brokers", "targets": ["broker1", "broker2", "broker3"],
        "detail": "...", "start_ns": 10 * NS, "end_ns": 45 * NS}


def rolled_scan() -> Scan:
    """A KRaft cluster rolled from 3.9.2 to 4.3.1, broker3 never reached (the roll stopped at broker2)."""
    scan = Scan(start_ns=2 * NS, end_ns=60 * NS, faults=[ROLL])
    scan.node_versions = [restarted("broker2", 30, 34, synced_s=35), restarted("controller1", 11, 14), RAISED,
                          restarted("broker1", 20, 25, synced_s=26)]
    return scan


def test_each_node_runs_its_first_release_until_the_roll_stops_it_and_the_new_one_once_it_serves() -> None:
    spans = version_spans(rolled_scan())
    assert list(spans) == ["controller1", "broker1", "broker2", "broker3"]  # controllers on top, by number
    assert [(s.start_ns / NS, s.end_ns / NS, s.version) for s in spans["broker1"]] == [
        (2, 20, "3.9.2"), (20, 25, None), (25, 60, "4.3.1")]
    assert [(s.start_ns / NS, s.end_ns / NS, s.version) for s in spans["broker3"]] == [(2, 60, "3.9.2")]


def test_a_second_roll_on_the_same_release_is_a_second_stop() -> None:
    scan = Scan(start_ns=0, end_ns=50 * NS, faults=[ROLL])
    scan.node_versions = [restarted("broker1", 10, 12, "3.7.2", "3.9.2"),
                          restarted("broker1", 30, 33, "3.9.2", "3.9.2")]
    assert [(s.start_ns / NS, s.end_ns / NS, s.version) for s in version_spans(scan)["broker1"]] == [
        (0, 10, "3.7.2"), (10, 12, None), (12, 30, "3.9.2"), (30, 33, None), (33, 50, "3.9.2")]


def test_the_timeline_gets_a_release_row_with_a_colour_per_release_and_the_raise_marked() -> None:
    fig = timeline_figure(rolled_scan(), 3)
    names = [t.name for t in fig.data if t.legendgroup == "versions"]
    assert names == ["Kafka 3.9.2", "Kafka 4.3.1", "stopped by the roll", "serving again after its restart"]
    (served,) = [t for t in fig.data if t.name == "serving again after its restart"]
    assert "broker1 serving on 4.3.1 (was 3.9.2) at 25.0 s, back in every ISR it left at 26.0 s" in served.text
    assert list(fig.layout.yaxis5.categoryarray) == ["broker3", "broker2", "broker1", "controller1"]
    assert [(s.x0, s.yref) for s in fig.layout.shapes if s.xref == "x5"] == [(40.0, "y5 domain")]
    assert any(a.text == "metadata.version → 4.3-IV0" for a in fig.layout.annotations)
    assert fig.layout.xaxis5.title.text == "seconds since the run started"


def test_a_run_without_node_version_lines_has_no_release_row_and_says_why_when_it_rolled() -> None:
    scan = Scan(start_ns=0, end_ns=60 * NS, faults=[ROLL])
    fig = timeline_figure(scan)
    assert "yaxis5" not in fig.layout and not any(t.legendgroup == "versions" for t in fig.data)
    assert "no node-version lines" in (version_note(scan) or "")
    assert version_note(Scan(faults=[kill(1, 2)])) is None and version_note(rolled_scan()) is None


def test_the_page_draws_the_release_row_from_events_jsonl(tmp_path: Path) -> None:
    (tmp_path / "history").mkdir()
    lines = [{"kind": "fault", "phase": "start", **ROLL, "end_ns": None, "time_ns": 44 * NS},
             {"kind": "fault", "phase": "heal", **ROLL, "time_ns": 45 * NS}, *rolled_scan().node_versions]
    (tmp_path / "history" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    results = {"valid": True, "counts": {"sent": 0, "acked": 0, "lost": 0}, "final_read_complete": True}
    page = write_report(RunDir(tmp_path), results, None, assess(None, results)).read_text()
    assert "Kafka release per node" in page and "The last row has a strip per node" in page
    assert "broker2 serving on 4.3.1 (was 3.9.2) at 34.0 s" in page and "no node-version lines" not in page
    (tmp_path / "history" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines[:2]))
    page = write_report(RunDir(tmp_path), results, None, assess(None, results)).read_text()
    assert "Kafka release per node" not in page and "no node-version lines" in page


def test_a_poll_example_says_where_the_consumer_was_and_where_it_read_next() -> None:
    reads = [{"consumer": "c1", "group": "g", "phase": "live", "topic": "t", "partition": 0, "offset": o,
              "producer": "p0", "seq": o, "time_ns": t * NS, "assignment": 1} for o, t in ((1, 4), (3, 5))]
    results = {"counts": {"poll_skipped": 1}, "examples": {"poll_skipped": [
        {"consumer": "c1", "topic": "t", "partition": 0, "previous_offset": 1, "offset": 3, "reads": reads}]}}
    [section] = describe_examples(results, [{"fault": "kill", "targets": ["broker1"], "start_ns": 2 * NS,
                                             "end_ns": 9 * NS}])
    [row] = section["rows"]
    assert (section["name"], row["what"], len(row["reads"])) == ("poll_skipped", "c1 on t-0: offset 3 after 1", 2)
    assert row["detail"] == "during fault 1 (kill broker1), 3.00 s in"
