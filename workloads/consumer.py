"""Application consumers in a group, as processes of their own, and the final read-back of every partition.

A consumer process (``python -m workloads.consumer SPEC``) models the
application: it polls a batch, processes it (``processing_ms`` per batch,
spread over its records) and only then records each record as a ``live``
read. Commits are ``auto`` (librdkafka's timer commits the offsets stored
at poll time, the client's default) or ``manual`` (synchronously, once the
batch is processed). So a consumer killed between poll and the end of
processing skips the rest of its batch under auto-commit
(``consumer_skipped``) and is handed the processed part again under manual
commit (``consumer_redelivered``): the anomalies a real application meets.

Processed records go to the harness in slices of at most ``SLICE_MS`` (one
write each; the whole batch in one write when processing takes no time).

The final read-back runs in the harness: it assigns every partition with no
group, reads from the beginning to the high watermark and records ``final``
reads plus one ``final-read`` event per partition saying whether it got there.
A transactional run reads back twice: ``read_uncommitted`` (everything
written) and ``read_committed`` (what the transactions made visible), so the
checker can tell "never written" from "written but not visible".
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from concurrent.futures import Future
from collections.abc import Callable
from typing import Any, Literal

from confluent_kafka import (OFFSET_BEGINNING, Consumer, IsolationLevel, KafkaError, KafkaException, Message,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, OffsetSpec

from catalogue.history import LIVE_READ_FIELDS, PIPELINE_READ_FIELDS, READ_FIELDS
from rundir.records import head, ordered, template
from workloads.child import LineOut, child_main, say_hello
from workloads.client import ClientIdentity, ClientProcess, Library, WorkloadError
from workloads.history import RDKAFKA_LOG, History, HistoryWriter, RunClock, json_line
from workloads.messages import decode, decode_source
from workloads.protocol import (BATCH_DONE, AssignmentChanged, BatchDone, Polled, as_json_int, assignment_changed,
                                parse, polled, processed_fields)

CommitMode = Literal["auto", "manual"]
Isolation = Literal["read_committed", "read_uncommitted"]
# librdkafka's isolation.level when none is set (with librdkafka 2.16 an open transaction's records are not
# delivered, and get_watermark_offsets answers the last stable offset)
DEFAULT_ISOLATION: Isolation = "read_committed"
# each client's own default: the Java consumer reads uncommitted unless told otherwise
DEFAULT_ISOLATIONS: dict[Library, Isolation] = {"librdkafka": DEFAULT_ISOLATION, "java": "read_uncommitted"}
FINAL_READERS: dict[Isolation, str] = {"read_uncommitted": "final-reader", "read_committed": "final-reader-committed"}
LISTING = {"read_committed": IsolationLevel.READ_COMMITTED, "read_uncommitted": IsolationLevel.READ_UNCOMMITTED}
BATCH = 500
# How long librdkafka waits before it fetches again for a partition whose local queue is full (queued.min.messages,
# 100k records): its default, 1 s, leaves a consumer that keeps up idle between fetches, and 0 makes its threads
# spin a whole core while the application is slow; 100 ms does neither (the figures: benchmarks/README.md,
# "Figures moved out of the code"). The Java consumer has no such pause. Only how soon the next fetch goes out
# changes, no delivery or commit semantics: application consumers take it unless the scenario's config sets the
# key, and the read-back always.
FETCH_BACKOFF = {"fetch.queue.backoff.ms": 100}
BATCH_DONE_LINE = BATCH_DONE.encode()
# the read-back's consume() size: small enough that a batch's messages and lines stay in the CPU's cache while
# they are formatted (the sizes compared: benchmarks/README.md)
READ_BACK_BATCH = 500
SLICE_MS = 100          # processed records reach the harness at least this often
STOP_MARGIN_S = 30      # beyond one batch's processing, before a stopping consumer is killed


def consumer_settings(config: dict[str, Any], bootstrap_servers: str, name: str, group: str,
                      commit: CommitMode, isolation: Isolation | None = None) -> dict[str, Any]:
    """The scenario's librdkafka settings plus what the harness sets itself (scenario validation checks these)."""
    settings = {"auto.offset.reset": "earliest", **config, "bootstrap.servers": bootstrap_servers,
                "group.id": group, "client.id": f"kchaos-{name}", "enable.auto.commit": commit == "auto"}
    if isolation is not None:
        settings["isolation.level"] = isolation
    return settings


