"""Peak memory of the harness (and of its producer processes) while it records N sends.

    .venv/bin/python benchmarks/harness_memory.py [--sends 10000000] [--consumers 0] [--profile 20]

Starts one cluster (3 brokers, ZooKeeper by default) and a topic of 6
partitions, RF 3 (acks=1, min.insync 1, retention capped so the brokers'
disks stay small), then runs the trial's workload code -- ProducerClient
processes (``--producers``, the scenario default 2) at unbounded rate with
acks=1, recording every send through History/HistoryWriter into a temporary
run directory -- until ``--sends`` sends are recorded. Every second it samples
VmRSS and VmHWM from /proc of this process (the harness side: reader threads,
pending-send tables, the history writers) and of each producer process.
It prints RSS at 10 %, 50 % and 100 % of the sends and the median of each
tenth (flat means streaming: the median over the last fifth of the sends
against the one over 10-30 %),
the peaks, and the verdict against the target: harness < 1 GB and flat.

The history is about 170 bytes a send (10M sends: ~1.7 GB); free space is
checked first and the run directory is deleted afterwards (``--keep`` keeps
it). ``--profile S`` samples the harness with py-spy for S seconds half-way.
The cluster is torn down on every exit (Ctrl-C and SIGTERM included).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from producer_vs_kafka import (BENCH_OUT, CpuMeter, Profiler, abort_profilers, container_ids,  # noqa: E402
                               count_acked, cpu_text, load, new_history, producer_clients, quiet_logging,
                               run_main, say, start_cluster, status_rss_kb)

from clusters.kafka_versions import DEFAULT_KAFKA_VERSION  # noqa: E402
from clusters.spec import TopicSpec  # noqa: E402
from clusters.topics import create_topic  # noqa: E402
from harness.errors import install_termination_handlers  # noqa: E402
from workloads.consumer import ConsumerClient  # noqa: E402
from workloads.history import History  # noqa: E402
from workloads.producer import ProducerClient  # noqa: E402
from workloads.workload import Workload, stop_all  # noqa: E402

BYTES_PER_SEND = 175          # one sends.jsonl line, measured
BYTES_PER_READ = 150          # one reads.jsonl line
TARGET_RSS_MB = 1024
FLAT_GROWTH_MB = 64           # flat: the median RSS over 80-100 % of the sends within this (or 15 %) of 10-30 %
TOPIC = "bench-memory"


@dataclass
class Sample:
    t: float
    sends: int
    reads: int
    harness_rss: int      # KiB
    harness_hwm: int
    children_rss: int     # summed over the producer processes
    children_hwm: int     # the largest producer's own peak
    pending: int          # sends invoked and not yet reported, over every producer


def mb(kib: int) -> str:
    return f"{kib / 1024:.0f} MB"


def check_disk(where: Path, sends: int, consumers: int) -> None:
    need = sends * (BYTES_PER_SEND + consumers * BYTES_PER_READ) + 4 * 1024 ** 3  # + the brokers' capped logs
    free = shutil.disk_usage(where).free
    say(f"disk: {free / 1024 ** 3:.1f} GB free at {where}, this run needs about {need / 1024 ** 3:.1f} GB")
    if free < need:
        raise SystemExit(f"not enough disk at {where}: {free / 1024 ** 3:.1f} GB free, "
                         f"{need / 1024 ** 3:.1f} GB needed; use --sends or --dir")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=10_000_000, help="sends to record (default 10M)")
    parser.add_argument("--producers", type=int, default=2, help="producer processes (scenario default 2)")
    parser.add_argument("--consumers", type=int, default=0,
                        help="application consumers recording live reads as well (default 0: sends only)")
    parser.add_argument("--acks", default="1", choices=("0", "1", "all"))
    parser.add_argument("--metadata", choices=("zookeeper", "kraft"), default="zookeeper")
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--max-minutes", type=float, default=90, help="give up after this long")
    parser.add_argument("--profile", type=float, default=0, metavar="SECONDS",
                        help="py-spy the harness (and producer p0) for SECONDS from 40 %% of the sends")
    parser.add_argument("--dir", type=Path, help="where the temporary run directory goes (default: the system's temp)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    quiet_logging()
    install_termination_handlers()

    base = args.dir or Path(tempfile.gettempdir())
    check_disk(base, args.sends, args.consumers)
    scratch = Path(tempfile.mkdtemp(prefix="kchaos-bench-mem-", dir=base))
    run_dir = scratch / "run"
    say(f"harness_memory: {args.sends:,} sends, {args.producers} producers acks={args.acks} unbounded, "
        f"{args.consumers} consumers, {args.metadata}; run directory {run_dir}")
    cluster = None
    workload = None
    history = None
    samples: list[Sample] = []
    stop_sampling = threading.Event()
    try:
        # retention capped and checked often: 10M sends would otherwise fill ~1.3 GB per broker
        cluster = start_cluster(args.metadata, args.kafka_version, scratch / "cluster", data_size_mb=4096,
                                broker_config={"log.retention.check.interval.ms": "10000"})
        create_topic(cluster, TopicSpec(TOPIC, 6, 3, 1, {"retention.bytes": str(128 << 20),
                                                         "segment.bytes": str(32 << 20)}))
        history = new_history(run_dir)
        consumers = [ConsumerClient(f"c{i}", cluster.bootstrap_servers, TOPIC, "bench-memory-app", "auto", {},
                                    history.reads, history.clock) for i in range(args.consumers)]
        producers = producer_clients(cluster, TOPIC, history, args.producers, {"acks": args.acks})
        workload = Workload([*consumers, *producers])
        workload.start()
        meter = CpuMeter(container_ids(cluster))
        started = time.monotonic()
        sampler = threading.Thread(target=sample_loop, args=(producers, history, started, samples, stop_sampling),
                                   name="rss-sampler", daemon=True)
        sampler.start()
        profiler = None
        next_report = 0.1
        while history.sends.lines < args.sends:
            if time.monotonic() - started > args.max_minutes * 60:
                say(f"gave up after {args.max_minutes:.0f} min with {history.sends.lines:,} sends recorded")
                break
            if workload.failures:
                raise RuntimeError(f"workload failures: {workload.failures}")
            done = history.sends.lines / args.sends
            if args.profile and profiler is None and done >= 0.4:
                profiler = Profiler({"harness": os.getpid(), "producer-p0": producers[0].pid or 0},
                                    args.profile, BENCH_OUT)
                if not profiler.start():
                    args.profile = 0
                    profiler = None
            if done >= next_report and samples:
                s = samples[-1]
                say(f"  {100 * done:3.0f}%  {s.sends:>11,} sends  {s.sends / max(s.t, 1e-9):>8,.0f}/s  "
                    f"harness RSS {mb(s.harness_rss)}  producers RSS {mb(s.children_rss)}  "
                    f"in flight {s.pending:,}")
                next_report += 0.1
            time.sleep(0.2)
        recorded_at = time.monotonic() - started
        samples.append(take_sample(producers, history, started))  # the 100 % point, before anything stops
        stop_all(producers)
        stop_all(consumers)
        cpu = meter.stop()
        stop_sampling.set()
        sampler.join()
        history.close()
        if profiler is not None:
            profiler.finish()
        report(samples, args.sends, recorded_at, cpu, args.producers)
        ok, total, span = count_acked(run_dir / "history" / "sends.jsonl")
        size = (run_dir / "history" / "sends.jsonl").stat().st_size
        say(f"sends.jsonl: {total:,} lines ({ok:,} ok), {size / 1024 ** 3:.2f} GB, {size / max(total, 1):.0f} bytes "
            f"a line; {ok / span if span else 0:,.0f} acked sends/s first invoke to last ack")
        return 0
    finally:
        stop_sampling.set()
        abort_profilers()
        if workload is not None:
            workload.abort()
        if history is not None:
            history.close()
        if cluster is not None:
            t = time.monotonic()
            cluster.teardown()
            say(f"cluster {cluster.cluster_id} torn down in {time.monotonic() - t:.1f} s")
        if args.keep:
            say(f"kept {run_dir}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
            say(f"deleted {scratch}")


def take_sample(producers: list[ProducerClient], history: History, started: float) -> Sample:
    rss, hwm = status_rss_kb(os.getpid())
    kids = [status_rss_kb(p.pid) for p in producers if p.pid is not None]
    return Sample(time.monotonic() - started, history.sends.lines, history.reads.lines, rss, hwm,
                  sum(k[0] for k in kids), max((k[1] for k in kids), default=0),
                  sum(len(p.pending) for p in producers))


def sample_loop(producers: list[ProducerClient], history: History, started: float, samples: list[Sample],
                stop: threading.Event) -> None:
    while not stop.is_set():
        samples.append(take_sample(producers, history, started))
        stop.wait(1.0)


def at_fraction(samples: list[Sample], sends: int, fraction: float) -> Sample:
    for s in samples:
        if s.sends >= fraction * sends:
            return s
    return samples[-1]


def report(samples: list[Sample], sends: int, elapsed: float, cpu: dict[str, float | None], producers: int) -> None:
    if not samples:
        say("no samples")
        return
    print()
    say(f"recorded {samples[-1].sends:,} sends in {elapsed:.0f} s ({samples[-1].sends / elapsed:,.0f} sends/s), "
        f"{len(samples)} samples a second apart")
    say(f"    {cpu_text(cpu, 'harness', f'{producers} producer processes')}")
    print(f"  {'point':>6} {'time':>7} {'sends':>12} {'harness RSS':>12} {'producers RSS':>14} {'in flight':>10}")
    points = [(f"{int(100 * f)}%", at_fraction(samples, sends, f)) for f in (0.1, 0.5, 1.0)]
    for label, s in points:
        print(f"  {label:>6} {s.t:6.0f}s {s.sends:>12,} {mb(s.harness_rss):>12} {mb(s.children_rss):>14} "
              f"{s.pending:>10,}  [{load()}]")
    peak_rss = max(s.harness_rss for s in samples)
    hwm = max(s.harness_hwm for s in samples)
    kid_peak = max(s.children_rss for s in samples)
    kid_hwm = max(s.children_hwm for s in samples)
    say(f"peak: harness RSS {mb(peak_rss)} sampled, VmHWM {mb(hwm)}; producers RSS {mb(kid_peak)} summed, "
        f"largest producer VmHWM {mb(kid_hwm)}")
    tenths = [window_rss(samples, sends, i / 10, (i + 1) / 10) for i in range(10)]
    say("harness RSS, median of each tenth of the sends: "
        + ", ".join("-" if t is None else f"{t / 1024:.0f}" for t in tenths) + " MB")
    first, last = window_rss(samples, sends, 0.1, 0.3), window_rss(samples, sends, 0.8, 1.01)
    growth = (last or 0) - (first or 0)
    flat = first is not None and last is not None and growth <= max(FLAT_GROWTH_MB * 1024, 0.15 * first)
    under = hwm < TARGET_RSS_MB * 1024
    say(f"target harness < {TARGET_RSS_MB} MB: {'met' if under else 'NOT met'} (VmHWM {mb(hwm)}); "
        f"flat: {'yes' if flat else 'NO'} ({growth / 1024:+.0f} MB, median of 80-100% against 10-30% of the "
        "sends: one sample swings with the writer's buffer)")


def window_rss(samples: list[Sample], sends: int, low: float, high: float) -> float | None:
    """The median harness RSS (KiB) of the samples taken while the sends were between these fractions."""
    inside = [s.harness_rss for s in samples if low * sends <= s.sends < high * sends]
    return statistics.median(inside) if inside else None


if __name__ == "__main__":
    run_main(main, __file__)
