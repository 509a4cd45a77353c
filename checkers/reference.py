"""The pure-Python reference checker: a history in, a results.json verdict out.

This is the oracle the Spark checker is held to, so every anomaly is computed
the plainest way that still fits a million sends in memory: one pass over the
reads builds a few indexes keyed by message (producer, seq) and by position
(topic, partition, offset), one pass over the sends judges each message, and
whole lines are re-read from disk only for the examples.

Choices the catalogue's definitions leave open, made here so that another
checker can make the same ones:

- Several send lines for one (producer, seq): an ``ok`` line wins over
  ``unknown`` and ``fail`` (an acknowledgement is never downgraded), else the
  last line wins (noted). ``sent`` counts lines; ``acked``/``failed`` and the
  anomaly ``unknown`` count messages by the status of their winning line.
- Several final-read events for one partition: it is complete when any of
  them says so (the reads of every attempt are in reads.jsonl).
- An acknowledged send without a partition is judged against its whole
  topic: found anywhere in it, or lost when every partition of the topic had
  a complete final read.
- ``lost_unverifiable`` counts acknowledged messages absent from the final
  read whose partition's final read was incomplete (found ones are fine).
- A read whose value kchaos did not write (producer and seq null) is
  unexpected; having no identity, it counts once per position.
- ``consumer_skipped`` and ``consumer_redelivered`` count (group, message)
  pairs; live reads with no group take part in neither.
- Several committed events for one (group, partition): the last one wins; a
  null offset means the group never committed there.
- ``anomaly_ranges`` (checkers/anomalies.py): a divergent position is placed
  in time by the earliest ``complete_ns`` of the winning ok sends acknowledged
  there (in a transaction or not, as for divergence itself).
- Examples are the 20 smallest findings (by (producer, seq[, group]) or by
  position); an example's reads are the first 10 in reads.jsonl order; a
  divergent position's ``send`` is an ack there that some read there
  contradicts, else any ack there, the smallest (producer, seq) first.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkers.anomalies import (ANOMALIES, COUNTS, Promises, RangeEntry, anomaly_ranges, judgement_notes,
                                promises_from_scenario, repeated_sends_note, results_document, transaction_notes)
from checkers.history import (ABORTED, COMMITTED, FAIL, FINAL, INTENT_UNKNOWN, OK, UNKNOWN, History, Read, Send, Txn,
                              paused_gc, read_history)
from checkers.shares import SHARE_ANOMALIES, SHARE_TALLY, ShareFindings, share_examples, share_findings
from checkers.polls import POLL_ANOMALIES, SEND_ANOMALY, PollFinding, nonmonotonic_sends, poll_findings
from checkers.breakdown import breakdown_document, charged_entries, fault_rows, partition_rows, ranged_counts
from checkers.series import entries_per_second, second_of, series_document
from rundir.documents import committed_offsets, fault_windows, final_read_completeness, pipelines, read_scenario
from rundir.layout import RunDir, require_history

Msg = tuple[str, int]  # (producer, seq): a message
Part = tuple[str, int]  # (topic, partition)
Pos = tuple[str, int, int]  # (topic, partition, offset)
GroupMsg = tuple[str, int, str]  # (producer, seq, group): a message as seen by one consumer group
TxnKey = tuple[str, int]  # (producer, txn): one transaction

MAX_EXAMPLES = 20
MAX_EXAMPLE_READS = 10
# anomalies found per message or position; torn_transaction (per transaction), hanging_transaction (per
# partition) and the poll anomalies (per pair of reads) have examples of their own
MESSAGE_ANOMALIES = tuple(a for a in ANOMALIES if a not in ("torn_transaction", "hanging_transaction",
                                                            *POLL_ANOMALIES))

_UNREAD = object()  # at_position has nothing for a position nobody read


# --- what the history says, indexed --------------------------------------------------------------


@dataclass
class ReadIndex:
    """The reads, reduced to what the anomalies need."""

    final_positions: dict[Msg, list[Pos]] = field(default_factory=dict)  # distinct final-read positions
    live: dict[str | None, Counter[Msg]] = field(default_factory=dict)  # group -> live reads per message
    at_position: dict[Pos, Msg | None] = field(default_factory=dict)  # first message read there (None: foreign)
    divergent: set[Pos] = field(default_factory=set)  # two reads at one position disagree
    foreign: set[Pos] = field(default_factory=set)  # positions holding a value kchaos did not write
    partitions: set[Part] = field(default_factory=set)
    live_reads: int = 0
    final_reads: int = 0
    per_partition: Counter[tuple[str, int, bool]] = field(default_factory=Counter)  # (topic, partition, final)
    # what read_committed readers saw: final-read positions per message, every message any of them read, and
    # per pipeline input (from_producer, from_seq) the distinct positions of its output records
    committed_positions: dict[Msg, list[Pos]] = field(default_factory=dict)
    read_committed: set[Msg] = field(default_factory=set)
    outputs: dict[Msg, list[Pos]] = field(default_factory=dict)

    def read_live(self, msg: Msg) -> bool:
        return any(msg in counts for counts in self.live.values())


def index_reads(reads: Iterable[Read]) -> ReadIndex:
    """One pass over the reads: positions per message, messages per position, live reads per group."""
    index = ReadIndex()
    final_positions, at_position, live = index.final_positions, index.at_position, index.live
    per_partition = index.per_partition
    for r in reads:
        pos = (r.topic, r.partition, r.offset)
        msg = None if r.producer is None else (r.producer, r.seq)
        seen = at_position.get(pos, _UNREAD)
        if seen is _UNREAD:
            at_position[pos] = msg
        elif seen != msg:
            index.divergent.add(pos)
        final = r.phase == FINAL
        per_partition[(r.topic, r.partition, final)] += 1
        if msg is None:
            index.foreign.add(pos)
            continue
        if r.committed:
            index.read_committed.add(msg)
            if final:
                _add_position(index.committed_positions, msg, pos)
                if r.from_producer is not None:
                    _add_position(index.outputs, (r.from_producer, r.from_seq), pos)
        if final:
            positions = final_positions.get(msg)
            if positions is None:
                final_positions[msg] = [pos]
            elif pos not in positions:
                positions.append(pos)
        else:
            counts = live.get(r.group)
            if counts is None:
                counts = live[r.group] = Counter()
            counts[msg] += 1
    index.partitions = {(topic, partition) for topic, partition, _ in at_position}
    index.final_reads = sum(n for (_, _, final), n in per_partition.items() if final)
    index.live_reads = sum(n for (_, _, final), n in per_partition.items() if not final)
    return index


def _add_position(positions: dict[Msg, list[Pos]], msg: Msg, pos: Pos) -> None:
    known = positions.get(msg)
    if known is None:
        positions[msg] = [pos]
    elif pos not in known:
        known.append(pos)


def winning_sends(sends: list[Send], notes: list[str]) -> dict[Msg, Send]:
    """Each message's send; of several lines, the last ok line wins, else the last line (an ack is never downgraded)."""
    winners = {(s.producer, s.seq): s for s in sends}
    repeats = len(sends) - len(winners)
    if repeats:
        notes.append(repeated_sends_note(repeats))
        winners.update({(s.producer, s.seq): s for s in sends if s.status == OK})
    return winners


