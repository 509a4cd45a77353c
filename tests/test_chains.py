"""Forensics: causal chains from a fault to the records it took (the replica batches they use are read by
clusters/segments.py: tests/test_segment_batches.py).

The chains are built from small hand-made histories shaped like the real ones of acks1-leader-kill,
unclean-election and a power cut (the closing note of issue #20 shows the chains of real runs).
"""

from __future__ import annotations

from typing import Any


from forensics.chains import EXPLAINED, TXN_EXPLAINED, Explainer, TransactionExplainer
from rundir.documents import fault_windows

S = 1_000_000_000


def fault(name: str, target: str, start: float, end: float, detail: str) -> list[dict[str, Any]]:
    common = {"kind": "fault", "fault": name, "target": "partition-leader", "targets": [target],
              "start_ns": int(start * S), "detail": detail}
    return [{**common, "phase": "start", "end_ns": None}, {**common, "phase": "heal", "end_ns": int(end * S)}]


def ev(kind: str, node: str, t: float, line: int = 1, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "node": node, "time_ns": int(t * S), "line": line, **fields}


def leader(node: str, t: float, epoch: int, log_end: int, line: int = 1) -> dict[str, Any]:
    return ev("become_leader", node, t, line, topic="chaos", partition=4, leader=int(node[-1]), leader_epoch=epoch,
              log_end_offset=log_end)


def batch(node: str, low: int, high: int, epoch: int, pid: int = 7, pepoch: int = 0, seq: int = 0) -> dict[str, Any]:
    return {"node": node, "topic": "chaos", "partition": 4, "base_offset": low, "last_offset": high,
            "leader_epoch": epoch, "producer_id": pid, "producer_epoch": pepoch, "base_sequence": seq}


def lost(low: int, high: int, first: float, last: float, anomaly: str = "lost") -> dict[str, Any]:
    return {"anomaly": anomaly, "topic": "chaos", "partition": 4, "count": high - low + 1, "first_ns": int(first * S),
            "last_ns": int(last * S), "min_offset": low, "max_offset": high}


# acks1-leader-kill: broker2 leads chaos-4 in epoch 0 and acknowledges offsets 12,698-13,354 alone, is killed at
# 15.6 s; broker3 leads epoch 1 from 12,698 at 21.1 s; broker2, restarted, truncates to 12,698 at 23.4 s.
KILL = fault("kill", "broker2", 15.6, 23.9, "SIGKILL broker2")
KILL_EVENTS = [leader("broker2", 5.0, 0, 0, line=10), leader("broker3", 21.1, 1, 12_698, line=20),
               ev("process_start", "broker2", 23.0, 1),
               ev("truncate", "broker2", 23.4, 30, topic="chaos", partition=4, to_offset=12_698, reason="leader_epoch")]


def test_a_leader_killed_after_acknowledging_alone_is_the_chain_of_its_lost_records() -> None:
    disks = [batch("broker3", 0, 12_697, 0), batch("broker3", 12_698, 20_000, 1), batch("broker1", 0, 12_697, 0)]
    out = Explainer(KILL, KILL_EVENTS, disks).explain([lost(12_698, 13_354, 15.2, 15.6)])
    assert out["unexplained"] == []
    [chain] = out["chains"]
    assert (chain["fault"], chain["leader"], chain["leader_epoch"], chain["successor"], chain["truncated_to"]) == \
        (1, "broker2", 0, "broker3", 12_698)
    assert chain["held_by"] == {}
    assert chain["sentence"] == (
        "chaos-4: 657 records lost (offsets 12,698–13,354), acknowledged by broker2 as leader in epoch 0 between "
        "15.2 s and 15.6 s; SIGKILL broker2 at 15.6 s (fault 1); broker3 leader in epoch 1 with log end 12,698 at "
        "21.1 s; broker2 truncated to 12,698 at 23.4 s; no replica holds them.")
    assert [s["line"] for s in chain["steps"]] == [10, None, 20, 30]
    assert out["lost_by_fault"] == [{"fault": 1, "label": "SIGKILL broker2 at 15.6 s", "lost": 657, "divergent": 0,
                                     "duplicated": 0}]


