"""Shrinking a finding: one simplification at a time, kept when a run of it still shows the anomaly.

Findings under faults are probabilistic, so a candidate is run up to ``runs`` times and kept at the first run
that shows the anomaly; one that shows it in none is given up. After a kept step the simplifications start
over from the first. What is left when no simplification keeps the anomaly (or the budget ends) is the
smallest scenario found; the explorer then runs it again to measure its rate. Pure logic: running a trial is
the caller's ``shows``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from harness.explore.space import MOVES, Trial

DURATION = "workload.duration_s"
RATE = "workload.producers.rate"
PRODUCERS = "workload.producers.count"
MIN_FAULT_S = 1.0
MIN_RATE = 100


@dataclass(frozen=True)
class Simplifier:
    """The simplifications of a trial, in the order of ``moves`` (space.MOVES); ``base`` holds the base
    scenario's values of DURATION, RATE and PRODUCERS (what a trial has when it does not set them)."""

    base: dict[str, Any]
    moves: tuple[str, ...] = MOVES
    min_duration_s: float = 20

    def value(self, trial: Trial, key: str) -> Any:
        return trial.settings.get(key, self.base.get(key))

    def candidates(self, trial: Trial) -> Iterator[Trial]:
        for move in self.moves:
            yield from getattr(self, f"_{move}")(trial)

    def _faults(self, trial: Trial) -> Iterator[Trial]:
        """Each fault removed, while more than one is left (the spaces explore faults: a finding with none
        would be another exploration's)."""
        if len(trial.faults) < 2:
            return
        for i, f in enumerate(trial.faults):
            yield _step(trial, f"removed fault {i + 1} ({_named(f)})",
                        faults=[g for j, g in enumerate(trial.faults) if j != i])

    def _nesting(self, trial: Trial) -> Iterator[Trial]:
        for i, f in enumerate(trial.faults):
            if f.get("then"):
                yield _step(trial, f"removed the fault nested in fault {i + 1} ({_named(f['then'])})",
                            faults=_with(trial.faults, i, {k: v for k, v in f.items() if k != "then"}))

    def _durations(self, trial: Trial) -> Iterator[Trial]:
        for i, f in enumerate(trial.faults):
            now = float(f.get("duration_s", 5))
            shorter = max(MIN_FAULT_S, round(now / 2, 1))
            inner = f.get("then")
            if shorter >= now or (inner and inner.get("after_s", 0) + inner.get("duration_s", 5) > shorter):
                continue
            yield _step(trial, f"fault {i + 1} held {shorter:g} s instead of {now:g} s",
                        faults=_with(trial.faults, i, {**f, "duration_s": shorter}))

    def _options(self, trial: Trial) -> Iterator[Trial]:
        for i, f in enumerate(trial.faults):
            for name in f.get("options") or {}:
                options = {k: v for k, v in f["options"].items() if k != name}
                changed = {k: v for k, v in f.items() if k != "options"} | ({"options": options} if options else {})
                yield _step(trial, f"fault {i + 1}'s {name} back to its default",
                            faults=_with(trial.faults, i, changed))

    def _run(self, trial: Trial) -> Iterator[Trial]:
        now = self.value(trial, DURATION)
        if now is not None and float(now) / 2 >= self.min_duration_s:
            yield _step(trial, f"ran {float(now) / 2:g} s instead of {float(now):g} s",
                        settings={**trial.settings, DURATION: float(now) / 2})

    def _load(self, trial: Trial) -> Iterator[Trial]:
        rate, count = self.value(trial, RATE), self.value(trial, PRODUCERS)
        if rate is not None and int(rate) // 2 >= MIN_RATE:
            yield _step(trial, f"{int(rate) // 2} sends/s a producer instead of {int(rate)}",
                        settings={**trial.settings, RATE: int(rate) // 2})
        if count is not None and int(count) > 1:
            yield _step(trial, f"1 producer instead of {int(count)}", settings={**trial.settings, PRODUCERS: 1})

    def _settings(self, trial: Trial) -> Iterator[Trial]:
        for key, value in trial.settings.items():
            if key in (DURATION, RATE, PRODUCERS) or value == self.base.get(key, object()):
                continue
            yield _step(trial, f"{key} back to the base scenario's",
                        settings={k: v for k, v in trial.settings.items() if k != key})


def _named(fault: dict[str, Any]) -> str:
    return " ".join(str(fault[k]) for k in ("kind", "target") if k in fault)


def _with(faults: list[dict[str, Any]], i: int, fault: dict[str, Any]) -> list[dict[str, Any]]:
    return [copy.deepcopy(fault) if j == i else f for j, f in enumerate(faults)]


def _step(trial: Trial, said: str, **changes: Any) -> Trial:
    return replace(trial, steps=[*trial.steps, said], **changes)


@dataclass
class Shrunk:
    """The smallest trial that still showed the anomaly, and what it took to get there."""

    trial: Trial
    candidates: int = 0  # candidates tried
    refused: int = 0  # candidates that could not run (skipped, never counted as runs)
    runs: int = 0  # runs made
    kept: list[str] = field(default_factory=list)  # each kept step, with the run that showed it ("2 of 3 runs")
    out_of_budget: bool = False


def shrink(trial: Trial, simplifier: Simplifier, shows: Callable[[Trial], bool], runs: int,
           budget_left: Callable[[], bool], runnable: Callable[[Trial], bool] = lambda _: True) -> Shrunk:
    """Shrink ``trial`` (which showed the anomaly) while ``shows`` still sees it; stop when no candidate keeps
    it or the budget ends (the smallest so far wins either way). A candidate that is not ``runnable`` (a
    scenario the harness refuses) keeps nothing and is skipped without a run."""
    done = Shrunk(trial)
    while True:
        for candidate in simplifier.candidates(done.trial):
            if not runnable(candidate):
                done.refused += 1
                continue
            done.candidates += 1
            for attempt in range(1, runs + 1):
                if not budget_left():
                    done.out_of_budget = True
                    return done
                done.runs += 1
                if shows(candidate):
                    done.kept.append(f"{candidate.steps[-1]} (shown by run {attempt} of up to {runs})")
                    done.trial = candidate
                    break
            else:
                continue
            break  # a step was kept: start over from the first simplification
        else:
            return done