# --- the anomalies ---------------------------------------------------------------------------------


@dataclass
class Findings:
    """What each anomaly found: messages (or (producer, seq, group) for the consumer ones) and positions."""

    messages: dict[str, set[Msg] | set[GroupMsg]] = field(default_factory=lambda: {a: set() for a in ANOMALIES})
    positions: dict[str, set[Pos]] = field(default_factory=lambda: {a: set() for a in ANOMALIES})
    unknown_found: int = 0
    lost_unverifiable: int = 0
    unverifiable_in: Counter[tuple[str, int | None]] = field(default_factory=Counter)  # lost_unverifiable by partition
    unordered: int = 0  # out-of-order acks of producers that did not promise order (only noted)
    torn: dict[TxnKey, tuple[str, list[int], list[int]]] = field(default_factory=dict)  # outcome, visible, missing
    hanging: dict[Part, dict[str, Any]] = field(default_factory=dict)  # the longest stuck span per partition
    pipeline_unprocessed: int = 0
    pipeline_unverifiable: int = 0
    polls: list[PollFinding] = field(default_factory=list)  # every poll anomaly's findings, in reads.jsonl order
    shares: ShareFindings | None = None  # the share group's (checkers/shares.py)

    def count(self, anomaly: str) -> int:
        if anomaly == "torn_transaction":
            return len(self.torn)
        if anomaly == "hanging_transaction":
            return len(self.hanging)
        if anomaly in POLL_ANOMALIES:
            return sum(1 for f in self.polls if f.anomaly == anomaly)
        if anomaly in SHARE_ANOMALIES:
            return 0 if self.shares is None else self.shares.count(anomaly)
        return len(self.messages[anomaly]) + len(self.positions[anomaly])