def test_acks_that_reach_the_client_just_after_their_leader_resigned_are_still_its() -> None:
    # rolling-restart: broker1's controlled shutdown: it logs its resignation from chaos-4 at 27.30 s, acks of
    # 3,523-3,576 it sent just before reach the client at 27.33-27.35 s, broker2 logs its leadership (log end 3,523)
    # at 27.40 s; so at the acks' arrival no broker believed itself leader. broker1, restarted, truncates to 3,523
    roll = [{**line, "fault": "rolling-restart", "targets": ["broker1", "broker2", "broker3"]}
            for line in fault("rolling-restart", "broker1", 27.0, 90.0, "broker1 restarted ...")]
    events = [leader("broker1", 5.0, 0, 0, line=10), leader("broker2", 27.40, 1, 3_523, line=20),
              ev("become_follower", "broker1", 27.30, 11, topic="chaos", partition=4, leader=2, leader_epoch=1),
              ev("process_start", "broker1", 30.0, 1),
              ev("truncate", "broker1", 36.5, 30, topic="chaos", partition=4, to_offset=3_523, reason="leader_epoch")]
    out = Explainer(roll, events, []).explain([lost(3_523, 3_576, 27.33, 27.35)])
    assert out["unexplained"] == []
    [chain] = out["chains"]
    assert (chain["leader"], chain["leader_epoch"], chain["successor"], chain["truncated_to"]) == \
        ("broker1", 0, "broker2", 3_523)
    resigned_long_before = [events[0], events[1], {**events[2], "time_ns": 25 * S}, *events[3:]]
    late = Explainer(roll, resigned_long_before, []).explain([lost(3_523, 3_576, 27.33, 27.35)])  # past the lag
    assert [u["why"] for u in late["unexplained"]] == ["no broker believed itself leader of chaos-4 at 27.3 s"]


def test_a_replica_still_holding_the_old_epochs_batches_is_named() -> None:
    disks = [batch("broker1", 12_600, 12_999, 0),  # broker1 kept part of epoch 0's tail (it was not in sync)
             batch("broker1", 13_000, 13_099, 0, seq=400), batch("broker3", 13_000, 13_099, 0, seq=400)]
    # ... and 13,000-13,099 in epoch 0 is also what broker3, the last leader, holds: what the final read read
    [chain] = Explainer(KILL, KILL_EVENTS, disks).explain([lost(12_698, 13_354, 15.2, 15.6)])["chains"]
    assert chain["held_by"] == {"broker1": 302}
    assert chain["sentence"].endswith("still on broker1 (302 offsets).")


def test_a_batch_of_the_same_epoch_made_long_after_the_acks_does_not_hold_them() -> None:
    """After a power cut on every replica a leader may append again in an epoch it had used, at the same offsets;
    the batch's create time (the producer's wall clock) tells the later batch from the lost one."""
    started_ms = 1_795_000_000_000
    disks = [{**batch("broker1", 12_698, 12_719, 0), "create_time_ms": started_ms + 61_400}]
    explain = Explainer(KILL, KILL_EVENTS, disks, started_ms=started_ms).explain
    [chain] = explain([lost(12_698, 13_354, 15.2, 15.6)])["chains"]
    assert chain["held_by"] == {}
    disks[0]["create_time_ms"] = started_ms + 15_300
    [chain] = explain([lost(12_698, 13_354, 15.2, 15.6)])["chains"]
    assert chain["held_by"] == {"broker1": 22}


def test_without_the_disks_the_chain_says_so_rather_than_that_nothing_holds_them() -> None:
    [chain] = Explainer(KILL, KILL_EVENTS, None).explain([lost(12_698, 13_354, 15.2, 15.6)])["chains"]
    assert chain["held_by"] is None and chain["sentence"].endswith("the replicas' disks were not read.")


