"""Fault windows for the report: which fault a moment belongs to, and when a healed node served again.

A window has two parts. *Down* runs from the fault to its heal: for a node whose heal restarts it (killed,
powered off, or a broker that shut itself down on a full disk) until its process started again
(``process_start`` in history/broker-events.jsonl), since the heal that events.jsonl records returns only
once the node serves; otherwise until that heal. *Recovering* runs from there until the
node is back in the ISR of every partition of the workload it was in before the fault: a restarted broker
still replays its log and catches up, and until then the cluster is as short of replicas as during the
fault. The node logs (``isr_expand``, ``become_leader``, ``isr_update``) say when to the millisecond; without
them the once-a-second ``leader`` observations of events.jsonl do.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from typing import Any

from catalogue.faults import FAULT_KINDS
from checkers.breakdown import FaultClock

NS = 1_000_000_000
BROKER = re.compile(r"broker-?(\d+)$")
# broker events that put a node back among a partition's in-sync replicas, and the field naming the ISR
BACK_IN_SYNC = {"isr_expand": "new_isr", "isr_update": "isr", "become_leader": "isr"}
# node events that say a process that is not a broker (ZooKeeper, a controller) serves again
STARTED = ("started", "unfenced")
START = ("process_start",)  # a stopped process runs again: the end of its down part
# faults whose heal starts a node's process again (a disk-full's broker only when it shut itself down)
STOPS_PROCESS = tuple(k.name for k in FAULT_KINDS.values() if k.victim == "node" and k.restarts)


def fault_label(w: dict[str, Any]) -> str:
    """A fault window in a few words: its kind and the nodes it hit."""
    return f"{w['fault']} {', '.join(w['targets']) or w.get('target') or ''}".strip()


def node_id(name: str) -> int | None:
    """The broker id of a node name (``broker2`` -> 2); None for ZooKeeper, controllers and clients."""
    m = BROKER.match(str(name))
    return int(m.group(1)) if m else None


class Blame:
    """Which fault a moment belongs to, in O(log faults) a question (the scan asks once per lost message).

    ``after(t)``: the fault active at t, else the first to start after it. A write acknowledged at t can only
    be lost by a fault that hits at or after t: acks=1 loses what the leader acknowledged just before it died.
    ``before(t)``: the fault active at t, else the last healed before it: what a read or a redelivery at t
    follows from.
    """

    def __init__(self, faults: list[dict[str, Any]]) -> None:
        self.faults = faults
        self.starts = [w["start_ns"] for w in faults]  # the scan sorts windows by start
        self.clock = FaultClock(faults)

    def _active(self, t: int, i: int) -> int | None:
        for j in range(i - 1, -1, -1):  # nested or overlapping windows: the innermost started last
            end = self.faults[j]["end_ns"]
            if end is None or t <= end:
                return j
        return None

    def after(self, t: int) -> int | None:
        return self.clock.after(t)  # the checkers charge their per-fault counts by this rule

    def before(self, t: int) -> int | None:
        i = bisect_right(self.starts, t)
        active = self._active(t, i)
        if active is not None:
            return active
        healed = [j for j in range(i) if self.faults[j]["end_ns"] is not None]
        return max(healed, key=lambda j: self.faults[j]["end_ns"]) if healed else None


def fault_context(t_ns: int | None, faults: list[dict[str, Any]], *, acknowledged: bool = False) -> str:
    """Where a moment sits against the faults, naming the nearest one by its number in the fault table.

    ``acknowledged``: t is when a write was acknowledged, and the fault that matters is the next one.
    """
    if t_ns is None or not faults:
        return ""
    blame = Blame(faults)
    i = blame.after(t_ns) if acknowledged else blame.before(t_ns)
    if i is None:
        i = blame.before(t_ns) if acknowledged else blame.after(t_ns)
    if i is None:
        return ""
    w = faults[i]
    name = f"fault {i + 1} ({fault_label(w)})"
    if w["start_ns"] <= t_ns and (w["end_ns"] is None or t_ns <= w["end_ns"]):
        return f"during {name}, {(t_ns - w['start_ns']) / NS:.2f} s in"
    if t_ns < w["start_ns"]:
        return f"{(w['start_ns'] - t_ns) / NS:.2f} s before {name} began"
    return f"{(t_ns - w['end_ns']) / NS:.2f} s after {name} healed"


def add_recovery(faults: list[dict[str, Any]], leaders: dict[int, list[tuple[int, Any, tuple[int, ...]]]],
                 part_keys: list[tuple[str, int]], broker_events: list[dict[str, Any]]) -> None:
    """Split each window: ``down_ns`` (when its nodes came back: a stopped process's ``process_start`` in its
    log, else the heal) and ``recovered_ns`` (when they served again; None: not by the end of the run), with
    ``recovery`` saying how that was known."""
    times = {part: [t for t, _, _ in obs] for part, obs in leaders.items()}
    logged = _logged_in_sync(part_keys, broker_events)
    for w in faults:
        w["down_ns"], w["recovered_ns"], w["recovery"] = w["end_ns"], w["end_ns"], ""
        if w["end_ns"] is None:
            w["recovery"] = "never healed"
            continue
        if w["fault"] in STOPS_PROCESS:
            restarts = [_logged(name, START, w["start_ns"], broker_events) for name in w["targets"]]
            if restarts and all(t is not None and t <= w["end_ns"] for t in restarts):
                w["down_ns"] = max(restarts)  # type: ignore[type-var]
        back, how = [w["down_ns"]], set()
        for name in w["targets"]:
            broker = node_id(name)
            if broker is None:
                t = _logged(name, STARTED, w["down_ns"], broker_events)
                if t is not None:
                    back.append(t)
                    how.add("its log")
                continue
            for part, obs in leaders.items():
                i = bisect_right(times[part], w["start_ns"])
                if not i or broker not in obs[i - 1][2]:
                    continue  # it was not in this partition's ISR when the fault began
                t, source = _in_sync_again(broker, obs, times[part], logged.get((part, broker), []), w,
                                           _next_fault_on(name, w, faults))
                if t is None:
                    w["recovered_ns"] = None
                    w["recovery"] = f"{name} was not back in every ISR by the end of the run"
                    break
                back.append(t)
                how.add(source)
            if w["recovered_ns"] is None:
                break
        if w["recovered_ns"] is not None:
            w["recovered_ns"] = max(back)
            w["recovery"] = "from " + " and ".join(sorted(how)) if how else ""


def _in_sync_again(broker: int, obs: list[tuple[int, Any, tuple[int, ...]]], times: list[int], logged: list[int],
                   w: dict[str, Any], horizon: int) -> tuple[int | None, str]:
    """When ``broker`` rejoined one partition's ISR after the window's down part, and which source says so.

    The node logs name the moment it was added back. An observation only counts after the last one, before
    the next fault on the same node (``horizon``), that had the broker out of the ISR: a broker restarted
    before the controller noticed it had gone is still listed, and is dropped and re-added later."""
    j = bisect_left(logged, w["down_ns"])
    in_log = logged[j] if j < len(logged) and logged[j] < horizon else None
    first, last = bisect_left(times, w["start_ns"]), bisect_left(times, horizon)
    out = [k for k in range(first, last) if broker not in obs[k][2]]
    k = max(bisect_left(times, w["down_ns"]), out[-1] + 1 if out else 0)
    seen = next((t for t, _, isr in obs[k:last] if broker in isr), None)
    if in_log is not None and (seen is None or in_log <= seen):
        return in_log, "the node logs"
    return seen, "the ISR observations"


def _next_fault_on(name: str, w: dict[str, Any], faults: list[dict[str, Any]]) -> int:
    """When the first fault to hit node ``name`` after ``w`` healed began (a very late time when none did);
    a fault nested inside ``w`` is part of it."""
    return min((f["start_ns"] for f in faults if f["start_ns"] > w["end_ns"] and name in f["targets"]),
               default=1 << 62)


def _logged_in_sync(part_keys: list[tuple[str, int]], broker_events: list[dict[str, Any]]
                    ) -> dict[tuple[int, int], list[int]]:
    """(partition index, broker) -> when the node logs put the broker in the partition's ISR, sorted."""
    index = {key: i for i, key in enumerate(part_keys)}
    logged: dict[tuple[int, int], list[int]] = {}
    for e in broker_events:
        field = BACK_IN_SYNC.get(e.get("kind", ""))
        part = index.get((e.get("topic"), e.get("partition")))
        if field is None or part is None or not isinstance(e.get(field), list):
            continue
        for b in e[field]:
            logged.setdefault((part, b), []).append(e["time_ns"])
    for log in logged.values():
        log.sort()
    return logged


def _logged(node: str, kinds: tuple[str, ...], after_ns: int, broker_events: list[dict[str, Any]]) -> int | None:
    """The first time after ``after_ns`` a node logged one of ``kinds`` (None: its log does not say)."""
    times = [e["time_ns"] for e in broker_events
             if e.get("node") == node and e.get("kind") in kinds and e["time_ns"] >= after_ns]
    return min(times) if times else None