class Judge:
    """Applies the definitions to one history."""

    def __init__(self, history: History, promises: Promises, notes: list[str]) -> None:
        self.promises = promises
        self.notes = notes
        self.sends = winning_sends(history.sends, notes)
        self.history_sends, self.history_reads = history.sends, history.reads  # every line, in file order
        self.shares = history.shares
        self.share_final: dict[Pos, tuple[str | None, int | None]] = {}  # set by run
        self.reads = index_reads(history.reads)
        self.complete = final_read_completeness(history.events)
        self.complete_committed = final_read_completeness(history.events, committed=True)
        self.txns = transaction_outcomes(history.txns, self.sends.values())
        self.events = history.events
        self.committed = committed_offsets(history.events)
        self.topic_partitions: dict[str, list[Part]] = defaultdict(list)
        for part in sorted(self.complete.keys() | self.complete_committed.keys()):
            self.topic_partitions[part[0]].append(part)
        self.unread_acks: dict[Pos, Msg] = {}  # the first ack at each position no read saw
        self.found = Findings()

    def run(self) -> Findings:
        for msg, send in self.sends.items():
            if send.status == OK:
                self.judge_ack(msg, send)
            elif send.status == FAIL:
                if msg in self.visible_positions(send):
                    self.found.messages["failed_but_present"].add(msg)
            else:
                self.judge_unknown(msg, send)
            if send.txn is not None and msg in self.reads.read_committed and not self.may_commit(send):
                self.found.messages["aborted_read"].add(msg)
        self.judge_reads()
        self.judge_order()
        self.found.messages[SEND_ANOMALY] = nonmonotonic_sends(self.history_sends)
        self.judge_groups()
        self.found.polls = poll_findings(self.history_reads, committed_read_back=bool(self.complete_committed))
        self.judge_transactions()
        self.judge_pipelines()
        self.found.hanging = hanging_partitions(self.events, self.promises.hanging_after_ms)
        self.share_final = self.final_records()
        self.found.shares = share_findings(self.shares, self.events, self.share_final,
                                           {m for m, s in self.sends.items() if s.status == OK}, self.complete)
        return self.found

    def final_records(self) -> dict[Pos, tuple[str | None, int | None]]:
        """What the read_uncommitted final read found at each position (a share group's view of the log), read
        once by ``run`` (``share_final``): the share judgement and its examples both use it."""
        if not self.shares:
            return {}
        return {(r.topic, r.partition, r.offset): (r.producer, r.seq) for r in self.history_reads
                if r.phase == FINAL and not r.committed}

    def outcome(self, send: Send) -> str:
        return self.txns[(send.producer, send.txn)].outcome  # type: ignore[index]

    def may_commit(self, send: Send) -> bool:
        """Its transaction committed, or might have: the outcome is unknown and the application asked to commit,
        or nobody says what it asked for (no intent field, or no txns.jsonl line at all)."""
        txn = self.txns[(send.producer, send.txn)]  # type: ignore[index]
        return txn.outcome == COMMITTED or (txn.outcome == UNKNOWN and txn.intent in ("commit", INTENT_UNKNOWN))

    def visible_positions(self, send: Send) -> dict[Msg, list[Pos]]:
        """Where a send's message must be found: a transactional one by read_committed readers, others anywhere."""
        return self.reads.final_positions if send.txn is None else self.reads.committed_positions

    def judge_ack(self, msg: Msg, send: Send) -> None:
        """An acknowledged message must be in its partition's final read, at its acknowledged offset.

        A transactional message is acknowledged only when its transaction
        committed, and it must then be visible to the read_committed read-back.
        """
        if send.txn is not None and self.outcome(send) != COMMITTED:
            self.judge_divergence(msg, send)
            return
        present, verifiable = self.in_final_read(msg, send)
        if not present:
            if not verifiable:
                self.found.lost_unverifiable += 1
                self.found.unverifiable_in[(send.topic, send.partition)] += 1
            else:
                self.found.messages["lost"].add(msg)
                if self.reads.read_live(msg):
                    self.found.messages["lost_after_read"].add(msg)
        self.judge_divergence(msg, send)

    def judge_divergence(self, msg: Msg, send: Send) -> None:
        """No read at the acknowledged offset, and no other ack there, may hold another message."""
        if send.partition is not None and send.offset is not None:
            pos = (send.topic, send.partition, send.offset)
            seen = self.reads.at_position.get(pos, _UNREAD)
            if seen is _UNREAD:  # nobody read there: only another ack there can contradict it
                seen = self.unread_acks.setdefault(pos, msg)
            if seen != msg:
                self.found.positions["divergent"].add(pos)

    def in_final_read(self, msg: Msg, send: Send) -> tuple[bool, bool]:
        """(found in the final read of the send's partition, that final read was complete).

        A transactional message is looked for in the read_committed read-back only.
        """
        positions = self.visible_positions(send).get(msg, ())
        complete = self.complete if send.txn is None else self.complete_committed
        if send.partition is not None:
            present = False
            for topic, partition, _ in positions:
                if partition == send.partition and topic == send.topic:
                    present = True
                    break
            return present, complete.get((send.topic, send.partition), False)
        # No partition in the send (an ack should name one): judge against the whole topic.
        present = any(topic == send.topic for topic, _, _ in positions)
        return present, self.topic_complete(send.topic, complete)

    def topic_complete(self, topic: str, complete: dict[Part, bool]) -> bool:
        parts = self.topic_partitions.get(topic, [])
        return bool(parts) and all(complete.get(p, False) for p in parts)

    def judge_unknown(self, msg: Msg, send: Send) -> None:
        self.found.messages["unknown"].add(msg)
        if msg in self.visible_positions(send):
            self.found.unknown_found += 1

    def judge_reads(self) -> None:
        """Duplicates, unsent messages and disagreeing reads: what the reads show on their own."""
        messages = self.found.messages
        for msg, positions in self.reads.final_positions.items():
            if len(positions) > 1:
                messages["duplicated"].add(msg)
            if msg not in self.sends:
                messages["unexpected"].add(msg)
        for counts in self.reads.live.values():
            messages["unexpected"].update(msg for msg in counts if msg not in self.sends)
        self.found.positions["unexpected"] |= self.reads.foreign
        self.found.positions["divergent"] |= self.reads.divergent

    def judge_order(self) -> None:
        """Per producer and partition, acknowledged offsets must grow with seq."""
        out_of_order = reordered_messages(self.sends.values())
        if self.promises.ordered:
            self.found.messages["reordered"] = out_of_order
        else:
            self.found.unordered = len(out_of_order)

    def judge_groups(self) -> None:
        """What each consumer group skipped below its committed offset, and what it was handed twice.

        A transactional message counts only where read_committed readers saw
        it: an aborted one is never handed to the group (nor must it be).
        """
        skipped = self.found.messages["consumer_skipped"]
        for msg, positions in self.reads.final_positions.items():
            send = self.sends.get(msg)
            if send is not None and send.txn is not None:  # what read_committed readers must be handed
                positions = self.reads.committed_positions.get(msg, ())
            for topic, partition, offset in positions:
                for group, upto in self.committed.get((topic, partition), {}).items():
                    if offset < upto and msg not in self.reads.live.get(group, ()):
                        skipped.add((msg[0], msg[1], group))
        redelivered = self.found.messages["consumer_redelivered"]
        for group, counts in self.reads.live.items():
            if group is not None:
                redelivered.update((msg[0], msg[1], group) for msg, n in counts.items() if n > 1)


    def judge_transactions(self) -> None:
        """A transaction is all or nothing to read_committed readers: partly visible is torn."""
        members: dict[TxnKey, list[Send]] = defaultdict(list)
        for send in self.sends.values():
            if send.txn is not None and send.status != FAIL:
                members[(send.producer, send.txn)].append(send)
        for key, sends in members.items():
            visible, missing, verifiable = [], [], True
            for send in sends:
                present, complete = self.in_final_read((send.producer, send.seq), send)
                (visible if present else missing).append(send.seq)
                verifiable = verifiable and (present or complete)
            if visible and missing and verifiable:
                self.found.torn[key] = (self.txns[key].outcome, sorted(visible), sorted(missing))

    def judge_pipelines(self) -> None:
        """Each processed input of an exactly-once pipeline has exactly one output record (read_committed)."""
        outputs = self.reads.outputs
        for group, input_topic, output_topic in pipelines(self.events):
            output_complete = self.topic_complete(output_topic, self.complete_committed)
            for msg, send in self.sends.items():
                if send.topic != input_topic or not self.acknowledged(send):
                    continue
                n = len(outputs.get(msg, ()))
                if n > 1:
                    self.found.messages["pipeline_duplicated"].add(msg)
                offset = send.offset if send.offset is not None else self.final_offset(msg, send)
                upto = self.committed.get((send.topic, send.partition), {}).get(group) \
                    if send.partition is not None else None
                if offset is None or upto is None or offset >= upto:
                    self.found.pipeline_unprocessed += 1
                elif n == 0:
                    if output_complete:
                        self.found.messages["pipeline_lost"].add(msg)
                    else:
                        self.found.pipeline_unverifiable += 1

    def acknowledged(self, send: Send) -> bool:
        return send.status == OK and (send.txn is None or self.outcome(send) == COMMITTED)

    def final_offset(self, msg: Msg, send: Send) -> int | None:
        """The lowest offset the final read found the message at in its partition (acks=0 names none)."""
        offsets = [o for t, p, o in self.reads.final_positions.get(msg, ()) if t == send.topic and p == send.partition]
        return min(offsets) if offsets else None


