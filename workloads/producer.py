"""A producer that writes sequence-numbered messages, as a process of its own, and its harness-side handle.

Each delivery report becomes one sends.jsonl line, in the spirit of Kafka's
VerifiableProducer:

* ``ok``   -- acknowledged, with partition and offset (offset null with acks=0);
* ``fail`` -- the client says the message was definitely not written;
* ``unknown`` -- anything else: timeouts, lost connections, retries that ran out.
  When in doubt, ``unknown``: a message that may have been written is never
  called failed. Sends still in flight when the run ends are ``unknown`` too,
  and so is everything in flight in a producer process that was killed.

The process (``python -m workloads.producer SPEC``) announces each batch of
seqs (``I``) before handing it to produce(), then reports completions
(``S``) after each poll; :class:`ProducerClient` in the harness turns them
into history lines, so a SIGKILLed producer leaves nothing unaccounted for.

With ``transactions`` in its spec the process is a transactional producer
(:class:`TransactionalLoop`): transactions of ``size`` messages, committed
or aborted on purpose, each begun (``T``), asked to end (``C``) and ended
(``O``) in its own lines, so the harness writes one txns.jsonl line per
transaction even when the process dies in the middle of one.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from catalogue.history import SEND_FIELDS, SEND_STATUSES
from catalogue.producer_settings import effective_producer
from rundir.records import ordered, template
from workloads.child import LineOut, child_main, say_hello
from workloads.client import ClientProcess, Library
from workloads.history import RDKAFKA_LOG, HistoryWriter, RunClock, json_line
from workloads.pending import PendingSends, Transactions
from workloads.protocol import (Invoked, TxnBegun, TxnOutcome, TxnRequested, Withdrawn, as_json_int, completed,
                                completed_fields, integer_line, invoked, line_template, parse, txn_begun, txn_outcome,
                                txn_requested, withdrawn)
from workloads.txn_policy import DEFAULT_ON_COMMIT_ERROR, Call, ErrorKind, OnCommitError, TxnEnd

# Delivery errors that no earlier, possibly persisted attempt can precede: the
# message was refused as a whole. Anything else (timeouts, a topic or
# partition that metadata briefly lost, not-leader after retries) may follow
# an attempt that reached the log, so it is ``unknown``. A produce() call that
# raises never handed the message to the client at all: that is ``fail`` too.
DEFINITELY_NOT_WRITTEN = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_REQUIRED_ACKS,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._INVALID_ARG,
})
# Not among them: _PURGE_QUEUE (catalogue.history.PURGE_ERRORS). abort_transaction() purges retries too, queued
# again after a request whose answer never came: an earlier attempt may be in the log (seen:
# docs/findings/librdkafka-purged-sequence-reuse.md). A purged message's outcome is ``unknown``.

BATCH = 1000                    # seqs announced and produced per loop turn, at most
DEFAULT_QUEUE_MAX = 100_000     # librdkafka's queue.buffering.max.messages
DEFAULT_LINGER_MS = 5           # librdkafka's linger.ms (queue.buffering.max.ms)
STOP_MARGIN_S = 15              # beyond flush_timeout_s, before a stopping producer is killed
IN_FLIGHT_AT_END = "in flight at the end of the run"
OK, FAIL, UNKNOWN = SEND_STATUSES  # a send's status: acknowledged | definitely not written | outcome unknown
# the S line of an acknowledgement, nearly every delivery report: the key (the seq's digits), partition, offset,
# complete_ns; no error
ACKNOWLEDGED = line_template("S", {"status": b"ok", "error": b"-"},
                             {"seq": b"%s", "partition": b"%d", "offset": b"%d", "complete_ns": b"%d"})


def producer_settings(config: dict[str, Any], bootstrap_servers: str, name: str,
                      transactions: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scenario's librdkafka settings plus what the harness sets itself (scenario validation checks these)."""
    settings = {**config, "bootstrap.servers": bootstrap_servers, "client.id": f"kchaos-{name}"}
    if transactions is not None:
        settings["transactional.id"] = transactions["transactional_id"]
        settings["transaction.timeout.ms"] = transactions["timeout_ms"]
    return settings