def librdkafka_consumer_settings(config: dict[str, Any], bootstrap_servers: str, name: str, group: str,
                                 commit: CommitMode, isolation: Isolation | None = None) -> dict[str, Any]:
    """consumer_settings for a librdkafka consumer: FETCH_BACKOFF unless the scenario's config says otherwise."""
    return {**FETCH_BACKOFF, **consumer_settings(config, bootstrap_servers, name, group, commit, isolation)}


def effective_isolation(config: dict[str, Any], isolation: Isolation | None,
                        client: Library = "librdkafka") -> Isolation:
    """The isolation.level a consumer really reads with: the one asked for, the config's, or its client's default."""
    return isolation or config.get("isolation.level") or DEFAULT_ISOLATIONS[client]


def librdkafka_consumer_identity(settings: dict[str, Any]) -> dict[str, Any]:
    """What decides a librdkafka consumer's at-least-once / exactly-once behaviour, its defaults filled in."""
    return {"isolation.level": effective_isolation(settings, None),
            "enable.auto.commit": settings["enable.auto.commit"],
            "auto.offset.reset": settings["auto.offset.reset"],
            "auto.commit.interval.ms": settings.get("auto.commit.interval.ms", 5000)}


def read_record(msg: Message, consumer: str, group: str | None, phase: str, time_ns: int,
                isolation: Isolation, assignment: int | None = None) -> dict[str, Any]:
    """A reads.jsonl line's record, its fields in the catalogue's order (``assignment``: a live read's)."""
    value = msg.value()
    producer, seq = decode(value)
    record = {"consumer": consumer, "group": group, "phase": phase, "topic": msg.topic(),
              "partition": msg.partition(), "offset": msg.offset(), "producer": producer, "seq": seq,
              "time_ns": time_ns, "isolation": isolation}
    if assignment is not None:
        record["assignment"] = assignment
    from_producer, from_seq = decode_source(value)
    if from_producer is not None:  # a pipeline's output: which input it was made from
        record["from_producer"], record["from_seq"] = from_producer, from_seq
    return ordered(READ_FIELDS, record, LIVE_READ_FIELDS + PIPELINE_READ_FIELDS)


def reader_constants(consumer: str, group: str | None, phase: str, topic: str,
                     isolation: Isolation | None = None, assignment: int | None = None) -> dict[str, bytes]:
    """The fields every reads.jsonl line of one reader shares (within one assignment, for a live reader), as
    JSON."""
    constants = {"consumer": json_line(consumer), "group": json_line(group), "phase": json_line(phase),
                 "topic": json_line(topic)}
    if isolation is not None:
        constants["isolation"] = json_line(isolation)
    if assignment is not None:
        constants["assignment"] = json_line(assignment)
    return constants


def read_line_head(consumer: str, group: str | None, phase: str, topic: str) -> bytes:
    """A reads.jsonl line up to its partition's value, as ``read_record`` orders the fields: the part every
    line of one reader shares, by which the harness tells that reader's lines."""
    return head(READ_FIELDS, reader_constants(consumer, group, phase, topic))


def read_line(consumer: str, group: str | None, phase: str, topic: str, isolation: Isolation, numbers: bytes,
              source: bool = False, assignment: int | None = None) -> bytes:
    """One reader's reads.jsonl line as a %-format of partition and offset (``numbers``: ``%d`` for ints,
    ``%s`` for digits as bytes), producer and seq (JSON), time_ns (digits) and, with ``source``, from_producer
    and from_seq (JSON): built once per reader (per assignment, for a live one: ``assignment``) from the
    catalogue's field order."""
    placeholders = {"partition": numbers, "offset": numbers, "producer": b"%s", "seq": b"%s", "time_ns": b"%s"}
    if source:
        placeholders |= {"from_producer": b"%s", "from_seq": b"%s"}
    fields = (*READ_FIELDS, *(LIVE_READ_FIELDS if assignment is not None else ()),
              *(PIPELINE_READ_FIELDS if source else ()))
    return template(fields, reader_constants(consumer, group, phase, topic, isolation, assignment), placeholders)


# a producer's value, b"<producer>:<seq>:<padding>" (messages.encode), whose line needs no dict: seq as JSON writes
# it (no leading zero, no sign), padding with no colon (a pipeline's output has two more fields)
PLAIN_VALUE = re.compile(rb"([^:]*):(0|[1-9][0-9]*):[^:]*\Z")


