"""The SparkSession the checker runs on: local on all cores by default, or an existing Spark cluster.

``spark_conf`` sizes the JVM and the shuffle for the history to check (a
2-core, 24 GB machine is the baseline; see docs/architecture.md, "The machines"); the comments beside
each setting say why, benchmarks/PROFILE.md what each was measured to save.
``spark_master`` (or the SPARK_MASTER environment variable) points the same
job at a standalone cluster, e.g. ``spark://127.0.0.1:7077``, whose executors
must see the run directory at the same path as the driver. There the
executors also convert the JSON lines to their Parquet caches (ranged.py), so
their Python (PYSPARK_PYTHON; on this machine, this very interpreter) needs
kchaos and pyarrow installed. KCHAOS_SPARK_CONVERT (``driver`` or
``executors``) overrides where the conversion runs.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from spark_analysis.class_archive import usable_archive

if TYPE_CHECKING:  # pyspark is imported only when the Spark engine is used: it is slow to import
    from pyspark.sql import SparkSession

# In local mode the executor lives inside the driver JVM, so this is the whole checker's heap; the parsed
# history is cached compressed and spills to disk, so 10 million sends with their reads fit.
DRIVER_MEMORY = "3g"
# bytes of JSON lines (history_bytes: sends, reads, events, txns; not the forensics' files, which the check does
# not read). Below it, no generated code and no adaptive plans: cheaper only while the JVM's start dominates, which
# a warm session's check no longer pays, hence a bound this low (the figures: benchmarks/README.md).
SMALL_HISTORY = 16 * 2 ** 20
# A small history: most of its check is starting the JVM, warming up the JIT and compiling generated Java. C1
# only, and the serial collector (no G1 worker threads to start); big checks keep C2 and G1, which pay back.
SMALL_JVM_OPTIONS = " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Up to a few million sends, C2 compiling Spark's generated code costs more CPU than it saves.
MEDIUM_HISTORY = 2 ** 30  # bytes of JSON lines, about 2.3 M sends with their reads
MEDIUM_JVM_OPTIONS = " -XX:TieredStopAtLevel=1"
# Bigger histories: C2, and the throughput collector. A check is a batch job that never waits on a pause;
# G1's concurrent marking and refinement threads take CPU the tasks and C2 then lack. The heap bound (driver
# memory) is the same.
BIG_JVM_OPTIONS = " -XX:+UseParallelGC"
# ... and C2 kept for the tasks' code: Spark's generated classes, its shuffle, sorting and aggregation, the
# Parquet readers. The driver's machinery (planning, Janino compiling the generated Java, ANTLR parsing SQL,
# Java serialization, class loading) runs often enough for C2 to compile it, never long enough to repay it:
# those methods stop at C1's optimized tier (a compiler directive).
C1_ONLY_CODE = (
    "org/codehaus/*", "org/antlr/*", "java/io/Object*", "jdk/internal/org/*", "jdk/internal/loader/*",
    "java/lang/ClassLoader", "java/lang/invoke/*", "java/util/regex/*", "java/util/jar/*", "java/util/Formatter*",
    "scala/reflect/*", "scala/runtime/LambdaDeserialize", "org/apache/xbean/*", "py4j/*",
    "org/apache/parquet/format/*", "shaded/parquet/org/apache/thrift/*", "org/apache/hadoop/conf/*",
    "org/apache/spark/sql/internal/SQLConf*", "org/apache/spark/sql/catalyst/expressions/AliasHelper*",
    *[f"org/apache/spark/sql/catalyst/{stage}/*" for stage in ("trees", "plans", "analysis", "optimizer", "parser",
                                                              "rules")],
)
COMPILER_DIRECTIVES = "[{match: [%s], c2: {Exclude: true}}]\n" % ", ".join(f'"{c}.*"' for c in C1_ONLY_CODE)
# A shuffle partition per this many bytes of JSON lines (about 1.25 M sends with their reads), and at least 4
# per core: the hash map a reduce task builds of its messages stays within its share of the heap. Adaptive
# execution coalesces them for small histories, so a check of a thousand messages runs no hundreds of tiny tasks.
BYTES_PER_PARTITION = 640 * 2 ** 20
APP_NAME = "kchaos-check"

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""


def history_bytes(history_dir: Path) -> int:
    """The bytes of the JSON lines the checker reads (sends, reads, events, txns), which size its session; the
    forensics' files beside them (replica batches, broker events) are not checked and do not count."""
    from rundir.layout import EVENTS, READS, SENDS, TXNS

    files = (history_dir / name for name in (SENDS, READS, EVENTS, TXNS))
    return sum(f.stat().st_size for f in files if f.is_file())


def spark_log_path() -> Path:
    """Where the JVM's own console output goes (SPARK_LOG, else one file per user in the temp folder)."""
    configured = os.environ.get("SPARK_LOG")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"kchaos-spark-{os.getuid()}.log"