def librdkafka_producer_identity(settings: dict[str, Any]) -> dict[str, Any]:
    """The durability settings a librdkafka producer runs with: what it was given over librdkafka's defaults."""
    return {**effective_producer(settings, "librdkafka"), "linger.ms": settings.get("linger.ms", DEFAULT_LINGER_MS),
            "transactional.id": settings.get("transactional.id")}


def outcome(error: KafkaError | None) -> str:
    """The send status a delivery report stands for: ok, fail or unknown."""
    if error is None:
        return OK
    return FAIL if error.code() in DEFINITELY_NOT_WRITTEN else UNKNOWN


# what librdkafka answers abort_transaction() with while a timed-out commit_transaction() is still its call in
# progress (the commit "may be called again" to resume it; no other transactional call is taken meanwhile)
ABORT_REFUSED = frozenset({KafkaError._CONFLICT, KafkaError._STATE})


def rdkafka_error_kind(error: KafkaError, calling: Call, choosing_abort: bool) -> ErrorKind:
    """A commit's or abort's error as confluent_kafka classifies it (workloads/txn_policy.py's kinds).
    ``choosing_abort``: this abort is the application's choice after a timed-out commit (on_commit_error abort)."""
    if error.fatal():
        return "fatal"
    if calling == "abort" and choosing_abort and error.code() in ABORT_REFUSED:
        return "refused"
    if calling == "commit" and error.txn_requires_abort():
        return "abortable"
    return "retriable" if error.retriable() else "other"


def call_end(producer: Any, end: TxnEnd, commit_timeout_s: float, started: float) -> None:
    """The commit or abort ``end`` asks for now, given the time its policy allows: ``commit_timeout_s`` a call
    under retry and abort, what is left of it since ``started`` under replace (none left: the time-out the
    client would have raised). The client's KafkaException propagates for the caller to classify."""
    left = commit_timeout_s if end.policy != "replace" else commit_timeout_s - (time.monotonic() - started)
    if left <= 0:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no time left", retriable=True))
    if end.calling == "abort":
        producer.abort_transaction(left)
    else:
        producer.commit_transaction(left)


def end_transaction(producer: Any, end: TxnEnd, commit_timeout_s: float, started: float,
                    between: Callable[[], None]) -> tuple[ErrorKind, KafkaException] | None:
    """Commit or abort calls until the client ends the transaction (None: ``end.calling`` says committed or
    aborted) or ``end`` gives up: then the last error's kind and the exception. ``between`` runs after each
    failed call (the deliveries served meanwhile)."""
    while True:
        try:
            call_end(producer, end, commit_timeout_s, started)
            return None
        except KafkaException as e:
            error: KafkaError = e.args[0]
            kind = rdkafka_error_kind(error, end.calling, end.choosing_abort)
            if end.failed(kind, error.name(), time.monotonic() - started >= commit_timeout_s):
                return kind, e
        producer.poll(0.1)
        between()


