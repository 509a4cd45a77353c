"""Which Kafka release each node ran over the run: the timeline's release row, one strip per node.

A rolling fault writes a ``node-version`` line to events.jsonl for each node it restarted (when its process had
stopped, when it served again and on which release) and for each version setting it raised for the whole cluster
(metadata.version, inter.broker.protocol.version). A node's strip has the colour of the release it ran, hatched
grey while the roll had it stopped, a diamond where it served again, and a dashed line where a setting was raised.
A run written before those lines existed has no release row: a note says its fault's detail has each step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from catalogue.faults import writing_evidence
from catalogue.history import NODE_VERSION_STEPS
from verdicts.expect import release_numbers
from verdicts.report.isr import span_bar
from verdicts.report.scan import NS, Scan

ROLLING = writing_evidence("node-version")  # the faults that write node-version lines
RESTARTED, RAISED = NODE_VERSION_STEPS
RELEASE_COLOURS = ("#b0bec5", "#4db6ac", "#9575cd", "#ffb74d", "#aed581", "#f06292")  # oldest release first
STOPPED_COLOUR = "#eeeeee"
ROLES = ("controller", "zookeeper", "broker")  # top to bottom


@dataclass
class Span:
    """A piece of one node's strip: the release it ran from start to end, or None while the roll had it stopped."""

    node: str
    start_ns: int
    end_ns: int
    version: str | None
    line: dict[str, Any] | None = None  # the node-version line that ends a stop: when it served, back in sync


def restarts(scan: Scan) -> list[dict[str, Any]]:
    """The node-version lines of nodes a roll restarted, in time order (lines missing what a strip needs dropped)."""
    lines = [e for e in scan.node_versions if e.get("step") == RESTARTED and e.get("node")
             and isinstance(e.get("time_ns"), int)]
    return sorted(lines, key=lambda e: e["time_ns"])


def raises(scan: Scan) -> list[dict[str, Any]]:
    """The version settings raised for the whole cluster, in time order."""
    return sorted((e for e in scan.node_versions if e.get("step") == RAISED and isinstance(e.get("time_ns"), int)),
                  key=lambda e: e["time_ns"])


def version_spans(scan: Scan) -> dict[str, list[Span]]:
    """Each node's strip from the history's start to its end: the release it ran before its first restart (the
    line's from_version), stopped until it served again, the release it came back on, and so on; a node a roll
    was meant to reach but never restarted ran the cluster's first release throughout."""
    start, end = scan.start_ns or 0, max(scan.end_ns, scan.start_ns or 0)
    spans: dict[str, list[Span]] = {}
    lines = restarts(scan)
    for e in lines:
        node, served = e["node"], e["time_ns"]
        stopped = e["stopped_ns"] if isinstance(e.get("stopped_ns"), int) else served
        strip = spans.setdefault(node, [Span(node, start, end, e.get("from_version"))])
        strip[-1].end_ns = max(strip[-1].start_ns, stopped)
        strip += [Span(node, strip[-1].end_ns, served, None, e), Span(node, served, max(served, end), e.get("version"))]
    first = next((e.get("from_version") for e in lines), None)
    for w in scan.faults:
        for node in w["targets"] if w["fault"] in ROLLING and first else ():
            spans.setdefault(node, [Span(node, start, end, first)])
    return {node: spans[node] for node in sorted(spans, key=_node_order)}


def _node_order(name: str) -> tuple[int, str, int]:
    """Controllers above brokers, each by number (broker10 after broker9)."""
    m = re.match(r"(\D*)(\d*)$", name)
    kind, number = (m.group(1), int(m.group(2) or 0)) if m else (name, 0)
    return (next((i for i, role in enumerate(ROLES) if kind.startswith(role)), len(ROLES)), kind, number)


def _release(version: str | None) -> tuple[int, ...]:
    """A release as numbers to sort by (3.10.0 after 3.9.2); anything without a number last."""
    return release_numbers(version) if version and re.search(r"\d", version) else (1 << 30,)


def version_traces(scan: Scan) -> tuple[list[go.BaseTraceType], list[str]]:
    """The release strips as bar traces (one per release, one for stopped), the served-again markers, and the
    node labels top to bottom; none when the history has no node-version line."""
    spans = version_spans(scan)
    if not spans:
        return [], []
    every = [s for strip in spans.values() for s in strip]
    releases = sorted({s.version for s in every if s.version is not None}, key=_release)
    traces: list[go.BaseTraceType] = []
    for n, release in enumerate(releases):
        on = [s for s in every if s.version == release]
        traces.append(span_bar(f"Kafka {release}", RELEASE_COLOURS[n % len(RELEASE_COLOURS)], [s.node for s in on],
                               [(s.start_ns, s.end_ns) for s in on], [release] * len(on),
                               [f"{s.node}: Kafka {release} from {s.start_ns / NS:.1f} s to {s.end_ns / NS:.1f} s"
                                for s in on], group="versions"))
    stopped = [s for s in every if s.version is None]
    if stopped:
        traces.append(span_bar("stopped by the roll", STOPPED_COLOUR, [s.node for s in stopped],
                               [(s.start_ns, s.end_ns) for s in stopped], ["stopped"] * len(stopped),
                               [f"{s.node}: stopped by {s.line.get('fault') if s.line else 'the roll'} from "
                                f"{s.start_ns / NS:.1f} s to {s.end_ns / NS:.1f} s" for s in stopped],
                               "x", group="versions"))
    served = restarts(scan)
    traces.append(go.Scatter(
        x=[e["time_ns"] / NS for e in served], y=[e["node"] for e in served], mode="markers",
        name="serving again after its restart", legendgroup="versions",
        marker={"symbol": "diamond", "size": 9, "color": "#263238", "line": {"width": 1, "color": "#ffffff"}},
        text=[served_text(e) for e in served], hovertemplate="%{text}<extra></extra>"))
    return traces, list(spans)


def served_text(e: dict[str, Any]) -> str:
    """A restart in one line: "broker1 serving on 4.3.1 (was 3.9.2) at 63.4 s, back in every ISR it left at 63.6 s"."""
    was = e.get("from_version")
    text = f"{e['node']} serving on {e.get('version')}" + (f" (was {was})" if was and was != e.get("version") else "")
    text += f" at {e['time_ns'] / NS:.1f} s"
    synced = e.get("in_sync_ns")
    return text + (f", back in every ISR it left at {synced / NS:.1f} s" if isinstance(synced, int) else "")


def raise_text(e: dict[str, Any]) -> str:
    """A setting raised, in a few words: "metadata.version → 4.3-IV0"."""
    return f"{e.get('setting')} → {e.get('value')}"


def version_note(scan: Scan) -> str | None:
    """Why a run with a rolling fault has no release row: its events.jsonl predates node-version lines."""
    rolled = [w["fault"] for w in scan.faults if w["fault"] in ROLLING]
    if not rolled or scan.node_versions:
        return None
    return (f"events.jsonl has no node-version lines (written by runs of a later kchaos), so the timeline has no "
            f"release row: the {rolled[0]} fault's detail in the fault table gives each node's step")
