"""Causal chains: from a fault to the records it took away, for every range of lost, divergent and duplicated
messages the checker found (results.json ``anomaly_ranges``).

A chain answers, for one range of one partition: which broker acknowledged those records as leader and in
which leader epoch (its own ``become_leader`` before the first ack), which fault hit that broker (the fault
applied to it while the acks went on, or the first one after them), who led next with what log end (the next
``become_leader`` of a higher epoch, and whether its election was unclean), when the old leader cut its log
(``truncate``, or a log recovered shorter after a power cut) and whether any replica still holds batches
that leader epoch wrote at those offsets (history/replica-batches.jsonl). A range no fault can be tied to,
or whose records nothing is seen removing, is listed as unexplained with the reason: that is a finding too.
For duplicates the batches holding the examples' two copies say whether one batch was appended twice (same
producer id, producer epoch and base sequence) or the client sent the records again.

For the transactional anomalies (aborted_read, torn_transaction, and lost messages of committed transactions)
a chain is told per transaction of the checker's examples (TransactionExplainer): its outcome and intent
(txns.jsonl), and the request a request-level fault held of the same producer that reached its broker while
that transaction was open (events.jsonl ``request`` lines: a late EndTxn of an earlier transaction is
KAFKA-17754's trigger), or, without one, the faults under way while it was open.

Pure: takes the run's documents as values, so it runs offline on any past run (``kchaos forensics RUN``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from functools import cached_property
from typing import Any

from catalogue.anomalies import ANOMALY_LIST, VIOLATION
from catalogue.faults import FAULT_KINDS
from rundir.documents import fault_windows

Event = dict[str, Any]

# the anomalies a chain explains range by range (the catalogue's ``chains``), those always a violation first:
# lost_by_fault's columns
EXPLAINED = tuple(a.name for a in sorted((a for a in ANOMALY_LIST if "range" in a.chains),
                                          key=lambda a: a.severity != VIOLATION))
# the anomalies a chain explains transaction by transaction (TransactionExplainer)
TXN_EXPLAINED = tuple(a.name for a in ANOMALY_LIST if "transaction" in a.chains)
LANDED_NOTE_NS = 500_000_000  # a fault that took longer than this to take effect says when it had
BATCH_AGE_NS = 120_000_000_000  # a batch is created at most this long before its records are acknowledged
AFTER_NS = 10_000_000_000  # a fault up to 10 s after the last ack of a range can still take it (replication lag)
# an answer reaches the client after its leader logged its resignation (a controlled shutdown moves leadership
# while responses are on the wire): acks no broker's leadership covers are its that resigned up to this long before
ACK_LAG_NS = 1_000_000_000
# faults whose victim's process is gone until it starts again
STOPPING = tuple(k.name for k in FAULT_KINDS.values() if k.victim == "node" and k.stops_process and k.restarts)


def seconds(ns: int | None) -> str:
    return "?" if ns is None else f"{ns / 1e9:.1f} s"


class Partition:
    """What the brokers logged about one partition, and what the replicas' disks held of it."""

    def __init__(self, topic: str, partition: int, events: list[Event], batches: list[Event]) -> None:
        self.name = f"{topic}-{partition}"
        self.events = events      # this partition's broker events, in time order
        self.batches = batches    # its replica batches, every replica

    def leader_at(self, t: int) -> Event | None:
        """The become_leader of the broker that believed itself leader at ``t``; of two (a leader cut off from the
        cluster keeps acknowledging in its old epoch), the one of the older epoch, whose acks a new leader lacks."""
        believes: dict[str, Event] = {}
        for e in self.events:
            if e["time_ns"] > t:
                break
            if e["kind"] == "become_leader":
                believes[e["node"]] = e
            elif e["kind"] in ("become_follower", "process_start", "shutdown", "process_stop"):
                believes.pop(e["node"], None)
        return min(believes.values(), key=lambda e: e.get("leader_epoch", -1), default=None)

    def successor(self, after: int, old: Event) -> Event | None:
        """The first leader of a higher epoch than ``old``'s, on another broker, from ``after`` on."""
        return next((e for e in self.events if e["kind"] == "become_leader" and e["time_ns"] >= after
                     and e["node"] != old["node"] and e.get("leader_epoch", -1) > old.get("leader_epoch", -1)),
                    None)

    def election(self, leader: Event) -> Event | None:
        """The controller's election that made ``leader`` (its epoch), if logged."""
        return next((e for e in self.events if e["kind"] == "election"
                     and e.get("leader_epoch") == leader.get("leader_epoch")), None)

    def cut(self, node: str, after: int, max_offset: int | None) -> Event | None:
        """The first time ``node``'s own log of this partition lost offsets of the range, from ``after`` on: a
        truncation (to an offset at or below the range's end), or a log recovered ending at or below it."""
        for e in self.events:
            if e["node"] != node or e["time_ns"] < after:
                continue
            end = e.get("to_offset") if e["kind"] == "truncate" else \
                e.get("log_end_offset") if e["kind"] == "log_loaded" else None
            if end is not None and (max_offset is None or end <= max_offset):
                return e
        return None

    def holders(self, epoch: int | None, low: int | None, high: int | None,
                made: tuple[int, int] | None) -> dict[str, int]:
        """Per replica, how many offsets of [low, high] it holds in batches written in leader epoch ``epoch`` and,
        when ``made`` is given, created by the producer within that wall-clock window (ms): after a power cut on
        every replica a leader may append in an epoch it had already used, at the same offsets."""
        held: dict[str, int] = defaultdict(int)
        if epoch is None or low is None or high is None:
            return held
        read = self.final_leader_batches
        for b in self.batches:
            created = b.get("create_time_ms")
            if made is not None and created is not None and not made[0] <= created <= made[1]:
                continue
            if batch_identity(b) in read:  # what the last leader holds, the final read read: not the lost records
                continue
            if b.get("leader_epoch") == epoch and b["base_offset"] <= high and b["last_offset"] >= low \
                    and not b.get("control"):
                held[b["node"]] += min(high, b["last_offset"]) - max(low, b["base_offset"]) + 1
        return held

    @cached_property
    def final_leader_batches(self) -> set[tuple[Any, ...]]:
        """The batches of the partition's last leader (whose log the final read-back read), by identity; asked once
        per chain, built once."""
        leaders = [e["node"] for e in self.events if e["kind"] == "become_leader"]
        return {batch_identity(b) for b in self.batches if leaders and b["node"] == leaders[-1]}

    def batch_at(self, node: str | None, offset: int) -> Event | None:
        """The batch holding ``offset`` on ``node`` (any replica when None)."""
        return next((b for b in self.batches if (node is None or b["node"] == node)
                     and b["base_offset"] <= offset <= b["last_offset"]), None)