def transaction_outcomes(txns: list[Txn], sends: Iterable[Send]) -> dict[TxnKey, Txn]:
    """Each transaction's outcome (the last txns.jsonl line wins); one with sends but no line is unknown, with an
    unknown intent, line 0."""
    outcomes = {(t.producer, t.txn): t for t in txns}
    for s in sends:
        if s.txn is not None and (s.producer, s.txn) not in outcomes:
            outcomes[(s.producer, s.txn)] = Txn(s.producer, s.txn, UNKNOWN, INTENT_UNKNOWN, 0)
    return outcomes


def hanging_partitions(events: list[dict[str, Any]], hanging_after_ms: int) -> dict[Part, dict[str, Any]]:
    """Partitions whose last stable offset stayed at one value below the high watermark longer than allowed.

    The samples are the observer's ``stable`` events and the read_committed
    read-back's ``final-read`` events; per partition the longest such span is kept.
    """
    samples: dict[Part, list[tuple[int, int, int]]] = defaultdict(list)  # (time_ns, lso, hw)
    for e in events:
        if e["kind"] == "stable" or (e["kind"] == "final-read" and e.get("last_stable_offset") is not None
                                     and e.get("high_watermark") is not None and e.get("time_ns") is not None):
            samples[(e["topic"], e["partition"])].append(
                (e["time_ns"], e["last_stable_offset"], e["high_watermark"]))
    hanging: dict[Part, dict[str, Any]] = {}
    for part, points in samples.items():
        points.sort()
        start: tuple[int, int, int] | None = None
        for point in points:
            time_ns, lso, hw = point
            if start is not None and lso != start[1]:
                start = None
            if lso >= hw:
                start = None
                continue
            if start is None:
                start = point
            stuck_ms = (time_ns - start[0]) // 1_000_000
            if stuck_ms > hanging_after_ms and stuck_ms > hanging.get(part, {}).get("stuck_ms", -1):
                hanging[part] = {"topic": part[0], "partition": part[1], "last_stable_offset": lso,
                                 "high_watermark": hw, "from_ns": start[0], "to_ns": time_ns, "stuck_ms": stuck_ms}
    return hanging