@dataclass
class SendCounts:
    """Sends by status (catalogue.history.SEND_STATUSES: each a field here)."""

    ok: int = 0
    fail: int = 0
    unknown: int = 0

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
        self.settings = producer_settings(config, spec["bootstrap_servers"], self.name, spec.get("transactions"))
        # the delivery callback set once for every message, not passed to each produce(): one argument fewer on
        # the call made for every send (benchmarks/README.md, "Figures moved out of the code")
        self.producer = Producer({**self.settings, "on_delivery": self._on_delivery}, logger=RDKAFKA_LOG)
        self.partitions: int | None = None  # set: seq's partition is seq % partitions (transactions spread so)
        # with acks=0 no broker answers, so whatever offset the client reports is its own guess
        self.offsets_known = str(config.get("acks", config.get("request.required.acks", "all"))) != "0"
        self._done: list[bytes] = []
        self._value_head = self.name.encode() + b":"   # a value is encode()'s: <name>:<seq>:<padding>
        self._padding = b"x" * self.message_bytes

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """A delivery report as an ``S`` line; an acknowledgement, nearly every report, formatted straight from
        the message's fields (its key is the seq's digits)."""
        if err is None and self.offsets_known:
            offset = msg.offset()
            if offset is not None and offset >= 0:
                self._done.append(ACKNOWLEDGED % (msg.key(), msg.partition(), offset, self.clock.now_ns()))
                return
        status = outcome(err)
        partition, offset = msg.partition(), msg.offset()
        self._done.append(completed(
            status, int(msg.key()), partition if partition is not None and partition >= 0 else None,
            offset if status == "ok" and self.offsets_known and offset is not None and offset >= 0 else None,
            self.clock.now_ns(), None if err is None else err.name()).encode())

    def _report(self) -> None:
        """Send the completions gathered since the last report, in one write."""
        if self._done:
            done, self._done = self._done, []
            self.out.send_bytes(done)

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
        say_hello(self.out, librdkafka_producer_identity(self.settings))
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
        """Announce seqs first.. (before produce(): a kill must not hide a send), produce them; the next seq.

        Without a partition of their own the seqs go to the client in one produce_batch() call, which runs the
        partitioner per message as produce() does but spares a Python call per message. When the client's queue
        fills, it refuses the rest of the batch: those go on one at a time with produce(), in order, waiting for
        room as _send_each does. A confluent-kafka release older than produce_batch() (a pinned
        workload.client_version, e.g. 2.5.0) hands every message over with produce().
        """
        invoke_ns = self.clock.now_ns()
        self.out.send([invoked(first, count, invoke_ns)])
        head, padding = self._value_head, self._padding
        batch = []
        for seq in range(first, first + count):
            key = b"%d" % seq
            batch.append({"key": key, "value": b"%s%s:%s" % (head, key, padding[len(head) + len(key) + 1:])})
        if self.partitions is not None or not hasattr(self.producer, "produce_batch"):
            return self._send_each(first, batch)
        if self.producer.produce_batch(self.topic, batch) == count:
            return first + count
        refused = [i for i, message in enumerate(batch) if "_error" in message]
        if refused == list(range(refused[0], count)):  # the queue filled (or the client failed): the rest, in order
            return self._send_each(first + refused[0], batch[refused[0]:])
        for i in refused:  # some refused between accepted ones: never handed over, definitely not written
            error = batch[i]["_error"].name()
            self._done.append(completed("fail", first + i, None, None, self.clock.now_ns(), error).encode())
        return first + count

    def _send_each(self, first: int, messages: list[dict[str, Any]]) -> int:
        """produce() the messages of seqs first.. one by one (to seq % partitions when set); the next seq."""
        partitions, end = self.partitions, first + len(messages)
        for seq, message in enumerate(messages, first):
            key, value = message["key"], message["value"]
            while True:
                try:
                    if partitions is None:
                        self.producer.produce(self.topic, key=key, value=value)
                    else:
                        self.producer.produce(self.topic, key=key, value=value, partition=seq % partitions)
                    break
                except BufferError:  # the queue filled under us (max.kbytes): wait for reports
                    if self.stop.is_set():
                        self._done.append(withdrawn(seq, end - seq).encode())
                        self._report()
                        return seq
                    self.producer.poll(0.05)
                    self._report()
                except KafkaException as e:  # refused before it entered the client's queue
                    self._done.append(completed("fail", seq, None, None, self.clock.now_ns(),
                                                e.args[0].name()).encode())
                    if e.args[0].fatal():  # this producer instance is finished: the harness replaces it
                        self._report()
                        raise
                    break
        return end

    def _drain(self) -> None:
        """Wait up to flush_timeout_s for outstanding reports; the harness calls the rest in flight."""
        deadline = time.monotonic() + self.flush_timeout_s
        while len(self.producer) > 0 and time.monotonic() < deadline:
            self.producer.poll(0.1)
            self._report()
        self._report()


