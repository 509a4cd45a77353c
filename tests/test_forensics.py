"""Forensics: real Kafka 3.9.2 (ZooKeeper, KRaft) and 4.3.1 (KRaft) node logs into broker events.

tests/data/forensics/<case>/ are run directories cut down from real runs (runs/measure-p7, runs/measure-txn):
scenario.yaml's started_at, logs/ trimmed to the lines of one partition's story plus the nodes' own events and
some lines of no interest, and history/broker-events.jsonl as `kchaos forensics` wrote it, checked by hand
against the logs. Times: a log line's UTC wall clock minus started_at, e.g. 07:57:21,046 - 07:56:34.970655 =
46.075345 s.
"""

from __future__ import annotations

import json
import logging
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from forensics.command import build_broker_events
from forensics.nodelog import parse_line
from forensics.parse import NodeParser
from forensics.templates import TEMPLATES, match
from harness import cli
from rundir.broker_events import read_broker_events
from rundir.layout import RunDir

DATA = Path(__file__).parent / "data" / "forensics"
CASES = sorted(p.name for p in DATA.iterdir())


def events_of(case: str, **where: Any) -> list[dict[str, Any]]:
    """The case's parsed events whose fields equal ``where``."""
    return [e for e in build_broker_events(RunDir(DATA / case)) if all(e.get(k) == v for k, v in where.items())]


def one(case: str, **where: Any) -> dict[str, Any]:
    found = events_of(case, **where)
    assert len(found) == 1, found
    return found[0]


def without_place(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in ("node", "time_ns", "line")}


@pytest.mark.parametrize("case", CASES)
def test_each_case_parses_to_the_events_checked_by_hand(case: str, tmp_path: Path) -> None:
    run = shutil.copytree(DATA / case, tmp_path / case)
    (run / "history" / "broker-events.jsonl").unlink()
    assert cli.main(["forensics", str(run)]) == 0
    written = (run / "history" / "broker-events.jsonl").read_text()
    assert written == (DATA / case / "history" / "broker-events.jsonl").read_text()
    times = [json.loads(line)["time_ns"] for line in written.splitlines()]
    assert times == sorted(times)


def test_zookeeper_392_power_loss_of_the_only_isr_member() -> None:
    """acks=all, min.insync 1: broker3, the controller, cut from the brokers, shrinks chaos-2's ISR to itself
    (committed: it is the controller), loses power, recovers a torn tail and is elected again, cleanly."""
    case = "zookeeper-3.9.2-power-loss"
    assert one(case, kind="isr_shrink", node="broker3") == {
        "kind": "isr_shrink", "node": "broker3", "time_ns": 21_515_997_000, "line": 7, "topic": "chaos",
        "partition": 2, "by": "leader", "leader": 3, "old_isr": [3, 1, 2], "new_isr": [3], "high_watermark": 13971,
        "log_end_offset": 14035, "out_of_sync": [
            {"broker": 1, "log_end_offset": 13971, "last_caught_up_ms": 1795503800486},
            {"broker": 2, "log_end_offset": 14009, "last_caught_up_ms": 1795503800509}]}
    assert without_place(one(case, kind="isr_update")) == {
        "kind": "isr_update", "topic": "chaos", "partition": 2, "leader": 3, "new_isr": [3], "partition_epoch": 1,
        "under_min_isr": False, "old_isr": [3, 1, 2]}
    assert [e["clean_shutdown"] for e in events_of(case, kind="recovery_start")] == [False, True]
    assert one(case, kind="truncate") == {
        "kind": "truncate", "node": "broker3", "time_ns": 66_856_997_000, "line": 13, "topic": "chaos",
        "partition": 2, "to_offset": 24047, "reason": "corruption", "segment": 0}
    assert [e["log_end_offset"] for e in events_of(case, kind="log_loaded")] == [24047, 24047]
    assert without_place(one(case, kind="isr_shrink", node="broker1")) == {
        "kind": "isr_shrink", "topic": "chaos", "partition": 2, "by": "controller", "controller": 1, "leader": None,
        "leader_epoch": 1, "partition_epoch": 2, "old_isr": None, "new_isr": [3], "removed": [3]}
    election = one(case, kind="election", from_state="OfflinePartition")
    assert (election["time_ns"], election["leader"], election["leader_epoch"], election["isr"],
            election["unclean"]) == (73_202_997_000, 3, 2, [3], False)
    assert [(e["completed"], e["time_ns"]) for e in events_of(case, kind="shutdown")] == [
        (False, 67_251_997_000), (True, 68_346_997_000), (False, 68_346_997_000)]
    assert [e["time_ns"] for e in events_of(case, kind="process_start", node="broker3")] == [
        2_993_997_000, 66_149_997_000, 72_144_997_000]
    assert [(e["old_isr"], e["new_isr"]) for e in events_of(case, kind="isr_expand")] == [
        ([3], [3, 2]), ([3, 2], [3, 2, 1])]
    assert events_of(case, node="zk1") == []