class Explainer:
    """Chains for a run's anomaly ranges, from its events, broker events and replica batches."""

    def __init__(self, events: list[Event], broker_events: list[Event], batches: list[Event] | None,
                 examples: dict[str, list[Event]] | None = None, started_ms: int | None = None) -> None:
        """``started_ms``: the run's wall-clock start (ms since the epoch), to place the batches' create times."""
        self.started_ms = started_ms
        self.faults = fault_windows(events)
        self.have_disks = batches is not None
        self.examples = examples or {}
        by_part: dict[tuple[str, int], list[Event]] = defaultdict(list)
        for e in broker_events:
            if e.get("topic") is not None:
                by_part[(e["topic"], e["partition"])].append(e)
        for e in [*broker_events, *process_stops(self.faults)]:  # a node's restart, shutdown or death ends
            if e["kind"] in ("process_start", "shutdown", "process_stop") and e.get("topic") is None:  # what it
                for evs in by_part.values():                                                        # believed
                    evs.append(e)
        batches_by: dict[tuple[str, int], list[Event]] = defaultdict(list)
        for b in batches or ():
            batches_by[(b["topic"], b["partition"])].append(b)
        self.parts = {k: Partition(k[0], k[1], sorted(v, key=lambda e: (e["time_ns"], e["node"], e["line"])),
                                   batches_by.get(k, [])) for k, v in by_part.items()}
        for k, v in batches_by.items():
            self.parts.setdefault(k, Partition(k[0], k[1], [], v))

    def explain(self, ranges: list[Event], told: list[Event] | None = None) -> dict[str, Any]:
        """Chains for ``ranges``; ``told``: chains another explainer made for ranges not among them (a reused
        sequence's, forensics/sequence_reuse.py), counted with these."""
        chains: list[Event] = list(told or ())
        unexplained: list[Event] = []
        for r in ranges:
            if r["anomaly"] not in EXPLAINED:
                continue
            chain, why = self.chain(r)
            if chain is None:
                unexplained.append({k: r.get(k) for k in ("anomaly", "topic", "partition", "count", "first_ns",
                                                          "last_ns", "min_offset", "max_offset")} | {"why": why})
            else:
                chains.append(chain)
        return {"chains": chains, "lost_by_fault": self.by_fault(chains, unexplained), "unexplained": unexplained,
                "disks_read": self.have_disks}

    def by_fault(self, chains: list[Event], unexplained: list[Event]) -> list[Event]:
        """Counts per fault (and per "no fault" for what no chain explains), in fault order."""
        rows: dict[int | None, Event] = {}
        for c in chains:
            if c["fault"] is None:  # a chain that names no fault: counted with what none explains
                unexplained = [*unexplained, c]
                continue
            w = self.faults[c["fault"] - 1]
            row = rows.setdefault(c["fault"], {"fault": c["fault"], "label": fault_phrase(w),
                                               **{a: 0 for a in EXPLAINED}})
            row[c["anomaly"]] += c["count"]
        for u in unexplained:
            row = rows.setdefault(None, {"fault": None, "label": "unexplained", **{a: 0 for a in EXPLAINED}})
            row[u["anomaly"]] += u["count"]
        return sorted(rows.values(), key=lambda r: (r["fault"] is None, r["fault"] or 0))

    def chain(self, r: Event) -> tuple[Event | None, str]:
        """The chain of one range, or None and why there is none.

        The records were lost at the first of two moments: a leader of a higher epoch took over without them,
        or the acknowledging leader's own log lost them (truncated, or recovered shorter after a power cut).
        The fault that took them is the last one applied to that leader before that moment; other faults on
        it while the acks went on are told as context. Duplicates have no such moment: theirs is the fault
        under way while they were acknowledged."""
        part = self.parts.get((r["topic"], r["partition"]))
        first, last = r.get("first_ns"), r.get("last_ns")
        if first is None or last is None:
            return None, "the messages have no acknowledgement time to place them"
        if part is None or not part.events:
            return None, "no broker event names this partition (were the node logs parsed?)"
        at = first
        leader = part.leader_at(at)
        if leader is None:
            at = first - ACK_LAG_NS
            leader = part.leader_at(at)
        if leader is None:
            return None, f"no broker believed itself leader of {part.name} at {seconds(first)}"
        node, epoch = leader["node"], leader.get("leader_epoch")
        successor = part.successor(at, leader)
        cut = part.cut(node, at, r.get("max_offset"))
        if r["anomaly"] == "duplicated":
            moment = last
        else:
            moments = [e["time_ns"] for e in (successor, cut) if e is not None]
            if not moments:
                return None, (f"{node} acknowledged them as leader in epoch {epoch}, but no new leader and no cut of "
                              f"its log is logged after {seconds(first)}")
            moment = min(moments)
        fault = self.fault_for(node, first, moment, latest=r["anomaly"] != "duplicated")
        if fault is None:
            return None, (f"no fault was under way on {node} (leader in epoch {epoch}) or anywhere between "
                          f"{seconds(first)} and {seconds(moment)}")
        steps = [step(leader, f"{node} leader of {part.name} in epoch {epoch}")]
        steps += [fault_step(w, "while they were acknowledged: ") for w in self.faults
                  if w is not fault and node in w["targets"] and w["start_ns"] <= last
                  and (w["end_ns"] is None or w["end_ns"] >= first)]
        steps.append(fault_step(fault))
        if successor is not None and (cut is None or successor["time_ns"] <= cut["time_ns"]):
            steps.append(step(successor, self.succession(part, successor)))
        if cut is not None and r["anomaly"] != "duplicated":
            steps.append(step(cut, cut_phrase(cut)))
        steps[1:] = sorted(steps[1:], key=lambda s: s["time_ns"])
        made = None if self.started_ms is None else \
            (self.started_ms + (first - BATCH_AGE_NS) // 10**6, self.started_ms + last // 10**6 + 1)
        held = part.holders(epoch, r.get("min_offset"), r.get("max_offset"), made)
        chain = {k: r.get(k) for k in ("anomaly", "topic", "partition", "count", "first_ns", "last_ns",
                                       "min_offset", "max_offset")}
        chain.update(fault=fault["index"], fault_hit_leader=node in fault["targets"], leader=node,
                     leader_epoch=epoch, successor=None if successor is None else successor["node"],
                     truncated_to=None if cut is None else cut.get("to_offset", cut.get("log_end_offset")),
                     held_by=dict(held) if self.have_disks else None, steps=steps)
        if r["anomaly"] == "duplicated":
            chain["copies"] = self.copies(part, r)
        chain["sentence"] = sentence(part.name, chain, steps, self.have_disks)
        return chain, ""

    def fault_for(self, node: str, first: int, moment: int, latest: bool = True) -> Event | None:
        """A fault applied to ``node`` before ``moment`` and not healed before ``first``; failing that, one under way
        anywhere between them (a fault on another node can move leadership too). ``latest``: the last applied
        (what removed the records); else the first (what the re-sends of duplicates ran under)."""
        def live(w: Event) -> bool:
            return w["start_ns"] <= moment and (w["end_ns"] is None or w["end_ns"] + AFTER_NS >= first)
        on_node = [w for w in self.faults if node in w["targets"] and live(w)]
        found = on_node or [w for w in self.faults if live(w)]
        if not found:
            return None
        return max(found, key=lambda w: w["start_ns"]) if latest else min(found, key=lambda w: w["start_ns"])

    def succession(self, part: Partition, successor: Event) -> str:
        election = part.election(successor)
        unclean = (election or {}).get("unclean") or any(
            e["kind"] == "unclean_recovered" and e["node"] == successor["node"]
            and e["time_ns"] >= successor["time_ns"] - 5 * 10**9 for e in part.events)
        end = successor.get("log_end_offset")
        return (f"{successor['node']} {'uncleanly elected ' if unclean else ''}leader in epoch "
                f"{successor.get('leader_epoch')}" + ("" if end is None else f" with log end {end:,}"))

    def copies(self, part: Partition, r: Event) -> dict[str, Any]:
        """For the duplicated examples of this range: the batch of each copy on a replica's disk, and whether the
        copies are one batch appended twice (same producer id, producer epoch and base sequence), records the
        idempotent client sent again in another batch, or retries of a producer without a producer id (not
        idempotent: Kafka cannot tell a retry from a new record)."""
        tally = {"same_batch_twice": 0, "sent_again": 0, "not_idempotent": 0}
        seen = []
        low, high = r.get("min_offset"), r.get("max_offset")
        for ex in self.examples.get("duplicated", []):
            offsets = sorted({rd["offset"] for rd in ex.get("reads", []) if rd.get("phase") == "final"
                              and rd.get("topic") == r["topic"] and rd.get("partition") == r["partition"]})
            if len(offsets) < 2 or (low is not None and high is not None and not low <= offsets[0] <= high):
                continue
            found = [part.batch_at(None, o) for o in offsets[:2]]
            if any(b is None for b in found):
                continue
            ids = [(b.get("producer_id"), b.get("producer_epoch"), b.get("base_sequence")) for b in found]
            seen.append({"producer": ex["producer"], "seq": ex["seq"], "offsets": offsets[:2],
                         "batches": [{k: b.get(k) for k in ("base_offset", "producer_id", "producer_epoch",
                                                            "base_sequence", "leader_epoch")} for b in found]})
            pid = ids[0][0]
            kind = "not_idempotent" if pid is None or pid < 0 else "same_batch_twice" if ids[0] == ids[1] \
                else "sent_again"
            tally[kind] += 1
        return {**tally, "examples": seen[:5]}


def batch_identity(b: Event) -> tuple[Any, ...]:
    """What makes two replicas' batches the same batch (a follower copies a batch whole)."""
    return (b["base_offset"], b["last_offset"], b.get("leader_epoch"), b.get("producer_id"), b.get("producer_epoch"),
            b.get("base_sequence"), b.get("create_time_ms"))


def process_stops(faults: Iterable[Event]) -> list[Event]:
    """A ``process_stop`` for every node a fault of a STOPPING kind took down (a killed or powered-off process's
    log cannot say so itself; a broker whose disk is full acknowledges nothing more), at the moment the fault was
    known to have taken effect: acks may still arrive between its start and then."""
    return [{"kind": "process_stop", "node": node, "time_ns": w.get("applied_ns", w["start_ns"]), "line": 0}
            for w in faults if w["fault"] in STOPPING for node in w["targets"]]


def step(event: Event, what: str) -> Event:
    return {"time_ns": event["time_ns"], "node": event["node"], "line": event.get("line"), "what": what}


def fault_step(w: Event, prefix: str = "") -> Event:
    return {"time_ns": w["start_ns"], "node": ", ".join(w["targets"]), "line": None,
            "what": f"{prefix}{fault_phrase(w)} (fault {w['index']})"}


def fault_phrase(w: Event) -> str:
    """``SIGKILL broker2 at 31.0 s``: what the fault did, in its own words when it said them."""
    what = (w.get("detail") or f"{w['fault']} {', '.join(w['targets'])}").split(";")[0]
    if len(what) > 60:  # a long account (a power cut's timings) is cut to what it did
        what = what.split(":")[0]
    landed = w.get("applied_ns", w["start_ns"]) - w["start_ns"]  # a busy machine may take a while to apply it
    return f"{what} at {seconds(w['start_ns'])}" + (f" (in effect by {seconds(w['applied_ns'])})"
                                                    if landed > LANDED_NOTE_NS else "")


def cut_phrase(cut: Event) -> str:
    if cut["kind"] == "log_loaded":
        return f"{cut['node']} recovered its log ending at {cut['log_end_offset']:,}"
    if cut.get("reason") == "corruption":
        return f"{cut['node']} recovered its log cut at {cut['to_offset']:,} (the rest never reached its disk)"
    return f"{cut['node']} truncated to {cut['to_offset']:,}"


def sentence(name: str, chain: Event, steps: list[Event], have_disks: bool) -> str:
    """The chain in one sentence, e.g. "chaos-3: 1,204 records (offsets 13,100–14,303) acknowledged by broker2 as
    leader in epoch 5 between 30.1 and 31.0 s; SIGKILL broker2 at 31.0 s (fault 2); …; no replica holds them."."""
    low, high = chain.get("min_offset"), chain.get("max_offset")
    offsets = "" if low is None else f" (offset {low:,})" if low == high else f" (offsets {low:,}–{high:,})"
    verb = {"lost": "lost", "divergent": "overwritten", "duplicated": "duplicated"}[chain["anomaly"]]
    parts = [f"{name}: {chain['count']:,} records {verb}{offsets}, acknowledged by {chain['leader']} as leader in "
             f"epoch {chain['leader_epoch']} between {seconds(chain['first_ns'])} and {seconds(chain['last_ns'])}"]
    parts += [s["what"] if s["line"] is None else f"{s['what']} at {seconds(s['time_ns'])}" for s in steps[1:]]
    if chain["anomaly"] == "duplicated":
        c = chain["copies"]
        n = c["same_batch_twice"] + c["sent_again"] + c["not_idempotent"]
        if n:
            parts.append(f"of {n} examples on disk, {c['same_batch_twice']} sit in one batch appended twice (same "
                         f"producer id, epoch, base sequence), {c['sent_again']} were sent again by the idempotent "
                         f"client in another batch, {c['not_idempotent']} were retries of a producer with no "
                         f"producer id")
    elif not have_disks:
        parts.append("the replicas' disks were not read")
    elif chain["held_by"]:
        parts.append("still on " + ", ".join(f"{n} ({k:,} offsets)" for n, k in sorted(chain["held_by"].items())))
    elif low is not None:
        parts.append("no replica holds them")
    return "; ".join(parts) + "."


# --- transactions: the chain of one transaction of the examples ----------------------------------------------

EFFECTS = {  # what the anomaly did to the transaction, by its outcome
    "aborted_read": "its messages visible to read_committed although {outcome}",
    "torn_transaction": "{visible} of its messages visible to read_committed and {missing} not, although {outcome}",
    "lost": "{n} of its acknowledged messages lost although it committed",
}
OUTCOME_WORDS = {"aborted": "aborted", "committed": "committed", "unknown": "it never committed"}


def producer_of(client: Any) -> str | None:
    """The producer process a client.id names (``kchaos-p1`` -> p1, ``kchaos-p1.2`` -> p1.2; workloads set
    ``client.id`` to ``kchaos-<process name>``), or None for another client."""
    return client[len("kchaos-"):] if isinstance(client, str) and client.startswith("kchaos-") else None


def base_name(producer: str) -> str:
    """A producer process's name without its replacement number (p1.2 -> p1): one transactional.id."""
    head, _, tail = producer.rpartition(".")
    return head if head and tail.isdigit() else producer


def request_api(r: Event) -> str:
    """``EndTxn(COMMIT)``, ``EndTxn(ABORT)`` or the request's API name."""
    committed = (r.get("detail") or {}).get("committed")
    return f"{r.get('api')}({'COMMIT' if committed else 'ABORT'})" if r.get("api") == "EndTxn" \
        and isinstance(committed, bool) else str(r.get("api"))


def answered(r: Event) -> str:
    """What the broker answered a held request, as the chain says it: nothing when it said no error."""
    error = r.get("response_error")
    return "" if error in (None, 0, "none") else f" (answered error {error})"


def journey(r: Event) -> str:
    """When a held request was sent, how long it was held, where and when it arrived."""
    return (f"sent at {seconds(r['held_ns'])} and held {(r['released_ns'] - r['held_ns']) / 1e9:.1f} s, reached "
            f"{broker_name(r.get('node'))} at {seconds(r['released_ns'])}")


def broker_name(node: Any) -> str:
    return f"broker{node}" if isinstance(node, int) else str(node)


class TransactionExplainer:
    """Chains for the transactions of the examples of aborted_read, torn_transaction and (transactional) lost."""

    def __init__(self, events: list[Event], txns: list[Event], examples: dict[str, list[Event]] | None,
                 reused: list[Event] | None = None) -> None:
        """``reused``: the sequence-reuse chains (forensics/sequence_reuse.py), whose acknowledgements a
        transaction's chain names instead of the held requests it would look for."""
        self.faults = fault_windows(events)
        self.reused: dict[tuple[str, int], list[Event]] = defaultdict(list)
        told: set[tuple[str, int]] = set()  # a lost acknowledgement is in a divergent range's chain too
        for c in reused or ():
            for r in c.get("reused") or ():
                if (r["producer"], r["seq"]) not in told:
                    told.add((r["producer"], r["seq"]))
                    self.reused[(r["producer"], r["txn"])].append({**r, "topic": c["topic"],
                                                                   "partition": c["partition"]})
        self.requests = sorted((e for e in events if e.get("kind") == "request" and e.get("released_ns") is not None
                                and e.get("held_ns") is not None and e.get("action") != "watched"),
                               key=lambda e: e["released_ns"])
        self.txns = {(t["producer"], t["txn"]): t for t in txns}
        self.by_producer: dict[str, list[Event]] = defaultdict(list)
        for t in txns:
            self.by_producer[t["producer"]].append(t)
        self.examples = examples or {}

    def wanted(self) -> dict[tuple[str, str, int], dict[str, Any]]:
        """(anomaly, producer, txn) -> what the examples say of it (how many of its messages, visible/missing)."""
        out: dict[tuple[str, str, int], dict[str, Any]] = {}
        for anomaly in TXN_EXPLAINED:
            for ex in self.examples.get(anomaly, []):
                if not isinstance(ex, dict) or not isinstance(ex.get("producer"), str):
                    continue
                txn = ex.get("txn") if anomaly == "torn_transaction" else (ex.get("send") or {}).get("txn")
                if not isinstance(txn, int):
                    continue  # a message of no transaction (a run without them): the ranges' chains tell it
                entry = out.setdefault((anomaly, ex["producer"], txn), {"n": 0})
                entry["n"] += 1
                if anomaly == "torn_transaction":
                    entry.update(visible=ex.get("visible_count"), missing=ex.get("missing_count"),
                                 outcome=ex.get("outcome"))
        return out

    def explain(self) -> list[Event]:
        return [self.chain(anomaly, producer, txn, told)
                for (anomaly, producer, txn), told in sorted(self.wanted().items(), key=lambda kv: (
                    TXN_EXPLAINED.index(kv[0][0]), kv[0][1], kv[0][2]))]

    def window(self, t: Event | None) -> tuple[int | None, int | None]:
        """When the transaction was open: its begin (else the call that ended it) to its outcome."""
        if t is None:
            return None, None
        begin = t.get("begin_ns") if t.get("begin_ns") is not None else t.get("invoke_ns")
        return begin, t.get("complete_ns")

    def owner(self, producer: str, r: Event) -> Event | None:
        """The transaction of ``producer`` a request sent at held_ns belonged to: the last one begun before it."""
        begun = [t for t in self.by_producer.get(producer, []) if (self.window(t)[0] or 0) <= r["held_ns"]]
        return max(begun, key=lambda t: (self.window(t)[0] or 0, t["txn"]), default=None)

    def late(self, producer: str, begin: int | None, end: int | None) -> list[Event]:
        """Requests of the same transactional.id sent before ``begin`` and delivered to their broker while the
        transaction was open (from ``begin`` to ``end``; None: to the end of the run), EndTxn first."""
        if begin is None:
            return []
        same = [r for r in self.requests if (p := producer_of(r.get("client"))) is not None
                and base_name(p) == base_name(producer) and r["held_ns"] < begin
                and begin <= r["released_ns"] and (end is None or r["released_ns"] <= end)]
        return sorted(same, key=lambda r: (r.get("api") != "EndTxn", r["released_ns"]))

    def own_late(self, producer: str, t: Event | None) -> list[Event]:
        """The transaction's own writes (a Produce, AddPartitionsToTxn, TxnOffsetCommit: any request but its
        EndTxn), sent while it was open and delivered after the application asked to end it: a write that may
        land after its end marker, where the producer's next transaction takes it in (a zombie write)."""
        begin, end = self.window(t)
        asked = (t or {}).get("invoke_ns")
        if begin is None or asked is None:
            return []
        return [r for r in self.requests if (p := producer_of(r.get("client"))) is not None
                and base_name(p) == base_name(producer) and r.get("api") != "EndTxn"
                and begin <= r["held_ns"] and (end is None or r["held_ns"] <= end) and r["released_ns"] > asked]

    def chain(self, anomaly: str, producer: str, txn: int, told: dict[str, Any]) -> Event:
        t = self.txns.get((producer, txn))
        outcome = (t or {}).get("outcome") or told.get("outcome") or "unknown"
        intent = (t or {}).get("intent")
        begin, end = self.window(t)
        effect = EFFECTS[anomaly].format(outcome=OUTCOME_WORDS.get(outcome, outcome), n=told["n"],
                                         visible=told.get("visible", "?"), missing=told.get("missing", "?"))
        head = f"transaction {txn} of {producer}: {effect}"
        steps: list[Event] = []
        if begin is not None:
            steps.append({"time_ns": begin, "node": producer, "line": None, "what": f"transaction {txn} begun"})
        late = self.late(producer, begin, end)
        parts = [head]
        own = [] if late else self.own_late(producer, t)
        told_requests = [(r, f"its own {request_api(r)}, {journey(r)}, after the application asked to "
                             f"{intent or 'end it'} at {seconds((t or {})['invoke_ns'])}") for r in own[:3]]
        for r in late[:3]:
            sender = producer_of(r.get("client")) or "?"
            owned = self.owner(sender, r)
            of = f"of transaction {owned['txn']}" + ("" if sender == producer else f" of {sender}") \
                if owned is not None else f"of {sender}"
            told_requests.append((r, f"the {request_api(r)} {of}, {journey(r)} while {txn} was open"))
        late = own or late
        for r, what in told_requests:
            what += answered(r)
            parts.append(what)
            steps.append({"time_ns": r["released_ns"], "node": broker_name(r.get("node")), "line": None,
                          "what": what})
        reused = self.reused.get((producer, txn))
        if reused and not late:
            held = sorted({r["held_txn"] for r in reused})
            parts.append(f"{len(reused)} of its messages were acknowledged at offsets that hold records of "
                         f"transaction {', '.join(map(str, held))}, which the client had reported purged (a reused "
                         f"sequence: " + ", ".join(f"{r['topic']}-{r['partition']} offset {r['offset']:,}"
                                                   for r in reused[:4]) + ")")
        elif not late:
            parts.append(self.known(t, producer, outcome, intent, begin, end))
        faults = [w for w in self.faults if begin is not None and w["start_ns"] <= (end if end is not None else
                  w["start_ns"]) and (w["end_ns"] is None or w["end_ns"] >= begin)]
        if late and faults:
            parts.append("under " + ", ".join(f"{fault_phrase(w)} (fault {w['index']})" for w in faults))
        steps += [fault_step(w) for w in faults]
        if end is not None:
            steps.append({"time_ns": end, "node": producer, "line": None,
                          "what": f"transaction {txn} {outcome}" + (f" (asked to {intent})" if intent else "")})
        steps.sort(key=lambda s: s["time_ns"])
        return {"anomaly": anomaly, "producer": producer, "txn": txn, "count": told["n"], "outcome": outcome,
                "intent": intent, "begin_ns": begin, "complete_ns": end, "first_ns": begin, "last_ns": end,
                "fault": faults[0]["index"] if faults else None,
                "request": None if not late else {k: late[0].get(k) for k in (
                    "fault", "api", "client", "node", "connection", "correlation_id", "held_ns", "released_ns",
                    "response_error", "detail")},
                "steps": steps, "sentence": "; ".join(parts) + "."}

    def known(self, t: Event | None, producer: str, outcome: str, intent: Any, begin: int | None,
              end: int | None) -> str:
        """Without a late request: what is known (its outcome, what the application asked, the faults)."""
        if t is None:
            return f"txns.jsonl has no line for it; no request of {base_name(producer)} was held past its begin"
        asked = {"commit": "the application asked to commit", "abort": "the application asked to abort",
                 None: "the application never asked to end it"}.get(intent, "what the application asked is not known")
        window = f"open {seconds(begin)}–{seconds(end)}" if end is not None else f"open from {seconds(begin)}"
        faults = [w for w in self.faults if begin is not None and w["start_ns"] <= (end if end is not None else
                  w["start_ns"]) and (w["end_ns"] is None or w["end_ns"] >= begin)]
        under = ("faults under way: " + ", ".join(f"{fault_phrase(w)} (fault {w['index']})" for w in faults)
                 if faults else "no fault was under way")
        return (f"{outcome}, {asked} ({window}); no held request of {base_name(producer)} reached a broker while it "
                f"was open; {under}")
