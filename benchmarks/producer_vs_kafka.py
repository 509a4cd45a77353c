"""The recorded kchaos workload, with each client, against Kafka's own perf tools, on one real cluster.

    .venv/bin/python benchmarks/producer_vs_kafka.py [--records 3000000] [--clients librdkafka java] [--profile 20]

Starts one cluster (3 brokers, ZooKeeper by default), and for acks=all and
acks=1, each on fresh topics of 6 partitions, RF 3, min.insync.replicas 2,
100-byte values:

* Kafka's ``org.apache.kafka.tools.ProducerPerformance`` (``--throughput -1``)
  writes ``--records`` records; its summary line gives records/s;
* the kchaos workload then writes for as long (``--seconds`` to fix it), once
  per client of ``--clients`` (default both: ``librdkafka``, the Python
  processes over confluent-kafka, and ``java``, the project's Java program
  on the kafka-clients of ``--kafka-version``), each on a topic of its own:
  the very ProducerClient processes, History and HistoryWriter that a trial
  (harness/run.py) uses, unbounded rate, ``--producers`` of them (the
  scenario default, 2), its history in a temporary run directory;
  acknowledged sends per second are counted from ``history/sends.jsonl``
  (status ok, over first invoke to last completion), so a JVM's start is
  not counted, as ProducerPerformance's own figure leaves its start out.

Then the consumer side, on the topic the first client's kchaos producers
filled with acks=all (values as kchaos writes them, ``<producer>:<seq>:``
and padding, which the read-back formats without a dict; ProducerPerformance's
random values would each take the slow path of a foreign value):
``org.apache.kafka.tools.ConsumerPerformance --messages N`` (N: every record
of the topic) against, per
client, the kchaos application consumer (a ConsumerClient process, fresh
group, recording ``live`` reads; its rate "incl. join" counts from the
process's start, a JVM's start included) and the harness's final read-back
(``workloads.consumer.read_back``, recording every record: librdkafka reads
in the harness process itself, java in a reader process of its own whose
start is counted).

Settings. ProducerPerformance and both kchaos producers get the same
properties: ``acks``, ``max.in.flight.requests.per.connection=5`` (the Java
producer's default and the scenarios' setting; librdkafka's default of a
million in flight sends many small batches that cost the brokers twice the
CPU a record) and ``--producer-config KEY=VALUE`` (more settings, or
another in-flight limit; the name must mean the same to both clients).
Everything else is each client's default. So the java kchaos producer runs
exactly ProducerPerformance's settings (the same kafka-clients version and
properties: idempotent with acks=all, not with acks=1; linger.ms 0 in 3.x
and 5 from 4.0; batch.size 16 KiB), while librdkafka runs its own
(not idempotent; linger.ms 5; batches up to 10,000 messages or 1 MB).
Each producer's resolved durability settings are printed (the ``K`` line it
says hello with, and Kafka's own resolution of ProducerPerformance's
properties). The consumers all run their client's defaults.

The Java tools run on the host JRE with the jars kchaos already resolved for
the node image (.cache/kafka/<version>/.../libs), i.e. where the kchaos
clients run; ``--tools-in broker`` runs them in broker1's container instead
(they then share that container's CPU with the broker). Each measurement
also shows the CPU seconds it cost: the tool or the harness and its client
processes, the cluster's containers, and the rest of the machine (others'
work on a shared machine), next to the load average; the summary gives each
figure with the 1-minute load average it was measured under.

``--profile S`` samples the harness process (and, with librdkafka, producer
p0; py-spy reads no JVM) with py-spy for S seconds during each client's
kchaos run (the first repetition of each acks) and prints the top functions; the raw stacks go to
runs/bench/. The cluster is torn down on every exit (Ctrl-C and SIGTERM
included).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusters.cluster import Cluster  # noqa: E402
from clusters.image import kafka_jars, uses_log4j2  # noqa: E402
from clusters.java_build import JavaBuildError, ensure_built  # noqa: E402
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION  # noqa: E402
from clusters.spec import ClusterSpec, TopicSpec  # noqa: E402
from clusters.topics import create_topic  # noqa: E402
from harness.errors import Terminated, install_termination_handlers  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from workloads.client import LIBRARIES, Library  # noqa: E402
from workloads.consumer import ConsumerClient, end_offsets, read_back  # noqa: E402
from workloads.errors import WorkloadError  # noqa: E402
from workloads.history import RDKAFKA_LOG, History, RunClock  # noqa: E402
from workloads.java_client import check_config  # noqa: E402
from workloads.producer import ProducerClient  # noqa: E402
from workloads.workload import Workload, stop_all  # noqa: E402

BENCH_OUT = ROOT / "runs" / "bench"
PARTITIONS = 6
RECORD_BYTES = 100
TOOLS_IN_CONTAINER_LIBS = "/opt/kafka/libs/*"
TARGET_RATIO = 0.8   # issue #21's target: kchaos >= 0.8 x ProducerPerformance, acks=all and acks=1
CONSUMER_TARGET = 0.5  # issue #21's: the live consumer and the read-back >= 0.5 x ConsumerPerformance, fetching only


# ---------------------------------------------------------------------- shared with the other benchmarks


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f}"


def say(text: str) -> None:
    print(f"{text}  [{load()}]", flush=True)


def quiet_logging() -> None:
    """As `kchaos run` without -v: warnings only, librdkafka's own log lines hidden."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    RDKAFKA_LOG.setLevel(logging.CRITICAL)