def test_a_power_cut_is_the_fault_when_the_leaders_own_log_comes_back_short() -> None:
    """acks=all, min.insync 1: broker1, cut from the others (fault 1), acknowledges alone; a power cut (fault 2)
    loses what it had not flushed, seen as a recovery truncating its log before anyone else led."""
    events = fault("partition", "broker1", 16.0, 71.0, "brokers: broker1 -/- broker2, broker3") + \
        fault("power-loss", "broker1", 61.0, 70.2, "power cut broker1: disks stopped 152 ms after SIGKILL, nothing "
                                                   "reached them later; crash images copied in 0.02 s; restarted on "
                                                   "crash images")
    broker_events = [leader("broker1", 5.0, 0, 0), ev("process_start", "broker1", 66.8),
                     ev("truncate", "broker1", 68.5, 7, topic="chaos", partition=4, to_offset=44_821,
                        reason="corruption"),
                     leader("broker1", 71.5, 2, 44_821), leader("broker3", 86.9, 4, 46_540)]
    [chain] = Explainer(events, broker_events, []).explain([lost(44_821, 50_880, 39.4, 44.1)])["chains"]
    assert chain["fault"] == 2 and chain["truncated_to"] == 44_821
    assert chain["sentence"] == (
        "chaos-4: 6,060 records lost (offsets 44,821–50,880), acknowledged by broker1 as leader in epoch 0 between "
        "39.4 s and 44.1 s; while they were acknowledged: brokers: broker1 -/- broker2, broker3 at 16.0 s "
        "(fault 1); power cut broker1 at 61.0 s (fault 2); broker1 recovered its log cut at 44,821 (the rest "
        "never reached its disk) at 68.5 s; no replica holds them.")


def test_an_unclean_election_is_named_in_the_chain() -> None:
    broker_events = [leader("broker2", 5.0, 0, 0),
                     ev("election", "broker3", 36.8, topic="chaos", partition=4, leader=3, leader_epoch=2,
                        unclean=True),
                     leader("broker3", 36.9, 2, 13_510)]
    [chain] = Explainer(KILL, broker_events, []).explain([lost(13_545, 13_600, 15.0, 15.5)])["chains"]
    assert "broker3 uncleanly elected leader in epoch 2 with log end 13,510 at 36.9 s" in chain["sentence"]


def test_what_no_fault_or_no_removal_explains_is_listed_with_the_reason() -> None:
    no_fault = Explainer([], KILL_EVENTS, []).explain([lost(12_698, 13_354, 15.2, 15.6)])
    assert no_fault["chains"] == [] and "no fault was under way" in no_fault["unexplained"][0]["why"]
    assert no_fault["lost_by_fault"] == [{"fault": None, "label": "unexplained", "lost": 657, "divergent": 0,
                                          "duplicated": 0}]
    nothing_removed = Explainer(KILL, [leader("broker2", 5.0, 0, 0)], []).explain([lost(100, 120, 15.2, 15.6)])
    assert "no new leader and no cut of its log" in nothing_removed["unexplained"][0]["why"]
    no_time = Explainer(KILL, KILL_EVENTS, []).explain([{**lost(1, 2, 0, 0), "first_ns": None, "last_ns": None}])
    assert "no acknowledgement time" in no_time["unexplained"][0]["why"]


