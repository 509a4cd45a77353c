"""librdkafka's fetch.queue.backoff.ms, measured both ways it matters: a consumer that keeps up, one that is slow.

    .venv/bin/python benchmarks/consumer_fetch.py [--seconds 10] [--backoffs 0 10 100 1000] [--repeat 2]
        [--floor [--split 2]]

Starts one cluster (3 brokers, ZooKeeper), fills a topic of 6 partitions
(RF 3) with the kchaos producers (librdkafka, acks=all, unbounded) for
``--seconds``, then per repetition: Kafka's ConsumerPerformance on it
(records/s fetching), and for each back-off a librdkafka consumer in this
process that reads the whole topic and formats every record as the
read-back does (``ReadLines.lines``): records/s from its first batch to
its last, and the CPU seconds of the process (librdkafka's threads
included) and of its main thread. Then, per back-off, a slow application:
a consumer in a group that takes 500 records a second once its queues are
full, for 10 s: the CPU seconds the process spent meanwhile. librdkafka
pauses a partition's fetching for fetch.queue.backoff.ms whenever its local
queue is full (queued.min.messages, 100k records); workloads/consumer.py's
FETCH_BACKOFF is chosen from these figures.

``--floor`` measures instead what any Python consumer that records each
record must at least spend, with the read-back's settings (FETCH_BACKOFF,
READ_BACK_BATCH): per repetition, beside ConsumerPerformance, the same
reading loop doing less and less with each batch: nothing (``consume``:
the client's own cost, Message objects included), taking each record's
partition, offset and value (``fields``: what any history line needs), and
the read-back's formatting (``format``, ``ReadLines.lines``), the same
formatting in ``--split`` processes at once (default 2), each reading its
share of the partitions, then the read-back itself, recording every record
into a run directory's history (``read-back``, ``workloads.consumer.read_back``:
records/s from the first read's time to the last, as producer_vs_kafka.py
counts it). Issue #21
asks a recording consumer for 0.5 of ConsumerPerformance's fetching rate;
the ratio of each loop is printed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from producer_vs_kafka import (PARTITIONS, Tools, quiet_logging, run_kchaos_producers,  # noqa: E402
                               run_kchaos_read_back, run_main, say, start_cluster, topic_records)

from clusters.cluster import Cluster  # noqa: E402
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION  # noqa: E402
from clusters.spec import TopicSpec  # noqa: E402
from clusters.topics import create_topic  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition  # noqa: E402
from harness.errors import install_termination_handlers  # noqa: E402
from workloads.consumer import FETCH_BACKOFF, READ_BACK_BATCH, ReadLines  # noqa: E402
from workloads.history import RDKAFKA_LOG, RunClock  # noqa: E402

TOPIC = "bench-fetch"


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class Reading:
    """One consumer's read of its partitions: records handled, its first and last batch (monotonic seconds, one
    clock for every process) and the CPU seconds of its process and main thread."""

    records: int
    first: float
    last: float
    cpu_s: float
    thread_s: float

    @property
    def rate(self) -> float:
        return self.records / (self.last - self.first) if self.last > self.first else 0.0

    def text(self) -> str:
        return (f"{self.rate:,.0f} records/s ({self.records:,} in {self.last - self.first:.2f} s); CPU s: process "
                f"{self.cpu_s:.2f}, main thread {self.thread_s:.2f}")


def keeping_up(bootstrap: str, backoff: int) -> str:
    """Read the whole topic as the read-back does, with this back-off: the rate and CPU figures, as text."""
    return read_all(bootstrap, {"fetch.queue.backoff.ms": backoff}, formatter()).text()


def formatter() -> Callable[[list[Message]], int]:
    """The read-back's work a batch: every record's reads.jsonl line (ReadLines.lines)."""
    lines, clock = ReadLines("final-reader", None, "final", TOPIC, "read_uncommitted"), RunClock()
    high = {p: 1 << 62 for p in range(PARTITIONS)}
    return lambda msgs: len(lines.lines(msgs, clock.now_ns(), high))


def fields(msgs: list[Message]) -> int:
    """The least a history line needs of each record: partition, offset and value, taken and dropped."""
    return len([(m.partition(), m.offset(), m.value()) for m in msgs if m.error() is None])


FLOOR_WORK: dict[str, Callable[[], Callable[[list[Message]], int]]] = {
    "consume": lambda: len, "fields": lambda: fields, "format": formatter}


def read_all(bootstrap: str, settings: dict[str, object], work: Callable[[list[Message]], int],
             partitions: Sequence[int] = range(PARTITIONS)) -> Reading:
    """Read ``partitions`` from the beginning to their high watermarks, ``work`` on each batch."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, **settings}, logger=RDKAFKA_LOG)
    try:
        records = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)
            records += high - low
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in partitions])
        count, first, last, cpu0, thread0 = 0, 0.0, 0.0, process_cpu_s(), time.thread_time()
        deadline = time.monotonic() + 300
        while count < records and time.monotonic() < deadline:
            msgs = consumer.consume(READ_BACK_BATCH, timeout=1)
            if msgs:
                first, last = first or time.monotonic(), time.monotonic()
            count += work(msgs)
        return Reading(count, first, last, process_cpu_s() - cpu0, time.thread_time() - thread0)
    finally:
        consumer.close()