def _machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (all cores), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _container_cpu_s(container_ids: list[str]) -> float | None:
    """CPU seconds of these containers from their cgroups (v1 cpuacct or v2 cpu.stat); None if unreadable."""
    total = 0.0
    for cid in container_ids:
        for path, scale in ((f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage", 1e-9),
                            (f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat", 1e-6),
                            (f"/sys/fs/cgroup/docker/{cid}/cpu.stat", 1e-6)):
            try:
                text = Path(path).read_text()
            except OSError:
                continue
            value = int(text.split()[1]) if text.startswith("usage_usec") else int(text.split()[0])
            total += value * scale
            break
        else:
            return None
    return total


def _own_cpu_s() -> tuple[float, float]:
    """(this process, its waited-for children) CPU seconds."""
    t = os.times()
    return t.user + t.system, t.children_user + t.children_system


@dataclass
class CpuMeter:
    """CPU seconds spent between start and stop: ours, the cluster's and the rest of the machine's."""

    container_ids: list[str]
    extra_pids: list[int] = field(default_factory=list)   # processes not waited for yet (clients still running)

    def __post_init__(self) -> None:
        self.wall0 = time.monotonic()
        self.self0, self.children0 = _own_cpu_s()
        self.cluster0 = _container_cpu_s(self.container_ids)
        self.machine0 = _machine_busy_s()

    def stop(self) -> dict[str, float | None]:
        wall = time.monotonic() - self.wall0
        own, children = _own_cpu_s()
        cluster = _container_cpu_s(self.container_ids)
        machine = _machine_busy_s() - self.machine0
        harness, tool = own - self.self0, children - self.children0
        cluster_s = None if cluster is None or self.cluster0 is None else cluster - self.cluster0
        others = None if cluster_s is None else max(0.0, machine - harness - tool - cluster_s)
        return {"wall_s": wall, "self_s": harness, "children_s": tool, "cluster_s": cluster_s,
                "machine_s": machine, "others_s": others}


def cpu_text(cpu: dict[str, float | None], self_name: str, children_name: str) -> str:
    def s(v: float | None) -> str:
        return "?" if v is None else f"{v:.0f}"
    wall = cpu["wall_s"] or 1.0
    return (f"CPU-s over {wall:.0f} s: {self_name} {s(cpu['self_s'])}, {children_name} {s(cpu['children_s'])}, "
            f"cluster containers {s(cpu['cluster_s'])}, rest of the machine {s(cpu['others_s'])} "
            f"(machine busy {100 * (cpu['machine_s'] or 0) / (2 * wall):.0f}% of 2 cores)")


def start_cluster(metadata: str, kafka_version: str, workdir: Path, data_size_mb: int = 8192,
                  broker_config: dict[str, str] | None = None) -> Cluster:
    spec = ClusterSpec(kafka_version=kafka_version, metadata=metadata,  # type: ignore[arg-type]
                       data_size_mb=data_size_mb, broker_config=broker_config or {})
    started = time.monotonic()
    cluster = Cluster.start(spec, workdir, owner_pid=os.getpid())
    quorum = f"{spec.controllers} KRaft controllers" if metadata == "kraft" else f"{spec.zookeepers} ZooKeeper"
    say(f"cluster {cluster.cluster_id} up in {time.monotonic() - started:.1f} s "
        f"({quorum}, {spec.brokers} brokers, Kafka {kafka_version}): {cluster.bootstrap_servers}")
    return cluster


def container_ids(cluster: Cluster) -> list[str]:
    return [str(n.container.id) for n in cluster.nodes]


def delete_topic(cluster: Cluster, name: str) -> None:
    try:
        cluster.admin().delete_topics([name], request_timeout=30)[name].result(timeout=35)
    except Exception as e:  # noqa: BLE001 -- best effort: only disk space is at stake
        logging.getLogger(__name__).warning("could not delete topic %s: %s", name, e)


def topic_records(cluster: Cluster, topic: str) -> int:
    """How many records ``topic`` holds: the sum of its partitions' high watermarks (nothing was deleted)."""
    admin = cluster.admin()
    return sum(end_offsets(admin, topic, PARTITIONS, "read_uncommitted", timeout_s=30).values())


def new_history(run_dir: Path) -> History:
    """A run directory's history, as run_scenario opens it."""
    (run_dir / "history").mkdir(parents=True, exist_ok=True)
    return History(RunDir(run_dir), RunClock())


def producer_clients(cluster: Cluster, topic: str, history: History, count: int, config: dict[str, Any],
                     client: Library = "librdkafka") -> list[ProducerClient]:
    """The producers of a trial (harness/run.py's Trial), unbounded rate, 100-byte values; a java one runs the
    kafka-clients of the cluster's version."""
    return [ProducerClient(f"p{i}", cluster.bootstrap_servers, topic, dict(config), history.sends,
                           history.clock, None, RECORD_BYTES, client=client,
                           kafka_version=cluster.spec.kafka_version) for i in range(count)]


def count_acked(sends: Path) -> tuple[int, int, float]:
    """(ok sends, all sends, seconds from the first invoke to the last ok completion) of a sends.jsonl."""
    pattern = re.compile(rb'"invoke_ns":(\d+),"complete_ns":(\d+)')
    ok = total = 0
    first_invoke = None
    last_complete = 0
    with sends.open("rb") as f:
        for line in f:
            total += 1
            m = pattern.search(line)
            if m is None:
                continue
            invoke = int(m.group(1))
            first_invoke = invoke if first_invoke is None else min(first_invoke, invoke)
            if b'"status":"ok"' in line:
                ok += 1
                last_complete = max(last_complete, int(m.group(2)))
    span = (last_complete - (first_invoke or 0)) / 1e9 if ok else 0.0
    return ok, total, span


def status_rss_kb(pid: int | str) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB from /proc; (0, 0) when it is gone."""
    rss = hwm = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return rss, hwm


# ---------------------------------------------------------------------- py-spy


_LIVE_PROFILERS: set["Profiler"] = set()


def abort_profilers() -> None:
    """Kill every py-spy still running (any exit path of a benchmark)."""
    for profiler in list(_LIVE_PROFILERS):
        profiler.abort()


class Profiler:
    """py-spy record on a set of processes (raw collapsed stacks), started and stopped together."""

    def __init__(self, targets: dict[str, int], seconds: float, out_dir: Path, rate: int = 100) -> None:
        self.seconds = seconds
        self.rate = rate
        self.out_dir = out_dir
        self.targets = targets
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    @staticmethod
    def binary() -> str | None:
        local = Path(sys.executable).parent / "py-spy"
        return str(local) if local.exists() else shutil.which("py-spy")

    def start(self) -> bool:
        spy = self.binary()
        if spy is None:
            say("--profile: py-spy is not installed (it is in the test extras: bash scripts/setup.sh)")
            return False
        self.out_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for name, pid in self.targets.items():
            out = self.out_dir / f"profile-{stamp}-{name}.txt"
            cmd = [spy, "record", "--pid", str(pid), "--duration", str(int(self.seconds)), "--rate", str(self.rate),
                   "--format", "raw", "--nonblocking", "--output", str(out)]
            self.procs[name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out)
        _LIVE_PROFILERS.add(self)
        return True

    def finish(self, top: int = 12) -> None:
        for name, (proc, out) in self.procs.items():
            try:
                log_text = proc.communicate(timeout=self.seconds + 60)[0].decode(errors="replace")
            except subprocess.TimeoutExpired:
                proc.kill()
                log_text = proc.communicate()[0].decode(errors="replace")
            if not out.exists():
                say(f"profile of {name}: py-spy wrote nothing: {log_text.strip()[-300:]}")
                continue
            print(summarize_profile(out, name, self.seconds, self.rate, top))
        self.procs = {}
        _LIVE_PROFILERS.discard(self)

    def abort(self) -> None:
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.procs = {}
        _LIVE_PROFILERS.discard(self)


_LINE = re.compile(r":\d+\)$")
# frames every stack goes through: not worth a line in the inclusive list
_PLUMBING = ("_bootstrap", "Thread._bootstrap", "run (threading.py", "Thread.run (threading.py", "<module>",
             "_run_module_as_main", "_run_code", "child_main (")


def _frame(raw: str) -> str:
    """``func (path/file.py:123)`` -> ``func (file.py)``: functions, not lines."""
    name, _, where = raw.partition(" (")
    where = _LINE.sub(")", "(" + where) if where else ""
    where = where.strip("()")
    parts = where.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else where
    return f"{name} ({short})" if short else name


def summarize_profile(path: Path, name: str, seconds: float, rate: int, top: int = 12) -> str:
    """Top functions by own samples and by inclusive samples, and CPU by thread entry point."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
        entry = "main thread"
        for i, f in enumerate(frames):
            if f.startswith(("run (threading.py", "Thread.run (threading.py")) and i + 1 < len(frames):
                entry = f"thread {frames[i + 1]}"
                break
        threads[entry] += count
    if total == 0:
        return f"profile of {name}: no samples (the process was idle) -- raw stacks: {path}"
    busy = total / (seconds * rate)
    out = [f"profile of {name}: {total} samples over {seconds:.0f} s at {rate} Hz "
           f"(on average {busy:.2f} threads on a CPU or waiting for the GIL) -- raw stacks: {path}",
           "  by thread (entry function):"]
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in threads.most_common(6)]
    out.append("  own time (the function itself):")
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in own.most_common(top)]
    out.append("  inclusive (the function and what it calls):")
    out += [f"    {100 * c / total:5.1f}%  {f}" for f, c in incl.most_common(top + 6)
            if not f.startswith(_PLUMBING)][:top]
    return "\n".join(out)


