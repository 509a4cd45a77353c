"""Members of a share group (KIP-932, "queues for Kafka"), as processes of their own.

A share consumer (``python -m workloads.share_consumer SPEC``, librdkafka's
preview share consumer; or the Java program's ``share_consumer`` role, on
kafka-clients' KafkaShareConsumer) models the application: it polls, says
each record it was given with the broker's delivery count (``V``), processes
the batch (``processing_ms``, holding the records it acquired), then
acknowledges each record explicitly, ACCEPT, RELEASE or REJECT by a seeded
choice (:func:`choose_ack`), commits the acknowledgements synchronously and
says what the client reported for each (``Q``). The harness writes both as
lines of shares.jsonl; checkers/shares.py judges them.

:class:`ShareLedger` is the harness's running view of which offsets the group
has settled (accepted, rejected, or archived at the delivery limit), so the
trial can wait for the group to finish the log before it stops the members.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from catalogue.history import SHARE_FIELDS
from rundir.records import ordered
from workloads.child import LineOut, child_main, say_hello
from workloads.client import ClientProcess, Library
from workloads.history import HistoryWriter, RunClock
from workloads.messages import decode
from workloads.protocol import Acknowledged, Delivered, acknowledged, delivered, parse

POLL_S = 0.5
COMMIT_TIMEOUT_S = 30
STOP_MARGIN_S = 30      # beyond one batch's processing, before a stopping member is killed
MASK64 = (1 << 64) - 1


def choose_ack(seed: int, partition: int, offset: int, delivery: int, release: float, reject: float) -> str:
    """The acknowledgement of one delivery: ``release`` with that probability, ``reject`` with its own, else
    ``accept``; a function of the run's seed and the delivery alone (splitmix64, as ShareConsumer.java's
    ``choose``), so a run with the same seed makes the same choice whichever member is given the record."""
    z = (seed * 0x9E3779B97F4A7C15 + partition * 0xBF58476D1CE4E5B9 + offset * 0x94D049BB133111EB + delivery) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    z ^= z >> 31
    u = (z >> 11) * 2.0 ** -53
    return "release" if u < release else "reject" if u < release + reject else "accept"


# ------------------------------------------------------------------ the process (librdkafka's preview client)


def share_consume(spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
    from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

    types = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}
    settings = {**spec["config"], "bootstrap.servers": spec["bootstrap_servers"], "group.id": spec["group"],
                "client.id": f"kchaos-{spec['name']}", "share.acknowledgement.mode": "explicit"}
    consumer = ShareConsumer(settings)
    try:
        consumer.subscribe([spec["topic"]])
        say_hello(out, {k: v for k, v in settings.items() if k != "bootstrap.servers"})
        while not stop.is_set():
            try:
                batch = [m for m in consumer.poll(POLL_S) if m.error() is None]
            except KafkaException as e:  # a broker gone or a request timed out: the client goes on, so does it
                if e.args[0].fatal():
                    raise
                continue
            if not batch:
                continue
            now = clock.now_ns()
            lines = []
            for m in batch:
                producer, seq = decode(m.value())
                lines.append(delivered(m.partition(), m.offset(), producer, seq, m.delivery_count() or 0, now))
            out.send(lines)
            if spec["processing_ms"] > 0:  # the application at work, holding what it acquired
                time.sleep(spec["processing_ms"] / 1000)
            acks = []
            for m in batch:
                ack = choose_ack(spec["seed"], m.partition(), m.offset(), m.delivery_count() or 0, spec["release"],
                                 spec["reject"])
                consumer.acknowledge(m, types[ack])
                acks.append((m, ack))
            failure, results = None, {}
            try:
                results = {tp.partition: error for tp, error in consumer.commit_sync(COMMIT_TIMEOUT_S).items()}
            except KafkaException as e:
                if e.args[0].fatal():
                    raise
                failure = e.args[0].name()
            done = clock.now_ns()
            lines = []
            for m, ack in acks:
                partition = m.partition()
                if failure is not None:
                    result, error = "fail", failure
                elif partition not in results:
                    result, error = "unknown", None
                elif results[partition] is None:
                    result, error = "ok", None
                else:
                    result, error = "fail", results[partition].args[0].name()
                lines.append(acknowledged(partition, m.offset(), m.delivery_count() or 0, ack, result, done, error))
            out.send(lines)
    finally:
        consumer.close()


# ------------------------------------------------------------------ the harness side


class ShareLedger:
    """Which offsets of each partition the share group has settled, over all its members: accepted or rejected
    (the client said ok), or released, expired or failed at the delivery limit, archived by the broker."""

    def __init__(self, delivery_limit: int) -> None:
        self.delivery_limit = delivery_limit
        self._settled: dict[int, set[int]] = {}
        self._lock = threading.Lock()

    def delivered(self, m: Delivered) -> None:
        """A delivery at the limit settles the record whatever comes of it: no member gets it again."""
        if m.delivery >= self.delivery_limit:
            self._settle(m.partition, m.offset)

    def acknowledged(self, m: Acknowledged) -> None:
        if m.result == "ok" and m.ack in ("accept", "reject"):
            self._settle(m.partition, m.offset)

    def _settle(self, partition: int, offset: int) -> None:
        with self._lock:
            self._settled.setdefault(partition, set()).add(offset)

    def behind(self, ends: dict[int, int]) -> int:
        """How many offsets below each partition's end (``ends``: partition -> high watermark) are not settled."""
        with self._lock:
            return sum(end - sum(1 for o in self._settled.get(p, ()) if o < end) for p, end in ends.items())