def test_duplicates_say_whether_one_batch_was_appended_twice_or_sent_again() -> None:
    """Two examples: one whose copies sit in batches of one producer id, epoch and base sequence (appended twice),
    one whose second copy came in a batch of a bumped producer epoch (sent again)."""
    disks = [batch("broker2", 100, 109, 0, seq=50), batch("broker2", 2_100, 2_109, 0, seq=50),
             batch("broker2", 200, 209, 0, pid=0, seq=0), batch("broker2", 2_200, 2_209, 0, pid=0, pepoch=1, seq=0)]
    # (producer id 0 is the first a cluster hands out: an id, not the absence of one)

    def example(seq: int, offsets: list[int]) -> dict[str, Any]:
        return {"producer": "p0", "seq": seq, "reads": [
            {"phase": "final", "topic": "chaos", "partition": 4, "offset": o} for o in offsets]}

    examples = {"duplicated": [example(1, [100, 2_100]), example(2, [2_200, 200])]}
    r = {**lost(100, 2_209, 21.5, 22.0, "duplicated"), "count": 2}  # sent again to broker3 after the kill
    [chain] = Explainer(KILL, KILL_EVENTS, disks, examples).explain([r])["chains"]
    assert chain["copies"]["same_batch_twice"] == 1 and chain["copies"]["sent_again"] == 1
    assert chain["copies"]["examples"][1]["batches"][1]["producer_epoch"] == 1
    assert (chain["fault"], chain["leader"]) == (1, "broker3")
    assert "of 2 examples on disk, 1 sit in one batch appended twice" in chain["sentence"]
    assert ", 1 were sent again by the idempotent client in another batch, 0 were retries" in chain["sentence"]


def test_duplicates_of_a_producer_without_idempotence_are_not_called_one_batch_appended_twice() -> None:
    disks = [batch("broker2", 100, 109, 0, pid=-1, pepoch=-1, seq=-1),
             batch("broker2", 2_100, 2_109, 0, pid=-1, pepoch=-1, seq=-1)]
    examples = {"duplicated": [{"producer": "p0", "seq": 1, "reads": [
        {"phase": "final", "topic": "chaos", "partition": 4, "offset": o} for o in (100, 2_100)]}]}
    r = {**lost(100, 2_109, 21.5, 22.0, "duplicated"), "count": 1}
    [chain] = Explainer(KILL, KILL_EVENTS, disks, examples).explain([r])["chains"]
    assert (chain["copies"]["not_idempotent"], chain["copies"]["same_batch_twice"]) == (1, 0)


def test_faults_are_numbered_in_start_order_and_skipped_ones_are_not() -> None:
    events = fault("pause", "broker3", 30.0, 35.0, "SIGSTOP broker3") + KILL + [
        {"kind": "fault", "fault": "kill", "phase": "skipped", "targets": [], "start_ns": None, "detail": "no leader"}]
    assert [(w["index"], w["detail"], w["end_ns"]) for w in fault_windows(events)] == [
        (1, "SIGKILL broker2", 23_900_000_000), (2, "SIGSTOP broker3", 35 * S)]


def test_a_fault_slow_to_take_effect_says_when_it_had_and_its_victim_leads_until_then() -> None:
    """On a busy machine a kill planned at 15.6 s may land only by 17.4 s: acks until then are the leader's."""
    slow = [{**e, "time_ns": int(17.4 * S)} if e["phase"] == "start" else e for e in KILL]
    [chain] = Explainer(slow, KILL_EVENTS, []).explain([lost(12_698, 13_354, 16.0, 17.0)])["chains"]
    assert chain["leader"] == "broker2" and "SIGKILL broker2 at 15.6 s (in effect by 17.4 s) (fault 1)" in \
        chain["sentence"]


# --- transactions: the chain of each transaction of aborted_read, torn_transaction and a committed one's lost ---

def txn(producer: str, n: int, begin: float, invoke: float, complete: float, outcome: str,
        intent: str | None) -> dict[str, Any]:
    return {"producer": producer, "txn": n, "outcome": outcome, "intent": intent, "error": None,
            "invoke_ns": int(invoke * S), "complete_ns": int(complete * S), "begin_ns": int(begin * S)}


