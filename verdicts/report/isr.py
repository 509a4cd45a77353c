"""Leadership and ISR as one horizontal strip per partition, for the timeline's last row.

Lines of ISR sizes overlap (six partitions at ISR 3 are one line) and a leader change is a tick nobody can
read. A strip shows, for each moment of one partition, who led it (the colour), whether its ISR was short of
the replication factor (hatched), when the leader it names was a process a fault had stopped (pink,
cross-hatched: the metadata lags, the partition is offline) and when it had no leader at all (red,
cross-hatched); the node logs' truncations and unclean elections of that partition sit on it as markers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from catalogue.faults import FAULT_KINDS
from verdicts.report.scan import NS, Scan
from verdicts.report.windows import node_id

MAX_STRIPS = 40  # more partitions: the ones whose leader or ISR changed most
LEADER_COLOURS = ("#90caf9", "#a5d6a7", "#ce93d8", "#ffe082", "#80cbc4", "#bcaaa4", "#f48fb1", "#b0bec5")
OFFLINE = "#d32f2f"
LEADER_DOWN = "#ef9a9a"
# faults that leave no process to serve as leader
STOPPED = tuple(k.name for k in FAULT_KINDS.values() if k.victim == "node" and k.stops_process)
DOWN = "down"  # the group of spans whose named leader a fault had stopped
MARKERS = {  # broker event kind -> (legend name, marker symbol, colour)
    "truncate": ("truncation (node log)", "triangle-down", "#212121"),
    "unclean": ("unclean election (node log)", "star", "#b71c1c"),
}


@dataclass
class Segment:
    part: int
    start_ns: int
    end_ns: int
    leader: Any
    isr: tuple[int, ...]
    leader_down: bool = False  # the metadata still names a leader whose process a fault stopped


def segments(scan: Scan) -> dict[int, list[Segment]]:
    """Each partition's observations as spans of one (leader, ISR) state, up to the end of the history, cut
    where a fault stopped or restarted the leader's process."""
    down = _down_spans(scan)
    out: dict[int, list[Segment]] = {}
    for part, obs in scan.leaders.items():
        spans: list[Segment] = []
        for (t, leader, isr), nxt in zip(obs, [*obs[1:], None]):
            end = nxt[0] if nxt is not None else max(scan.end_ns, t)
            for a, b, is_down in _cut(t, end, down.get(leader, [])):
                last = spans[-1] if spans else None
                if last and (last.leader, last.isr, last.leader_down) == (leader, isr, is_down) and last.end_ns == a:
                    last.end_ns = b
                else:
                    spans.append(Segment(part, a, b, leader, isr, is_down))
        out[part] = spans
    return out


def _down_spans(scan: Scan) -> dict[Any, list[tuple[int, int]]]:
    """Per broker id, when a fault had its process stopped (killed, frozen or powered off)."""
    spans: dict[Any, list[tuple[int, int]]] = {}
    for w in scan.faults:
        if w["fault"] not in STOPPED:
            continue
        end = w.get("down_ns", w["end_ns"])
        for name in w["targets"]:
            broker = node_id(name)
            if broker is not None:
                spans.setdefault(broker, []).append((w["start_ns"], end if end is not None else scan.end_ns))
    return spans


def _cut(start: int, end: int, down: list[tuple[int, int]]) -> list[tuple[int, int, bool]]:
    """[start, end) in pieces, each marked whether it lies inside one of the ``down`` spans."""
    cuts = sorted({start, end, *(t for a, b in down for t in (a, b) if start < t < end)})
    return [(a, b, any(x <= a and b <= y for x, y in down)) for a, b in zip(cuts, cuts[1:])] or [(start, end, False)]


def shown_partitions(spans: dict[int, list[Segment]]) -> tuple[list[int], str]:
    """The partitions that get a strip, in partition order, and a note when some were left out."""
    parts = sorted(spans)
    if len(parts) <= MAX_STRIPS:
        return parts, ""
    busiest = sorted(parts, key=lambda p: -len(spans[p]))[:MAX_STRIPS]
    return sorted(busiest), f"the {MAX_STRIPS} of {len(parts)} whose leader or ISR changed most"