# ---------------------------------------------------------------------- Kafka's tools


class Tools:
    """Runs Kafka's Java tools on the host JRE (default) or inside a broker container."""

    def __init__(self, cluster: Cluster, kafka_version: str, where: str, scratch: Path) -> None:
        self.cluster = cluster
        self.where = where
        self.bootstrap = ",".join(f"{b.ip}:9092" for b in cluster.brokers)
        self.heap = "-Xmx512m"
        if where == "host":
            libs = kafka_jars(kafka_version)
            log_file = scratch / ("tools-log4j2.properties" if uses_log4j2(kafka_version) else "tools-log4j.properties")
            log_file.write_text(
                "rootLogger.level = warn\nrootLogger.appenderRef.err.ref = ERR\nappender.err.type = Console\n"
                "appender.err.name = ERR\nappender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n"
                "appender.err.layout.pattern = %m%n\n" if uses_log4j2(kafka_version) else
                "log4j.rootLogger=WARN, err\nlog4j.appender.err=org.apache.log4j.ConsoleAppender\n"
                "log4j.appender.err.Target=System.err\nlog4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
                "log4j.appender.err.layout.ConversionPattern=%m%n\n")
            self.prefix = ["java", self.heap, "-cp", f"{libs}/*", f"-Dlog4j.configuration=file:{log_file}",
                           f"-Dlog4j2.configurationFile={log_file}"]
        else:
            container = cluster.brokers[0].container.name
            self.prefix = ["docker", "exec", container, "java", self.heap, "-cp", TOOLS_IN_CONTAINER_LIBS]

    @property
    def where_text(self) -> str:
        if self.where == "host":
            return "on the host JRE (where the kchaos clients run)"
        return (f"inside {self.cluster.brokers[0].name}'s container: it shares that broker's CPU, "
                "and its CPU is counted with the cluster's")

    def run(self, main_class: str, args: list[str], timeout_s: float) -> str:
        cmd = [*self.prefix, main_class, *args]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"{main_class} exited with {proc.returncode}: {(err or out).strip()[-500:]}")
        return out

    def producer_perf(self, topic: str, records: int, acks: str, props: dict[str, str]) -> dict[str, float]:
        producer_props = [f"bootstrap.servers={self.bootstrap}", f"acks={acks}",
                          *(f"{k}={v}" for k, v in props.items())]
        out = self.run("org.apache.kafka.tools.ProducerPerformance",
                       ["--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_BYTES),
                        "--throughput", "-1", "--producer-props", *producer_props], timeout_s=1800)
        summary = [line for line in out.splitlines() if "records sent" in line and "50th" in line]
        if not summary:
            raise RuntimeError(f"no summary line from ProducerPerformance: {out.strip()[-500:]}")
        m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
                      r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th", summary[-1])
        if m is None:
            raise RuntimeError(f"cannot parse ProducerPerformance's summary: {summary[-1]}")
        return {"records": int(m.group(1)), "rate": float(m.group(2)), "avg_ms": float(m.group(4)),
                "p50_ms": float(m.group(6)), "p99_ms": float(m.group(8)), "line": summary[-1]}  # type: ignore[dict-item]

    def consumer_perf(self, topic: str, messages: int) -> dict[str, float]:
        out = self.run("org.apache.kafka.tools.ConsumerPerformance",
                       ["--bootstrap-server", self.bootstrap, "--topic", topic, "--messages", str(messages),
                        "--timeout", "60000", "--group", f"perf-{uuid.uuid4().hex[:8]}"], timeout_s=1800)
        lines = [line for line in out.splitlines() if line.strip()]
        header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
        names = [x.strip() for x in lines[header].split(",")]
        values = [x.strip() for x in lines[header + 1].split(",")]
        row = dict(zip(names, values))
        return {"messages": int(row["data.consumed.in.nMsg"]), "rate": float(row["nMsg.sec"]),
                "fetch_rate": float(row["fetch.nMsg.sec"]), "rebalance_ms": float(row["rebalance.time.ms"]),
                "fetch_ms": float(row["fetch.time.ms"])}


