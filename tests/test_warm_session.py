"""spark_analysis/warm.py: the checker's session started and warmed while a run settles, then handed over."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spark_analysis.make_class_archive import write_training_run
from spark_analysis.session import history_bytes
from spark_analysis.warm import WarmSession, expected_history_bytes

REPO = Path(__file__).resolve().parents[1]


def test_the_expected_size_adds_a_read_line_per_send_line_for_the_final_read(tmp_path: Path) -> None:
    (tmp_path / "sends.jsonl").write_text("s" * 1000)
    (tmp_path / "reads.jsonl").write_text("r" * 300)
    (tmp_path / "events.jsonl").write_text("e" * 20)
    (tmp_path / "broker-events.jsonl").write_text("b" * 5000)  # the forensics' files are not checked
    assert history_bytes(tmp_path) == 1000 + 300 + 20
    assert expected_history_bytes(tmp_path) == 1000 + 300 + 20 + 1000
    assert expected_history_bytes(tmp_path / "missing") == 0


def test_a_warm_up_that_fails_is_a_warning_and_the_check_starts_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def no_session(*args: object) -> None:
        raise RuntimeError("Java gateway process exited before sending its port number\nmore")

    import pyspark

    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)
    monkeypatch.setattr("spark_analysis.session.spark_session", no_session)
    session = WarmSession()
    session.start(tmp_path)
    assert session.session() is None
    assert "could not be warmed" in caplog.text and "Java gateway process exited" in caplog.text
    assert "more" not in caplog.text


def test_the_check_takes_the_warm_session_and_judges_as_the_reference_does(tmp_path: Path) -> None:
    """In a process of its own (the tests' shared session would be taken as it is): the warm-up starts a
    session, the check runs in that same session, and its counts are the reference checker's."""
    run = tmp_path / "run"
    write_training_run(run)
    script = textwrap.dedent(f"""
        import json
        from pathlib import Path
        from checkers.reference import check_run as reference
        from spark_analysis.engine import check_run_with
        from spark_analysis.warm import WarmSession
        run = Path({str(run)!r})
        warm = WarmSession("local[2]")
        warm.start(run / "history")
        spark = warm.session()
        assert spark is not None
        jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        results = check_run_with("spark", run, spark=spark)
        same_jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid() == jvm
        warm.stop()
        print(json.dumps({{"spark": results["counts"], "reference": reference(run)["counts"], "same_jvm": same_jvm}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["same_jvm"] is True
    assert out["spark"] == out["reference"] and out["spark"]["lost"] > 0
