"""results.json's ``forensics``: why the messages were lost, as the report shows it; absent, nothing is shown.

The forensics stage joins the client histories to the node logs and writes, per anomaly and partition, a
causal chain (a sentence and its steps, each with its log line), the anomalies per fault, and what it could
not explain::

    {"chains": [{"anomaly", "topic", "partition", "count", "first_ns", "last_ns", "min_offset", "max_offset",
                 "sentence", "fault": N, "steps": [{"time_ns", "node", "what", "line"}], ...}],
     "lost_by_fault": [{"fault": N | null, "label", "lost", "duplicated", "divergent"}],
     "unexplained": [{"anomaly", "topic", "partition", "count", "first_ns", "last_ns", "why"}],
     "transaction_chains": [{"anomaly", "producer", "txn", "count", "outcome", "intent", "sentence", "steps",
                             "request": {...} | null, ...}]}

A transaction's chain (aborted_read, torn_transaction, a committed transaction's lost messages) is listed
with the others; it has no partition.

A fault N is the report's fault N: the applied windows in start order, numbered from 1 (skipped ones are not
windows); the row with fault null counts what no chain explains. A step without a log line (the fault itself)
has line null or 0.

Readers ignore what they do not know and skip what is malformed, like every reader of the run directory.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from verdicts.report.logs import log_anchor
from verdicts.report.scan import NS

PER_FAULT = ("lost", "duplicated", "divergent")


def forensics_of(results: dict[str, Any]) -> dict[str, Any]:
    """results.json's ``forensics`` block, or an empty one."""
    block = results.get("forensics")
    return block if isinstance(block, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def step_rows(steps: Any) -> list[dict[str, Any]]:
    """A chain's steps for the page: time, node, what, and the anchor of its log excerpt when it has a line."""
    rows = []
    for s in _dicts(steps):
        line, node = s.get("line"), s.get("node")
        t = s.get("time_ns")
        logged = isinstance(line, int) and line > 0 and bool(node)
        rows.append({"time": f"{t / NS:.3f} s" if isinstance(t, int) else "", "node": node or "",
                     "what": str(s.get("what") or ""), "line": line if logged else None,
                     "anchor": log_anchor(node, line) if logged else None})
    return rows


SHOWN = 5  # the chains listed at the top of the page; the rest are one click away


def chain_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every causal chain (a range's, a transaction's), the most records first: its sentence and its steps."""
    block = forensics_of(results)
    rows = [{**c, "steps": step_rows(c.get("steps"))}
            for c in _dicts(block.get("chains")) + _dicts(block.get("transaction_chains")) if c.get("sentence")]
    return sorted(rows, key=lambda c: -c["count"] if isinstance(c.get("count"), int) else 0)


def unexplained_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What the forensics could not tie to a log event, with why."""
    return [u for u in _dicts(forensics_of(results).get("unexplained")) if u.get("count")]


def fault_counts(results: dict[str, Any], windows: list[dict[str, Any]]) -> tuple[list[Counter[str]] | None, str]:
    """Lost, duplicated and divergent per fault window, and where they come from: the forensics' own counts
    (from the node logs) when results.json has them, else the checker's (``breakdown``: by the time each was
    acknowledged); None when results.json has neither (written before the checker counted per fault)."""
    given = _dicts(forensics_of(results).get("lost_by_fault"))
    source = "from the node logs (forensics; what no chain explains is listed under the chains)"
    if not given:
        breakdown = results.get("breakdown")
        if not isinstance(breakdown, dict) or not isinstance(breakdown.get("faults"), list):
            return None, NO_BREAKDOWN
        given = _dicts(breakdown["faults"])
        source = "each counted at the first fault that hit on or after its acknowledgement (the checker's counts)"
    out: list[Counter[str]] = [Counter() for _ in windows]
    for g in given:
        n = g.get("fault")
        if isinstance(n, int) and 1 <= n <= len(out):
            out[n - 1].update({k: g[k] for k in PER_FAULT if isinstance(g.get(k), int)})
    return out, source


# results.json written before the checkers counted per partition and per fault: the report does not recount
NO_BREAKDOWN = ("not in results.json (written by an older kchaos; `kchaos check` on the run adds them): the report "
                "does not count them itself")


def chain_for(chains: list[dict[str, Any]], topic: Any, partition: Any, offset: Any, t_ns: Any
              ) -> dict[str, Any] | None:
    """The chain that explains a message at this position (its offset range) or time (its first-to-last)."""
    for c in chains:
        if c.get("topic") != topic or c.get("partition") != partition:
            continue
        lo, hi = c.get("min_offset"), c.get("max_offset")
        if isinstance(offset, int) and isinstance(lo, int) and isinstance(hi, int) and lo <= offset <= hi:
            return c
        first, last = c.get("first_ns"), c.get("last_ns")
        if isinstance(t_ns, int) and isinstance(first, int) and isinstance(last, int) and first <= t_ns <= last:
            return c
    return None
