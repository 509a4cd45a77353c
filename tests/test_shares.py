"""A share group's deliveries (checkers/shares.py) on planted histories through the reference checker;
tests/test_spark_checker.py holds the Spark checker to the same results on these histories (SHARE_CASES). Also
the share role's pure parts: the seeded acknowledgement, the ledger that ends the drain, the role's refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers.anomalies import Promises
from checkers.shares import SHARE_ANOMALIES
from harness.share_role import Brokers, ShareConsumersModel, check
from test_checker_reference import IDEMPOTENT, clean, nonzero, run_check
from workloads.protocol import Acknowledged, Delivered
from workloads.share_consumer import ShareLedger, choose_ack

Lines = dict[str, list[Any]]
LIMIT = 3
TOPIC = "t"


def delivered(offset: int, delivery: int, time_ns: int, member: str = "s0", seq: int | None = None,
              partition: int = 0) -> dict[str, Any]:
    """p0's message ``seq`` (default: the offset) given to ``member`` at ``delivery``."""
    return {"kind": "delivered", "member": member, "group": "sg", "topic": TOPIC, "partition": partition,
            "offset": offset, "producer": "p0", "seq": offset if seq is None else seq, "delivery": delivery,
            "time_ns": time_ns}


def acked(offset: int, delivery: int, ack: str, time_ns: int, result: str = "ok", member: str = "s0",
          partition: int = 0) -> dict[str, Any]:
    return {"kind": "acknowledged", "member": member, "group": "sg", "topic": TOPIC, "partition": partition,
            "offset": offset, "delivery": delivery, "ack": ack, "result": result,
            "error": None if result == "ok" else "InvalidRecordStateException", "time_ns": time_ns}


def group(starts: dict[int, int] | None = None, lag: int | None = 1) -> list[dict[str, Any]]:
    """The share-group event, and the brokers' start offsets (and lag) per partition once the members stopped."""
    return [{"kind": "share-group", "group": "sg", "topic": TOPIC, "delivery_limit": LIMIT, "lock_ms": 5000,
             "time_ns": 0},
            *({"kind": "share-offsets", "group": "sg", "topic": TOPIC, "partition": p, "start_offset": o,
               "lag": lag, "time_ns": 100} for p, o in (starts or {}).items())]


def shared(n: int, shares: list[dict[str, Any]], starts: dict[int, int] | None = None, lag: int | None = 1) -> Lines:
    """p0's n acknowledged messages at offsets 0..n-1, all in the final read, and these share lines."""
    h = clean(n)
    h["reads"] = [r for r in h["reads"] if r["phase"] == "final"]
    h["events"] = [e for e in h["events"] if e["kind"] == "final-read"] + group(starts, lag)
    h["shares"] = shares
    return h


def settled(offset: int, t: int = 10) -> list[dict[str, Any]]:
    """``offset`` given once and accepted."""
    return [delivered(offset, 1, t), acked(offset, 1, "accept", t + 1)]


