"""Make the class archive at set-up: ``python -m spark_analysis.make_class_archive`` (scripts/setup.sh).

A JVM started with ``-XX:ArchiveClassesAtExit`` checks a small made-up run
on both inputs and writes every class it loaded to the archive as it exits.
The archive is made again only when PySpark or the ``java -version`` that
made it (a stamp beside it) changes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spark_analysis.checker import check_run
from spark_analysis.class_archive import archive_path, java_command, usable_archive
from spark_analysis.session import new_session, spark_conf, spark_log_path

EXIT_TIMEOUT_S = 300  # writing the archive (~180 MB) takes a while on a small machine


def java_identity() -> str:
    """``java -version`` of the JVM PySpark starts."""
    return subprocess.run([java_command(), "-version"], capture_output=True, text=True, check=True).stderr.strip()


def write_training_run(run: Path) -> None:
    """A small run with an anomaly of most kinds: its check loads the classes a real check loads."""
    history = run / "history"
    history.mkdir(parents=True, exist_ok=True)
    sends, reads = [], []
    for i in range(600):
        producer, seq, partition, offset = f"p{i % 3}", i // 3, i % 4, i // 4
        status = "fail" if i % 97 == 5 else "unknown" if i % 89 == 7 else "ok"
        sends.append({"producer": producer, "seq": seq, "topic": "t", "key": str(seq), "partition": partition,
                      "offset": offset if status == "ok" else None, "status": status,
                      "error": None if status == "ok" else "timed out", "invoke_ns": i, "complete_ns": i + 1})
        if (status != "ok" and i % 2) or i % 101 == 3:  # not written (or not known to be), or lost
            continue
        read = {"topic": "t", "partition": partition, "offset": offset, "producer": producer, "seq": seq}
        reads.append({"consumer": "c0", "group": "g", "phase": "live", **read, "time_ns": i + 2})
        if i % 53 == 9:
            read = {**read, "producer": "p9"}  # divergent, and never sent
        reads.append({"consumer": "final", "group": None, "phase": "final", **read, "time_ns": i + 3})
        if i % 61 == 4:  # duplicated
            reads.append({"consumer": "final", "group": None, "phase": "final", **read, "offset": offset + 1000,
                          "time_ns": i + 4})
    events = [e for p in range(4) for e in (
        {"kind": "committed", "group": "g", "topic": "t", "partition": p, "offset": 150, "time_ns": 1},
        {"kind": "final-read", "topic": "t", "partition": p, "high_watermark": 150, "complete": True, "time_ns": 2})]
    for name, lines in (("sends", sends), ("reads", reads), ("events", events)):
        (history / f"{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def make_archive(path: Path) -> None:
    """Check a training run on both inputs in a JVM that writes the classes it loaded to ``path`` at exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    conf = spark_conf("local[*]", class_archive=False)  # sized for a big history: generated code, C2, adaptive plans
    conf["spark.driver.extraJavaOptions"] += f" -XX:ArchiveClassesAtExit={partial}"
    spark = new_session(conf)
    jvm = getattr(spark.sparkContext._gateway, "proc", None)  # type: ignore[attr-defined]
    try:
        if jvm is None:
            raise RuntimeError("this PySpark does not hand over its JVM's process: no class archive")
        with tempfile.TemporaryDirectory(prefix="kchaos-classes-") as tmp:
            run = Path(tmp)
            write_training_run(run)
            for history_format in ("parquet", "json"):
                check_run(run, spark, history_format=history_format)
    finally:
        spark.stop()
        # the JVM exits (and writes the archive) when its standard input closes: PySpark's gateway waits on it
        if jvm is not None:
            jvm.stdin.close()
            jvm.wait(timeout=EXIT_TIMEOUT_S)
    if not partial.is_file() or partial.stat().st_size == 0:
        raise RuntimeError(f"the JVM wrote no class archive; see {spark_log_path()}")
    partial.replace(path)


def ensure_archive() -> str:
    """Make the archive unless one made by this JVM for this PySpark exists; says which it did."""
    path = archive_path()
    stamp = path.with_suffix(".jvm")
    identity = java_identity()
    if usable_archive() and stamp.is_file() and stamp.read_text() == identity:
        return f"up to date ({path.name})"
    started = time.monotonic()
    make_archive(path)
    stamp.write_text(identity)
    return f"made {path.name} ({path.stat().st_size / 2 ** 20:.0f} MB) in {time.monotonic() - started:.0f} s"


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    try:
        print(ensure_archive())
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"class archive: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