def reordered_messages(sends: Iterable[Send]) -> set[Msg]:
    """Acknowledged messages at a lower offset than some lower seq of their producer in their partition."""
    acked: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    for s in sends:
        if s.status == OK and s.partition is not None and s.offset is not None:
            acked[(s.producer, s.topic, s.partition)].append((s.seq, s.offset))
    reordered: set[Msg] = set()
    for (producer, _, _), seq_offsets in acked.items():
        seq_offsets.sort()
        highest: int | None = None  # of the lower seqs (none yet: an offset below zero is no reorder)
        for seq, offset in seq_offsets:
            if highest is not None and offset < highest:
                reordered.add((producer, seq))
            else:
                highest = offset
    return reordered


# --- results ----------------------------------------------------------------------------------------


def check(history: History, promises: Promises) -> dict[str, Any]:
    """Judge a history under the producers' promises; the results.json dict (notes included)."""
    with paused_gc():
        return _check(history, promises)


def _check(history: History, promises: Promises) -> dict[str, Any]:
    notes = list(history.notes)
    judge = Judge(history, promises, notes)
    found = judge.run()
    counts = tally(history, judge, found)
    incomplete = incomplete_partitions(judge)
    add_notes(notes, judge, found)
    entries = list(range_entries(judge, found))
    ranges = anomaly_ranges(entries)
    return results_document("python", counts, promises, history.cut_short, incomplete,
                            examples(history, judge, found), notes, ranges,
                            breakdown(history, judge, found, entries, ranges), series(judge, entries),
                            unread_committed(judge))