def format_partitions(bootstrap: str, partitions: list[int]) -> Reading:
    """A process of its own: ``partitions`` read and formatted as the read-back does."""
    return read_all(bootstrap, FETCH_BACKOFF, formatter(), partitions)


def split(bootstrap: str, processes: int) -> Reading:
    """The read-back's formatting loop in ``processes`` processes at once, the partitions dealt out among them:
    their records over the span from the first one's first batch to the last one's last."""
    shares = [list(range(PARTITIONS))[i::processes] for i in range(processes)]
    with mp.get_context("spawn").Pool(processes) as pool:
        readings = pool.starmap(format_partitions, [(bootstrap, share) for share in shares])
    return Reading(sum(r.records for r in readings), min(r.first for r in readings),
                   max(r.last for r in readings), sum(r.cpu_s for r in readings),
                   sum(r.thread_s for r in readings))


def floor(cluster: Cluster, fetch_rate: float, rep: int, scratch: Path, processes: list[int]) -> None:
    """Each loop of FLOOR_WORK with the read-back's settings, the formatting split over processes, then the
    read-back: each rate beside ConsumerPerformance's."""
    for name, make in FLOOR_WORK.items():
        reading = read_all(cluster.bootstrap_servers, FETCH_BACKOFF, make())
        say(f"[{rep}] {name}: {reading.text()}; ratio to ConsumerPerformance fetching "
            f"{reading.rate / fetch_rate:.2f}")
    for n in processes:
        reading = split(cluster.bootstrap_servers, n)
        say(f"[{rep}] format in {n} processes, partitions dealt out: {reading.text()}; ratio to "
            f"ConsumerPerformance fetching {reading.rate / fetch_rate:.2f}")
    back = run_kchaos_read_back(cluster, TOPIC, scratch / f"read-back-{rep}", "librdkafka")
    say(f"[{rep}] read-back: {back['fetch_rate']:,.0f} records/s ({back['reads']:,} recorded, first read to last); "
        f"ratio to ConsumerPerformance fetching {back['fetch_rate'] / fetch_rate:.2f}")


def slow_application(bootstrap: str, backoff: int, seconds: float = 10) -> str:
    """A group consumer taking 500 records a second once its queues are full: the CPU it spends meanwhile."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-slow-{backoff}-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": backoff}, logger=RDKAFKA_LOG)
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        while not consumer.consume(500, timeout=1) and time.monotonic() < deadline:
            pass
        time.sleep(3)  # its queues fill
        cpu0, started = process_cpu_s(), time.monotonic()
        while time.monotonic() - started < seconds:
            consumer.consume(500, timeout=1)
            time.sleep(1)
        return f"{process_cpu_s() - cpu0:.2f} CPU s in {time.monotonic() - started:.0f} s"
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10, help="how long the kchaos producers fill the topic")
    parser.add_argument("--backoffs", type=int, nargs="+", default=[0, 10, 100, 1000], metavar="MS")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--floor", action="store_true",
                        help="the least any recording consumer spends, not the back-offs")
    parser.add_argument("--split", type=int, nargs="*", default=[2], metavar="PROCESSES",
                        help="with --floor: the formatting loop also split over this many processes")
    args = parser.parse_args(argv)
    quiet_logging()
    install_termination_handlers()
    scratch = Path(tempfile.mkdtemp(prefix="kchaos-bench-fetch-"))
    cluster = None
    try:
        cluster = start_cluster("zookeeper", DEFAULT_KAFKA_VERSION, scratch / "cluster")
        create_topic(cluster, TopicSpec(TOPIC, PARTITIONS, 3, 2))
        run_kchaos_producers(cluster, TOPIC, {"acks": "all", "max.in.flight.requests.per.connection": 5}, 2,
                             args.seconds, scratch / "fill", "librdkafka")
        records = topic_records(cluster, TOPIC)
        say(f"topic {TOPIC}: {records:,} records written by the kchaos producers")
        tools = Tools(cluster, DEFAULT_KAFKA_VERSION, "host", scratch)
        for rep in range(1, args.repeat + 1):
            cp = tools.consumer_perf(TOPIC, records)
            say(f"[{rep}] ConsumerPerformance: {cp['fetch_rate']:,.0f} records/s fetching")
            if args.floor:
                floor(cluster, cp["fetch_rate"], rep, scratch, args.split)
            else:
                for backoff in args.backoffs:
                    say(f"[{rep}] fetch.queue.backoff.ms={backoff}, consume + format every record: "
                        f"{keeping_up(cluster.bootstrap_servers, backoff)}")
        if not args.floor:
            for backoff in args.backoffs:
                say(f"fetch.queue.backoff.ms={backoff}, a slow application (500 records/s): "
                    f"{slow_application(cluster.bootstrap_servers, backoff)}")
        return 0
    finally:
        if cluster is not None:
            cluster.teardown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    run_main(main, __file__)
