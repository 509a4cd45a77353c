"""A producer that writes sequence-numbered messages and records every outcome.

Each delivery report becomes one sends.jsonl line, in the spirit of Kafka's
VerifiableProducer:

* ``ok``   -- acknowledged, with partition and offset (offset null with acks=0);
* ``fail`` -- the client says the message was definitely not written;
* ``info`` -- anything else: timeouts, lost connections, retries that ran out.
  When in doubt, ``info``: a message that may have been written is never
  called failed. Sends still in flight when the run ends are ``info`` too.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from workloads.history import RDKAFKA_LOG, HistoryWriter, RunClock
from workloads.messages import encode
from workloads.worker import Worker

# Delivery errors that no earlier, possibly persisted attempt can precede: the
# message was refused as a whole. Anything else (timeouts, a topic or
# partition that metadata briefly lost, not-leader after retries) may follow
# an attempt that reached the log, so it is ``info``. A produce() call that
# raises never handed the message to the client at all: that is ``fail`` too.
DEFINITELY_NOT_WRITTEN = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._INVALID_ARG,
})


def outcome(error: KafkaError | None) -> str:
    """The send status a delivery report stands for: ok, fail or info."""
    if error is None:
        return "ok"
    return "fail" if error.code() in DEFINITELY_NOT_WRITTEN else "info"


@dataclass
class SendCounts:
    ok: int = 0
    fail: int = 0
    info: int = 0

    def add(self, status: str) -> None:
        setattr(self, status, getattr(self, status) + 1)


@dataclass
class ProducerWorker(Worker):
    """One producer thread: writes until stopped, at a target rate or as fast as it can."""

    name: str
    bootstrap_servers: str
    topic: str
    config: dict[str, Any]
    sends: HistoryWriter
    clock: RunClock
    rate: float | None = None          # messages per second; None means unbounded
    message_bytes: int = 100
    flush_timeout_s: float = 20        # how long stop() waits for outstanding reports
    counts: SendCounts = field(default_factory=SendCounts)
    _in_flight: dict[int, int] = field(default_factory=dict)   # seq -> invoke_ns
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, seq: int, status: str, invoke_ns: int, partition: int | None,
                offset: int | None, error: str | None) -> None:
        self.sends.write({"producer": self.name, "seq": seq, "topic": self.topic, "key": str(seq),
                          "partition": partition, "offset": offset, "status": status, "error": error,
                          "invoke_ns": invoke_ns, "complete_ns": self.clock.now_ns()})
        self.counts.add(status)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        seq = int(msg.key())
        with self._lock:
            invoke_ns = self._in_flight.pop(seq, None)
        if invoke_ns is None:  # already written as in flight at the end of the run
            return
        status = outcome(err)
        offset = msg.offset() if status == "ok" and msg.offset() is not None and msg.offset() >= 0 else None
        partition = msg.partition() if msg.partition() is not None and msg.partition() >= 0 else None
        self._record(seq, status, invoke_ns, partition, offset, None if err is None else err.name())

    def work(self) -> None:
        producer = Producer({**self.config, "bootstrap.servers": self.bootstrap_servers,
                             "client.id": f"kchaos-{self.name}"}, logger=RDKAFKA_LOG)
        seq = 0
        started = time.monotonic()
        while not self.stopping:
            if self.rate is not None:
                due = started + seq / self.rate
                delay = due - time.monotonic()
                if delay > 0:
                    producer.poll(min(delay, 0.1))
                    continue
            invoke_ns = self.clock.now_ns()
            with self._lock:
                self._in_flight[seq] = invoke_ns
            try:
                producer.produce(self.topic, key=str(seq).encode(),
                                 value=encode(self.name, seq, self.message_bytes), on_delivery=self._on_delivery)
            except BufferError:  # the local queue is full: not a send yet, wait for reports
                with self._lock:
                    self._in_flight.pop(seq, None)
                producer.poll(0.05)
                continue
            except KafkaException as e:  # refused before it entered the client's queue
                with self._lock:
                    self._in_flight.pop(seq, None)
                self._record(seq, "fail", invoke_ns, None, None, e.args[0].name())
            seq += 1
            producer.poll(0)
        producer.flush(self.flush_timeout_s)
        with self._lock:
            left, self._in_flight = self._in_flight, {}
        for left_seq, invoke_ns in sorted(left.items()):
            self._record(left_seq, "info", invoke_ns, None, None, "in flight at the end of the run")
