"""The report's timeline: one Plotly figure of what the scan found, and plotly.js to draw it with no network.

Four rows share one time axis (sends and reads per second, send latency,
lost and duplicated messages at the second they were acknowledged, ISR size
and leader changes); fault windows and the final read-back are shaded
across all of them.
"""

from __future__ import annotations

import html
import math
from collections import Counter

import plotly.graph_objects as go
import plotly.io as pio
from markupsafe import Markup
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from verdicts.report.scan import NS, Scan, bucket_ms, fault_label

MAX_BINS = 7200  # above two hours of seconds, the timeline sums several seconds per point
MAX_PARTITION_LINES = 12  # more partitions: the ISR chart shows the minimum and the count under-replicated


def timeline_html(scan: Scan) -> Markup:
    """The timeline as a <div> for the page; plotly.js itself comes once, from ``plotly_script``."""
    return Markup(pio.to_html(timeline_figure(scan), include_plotlyjs=False, full_html=False, div_id="timeline",
                              config={"displaylogo": False, "responsive": True}))


def plotly_script() -> Markup:
    """plotly.js, inline, once per page."""
    return Markup(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def _binned(values: list[int], bins: int, width: int, how: str = "sum") -> list[float | None]:
    out: list[float | None] = []
    for b in range(bins):
        chunk = values[b * width:(b + 1) * width]
        if how == "max":
            out.append(max(chunk) if chunk else 0)
        else:
            out.append(sum(chunk) / width if width > 1 else (chunk[0] if chunk else 0))
    return out


def _quantiles(hists: list[Counter[int] | None], bins: int, width: int, qs: tuple[float, ...]) -> list[list]:
    series: list[list[float | None]] = [[] for _ in qs]
    for b in range(bins):
        merged: Counter[int] = Counter()
        for h in hists[b * width:(b + 1) * width]:
            if h:
                merged.update(h)
        total = sum(merged.values())
        if not total:
            for s in series:
                s.append(None)
            continue
        ordered = sorted(merged.items())
        for s, q in zip(series, qs):
            want, seen = q * total, 0
            for bucket, count in ordered:
                seen += count
                if seen >= want:
                    s.append(round(bucket_ms(bucket), 3))
                    break
    return series


FAULT_COLOURS = {"kill": "#e53935", "pause": "#8e24aa", "partition": "#fb8c00", "power-loss": "#6d4c41",
                 "slow-network": "#1e88e5", "disk-full": "#546e7a"}


def timeline_figure(scan: Scan) -> go.Figure:
    """One figure, four rows on one shared time axis, fault windows shaded across all of them."""
    seconds = max(scan.end_ns // NS + 1, 1)
    width = max(1, math.ceil(seconds / MAX_BINS))
    bins = math.ceil(seconds / width)
    x = [round(b * width + width / 2, 1) for b in range(bins)]  # the middle of each bin
    per = "per second" if width == 1 else f"per second (mean over {width} s)"
    fig = make_subplots(
        rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.06, row_heights=[0.3, 0.25, 0.2, 0.25],
        subplot_titles=(f"Sends and reads {per}", "Send latency (complete − invoke), ms",
                        f"Lost and duplicated messages at the second they were acknowledged ({'count' if width == 1 else 'sum'} per {width} s)",
                        "ISR size per partition; ✕ marks a leader change"))
    for name, series, colour in (("acknowledged", scan.acked, "#2e7d32"), ("failed", scan.failed, "#c62828"),
                                 ("unknown (info)", scan.unknown, "#ef6c00"), ("reads (live)", scan.reads_live, "#1565c0"),
                                 ("reads (final)", scan.reads_final, "#9e9e9e")):
        if any(series.v):  # the final read-back dwarfs the live traffic: shown on a click in the legend
            fig.add_trace(go.Scatter(x=x, y=_binned(series.v, bins, width), name=name, mode="lines",
                                     line={"color": colour, "width": 1.5}, legendgroup="rate",
                                     visible="legendonly" if series is scan.reads_final else True), row=1, col=1)
    p50, p99 = _quantiles(scan.latency, bins, width, (0.5, 0.99))
    worst = [round(v / 1e6, 3) if v else None for v in _binned(scan.latency_max.v, bins, width, "max")]
    for name, ys, colour in (("latency p50", p50, "#43a047"), ("latency p99", p99, "#fb8c00"),
                             ("latency max", worst, "#c62828")):
        fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines", connectgaps=False,
                                 line={"color": colour, "width": 1.2}, legendgroup="latency"), row=2, col=1)
    fig.update_yaxes(type="log", row=2, col=1)
    lost, dup = _binned(scan.lost.v, bins, width), _binned(scan.duplicated.v, bins, width)
    if width > 1:  # show sums per bin, not means
        lost = [round(v * width) for v in lost]
        dup = [round(v * width) for v in dup]
    fig.add_trace(go.Bar(x=x, y=lost, name=f"lost ({scan.totals.get('lost', 0):,})", marker_color="#c62828",
                         legendgroup="anomaly"), row=3, col=1)
    fig.add_trace(go.Bar(x=x, y=dup, name=f"duplicated ({scan.totals.get('duplicated', 0):,})",
                         marker_color="#6a1b9a", legendgroup="anomaly"), row=3, col=1)
    fig.update_yaxes(rangemode="nonnegative", row=1, col=1)
    fig.update_yaxes(rangemode="nonnegative", row=3, col=1)
    if not any(scan.lost.v) and not any(scan.duplicated.v):
        fig.add_annotation(text="no lost and no duplicated message", xref="x3 domain", yref="y3 domain",
                           x=0.5, y=0.5, showarrow=False, font={"color": "#2e7d32", "size": 13})
    _isr_traces(fig, scan)
    if len(scan.final_read) == 2:
        x0, x1 = scan.final_read[0] / NS, max(scan.final_read[1] / NS, scan.final_read[0] / NS + 0.5)
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor="#9e9e9e",
                      opacity=0.15, line={"width": 0}, layer="below")
        fig.add_annotation(x=x0, xref="x", y=1.04, yref="paper", yanchor="bottom", xanchor="right",
                           text="final read-back", showarrow=False, font={"size": 11, "color": "#616161"})
    for i, w in enumerate(scan.faults):
        x0 = w["start_ns"] / NS
        x1 = (w["end_ns"] if w["end_ns"] is not None else scan.end_ns) / NS
        colour = FAULT_COLOURS.get(w["fault"], "#757575")
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor=colour,
                      opacity=0.13, line={"width": 0}, layer="below")
        fig.add_shape(type="line", xref="x", yref="paper", x0=x0, x1=x0, y0=0, y1=1.02,
                      line={"color": colour, "width": 1, "dash": "dot"}, layer="below")
        label = f"{i + 1}: {fault_label(w)}" + ("" if w["end_ns"] is not None else " (never healed)")
        fig.add_annotation(x=x0, xref="x", y=1.04 + 0.022 * (i % 3), yref="paper", yanchor="bottom",
                           xanchor="left", text=html.escape(label), showarrow=False,
                           font={"size": 11, "color": colour},
                           hovertext=html.escape(f"{w.get('detail') or label}: {x0:.1f} s → "
                                                 f"{x1:.1f} s" if w["end_ns"] is not None else "never healed"))
    fig.update_layout(height=1050, margin={"l": 60, "r": 20, "t": 130, "b": 50}, barmode="stack", bargap=0,
                      hovermode="x unified", template="plotly_white",
                      legend={"orientation": "h", "y": -0.06, "x": 0, "traceorder": "grouped"})
    shown_from = max(0.0, math.floor((scan.start_ns or 0) / NS) - 2.0)  # skip the cluster's start-up
    fig.update_xaxes(range=[shown_from, scan.end_ns / NS + 1], showspikes=True, spikemode="across", spikethickness=1)
    fig.update_xaxes(title_text="seconds since the run started", row=4, col=1)
    return fig