def tally(history: History, judge: Judge, found: Findings) -> dict[str, int]:
    """Every count of results.json, in the order anomalies.COUNTS lists them."""
    statuses = Counter(s.status for s in judge.sends.values())
    unknown = found.count("unknown")
    counts = {
        "sent": len(history.sends),
        "acked": statuses[OK],
        "failed": statuses[FAIL],
        "reads_live": judge.reads.live_reads,
        "reads_final": judge.reads.final_reads,
        **{anomaly: found.count(anomaly) for anomaly in ANOMALIES},
        "unknown_found": found.unknown_found,
        "unknown_not_found": unknown - found.unknown_found,
        "lost_unverifiable": found.lost_unverifiable,
        **transaction_counts(judge.txns.values()),
        "pipeline_unprocessed": found.pipeline_unprocessed,
        "pipeline_unverifiable": found.pipeline_unverifiable,
        SHARE_TALLY: 0 if found.shares is None else found.shares.deliveries,
    }
    assert tuple(counts) == COUNTS
    return counts


def transaction_counts(txns: Iterable[Txn]) -> dict[str, int]:
    outcomes = Counter(t.outcome for t in txns)
    return {"txns_committed": outcomes[COMMITTED], "txns_aborted": outcomes[ABORTED], "txns_unknown": outcomes[UNKNOWN]}


def incomplete_partitions(judge: Judge) -> list[Part]:
    """Partitions with sends, reads or a final-read event whose final read did not reach the end.

    With a read_committed read-back too (transactions), a partition it did not read to the end is incomplete,
    and so is one a transactional send names that it left no final-read event for (``unread_committed``).
    """
    parts = {(s.topic, s.partition) for s in judge.sends.values() if s.partition is not None}
    parts |= judge.reads.partitions
    parts |= judge.complete.keys()
    incomplete = {p for p in parts if not judge.complete.get(p, False)}
    incomplete |= {p for p, complete in judge.complete_committed.items() if not complete}
    incomplete |= set(unread_committed(judge))
    return sorted(incomplete)


def unread_committed(judge: Judge) -> list[Part]:
    """Partitions a transactional send names that the read_committed read-back left no final-read event for: it
    proved nothing there about the committed messages (a run cut short between the two read-backs, or a history
    written elsewhere)."""
    return sorted({(s.topic, s.partition) for s in judge.sends.values()
                   if s.txn is not None and s.partition is not None} - judge.complete_committed.keys())


def add_notes(notes: list[str], judge: Judge, found: Findings) -> None:
    """Say what the counts alone would hide: what could not be judged, and what was judged leniently."""
    notes += judgement_notes(
        lost_unverifiable=found.lost_unverifiable,
        unordered=found.unordered,
        no_partition=sum(1 for s in judge.sends.values() if s.status == OK and s.partition is None),
        foreign_positions=len(judge.reads.foreign),
        ungrouped_live_reads=sum(judge.reads.live.get(None, Counter()).values()),
    )
    notes += transaction_notes(txns_unknown=sum(1 for t in judge.txns.values() if t.outcome == UNKNOWN),
                               pipeline_unprocessed=found.pipeline_unprocessed,
                               pipeline_unverifiable=found.pipeline_unverifiable)


# --- anomaly ranges ----------------------------------------------------------------------------------


def range_entries(judge: Judge, found: Findings) -> Iterator[RangeEntry]:
    """The entries anomaly_ranges groups: each lost message (at its winning send), each duplicated message per
    partition of its final reads, each divergent position (at its earliest ack)."""
    sends = judge.sends
    # both hold messages (only the consumer anomalies hold (producer, seq, group) keys)
    lost: set[Msg] = found.messages["lost"]  # type: ignore[assignment]
    duplicated: set[Msg] = found.messages["duplicated"]  # type: ignore[assignment]
    for msg in lost:
        s = sends[msg]
        yield RangeEntry("lost", s.topic, s.partition, s.complete_ns, s.offset, s.offset)
    for msg in duplicated:
        send = sends.get(msg)
        offsets: dict[Part, list[int]] = defaultdict(list)
        for topic, partition, offset in judge.reads.final_positions[msg]:
            offsets[(topic, partition)].append(offset)
        for (topic, partition), found_at in offsets.items():
            yield RangeEntry("duplicated", topic, partition, None if send is None else send.complete_ns,
                             min(found_at), max(found_at))
    divergent = found.positions["divergent"]
    earliest = earliest_acks(sends.values(), divergent)
    for topic, partition, offset in divergent:
        yield RangeEntry("divergent", topic, partition, earliest.get((topic, partition, offset)), offset, offset)


def earliest_acks(sends: Iterable[Send], positions: set[Pos]) -> dict[Pos, int]:
    """The smallest complete_ns of the acks (ok sends) naming each of these positions, where some ack has one."""
    earliest: dict[Pos, int] = {}
    if not positions:
        return earliest
    for s in sends:
        if s.status == OK and s.partition is not None and s.offset is not None and s.complete_ns is not None:
            pos = (s.topic, s.partition, s.offset)
            if pos in positions and (pos not in earliest or s.complete_ns < earliest[pos]):
                earliest[pos] = s.complete_ns
    return earliest


