"""The nemesis: applies faults on a seeded schedule, heals them, records both.

After a warm-up, the faults of the scenario take turns: each starts a random
interval (within its bounds) after the previous start, holds for its
duration, and heals. Nothing starts that could not heal before the end of
the load, and ``stop()`` heals whatever is active. Every application and heal
is one ``fault`` line in events.jsonl (``phase`` start / heal). A fault that
cannot be applied or healed stops the schedule; the run then heals and exits 2.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Any

from clusters.cluster import Cluster
from clusters.node import Node
from faults.base import Fault, FaultError
from faults.registry import FAULTS
from workloads.history import History

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FaultPlan:
    """One fault of the scenario: what, whom, how often, how long."""

    kind: str
    target: str
    interval_s: tuple[float, float]
    duration_s: float
    options: tuple[tuple[str, Any], ...] = ()


@dataclass
class ActiveFault:
    plan: FaultPlan
    fault: Fault
    nodes: list[Node]
    start_ns: int
    detail: str


class Nemesis:
    """Runs the fault schedule in a thread of its own."""

    def __init__(self, cluster: Cluster, topic: str, plans: list[FaultPlan], history: History,
                 seed: int, warmup_s: float, load_s: float) -> None:
        self.cluster = cluster
        self.topic = topic
        self.plans = plans
        self.history = history
        self.rng = random.Random(seed)
        self.warmup_s = warmup_s
        self.load_s = load_s
        self.applied = 0
        self.active: ActiveFault | None = None
        self.error: FaultError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    @property
    def current(self) -> str:
        active = self.active
        return f"{active.plan.kind} {', '.join(n.name for n in active.nodes)}" if active else "none"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop scheduling and heal whatever is active (waits for it)."""
        self._stop.set()
        self._thread.join()

    def _sleep_until(self, t_s: float) -> bool:
        """Wait until run time ``t_s``; False when stopped first."""
        return not self._stop.wait(max(0.0, t_s - self.history.clock.seconds()))

    def _run(self) -> None:
        try:
            self._schedule()
        except FaultError as e:
            self.error = e
            log.error("fault failed: %s", e)
        finally:
            try:
                self._heal_active()
            except FaultError as e:
                self.error = self.error or e

    def _schedule(self) -> None:
        if not self.plans or not self._sleep_until(self.warmup_s):
            return
        next_start = self.warmup_s
        turn = 0
        while True:
            plan = self.plans[turn % len(self.plans)]
            turn += 1
            next_start = max(next_start, self.history.clock.seconds())
            if next_start + plan.duration_s > self.load_s or not self._sleep_until(next_start):
                return
            started = self.history.clock.seconds()
            self._apply(plan)
            if not self._sleep_until(started + plan.duration_s):
                return
            self._heal_active()
            next_start = started + self.rng.uniform(*plan.interval_s)

    def _apply(self, plan: FaultPlan) -> None:
        fault = FAULTS[plan.kind](self.cluster, self.topic, self.rng, dict(plan.options))
        nodes = fault.choose(plan.target)
        if not nodes:
            log.info("no %s to %s right now; skipped", plan.target, plan.kind)
            return
        # active before apply: a fault that breaks half its nodes and fails is still healed
        self.active = ActiveFault(plan, fault, nodes, self.history.clock.now_ns(), "")
        self.active.detail = fault.apply(nodes)
        self.applied += 1
        self._record(self.active, "start", None)

    def _heal_active(self) -> None:
        active = self.active
        if active is None:
            return
        active.fault.heal(active.nodes)
        self.active = None
        self._record(active, "heal", self.history.clock.now_ns())

    def _record(self, active: ActiveFault, phase: str, end_ns: int | None) -> None:
        self.history.event("fault", fault=active.plan.kind, phase=phase, target=active.plan.target,
                           options=dict(active.plan.options),
                           targets=[n.name for n in active.nodes], start_ns=active.start_ns, end_ns=end_ns,
                           detail=active.detail, time_ns=self.history.clock.now_ns())
