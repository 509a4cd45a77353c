"""The class-data-sharing archive of the classes a Spark check loads: where it lives, and whether set-up made one.

Sessions map it (``-XX:SharedArchiveFile``), so the checker's JVM starts with
Spark's classes already parsed and verified; ``make_class_archive`` makes it
at set-up. It belongs to one JVM and one set of jars: ``archive_path`` names
it by PySpark's version, and a JVM that finds it does not match (an upgraded
JDK) says so in the Spark log and starts without it: slower, never wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

ARCHIVE_DIR = Path(__file__).resolve().parent.parent / ".cache" / "spark-classes"


def archive_path() -> Path:
    """Where this PySpark's archive lives (it may not exist)."""
    import pyspark

    return ARCHIVE_DIR / f"pyspark-{pyspark.__version__}.jsa"


def java_command() -> str:
    """The java PySpark starts: JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def usable_archive() -> Path | None:
    """The archive, when set-up made one (sessions use it; without, they start without one: slower, never wrong)."""
    path = archive_path()
    return path if path.is_file() and path.stat().st_size > 0 else None