# ---------------------------------------------------------------------- kchaos


def run_kchaos_producers(cluster: Cluster, topic: str, config: dict[str, Any], producers: int, seconds: float,
                         run_dir: Path, client: Library, profile_s: float = 0) -> dict[str, Any]:
    """The trial's producer processes of ``client``, unbounded, for ``seconds``; rates counted from sends.jsonl."""
    history = new_history(run_dir)
    writers = producer_clients(cluster, topic, history, producers, config, client)
    workload = Workload(list(writers))
    profiler = None
    try:
        workload.start()
        meter = CpuMeter(container_ids(cluster))
        started = time.monotonic()
        if profile_s > 0:
            time.sleep(min(3.0, seconds / 4))  # past the clients' warm-up
            targets = {"harness": os.getpid()}
            if client == "librdkafka" and writers[0].pid is not None:  # py-spy reads no JVM
                targets["producer-p0"] = writers[0].pid
            profiler = Profiler(targets, profile_s, BENCH_OUT)
            if not profiler.start():
                profiler = None
        while time.monotonic() - started < seconds:
            time.sleep(0.2)
        load_s = time.monotonic() - started
        stop_all(writers)
        cpu = meter.stop()
    except BaseException:
        if profiler is not None:
            profiler.abort()
        raise
    finally:
        workload.abort()
        history.close()
    ok, total, span = count_acked(run_dir / "history" / "sends.jsonl")
    identity = writers[0].identity
    return {"ok": ok, "sends": total, "span_s": span, "load_s": load_s, "rate": ok / span if span else 0.0,
            "cpu": cpu, "failures": workload.failures, "profiler": profiler,
            "settings": None if identity is None else identity.settings, "load": os.getloadavg()[0]}


