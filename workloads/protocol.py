"""The line protocol a workload process speaks to the harness on its stdout.

One ASCII line per fact, fields separated by one space, ``-`` for null; a
child writes each poll's or batch's lines with a single write. The harness
answers on the child's stdin with ``stop`` (finish, then end); EOF on stdin
means the harness is gone and the child exits at once.

Producer::

    H <pid>                                        the Kafka client is up
    K <library> <version> <settings JSON> [<binding>]   which client it is (librdkafka | java), what it runs with,
                                                   and a Python process's binding (confluent-kafka/2.5.0)
    I <first seq> <count> <invoke_ns>              these seqs are about to be handed to produce()
    X <first seq> <count>                          ...but were not (stopped while the queue was full)
    S <status> <seq> <partition> <offset> <complete_ns> <error, may hold spaces>
    E                                              stopped cleanly; nothing more will come

A transactional producer also says (the seqs of ``I`` lines between ``T`` and
``O`` belong to that transaction)::

    T <txn> <begin_ns>                             a transaction begins
    C <txn> <intent> <invoke_ns>                   commit_transaction (commit) or abort_transaction (abort) called
    O <txn> <outcome> <complete_ns> <error, may hold spaces>   committed | aborted | unknown

An exactly-once pipeline speaks the consumer's lines for its input and the
transactional producer's for its output, announcing each output seq with
``J`` instead of ``I``::

    J <seq> <from_producer> <from_seq> <invoke_ns>  output seq is about to be produced, made from this input

Consumer::

    H <pid>
    P <count> <poll_ns>                            polled a batch, processing starts
    A <assignment> <change> <partitions> <time_ns>  a rebalance callback changed its partitions (assigned |
                                                   revoked | lost, these partitions, comma-separated): its
                                                   assignment number is now <assignment>, which its later live
                                                   reads carry
    {"consumer":...}                               a record the application has processed: its reads.jsonl
                                                   line, ready to write (the librdkafka consumer)
    R <partition> <offset> <producer> <seq> <time_ns>   ...the same as fields (the Java consumer; pipelines)
    D                                              the batch is processed (and committed, when manual)
    E

Share consumer (a member of a share group, KIP-932)::

    H <pid>
    K <library> <version> <settings JSON> [<binding>]
    V <partition> <offset> <producer> <seq> <delivery> <time_ns>   poll gave it this record, acquired, at the
                                                   broker's delivery count <delivery>
    Q <partition> <offset> <delivery> <ack> <result> <time_ns> <error>   its acknowledgement of that delivery
                                                   (accept | release | reject) and what the client reported of it
                                                   (ok | fail | unknown)
    E

The Java read-back (a reader process, no group)::

    H <pid>
    K <library> <version> <settings JSON>
    R <partition> <offset> <producer> <seq> <time_ns> [<from_producer> <from_seq>]   the source: a pipeline's output
    F <partition> <position>                       where the reader stopped on the partition
    E

The fields of each line are catalogue.history's LINE_FIELDS (the tests hold
these formatters and the Java program's to it).
A line cut off by a killed child is dropped: it stated nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple, Union

from catalogue.history import ASSIGNMENT_CHANGES, LINE_FIELDS, SEND_STATUSES, SHARE_ACKS, SHARE_RESULTS

NULL = "-"
STOP = b"stop\n"


class Hello(NamedTuple):
    pid: int


class Invoked(NamedTuple):
    first: int
    count: int
    invoke_ns: int


class Withdrawn(NamedTuple):
    first: int
    count: int


class Completed(NamedTuple):
    status: str            # ok | fail | unknown, as in sends.jsonl
    seq: int
    partition: int | None
    offset: int | None
    complete_ns: int
    error: str | None


class Joined(NamedTuple):
    seq: int               # an output of a pipeline...
    from_producer: str | None  # ...made from this input (None: a value kchaos did not write)
    from_seq: int | None
    invoke_ns: int


class ReadPosition(NamedTuple):
    partition: int
    position: int


class TxnBegun(NamedTuple):
    txn: int
    begin_ns: int


class TxnRequested(NamedTuple):
    txn: int
    intent: str            # commit | abort
    invoke_ns: int


class TxnOutcome(NamedTuple):
    txn: int
    outcome: str           # committed | aborted | unknown, as in txns.jsonl
    complete_ns: int
    error: str | None


class Polled(NamedTuple):
    count: int
    poll_ns: int


class Processed(NamedTuple):
    partition: int
    offset: int
    producer: str | None
    seq: int | None
    time_ns: int


class AssignmentChanged(NamedTuple):
    assignment: int        # the process's count of assignment changes, this one included
    change: str            # assigned | revoked | lost
    partitions: tuple[int, ...]
    time_ns: int


class Delivered(NamedTuple):
    partition: int
    offset: int
    producer: str | None
    seq: int | None
    delivery: int          # the broker's delivery count: 1 at the first
    time_ns: int


class Acknowledged(NamedTuple):
    partition: int
    offset: int
    delivery: int
    ack: str               # accept | release | reject
    result: str            # ok | fail | unknown, as a send's status
    time_ns: int
    error: str | None


class BatchDone(NamedTuple):
    pass


class End(NamedTuple):
    pass


Message = Union[Hello, Invoked, Withdrawn, Completed, Joined, TxnBegun, TxnRequested, TxnOutcome, Polled, Processed,
                AssignmentChanged, ReadPosition, Delivered, Acknowledged, BatchDone, End]


class ProtocolError(ValueError):
    """A line no workload process writes: a bug, never a fault to record."""


def _opt(value: object) -> str:
    return NULL if value is None else str(value)


# ------------------------------------------------------------------ child side: one str per line


def hello(pid: int) -> str:
    return f"H {pid}"


def identity(library: str, version: str, settings: dict[str, Any]) -> str:
    """``K``: the client library, its version and its effective settings (one JSON object, string values
    written as Kafka's Java client writes them: ``true``, not Python's ``True``; unset ones left out)."""
    values = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in settings.items() if v is not None}
    return f"K {library} {version} {json.dumps(values, separators=(',', ':'))}"


def with_binding(identity_line: str, name: str, version: str) -> str:
    """A ``K`` line with its optional last field, the binding that runs the library (a Python process's
    confluent-kafka: its release may be pinned apart from .venv's), one word: ``confluent-kafka/2.5.0``."""
    return f"{identity_line} {name}/{version}"


def invoked(first: int, count: int, invoke_ns: int) -> str:
    return f"I {first} {count} {invoke_ns}"


def withdrawn(first: int, count: int) -> str:
    return f"X {first} {count}"


def completed(status: str, seq: int, partition: int | None, offset: int | None, complete_ns: int,
              error: str | None) -> str:
    return f"S {status} {seq} {_opt(partition)} {_opt(offset)} {complete_ns} {_opt(error)}"


def joined(seq: int, from_producer: str | None, from_seq: int | None, invoke_ns: int) -> str:
    """``J``: output ``seq`` is about to be produced, made from input (from_producer, from_seq)."""
    return f"J {seq} {_opt(from_producer)} {_opt(from_seq)} {invoke_ns}"


def txn_begun(txn: int, begin_ns: int) -> str:
    return f"T {txn} {begin_ns}"


def txn_requested(txn: int, intent: str, invoke_ns: int) -> str:
    return f"C {txn} {intent} {invoke_ns}"


def txn_outcome(txn: int, outcome: str, complete_ns: int, error: str | None) -> str:
    return f"O {txn} {outcome} {complete_ns} {_opt(error)}"


def polled(count: int, poll_ns: int) -> str:
    return f"P {count} {poll_ns}"


def processed(partition: int, offset: int, producer: str | None, seq: int | None, time_ns: int) -> str:
    return f"R {partition} {offset} {_opt(producer)} {_opt(seq)} {time_ns}"


def assignment_changed(assignment: int, change: str, partitions: list[int], time_ns: int) -> str:
    """``A``: a rebalance callback gave, took back or lost these partitions (never none)."""
    return f"A {assignment} {change} {','.join(str(p) for p in sorted(partitions))} {time_ns}"


def delivered(partition: int, offset: int, producer: str | None, seq: int | None, delivery: int, time_ns: int) -> str:
    """``V``: a share consumer's poll gave it this record, at the broker's delivery count ``delivery``."""
    return f"V {partition} {offset} {_opt(producer)} {_opt(seq)} {delivery} {time_ns}"


def acknowledged(partition: int, offset: int, delivery: int, ack: str, result: str, time_ns: int,
                 error: str | None) -> str:
    """``Q``: what the client reported of the acknowledgement (``ack``) of one delivery."""
    return f"Q {partition} {offset} {delivery} {ack} {result} {time_ns} {_opt(error)}"


BATCH_DONE = "D"
END = "E"


def encode_lines(lines: list[str]) -> bytes:
    """The bytes of one write: every line newline-terminated."""
    return ("\n".join(lines) + "\n").encode()


# ------------------------------------------------------------------ harness side


STATUSES = tuple(s.encode() for s in SEND_STATUSES)
INTENTS = ("commit", "abort")
OUTCOMES = ("committed", "aborted", "unknown")


def completed_fields(line: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes]:
    """status, seq, partition, offset, complete_ns and error of an ``S`` line, checked but left as bytes.

    The harness copies them into sends.jsonl as they are (see ProducerClient.on_lines); ``-`` is null.
    """
    parts = line.split(b" ", 6)
    if len(parts) == 7:
        _, status, seq, partition, offset, complete_ns, error = parts
        if (status in STATUSES and seq.isdigit() and complete_ns.isdigit() and _int_or_null(partition)
                and _int_or_null(offset)):
            return status, seq, partition, offset, complete_ns, error
    raise ProtocolError(f"not a workload protocol line: {line[:80]!r}")


def processed_fields(line: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """partition, offset, producer, seq and time_ns of an ``R`` line, checked but left as bytes."""
    parts = line.split(b" ")
    if len(parts) == 6:
        _, partition, offset, producer, seq, time_ns = parts
        if partition.isdigit() and offset.isdigit() and _int_or_null(seq) and time_ns.isdigit() and producer:
            return partition, offset, producer, seq, time_ns
    raise ProtocolError(f"not a workload protocol line: {line[:80]!r}")


def joined_fields(line: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """seq, from_producer, from_seq and invoke_ns of a ``J`` line, checked but left as bytes."""
    parts = line.split(b" ")
    if len(parts) == 5:
        _, seq, from_producer, from_seq, invoke_ns = parts
        if seq.isdigit() and from_producer and _int_or_null(from_seq) and invoke_ns.isdigit():
            return seq, from_producer, from_seq, invoke_ns
    raise ProtocolError(f"not a workload protocol line: {line[:80]!r}")


def line_template(tag: str, fixed: dict[str, bytes], placeholders: dict[str, bytes]) -> bytes:
    """A ``tag`` line as a %-format, for a hot path with no call per line: its ``fixed`` fields have these
    values, the others their pattern from ``placeholders``, which names them in the line's order (the order of
    the format's arguments; catalogue.history's LINE_FIELDS, checked here)."""
    fields = LINE_FIELDS[tag]
    if tuple(f for f in fields if f not in fixed) != tuple(placeholders):
        raise ValueError(f"a {tag} line's other fields are {tuple(f for f in fields if f not in fixed)}")
    return b" ".join([tag.encode(), *(fixed[f].replace(b"%", b"%%") if f in fixed else placeholders[f]
                                      for f in fields)])


def integer_line(tag: str, fixed: dict[str, bytes], captured: tuple[str, ...]) -> re.Pattern[bytes]:
    """A ``tag`` line whose ``fixed`` fields have these values and whose others are integers, captured in the
    order ``captured`` names them: the line's own order (catalogue.history's LINE_FIELDS), checked here, so a
    caller that unpacks the groups cannot take one field for another."""
    fields = LINE_FIELDS[tag]
    if tuple(f for f in fields if f not in fixed) != captured:
        raise ValueError(f"a {tag} line's integer fields are {tuple(f for f in fields if f not in fixed)}")
    return re.compile(b" ".join([tag.encode(), *(re.escape(fixed[f]) if f in fixed else rb"([0-9]+)"
                                                  for f in fields)]))


def _int_or_null(field: bytes) -> bool:
    return field == b"-" or field.isdigit()


def as_json_int(field: bytes) -> bytes:
    """A checked integer field as JSON: itself, or ``null`` for ``-``."""
    return b"null" if field == b"-" else field


def parse(line: bytes) -> Message:
    """One line (without its newline) as a message; ProtocolError when it is none."""
    tag = line[:1]
    if tag == b"S":
        status, seq, partition, offset, complete_ns, error = completed_fields(line)
        return Completed(status.decode(), int(seq), _int(partition), _int(offset), int(complete_ns),
                         None if error == b"-" else error.decode())
    if tag == b"R":
        partition, offset, producer, seq, time_ns = processed_fields(line)
        return Processed(int(partition), int(offset), None if producer == b"-" else producer.decode(),
                         _int(seq), int(time_ns))
    try:
        if tag == b"I":
            _, first, count, invoke_ns = line.split(b" ")
            return Invoked(int(first), int(count), int(invoke_ns))
        if tag == b"P":
            _, count, poll_ns = line.split(b" ")
            return Polled(int(count), int(poll_ns))
        if tag == b"X":
            _, first, count = line.split(b" ")
            return Withdrawn(int(first), int(count))
        if tag == b"T":
            _, txn, begin_ns = line.split(b" ")
            return TxnBegun(int(txn), int(begin_ns))
        if tag == b"C":
            _, txn, intent, invoke_ns = line.split(b" ")
            if intent.decode() in INTENTS:
                return TxnRequested(int(txn), intent.decode(), int(invoke_ns))
        if tag == b"O":
            _, txn, outcome, complete_ns, error = line.split(b" ", 4)
            if outcome.decode() in OUTCOMES:
                return TxnOutcome(int(txn), outcome.decode(), int(complete_ns),
                                  None if error == b"-" else error.decode())
        if tag == b"J":
            seq, from_producer, from_seq, invoke_ns = joined_fields(line)
            return Joined(int(seq), None if from_producer == b"-" else from_producer.decode(), _int(from_seq),
                          int(invoke_ns))
        if tag == b"A":
            _, assignment, change, partitions, time_ns = line.split(b" ")
            if change.decode() in ASSIGNMENT_CHANGES:
                return AssignmentChanged(int(assignment), change.decode(),
                                         tuple(int(p) for p in partitions.split(b",")), int(time_ns))
        if tag == b"V":
            _, partition, offset, producer, seq, delivery, time_ns = line.split(b" ")
            return Delivered(int(partition), int(offset), None if producer == b"-" else producer.decode(), _int(seq),
                             int(delivery), int(time_ns))
        if tag == b"Q":
            _, partition, offset, delivery, ack, result, time_ns, error = line.split(b" ", 7)
            if ack.decode() in SHARE_ACKS and result.decode() in SHARE_RESULTS:
                return Acknowledged(int(partition), int(offset), int(delivery), ack.decode(), result.decode(),
                                    int(time_ns), None if error == b"-" else error.decode())
        if tag == b"F":
            _, partition, position = line.split(b" ")
            return ReadPosition(int(partition), int(position))
        if tag == b"H":
            _, pid = line.split(b" ")
            return Hello(int(pid))
        if line == b"D":
            return BatchDone()
        if line == b"E":
            return End()
    except ValueError:
        pass
    raise ProtocolError(f"not a workload protocol line: {line[:80]!r}")


def _int(field: bytes) -> int | None:
    return None if field == b"-" else int(field)


class LineSplitter:
    """Cuts a byte stream into lines; a cut-off last line stays behind (and is dropped at EOF)."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._rest + chunk
        lines = data.split(b"\n")
        self._rest = lines.pop()
        return lines

    @property
    def partial(self) -> bytes:
        return self._rest
