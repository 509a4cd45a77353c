"""The checker's session, started and warmed while a run settles, so that the run's check begins warm.

A check in a fresh driver JVM pays for starting the session and for its
first jobs running cold: code generation, class loading and the JIT (what
that costs a nightly run: benchmarks/README.md). A run's settling is time it waits anyway, with the
cluster healthy again: ``kchaos run`` starts the session there, sized for
the history the run is expected to have, and checks a small made-up run in
it (the class archive's, spark_analysis/make_class_archive.py). The run's
own check then takes that session (``session()`` waits for the warm-up).
A warm-up that fails only costs its time: the check then starts a session
of its own.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rundir.layout import SENDS
from spark_analysis.session import history_bytes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def expected_history_bytes(history_dir: Path) -> int:
    """The JSON lines the check will read once the run has read back, guessed while it settles: what is there,
    plus about a read line per send line for the final read (the session's sizing only needs the order of
    magnitude)."""
    sends = history_dir / SENDS
    return history_bytes(history_dir) + (sends.stat().st_size if sends.is_file() else 0)


def check_made_up_run(spark: "SparkSession", master: str) -> bool:
    """Check a small made-up run (the class archive's) in ``spark`` once, so that its first jobs, generated code
    and JIT are warm for the real check; False, and nothing done, when ``master``'s executors run on other
    machines: they would not see a run in this machine's temp folder."""
    from spark_analysis.checker import check_run
    from spark_analysis.make_class_archive import write_training_run
    from spark_analysis.session import on_this_machine

    if not on_this_machine(master):
        return False
    with tempfile.TemporaryDirectory(prefix="kchaos-warm-") as tmp:
        write_training_run(Path(tmp))
        check_run(Path(tmp), spark)
    return True


class WarmSession:
    """One session started early in a thread of its own; ``session()`` hands it over once warm."""

    def __init__(self, spark_master: str | None = None) -> None:
        self.spark_master = spark_master
        self._thread: threading.Thread | None = None
        self._spark: "SparkSession | None" = None

    def start(self, history_dir: Path) -> None:
        """Start the session for the history in ``history_dir`` and warm it, in the background (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._warm, args=(expected_history_bytes(history_dir),),
                                            name="kchaos-warm-check", daemon=True)
            self._thread.start()

    def _warm(self, size: int) -> None:
        started = time.monotonic()
        try:
            from pyspark import SparkContext

            from spark_analysis.session import master_url, spark_session

            if SparkContext._active_spark_context is not None:
                return  # a session is up already (tests share one): the check takes it as it is
            self._spark = spark_session(self.spark_master, size)
            if check_made_up_run(self._spark, master_url(self.spark_master)):
                log.info("the checker's session was warmed in %.1f s", time.monotonic() - started)
        except Exception as e:  # noqa: BLE001 - a warm-up never fails the run; the check starts its own session
            log.warning("the checker's session could not be warmed while the run settled (%s); the check starts "
                        "its own", str(e).splitlines()[0] if str(e) else type(e).__name__)
            self.stop()

    def session(self) -> "SparkSession | None":
        """The warm session once the warm-up is over (waiting for it), or None (never started, or it failed)."""
        if self._thread is not None:
            self._thread.join()
        return self._spark

    def stop(self) -> None:
        """Stop the session, if one was started."""
        spark, self._spark = self._spark, None
        if spark is not None:
            spark.stop()