def run_kchaos_consumer(cluster: Cluster, topic: str, messages: int, run_dir: Path, timeout_s: float,
                        client: Library) -> dict[str, Any]:
    """One application consumer of ``client`` (a ConsumerClient process, fresh group, its client's defaults) until
    ``messages`` live reads are recorded."""
    history = new_history(run_dir)
    consumer = ConsumerClient("c0", cluster.bootstrap_servers, topic, f"kchaos-bench-{uuid.uuid4().hex[:8]}", "auto",
                              {}, history.reads, history.clock, client=client,
                              kafka_version=cluster.spec.kafka_version)
    workload = Workload([consumer])
    try:
        meter = CpuMeter(container_ids(cluster))
        workload.start()
        started = time.monotonic()
        while consumer.count < messages and time.monotonic() - started < timeout_s:
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        count = consumer.count
        stop_all([consumer])
        cpu = meter.stop()
    finally:
        workload.abort()
        history.close()
    first, last = _read_span(run_dir / "history" / "reads.jsonl")
    return {"reads": count, "elapsed_s": elapsed, "rate": count / elapsed if elapsed else 0.0,
            "fetch_rate": count / (last - first) if last > first else 0.0, "cpu": cpu, "failures": workload.failures,
            "load": os.getloadavg()[0]}


def run_kchaos_read_back(cluster: Cluster, topic: str, run_dir: Path, client: Library) -> dict[str, Any]:
    """The harness's final read-back by ``client`` (librdkafka in this process, java in a reader process),
    recording every record as a ``final`` read."""
    history = new_history(run_dir)
    try:
        meter = CpuMeter(container_ids(cluster))
        started = time.monotonic()
        complete = read_back(cluster.bootstrap_servers, topic, PARTITIONS, history, timeout_s=1800, client=client,
                             kafka_version=cluster.spec.kafka_version)
        elapsed = time.monotonic() - started
        reads = history.reads.lines
        cpu = meter.stop()
    finally:
        history.close()
    first, last = _read_span(run_dir / "history" / "reads.jsonl")
    return {"reads": reads, "complete": complete, "elapsed_s": elapsed, "rate": reads / elapsed if elapsed else 0.0,
            "fetch_rate": reads / (last - first) if last > first else 0.0, "cpu": cpu, "load": os.getloadavg()[0]}


def _read_span(reads: Path) -> tuple[float, float]:
    """Seconds of the first and last time_ns in a reads.jsonl."""
    pattern = re.compile(rb'"time_ns":(\d+)')
    first, last = float("inf"), 0.0
    with reads.open("rb") as f:
        for line in f:
            m = pattern.search(line)
            if m:
                t = int(m.group(1)) / 1e9
                first, last = min(first, t), max(last, t)
    return (first, last) if last else (0.0, 0.0)


# ---------------------------------------------------------------------- the benchmark


SAME_ON_BOTH_SIDES = {"max.in.flight.requests.per.connection": "5"}


def parse_config(pairs: list[str]) -> dict[str, str]:
    """The producer settings both sides get: SAME_ON_BOTH_SIDES, then ``--producer-config`` pairs."""
    out = dict(SAME_ON_BOTH_SIDES)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--producer-config wants KEY=VALUE, not {pair!r}")
        out[key] = value
    return out


def settings_text(settings: dict[str, str] | None) -> str:
    return "?" if settings is None else ", ".join(f"{k}={v}" for k, v in settings.items() if v not in ("", "None"))


def tool_settings(kafka_version: str, config: dict[str, str]) -> str:
    """What the kafka-clients of ProducerPerformance's version resolve its properties to (durability settings)."""
    try:
        return settings_text(check_config(kafka_version, "producer", config).effective)
    except WorkloadError as e:
        return f"? ({e})"


def table_row(what: str, tool: str, tool_rate: float, tool_load: float,
              figures: list[tuple[str, float, float]]) -> str:
    """A summary line: the tool's records/s, then each client's (name, rate, load), its ratio to the tool, and
    java's to librdkafka's when both ran; each figure with the 1-minute load average it was measured under."""
    out = f"{what:<19} {tool} {tool_rate:>10,.0f}/s [load {tool_load:.1f}]"
    for client, rate, load_1 in figures:
        ratio = rate / tool_rate if tool_rate else 0.0
        out += f"  {client} {rate:>10,.0f}/s ratio {ratio:.2f} [load {load_1:.1f}]"
    rates = {client: rate for client, rate, _ in figures}
    if rates.get("librdkafka") and "java" in rates:
        out += f"  java/librdkafka {rates['java'] / rates['librdkafka']:.2f}"
    return out


