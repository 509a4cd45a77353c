"""An exactly-once pipeline (consume-transform-produce), as a process of its own, and its harness-side handle.

The process (``python -m workloads.pipeline SPEC``) is the textbook Kafka
EOS application: a ``read_committed`` consumer in the pipeline's group reads
a batch of the input topic; one transaction of a transactional producer
writes one output record per input record (value
``<pipeline>:<seq>:<from_producer>:<from_seq>:``) together with the batch's
consumed offsets (``send_offsets_to_transaction``), and commits. An abortable
error aborts the transaction and rewinds the consumer to the group's
committed offsets; a fatal one (fenced, or under ``on_commit_error`` replace a
commit whose outcome never came) ends the process so the harness starts a new
one under the same ``transactional.id``, which fences what is left of the old
one. A timed-out commit is handled as ``on_commit_error`` says
(workloads/txn_policy.py); a commit that ends aborted rewinds as an abort does.
``processing_ms`` is the application's time per batch between writing its
outputs and committing: the window in which a crash leaves them uncommitted.

It speaks the consumer's lines for its input (``P``/``R``/``D``: live reads
of the pipeline group) and the transactional producer's for its output
(``T``/``C``/``O``/``S``), announcing each output seq with
``J <seq> <from_producer> <from_seq> <invoke_ns>`` instead of ``I`` so the
harness knows which input each output was made from.

A transaction costs about the same whatever its size (librdkafka registers
the output partitions before anything is delivered), so ``batch`` sets the
pipeline's throughput (benchmarks/README.md, "Figures moved out of the code").
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import (OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             Message, Producer, TopicPartition)
from confluent_kafka.admin import AdminClient
from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from catalogue.history import PIPELINE_SEND_FIELDS, SEND_FIELDS
from rundir.records import ordered, template
from workloads.child import LineOut, child_main, say_hello
from workloads.client import Library
from workloads.consumer import (Assignments, ConsumerClient, Isolation, end_offsets, librdkafka_consumer_settings,
                                librdkafka_consumer_identity)
from workloads.history import RDKAFKA_LOG, History, RunClock, json_line
from workloads.messages import decode, encode, encode_output
from workloads.pending import OpenTxn
from workloads.producer import (SEND_PLACEHOLDERS, STOP_MARGIN_S, ProducerClient, librdkafka_producer_identity,
                                end_transaction, outcome, producer_settings, txn_json)
from workloads.protocol import (BATCH_DONE, ProtocolError, TxnBegun, as_json_int, completed, completed_fields, joined,
                                joined_fields, parse, polled, processed, txn_begun, txn_outcome, txn_requested)
from workloads.txn_policy import DEFAULT_ON_COMMIT_ERROR, TxnEnd

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10         # one committed() or admin request
ISOLATION: Isolation = "read_committed"  # the input: only what its producers committed
# a pipeline's sends.jsonl line: a producer's (SEND_PLACEHOLDERS), then the input it was made from, as JSON
PIPELINE_SEND = template((*SEND_FIELDS, *PIPELINE_SEND_FIELDS), {},
                         {**SEND_PLACEHOLDERS, "from_producer": b"%s", "from_seq": b"%s"})


# ---------------------------------------------------------------------- the pipeline process


def give_up(why: str) -> KafkaException:
    """A fatal client error of our own: this process cannot go on safely, a new one must take over
    (child_main exits with EXIT_FATAL_CLIENT_ERROR, the harness starts the replacement)."""
    return KafkaException(KafkaError(KafkaError._FATAL, why, fatal=True))


def fatal(e: KafkaException) -> KafkaException:
    """``e`` as the error that ends the process: the client's fatal ones as they are, and the rest too (the
    transactional API says to treat an error neither retriable nor abortable as fatal)."""
    return e if e.args[0].fatal() else give_up(e.args[0].str())


class TransactionFailed(Exception):
    """The current transaction must be aborted (the client said ``txn_requires_abort``)."""


class Unanswered(Exception):
    """A transactional call was still retriable when its time (commit_timeout_s) ran out."""


class PipelineLoop:
    """Consume a batch, write its outputs and offsets in one transaction, commit; until stopped.

    A stop lets the current transaction finish (commit) first: a stopped
    pipeline leaves nothing open.
    """

    def __init__(self, spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
        self.name: str = spec["name"]
        self.input_topic: str = spec["input_topic"]
        self.output_topic: str = spec["output_topic"]
        self.batch: int = spec["batch"]
        self.commit_timeout_s: float = spec["commit_timeout_s"]
        self.processing_ms: float = spec["processing_ms"]
        self.clock = clock
        self.stop = stop
        self.out = out
        consumer = librdkafka_consumer_settings(spec["consumer_config"], spec["bootstrap_servers"], self.name,
                                                spec["group"], "manual", ISOLATION)
        producer = producer_settings(spec["producer_config"], spec["bootstrap_servers"], self.name,
                                     spec["transactions"])
        self.on_commit_error: str = spec["transactions"].get("on_commit_error", DEFAULT_ON_COMMIT_ERROR)
        self.identity = {**librdkafka_producer_identity(producer), **librdkafka_consumer_identity(consumer),
                         "on_commit_error": self.on_commit_error}
        self.consumer = Consumer(consumer, logger=RDKAFKA_LOG)
        self.producer = Producer(producer, logger=RDKAFKA_LOG)
        self.seq = 0        # the next output seq of this process
        self.txn = -1       # the current (or last) transaction number
        self._done: list[str] = []
        self._committed: dict[int, int] = {}  # partition -> the group's committed offset, as this process knows it
        self.assignments = Assignments(out, clock)  # its live reads are the harness's R lines: it numbers them

    # ------------------------------------------------------------ the loop

    def run(self) -> None:
        # before init_transactions: a replacement may wait there for a frozen coordinator
        say_hello(self.out, self.identity)
        try:
            if not self._init():
                return
            self.consumer.subscribe([self.input_topic], **self.assignments.callbacks(then=self._forget_committed))
            while not self.stop.is_set():
                batch = [m for m in self.consumer.consume(self.batch, timeout=0.5) if m.error() is None]
                if batch:
                    self._transact(batch)
                else:
                    self._commit_skipped()
        finally:
            try:
                self.consumer.close()  # leaves the group at once: the partitions go to the others (or a successor)
            except KafkaException:
                pass  # what matters is committed in the transactions already

    def _init(self) -> bool:
        """init_transactions until it answers (it fences a predecessor under the same transactional.id, which
        waits for that one's open transaction to be aborted); False when stopped first."""
        while not self.stop.is_set():
            try:
                self.producer.init_transactions(self.commit_timeout_s)
                return True
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise fatal(e) from None
        return False

    def _forget_committed(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """A partition given, taken back or lost: what this process knew of its committed offset is stale."""
        for tp in partitions:
            self._committed.pop(tp.partition, None)

    def _transact(self, batch: list[Message]) -> None:
        """One batch in one transaction: outputs, offsets, commit (or abort and rewind)."""
        lines = [polled(len(batch), self.clock.now_ns())]
        self._begin(lines)
        first = self.seq
        try:
            for msg in batch:  # announce every output before any is produced: a kill must not hide a send
                from_producer, from_seq = decode(msg.value())
                now = self.clock.now_ns()
                lines.append(processed(msg.partition(), msg.offset(), from_producer, from_seq, now))
                lines.append(joined(self.seq, from_producer, from_seq, now))
                self.seq += 1
            self.out.send(lines)
            for seq, msg in enumerate(batch, first):
                self._produce(seq, msg)
            self._work()
            self._finish(self._positions())
        except TransactionFailed as e:
            self._abort(str(e))
            self._rewind()
        self.out.send([BATCH_DONE])

    def _commit_skipped(self) -> None:
        """Idle: when the consumer moved past records it never returned (control records, aborted
        transactions of the input), commit those positions in a transaction of offsets only, so the
        group's committed offsets reach the end of the input (what the harness waits for)."""
        ahead = self._positions()
        unknown = [TopicPartition(self.input_topic, tp.partition) for tp in ahead
                   if tp.partition not in self._committed]
        if unknown:
            try:
                for tp in self.consumer.committed(unknown, timeout=CALL_TIMEOUT_S):
                    self._committed[tp.partition] = tp.offset
            except KafkaException:
                return  # the group coordinator is away: the next idle turn asks again
        ahead = [tp for tp in ahead if tp.offset > self._committed.get(tp.partition, tp.offset)]
        if not ahead:
            return
        lines: list[str] = []
        self._begin(lines)
        self.out.send(lines)
        try:
            self._finish(ahead)
        except TransactionFailed as e:
            self._abort(str(e))
            self._rewind()

    # ------------------------------------------------------------ one transaction

    def _begin(self, lines: list[str]) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as e:  # fenced, or a state error: nothing was open, a new process takes over
            raise fatal(e) from None
        self.txn += 1
        lines.append(txn_begun(self.txn, self.clock.now_ns()))

    def _produce(self, seq: int, msg: Message) -> None:
        from_producer, from_seq = decode(msg.value())
        value = (encode(self.name, seq, 0) if from_producer is None or from_seq is None  # not kchaos's: names none
                 else encode_output(self.name, seq, from_producer, from_seq))
        while True:
            try:
                self.producer.produce(self.output_topic, key=str(seq).encode(), value=value,
                                      on_delivery=self._on_delivery)
                return
            except BufferError:  # the local queue is full: serve delivery reports, then again
                self.producer.poll(0.05)
            except KafkaException as e:  # refused before it entered the queue
                raise self._settle(e) from None

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        partition, offset = msg.partition(), msg.offset()
        status = outcome(err)
        self._done.append(completed(
            status, int(msg.key()), partition if partition is not None and partition >= 0 else None,
            offset if status == "ok" and offset is not None and offset >= 0 else None,
            self.clock.now_ns(), None if err is None else err.name()))

    def _work(self) -> None:
        """The application at work on the batch (``processing_ms``), its outputs sent but not committed:
        the window in which a crash leaves the transaction open. Delivery reports are served meanwhile."""
        deadline = time.monotonic() + self.processing_ms / 1000
        while (left := deadline - time.monotonic()) > 0:
            self.producer.poll(min(left, 0.1))
            self._report()

    def _positions(self) -> list[TopicPartition]:
        """Where the consumer stands on each assigned partition: the offsets this transaction commits."""
        try:
            positions = self.consumer.position(self.consumer.assignment())
        except KafkaException:
            return []
        return [tp for tp in positions if tp.offset >= 0]

    def _finish(self, offsets: list[TopicPartition]) -> None:
        """Send the offsets and commit: ``O committed``; TransactionFailed when it must be aborted instead."""
        if offsets:
            try:
                self._retrying(lambda timeout: self.producer.send_offsets_to_transaction(
                    offsets, self.consumer.consumer_group_metadata(), timeout))
            except Unanswered as e:  # nothing asked to commit yet: give this batch up and do it again
                raise TransactionFailed(f"send_offsets_to_transaction unanswered ({e})") from None
        self.out.send([txn_requested(self.txn, "commit", self.clock.now_ns())])
        if self._commit():
            for tp in offsets:
                self._committed[tp.partition] = tp.offset
        else:  # aborted instead: the batch is read (and written) again
            self._rewind()

    def _commit(self) -> bool:
        """commit_transaction as the client's errors and ``on_commit_error`` allow (workloads/txn_policy.py):
        True when the client said committed, False when it said aborted (``O`` reports either, the intent stays
        commit); a fatal exit with the outcome unknown otherwise."""
        started = time.monotonic()
        end = TxnEnd(self.on_commit_error, "commit")
        failure = end_transaction(self.producer, end, self.commit_timeout_s, started, self._report)
        if failure is not None:
            kind, e = failure
            if kind == "retriable":  # replace: committed or not, nobody knows; only a new producer goes on
                raise self._unknown(f"{end.calling} did not complete within {self.commit_timeout_s:g}s "
                                    f"({end.why or e.args[0].name()})") from None
            raise self._unknown(e.args[0].name(), fatal(e)) from None
        self._report()
        committed = end.calling == "commit"
        self.out.send([txn_outcome(self.txn, "committed" if committed else "aborted", self.clock.now_ns(),
                                   end.why)])
        return committed

    def _abort(self, why: str) -> None:
        """Abort the open transaction: ``O aborted`` (``why`` as its error), or a fatal exit when it won't."""
        self._report()
        self.out.send([txn_requested(self.txn, "abort", self.clock.now_ns())])
        try:
            self._retrying(self.producer.abort_transaction)
        except (Unanswered, TransactionFailed) as e:
            raise self._unknown(f"abort did not complete within {self.commit_timeout_s:g}s ({e})") from None
        self._report()
        self.out.send([txn_outcome(self.txn, "aborted", self.clock.now_ns(), why)])

    def _retrying(self, call: Callable[[float], object]) -> None:
        """``call(timeout)`` again while the client says retriable, for commit_timeout_s in all.

        TransactionFailed when the transaction must be aborted, Unanswered when
        it was still retriable at the end; any other error ends the process
        with the transaction's outcome unknown.
        """
        deadline = time.monotonic() + self.commit_timeout_s
        while True:
            try:
                call(max(deadline - time.monotonic(), 0.1))
                return
            except KafkaException as e:
                if not e.args[0].retriable() or e.args[0].txn_requires_abort():
                    raise self._settle(e) from None
                if time.monotonic() >= deadline:
                    raise Unanswered(e.args[0].name()) from None
                self.producer.poll(0.1)
                self._report()

    def _settle(self, e: KafkaException) -> Exception:
        """What an error inside a transaction leads to: TransactionFailed when the client says abort, else the
        fatal exit, the transaction's outcome unknown (the next process's fencing aborts it)."""
        error: KafkaError = e.args[0]
        if error.txn_requires_abort():
            return TransactionFailed(error.name())
        return self._unknown(error.name(), fatal(e))

    def _unknown(self, why: str, exit_with: KafkaException | None = None) -> KafkaException:
        """Report the open transaction's outcome unknown; the exception that ends the process."""
        self._report()
        self.out.send([txn_outcome(self.txn, "unknown", self.clock.now_ns(), why)])
        return exit_with or give_up(f"transaction {self.txn}: {why}")

    def _rewind(self) -> None:
        """Back to the group's committed offsets: the aborted batch is read (and written) again."""
        assigned = self.consumer.assignment()
        if not assigned:
            return
        deadline = time.monotonic() + self.commit_timeout_s
        while True:
            try:
                committed = self.consumer.committed(assigned, timeout=CALL_TIMEOUT_S)
                break
            except KafkaException as e:  # going on from here would commit past the aborted batch
                if time.monotonic() > deadline:
                    raise give_up(f"cannot rewind to the committed offsets: {e.args[0].str()}") from None
                time.sleep(0.1)
        try:
            for tp in committed:
                self._committed[tp.partition] = tp.offset
                self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                  tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException as e:
            raise give_up(f"cannot rewind to the committed offsets: {e.args[0].str()}") from None

    def _report(self) -> None:
        if self._done:
            done, self._done = self._done, []
            self.out.send(done)


def pipe(spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
    PipelineLoop(spec, clock, stop, out).run()



# ---------------------------------------------------------------------- the harness's handle


# the lines of the input side (a consumer's: processed records, polls, assignment changes), and its D
INPUT_TAGS = (b"R ", b"P ", b"A ")


class PipelineClient(ProducerClient):
    """One pipeline process of the pipeline group; restarted under a new name (pipe0, pipe0.1, ...) and the same
    transactional.id, so the new process fences the old one's open transaction.

    Its output side is a transactional producer's (sends, txns and what a dead
    process leaves, by ProducerClient's rules, each output send also naming
    its input); its input side a consumer's (live reads of the pipeline group,
    by ConsumerClient's).
    """

    role = "pipeline"
    module = "workloads.pipeline"

    def __init__(self, name: str, bootstrap_servers: str, input_topic: str, output_topic: str, group: str,
                 transactional_id: str, history: History, batch: int = 100, transaction_timeout_ms: int = 60000,
                 commit_timeout_s: float = 10, processing_ms: float = 0,
                 producer_config: dict[str, Any] | None = None, consumer_config: dict[str, Any] | None = None,
                 client: Library = "librdkafka", kafka_version: str | None = None,
                 on_commit_error: str = DEFAULT_ON_COMMIT_ERROR, client_version: str | None = None) -> None:
        if history.txns is None:
            raise ValueError("a pipeline writes txns.jsonl: open the History with transactions=True")
        super().__init__(name, bootstrap_servers, output_topic, producer_config or {}, history.sends, history.clock,
                         transactions={"transactional_id": transactional_id, "timeout_ms": transaction_timeout_ms,
                                       "commit_timeout_s": commit_timeout_s, "on_commit_error": on_commit_error},
                         txns=history.txns, client=client, kafka_version=kafka_version,
                         client_version=client_version)
        self.input_topic = input_topic
        self.group = group
        self.batch = batch
        self.commit_timeout_s = commit_timeout_s
        self.processing_ms = processing_ms
        self.consumer_config = consumer_config or {}
        self.input = ConsumerClient(name, bootstrap_servers, input_topic, group, "manual", self.consumer_config,
                                    history.reads, history.clock, isolation=ISOLATION)
        self.open_acked = 0     # outputs of the open transaction acknowledged so far (written, not committed)
        self._sources: dict[int, tuple[bytes, bytes]] = {}  # pending seq -> (from_producer, from_seq) as JSON

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "input_topic": self.input_topic,
                "output_topic": self.topic, "group": self.group, "transactions": self.transactions,
                "batch": self.batch, "commit_timeout_s": self.commit_timeout_s, "processing_ms": self.processing_ms,
                "producer_config": self.config, "consumer_config": self.consumer_config}

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask it to stop after its current transaction (processing and commit) and wait for it."""
        if timeout_s is None:
            timeout_s = self.processing_ms / 1000 + 2 * self.commit_timeout_s + CALL_TIMEOUT_S + STOP_MARGIN_S
        super().stop(timeout_s)

    @property
    def reads(self) -> int:
        """Input records read, over every process of this pipeline."""
        return self.input.count

    @property
    def open_transaction(self) -> OpenTxn | None:
        """The current process's transaction that has no outcome yet (what a test kills into)."""
        return None if self.book is None else self.book.open

    # ------------------------------------------------------------ what the process says

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """Input lines go to the consumer's formatting; output sends are formatted here as ProducerClient's
        (plus the input they were made from), transactions follow ProducerClient's book."""
        book = self.book
        assert book is not None
        reads = [line for line in lines if line[:2] in INPUT_TAGS or line == b"D"]
        if reads:
            self.input.on_lines(name, reads)
        out: list[bytes] = []
        producer, topic = json_line(name), self._topic_json
        for line in lines:
            tag = line[:2]
            if tag == b"J ":
                seq, from_producer, from_seq, invoke_ns = joined_fields(line)
                if book.open is None:
                    raise ProtocolError(f"output seq {seq.decode()} announced outside a transaction")
                self.pending.invoke(int(seq), 1, int(invoke_ns))
                book.claim(int(seq), 1)
                self._sources[int(seq)] = (b"null" if from_producer == b"-" else json_line(from_producer.decode()),
                                           as_json_int(from_seq))
            elif tag == b"S ":
                status, seq, partition, offset, complete_ns, error = completed_fields(line)
                invoke_ns = self.pending.complete(int(seq))
                if invoke_ns is None:
                    continue
                self.counts.add(status.decode())
                if status == b"ok" and book.open is not None:  # outputs are delivered before their commit
                    self.open_acked += 1
                from_producer, from_seq = self._sources.pop(int(seq))
                out.append(PIPELINE_SEND % (producer, seq, topic, seq, as_json_int(partition), as_json_int(offset),
                                            status, b"null" if error == b"-" else json_line(error.decode()),
                                            invoke_ns, complete_ns, txn_json(book, int(seq)), from_producer,
                                            from_seq))
            elif tag in (b"T ", b"C ", b"O "):
                m = parse(line)
                if isinstance(m, TxnBegun):
                    self.open_acked = 0
                self._on_txn(name, book, m)  # type: ignore[arg-type]
            elif tag not in INPUT_TAGS and tag != b"H " and line not in (b"D", b"E"):
                raise ProtocolError(f"not a pipeline's protocol line: {line[:80]!r}")
        if out:
            self.sends.write_lines(out)

    def _record(self, producer: str, seq: int, status: str, invoke_ns: int, partition: int | None,
                offset: int | None, error: str | None, complete_ns: int, txn: int | None) -> dict[str, Any]:
        """A sends line written as a dict (what a dead process left): ProducerClient's, plus the input."""
        from_producer, from_seq = self._sources.pop(seq)
        return ordered(SEND_FIELDS, {
            **super()._record(producer, seq, status, invoke_ns, partition, offset, error, complete_ns, txn),
            "from_producer": json.loads(from_producer), "from_seq": json.loads(from_seq)}, PIPELINE_SEND_FIELDS)

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """The input side forgets a batch cut short; the output side writes what the process never reported
        as ``unknown``, and a transaction it left open as ``unknown`` too (the coordinator aborts it when the next
        process fences it, or when it times out)."""
        self.input.on_exit(name, clean, how)
        super().on_exit(name, clean, how)

    # ------------------------------------------------------------ the harness waits for it

    def wait_caught_up(self, partitions: int, timeout_s: float) -> bool:
        """Wait until the group's committed offsets reach the end of each of the input's ``partitions`` (as a
        read_committed reader sees it: the last stable offset); False when they did not within ``timeout_s``.

        The harness calls it once the producers stopped and before it stops
        the pipeline, so that the pipeline's input is all processed (or the
        history says how much was not).
        """
        behind: list[str] = []

        @retry(stop=stop_after_delay(timeout_s), wait=wait_fixed(1), retry=retry_if_result(bool),
               retry_error_callback=lambda state: state.outcome.result())  # type: ignore[union-attr]
        def lag() -> list[str]:
            # a new admin client each time: after a leader change an old one may answer from stale metadata
            admin = AdminClient({"bootstrap.servers": self.bootstrap_servers,
                                 "client.id": f"kchaos-{self.base_name}-lag"}, logger=RDKAFKA_LOG)
            behind[:] = input_lag(admin, self.group, self.input_topic, partitions)
            return behind

        if lag():
            log.warning("%s did not catch up with its input within %.0fs (partition: committed/end) %s",
                        self.base_name, timeout_s, ", ".join(behind))
            return False
        return True


def input_lag(admin: AdminClient, group: str, topic: str, partitions: int) -> list[str]:
    """``partition: committed/end`` of each partition of ``topic`` whose committed offset in ``group`` is below
    its last stable offset (a partition or group that does not answer is behind too)."""
    ends = end_offsets(admin, topic, partitions, ISOLATION, CALL_TIMEOUT_S)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    try:
        result = admin.list_consumer_group_offsets([request], request_timeout=CALL_TIMEOUT_S)[group].result(
            timeout=CALL_TIMEOUT_S)
    except (KafkaException, TimeoutError) as e:
        return [f"no committed offsets of group {group}: {e}"]
    committed = {tp.partition: max(tp.offset, 0) for tp in result.topic_partitions}
    return [f"{p}: {committed.get(p, 0)}/{ends.get(p, '?')}" for p in range(partitions)
            if p not in ends or committed.get(p, 0) < ends[p]]


if __name__ == "__main__":
    child_main(pipe)