class ReadLines:
    """One librdkafka reader's history lines, formatted from each record's fields with no dict per record: the
    read-back (every record, once per isolation, in the harness) and an application consumer (every record it
    processes, in its own process, which sends the lines to the harness ready to write). A value kchaos did not
    write the usual way (a pipeline's output, anything foreign) goes through ``read_record``; both give the same
    bytes."""

    def __init__(self, consumer: str, group: str | None, phase: str, topic: str, isolation: Isolation,
                 assignment: int | None = None) -> None:
        """``assignment``: a live reader's assignment number (``reassigned`` changes it)."""
        self.consumer, self.group, self.phase, self.topic, self.isolation = consumer, group, phase, topic, isolation
        self.reassigned(assignment)
        self.producers: dict[bytes, bytes] = {}  # a run has a handful: each is JSON-encoded once

    def reassigned(self, assignment: int | None) -> None:
        """Later lines carry this assignment number (None: none, a reader outside any group)."""
        self.assignment = assignment
        self.line = read_line(self.consumer, self.group, self.phase, self.topic, self.isolation, b"%d",
                              assignment=assignment)

    def lines(self, msgs: list[Message], time_ns: int, high: dict[int, int] | None = None) -> list[bytes]:
        """The lines of records read at ``time_ns`` (errors skipped); with ``high``, only those below their
        partition's high watermark. One loop with the constants bound once, one regex to take a value apart and
        one format (read_line's) per record, and no call per record: this runs for every record read."""
        line, producers, slow, match = self.line, self.producers, self._slow_line, PLAIN_VALUE.match
        now = b"%d" % time_ns
        out: list[bytes] = []
        append = out.append
        for msg in msgs:
            if msg.error() is not None:
                continue
            partition, offset = msg.partition(), msg.offset()
            if high is not None and offset >= high[partition]:
                continue
            m = match(msg.value() or b"")
            if m is not None:
                producer, seq = m.groups()
                known = producers.get(producer)
                if known is None:
                    known = producers[producer] = self._producer_json(producer)
                if known:
                    append(line % (partition, offset, known, seq, now))
                    continue
            append(slow(msg, time_ns))
        return out

    def _slow_line(self, msg: Message, time_ns: int) -> bytes:
        """A value kchaos did not write the usual way: through the record's dict (the same bytes)."""
        return json_line(read_record(msg, self.consumer, self.group, self.phase, time_ns, self.isolation,
                                     self.assignment))

    @staticmethod
    def _producer_json(producer: bytes) -> bytes:
        """The producer's name as JSON, or b"" when it is not UTF-8 (that value takes the slow path)."""
        try:
            return json_line(producer.decode())
        except UnicodeDecodeError:
            return b""


# ---------------------------------------------------------------------- the consumer process


def slices(batch: list[Message], processing_ms: float) -> list[list[Message]]:
    """The batch cut into consecutive slices, one per SLICE_MS of processing (one slice when it takes none)."""
    n = max(1, min(len(batch), math.ceil(processing_ms / SLICE_MS)))
    size = math.ceil(len(batch) / n)
    return [batch[i:i + size] for i in range(0, len(batch), size)]