@dataclass
class Round:
    """One ProducerPerformance run and the kchaos clients' for as long: records/s each, the summary line."""

    tool_rate: float
    rates: dict[str, float]
    row: str
    kept_topic: str | None


def producer_round(cluster: Cluster, tools: Tools, acks: str, extra: dict[str, str], args: argparse.Namespace,
                   clients: list[Library], scratch: Path, keep_topic: bool, label: str, profile_s: float) -> Round:
    """ProducerPerformance with ``acks``, then each client's kchaos producers for as long, each on a fresh topic;
    ``keep_topic``: the first client's topic stays (the consumers read it), else every topic is deleted;
    ``profile_s``: py-spy the harness and a producer for as long during each client's run (0: not)."""
    config = {"acks": acks, **extra}
    pp_topic = f"bench-pp-acks{acks}"
    create_topic(cluster, TopicSpec(pp_topic, PARTITIONS, 3, 2))
    meter = CpuMeter(container_ids(cluster))
    pp = tools.producer_perf(pp_topic, args.records, acks, extra)
    pp_cpu = meter.stop()
    pp_load = os.getloadavg()[0]
    delete_topic(cluster, pp_topic)
    say(f"{label}acks={acks} ProducerPerformance: {pp['rate']:,.0f} records/s "
        f"({pp['records']:,} in {pp_cpu['wall_s']:.1f} s wall incl. JVM start; "
        f"avg {pp['avg_ms']:.0f} ms, p50 {pp['p50_ms']:.0f} ms, p99 {pp['p99_ms']:.0f} ms)")
    say(f"    settings: {tool_settings(args.kafka_version, config)}")
    say(f"    {cpu_text(pp_cpu, 'bench', 'ProducerPerformance JVM')}")
    seconds = args.seconds or max(10.0, round(pp_cpu["wall_s"] or 10.0))  # type: ignore[arg-type]
    seconds = max(seconds, profile_s + 5) if profile_s else seconds
    figures: list[tuple[str, float, float]] = []
    verdicts: list[str] = []
    kept = None
    for client in clients:
        kc_topic, run_dir = f"bench-kc-acks{acks}-{client}-{time.time_ns()}", scratch / f"run-acks{acks}-{client}"
        create_topic(cluster, TopicSpec(kc_topic, PARTITIONS, 3, 2))
        kc = run_kchaos_producers(cluster, kc_topic, config, args.producers, seconds, run_dir, client, profile_s)
        ratio = kc["rate"] / pp["rate"] if pp["rate"] else 0.0
        say(f"{label}acks={acks} kchaos {client} (recorded): {kc['rate']:,.0f} acked sends/s ({kc['ok']:,} ok of "
            f"{kc['sends']:,} sends in sends.jsonl over {kc['span_s']:.1f} s, first invoke to last ack; "
            f"load {kc['load_s']:.0f} s)")
        say(f"    settings: {settings_text(kc['settings'])}")
        say(f"    {cpu_text(kc['cpu'], 'harness', f'{args.producers} {client} producer processes')}")
        if kc["failures"]:
            say(f"    workload failures: {kc['failures']}")
        say(f"{label}acks={acks} ratio kchaos {client} / ProducerPerformance = {ratio:.2f}")
        figures.append((client, kc["rate"], kc["load"]))
        verdicts.append(f"{client} {'met' if ratio >= TARGET_RATIO else 'NOT met'}")
        if kc["profiler"] is not None:
            kc["profiler"].finish()
        shutil.rmtree(run_dir, ignore_errors=True)
        if keep_topic and kept is None:
            kept = kc_topic  # what the consumers read: records as kchaos writes them
        else:
            delete_topic(cluster, kc_topic)
    row = table_row(f"{label}producer acks={acks}", "ProducerPerformance", pp["rate"], pp_load, figures)
    return Round(pp["rate"], {c: r for c, r, _ in figures}, f"{row}  (target >= {TARGET_RATIO}: {', '.join(verdicts)})",
                 kept)


