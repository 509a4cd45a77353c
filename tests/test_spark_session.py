"""The checker's Spark configuration by history size, and the JVM accepting what it is given."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from checkers.reference import check_run
from spark_analysis import class_archive
from spark_analysis.make_class_archive import write_training_run
from spark_analysis.session import (BYTES_PER_PARTITION, C1_ONLY_CODE, MEDIUM_HISTORY, SMALL_HISTORY, jvm_file,
                                    spark_conf)


def options(history_bytes: int | None) -> list[str]:
    return spark_conf("local[2]", history_bytes)["spark.driver.extraJavaOptions"].split()


def test_each_history_size_gets_its_jvm() -> None:
    small, medium, big, unknown = (options(b) for b in (SMALL_HISTORY - 1, MEDIUM_HISTORY - 1, MEDIUM_HISTORY, None))
    assert "-XX:TieredStopAtLevel=1" in small and "-XX:+UseSerialGC" in small
    assert "-XX:TieredStopAtLevel=1" in medium and "-XX:+UseSerialGC" not in medium
    assert "-XX:TieredStopAtLevel=1" not in big and "-XX:+UseParallelGC" in big
    assert big == unknown  # an unknown size is sized for a big history
    assert not any("CompilerDirectivesFile" in o for o in small + medium)  # C1 only: nothing to direct
    assert spark_conf("local[2]", 50 * BYTES_PER_PARTITION)["spark.sql.shuffle.partitions"] == "50"
    assert spark_conf("local[2]", SMALL_HISTORY)["spark.sql.shuffle.partitions"] == "8"


def test_the_jvm_accepts_the_compiler_directives() -> None:
    """A directives file the JVM cannot parse stops it from starting: every big check would fail."""
    [path] = [o.split("=", 1)[1] for o in options(None) if o.startswith("-XX:CompilerDirectivesFile=")]
    result = subprocess.run([class_archive.java_command(), "-XX:+UnlockDiagnosticVMOptions",
                             f"-XX:CompilerDirectivesFile={path}", "-XX:+CompilerDirectivesPrint", "-version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 compiler directives added" in result.stdout
    listed = result.stdout.split("matching:", 1)[1].splitlines()[0]
    assert {p.strip() for p in listed.split(",")} == {f"{c}.*" for c in C1_ONLY_CODE}
    assert "Exclude:true" in result.stdout.split("c2 directives:", 1)[1].split("Directive:", 1)[0]


def test_jvm_files_are_rewritten_only_when_they_differ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    first = jvm_file("x.txt", "one")
    stamp = first.stat().st_mtime_ns
    assert jvm_file("x.txt", "one") == first and first.stat().st_mtime_ns == stamp
    assert jvm_file("x.txt", "two").read_text() == "two"
    assert first.parent == tmp_path


def test_sessions_map_the_class_archive_when_set_up_made_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path)
    assert not any("SharedArchiveFile" in o for o in options(None))  # none made: the JVM starts as before
    archive = class_archive.archive_path()
    archive.write_bytes(b"x")
    for size in (SMALL_HISTORY - 1, MEDIUM_HISTORY - 1, None):
        assert f"-XX:SharedArchiveFile={archive}" in options(size)
    making = spark_conf("local[2]", None, class_archive=False)["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in making  # the JVM that makes a new archive maps no old one


def test_the_training_run_shows_the_anomalies_a_check_looks_for(tmp_path: Path) -> None:
    """The archive holds the classes its training check loaded: that check must take the paths real ones take."""
    write_training_run(tmp_path)
    counts = check_run(tmp_path)["counts"]
    for anomaly in ("lost", "lost_after_read", "duplicated", "unexpected", "failed_but_present", "divergent",
                    "unknown_found", "unknown_not_found", "consumer_skipped"):
        assert counts[anomaly] > 0, anomaly
    assert counts["acked"] > 500


@pytest.mark.parametrize("content", [b"not an archive", None])
def test_a_jvm_given_a_broken_or_missing_archive_starts_without_it(tmp_path: Path, content: bytes | None) -> None:
    """A stale archive (a JDK upgraded after set-up) must cost speed, never a check."""
    archive = tmp_path / "stale.jsa"
    if content is not None:
        archive.write_bytes(content)
    result = subprocess.run([class_archive.java_command(), f"-XX:SharedArchiveFile={archive}", "-version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