SHARE_CASES: dict[str, Lines] = {
    # every record accepted at its first delivery
    "all_accepted": shared(2, settled(0) + settled(1)),
    # 1 never given to anyone
    "one_never_delivered": shared(2, settled(0)),
    # 1 released, given again and accepted; 0 rejected (settled, never again)
    "released_then_accepted": shared(2, [delivered(0, 1, 10), acked(0, 1, "reject", 11),
                                         delivered(1, 1, 10), acked(1, 1, "release", 11),
                                         delivered(1, 2, 20, "s1"), acked(1, 2, "accept", 21, member="s1")]),
    # 0 accepted, then given again: the violation
    "given_again_after_accept": shared(1, [delivered(0, 1, 10), acked(0, 1, "accept", 11),
                                           delivered(0, 2, 30, "s1"), acked(0, 2, "accept", 31, member="s1")]),
    # 0's holder crashed (no acknowledgement), then it went to s1; 1's acknowledgement failed, then it came back;
    # 2's holder stalled: it went to s1 first, and the stalled member's RELEASE failed after (a lock that expired)
    "expired_and_failed": shared(3, [delivered(0, 1, 10), delivered(0, 2, 20, "s1"),
                                     acked(0, 2, "accept", 21, member="s1"),
                                     delivered(1, 1, 10), acked(1, 1, "accept", 11, result="fail"),
                                     delivered(1, 2, 20, "s1"), acked(1, 2, "accept", 21, member="s1"),
                                     delivered(2, 1, 10), delivered(2, 2, 20, "s1"),
                                     acked(2, 2, "accept", 21, member="s1"), acked(2, 1, "release", 25, "fail")]),
    # 0 released at every delivery up to the limit: archived, settled; a fourth delivery is one too many
    "archived_at_the_limit": shared(1, [delivered(0, d, 10 * d) for d in (1, 2, 3)]
                                    + [acked(0, d, "release", 10 * d + 1) for d in (1, 2, 3)]),
    "over_delivered": shared(1, [delivered(0, d, 10 * d) for d in (1, 2, 3, 4)]
                             + [acked(0, d, "release", 10 * d + 1) for d in (1, 2, 3)]
                             + [acked(0, 4, "accept", 41)]),
    # a leader crash: s1 holds 0 at count 2, its accept fails, and the new leader, having forgotten that delivery,
    # gives it out at count 2 again: a fourth delivery at the limit of 3 is no violation (KIP-932: the leader keeps
    # acquisitions in memory only); each acknowledgement belongs to its own delivery
    "a_delivery_forgotten": shared(1, [delivered(0, 1, 10), acked(0, 1, "release", 11),
                                       delivered(0, 2, 20, "s1"), acked(0, 2, "accept", 21, "fail", "s1"),
                                       delivered(0, 2, 30, "s1"), acked(0, 2, "release", 31, member="s1"),
                                       delivered(0, 3, 40), acked(0, 3, "accept", 41)]),
    # 0 and 1 released once and never given again: the brokers' start offset (1) says 0 was settled unseen and
    # 1 not settled at all
    "left_unsettled": shared(2, [delivered(0, 1, 10), acked(0, 1, "release", 11),
                                 delivered(1, 1, 10), acked(1, 1, "release", 11)], starts={0: 1}),
    # the same where the brokers said nothing above the start offset was unsettled (lag 0): both settled unseen
    "left_with_no_lag": shared(2, [delivered(0, 1, 10), acked(0, 1, "release", 11),
                                   delivered(1, 1, 10), acked(1, 1, "release", 11)], starts={0: 1}, lag=0),
    # the same with no word from the brokers: both unsettled
    "unsettled_with_no_start_offsets": shared(2, [delivered(0, 1, 10), acked(0, 1, "release", 11),
                                                  delivered(1, 1, 10), acked(1, 1, "release", 11)]),
    # the member's ACCEPT of 0 at count 1 arrived after the brokers had given it 0 again (count 2, its lock having
    # expired): they applied it to the new delivery, whose own ACCEPT then failed as not acquired, and 0 never came
    # again (counted); 1 the same, but 1 came again after: given out after an accept (the violation)
    "stale_accept_took_the_next_delivery": shared(2, [
        delivered(0, 1, 10), acked(0, 1, "accept", 12), delivered(0, 2, 13), acked(0, 2, "accept", 14, "fail"),
        delivered(1, 1, 10), acked(1, 1, "accept", 12), delivered(1, 2, 13), acked(1, 2, "accept", 14, "fail"),
        delivered(1, 3, 30, "s1"), acked(1, 3, "accept", 31, member="s1")]),
    # answers to fetches lost: 0 first came at count 2 (count 1 was acquired for a member that never saw it); 1 came
    # at 1, was released, and next came at 3: two deliveries no member's client returned
    "fetch_answers_lost": shared(2, [delivered(0, 2, 20), acked(0, 2, "accept", 21),
                                     delivered(1, 1, 10), acked(1, 1, "release", 11),
                                     delivered(1, 3, 30, "s1"), acked(1, 3, "accept", 31, member="s1")]),
    # a second acknowledgement of one delivery: the last one counts (release, then accept)
    "two_acknowledgements_of_one_delivery": shared(1, [delivered(0, 1, 10), acked(0, 1, "release", 11),
                                                       acked(0, 1, "accept", 12)]),
}