def _isr_traces(fig: go.Figure, scan: Scan) -> None:
    parts = sorted(scan.leaders)
    if not parts:
        fig.add_annotation(text="no leader/ISR observations in events.jsonl", xref="x domain", yref="y4 domain",
                           x=0.5, y=0.5, showarrow=False)
        return
    if len(parts) <= MAX_PARTITION_LINES:
        for n, i in enumerate(parts):
            obs = scan.leaders[i]
            # a small per-partition offset keeps equal lines apart
            fig.add_trace(go.Scatter(
                x=[t / NS for t, _, _ in obs], y=[isr + (n - len(parts) / 2) * 0.03 for _, _, isr in obs],
                mode="lines", line={"shape": "hv", "width": 1.3}, name=f"ISR {scan.partitions[i].label}",
                legendgroup="isr", customdata=[[isr, leader] for _, leader, isr in obs],
                hovertemplate=f"{scan.partitions[i].label}: ISR %{{customdata[0]}}, leader %{{customdata[1]}}"
                              "<extra></extra>"), row=4, col=1)
    else:
        times = sorted({t for obs in scan.leaders.values() for t, _, _ in obs})
        state: dict[int, int] = {}
        cursor = {i: 0 for i in parts}
        low, under = [], []
        rf = max(isr for obs in scan.leaders.values() for _, _, isr in obs)
        for t in times:
            for i in parts:
                obs = scan.leaders[i]
                while cursor[i] < len(obs) and obs[cursor[i]][0] <= t:
                    state[i] = obs[cursor[i]][2]
                    cursor[i] += 1
            low.append(min(state.values()))
            under.append(sum(1 for v in state.values() if v < rf))
        fig.add_trace(go.Scatter(x=[t / NS for t in times], y=low, name="smallest ISR", mode="lines",
                                 line={"shape": "hv"}), row=4, col=1)
        fig.add_trace(go.Scatter(x=[t / NS for t in times], y=under, name="partitions under-replicated",
                                 mode="lines", line={"shape": "hv", "dash": "dot"}), row=4, col=1)
    if scan.leader_changes:
        isr_at = {}
        for i, obs in scan.leaders.items():
            isr_at.update({(i, t): isr for t, _, isr in obs})
        fig.add_trace(go.Scatter(
            x=[t / NS for t, _, _, _ in scan.leader_changes],
            y=[isr_at.get((i, t), 0) for t, i, _, _ in scan.leader_changes],
            mode="markers", marker={"symbol": "x", "size": 9, "color": "#212121"},
            name=f"leader changes ({len(scan.leader_changes)})",
            text=[f"{scan.partitions[i].label}: leader {old} → {new}" for _, i, old, new in scan.leader_changes],
            hovertemplate="%{text}<extra></extra>"), row=4, col=1)