def test_zookeeper_392_unclean_election_truncates_the_old_leader() -> None:
    case = "zookeeper-3.9.2-unclean"
    assert without_place(one(case, kind="election", unclean=True)) == {
        "kind": "election", "topic": "chaos", "partition": 2, "leader": 1, "leader_epoch": 2, "partition_epoch": 3,
        "isr": [1], "unclean": True, "from_state": "OfflinePartition", "controller": 2, "controller_epoch": 2}
    assert one(case, kind="unclean_recovered")["time_ns"] == 39_592_197_000
    leader = one(case, kind="become_leader", node="broker1")
    assert (leader["leader_epoch"], leader["log_end_offset"], leader["high_watermark"], leader["previous_leader"],
            leader["previous_leader_epoch"]) == (2, 6851, 6843, 3, 0)
    assert one(case, kind="log_loaded")["log_end_offset"] == 17390  # what broker3 wrote alone, before the kill
    assert one(case, kind="truncate", node="broker3") == {
        "kind": "truncate", "node": "broker3", "time_ns": 73_255_197_000, "line": 19, "topic": "chaos",
        "partition": 2, "to_offset": 6851, "reason": "leader_epoch", "leader": 1, "epoch": 0,
        "epoch_end_offset": 6851}
    assert one(case, kind="truncate", node="broker2")["time_ns"] == 40_292_197_000


def test_kraft_392_unclean_election_and_the_metadata_log() -> None:
    case = "kraft-3.9.2-unclean"
    assert without_place(one(case, kind="fenced")) == {
        "kind": "fenced", "broker": 2, "broker_epoch": None, "reason": "its session has timed out"}
    assert one(case, kind="fenced")["time_ns"] == 46_075_345_000
    elections = events_of(case, kind="election")
    assert [e["node"] for e in elections] == ["controller2", "controller1"]  # the active one, then a replay
    assert without_place(elections[0]) == {
        "kind": "election", "topic": "chaos", "partition": 1, "unclean": True, "leader": 3, "previous_leader": 2,
        "leader_epoch": 1, "previous_leader_epoch": 0, "partition_epoch": 2, "isr": [3], "old_isr": [2]}
    assert [(e["node"], e["to_offset"], e["reason"], e.get("leader")) for e in events_of(case, kind="truncate")] == [
        ("controller1", 135, "raft_fetch", 102), ("broker3", 135, "raft_fetch", 102),
        ("broker2", 10880, "leader_epoch", 3)]
    assert [(e["from_state"], e["to_state"]) for e in events_of(case, kind="broker_state", node="broker2")] == [
        ("STARTING", "RECOVERY"), ("RECOVERY", "RUNNING")]
    assert [e["time_ns"] for e in events_of(case, kind="process_start", node="controller2")] == [2_488_345_000]
    assert [(e["controller"], e["controller_epoch"]) for e in events_of(case, kind="controller")] == [
        (102, 1), (102, 4), (101, 5)]
    assert one(case, kind="log_loaded")["log_end_offset"] == 33670