def check_case(tmp_path: Path, name: str, promises: Promises = IDEMPOTENT) -> dict[str, Any]:
    return run_check(tmp_path, promises, **SHARE_CASES[name])


def shares_of(results: dict[str, Any]) -> dict[str, int]:
    return {a: n for a, n in nonzero(results).items() if a in SHARE_ANOMALIES}


@pytest.mark.parametrize(("name", "found"), [
    ("all_accepted", {}),
    ("one_never_delivered", {"share_lost": 1}),
    ("released_then_accepted", {"share_redelivered_released": 1}),
    ("given_again_after_accept", {"share_redelivered_after_accept": 1}),
    ("expired_and_failed", {"share_redelivered_expired": 2, "share_redelivered_failed_ack": 1}),
    ("archived_at_the_limit", {"share_redelivered_released": 2, "share_archived": 1}),
    ("over_delivered", {"share_redelivered_released": 3, "share_over_delivered": 1}),
    ("a_delivery_forgotten", {"share_redelivered_released": 2, "share_redelivered_failed_ack": 1,
                              "share_delivery_count_repeated": 1}),
    ("left_unsettled", {"share_settled_unseen": 1, "share_unsettled": 1}),
    ("left_with_no_lag", {"share_settled_unseen": 2}),
    ("unsettled_with_no_start_offsets", {"share_unsettled": 2}),
    ("two_acknowledgements_of_one_delivery", {}),
    ("fetch_answers_lost", {"share_delivery_unseen": 2, "share_redelivered_released": 1}),
    ("stale_accept_took_the_next_delivery", {"share_redelivered_stale_ack": 1, "share_redelivered_after_accept": 1,
                                             "share_redelivered_failed_ack": 1}),
])
def test_planted_share_histories(tmp_path: Path, name: str, found: dict[str, int]) -> None:
    results = check_case(tmp_path, name)
    assert shares_of(results) == found
    assert nonzero(results) == found  # nothing else is touched by the share lines
    violations = {"share_lost", "share_unsettled", "share_redelivered_after_accept", "share_over_delivered"}
    assert results["valid"] is not bool(violations & set(found))
    deliveries = sum(1 for line in SHARE_CASES[name]["shares"] if line["kind"] == "delivered")
    assert results["counts"]["share_deliveries"] == deliveries


def test_a_share_example_is_the_record_with_its_deliveries(tmp_path: Path) -> None:
    [example] = check_case(tmp_path, "given_again_after_accept")["examples"]["share_redelivered_after_accept"]
    assert example == {"topic": TOPIC, "partition": 0, "offset": 0, "producer": "p0", "seq": 0, "deliveries": [
        {"member": "s0", "delivery": 1, "ack": "accept", "result": "ok", "time_ns": 10},
        {"member": "s1", "delivery": 2, "ack": "accept", "result": "ok", "time_ns": 30}]}


def test_a_run_without_a_share_group_counts_none(tmp_path: Path) -> None:
    results = run_check(tmp_path, IDEMPOTENT, **clean())
    assert all(results["counts"][a] == 0 for a in (*SHARE_ANOMALIES, "share_deliveries"))


def test_a_record_the_final_read_did_not_reach_is_not_judged(tmp_path: Path) -> None:
    h = SHARE_CASES["one_never_delivered"]
    events = [{**e, "complete": False} if e["kind"] == "final-read" else e for e in h["events"]]
    assert shares_of(run_check(tmp_path, IDEMPOTENT, **{**h, "events": events})) == {}


# --- the role's pure parts ----------------------------------------------------------------------------------


def test_the_acknowledgement_is_a_function_of_the_seed_and_the_delivery() -> None:
    choices = [choose_ack(7, p, o, d, 0.1, 0.05) for p in range(3) for o in range(2000) for d in (1, 2)]
    assert choices == [choose_ack(7, p, o, d, 0.1, 0.05) for p in range(3) for o in range(2000) for d in (1, 2)]
    shares = {a: choices.count(a) / len(choices) for a in ("accept", "release", "reject")}
    assert abs(shares["release"] - 0.1) < 0.02 and abs(shares["reject"] - 0.05) < 0.02
    assert choices != [choose_ack(8, p, o, d, 0.1, 0.05) for p in range(3) for o in range(2000) for d in (1, 2)]
    assert {choose_ack(1, 0, o, 1, 0, 0) for o in range(100)} == {"accept"}
    assert {choose_ack(1, 0, o, 1, 1, 0) for o in range(100)} == {"release"}


