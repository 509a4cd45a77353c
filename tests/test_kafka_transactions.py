"""Kafka's own view of the transactions (kafka-transactions.sh, asked before teardown): its output parsed, a broker
that cannot be asked recorded with the reason, and its answer beside kchaos's hanging_transaction in results.json.

tests/data/kafka-transactions/ holds the tool's real output on Kafka 3.9.2 (the cluster test in
tests/test_transactions.py asks a real cluster the same way): find-hanging on a broker that has none, and list.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from clusters.errors import ClusterError
from clusters.kafka_transactions import (HANGING_HEADERS, ToolOutputError, ask_cluster, parse_find_hanging,
                                         parse_list)
from rundir.documents import compose_results, read_kafka_transactions, write_kafka_transactions
from rundir.layout import RunDir
from verdicts.verdict import run_record, second_opinion

DATA = Path(__file__).parent / "data" / "kafka-transactions"

# find-hanging's table with one row, laid out as the tool lays out its tables (tab-separated, padded: see the
# real list output): a hanging transaction is not something a healthy cluster gives to copy
HANGING = ("\t".join(HANGING_HEADERS) + "\t\n"
           "chaos\t4        \t1007      \t3            \t2               \t12698      \t1795000061400"
           "\t2            \t\n")


def test_find_hanging_that_found_none_is_an_empty_list() -> None:
    assert parse_find_hanging((DATA / "3.9.2-find-hanging-broker1.txt").read_text()) == []


def test_a_hanging_transaction_row_is_parsed_with_numbers() -> None:
    assert parse_find_hanging(HANGING) == [
        {"topic": "chaos", "partition": 4, "producer_id": 1007, "producer_epoch": 3, "coordinator_epoch": 2,
         "start_offset": 12698, "last_timestamp_ms": 1795000061400, "duration_min": 2}]


def test_list_names_each_transactional_id_its_coordinator_and_state() -> None:
    assert parse_list((DATA / "3.9.2-list.txt").read_text()) == [
        {"transactional_id": "kchaos-test-tx-2dee55-p0", "coordinator": 3, "producer_id": 0,
         "state": "CompleteCommit"}]


@pytest.mark.parametrize("text", ["", "Error while executing the command: timed out\n",
                                  "\t".join(HANGING_HEADERS) + "\nchaos 4 1007\n"])
def test_output_that_is_not_the_table_is_refused(text: str) -> None:
    with pytest.raises(ToolOutputError):
        parse_find_hanging(text)


class FakeBroker:
    """A broker whose exec answers with the given outputs (or raises), recording the commands."""

    def __init__(self, node_id: int, answers: list[Any]) -> None:
        self.node_id, self.name, self.answers, self.commands = node_id, f"broker{node_id}", answers, []

    def exec(self, *cmd: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        self.commands.append(cmd)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        code, out, err = answer
        return subprocess.CompletedProcess(list(cmd), code, out, err)


def test_a_broker_that_cannot_be_asked_is_recorded_with_the_reason_and_the_others_still_answer() -> None:
    real = (DATA / "3.9.2-find-hanging-broker1.txt").read_text()
    b1 = FakeBroker(1, [(0, HANGING, ""), (0, (DATA / "3.9.2-list.txt").read_text(), "")])
    b2 = FakeBroker(2, [ClusterError("broker2 is not running: nothing to run timeout in")])
    b3 = FakeBroker(3, [(124, "", "WARN Connection to node -1 could not be established")])
    b4 = FakeBroker(4, [(0, real, "")])
    doc = ask_cluster([b1, b2, b3, b4], "3.9.2")  # type: ignore[list-item]
    assert [(b["broker"], b["asked"]) for b in doc["brokers"]] == [(1, True), (2, False), (3, False), (4, True)]
    assert "not running" in doc["brokers"][1]["error"]
    assert "timed out" in doc["brokers"][2]["error"] and "could not be established" in doc["brokers"][2]["error"]
    assert "--broker-id" in b1.commands[0] and b1.commands[0][b1.commands[0].index("--broker-id") + 1] == "1"
    assert b1.commands[1][-1] == "list" and doc["transactions"][0]["state"] == "CompleteCommit"

    view = second_opinion(doc, 0)
    assert (view["kafka_hanging_partitions"], view["agree"]) == (1, False)
    assert "they DISAGREE" in view["summary"] and "could not ask broker2" in view["summary"]
    assert view["hanging"][0]["broker"] == 1 and view["hanging"][0]["topic"] == "chaos"
    assert second_opinion(doc, 1)["agree"] is True


def test_no_broker_answering_is_could_not_ask_never_agreement() -> None:
    doc = ask_cluster([FakeBroker(1, [RuntimeError("docker went away"), RuntimeError("again")])],  # type: ignore
                      "4.3.1")
    view = second_opinion(doc, 0)
    assert view["agree"] is None and view["kafka_hanging_partitions"] is None
    assert view["summary"].startswith("Kafka's find-hanging could not be asked: broker1 (RuntimeError: docker")
    assert second_opinion(None, 0)["summary"].startswith("Kafka's kafka-transactions.sh was not asked")


def test_results_json_holds_it_beside_the_checkers_count(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.history.mkdir()
    assert "kafka_transactions" in run_record(run, {"workload": {"transactions": {"size": 10}}}, 0)
    write_kafka_transactions(run, ask_cluster([FakeBroker(1, [(0, HANGING, ""), (0, "", "")])],  # type: ignore
                                              "3.9.2"))
    assert read_kafka_transactions(run)["list_error"].startswith("no TransactionalId Coordinator")  # type: ignore
    record = run_record(run, {"workload": {"transactions": {"size": 10}}}, 0)
    results = compose_results({"counts": {"hanging_transaction": 0}}, record)
    assert results["kafka_transactions"]["kchaos_hanging_transaction"] == 0
    assert results["kafka_transactions"]["kafka_hanging_partitions"] == 1
    assert "kafka_transactions" not in run_record(run, {"workload": {"transactions": None}})