def test_kraft_431_power_loss_recovery() -> None:
    case = "kraft-4.3.1-power-loss"
    truncations = events_of(case, kind="truncate")
    assert [without_place(e) for e in truncations] == [
        {"kind": "truncate", "topic": "__transaction_state", "partition": 29, "to_offset": 409,
         "reason": "leader_epoch", "leader": 3, "epoch": 0, "epoch_end_offset": 409},
        {"kind": "truncate", "topic": "chaos", "partition": 0, "to_offset": 2129, "reason": "corruption",
         "segment": 0},
        {"kind": "truncate", "topic": "__transaction_state", "partition": 29, "to_offset": 1198,
         "reason": "corruption", "segment": 0}]
    assert [e["time_ns"] for e in truncations] == [34_015_706_000, 80_627_706_000, 81_231_706_000]
    assert [(e["broker"], e["broker_epoch"]) for e in events_of(case, kind="fenced")] == [(1, 25), (1, 311), (3, 35)]
    assert without_place(one(case, kind="recovery", topic="chaos")) == {
        "kind": "recovery", "topic": "chaos", "partition": 0, "segment": 0, "segments_done": 0,
        "segments_to_recover": None}
    assert [e["to_offset"] for e in events_of(case, kind="producer_state", node="broker3", topic="chaos")] == [0, 0]
    assert [e["snapshot_offset"] for e in events_of(case, kind="producer_snapshot")] == [2129, 1198]
    assert [e["time_ns"] for e in events_of(case, kind="process_start", node="broker2")] == [11_965_706_000]


def test_the_cases_cover_every_kind_but_a_session_expiry() -> None:
    kinds = {e["kind"] for case in CASES for e in build_broker_events(RunDir(DATA / case))}
    assert kinds == {
        "become_leader", "become_follower", "unclean_recovered", "election", "isr_shrink", "isr_expand",
        "isr_update", "truncate", "recovery_start", "recovery", "log_loaded", "producer_state", "producer_snapshot",
        "process_start", "started", "shutdown", "broker_state", "controller", "fenced", "unfenced"}


# --- single lines: real ones the cases do not hold --------------------------------------------------------------

def message(line: str) -> str:
    parsed = parse_line(1, line)
    assert parsed is not None
    return parsed.message


def test_a_leader_under_min_isr_and_a_zookeeper_session_expiry() -> None:
    leader = match(message(
        "[2026-11-24 09:53:53,533] INFO [Broker id=1] Leader chaos-4 with topic id Some(KlWJ16PRSaSZQBghKIvk-w) "
        "starts at leader epoch 5 from offset 1262 with partition epoch 6, high watermark 1262, ISR [1], adding "
        "replicas [] and removing replicas [] (under-min-isr). Previous leader Some(1) and previous leader epoch "
        "was 4. (state.change.logger)"))
    assert leader == {"kind": "become_leader", "topic": "chaos", "partition": 4, "leader": 1, "leader_epoch": 5,
                      "partition_epoch": 6, "log_end_offset": 1262, "high_watermark": 1262, "isr": [1],
                      "under_min_isr": True, "previous_leader": 1, "previous_leader_epoch": 4}
    assert match(message("[2026-11-24 10:33:18,780] INFO [ZooKeeperClient Kafka server] Session expired. "
                         "(kafka.zookeeper.ZooKeeperClient)")) == {"kind": "zk_session_expired"}


def test_a_pipeline_topic_with_a_dot_and_an_isr_under_min_isr() -> None:
    follower = match(message(
        "[2026-11-24 10:50:00,057] INFO [Broker id=1] Follower chaos.out-4 starts at leader epoch 0 from offset 0 "
        "with partition epoch 0 and high watermark 0. Current leader is 2. Previous leader Some(2) and previous "
        "leader epoch was 0. (state.change.logger)"))
    assert follower is not None and (follower["topic"], follower["partition"], follower["leader"]) == (
        "chaos.out", 4, 2)
    # Partition.scala's template with its under-min-isr part filled in (no run of ours logged one)
    committed = match("[Partition __consumer_offsets-13 broker=2] ISR updated to 2 (under-min-isr) and version "
                      "updated to 4")
    assert committed is not None and (committed["new_isr"], committed["under_min_isr"]) == ([2], True)


