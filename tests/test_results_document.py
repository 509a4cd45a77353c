"""results.json is composed from its parts in one place (rundir.documents.compose_results), in one key order (#34)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from rundir.documents import EXPECTATIONS_KEYS, RUN_RECORD_KEYS, compose_results, results_parts
from test_verdict import ten_acks_read_back_to

CHECKER = {"schema_version": 2, "checker": "python", "valid": True, "counts": {"lost": 0}, "notes": ["n1"]}
RECORD = {key: f"r-{key}" for key in reversed(RUN_RECORD_KEYS)}  # given in another order than results.json's
EXPECTATIONS = {"exit_code": 0, "expectations": {"outcome": "met", "unmet": [], "not_judged": []}}


def test_the_parts_go_in_one_order_whatever_order_they_come_in_and_are_left_as_they_were() -> None:
    parts = json.dumps([CHECKER, RECORD, EXPECTATIONS])
    results = compose_results(CHECKER, RECORD, {"chains": []}, EXPECTATIONS, ["n2"])
    assert list(results) == [*CHECKER, *RUN_RECORD_KEYS, "forensics", *EXPECTATIONS_KEYS]
    assert results["notes"] == ["n1", "n2"]
    assert json.dumps([CHECKER, RECORD, EXPECTATIONS]) == parts
    assert list(compose_results(CHECKER, None, None, EXPECTATIONS)) == [*CHECKER, *EXPECTATIONS_KEYS]


def test_a_key_that_is_not_the_parts_own_is_refused() -> None:
    with pytest.raises(ValueError, match="colour"):
        compose_results(CHECKER, {**RECORD, "colour": "red"})


def test_a_written_results_json_taken_apart_composes_to_the_same_bytes(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run = ten_acks_read_back_to(7, tmp_path, expect={"lost": 0})
    main(["check", str(run), "--engine", "python"])
    capsys.readouterr()
    text = (run / "results.json").read_text()
    results = json.loads(text)
    assert list(results)[-len(EXPECTATIONS_KEYS):] == list(EXPECTATIONS_KEYS)
    assert json.dumps(compose_results(*results_parts(results)), indent=2) + "\n" == text


def test_kchaos_forensics_replaces_the_chains_in_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rewriting results.json with new chains keeps every other part and the key order."""
    run = ten_acks_read_back_to(10, tmp_path, expect={"lost": 0})
    main(["check", str(run), "--engine", "python"])
    before = json.loads((run / "results.json").read_text())
    (run / "logs").mkdir()
    (run / "logs" / "broker1.log").write_bytes(
        b"[2026-01-01 00:00:01,500] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)\n")
    assert main(["forensics", str(run)]) == 0
    capsys.readouterr()
    after = json.loads((run / "results.json").read_text())
    assert list(after) == list(before)
    assert {k: v for k, v in after.items() if k != "forensics"} == {k: v for k, v in before.items() if k != "forensics"}