class Assignments:
    """A consumer process's assignment changes, numbered in the order its rebalance callbacks ran: each one is an
    ``A`` line to the harness, and its number is what the process's later live reads carry (``on_change``), so
    the checkers can tell reads within one assignment from reads across a rebalance. A callback with no
    partitions (an incremental rebalance that moved none of this process's) changes nothing."""

    def __init__(self, out: LineOut, clock: RunClock, on_change: Callable[[int], None] = lambda number: None) -> None:
        self.out, self.clock, self.on_change = out, clock, on_change
        self.number = 0

    def changed(self, change: str, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        self.number += 1
        self.out.send([assignment_changed(self.number, change, [tp.partition for tp in partitions],
                                          self.clock.now_ns())])
        self.on_change(self.number)

    def callbacks(self, then: Callable[[Consumer, list[TopicPartition]], None] | None = None) -> dict[str, Any]:
        """subscribe()'s on_assign, on_revoke and on_lost: each records its change, then calls ``then``."""
        def callback(change: str) -> Callable[[Consumer, list[TopicPartition]], None]:
            def changed(consumer: Consumer, partitions: list[TopicPartition]) -> None:
                self.changed(change, partitions)
                if then is not None:
                    then(consumer, partitions)
            return changed
        return {f"on_{name}": callback(change) for name, change in
                (("assign", "assigned"), ("revoke", "revoked"), ("lost", "lost"))}


class ConsumeLoop:
    """Poll, process, record, commit (manual) until stopped; a stop lets the current batch finish."""

    def __init__(self, spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
        self.topic: str = spec["topic"]
        self.commit: CommitMode = spec["commit"]
        self.processing_ms: float = spec["processing_ms"]
        self.clock = clock
        self.stop = stop
        self.out = out
        self.settings = librdkafka_consumer_settings(spec["config"], spec["bootstrap_servers"], spec["name"],
                                                     spec["group"], self.commit, spec.get("isolation"))
        self.consumer = Consumer(self.settings, logger=RDKAFKA_LOG)
        # processed records go to the harness as reads.jsonl lines, ready to write
        self.read_lines = ReadLines(spec["name"], spec["group"], "live", self.topic,
                                    effective_isolation(self.settings, None), assignment=0)
        self.assignments = Assignments(out, clock, self.read_lines.reassigned)

    def run(self) -> None:
        self.consumer.subscribe([self.topic], **self.assignments.callbacks())
        say_hello(self.out, librdkafka_consumer_identity(self.settings))
        try:
            while not self.stop.is_set():
                batch = [m for m in self.consumer.consume(BATCH, timeout=0.5) if m.error() is None]
                if batch:
                    self._process(batch)
        finally:
            self.consumer.close()

    def _process(self, batch: list[Message]) -> None:
        lines = [polled(len(batch), self.clock.now_ns()).encode()]
        parts = slices(batch, self.processing_ms)
        if self.processing_ms > 0:  # say so now: the harness knows a batch is being processed
            self.out.send_bytes(lines)
            lines = []
        for part in parts:
            if self.processing_ms > 0:
                time.sleep(self.processing_ms / 1000 / len(parts))  # the application at work
            lines += self.read_lines.lines(part, self.clock.now_ns())
            if part is parts[-1] and self.commit == "auto":
                lines.append(BATCH_DONE_LINE)
            self.out.send_bytes(lines)
            lines = []
        if self.commit == "manual":
            self._commit(batch)
            self.out.send_bytes([BATCH_DONE_LINE])

    def _commit(self, batch: list[Message]) -> None:
        """Commit what was processed: past the last record of each partition in the batch."""
        try:
            self.consumer.commit(offsets=batch_offsets(self.topic, batch), asynchronous=False)
        except KafkaException:
            pass  # a rebalance or a broker fault: these records will be redelivered


def batch_offsets(topic: str, batch: list[Message]) -> list[TopicPartition]:
    """The offsets that commit a processed batch: past the last record of each of its partitions."""
    upto: dict[int, int] = {}
    for msg in batch:
        upto[msg.partition()] = max(upto.get(msg.partition(), -1), msg.offset() + 1)
    return [TopicPartition(topic, p, o) for p, o in upto.items()]


def consume(spec: dict[str, Any], clock: RunClock, stop: threading.Event, out: LineOut) -> None:
    ConsumeLoop(spec, clock, stop, out).run()


# ---------------------------------------------------------------------- the harness's handle


class ConsumerClient(ClientProcess):
    """One consumer of the application's group; a restarted one joins the same group (c0, c0.1, ...)."""

    role = "consumer"
    module = "workloads.consumer"

    def __init__(self, name: str, bootstrap_servers: str, topic: str, group: str, commit: CommitMode,
                 config: dict[str, Any], reads: HistoryWriter, clock: RunClock, processing_ms: float = 0,
                 isolation: Isolation | None = None, client: Library = "librdkafka",
                 kafka_version: str | None = None, client_version: str | None = None) -> None:
        """``isolation``: the isolation.level to read with (None: the config's, else the client's default)."""
        super().__init__(name, clock, client, kafka_version, client_version)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.group = group
        self.commit = commit
        self.config = config
        self.reads = reads
        self.processing_ms = processing_ms
        self.isolation = isolation
        self._isolation: Isolation = effective_isolation(config, isolation, client)
        self._lines: dict[str, tuple[bytes, bytes]] = {}  # process name -> its lines' head, and R lines' format
        # what an A line (a rebalance callback of one of its processes) is told to: the run writes an event
        self.on_assignment: Callable[[str, AssignmentChanged], None] | None = None
        self.count = 0            # live reads recorded, over every process of this consumer
        self.batches_polled = 0
        self.batches_done = 0
        self.last_polled = 0      # records in the batch polled last
        self._producers: dict[bytes, bytes] = {}

    @property
    def processing(self) -> bool:
        """A batch was polled and is not processed yet (what a test kills into)."""
        return self.batches_polled > self.batches_done

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic, "group": self.group,
                "commit": self.commit, "config": self.config, "processing_ms": self.processing_ms,
                "isolation": self.isolation}

    def stop(self, timeout_s: float | None = None) -> None:
        super().stop(self.processing_ms / 1000 + STOP_MARGIN_S if timeout_s is None else timeout_s)

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """Processed records become live reads: a librdkafka process sends their reads.jsonl lines ready to write
        (checked to be this consumer's), the Java one ``R`` lines, formatted here from the protocol's fields.
        The ready lines are picked out first, in one pass: they are nearly all of a fast consumer's lines."""
        known = self._lines.get(name)
        if known is None:
            known = self._lines[name] = (read_line_head(name, self.group, "live", self.topic),
                                         self._read_line(name, 0))
        head = known[0]
        out = [line for line in lines if line.startswith(head)]
        if len(out) < len(lines):
            self._other_lines(name, [line for line in lines if not line.startswith(head)], out)
        if out:
            self.reads.write_lines(out)
            self.count += len(out)

    def _read_line(self, name: str, assignment: int) -> bytes:
        """The format of a process's live reads in one of its assignments (read_line's)."""
        return read_line(name, self.group, "live", self.topic, self._isolation, b"%s", assignment=assignment)

    def _other_lines(self, name: str, lines: list[bytes], out: list[bytes]) -> None:
        """``R`` lines become reads in ``out``, in the format of process ``name``'s current assignment; ``A``
        changes that assignment (and is told to ``on_assignment``); ``P`` and ``D`` count batches; anything
        else is a ProtocolError."""
        head, read = self._lines[name]
        for line in lines:
            if line[:2] == b"R ":
                partition, offset, producer, seq, time_ns = processed_fields(line)
                out.append(read % (partition, offset, self._producer_json(producer), as_json_int(seq), time_ns))
                continue
            m = parse(line)
            if isinstance(m, AssignmentChanged):
                read = self._read_line(name, m.assignment)
                self._lines[name] = (head, read)
                if self.on_assignment is not None:
                    self.on_assignment(name, m)
            elif isinstance(m, Polled):
                self.batches_polled += 1
                self.last_polled = m.count
            elif isinstance(m, BatchDone):
                self.batches_done += 1

    def _producer_json(self, producer: bytes) -> bytes:
        """The producer id as JSON; a run has a handful, so each is encoded once."""
        known = self._producers.get(producer)
        if known is None:
            known = self._producers[producer] = b"null" if producer == b"-" else json_line(producer.decode())
        return known

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """Live reads already received stay; a batch cut short is simply not processed."""
        self.batches_done = self.batches_polled


def end_offsets(admin: AdminClient, topic: str, partitions: int, isolation: Isolation,
                timeout_s: float) -> dict[int, int]:
    """Each partition's end as a reader of ``isolation`` sees it: the high watermark (read_uncommitted) or the
    last stable offset (read_committed). Partitions that did not answer within ``timeout_s`` are left out."""
    return collect_ends(ask_ends(admin, topic, partitions, isolation, timeout_s), time.monotonic() + timeout_s)


EndRequests = list[dict[TopicPartition, Future[Any]]]


def ask_ends(admin: AdminClient, topic: str, partitions: int, isolation: Isolation, timeout_s: float) -> EndRequests:
    """The requests of end_offsets, sent and not awaited (several isolations can then wait side by side).

    One request per partition: librdkafka answers a request for several only
    when every leader has, so one frozen leader would hide them all.
    """
    return [admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()}, isolation_level=LISTING[isolation],
                               request_timeout=timeout_s)
            for p in range(partitions)]