def test_lines_without_a_time_and_lines_of_no_interest_are_skipped() -> None:
    assert parse_line(1, "\tat kafka.server.KafkaServer.startup(KafkaServer.scala:381)\n") is None
    assert parse_line(1, "org.apache.zookeeper.KeeperException$NodeExistsException: KeeperErrorCode\n") is None
    assert parse_line(1, "[not a time] INFO x\n") is None
    line = parse_line(7, "[2026-11-24 07:03:09,513] INFO [KafkaServer id=3] started (kafka.server.KafkaServer)\n")
    assert line is not None and (line.level, line.message) == ("INFO", "[KafkaServer id=3] started")
    start = datetime(2026, 11, 24, 7, 3, 5, 129003, tzinfo=timezone.utc)
    assert line.time_ns(start) == 4_383_997_000
    assert match("Registered kafka:type=kafka.Log4jController MBean") is None  # the storage formatter logs it too


def test_every_template_is_reachable() -> None:
    assert len({t.build.__name__ for t in TEMPLATES}) == len(TEMPLATES)


# --- what a broker knew before -------------------------------------------------------------------------------------

START = datetime(2026, 11, 24, 7, 0, 0, tzinfo=timezone.utc)


def parsed(*texts: str) -> list[dict[str, Any]]:
    lines = [parse_line(n, f"[2026-11-24 07:00:{n:02d},000] INFO {t} (x.Y)") for n, t in enumerate(texts, 1)]
    return NodeParser("broker1", START).events(line for line in lines if line is not None)


LEADER = ("[Broker id=1] Leader t-0 with topic id Some(x) starts at leader epoch 3 from offset 10 with partition "
          "epoch 4, high watermark 9, ISR [1,2], adding replicas [] and removing replicas [] . Previous leader "
          "Some(1) and previous leader epoch was 2.")


def test_an_isr_commit_is_an_expansion_only_against_a_smaller_known_isr() -> None:
    events = parsed(LEADER, "[Partition t-0 broker=1] ISR updated to 1,2,3  and version updated to 5",
                    "[Partition t-0 broker=1] ISR updated to 3,2,1  and version updated to 6",
                    "Registered signal handlers for TERM, INT, HUP",
                    "[Partition t-0 broker=1] ISR updated to 1,2,3  and version updated to 7")
    assert [(e["kind"], e.get("old_isr")) for e in events] == [
        ("become_leader", None), ("isr_expand", [1, 2]), ("isr_update", [1, 2, 3]), ("process_start", None),
        ("isr_update", None)]
    assert [e["time_ns"] for e in events] == [1_000_000_000, 2_000_000_000, 3_000_000_000, 4_000_000_000,
                                              5_000_000_000]


def test_a_truncation_takes_its_reason_from_its_own_partitions_fetcher_line() -> None:
    events = parsed(
        "[ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition t-0 with TruncationState("
        "offset=7, completed=true) due to local high watermark 7",
        "[ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition t-1 with TruncationState("
        "offset=0, completed=true) due to local high watermark 0",
        "[UnifiedLog partition=t-1, dir=/data/kafka] Truncating to 0 has no effect as the largest offset in the "
        "log is -1",
        "[UnifiedLog partition=t-0, dir=/data/kafka] Truncating to offset 7",
        "[UnifiedLog partition=t-0, dir=/data/kafka] Truncating to offset 5",
        "[RaftManager id=1] Truncated to offset 9 from Fetch response from leader 101")
    assert [without_place(e) for e in events] == [
        {"kind": "truncate", "topic": "t", "partition": 0, "to_offset": 7, "reason": "high_watermark", "leader": 2},
        {"kind": "truncate", "topic": "t", "partition": 0, "to_offset": 5, "reason": None},
        {"kind": "truncate", "topic": "__cluster_metadata", "partition": 0, "to_offset": 9, "reason": "raft_fetch",
         "leader": 101}]