def spread(values: list[float], fmt: str) -> str:
    """The mean and (range) of repeated figures, each in ``fmt``."""
    return f"{fmt.format(statistics.fmean(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def spread_row(acks: str, rounds: list[Round], clients: list[Library]) -> str:
    """Mean and range over the repetitions: ProducerPerformance's records/s, each client's, and their ratios."""
    out = (f"producer acks={acks}, {len(rounds)} runs: "
           f"ProducerPerformance {spread([r.tool_rate for r in rounds], '{:,.0f}')}/s")
    for client in clients:
        rates = [r.rates[client] for r in rounds]
        ratios = [r.rates[client] / r.tool_rate if r.tool_rate else 0.0 for r in rounds]
        out += f"; {client} {spread(rates, '{:,.0f}')}/s, ratio {spread(ratios, '{:.2f}')}"
    return out + f"  [{load()}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3_000_000,
                        help="records ProducerPerformance writes (default 3M)")
    parser.add_argument("--seconds", type=float, help="kchaos load time (default: as long as ProducerPerformance took)")
    parser.add_argument("--producers", type=int, default=2, help="kchaos producer processes (scenario default 2)")
    parser.add_argument("--acks", nargs="+", default=["all", "1"], choices=["all", "1"])
    parser.add_argument("--clients", nargs="+", default=list(LIBRARIES), choices=LIBRARIES,
                        help="the kchaos workload's clients to measure, each against the same tool figures "
                             "(default both)")
    parser.add_argument("--metadata", choices=("zookeeper", "kraft"), default="zookeeper")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--tools-in", choices=("host", "broker"), default="host",
                        help="run Kafka's tools on the host JRE (default) or in broker1's container")
    parser.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a producer setting for both ProducerPerformance and the kchaos producers")
    parser.add_argument("--repeat", type=int, default=1, help="run each acks' producer comparison, and the consumer "
                                                              "comparison, this many times and print the mean and "
                                                              "range")
    parser.add_argument("--no-consumers", action="store_true", help="skip the consumer comparison")
    parser.add_argument("--profile", type=float, default=0, metavar="SECONDS",
                        help="py-spy the harness (and a librdkafka producer p0) for SECONDS during each client's "
                             "kchaos run (the first repetition of each acks)")
    parser.add_argument("--dir", type=Path, help="where the temporary run directory goes (default: the system's temp)")
    args = parser.parse_args(argv)
    quiet_logging()
    install_termination_handlers()
    extra = parse_config(args.producer_config)
    clients: list[Library] = list(dict.fromkeys(args.clients))
    if "java" in clients:
        try:
            say(f"Java workload built against kafka-clients {args.kafka_version}: {ensure_built(args.kafka_version)}")
        except JavaBuildError as e:
            raise SystemExit(f"producer_vs_kafka: {e}") from None

    scratch = Path(tempfile.mkdtemp(prefix="kchaos-bench-pvk-", dir=args.dir))
    say(f"producer_vs_kafka: {args.metadata}, Kafka {args.kafka_version}, {args.records:,} records for "
        f"ProducerPerformance, {args.producers} kchaos producers per client ({', '.join(clients)}), "
        f"{RECORD_BYTES}-byte values, "
        f"topics of {PARTITIONS} partitions RF 3 min.insync 2; scratch {scratch}")
    cluster = None
    rows: list[str] = []
    try:
        cluster = start_cluster(args.metadata, args.kafka_version, scratch / "cluster")
        tools = Tools(cluster, args.kafka_version, args.tools_in, scratch)
        say(f"Kafka's tools run {tools.where_text}")
        same = ", ".join(f"{k}={v}" for k, v in extra.items())
        say(f"ProducerPerformance and every kchaos producer: acks and {same}; otherwise their client's defaults "
            "(each one's resolved settings follow its figure)")
        for acks in args.acks:
            rounds: list[Round] = []
            for rep in range(1, args.repeat + 1):
                keep = acks == "all" and not args.no_consumers and rep == 1
                rounds.append(producer_round(cluster, tools, acks, extra, args, clients, scratch, keep,
                                             f"[{rep}/{args.repeat}] " if args.repeat > 1 else "",
                                             args.profile if rep == 1 else 0))
                rows.append(rounds[-1].row)
            if args.repeat > 1:
                rows.append(spread_row(acks, rounds, clients))
            read_topic = rounds[0].kept_topic
            if read_topic is not None:
                records = topic_records(cluster, read_topic)
                consumer_rounds = [consumers(cluster, tools, read_topic, records, scratch, clients,
                                             f"[{rep}/{args.repeat}] " if args.repeat > 1 else "")
                                   for rep in range(1, args.repeat + 1)]
                rows += [row for r in consumer_rounds for row in r.rows]
                if args.repeat > 1:
                    rows.append(consumer_spread_row(consumer_rounds, clients))
                delete_topic(cluster, read_topic)
        if not args.no_consumers and "all" not in args.acks:
            say("consumer comparison skipped: it reads the topic of the acks=all kchaos run")
        print()
        say("summary")
        for row in rows:
            print(f"  {row}")
        return 0
    finally:
        abort_profilers()
        if cluster is not None:
            started = time.monotonic()
            cluster.teardown()
            say(f"cluster {cluster.cluster_id} torn down in {time.monotonic() - started:.1f} s")
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass
class ConsumerRound:
    """One ConsumerPerformance run and each client's consumers on the same topic: records/s counting fetching
    only (ConsumerPerformance's fetch.nMsg.sec; kchaos's first to last read), and the summary lines."""

    tool_fetch: float
    live: dict[str, float]
    back: dict[str, float]
    rows: list[str]