class ShareConsumerClient(ClientProcess):
    """One member of the share group; a restarted one joins the same group (s0, s0.1, ...)."""

    role = "share_consumer"
    module = "workloads.share_consumer"

    def __init__(self, name: str, bootstrap_servers: str, topic: str, group: str, config: dict[str, Any],
                 shares: HistoryWriter, clock: RunClock, ledger: ShareLedger, seed: int, release: float,
                 reject: float, processing_ms: float = 0, client: Library = "java",
                 kafka_version: str | None = None, client_version: str | None = None) -> None:
        super().__init__(name, clock, client, kafka_version, client_version)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.group = group
        self.config = config
        self.shares = shares
        self.ledger = ledger
        self.seed = seed
        self.release = release
        self.reject = reject
        self.processing_ms = processing_ms
        self.count = 0   # deliveries recorded, over every process of this member

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic, "group": self.group,
                "config": self.config, "seed": self.seed, "release": self.release, "reject": self.reject,
                "processing_ms": self.processing_ms}

    def stop(self, timeout_s: float | None = None) -> None:
        super().stop(self.processing_ms / 1000 + COMMIT_TIMEOUT_S + STOP_MARGIN_S if timeout_s is None else timeout_s)

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """``V`` and ``Q`` lines become shares.jsonl lines of this process; anything else but ``E`` is a
        ProtocolError."""
        records = []
        for line in lines:
            m = parse(line)
            if isinstance(m, Delivered):
                self.ledger.delivered(m)
                records.append(share_line("delivered", name, self.group, self.topic, m))
            elif isinstance(m, Acknowledged):
                self.ledger.acknowledged(m)
                records.append(share_line("acknowledged", name, self.group, self.topic, m))
        if records:
            self.shares.write_many(records)
            self.count += sum(1 for r in records if r["kind"] == "delivered")

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """What it acquired and never acknowledged comes back when its locks expire: the history says nothing
        of it until a member is given it again."""


def share_line(kind: str, member: str, group: str, topic: str, m: Delivered | Acknowledged) -> dict[str, Any]:
    """A shares.jsonl line, its fields in the catalogue's order."""
    return {"kind": kind, **ordered(SHARE_FIELDS[kind], {"member": member, "group": group, "topic": topic,
                                                         **m._asdict()})}


if __name__ == "__main__":
    child_main(share_consume)