class TransactionalLoop(ProduceLoop):
    """Transactions of ``size`` messages, round-robin over the partitions, committed or aborted on purpose.

    What a careful application does with librdkafka's transactional API:
    abort on an abortable error, give up on a fatal one (fenced): the harness
    then starts a new process under the same transactional.id, which fences
    this one. A retriable (timed-out) commit is handled as ``on_commit_error``
    says (workloads/txn_policy.py): ``replace`` retries it until
    ``commit_timeout_s``, then the outcome is unknown and this producer is
    done; ``retry`` resumes it until it answers; ``abort`` aborts instead (or,
    refused, resumes the commit). A stop request lets the current transaction
    finish and commit.
    """

    def __init__(self, spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
        super().__init__(spec, clock, stop, out)
        txns = spec["transactions"]
        self.size: int = txns["size"]
        self.abort_probability: float = txns["abort_probability"]
        self.commit_timeout_s: float = txns["commit_timeout_s"]
        self.partitions = txns["partitions"]
        self.rng = random.Random(f"{txns['seed']}:{self.name}")  # a replacement draws its own, reproducibly
        self.on_commit_error: OnCommitError = txns.get("on_commit_error", DEFAULT_ON_COMMIT_ERROR)

    def run(self) -> None:
        # before init_transactions: a replacement may wait there for a frozen coordinator
        say_hello(self.out, {**librdkafka_producer_identity(self.settings), "on_commit_error": self.on_commit_error})
        if not self._init():
            return
        seq, txn = 0, 0
        started = time.monotonic()
        while not self.stop.is_set():
            seq = self._transaction(txn, seq, started)
            txn += 1
        self._report()

    def _init(self) -> bool:
        """init_transactions until it answers (fencing any predecessor); False when stopped first."""
        while not self.stop.is_set():
            try:
                self.producer.init_transactions(self.commit_timeout_s)
                return True
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
        return False

    def _transaction(self, txn: int, first: int, started: float) -> int:
        """One transaction from seq ``first``; the next seq."""
        begin_ns = self.clock.now_ns()
        self.producer.begin_transaction()
        self.out.send([txn_begun(txn, begin_ns)])
        seq, end = first, first + self.size
        try:
            while seq < end:
                # stopping: the rest of the transaction at once, whatever the rate, and then commit
                n = min(BATCH if self.stop.is_set() else self._due(seq, started), end - seq)
                if n <= 0:
                    self.producer.poll(self._wait_s(seq, started))
                else:
                    sent = self._send(seq, n)
                    self.producer.poll(0)
                    if sent < seq + n:  # stopped with the queue full: commit what was handed over
                        seq = sent
                        break
                    seq = sent
                self._report()
        except KafkaException as e:  # fatal (fenced, ...): the open transaction never committed
            self._end_report(txn, "unknown", e.args[0].name())
            raise
        draw = self.rng.random()  # drawn every time: stopping does not shift the later draws
        intent = "abort" if draw < self.abort_probability and not self.stop.is_set() else "commit"
        if intent == "abort":  # let its messages reach the log first: an abort that only purged tests nothing
            self.producer.flush(self.commit_timeout_s)
        self._done.append(txn_requested(txn, intent, self.clock.now_ns()).encode())
        self._report()
        self._end(txn, intent)
        return seq

    def _end(self, txn: int, intent: str) -> None:
        """Commit or abort, as the client's errors and ``on_commit_error`` allow (workloads/txn_policy.py), and
        report the outcome: committed or aborted only when the client said so.

        An outcome reached after errors keeps the last one as its ``error``
        (a commit retried after a time-out is what delayed requests look like).
        """
        started = time.monotonic()
        end = TxnEnd(self.on_commit_error, "abort" if intent == "abort" else "commit")
        failure = end_transaction(self.producer, end, self.commit_timeout_s, started, self._report)
        if failure is None:
            self._end_report(txn, "aborted" if end.calling == "abort" else "committed", end.why)
            return
        kind, e = failure
        error: KafkaError = e.args[0]
        if kind == "retriable":  # replace, out of time: the transaction is still in the client's hands
            self._end_report(txn, "unknown", f"{end.calling} did not complete within "
                                             f"{self.commit_timeout_s:g}s ({end.why or '_TIMED_OUT'})")
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"transaction {txn} did not end "
                                            f"within {self.commit_timeout_s:g}s", fatal=True)) from None
        self._end_report(txn, "unknown", error.name())
        if error.fatal():
            raise e
        # e.g. a state error: this client cannot be trusted with another transaction
        raise KafkaException(KafkaError(error.code(), error.str(), fatal=True)) from None

    def _end_report(self, txn: int, outcome: str, error: str | None) -> None:
        """Deliveries served so far, then the outcome, in one write."""
        self.producer.poll(0)
        self._done.append(txn_outcome(txn, outcome, self.clock.now_ns(), error).encode())
        self._report()