def consumers(cluster: Cluster, tools: Tools, topic: str, messages: int, scratch: Path,
              clients: list[Library], label: str = "") -> ConsumerRound:
    """ConsumerPerformance, then each client's application consumer and read-back, on ``topic``."""
    meter = CpuMeter(container_ids(cluster))
    cp = tools.consumer_perf(topic, messages)
    cp_cpu = meter.stop()
    cp_load = os.getloadavg()[0]
    say(f"{label}ConsumerPerformance: {cp['rate']:,.0f} records/s incl. group join ({cp['messages']:,} records; "
        f"rebalance {cp['rebalance_ms'] / 1000:.1f} s), {cp['fetch_rate']:,.0f} records/s fetching")
    say(f"    {cpu_text(cp_cpu, 'bench', 'ConsumerPerformance JVM')}")
    live_figures: list[tuple[str, float, float]] = []
    back_figures: list[tuple[str, float, float]] = []
    live_fetch: list[tuple[str, float, float]] = []
    back_fetch: list[tuple[str, float, float]] = []
    for client in clients:
        live = run_kchaos_consumer(cluster, topic, messages, scratch / "run-live",
                                   timeout_s=max(120.0, messages / 5000), client=client)
        shutil.rmtree(scratch / "run-live", ignore_errors=True)
        say(f"{label}kchaos {client} application consumer (live reads recorded): {live['rate']:,.0f} records/s incl. "
            f"process start and group join ({live['reads']:,} reads in {live['elapsed_s']:.1f} s), "
            f"{live['fetch_rate']:,.0f} records/s first to last read")
        say(f"    {cpu_text(live['cpu'], 'harness', f'{client} consumer process')}")
        if live["failures"]:
            say(f"    workload failures: {live['failures']}")
        back = run_kchaos_read_back(cluster, topic, scratch / "run-final", client)
        shutil.rmtree(scratch / "run-final", ignore_errors=True)
        where = "in the harness" if client == "librdkafka" else "in a reader process, its start included"
        say(f"{label}kchaos {client} final read-back (every record recorded, {where}): {back['rate']:,.0f} "
            f"records/s ({back['reads']:,} reads in {back['elapsed_s']:.1f} s, complete={back['complete']}), "
            f"{back['fetch_rate']:,.0f} records/s first to last read")
        say(f"    {cpu_text(back['cpu'], 'harness (read-back)', 'reader process' if client == 'java' else 'children')}")
        r_live = live["rate"] / cp["rate"] if cp["rate"] else 0.0
        r_back = back["rate"] / cp["rate"] if cp["rate"] else 0.0
        f_live = live["fetch_rate"] / cp["fetch_rate"] if cp["fetch_rate"] else 0.0
        f_back = back["fetch_rate"] / cp["fetch_rate"] if cp["fetch_rate"] else 0.0
        say(f"{label}{client} consumer ratios vs ConsumerPerformance: incl. join live {r_live:.2f}, read-back "
            f"{r_back:.2f}; fetching only live {f_live:.2f}, read-back {f_back:.2f}")
        live_figures.append((client, live["rate"], live["load"]))
        back_figures.append((client, back["rate"], back["load"]))
        live_fetch.append((client, live["fetch_rate"], live["load"]))
        back_fetch.append((client, back["fetch_rate"], back["load"]))
    target = f"  (target fetching only >= {CONSUMER_TARGET})"
    rows = [table_row(f"{label}consumer live", "ConsumerPerformance", cp["rate"], cp_load, live_figures),
            table_row(f"{label}consumer read-back", "ConsumerPerformance", cp["rate"], cp_load, back_figures),
            table_row(f"{label}live, fetching", "ConsumerPerformance", cp["fetch_rate"], cp_load, live_fetch) + target,
            table_row(f"{label}read-back, fetching", "ConsumerPerformance", cp["fetch_rate"], cp_load, back_fetch)
            + target]
    return ConsumerRound(cp["fetch_rate"], {c: r for c, r, _ in live_fetch}, {c: r for c, r, _ in back_fetch}, rows)


def consumer_spread_row(rounds: list[ConsumerRound], clients: list[Library]) -> str:
    """Mean and range over the repetitions, fetching only: ConsumerPerformance's records/s, then each client's
    live consumer and read-back with their ratios to it, against issue #21's target."""
    out = (f"consumers, {len(rounds)} runs, fetching only: ConsumerPerformance "
           f"{spread([r.tool_fetch for r in rounds], '{:,.0f}')}/s")
    for client in clients:
        for what, rates in (("live", [r.live[client] for r in rounds]),
                            ("read-back", [r.back[client] for r in rounds])):
            ratios = [rate / r.tool_fetch if r.tool_fetch else 0.0 for rate, r in zip(rates, rounds)]
            verdict = "met" if statistics.fmean(ratios) >= CONSUMER_TARGET else "NOT met"
            out += f"; {client} {what} {spread(rates, '{:,.0f}')}/s, ratio {spread(ratios, '{:.2f}')} ({verdict})"
    return out + f"  [{load()}]"


def run_main(main: Callable[[], int], script: str) -> None:
    """Exit with ``main()``'s code; Ctrl-C or SIGTERM (after main's own teardown) exits 130 in one line."""
    try:
        sys.exit(main())
    except (KeyboardInterrupt, Terminated) as e:
        print(f"{Path(script).name}: interrupted ({type(e).__name__} {e}); the cluster was torn down",
              file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    run_main(main, __file__)