# --- per partition and per fault (checkers/breakdown.py) -------------------------------------------


def breakdown(history: History, judge: Judge, found: Findings, entries: list[RangeEntry],
              ranges: list[dict[str, Any]]) -> dict[str, Any]:
    """results.json's ``breakdown``: the counts per partition, the range entries per fault window, and the lost
    messages acknowledged at a divergent position."""
    named: set[tuple[str, int | None]] = {(s.topic, s.partition) for s in history.sends}
    named |= judge.reads.partitions | judge.complete.keys() | judge.complete_committed.keys()
    acked = Counter((s.topic, s.partition) for s in judge.sends.values() if s.status == OK)
    reads: dict[tuple[str, int | None], Counter[str]] = defaultdict(Counter)
    for (topic, partition, final), n in judge.reads.per_partition.items():
        reads[(topic, partition)]["reads_final" if final else "reads_live"] += n
    rows = partition_rows(named, {part: Counter(acked=n) for part, n in acked.items()}, reads,
                          {part: Counter(lost_unverifiable=n) for part, n in found.unverifiable_in.items()},
                          ranged_counts(ranges))
    windows = fault_windows(history.events)
    divergent = found.positions["divergent"]
    lost_divergent = 0
    for msg in found.messages["lost"]:
        s = judge.sends[msg]  # type: ignore[index]
        if s.partition is not None and s.offset is not None and (s.topic, s.partition, s.offset) in divergent:
            lost_divergent += 1
    return breakdown_document(rows, fault_rows(windows, charged_entries(entries, windows)), lost_divergent)


def series(judge: Judge, entries: list[RangeEntry]) -> dict[str, Any]:
    """results.json's ``series``: the winning acks and the range entries per second and partition."""
    acked = Counter((s.topic, s.partition, second_of(s.complete_ns)) for s in judge.sends.values()
                    if s.status == OK and s.complete_ns is not None)
    return series_document([*(("acked", t, p, sec, n) for (t, p, sec), n in acked.items()),
                            *entries_per_second(entries)])


# --- examples ---------------------------------------------------------------------------------------


def examples(history: History, judge: Judge, found: Findings) -> dict[str, list[dict[str, Any]]]:
    """Up to 20 examples per anomaly, each with its send line and up to 10 read lines, re-read from disk."""
    chosen = {a: choose_examples(found.messages[a], found.positions[a]) for a in MESSAGE_ANOMALIES}
    wanted_msgs = {key[:2] for keys, _ in chosen.values() for key in keys}
    duplicated_outputs = {msg: judge.reads.outputs[msg] for msg in chosen["pipeline_duplicated"][0]}
    wanted_pos = {pos for positions in duplicated_outputs.values() for pos in positions}
    wanted_pos |= {pos for _, positions in chosen.values() for pos in positions}

    msg_reads: dict[Msg, list[int]] = defaultdict(list)
    pos_reads: dict[Pos, list[int]] = defaultdict(list)
    pos_msgs: dict[Pos, set[Msg | None]] = defaultdict(set)  # every message read at a wanted position
    for r in history.reads:  # in file order, so each example keeps its first reads
        if r.producer is not None:
            msg = (r.producer, r.seq)
            if msg in wanted_msgs and len(msg_reads[msg]) < MAX_EXAMPLE_READS:
                msg_reads[msg].append(r.line)
        pos = (r.topic, r.partition, r.offset)
        if pos in wanted_pos:
            pos_msgs[pos].add(None if r.producer is None else (r.producer, r.seq))
            if len(pos_reads[pos]) < MAX_EXAMPLE_READS:
                pos_reads[pos].append(r.line)
    msg_send = {msg: judge.sends[msg].line for msg in wanted_msgs if msg in judge.sends}
    pos_send = acks_at(judge.sends, {pos: pos_msgs.get(pos, set()) for pos in wanted_pos})

    send_lines = history.send_lines(list(msg_send.values()) + list(pos_send.values()))
    read_lines = history.read_lines([n for ns in (*msg_reads.values(), *pos_reads.values()) for n in ns])

    def message_example(key: Msg | GroupMsg) -> dict[str, Any]:
        msg = key[:2]
        example: dict[str, Any] = {"producer": key[0], "seq": key[1]}
        if len(key) == 3:
            example["group"] = key[2]
        example["send"] = send_lines.get(msg_send[msg]) if msg in msg_send else None
        example["reads"] = [read_lines[n] for n in msg_reads.get(msg, []) if n in read_lines]
        return example

    def position_example(pos: Pos, anomaly: str) -> dict[str, Any]:
        head = {"producer": None, "seq": None} if anomaly == "unexpected" else {}
        return {**head, "topic": pos[0], "partition": pos[1], "offset": pos[2],
                "send": send_lines.get(pos_send[pos]) if pos in pos_send else None,
                "reads": [read_lines[n] for n in pos_reads.get(pos, []) if n in read_lines]}

    found_examples = {a: [message_example(k) for k in keys] + [position_example(p, a) for p in positions]
                      for a, (keys, positions) in chosen.items()}
    for example in found_examples["pipeline_duplicated"]:
        outputs = sorted(duplicated_outputs[(example["producer"], example["seq"])])
        example["outputs"] = [read_lines[n] for pos in outputs for n in pos_reads.get(pos, [])[:1] if n in read_lines]
    found_examples["torn_transaction"] = [torn_example(key, *found.torn[key])
                                          for key in heapq.nsmallest(MAX_EXAMPLES, found.torn)]
    found_examples["hanging_transaction"] = [found.hanging[part]
                                             for part in heapq.nsmallest(MAX_EXAMPLES, found.hanging)]
    found_examples |= poll_examples(history, found.polls)
    found_examples |= share_examples(found.shares, history.shares, judge.share_final, MAX_EXAMPLES)
    return {a: found_examples[a] for a in ANOMALIES}