def produce(spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
    (ProduceLoop if spec.get("transactions") is None else TransactionalLoop)(spec, clock, stop, out).run()


# ---------------------------------------------------------------------- the harness's handle


class ProducerClient(ClientProcess):
    """One producer of the workload; restarted after a crash under a new id (p0, p0.1, ...).

    A transactional one (``transactions``: size, abort_probability,
    timeout_ms, commit_timeout_s, transactional_id, partitions, seed) keeps
    its transactional.id across restarts, so each replacement fences the
    process before it, and writes its transactions to ``txns``.
    """

    role = "producer"
    module = "workloads.producer"

    def __init__(self, name: str, bootstrap_servers: str, topic: str, config: dict[str, Any],
                 sends: HistoryWriter, clock: RunClock, rate: float | None = None, message_bytes: int = 100,
                 flush_timeout_s: float = 20, transactions: dict[str, Any] | None = None,
                 txns: HistoryWriter | None = None, client: Library = "librdkafka",
                 kafka_version: str | None = None, client_version: str | None = None) -> None:
        super().__init__(name, clock, client, kafka_version, client_version)
        if (transactions is None) != (txns is None):
            raise ValueError("a transactional producer needs a txns writer, and only it")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.config = config
        self.sends = sends
        self.rate = rate
        self.message_bytes = message_bytes
        self.flush_timeout_s = flush_timeout_s
        self.transactions = transactions
        self.txns = txns
        self.counts = SendCounts()
        self.outcomes: dict[str, int] = {}  # txns lines written, by outcome
        self.pending = PendingSends()
        self.book = None if transactions is None else Transactions()
        self._topic_json = json_line(topic)

    @property
    def transactional_id(self) -> str | None:
        """Kept by every replacement (faults find its coordinator by it); None outside transactions."""
        return None if self.transactions is None else self.transactions["transactional_id"]

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic, "config": self.config,
                "rate": self.rate, "message_bytes": self.message_bytes, "flush_timeout_s": self.flush_timeout_s,
                "transactions": self.transactions}

    def stop(self, timeout_s: float | None = None) -> None:
        if timeout_s is None:  # a transactional one may be flushing an abort, then ends it, then commits one
            commit_s = 0 if self.transactions is None else self.transactions["commit_timeout_s"]
            timeout_s = self.flush_timeout_s + 3 * commit_s + STOP_MARGIN_S
        super().stop(timeout_s)

    def _record(self, producer: str, seq: int, status: str, invoke_ns: int, partition: int | None,
                offset: int | None, error: str | None, complete_ns: int, txn: int | None) -> dict[str, Any]:
        self.counts.add(status)
        return ordered(SEND_FIELDS, {"producer": producer, "seq": seq, "topic": self.topic, "key": str(seq),
                                     "partition": partition, "offset": offset, "status": status, "error": error,
                                     "invoke_ns": invoke_ns, "complete_ns": complete_ns, "txn": txn})

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """Completions become sends.jsonl lines formatted here from the protocol's fields (SEND, ACK_SEND: the
        catalogue's field order), with no dict per send: this runs once per message in the harness, the one
        process every workload's history passes through. An acknowledgement outside transactions, nearly every
        line, takes one regex and one format (ACK_LINE)."""
        out: list[bytes] = []
        statuses: dict[bytes, int] = {}
        producer, topic = json_line(name), self._topic_json
        book = self.book
        ack, fast = ACK_LINE.fullmatch, book is None  # a transactional one's sends need their txn too
        complete = self.pending.complete
        acks = 0
        for line in lines:
            if fast and (m := ack(line)) is not None:
                seq, partition, offset, complete_ns = m.groups()
                invoke_ns = complete(int(seq))
                if invoke_ns is not None:
                    acks += 1
                    out.append(ACK_SEND % (producer, seq, topic, seq, partition, offset, invoke_ns, complete_ns))
                continue
            if line[:2] == b"S ":
                status, seq, partition, offset, complete_ns, error = completed_fields(line)
                invoke_ns = self.pending.complete(int(seq))
                if invoke_ns is None:
                    continue
                statuses[status] = statuses.get(status, 0) + 1
                out.append(SEND % (producer, seq, topic, seq, as_json_int(partition), as_json_int(offset), status,
                                   b"null" if error == b"-" else json_line(error.decode()), invoke_ns, complete_ns,
                                   b"null" if book is None else txn_json(book, int(seq))))
                continue
            m = parse(line)
            if isinstance(m, Invoked):
                self.pending.invoke(m.first, m.count, m.invoke_ns)
                if book is not None:
                    book.claim(m.first, m.count)
            elif isinstance(m, Withdrawn):
                self.pending.withdraw(m.first, m.count)
                if book is not None:
                    for seq in range(m.first, m.first + m.count):
                        book.release(seq)
            elif book is not None and isinstance(m, (TxnBegun, TxnRequested, TxnOutcome)):
                self._on_txn(name, book, m)
        if acks:
            statuses[b"ok"] = statuses.get(b"ok", 0) + acks
        for status, n in statuses.items():
            self.counts.add(status.decode(), n)
        if out:
            self.sends.write_lines(out)

    def _on_txn(self, name: str, book: Transactions, m: TxnBegun | TxnRequested | TxnOutcome) -> None:
        if isinstance(m, TxnBegun):
            book.begin(m.txn, m.begin_ns)
        elif isinstance(m, TxnRequested):
            book.request(m.txn, m.intent, m.invoke_ns)
        else:
            self._write_txn(book.finish(name, m.txn, m.outcome, m.complete_ns, m.error))

    def _write_txn(self, line: dict[str, Any]) -> None:
        assert self.txns is not None
        self.txns.write(line)
        self.outcomes[line["outcome"]] = self.outcomes.get(line["outcome"], 0) + 1

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """What the process never reported is ``unknown``: never ``fail``, an ack may have died with it.
        Likewise a transaction it never reported the outcome of is ``unknown``."""
        error = IN_FLIGHT_AT_END if clean else f"producer process {how}"
        now = self.clock.now_ns()
        book = self.book
        self.sends.write_many([self._record(name, seq, UNKNOWN, invoke_ns, None, None, error, now,
                                            None if book is None else book.release(seq))
                               for seq, invoke_ns in self.pending.drain()])
        if book is not None and (line := book.abandon(name, now, error)) is not None:
            self._write_txn(line)


