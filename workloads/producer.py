"""A producer that writes sequence-numbered messages, as a process of its own, and its harness-side handle.

Each delivery report becomes one sends.jsonl line, in the spirit of Kafka's
VerifiableProducer:

* ``ok``   -- acknowledged, with partition and offset (offset null with acks=0);
* ``fail`` -- the client says the message was definitely not written;
* ``info`` -- anything else: timeouts, lost connections, retries that ran out.
  When in doubt, ``info``: a message that may have been written is never
  called failed. Sends still in flight when the run ends are ``info`` too,
  and so is everything in flight in a producer process that was killed.

The process (``python -m workloads.producer SPEC``) announces each batch of
seqs (``I``) before handing it to produce(), then reports completions
(``S``) after each poll; :class:`ProducerClient` in the harness turns them
into history lines, so a SIGKILLed producer leaves nothing unaccounted for.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from workloads.child import LineOut, child_main, say_hello
from workloads.client import ClientProcess
from workloads.history import RDKAFKA_LOG, HistoryWriter, RunClock, json_line
from workloads.messages import encode
from workloads.pending import PendingSends
from workloads.protocol import (Invoked, Withdrawn, as_json_int, completed, completed_fields, invoked, parse,
                                withdrawn)

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

BATCH = 1000                    # seqs announced and produced per loop turn, at most
DEFAULT_QUEUE_MAX = 100_000     # librdkafka's queue.buffering.max.messages
STOP_MARGIN_S = 15              # beyond flush_timeout_s, before a stopping producer is killed
IN_FLIGHT_AT_END = "in flight at the end of the run"


def producer_settings(config: dict[str, Any], bootstrap_servers: str, name: str) -> dict[str, Any]:
    """The scenario's librdkafka settings plus what the harness sets itself (scenario validation checks these)."""
    return {**config, "bootstrap.servers": bootstrap_servers, "client.id": f"kchaos-{name}"}


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

    def add(self, status: str, n: int = 1) -> None:
        setattr(self, status, getattr(self, status) + n)


# ---------------------------------------------------------------------- the producer process