def master_url(spark_master: str | None = None) -> str:
    """The --spark-master argument, else SPARK_MASTER, else local mode on every core."""
    return spark_master or os.environ.get("SPARK_MASTER") or "local[*]"


CONVERT_ENV = "KCHAOS_SPARK_CONVERT"
CONVERT_PLACES = ("driver", "executors")


def master_of(spark: "SparkSession") -> str:
    """The session's master URL, from its configuration: a Spark Connect session has no SparkContext to ask."""
    return spark.conf.get("spark.master") or "local[*]"


def converts_on_executors(master: str) -> bool:
    """Whether the executors convert the history (ranged.py): on a cluster, unless KCHAOS_SPARK_CONVERT says
    otherwise. In local mode the driver's own threads do it, as fast (benchmarks/README.md)."""
    chosen = os.environ.get(CONVERT_ENV)
    if chosen:
        if chosen not in CONVERT_PLACES:
            from rundir.lines import HistoryError

            raise HistoryError(f"unknown {CONVERT_ENV} {chosen!r}; choose one of {', '.join(CONVERT_PLACES)}")
        return chosen == "executors"
    return not master.startswith("local")


def local_cores(master: str) -> int:
    """Cores the job can use, to size the shuffle: local[N], local[*], or the machine's for a cluster."""
    if master.startswith("local[") and master.endswith("]"):
        inside = master[len("local["):-1].split(",")[0]
        if inside.isdigit():
            return max(1, int(inside))
    return os.cpu_count() or 2


def on_this_machine(master: str) -> bool:
    """Local mode, or a cluster whose master listens on the loopback interface."""
    if master.startswith("local"):
        return True
    host = master.split("://", 1)[-1].split(":", 1)[0].split(",", 1)[0]
    return host in ("localhost", "::1") or host.startswith("127.")


def jvm_file(name: str, text: str) -> Path:
    """A configuration file the driver JVM reads, in the temp folder (one per user), rewritten when it differs."""
    path = Path(tempfile.gettempdir()) / f"kchaos-spark-{os.getuid()}-{name}"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def spark_conf(master: str, history_bytes: int | None = None, class_archive: bool = True) -> dict[str, str]:
    """The configuration the checker's session is built with, for a history of this many bytes of JSON
    lines (None: unknown, sized for a big one), mapping the class archive that set-up made
    (class_archive.py) when there is one and ``class_archive`` is true."""
    log4j = jvm_file("log4j2.properties", LOG4J2)
    small = history_bytes is not None and history_bytes < SMALL_HISTORY
    medium = history_bytes is not None and history_bytes < MEDIUM_HISTORY
    cores = local_cores(master)
    driver_options = f"-Dlog4j2.configurationFile=file:{log4j}" + (
        SMALL_JVM_OPTIONS if small else MEDIUM_JVM_OPTIONS if medium else BIG_JVM_OPTIONS + (
            " -XX:+UnlockDiagnosticVMOptions -XX:CompilerDirectivesFile="
            f"{jvm_file('compiler-directives.json', COMPILER_DIRECTIVES)}"))
    archive = usable_archive() if class_archive else None
    if archive is not None:
        driver_options += f" -XX:SharedArchiveFile={archive}"
    conf = {
        "spark.master": master,
        "spark.app.name": APP_NAME,
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.driver.extraJavaOptions": driver_options,
        # no web UI, no console progress bars, no Hive catalog: a faster start, no ports opened, nothing on the
        # console but the verdict (Log4j says only errors, and the JVM's own output goes to SPARK_LOG)
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.catalogImplementation": "in-memory",
    }
    # a remote cluster's executors must reach the driver at a routable address: Spark's choice for this machine's
    # name, or SPARK_LOCAL_IP's, said in the configuration, since a process's second session shares its first's
    # JVM (whose own SPARK_LOCAL_IP may be another)
    driver = "127.0.0.1" if on_this_machine(master) else os.environ.get("SPARK_LOCAL_IP")
    if driver:
        conf["spark.driver.host"] = conf["spark.driver.bindAddress"] = driver
    return {**conf, **sql_settings(cores, history_bytes)}