def end_txn(client: str, held: float, released: float, committed: bool, node: int = 2) -> dict[str, Any]:
    return {"kind": "request", "fault": "delay-requests", "api": "EndTxn", "api_version": 1, "client": client,
            "node": node, "connection": 3, "correlation_id": 41, "action": "delayed", "cause": "matched",
            "held_ns": int(held * S), "released_ns": int(released * S), "response_ns": int((released + 0.01) * S),
            "response_error": 0, "client_closed": True, "outcome": "answered",
            "detail": {"transactional_id": "kchaos-run-p1", "producer_id": 7, "producer_epoch": 0,
                       "committed": committed}}


def message(producer: str, seq: int, txn_no: int | None) -> dict[str, Any]:
    return {"producer": producer, "seq": seq, "send": {"producer": producer, "seq": seq, "txn": txn_no}, "reads": []}


# KAFKA-17754's shape: p1's commit of 811 is held 6 s on its connection; the client retries on a new one, 811
# commits, 812 begins; the held EndTxn(COMMIT) reaches broker2 while 812 is open and ends it; 812's abort comes late
DELAY = fault("delay-requests", "broker2", 40.0, 60.0, "hold EndTxn from producer to broker2 for 6.0 s")
TXNS = [txn("p1", 811, 38.0, 41.0, 44.0, "committed", "commit"), txn("p1", 812, 44.5, 50.0, 50.5, "aborted", "abort"),
        txn("p10", 3, 44.0, 49.0, 49.5, "committed", "commit")]


def test_a_late_end_txn_of_the_previous_transaction_is_the_chain_of_an_aborted_read() -> None:
    events = DELAY + [end_txn("kchaos-p1", 41.2, 47.2, committed=True)]
    examples = {"aborted_read": [message("p1", 8120, 812), message("p1", 8121, 812)]}
    [chain] = TransactionExplainer(events, TXNS, examples).explain()
    assert (chain["anomaly"], chain["producer"], chain["txn"], chain["count"], chain["outcome"]) == \
        ("aborted_read", "p1", 812, 2, "aborted")
    assert chain["sentence"] == (
        "transaction 812 of p1: its messages visible to read_committed although aborted; the EndTxn(COMMIT) of "
        "transaction 811, sent at 41.2 s and held 6.0 s, reached broker2 at 47.2 s while 812 was open; under hold "
        "EndTxn from producer to broker2 for 6.0 s at 40.0 s (fault 1).")
    assert chain["request"]["detail"]["committed"] is True and chain["fault"] == 1
    assert [s["what"].split(",")[0] for s in chain["steps"]] == [
        "hold EndTxn from producer to broker2 for 6.0 s at 40.0 s (fault 1)", "transaction 812 begun",
        "the EndTxn(COMMIT) of transaction 811", "transaction 812 aborted (asked to abort)"]


def test_only_a_request_of_the_same_transactional_id_released_while_the_transaction_was_open_counts() -> None:
    """kchaos-p10 is another producer (not p1's); an EndTxn released after 812 ended, or sent while 812 was
    already open (its own), is no late request of an earlier transaction."""
    events = DELAY + [end_txn("kchaos-p10", 41.2, 47.2, committed=True), end_txn("kchaos-p1", 41.2, 51.0, True),
                      end_txn("kchaos-p1", 45.0, 47.0, committed=False)]
    [chain] = TransactionExplainer(events, TXNS, {"aborted_read": [message("p1", 8120, 812)]}).explain()
    assert chain["request"] is None
    assert chain["sentence"] == (
        "transaction 812 of p1: its messages visible to read_committed although aborted; aborted, the application "
        "asked to abort (open 44.5 s–50.5 s); no held request of p1 reached a broker while it was open; faults under "
        "way: hold EndTxn from producer to broker2 for 6.0 s at 40.0 s (fault 1).")