def test_the_ledger_settles_what_was_accepted_rejected_or_delivered_at_the_limit() -> None:
    ledger = ShareLedger(delivery_limit=3)
    ledger.acknowledged(Acknowledged(0, 0, 1, "accept", "ok", 1, None))
    ledger.acknowledged(Acknowledged(0, 1, 1, "reject", "ok", 1, None))
    ledger.acknowledged(Acknowledged(0, 2, 1, "release", "ok", 1, None))
    ledger.acknowledged(Acknowledged(0, 3, 1, "accept", "fail", 1, "InvalidRecordStateException"))
    ledger.delivered(Delivered(0, 4, "p0", 4, 3, 1))
    assert ledger.behind({0: 5}) == 2      # 2 released, 3's accept failed
    assert ledger.behind({0: 2, 1: 4}) == 4  # partition 1: nothing settled


BROKERS = Brokers("kraft", "4.3.1", {}, {})


@pytest.mark.parametrize(("brokers", "role", "client", "release", "says"), [
    (Brokers("zookeeper", "3.9.2", {}, {}), {}, "java", None, "needs KRaft and Kafka 4.2 or later"),
    (Brokers("kraft", "4.1.1", {}, {}), {}, "java", None, "cluster.kafka_version=4.1.1"),
    (Brokers("kraft", "4.3.1", {"share.version": 0}, {}), {}, "java", None, "share.version=0 turns share groups off"),
    (BROKERS, {}, "java", "4.1.1", "kafka-clients 4.1.1 has no generally available share consumer"),
    (BROKERS, {}, "librdkafka", "2.14.0", "confluent-kafka 2.14.0 has no share consumer"),
    (BROKERS, {"delivery_limit": 11}, "java", None, "delivery_limit=11 is outside the brokers' bounds [2, 10]"),
    (BROKERS, {"lock_ms": 5000}, "java", None, "lock_ms=5000 is outside the brokers' bounds [15000, 60000]"),
    (Brokers("kraft", "4.2.2", {}, {}), {"delivery_limit": 3}, "java", None,
     "Kafka 4.2.2 has no group setting share.delivery.count.limit"),
])
def test_a_share_group_that_cannot_run_is_refused_in_one_line(brokers: Brokers, role: dict[str, Any], client: str,
                                                              release: str | None, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("]", r"\]")) as error:
        check(ShareConsumersModel(**role), client, release, brokers)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_a_share_group_the_brokers_allow() -> None:
    check(ShareConsumersModel(delivery_limit=3, lock_ms=5000), "java", None,
          Brokers("kraft", "4.3.1", {}, {"group.share.min.record.lock.duration.ms": 1000}))
    check(ShareConsumersModel(), "librdkafka", None, Brokers("kraft", "4.2.2", {}, {}))


def test_the_mix_and_the_harness_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="release \\+ reject is 1.2, above 1"):
        ShareConsumersModel(release=0.7, reject=0.5)
    with pytest.raises(ValueError, match="config.share.acknowledgement.mode: the harness sets it"):
        ShareConsumersModel(config={"share.acknowledgement.mode": "implicit"})


def test_the_report_shows_a_share_example_as_its_record_and_its_deliveries(tmp_path: Path) -> None:
    from verdicts.report.examples import describe_examples

    results = check_case(tmp_path, "given_again_after_accept")
    [section] = describe_examples(results, [])
    [row] = section["rows"]
    assert section["name"] == "share_redelivered_after_accept" and section["count"] == 1
    assert row["what"] == "t-0 @ offset 0 (p0/0)"
    assert row["detail"] == "s0 #1 at 0.000 s: accept ok; s1 #2 at 0.000 s: accept ok"