def collect_ends(requests: EndRequests, deadline: float, errors: list[str] | None = None) -> dict[int, int]:
    """The answers of ask_ends that came by ``deadline`` (time.monotonic); the errors of the others go to
    ``errors``. After a leader change librdkafka's admin client may keep failing with FENCED_LEADER_EPOCH
    from stale metadata (seen for 5 s and more): the caller then asks through a new one."""
    ends: dict[int, int] = {}
    for request in requests:
        for tp, future in request.items():
            try:
                offset = future.result(timeout=max(0.0, deadline - time.monotonic())).offset
            except TimeoutError:
                continue
            except KafkaException as e:
                if errors is not None:
                    errors.append(e.args[0].name())
                continue
            if offset >= 0:  # a leader that came back mid-request may answer OFFSET_INVALID
                ends[tp.partition] = offset
    return ends


def read_back(bootstrap_servers: str, topic: str, partitions: int, history: History, timeout_s: float = 120,
              isolation: Isolation = "read_uncommitted", client: Library = "librdkafka",
              kafka_version: str | None = None) -> bool:
    """Read every partition from the beginning to its high watermark; True when all got there.

    Complete means the consumer's *position* reached the high watermark:
    transaction markers take offsets, so the last record's offset + 1 may
    never get there. A read_committed read-back cannot pass the last stable
    offset, so it waits (up to ``timeout_s``) for every open transaction
    below the high watermark to end; its final-read events say where the
    last stable offset stood. ``client`` java: Kafka's Java consumer of
    ``kafka_version`` reads (a process of its own, :class:`ReaderClient`);
    the high watermarks are asked by the harness either way.
    """
    clock = history.clock
    high = _ends(bootstrap_servers, topic, partitions, "read_uncommitted")
    if client == "java":
        reader = ReaderClient(bootstrap_servers, topic, partitions, high, isolation, timeout_s, history,
                              kafka_version)
        position = reader.read()
    else:
        position = _read_with_librdkafka(bootstrap_servers, topic, high, history, timeout_s, isolation)
    committed = isolation == "read_committed"
    stable = _ends(bootstrap_servers, topic, partitions, "read_committed") if committed else {}
    for p in range(partitions):
        extra = {"last_stable_offset": stable[p]} if committed else {}
        history.event("final-read", topic=topic, partition=p, high_watermark=high[p],
                      complete=position.get(p, 0) >= high[p], time_ns=clock.now_ns(), isolation=isolation, **extra)
    return all(position.get(p, 0) >= high[p] for p in range(partitions))