def poll_examples(history: History, polls: list[PollFinding]) -> dict[str, list[dict[str, Any]]]:
    """The first 20 findings of each poll anomaly in reads.jsonl order, each with its two read lines."""
    chosen = {a: [f for f in polls if f.anomaly == a][:MAX_EXAMPLES] for a in POLL_ANOMALIES}
    lines = history.read_lines([n for found in chosen.values() for f in found for n in (f.previous_line, f.line)])
    return {a: [poll_example(f, [lines[n] for n in (f.previous_line, f.line) if n in lines]) for f in found]
            for a, found in chosen.items()}


def poll_example(f: PollFinding, reads: list[dict[str, Any]]) -> dict[str, Any]:
    """One poll anomaly's example, one shape for both engines: where the consumer was and where it read next."""
    return {"consumer": f.consumer, "topic": f.topic, "partition": f.partition,
            "previous_offset": f.previous_offset, "offset": f.offset, "reads": reads}


def torn_example(key: TxnKey, outcome: str, visible: list[int], missing: list[int]) -> dict[str, Any]:
    """A torn transaction: which of its seqs read_committed readers saw, and which they did not (20 of each)."""
    return {"producer": key[0], "txn": key[1], "outcome": outcome, "visible_count": len(visible),
            "missing_count": len(missing), "visible": visible[:MAX_EXAMPLES], "missing": missing[:MAX_EXAMPLES]}


def choose_examples(keys: set[Msg] | set[GroupMsg], positions: set[Pos]) -> tuple[list, list[Pos]]:
    """The smallest findings: messages first, then positions; 20 in all."""
    smallest_keys = heapq.nsmallest(MAX_EXAMPLES, keys)
    return smallest_keys, heapq.nsmallest(MAX_EXAMPLES - len(smallest_keys), positions)


def acks_at(sends: dict[Msg, Send], read_there: dict[Pos, set[Msg | None]]) -> dict[Pos, int]:
    """Line of the ack to show at each position: one that a read there contradicts, if any.

    Among the acks at a position, those that some read there disagrees with
    come first, then the smallest (producer, seq) (a position nobody read: the
    smallest of the acks that disagree with each other).
    """
    best: dict[Pos, tuple[tuple[bool, Msg], int]] = {}
    if not read_there:
        return {}
    for msg, s in sends.items():
        if s.status == OK and s.partition is not None and s.offset is not None:
            pos = (s.topic, s.partition, s.offset)
            if pos in read_there:
                rank = (read_there[pos] <= {msg}, msg)  # False (contradicted) sorts first
                if pos not in best or rank < best[pos][0]:
                    best[pos] = (rank, s.line)
    return {pos: line for pos, (_, line) in best.items()}


# --- a run directory -----------------------------------------------------------------------------------


def check_run(run_dir: Path) -> dict[str, Any]:
    """Check RUN/history under the promises of RUN/scenario.yaml (or none, noted)."""
    run = RunDir(run_dir)
    require_history(run.history)
    history = read_history(run.history)
    promises, note = promises_from_scenario(read_scenario(run))
    results = check(history, promises)
    if note:
        results["notes"].insert(0, note)
    return results
