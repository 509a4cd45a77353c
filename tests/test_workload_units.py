"""Pure logic of the workload: message values, send outcomes, history files."""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import KafkaError

from workloads.history import FLUSH_INTERVAL_S, HistoryWriter
from workloads.messages import decode, encode
from workloads.producer import outcome


def test_values_carry_producer_and_seq_at_the_requested_size() -> None:
    value = encode("p3", 12345, 100)
    assert len(value) == 100
    assert decode(value) == ("p3", 12345)
    assert decode(b"not ours") == (None, None)
    assert decode(None) == (None, None)


def test_only_definite_refusals_are_failures() -> None:
    assert outcome(None) == "ok"
    assert outcome(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)) == "fail"
    for code in (KafkaError._MSG_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT,
                 KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                 KafkaError._UNKNOWN_PARTITION, KafkaError.REQUEST_TIMED_OUT):
        assert outcome(KafkaError(code)) == "info", KafkaError(code).name()


def test_history_is_flushed_within_a_second_and_fsynced_on_close(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "history" / "sends.jsonl")
    writer.write({"producer": "p0", "seq": 0})
    time.sleep(FLUSH_INTERVAL_S * 3)
    assert json.loads((tmp_path / "history" / "sends.jsonl").read_text()) == {"producer": "p0", "seq": 0}
    writer.write({"producer": "p0", "seq": 1})
    writer.close()
    writer.close()
    lines = (tmp_path / "history" / "sends.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [0, 1]