def sql_settings(cores: int, history_bytes: int | None) -> dict[str, str]:
    """The SQL settings a check of this many bytes of JSON lines wants on this many cores: those a running
    session takes at any time (``spark.conf.set``), so a long-lived server sizes each check on its own."""
    small = history_bytes is not None and history_bytes < SMALL_HISTORY
    partitions = str(2 * cores if small else max(8, 4 * cores, -(-(history_bytes or 0) // BYTES_PER_PARTITION)))
    return {
        "spark.sql.shuffle.partitions": partitions,
        "spark.sql.adaptive.coalescePartitions.initialPartitionNum": partitions,
        "spark.sql.session.timeZone": "UTC",
        # a small history: no generated code; adaptive execution re-plans every stage: on a few thousand lines,
        # most of the work
        "spark.sql.adaptive.enabled": "false" if small else "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.codegen.wholeStage": "false" if small else "true",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN" if small else "FALLBACK",
    }


def spark_session(spark_master: str | None = None, history_bytes: int | None = None) -> "SparkSession":
    """The active session if there is one (tests share one), else a session of its own for the checker: through
    a Spark Connect server when ``remote_url`` names one, else a new in-process session.

    ``history_bytes``, the size of the history to check, sizes it
    (unknown: sized for a big one).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = remote_url(spark_master)
    if remote is not None:
        return connect_session(remote, history_bytes)
    master = master_url(spark_master)
    if on_this_machine(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors' tasks import kchaos (ranged.py)
    return new_session(spark_conf(master, history_bytes))


REMOTE_ENV = "SPARK_REMOTE"
# waits of 0.5, 1, 2 and 4 s (milliseconds here): a dead server fails a check in about 8 s
CONNECT_RETRIES = {"max_retries": 4, "backoff_multiplier": 2.0, "initial_backoff": 500, "max_backoff": 4000}
# once it has answered: waits of 0.2 and 0.4 s, for a hiccup
ANSWERED_RETRIES = {"max_retries": 2, "backoff_multiplier": 2.0, "initial_backoff": 200, "max_backoff": 1000}


def is_remote(spark_master: str | None) -> bool:
    """An sc:// URL: a Spark Connect server, not a master."""
    return bool(spark_master) and str(spark_master).startswith("sc://")


def remote_url(spark_master: str | None = None) -> str | None:
    """The Spark Connect server a check goes through, None for an in-process session: ``spark_master`` when it is
    an sc:// URL (none when it names a master), else SPARK_REMOTE, else none when SPARK_MASTER names a master,
    else this machine's ``kchaos spark up`` server when it is up (server.py)."""
    if spark_master:
        return spark_master if is_remote(spark_master) else None
    if os.environ.get(REMOTE_ENV):
        return os.environ[REMOTE_ENV]
    if os.environ.get("SPARK_MASTER"):
        return None
    from spark_analysis.server_state import running

    state = running()
    return state.url if state is not None else None


def connect_session(url: str, history_bytes: int | None = None) -> "SparkSession":
    """A session of its own on the Spark Connect server at ``url``, its SQL settings sized for this history.

    pyspark's builder, not the Connect session's own: it marks this process
    as a Connect client, which pyspark.sql.functions asks on every call."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    # pyspark warns on stderr when it gives up; the check's own error says it in one line
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    spark = SparkSession.builder.remote(url).create()
    # pyspark retries an unreachable server for at least 10 minutes; a check gives up after about 8 s
    spark.client.set_retry_policies([DefaultPolicy(**CONNECT_RETRIES)])  # type: ignore[attr-defined]
    try:
        size_session(spark, history_bytes)  # its first call: a server that does not answer fails here
    except BaseException:
        end_session(spark, broken=True)
        raise
    # it answered: a server that dies later is gone for good, and each call after the failing one (unpersisting,
    # releasing the session) fails fast instead of waiting through the retries again
    spark.client.set_retry_policies([DefaultPolicy(**ANSWERED_RETRIES)])  # type: ignore[attr-defined]
    return spark


def is_connect(spark: "SparkSession") -> bool:
    """A Spark Connect session (a client of a server), not an in-process one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def end_session(spark: "SparkSession", broken: bool = False) -> None:
    """Stop a session the checker opened. A Connect session is released on its server, but one whose server
    did not answer is only closed here: releasing it would wait through the retries again."""
    if broken and is_connect(spark):
        spark.client.close()  # type: ignore[attr-defined]
    else:
        spark.stop()


def size_session(spark: "SparkSession", history_bytes: int | None) -> None:
    """Give a running session the SQL settings for a check of this size (sql_settings)."""
    for key, value in sql_settings(local_cores(master_of(spark)), history_bytes).items():
        spark.conf.set(key, value)


def new_session(conf: dict[str, str]) -> "SparkSession":
    """A session with this configuration in a new driver JVM, whose console output goes to the Spark log (or in
    the JVM of this process's earlier session: pyspark never uses a second one, which would only run idle).

    The JVM prints warnings (incubator modules, native Hadoop) before any log
    configuration applies. Its output is handed to it when it is launched,
    so no file descriptor of this process changes: a session can start in a
    thread while the run's progress line goes on (spark_analysis/warm.py).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    settings = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    gateway = SparkContext._gateway  # a process's driver JVM outlives its sessions; pyspark keeps the first
    if gateway is None:
        log = spark_log_path()
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as sink:
            gateway = launch_gateway(settings, popen_kwargs={"stdout": sink, "stderr": sink})
    SparkContext(conf=settings, gateway=gateway)  # the session takes its SQL settings from the context's
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def jvm_pid(spark: "SparkSession") -> int:
    """The driver JVM's process id (for its peak memory; an in-process session's only)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