def _read_with_librdkafka(bootstrap_servers: str, topic: str, high: dict[int, int], history: History,
                          timeout_s: float, isolation: Isolation) -> dict[int, int]:
    """The read-back's reading, by a librdkafka consumer in the harness: each partition's final position."""
    consumer_name = FINAL_READERS[isolation]
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"kchaos-final-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": False,
                         "isolation.level": isolation, "client.id": f"kchaos-{consumer_name}", **FETCH_BACKOFF},
                        logger=RDKAFKA_LOG)
    try:
        tps = [TopicPartition(topic, p) for p in high]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in high])
        position = {p: 0 for p in high}
        lines = ReadLines(consumer_name, None, "final", topic, isolation)
        clock = history.clock
        deadline = time.monotonic() + timeout_s
        while any(position[p] < high[p] for p in position) and time.monotonic() < deadline:
            msgs = consumer.consume(READ_BACK_BATCH, timeout=0.5)
            now = clock.now_ns()  # one read time per batch: the records arrived together
            history.reads.write_lines(lines.lines(msgs, now, high))
            for tp in consumer.position(tps):
                if tp.offset >= 0:
                    position[tp.partition] = max(position[tp.partition], tp.offset)
        return position
    finally:
        consumer.close()


class ReaderClient(ClientProcess):
    """The final read-back by Kafka's Java consumer: a process that reads every partition to the high
    watermarks the harness measured, reports each record (``R``, with its source when a pipeline wrote it) and
    then each partition's position (``F <partition> <position>``), and ends by itself."""

    role = "reader"
    module = "workloads.consumer"  # never started as Python: librdkafka reads back in the harness itself

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int, high: dict[int, int],
                 isolation: Isolation, timeout_s: float, history: History, kafka_version: str | None) -> None:
        super().__init__(FINAL_READERS[isolation], history.clock, "java", kafka_version)
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partitions = partitions
        self.high = high
        self.isolation = isolation
        self.timeout_s = timeout_s
        self.reads = history.reads
        self.on_identity = lambda name, identity: record_identity(history, name, self.role, identity)
        self.positions: dict[int, int] = {}
        self._exit: str | None = None
        self._final_line = read_line(self.name, None, "final", topic, isolation, b"%s")
        self._final_line_from = read_line(self.name, None, "final", topic, isolation, b"%s", source=True)

    def spec(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap_servers, "topic": self.topic, "partitions": self.partitions,
                "high": {str(p): o for p, o in self.high.items()}, "isolation": self.isolation,
                "timeout_s": self.timeout_s}

    def read(self) -> dict[int, int]:
        """Run the reader to its end; each partition's position (a partition it never reported: none)."""
        self.start()
        try:
            self.wait_started()
            self.stop(self.timeout_s + STOP_MARGIN_S, ask=False)
        except WorkloadError as e:
            raise WorkloadError(f"the Java read-back failed: {e}") from None
        finally:
            self.abort()
        if self.failures:
            raise WorkloadError(f"the Java read-back failed: {'; '.join(self.failures)}")
        return self.positions

    def on_lines(self, name: str, lines: list[bytes]) -> None:
        out: list[bytes] = []
        for line in lines:
            tag = line[:2]
            if tag == b"R ":
                parts = line.split(b" ")
                source: tuple[bytes, ...] = ()
                if len(parts) == 8:  # a pipeline's output: the input it was made from follows
                    source = (json_line(parts[6].decode()), as_json_int(parts[7]))
                    line = b" ".join(parts[:6])
                partition, offset, producer, seq, time_ns = processed_fields(line)
                fields = (partition, offset, b"null" if producer == b"-" else json_line(producer.decode()),
                          as_json_int(seq), time_ns, *source)
                out.append((self._final_line_from if source else self._final_line) % fields)
            elif tag == b"F ":
                _, partition, position = line.split(b" ")
                self.positions[int(partition)] = int(position)
            else:
                parse(line)  # H, E: nothing to record; anything else is a ProtocolError
        if out:
            self.reads.write_lines(out)

    def on_exit(self, name: str, clean: bool, how: str) -> None:
        self._exit = how


