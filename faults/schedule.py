"""The nemesis: applies faults on a seeded schedule, heals them, records both.

After a warm-up, the faults of the scenario take turns: each starts a random
interval (within its bounds) after the previous start, holds for its
duration, and heals. Nothing starts that could not heal before the end of
the load, and ``stop()`` heals whatever is active. Every application and heal
is one ``fault`` line in events.jsonl (``phase`` start / heal; ``targets``
are node names, or client names as they were when the fault hit); an
application that found no victim or nothing to do is one line with ``phase``
skipped and the reason in ``detail``; so is an application that turned out,
once healed, to have changed nothing (a request fault whose window matched
no request: ``Fault.no_effect``), with the start_ns, end_ns and targets of
its start and heal lines, which it voids. After its heal line come the
lines that prove what it did (``Fault.evidence``: a request fault's
``request`` lines, a rolling fault's ``node-version`` lines). A fault that
cannot be applied or healed stops the schedule; the run then heals and exits 2.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusters.cluster import Cluster
from faults.base import Fault, FaultError, FaultSkipped
from faults.registry import FAULTS
from workloads.client import Client
from workloads.history import History

log = logging.getLogger(__name__)


SAME = "same"   # the target of a nested fault that hits what its outer fault hit


@dataclass(frozen=True)
class FaultPlan:
    """One fault of the scenario: what, whom, how often, how long.

    ``then`` is a fault applied ``then.after_s`` into this one and healed
    before it (Jepsen's composed nemeses): a leader cut from its followers
    that then loses power, say. Its target may be ``same``.
    """

    kind: str
    target: str
    interval_s: tuple[float, float]
    duration_s: float
    options: tuple[tuple[str, Any], ...] = ()
    then: "FaultPlan | None" = None
    after_s: float = 0.0


@dataclass
class ActiveFault:
    plan: FaultPlan
    fault: Fault
    victims: list[Any]          # nodes, or workload clients
    names: list[str]            # as they were when hit (a restarted client gets a new name)
    start_ns: int
    detail: str


class Nemesis:
    """Runs the fault schedule in a thread of its own."""

    def __init__(self, cluster: Cluster, topic: str, plans: list[FaultPlan], history: History,
                 seed: int, warmup_s: float, load_s: float, clients: Sequence[Client] = ()) -> None:
        self.cluster = cluster
        self.clients = clients
        self.topic = topic
        self.plans = plans
        self.history = history
        self.rng = random.Random(seed)
        self.warmup_s = warmup_s
        self.load_s = load_s
        self.applied = 0
        self.skipped = 0   # applications recorded as skipped (no victim, or nothing to do)
        self.active: list[ActiveFault] = []   # outermost first; healed innermost first
        self.error: FaultError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    @property
    def current(self) -> str:
        active = list(self.active)
        return " + ".join(f"{a.plan.kind} {', '.join(a.names)}" for a in active) if active else "none"

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
        except Exception as e:  # a bug must not end the schedule in silence: the run exits 2 with it
            self.error = FaultError(f"the fault schedule broke: {type(e).__name__}: {e}")
            log.exception("the fault schedule broke")
        finally:
            try:
                self._heal_active()
            except FaultError as e:
                self.error = self.error or e
            except Exception as e:
                self.error = self.error or FaultError(f"healing broke: {type(e).__name__}: {e}")

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
            outer = self._apply(plan)
            nested = plan.then
            if outer is not None and nested is not None:
                if not self._sleep_until(started + nested.after_s):
                    return
                if self._apply(nested, outer.victims if nested.target == SAME else None) is not None:
                    if not self._sleep_until(started + nested.after_s + nested.duration_s):
                        return
                    self._heal_innermost()
            if not self._sleep_until(started + plan.duration_s):
                return
            self._heal_innermost()
            next_start = started + self.rng.uniform(*plan.interval_s)

    def _apply(self, plan: FaultPlan, victims: list[Any] | None = None) -> ActiveFault | None:
        """Apply ``plan`` to ``victims`` (chosen by its target when None); None when there was nothing to hit."""
        fault = FAULTS[plan.kind](self.cluster, self.topic, self.rng, dict(plan.options), clients=self.clients)
        if victims is None:
            victims = fault.choose(plan.target)
        else:
            victims = [v for v in victims if getattr(v, "running", True)]
        if not victims:
            self._skip(plan, [], f"no {plan.target} to hit right now")
            return None
        # active before apply: a fault that breaks half its victims and fails is still healed
        active = ActiveFault(plan, fault, victims, [v.name for v in victims], self.history.clock.now_ns(), "")
        self.active.append(active)
        try:
            active.detail = fault.apply(victims)
        except FaultSkipped as e:  # it changed nothing: nothing to heal
            self.active.remove(active)
            self._skip(plan, active.names, str(e))
            return None
        self.applied += 1
        self._record(active, "start", None)
        return active

    def _skip(self, plan: FaultPlan, names: list[str], reason: str) -> None:
        """Record an application that did not happen, and why (its nested fault cannot happen either)."""
        log.info("%s on %s skipped: %s", plan.kind, plan.target, reason)
        self.skipped += 1
        now = self.history.clock.now_ns()
        self.history.event("fault", fault=plan.kind, phase="skipped", target=plan.target,
                           options=dict(plan.options), targets=names, start_ns=now, end_ns=now,
                           detail=reason, time_ns=now)
        if plan.then is not None:
            self._skip(plan.then, [], f"its outer {plan.kind} was skipped")

    def _heal_innermost(self) -> None:
        if not self.active:
            return
        active = self.active[-1]
        active.fault.heal(active.victims)
        self.active.pop()
        healed = active.fault.healed()
        if healed:
            active.detail = f"{active.detail}; {healed}" if active.detail else healed
        end_ns = self.history.clock.now_ns()
        self._record(active, "heal", end_ns)
        for line in active.fault.evidence(self.history.clock.origin_ns):
            self.history.event(active.fault.evidence_kind, **line)
        reason = active.fault.no_effect()
        if reason is not None:   # it was on, and changed nothing: not applied after all
            log.info("%s on %s took no effect: %s", active.plan.kind, active.plan.target, reason)
            self.applied -= 1
            self.skipped += 1
            self.history.event("fault", fault=active.plan.kind, phase="skipped", target=active.plan.target,
                               options=dict(active.plan.options), targets=active.names, start_ns=active.start_ns,
                               end_ns=end_ns, detail=reason, time_ns=self.history.clock.now_ns())

    def _heal_active(self) -> None:
        """Heal every active fault, innermost first."""
        while self.active:
            self._heal_innermost()

    def _record(self, active: ActiveFault, phase: str, end_ns: int | None) -> None:
        self.history.event("fault", fault=active.plan.kind, phase=phase, target=active.plan.target,
                           options=dict(active.plan.options),
                           targets=active.names, start_ns=active.start_ns, end_ns=end_ns,
                           detail=active.detail, time_ns=self.history.clock.now_ns())
