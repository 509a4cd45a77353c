"""Which checker judges a run: the one place that chooses between the Spark checker and the reference.

``kchaos run`` and ``kchaos check`` default to Spark, which scales to the tens
of millions of messages of a nightly run; ``--engine python`` runs the
pure-Python reference, quicker to start for a small run and the oracle the
Spark checker is tested against.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkers import reference
from rundir.lines import HistoryError
from spark_analysis.session import remote_url, spark_log_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENGINES = ("spark", "python")
DEFAULT_ENGINE = "spark"


class SparkCheckError(HistoryError):
    """Spark itself failed (no Java, a cluster that cannot be reached, a job that died): the run cannot be judged."""


def check_run_with(engine: str, run_dir: Path, spark_master: str | None = None,
                   history_format: str | None = None, spark: "SparkSession | None" = None) -> dict[str, Any]:
    """results.json for ``run_dir`` from the chosen engine; ``spark_master``, ``history_format`` ("parquet",
    the default, or "json"; else KCHAOS_SPARK_INPUT) and ``spark`` (a session to use, e.g. warm.py's) only
    matter for Spark."""
    if engine == "python":
        return reference.check_run(run_dir)
    if engine != "spark":
        raise ValueError(f"unknown checker engine {engine!r}; choose one of {', '.join(ENGINES)}")
    from spark_analysis.checker import check_run as spark_check_run  # imports pyarrow: only when Spark checks

    try:
        return spark_check_run(run_dir, spark, spark_master=spark_master, history_format=history_format)
    except HistoryError:
        raise
    except Exception as e:  # Py4J, PySpark and Java errors carry pages of stack trace: keep the first line
        if not _from_spark(e):
            raise
        first = rpc_status(e) or next((line.strip() for line in str(e).splitlines() if line.strip()),
                                      type(e).__name__)
        remote = remote_url(spark_master) if spark is None else None
        where = f"the Spark Connect server at {remote}" if remote else f"JVM log: {spark_log_path()}"
        raise SparkCheckError(f"the Spark checker failed: {first[:300]} ({where})") from None


def rpc_status(error: BaseException) -> str | None:
    """A gRPC error's status and details in one line (its text is a multi-line dump), else None; pyspark's
    errors carry it as their cause."""
    seen: BaseException | None = error
    while seen is not None:
        code, details = getattr(seen, "code", None), getattr(seen, "details", None)
        if callable(code) and callable(details):
            try:
                status = code()
                return f"{getattr(status, 'name', status)}: {details()}"
            except Exception:  # noqa: BLE001 - not a gRPC error after all
                return None
        seen = seen.__cause__ or seen.__context__
    return None


def _from_spark(error: BaseException) -> bool:
    module = type(error).__module__ or ""
    return module.startswith(("pyspark", "py4j", "grpc")) or isinstance(error, (ConnectionError, RuntimeError))