def test_a_replacement_is_told_the_late_request_of_its_predecessor() -> None:
    """p1.1 shares p1's transactional.id: a request p1 sent that lands while p1.1's transaction is open is named."""
    txns = [txn("p1", 4, 10.0, 12.0, 30.0, "unknown", "commit"), txn("p1.1", 0, 31.0, 33.0, 33.5, "aborted", "abort")]
    events = DELAY + [end_txn("kchaos-p1", 12.1, 32.0, committed=True)]
    [chain] = TransactionExplainer(events, txns, {"aborted_read": [message("p1.1", 0, 0)]}).explain()
    assert "the EndTxn(COMMIT) of transaction 4 of p1, sent at 12.1 s and held 19.9 s, reached broker2 at 32.0 s " \
           "while 0 was open" in chain["sentence"]


def test_a_write_of_the_transaction_itself_delivered_after_it_was_ended_is_the_chain_of_an_aborted_read() -> None:
    """txn-delayed-produce: p0's Produce of transaction 98 is held 6 s; its commit times out and it is aborted;
    the held Produce lands after the abort marker and p0's next transaction commits it (a zombie write)."""
    hold = fault("delay-requests", "broker1", 36.5, 39.5, "hold Produce from producer to broker1 for 6.0 s")
    produce = {**end_txn("kchaos-p0", 36.6, 42.6, committed=False, node=1), "api": "Produce",
               "response_error": "none", "detail": {"transactional_id": "kchaos-run-p0", "partitions": ["chaos-0"]}}
    txns = [txn("p0", 98, 36.55, 36.6, 42.8, "aborted", "commit"), txn("p0", 99, 42.8, 42.9, 43.0, "committed",
                                                                        "commit")]
    [chain] = TransactionExplainer(hold + [produce], txns, {"aborted_read": [message("p0", 984, 98)]}).explain()
    assert chain["sentence"] == (
        "transaction 98 of p0: its messages visible to read_committed although aborted; its own Produce, sent at "
        "36.6 s and held 6.0 s, reached broker1 at 42.6 s, after the application asked to commit at 36.6 s; under "
        "hold Produce from producer to broker1 for 6.0 s at 36.5 s (fault 1).")
    assert chain["request"]["api"] == "Produce"
    early = {**produce, "released_ns": int(36.59 * S), "held_ns": int(36.56 * S)}   # delivered before the commit
    [plain] = TransactionExplainer(hold + [early], txns, {"aborted_read": [message("p0", 984, 98)]}).explain()
    assert plain["request"] is None and "no held request of p0" in plain["sentence"]


def test_a_torn_or_lost_transaction_without_a_late_request_says_what_is_known() -> None:
    txns = [txn("p0", 5, 10.0, 13.5, 14.0, "committed", "commit")]
    examples = {"torn_transaction": [{"producer": "p0", "txn": 5, "outcome": "committed", "visible_count": 3,
                                      "missing_count": 2, "visible": [50, 51, 52], "missing": [53, 54]}],
                "lost": [message("p0", 53, 5), message("p0", 54, 5), message("p2", 9, None)]}
    chains = TransactionExplainer(KILL, txns, examples).explain()
    assert [(c["anomaly"], c["txn"], c["count"]) for c in chains] == [("lost", 5, 2), ("torn_transaction", 5, 1)]
    assert chains[0]["sentence"].startswith("transaction 5 of p0: 2 of its acknowledged messages lost although it "
                                            "committed; committed, the application asked to commit "
                                            "(open 10.0 s–14.0 s)")
    assert chains[1]["sentence"] == (
        "transaction 5 of p0: 3 of its messages visible to read_committed and 2 not, although committed; committed, "
        "the application asked to commit (open 10.0 s–14.0 s); no held request of p0 reached a broker while it was "
        "open; no fault was under way.")
    unknown = TransactionExplainer([], [], {"torn_transaction": [{**examples["torn_transaction"][0], "txn": 6}]})
    assert "txns.jsonl has no line for it" in unknown.explain()[0]["sentence"]


def test_the_catalogue_says_which_anomalies_have_transaction_chains() -> None:
    assert TXN_EXPLAINED == ("lost", "aborted_read", "torn_transaction")
    assert EXPLAINED == ("lost", "divergent", "duplicated")