def record_identity(history: History, name: str, role: str, identity: ClientIdentity) -> None:
    """A ``client`` event: which client library and version a workload process ran, with what settings, and
    (a Python process) the confluent-kafka release that ran it."""
    binding = {} if identity.binding is None else {"binding": identity.binding}
    history.event("client", client=identity.library, version=identity.version, **binding, process=name, role=role,
                  settings=identity.settings, time_ns=history.clock.now_ns())


def record_assignment(history: History, name: str, group: str, topic: str, m: AssignmentChanged) -> None:
    """An ``assignment`` event: a consumer process's rebalance callback, as its ``A`` line said it."""
    history.event("assignment", process=name, group=group, topic=topic, assignment=m.assignment, change=m.change,
                  partitions=list(m.partitions), time_ns=m.time_ns)


def read_back_both(bootstrap_servers: str, topic: str, partitions: int, history: History,
                   timeout_s: float = 120, client: Library = "librdkafka", kafka_version: str | None = None) -> bool:
    """A transactional run's read-back: read_uncommitted (what was written), then read_committed (what the
    transactions made visible, once the last stable offset caught up); True when both were complete."""
    uncommitted = read_back(bootstrap_servers, topic, partitions, history, timeout_s, "read_uncommitted", client,
                            kafka_version)
    committed = read_back(bootstrap_servers, topic, partitions, history, timeout_s, "read_committed", client,
                          kafka_version)
    return uncommitted and committed


def high_watermarks(bootstrap_servers: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's high watermark, retried as the read-back's ends are (KafkaException: not every one)."""
    return _ends(bootstrap_servers, topic, partitions, "read_uncommitted")


def _ends(bootstrap_servers: str, topic: str, partitions: int, isolation: Isolation) -> dict[int, int]:
    """end_offsets of every partition, retried for 30 s (each time by a new admin client, whose metadata is
    fresh): a read-back is worth nothing without them."""
    deadline = time.monotonic() + 30
    ends: dict[int, int] = {}
    while True:
        admin = AdminClient({"bootstrap.servers": bootstrap_servers, "client.id": "kchaos-final-reader-admin"},
                            logger=RDKAFKA_LOG)
        ends |= end_offsets(admin, topic, partitions, isolation, timeout_s=10)
        if len(ends) == partitions:
            return ends
        if time.monotonic() > deadline:
            missing = sorted(set(range(partitions)) - set(ends))
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                            f"no {isolation} end offset for {topic} partitions {missing}"))
        time.sleep(1)


if __name__ == "__main__":
    child_main(consume)