# --- the file and the command ----------------------------------------------------------------------------------

def tiny_run(tmp_path: Path, started_at: str | None = "2026-11-24T07:00:00+00:00") -> Path:
    """A run directory with one broker log of three lines, one of them not UTF-8."""
    run = tmp_path / "tiny" / "20261124T070000.000000Z"
    (run / "history").mkdir(parents=True)
    (run / "logs").mkdir()
    if started_at is not None:
        (run / "scenario.yaml").write_text(f"name: tiny\nstarted_at: '{started_at}'\n")
    (run / "logs" / "broker1.log").write_bytes(
        b"[2026-11-24 07:00:01,500] INFO Registered signal handlers for TERM, INT, HUP (x.Y)\n"
        b"[2026-11-24 07:00:02,000] INFO caf\xe9 (x.Y)\n"
        b"[2026-11-24 07:00:03,250] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)\n")
    (run / "logs" / "notes.txt").write_text("not a node log\n")
    return run


def test_the_command_writes_the_file_and_rewrites_it_the_same(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = tiny_run(tmp_path)
    assert cli.main(["forensics", str(run)]) == 0
    assert "2 from 1 node logs: 1 process_start, 1 started" in capsys.readouterr().out
    first = (run / "history" / "broker-events.jsonl").read_text()
    assert cli.main(["forensics", str(run)]) == 0
    assert (run / "history" / "broker-events.jsonl").read_text() == first
    notes: list[str] = []
    assert read_broker_events(run / "history", notes) == [
        {"kind": "process_start", "node": "broker1", "time_ns": 1_500_000_000, "line": 1},
        {"kind": "started", "node": "broker1", "time_ns": 3_250_000_000, "line": 3, "node_id": 1}]
    assert notes == []


def test_the_reader_drops_a_cut_off_last_line_and_ignores_unknown_fields(tmp_path: Path) -> None:
    history = tmp_path / "history"
    history.mkdir()
    (history / "broker-events.jsonl").write_text(
        '{"kind":"started","node":"broker1","time_ns":5,"new_field":[1]}\n{"kind":"trunc')
    notes: list[str] = []
    assert read_broker_events(history, notes) == [{"kind": "started", "node": "broker1", "time_ns": 5,
                                                   "new_field": [1]}]
    assert notes == ["history/broker-events.jsonl: dropped an incomplete last line (line 2)"]
    missing: list[str] = []
    assert read_broker_events(tmp_path, missing) == [] and "kchaos forensics RUN" in missing[0]


@pytest.mark.parametrize("setup, fragment", [
    (lambda run: shutil.rmtree(run / "logs"), "no node logs in logs/"),
    (lambda run: (run / "scenario.yaml").unlink(), "no scenario.yaml, whose started_at"),
    (lambda run: (run / "scenario.yaml").write_text("name: tiny\n"), "scenario.yaml: no started_at"),
    (lambda run: (run / "scenario.yaml").write_text("started_at: yesterday\n"), "scenario.yaml: no started_at"),
    (lambda run: (run / "scenario.yaml").write_text("name: [unclosed\n"), "not valid YAML"),
    (lambda run: shutil.rmtree(run / "history"), "not a kchaos run directory"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: Any,
                                          fragment: str) -> None:
    run = tiny_run(tmp_path)
    setup(run)
    assert cli.main(["forensics", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kchaos: ") and fragment in err, err
    assert "Traceback" not in err
    assert not (run / "history" / "broker-events.jsonl").exists()


def test_the_end_of_a_run_warns_but_goes_on_without_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from harness.run import parse_node_logs  # loads the cluster stages' libraries: only this test needs them

    run = tiny_run(tmp_path)
    shutil.rmtree(run / "logs")
    with caplog.at_level(logging.WARNING):
        parse_node_logs(RunDir(run))
    assert "broker events not written" in caplog.text
    parse_node_logs(RunDir(tiny_run(tmp_path / "ok")))
    assert (tmp_path / "ok" / "tiny" / "20261124T070000.000000Z" / "history" / "broker-events.jsonl").is_file()