# an acknowledgement as ProduceLoop._on_delivery writes it: seq, partition, offset, complete_ns (no error)
ACK_LINE = integer_line("S", {"status": b"ok", "error": b"-"}, ("seq", "partition", "offset", "complete_ns"))

# A sends.jsonl line formatted from an S line's fields (as bytes: seq twice, for the key is its digits as a
# string; invoke_ns an int; the rest already JSON), the producer and topic as JSON; the order of the format's
# arguments, checked against the catalogue's when the module is imported.
SEND_PLACEHOLDERS = {"producer": b"%s", "seq": b"%s", "topic": b"%s", "key": b'"%s"', "partition": b"%s",
                     "offset": b"%s", "status": b'"%s"', "error": b"%s", "invoke_ns": b"%d", "complete_ns": b"%s",
                     "txn": b"%s"}
SEND = template(SEND_FIELDS, {}, SEND_PLACEHOLDERS)
# an acknowledgement outside transactions (ACK_LINE): status ok, no error, no txn
ACK_SEND = template(SEND_FIELDS, {"status": b'"ok"', "error": b"null", "txn": b"null"},
                    {k: v for k, v in SEND_PLACEHOLDERS.items() if k not in ("status", "error", "txn")})


def txn_json(book: Transactions, seq: int) -> bytes:
    txn = book.release(seq)
    return b"null" if txn is None else b"%d" % txn


if __name__ == "__main__":
    child_main(produce)