def strip_traces(scan: Scan, replication_factor: int | None) -> tuple[list[go.BaseTraceType], list[str], str]:
    """The strips as bar traces (one per leader, and one for no leader), the marker traces, the partition
    labels top to bottom, and a note."""
    spans = segments(scan)
    parts, note = shown_partitions(spans)
    rf = replication_factor or max((len(s.isr) for p in parts for s in spans[p]), default=0)
    labels = [scan.partitions[p].label for p in parts]
    groups: dict[Any, list[Segment]] = {}
    for p in parts:
        for s in spans[p]:
            groups.setdefault(DOWN if s.leader_down else s.leader if _led(s) else None, []).append(s)
    traces: list[go.BaseTraceType] = []
    leaders = sorted((k for k in groups if k not in (None, DOWN)), key=str)
    for n, leader in enumerate([*leaders, DOWN, None]):
        group = groups.get(leader)
        if not group:
            continue
        group.sort(key=lambda s: len(s.isr) < rf)  # the legend draws the first bar: a full ISR, unhatched
        colour = {None: OFFLINE, DOWN: LEADER_DOWN}.get(leader) or LEADER_COLOURS[n % len(LEADER_COLOURS)]
        shapes = ["x" if leader in (None, DOWN) else ("/" if len(s.isr) < rf else "") for s in group]
        labels_of = [scan.partitions[s.part].label for s in group]
        name = {None: "offline (no leader)", DOWN: "leader's process stopped by a fault"}.get(leader)
        traces.append(span_bar(
            name or f"leader broker {leader}", colour, labels_of, [(s.start_ns, s.end_ns) for s in group],
            [_text(s) for s in group],
            [f"{label}: {_state(s)}, ISR {list(s.isr)} from {s.start_ns / NS:.1f} s to {s.end_ns / NS:.1f} s"
             for label, s in zip(labels_of, group)], shapes))
    if any(len(s.isr) < rf for p in parts for s in spans[p]):  # the hatching explained in the legend
        traces.append(go.Bar(orientation="h", y=[None], x=[None], name=f"ISR short of {rf} replicas",
                             legendgroup="strips", marker={"color": "#ffffff", "pattern": hatch("/")}))
    traces += _marker_traces(scan, parts)
    return traces, labels, note


def hatch(shape: str | list[str]) -> dict[str, Any]:
    """A bar's hatching (one shape, or one per bar; "" none): the strips' one look for "short" and "down"."""
    return {"shape": shape, "fgcolor": "#37474f", "size": 6, "solidity": 0.25}


def span_bar(name: str, colour: str, labels: list[str], spans: list[tuple[int, int]], texts: list[str],
             hovers: list[str], shapes: str | list[str] = "", group: str = "strips") -> go.Bar:
    """One legend entry's pieces of horizontal strips: each span [start, end) ns on the strip ``labels`` names,
    with its text inside and its hover line (the leader/ISR strips and the release strips are drawn alike)."""
    return go.Bar(orientation="h", y=labels, base=[a / NS for a, _ in spans], x=[(b - a) / NS for a, b in spans],
                  name=name, legendgroup=group, width=0.78,
                  marker={"color": colour, "line": {"width": 0.5, "color": "#ffffff"}, "pattern": hatch(shapes)},
                  text=texts, textposition="inside", insidetextanchor="middle",
                  textfont={"size": 10, "color": "#263238"}, hovertext=hovers,
                  hovertemplate="%{hovertext}<extra></extra>")


def _led(s: Segment) -> bool:
    return s.leader is not None and not (isinstance(s.leader, int) and s.leader < 0)


def _text(s: Segment) -> str:
    return "offline" if not _led(s) else f"{s.leader}" + (" down" if s.leader_down else "")


def _state(s: Segment) -> str:
    if not _led(s):
        return "no leader"
    return f"leader {s.leader}" + (" (its process stopped by a fault)" if s.leader_down else "")


def _marker_traces(scan: Scan, parts: list[int]) -> list[go.BaseTraceType]:
    """Truncations and unclean elections of the shown partitions, from history/broker-events.jsonl."""
    index = {scan.part_keys[p]: p for p in parts}
    found: dict[str, list[dict[str, Any]]] = {}
    for e in scan.broker_events:
        part = index.get((e.get("topic"), e.get("partition")))
        if part is None:
            continue
        kind = e.get("kind")
        if kind in ("unclean_election", "unclean_recovered") or (kind == "election" and e.get("unclean")):
            found.setdefault("unclean", []).append({**e, "part": part})
        elif kind == "truncate":
            found.setdefault("truncate", []).append({**e, "part": part})
    traces = []
    for key, events in found.items():
        name, symbol, colour = MARKERS[key]
        traces.append(go.Scatter(
            x=[e["time_ns"] / NS for e in events], y=[scan.partitions[e["part"]].label for e in events],
            mode="markers", name=name, legendgroup="strips",
            marker={"symbol": symbol, "size": 9, "color": colour, "line": {"width": 1, "color": "#ffffff"}},
            text=[_marker_text(key, e) for e in events], hovertemplate="%{text}<extra></extra>"))
    return traces


def _marker_text(key: str, e: dict[str, Any]) -> str:
    where = f"logs/{e.get('node')}.log line {e.get('line')}"
    if key == "truncate":
        offset = e.get("to_offset")
        return (f"{e.get('node')} truncated {e.get('topic')}-{e.get('partition')} to offset "
                f"{offset:,}" if isinstance(offset, int) else f"{e.get('node')} truncated") + f" ({where})"
    return f"unclean election of {e.get('topic')}-{e.get('partition')} ({where})"
