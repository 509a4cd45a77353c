"""Acknowledgements a broker gave for records it already held: a transactional producer sent a new batch with the
producer id, epoch and sequence numbers of an earlier batch that reached the log, whose records the client had
reported purged when their transaction aborted. The broker took the new batch for a retry of the old one and
answered with the old batch's offset, so the new records were acknowledged and never written
(docs/findings/librdkafka-purged-sequence-reuse.md).

For every lost or divergent range, each acknowledgement at its offsets (sends.jsonl) is set beside what the final
read-back found at that offset when it read uncommitted records (reads.jsonl), that message's own send (a purge
report) and transaction (txns.jsonl), the batch holding the offset on the replicas' disks
(history/replica-batches.jsonl), and the Produce of the purged message whose answer a fault dropped (events.jsonl
``request`` lines). A range is explained when every acknowledgement in it is one of these.

Runs only where a client reported a purge, reading sends.jsonl and reads.jsonl once each, line by line.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from catalogue.history import PURGE_ERRORS
from forensics.chains import Event, answered, broker_name, fault_phrase, seconds
from rundir.documents import fault_windows
from rundir.lines import iter_jsonl

ANOMALIES = ("lost", "divergent")
MAX_POSITIONS = 100_000  # the offsets looked at, at most: ranges this wide come from faults of another kind
Position = tuple[str, int, int]


def reports_purges(sends: Path) -> bool:
    """Whether any send line reports a purge (a byte search: most runs have none and read no further)."""
    if not sends.is_file():
        return False
    needles = [f'"{e}"'.encode() for e in PURGE_ERRORS]
    with sends.open("rb") as f:
        while block := f.read(1 << 22):
            if any(n in block for n in needles):
                return True
            if len(block) == 1 << 22:
                f.seek(-64, 1)  # a name cut by the block's end is found in the next
    return False


def positions(ranges: list[Event]) -> set[Position]:
    wanted: set[Position] = set()
    for r in ranges:
        low, high = r.get("min_offset"), r.get("max_offset")
        if r["anomaly"] in ANOMALIES and r.get("partition") is not None and low is not None and high is not None:
            wanted.update((r["topic"], r["partition"], o) for o in range(low, high + 1))
    return wanted


class SequenceReuse:
    """The reuse chains of a run's ranges, from its sends, final reads, transactions, batches and events."""

    def __init__(self, ranges: list[Event], sends: Path, reads: Path, txns: list[Event], events: list[Event],
                 batches: list[Event] | None, started_ms: int | None, notes: list[str]) -> None:
        self.all_ranges = ranges
        self.ranges = [r for r in ranges if r["anomaly"] in ANOMALIES]
        wanted = positions(self.ranges)
        self.active = bool(wanted) and len(wanted) <= MAX_POSITIONS and reports_purges(sends) and reads.is_file()
        self.acks: dict[Position, list[Event]] = defaultdict(list)
        self.purged: dict[tuple[str, int], Event] = {}
        self.held: dict[Position, Event] = {}
        self.txns = {(t["producer"], t["txn"]): t for t in txns}
        self.faults = fault_windows(events)
        self.dropped = [e for e in events if e.get("kind") == "request" and e.get("action") == "response-dropped"
                        and e.get("cause") == "matched"]
        self.started_ms = started_ms
        self.batches: dict[tuple[str, int], list[Event]] = defaultdict(list)
        for b in batches or ():
            if not b.get("control"):
                self.batches[(b["topic"], b["partition"])].append(b)
        if not self.active:
            return
        for s in iter_jsonl(sends, "history/sends.jsonl", notes):  # a line without what is looked at is skipped
            pos = (s.get("topic"), s.get("partition"), s.get("offset"))
            if not isinstance(s.get("producer"), str) or not isinstance(s.get("seq"), int) \
                    or not isinstance(s.get("complete_ns"), int) or not isinstance(s.get("invoke_ns"), int):
                continue
            if s.get("status") == "ok" and pos in wanted:
                self.acks[pos].append(s)  # type: ignore[index]
            elif s.get("error") in PURGE_ERRORS:
                self.purged[(s["producer"], s["seq"])] = s
        for rd in iter_jsonl(reads, "history/reads.jsonl", notes):
            pos = (rd.get("topic"), rd.get("partition"), rd.get("offset"))
            if rd.get("phase") == "final" and rd.get("isolation") == "read_uncommitted" and pos in wanted:
                self.held[pos] = rd  # type: ignore[index]

    def explain(self) -> tuple[list[Event], list[Event]]:
        """The ranges every acknowledgement of which is a reused sequence, as chains; and every other range of the
        run, in its order, for the leader and log chains."""
        chains = [c for c in map(self.chain, self.ranges) if c is not None] if self.active else []
        told = {(c["anomaly"], c["topic"], c["partition"], c["first_ns"], c["min_offset"]) for c in chains}
        return chains, [r for r in self.all_ranges
                        if (r["anomaly"], r["topic"], r.get("partition"), r.get("first_ns"), r.get("min_offset"))
                        not in told]

    def chain(self, r: Event) -> Event | None:
        told = []
        for o in range(r["min_offset"], r["max_offset"] + 1):
            pos = (r["topic"], r["partition"], o)
            held = self.held.get(pos)
            for ack in self.acks.get(pos, []):
                if held is not None and (held.get("producer"), held.get("seq")) == (ack["producer"], ack["seq"]):
                    continue  # the record the log holds there: its own acknowledgement
                victim = self.victim(pos, ack)
                if victim is None:
                    return None
                told.append(victim)
        if not told:
            return None
        first = told[0]
        fault = next((f for f in (v["fault"] for v in told) if f is not None), None)
        steps = [s for v in told[:3] for s in v["steps"]]
        steps.sort(key=lambda s: s["time_ns"])
        chain = {k: r.get(k) for k in ("anomaly", "topic", "partition", "count", "first_ns", "last_ns",
                                       "min_offset", "max_offset")}
        more = f"; and {len(told) - 1} more acknowledgement{'s' if len(told) > 2 else ''} alike" if len(told) > 1 \
            else ""
        chain.update(fault=fault, cause="sequence_reuse", leader=None, leader_epoch=None, successor=None,
                     truncated_to=None, held_by=None, steps=steps,
                     reused=[{k: v[k] for k in ("producer", "seq", "txn", "offset", "held_seq", "held_txn",
                                                "batch")} for v in told[:10]],
                     sentence=f"{r['topic']}-{r['partition']}: {first['sentence']}{more}.")
        return chain

    def victim(self, pos: Position, ack: Event) -> dict[str, Any] | None:
        """Why ``ack`` (a send acknowledged at ``pos``) names a record that is not its own, when it is a purged
        record of the same producer's earlier transaction; None otherwise."""
        held = self.held.get(pos)
        if held is None:
            return None
        old = self.purged.get((held.get("producer"), held.get("seq")))
        if old is None or old["producer"] != ack["producer"] or old.get("txn") == ack.get("txn"):
            return None
        producer, topic, partition, offset = ack["producer"], pos[0], pos[1], pos[2]
        ended = self.txns.get((producer, old.get("txn"))) or {}
        mine = self.txns.get((producer, ack.get("txn"))) or {}
        batch = next((b for b in self.batches.get((topic, partition), [])
                      if b["base_offset"] <= offset <= b["last_offset"]), None)
        drop = self.drop_of(old, f"{topic}-{partition}")
        fault = self.fault_of(drop, old)
        own = f"{producer}'s message {ack['seq']} of transaction {ack.get('txn')} ({mine.get('outcome', 'unknown')})"
        was = (f"{producer}'s message {old['seq']} of transaction {old.get('txn')} ({ended.get('outcome', 'unknown')}"
               + (f", {ended['error']}" if ended.get("error") else "") + ")")
        parts = [f"{own} was acknowledged at offset {offset:,} at {seconds(ack['complete_ns'])}, where the log "
                 f"holds {was}"]
        if batch is not None:
            made = self.at(batch.get("create_time_ms"))
            parts.append(f"in a batch of producer id {batch['producer_id']}, epoch {batch['producer_epoch']}, "
                         f"sequence {seq_range(batch)}" + ("" if made is None else f", created at {seconds(made)}"))
        if drop is not None:
            parts.append(f"its Produce to {broker_name(drop.get('node'))} at {seconds(drop['held_ns'])} was "
                         f"answered{answered(drop)} and the answer dropped"
                         + ("" if fault is None else f" (fault {fault['index']}: {fault_phrase(fault)})"))
        parts.append(f"the client reported {old['seq']} purged ({old['error']}) at {seconds(old['complete_ns'])}, "
                     f"and the broker took transaction {ack.get('txn')}'s batch, with the same producer id, epoch "
                     f"and sequence, for a retry of it")
        steps = [{"time_ns": old["invoke_ns"], "node": producer, "line": None,
                  "what": f"{producer} sends {old['seq']} (transaction {old.get('txn')}) to {topic}-{partition}"}]
        if drop is not None:
            steps.append({"time_ns": drop["held_ns"], "node": broker_name(drop.get("node")), "line": None,
                          "what": f"the answer to {producer}'s Produce to {topic}-{partition} is dropped"})
        steps += [{"time_ns": old["complete_ns"], "node": producer, "line": None,
                   "what": f"{old['seq']} reported purged ({old['error']}); transaction {old.get('txn')} "
                           f"{ended.get('outcome', 'unknown')}"},
                  {"time_ns": ack["complete_ns"], "node": producer, "line": None,
                   "what": f"{ack['seq']} (transaction {ack.get('txn')}) acknowledged at offset {offset:,}, "
                           f"which holds {old['seq']}"}]
        return {"producer": producer, "seq": ack["seq"], "txn": ack.get("txn"), "offset": offset,
                "held_seq": old["seq"], "held_txn": old.get("txn"),
                "batch": None if batch is None else {k: batch.get(k) for k in (
                    "producer_id", "producer_epoch", "base_sequence", "last_sequence", "base_offset",
                    "create_time_ms")},
                "fault": None if fault is None else fault["index"], "steps": steps, "sentence": "; ".join(parts)}

    def drop_of(self, old: Event, partition: str) -> Event | None:
        """The first dropped answer to a Produce of the purged record's client that carried its partition while
        the record waited for its answer."""
        client = f"kchaos-{old['producer']}"
        return next((e for e in self.dropped if e.get("client") == client and e.get("api") == "Produce"
                     and old["invoke_ns"] <= e["held_ns"] <= old["complete_ns"]
                     and partition in ((e.get("detail") or {}).get("partitions") or ())), None)

    def fault_of(self, drop: Event | None, old: Event) -> Event | None:
        """The fault window that dropped that answer; without one, a window under way while the record waited."""
        t = drop["held_ns"] if drop is not None else None
        for w in self.faults:
            lo, hi = w["start_ns"], w["end_ns"]
            if t is not None and lo <= t and (hi is None or t <= hi) and w["fault"] == drop.get("fault"):
                return w
        return next((w for w in self.faults if w["start_ns"] <= old["complete_ns"]
                     and (w["end_ns"] is None or w["end_ns"] >= old["invoke_ns"])), None)

    def at(self, ms: int | None) -> int | None:
        return None if ms is None or self.started_ms is None else (ms - self.started_ms) * 1_000_000


def seq_range(batch: Event) -> str:
    lo, hi = batch.get("base_sequence"), batch.get("last_sequence")
    return f"{lo}" if lo == hi else f"{lo}–{hi}"