class ProduceLoop:
    """Writes until stopped, at a target rate or as fast as the client's queue allows."""

    def __init__(self, spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
        self.name: str = spec["name"]
        self.topic: str = spec["topic"]
        self.rate: float | None = spec["rate"]
        self.message_bytes: int = spec["message_bytes"]
        self.flush_timeout_s: float = spec["flush_timeout_s"]
        self.clock = clock
        self.stop = stop
        self.out = out
        config = spec["config"]
        self.queue_max = int(config.get("queue.buffering.max.messages", DEFAULT_QUEUE_MAX))
        self.producer = Producer(producer_settings(config, spec["bootstrap_servers"], self.name), logger=RDKAFKA_LOG)
        # with acks=0 no broker answers, so whatever offset the client reports is its own guess
        self.offsets_known = str(config.get("acks", config.get("request.required.acks", "all"))) != "0"
        self._done: list[str] = []

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        status = outcome(err)
        partition, offset = msg.partition(), msg.offset()
        self._done.append(completed(
            status, int(msg.key()), partition if partition is not None and partition >= 0 else None,
            offset if status == "ok" and self.offsets_known and offset is not None and offset >= 0 else None,
            self.clock.now_ns(), None if err is None else err.name()))

    def _report(self) -> None:
        """Send the completions gathered since the last report, in one write."""
        if self._done:
            done, self._done = self._done, []
            self.out.send(done)

    def _due(self, seq: int, started: float) -> int:
        """How many seqs to send now: what the rate allows and the local queue holds."""
        room = min(BATCH, self.queue_max - len(self.producer))
        if self.rate is None:
            return room
        return min(room, int((time.monotonic() - started) * self.rate) + 1 - seq)

    def _wait_s(self, seq: int, started: float) -> float:
        if self.rate is None:
            return 0.05  # the queue is full: a delivery report will make room
        return min(max(started + seq / self.rate - time.monotonic(), 0.0), 0.1)

    def run(self) -> None:
        say_hello(self.out)
        seq = 0
        started = time.monotonic()
        while not self.stop.is_set():
            n = self._due(seq, started)
            if n <= 0:
                self.producer.poll(self._wait_s(seq, started))
            else:
                seq = self._send(seq, n)
                self.producer.poll(0)
            self._report()
        self._drain()

    def _send(self, first: int, count: int) -> int:
        """Announce seqs first.. (before produce(): a kill must not hide a send), produce them; the next seq."""
        invoke_ns = self.clock.now_ns()
        self.out.send([invoked(first, count, invoke_ns)])
        for seq in range(first, first + count):
            value = encode(self.name, seq, self.message_bytes)
            while True:
                try:
                    self.producer.produce(self.topic, key=str(seq).encode(), value=value,
                                          on_delivery=self._on_delivery)
                    break
                except BufferError:  # the queue filled under us (max.kbytes): wait for reports
                    if self.stop.is_set():
                        self._done.append(withdrawn(seq, first + count - seq))
                        self._report()
                        return seq
                    self.producer.poll(0.05)
                    self._report()
                except KafkaException as e:  # refused before it entered the client's queue
                    self._done.append(completed("fail", seq, None, None, self.clock.now_ns(), e.args[0].name()))
                    if e.args[0].fatal():  # this producer instance is finished: the harness replaces it
                        self._report()
                        raise
                    break
        return first + count

    def _drain(self) -> None:
        """Wait up to flush_timeout_s for outstanding reports; the harness calls the rest in flight."""
        deadline = time.monotonic() + self.flush_timeout_s
        while len(self.producer) > 0 and time.monotonic() < deadline:
            self.producer.poll(0.1)
            self._report()
        self._report()


def produce(spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
    ProduceLoop(spec, clock, stop, out).run()


# ---------------------------------------------------------------------- the harness's handle


class ProducerClient(ClientProcess):
    """One producer of the workload; restarted after a crash under a new id (p0, p0.1, ...)."""

    role = "producer"
    module = "workloads.producer"

    def __init__(self, name: str, bootstrap_servers: str, topic: str, config: dict[str, Any],
                 sends: HistoryWriter, clock: RunClock, rate: float | None = None, message_bytes: int = 100,
                 flush_timeout_s: float = 20) -> None:
        super().__init__(name, clock)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.config = config
        self.sends = sends
        self.rate = rate
        self.message_bytes = message_bytes
        self.flush_timeout_s = flush_timeout_s
        self.counts = SendCounts()
        self.pending = PendingSends()
        self._topic_key = b',"topic":%s,"key":"' % json_line(topic)

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic, "config": self.config,
                "rate": self.rate, "message_bytes": self.message_bytes, "flush_timeout_s": self.flush_timeout_s}

    def stop(self, timeout_s: float | None = None) -> None:
        super().stop(self.flush_timeout_s + STOP_MARGIN_S if timeout_s is None else timeout_s)

    def _record(self, producer: str, seq: int, status: str, invoke_ns: int, partition: int | None,
                offset: int | None, error: str | None, complete_ns: int) -> dict[str, Any]:
        self.counts.add(status)
        return {"producer": producer, "seq": seq, "topic": self.topic, "key": str(seq), "partition": partition,
                "offset": offset, "status": status, "error": error, "invoke_ns": invoke_ns,
                "complete_ns": complete_ns}

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """Completions become sends.jsonl lines formatted here from the protocol's fields: json-encoding a
        dict per send took 41 % of the harness's CPU in a py-spy profile, this a quarter of that."""
        out: list[bytes] = []
        statuses: dict[bytes, int] = {}
        head = b'{"producer":%s,"seq":' % json_line(name)
        for line in lines:
            if line[:2] == b"S ":
                status, seq, partition, offset, complete_ns, error = completed_fields(line)
                invoke_ns = self.pending.complete(int(seq))
                if invoke_ns is None:
                    continue
                statuses[status] = statuses.get(status, 0) + 1
                out.append(b'%s%s%s%s","partition":%s,"offset":%s,"status":"%s","error":%s,"invoke_ns":%d,'
                           b'"complete_ns":%s}' % (head, seq, self._topic_key, seq, as_json_int(partition),
                                                  as_json_int(offset), status,
                                                  b"null" if error == b"-" else json_line(error.decode()),
                                                  invoke_ns, complete_ns))
                continue
            m = parse(line)
            if isinstance(m, Invoked):
                self.pending.invoke(m.first, m.count, m.invoke_ns)
            elif isinstance(m, Withdrawn):
                self.pending.withdraw(m.first, m.count)
        for status, n in statuses.items():
            self.counts.add(status.decode(), n)
        if out:
            self.sends.write_lines(out)

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """What the process never reported is ``info``: never ``fail``, an ack may have died with it."""
        error = IN_FLIGHT_AT_END if clean else f"producer process {how}"
        now = self.clock.now_ns()
        self.sends.write_many([self._record(name, seq, "info", invoke_ns, None, None, error, now)
                               for seq, invoke_ns in self.pending.drain()])


if __name__ == "__main__":
    child_main(produce)
