"""Does a verdict meet the scenario's ``expect:`` block, and could the run judge it at all?

The one rule for "not judged", used by ``kchaos check``, ``kchaos run``, the
nightly's JUnit (through their exit codes) and the matrix: a run whose final
read-back never happened, or whose faults never took effect, proved nothing;
and an expectation is judged only when the messages the run could not verify
(an incomplete read-back) cannot change whether it holds.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from catalogue.anomalies import ANOMALIES, ANOMALY_LIST, UNBOUNDED
from catalogue.exits import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID

OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq, "=": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}

MET, UNMET, NOT_JUDGED = "met", "unmet", "not judged"

# What an ``expect:`` block may name, and how it states a count: 3, ">0", "<= 10".
EXPECTABLE = ("valid", *ANOMALIES, "acked", "failed")
# Names an expect block once took and what they are now: a scenario file naming one is refused with the new name
# (harness/scenario.py), a run directory's scenario.yaml written before the rename is read with the new name.
RENAMED = {"indeterminate": "unknown"}
EXPECTATION = re.compile(r"^\s*(==|>=|<=|>|<|=)?\s*(\d+)\s*$")

# Counts that messages beyond an incomplete read-back could only raise (the catalogue's ``unverified``): by at most
# the count named (lost by the acknowledged messages not found there, lost_unverifiable), or by any amount.
RAISED_BY_UNVERIFIED = {a.name: a.unverified for a in ANOMALY_LIST if a.unverified not in (None, UNBOUNDED)}
RAISED_WITHOUT_BOUND = tuple(a.name for a in ANOMALY_LIST if a.unverified == UNBOUNDED)
# The workload role whose client an anomaly is about (an expectation keyed by client picks by it); the tallies
# are the producers'.
ROLE_OF = {a.name: a.role for a in ANOMALY_LIST}


@dataclass
class Assessment:
    """What the run may conclude: ``outcome`` met / unmet / not judged, with one line per reason."""

    outcome: str
    unmet: list[str] = field(default_factory=list)
    not_judged: list[str] = field(default_factory=list)
    proved_nothing: bool = False  # the run as a whole is not judged (cut short, no fault took effect)

    @property
    def exit_code(self) -> int:
        return {MET: EXIT_VALID, UNMET: EXIT_INVALID}.get(self.outcome, EXIT_HARNESS)

    def as_json(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "unmet": self.unmet, "not_judged": self.not_judged}


# an expectation given per Kafka release: the key names the releases it is for ("kafka<3.6", "kafka>=4.0")
RELEASE_CONDITION = re.compile(r"^kafka(>=|<=|>|<|==)(\d+(?:\.\d+){0,2})$")


def release_numbers(version: str) -> tuple[int, ...]:
    """A release as numbers to compare and sort by (3.10.0 after 3.9.2; a part that is not a number counts 0)."""
    return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))


def release_holds(condition: str, version: str) -> bool:
    """Whether Kafka ``version`` (3.9.2) meets ``condition`` (kafka>=3.6), compared part by part as numbers."""
    found = RELEASE_CONDITION.match(condition)
    assert found is not None  # the scenario validated it
    op, bound = found.group(1), release_numbers(found.group(2))
    release = release_numbers(version)[:len(bound)]
    return OPS[op](release, bound)  # type: ignore[arg-type]


def for_clients(expect: dict[str, Any] | None, scenario: dict[str, Any] | None) -> dict[str, Any]:
    """The expectations that apply to this run: one given per client (``{librdkafka: ">0", java: 0}``) is the
    value for the client that ran the anomaly's role, one given per release (``{"kafka<3.6": ">0", "kafka>=3.6":
    0}``) the value of the first condition the cluster's release meets; none when nothing applies. A name the
    expect block once took is read as the one it became (``RENAMED``)."""
    out = {}
    version = str(((scenario or {}).get("cluster") or {}).get("kafka_version") or "")
    for key, wanted in (expect or {}).items():
        key = RENAMED.get(key, key)
        if isinstance(wanted, dict):
            by_release = [v for k, v in wanted.items() if RELEASE_CONDITION.match(k) and release_holds(k, version)]
            wanted = by_release[0] if by_release else wanted.get(client_of(key, scenario))
        if wanted is not None:
            out[key] = wanted
    return out


def client_of(key: str, scenario: dict[str, Any] | None) -> str:
    """The client (librdkafka or java) of the role anomaly ``key`` is about, in a resolved scenario.yaml."""
    workload = (scenario or {}).get("workload") or {}
    role = workload.get(ROLE_OF.get(key, "producers")) or {}
    return str((role.get("client") if isinstance(role, dict) else None) or workload.get("client") or "librdkafka")


def unverified(results: dict[str, Any]) -> tuple[int, str] | None:
    """How many acknowledged messages the run could not verify, and why; None when it verified every one."""
    counts = results.get("counts") or {}
    if results.get("final_read_complete", True):
        return None
    unread = {tuple(p) for p in results.get("unread_committed_partitions") or [] if isinstance(p, list)}
    short = len({tuple(p) for p in results.get("incomplete_partitions") or [] if isinstance(p, list)} - unread)
    why = []
    if short or not unread:
        why.append(f"the final read of {short} partition{'s' if short != 1 else ''} did not reach the high watermark")
    if unread:
        n = len(unread)
        why.append(f"the read_committed read-back left no final-read event for {n} partition{'s' if n != 1 else ''} "
                   "with transactional sends, so it proved nothing about their committed messages")
    return int(counts.get("lost_unverifiable", 0)), "; ".join(why)


def unverified_text(missing: tuple[int, str]) -> str:
    return f"{missing[1]}, {missing[0]:,} acknowledged message{'s' if missing[0] != 1 else ''} not found there"


def run_not_judged(results: dict[str, Any], scenario: dict[str, Any] | None) -> list[str]:
    """Why the run as a whole proved nothing (empty: it may be judged)."""
    reasons = []
    if results.get("cut_short"):
        reasons.append("the run was cut short: no final read-back was recorded")
    planned = len((scenario or {}).get("faults") or [])
    faults = results.get("faults")
    if planned and isinstance(faults, dict) and not faults.get("applied"):
        why = "; ".join(faults.get("skip_reasons") or []) or "none was applied before the load ended"
        reasons.append(f"none of the scenario's {planned} fault{'s' if planned != 1 else ''} took effect ({why})")
    return reasons


def bounds(key: str, results: dict[str, Any], missing: int | None) -> tuple[float, float]:
    """The values ``key`` could take had every message been verified (``missing``: None when all were)."""
    actual = int(results["counts"][key])
    if missing is None:
        return actual, actual
    if key in RAISED_BY_UNVERIFIED:
        return actual, actual + int(results["counts"].get(RAISED_BY_UNVERIFIED[key], 0))
    if key in RAISED_WITHOUT_BOUND:
        return actual, math.inf
    return actual, actual


def decide(op: str, bound: int, low: float, high: float) -> bool | None:
    """Whether ``value op bound`` holds for every value in [low, high] (True), for none (False), or depends (None)."""
    holds = OPS[op]
    if low == high:
        return holds(low, bound)
    if op in ("==", "="):
        return False if not low <= bound <= high else None
    at_low, at_high = holds(low, bound), (holds(high, bound) if high != math.inf else op in (">", ">="))
    return at_low if at_low == at_high else None


def assess(expect: dict[str, Any] | None, results: dict[str, Any],
           scenario: dict[str, Any] | None = None) -> Assessment:
    """Judge the results against the expectations (none: the verdict itself must be valid).

    Not judged when the run proved nothing (``run_not_judged``), or when some
    expectation could go either way on the messages the run could not verify
    and none is definitely unmet.
    """
    reasons = run_not_judged(results, scenario)
    if reasons:
        return Assessment(NOT_JUDGED, not_judged=reasons, proved_nothing=True)
    missing = unverified(results)
    failures, open_ = [], []
    checks = for_clients(expect, scenario) if expect else {"valid": True}
    for key, wanted in checks.items():
        if key == "valid":
            valid = bool(results["valid"])  # more reads could only find more anomalies
            if valid and missing:
                open_.append(f"valid not judged: {unverified_text(missing)}")
            elif valid != wanted:
                failures.append(f"valid is {str(valid).lower()}, expected {str(wanted).lower()}"
                                if expect else "the verdict is not valid")
            continue
        if isinstance(wanted, int):
            op, bound = "==", wanted
        else:
            match = EXPECTATION.match(wanted)
            assert match is not None  # the scenario validated it
            op, bound = match.group(1) or "==", int(match.group(2))
        low, high = bounds(key, results, None if missing is None else missing[0])
        holds = decide(op, bound, low, high)
        wanted_text = f"{op}{bound}" if op not in ("==", "=") else str(bound)
        if holds is False:
            failures.append(f"{key} is {int(results['counts'][key])}, expected {wanted_text}")
        elif holds is None:
            assert missing is not None
            could_be = f"{low:g}..{high:g}" if high != math.inf else f"{low:g} or more"
            open_.append(f"{key}: {wanted_text} not judged: {unverified_text(missing)}; {key} could be {could_be}")
    if failures:
        return Assessment(UNMET, unmet=failures, not_judged=open_)
    return Assessment(NOT_JUDGED if open_ else MET, not_judged=open_)
