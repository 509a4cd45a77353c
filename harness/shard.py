"""Splitting the nightly set into N shards that every shard computes alike, balanced by expected duration.

Each shard of ``kchaos nightly --shard K/N`` runs on its own machine and
sees nothing of the others, so the partition must follow from the inputs
alone: the variants, their expected durations and N. It is a greedy
longest-processing-time assignment (longest first, each to the least loaded
shard), ties broken by variant name and then by shard number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from catalogue.exits import HarnessError

if TYPE_CHECKING:  # the CLI parses --shard before it loads what runs clusters
    from harness.scenario import Scenario

SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
# What a run costs besides its load and settle time (calibrated on 6-node runs, which took
# duration + settle + 18-20 s): the process, the check and the report, plus each node's start,
# readiness and teardown.
RUN_OVERHEAD_S = 8.0
NODE_OVERHEAD_S = 2.0


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 1) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``K/N`` with 1 <= K <= N; else a one-line HarnessError."""
    match = SHARD.match(text)
    if not match:
        raise HarnessError(f"--shard {text!r}: expected K/N, e.g. 2/4")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise HarnessError(f"--shard {text}: K must be between 1 and N (1 <= K <= N)")
    return Shard(index, count)


def expected_seconds(scenario: "Scenario") -> float:
    """How long one ``kchaos run`` of the scenario should take, from the scenario alone.

    The schedule's warm-up is not added: it is the first part of the load
    (faults start warmup_s into workload.duration_s; harness/run.py).
    """
    c = scenario.cluster
    nodes = c.brokers + (c.zookeepers if c.metadata == "zookeeper" else c.controllers)
    return load_seconds(scenario) + RUN_OVERHEAD_S + NODE_OVERHEAD_S * nodes


def load_seconds(scenario: "Scenario") -> float:
    """The part of a run the scenario asks for: the workload (its warm-up included) and the settling after it;
    the rest of a run's wall time is the harness's overhead (cluster, read-back, check, report, teardown)."""
    return scenario.workload.duration_s + scenario.schedule.settle_s


def partition(durations: dict[str, float], count: int) -> list[list[str]]:
    """The names split into ``count`` lists (shard 1 first), balanced by duration; deterministic.

    Longest first (ties: by name), each to the shard with the least expected
    time so far (ties: the lowest shard number).
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, not {count}")
    shards: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for name in sorted(durations, key=lambda n: (-durations[n], n)):
        least = min(range(count), key=lambda i: (loads[i], i))
        shards[least].append(name)
        loads[least] += durations[name]
    return shards
