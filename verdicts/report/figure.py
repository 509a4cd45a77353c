"""The report's timeline: one Plotly figure of what the scan found, and plotly.js to draw it with no network.

Four rows share one time axis: sends and reads per second; the latency of every send (drawn by the page
from ``latency``'s packed points, so the figure leaves that row empty); lost and duplicated messages at the
second they were acknowledged; one leadership/ISR strip per partition (``isr``); and, in a run a rolling fault
restarted nodes in, one strip per node of the Kafka release it ran (``versions``). Every fault is shaded across all
rows in two tones: *down* (fault to heal) and *recovering* (heal until its node served again).
"""

from __future__ import annotations

import html
import math
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from markupsafe import Markup
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from catalogue.faults import FAULT_KINDS, UNKNOWN_FAULT_COLOUR
from verdicts.report.isr import strip_traces
from verdicts.report.scan import NS, Scan
from verdicts.report.versions import raise_text, raises, version_traces
from verdicts.report.windows import fault_label

MAX_BINS = 7200  # above two hours of seconds, the timeline sums several seconds per point
CLIP_OVER_TYPICAL = 2.5  # the rate axis stops at this many times the typical (90th percentile) rate ...
CLIP_WHEN_PEAK_OVER = 2  # ... when some peak exceeds that stop by this factor
ROW_PX = (230, 320, 150)  # rates, latency, lost/duplicated; the strips take 24 px a partition (or node)
RELEASE_TITLE = ("Kafka release per node (hatched: stopped by the roll; ◆ serving again; dashed: a version setting "
                 "raised)")
GAP_PX, TOP_PX, BOTTOM_PX, LEGEND_GAP_PX = 58, 120, 150, 55
LATENCY_COLOURS = {"ok": "#1e88e5", "unknown": "#fb8c00", "fail": "#e53935"}
FAULT_COLOURS = {k.name: k.colour for k in FAULT_KINDS.values()}


def timeline_html(scan: Scan, replication_factor: int | None = None) -> Markup:
    """The timeline as a <div> for the page; plotly.js itself comes once, from ``plotly_script``."""
    return Markup(pio.to_html(timeline_figure(scan, replication_factor), include_plotlyjs=False, full_html=False,
                              div_id="timeline", config={"displaylogo": False, "responsive": True}))


def plotly_script() -> Markup:
    """plotly.js, inline, once per page."""
    return Markup(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def _binned(values: list[int], bins: int, width: int) -> list[float]:
    """Per-second counts as the mean over each bin of ``width`` seconds."""
    return [sum(values[b * width:(b + 1) * width]) / width for b in range(bins)]


def _short(v: float) -> str:
    return f"{v / 1e6:.1f}M" if v >= 1e6 else f"{v / 1e3:.0f}k" if v >= 1e4 else f"{v / 1e3:.1f}k" if v >= 1e3 \
        else f"{v:.0f}"


def rate_ceiling(series: list[list[float]]) -> float | None:
    """Where to cut the rate axis so a steady rate stays readable beside catch-up spikes; None: no need."""
    values = sorted(v for s in series for v in s if v > 0)
    if len(values) < 10:
        return None
    typical = values[int(len(values) * 0.9)]
    ceiling = typical * CLIP_OVER_TYPICAL
    return ceiling if values[-1] > ceiling * CLIP_WHEN_PEAK_OVER else None


def _peaks(x: list[float], series: list[list[float]], ceiling: float) -> tuple[list[float], list[float]]:
    """The highest bin of each run of bins above the ceiling: where to say how high the axis would go."""
    tops: list[tuple[float, float]] = []
    run: tuple[float, float] | None = None
    for i, xi in enumerate(x):
        v = max(s[i] for s in series)
        if v > ceiling:
            run = (xi, v) if run is None or v > run[1] else run
        elif run is not None:
            tops.append(run)
            run = None
    if run is not None:
        tops.append(run)
    return [t for t, _ in tops], [v for _, v in tops]


def latency_title(scan: Scan) -> str:
    """The latency row's title, saying when the plot had to thin the points out."""
    title = "Latency of every send (invoke → completion), ms, log scale"
    thinned = [f"every {_nth(p.stride)} of {p.seen:,} {_status(status)}" for status, p in scan.latency.items()
               if p.stride > 1]
    return title + (f" — drawn: {'; '.join(thinned)}" if thinned else "")


def timeline_figure(scan: Scan, replication_factor: int | None = None) -> go.Figure:
    """One figure, four rows on one shared time axis, fault windows shaded across all of them."""
    seconds = max(scan.end_ns // NS + 1, 1)
    width = max(1, math.ceil(seconds / MAX_BINS))
    bins = math.ceil(seconds / width)
    x = [round(b * width + width / 2, 1) for b in range(bins)]  # the middle of each bin
    per = "per second" if width == 1 else f"per second (mean over {width} s)"
    strips, labels, strip_note = strip_traces(scan, replication_factor)
    releases, nodes = version_traces(scan)
    rows_px = [*ROW_PX, max(90, 24 * len(labels) + 16), *([max(70, 24 * len(nodes) + 16)] if nodes else [])]
    plot_px = sum(rows_px) + GAP_PX * (len(rows_px) - 1)
    rates = [(name, _binned(series.v, bins, width), colour) for name, series, colour in (
        ("acknowledged", scan.acked, "#2e7d32"), ("failed", scan.failed, "#c62828"),
        ("unknown", scan.unknown, "#ef6c00"), ("reads (live)", scan.reads_live, "#1565c0"),
        ("reads (final)", scan.reads_final, "#9e9e9e")) if any(series.v)]
    shown = [ys for name, ys, _ in rates if name != "reads (final)"]  # the final read-back starts hidden
    ceiling = rate_ceiling(shown)
    rate_title = f"Sends and reads {per}" + (f" (axis cut at {_short(ceiling)}/s; ▲ higher peaks)"
                                             if ceiling else "")
    fig = make_subplots(
        rows=len(rows_px), cols=1, shared_xaxes=True, vertical_spacing=GAP_PX / plot_px,
        row_heights=[px / sum(rows_px) for px in rows_px],
        subplot_titles=(rate_title, latency_title(scan),
                        "Lost and duplicated, at the second they were acknowledged"
                        + ("" if width == 1 else f" (sum per {width} s)"),
                        "Leader and ISR per partition (hatched: ISR short; red: offline)"
                        + (f" — {strip_note}" if strip_note else ""), *([RELEASE_TITLE] if nodes else [])))
    for name, ys, colour in rates:  # the final read-back dwarfs the live traffic: shown on a click in the legend
        fig.add_trace(go.Scatter(x=x, y=ys, name=name, mode="lines", line={"color": colour, "width": 1.5},
                                 legendgroup="rate", visible="legendonly" if name == "reads (final)" else True,
                                 hovertemplate=f"{name}: %{{y:,.0f}}/s at %{{x}} s<extra></extra>"), row=1, col=1)
    if ceiling:
        px, py = _peaks(x, shown, ceiling)
        fig.add_trace(go.Scatter(x=px, y=[ceiling * 1.06] * len(px), mode="markers+text", cliponaxis=False,
                                 marker={"symbol": "triangle-up", "size": 9, "color": "#2e7d32"},
                                 text=[_short(v) for v in py], textposition="middle right",
                                 textfont={"size": 10, "color": "#1b5e20"}, name="peaks above the cut",
                                 legendgroup="rate", customdata=py,
                                 hovertemplate="peak %{customdata:,.0f}/s at %{x} s<extra></extra>"), row=1, col=1)
        fig.update_yaxes(range=[0, ceiling * 1.12], row=1, col=1)
    else:
        fig.update_yaxes(rangemode="nonnegative", row=1, col=1)
    for status, colour in LATENCY_COLOURS.items():  # legend entries; the page adds the points to row 2
        if scan.latency[status].seen:
            fig.add_trace(go.Scattergl(x=[], y=[], mode="markers", name=f"latency, {_status(status)}",
                                       meta=f"latency-{status}", legendgroup="latency",
                                       marker={"color": colour, "size": 3, "opacity": 0.6},
                                       hovertemplate=f"{_status(status)}: invoked %{{x:.3f}} s, "
                                                     "%{y:,.1f} ms<extra></extra>"), row=2, col=1)
    fig.update_yaxes(type="log", title_text="ms", row=2, col=1)
    if not any(p.seen for p in scan.latency.values()):
        fig.add_annotation(text="no send in the history", xref="x2 domain", yref="y2 domain", x=0.5, y=0.5,
                           showarrow=False)
    _anomaly_bars(fig, scan, x, bins, width)
    for trace in strips:
        fig.add_trace(trace, row=4, col=1)
    if labels:
        fig.update_yaxes(type="category", categoryorder="array", categoryarray=labels[::-1], row=4, col=1)
    else:
        fig.add_annotation(text="no leader/ISR observations in events.jsonl", xref="x4 domain",
                           yref="y4 domain", x=0.5, y=0.5, showarrow=False)
    if nodes:
        _release_row(fig, scan, releases, nodes, row=5)
    _shade(fig, scan)
    fig.update_layout(height=plot_px + TOP_PX + BOTTOM_PX, barmode="overlay", bargap=0, hovermode="closest",
                      template="plotly_white", uniformtext={"minsize": 8, "mode": "hide"},
                      margin={"l": 70, "r": 20, "t": TOP_PX, "b": BOTTOM_PX},
                      legend={"orientation": "h", "y": -LEGEND_GAP_PX / plot_px, "yanchor": "top", "x": 0,
                              "traceorder": "grouped"})
    shown_from = max(0.0, math.floor((scan.start_ns or 0) / NS) - 2.0)  # skip the cluster's start-up
    fig.update_xaxes(range=[shown_from, scan.end_ns / NS + 1], showspikes=True, spikemode="across",
                     spikethickness=1)
    fig.update_xaxes(title_text="seconds since the run started", row=len(rows_px), col=1)
    return fig


def _release_row(fig: go.Figure, scan: Scan, traces: list[go.BaseTraceType], nodes: list[str], row: int) -> None:
    """The release strips, top to bottom as ``nodes``, and a dashed line with its words per setting raised."""
    for trace in traces:
        fig.add_trace(trace, row=row, col=1)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=nodes[::-1], row=row, col=1)
    for i, e in enumerate(raises(scan)):
        t = e["time_ns"] / NS
        fig.add_shape(type="line", xref=f"x{row}", yref=f"y{row} domain", x0=t, x1=t, y0=0, y1=1,
                      line={"color": "#263238", "width": 1.5, "dash": "dash"})
        fig.add_annotation(x=t, xref=f"x{row}", y=1, yref=f"y{row} domain", yanchor="top", xanchor="left",
                           xshift=3, yshift=-15 * (i % 2), text=html.escape(raise_text(e)), showarrow=False,
                           font={"size": 10, "color": "#263238"}, bgcolor="rgba(255,255,255,0.85)",
                           hovertext=html.escape(f"{raise_text(e)} for the whole cluster at {t:.1f} s"))


def _nth(k: int) -> str:
    return f"{k}{'nd' if k % 10 == 2 and k % 100 != 12 else 'th'}"  # strides are powers of two


def _status(status: str) -> str:
    return {"ok": "acknowledged", "unknown": "unknown", "fail": "failed"}[status]


def _anomaly_bars(fig: go.Figure, scan: Scan, x: list[float], bins: int, width: int) -> None:
    """Lost and duplicated per bin; the strips need bars overlaid, so duplicated is drawn half as wide, in front."""
    lost = [round(v * width) for v in _binned(scan.lost.v, bins, width)]  # sums per bin, not means
    dup = [round(v * width) for v in _binned(scan.duplicated.v, bins, width)]
    fig.add_trace(go.Bar(x=x, y=lost, name=f"lost ({scan.totals.get('lost', 0):,})", marker_color="#c62828",
                         legendgroup="anomaly"), row=3, col=1)
    fig.add_trace(go.Bar(x=x, y=dup, name=f"duplicated ({scan.totals.get('duplicated', 0):,})",
                         marker_color="#6a1b9a", legendgroup="anomaly", width=width * 0.5), row=3, col=1)
    fig.update_yaxes(rangemode="nonnegative", row=3, col=1)
    if not any(scan.lost.v) and not any(scan.duplicated.v):
        fig.add_annotation(text="no lost and no duplicated message", xref="x3 domain", yref="y3 domain",
                           x=0.5, y=0.5, showarrow=False, font={"color": "#2e7d32", "size": 13})


def _shade(fig: go.Figure, scan: Scan) -> None:
    """The final read-back in grey; each fault dark while applied, light while its node recovers."""
    if len(scan.final_read) == 2:
        x0, x1 = scan.final_read[0] / NS, max(scan.final_read[1] / NS, scan.final_read[0] / NS + 0.5)
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor="#9e9e9e",
                      opacity=0.15, line={"width": 0}, layer="below")
        fig.add_annotation(x=x0, xref="x", y=1, yref="paper", yanchor="bottom", xanchor="right", yshift=4,
                           text="final read-back", showarrow=False, font={"size": 11, "color": "#616161"})
    many = len(scan.faults) > 12
    for i, w in enumerate(scan.faults):
        colour = FAULT_COLOURS.get(w["fault"], UNKNOWN_FAULT_COLOUR)
        x0 = w["start_ns"] / NS
        down = w.get("down_ns", w["end_ns"])
        x1 = (down if down is not None else scan.end_ns) / NS
        fig.add_shape(type="rect", xref="x", yref="paper", x0=x0, x1=x1, y0=0, y1=1, fillcolor=colour,
                      opacity=0.18, line={"width": 0}, layer="below")
        back = w.get("recovered_ns", down)
        if down is not None and back != down:
            x2 = (back if back is not None else scan.end_ns) / NS
            fig.add_shape(type="rect", xref="x", yref="paper", x0=x1, x1=x2, y0=0, y1=1, fillcolor=colour,
                          opacity=0.07, line={"width": 0}, layer="below")
            fig.add_shape(type="line", xref="x", yref="paper", x0=x2, x1=x2, y0=0, y1=1,
                          line={"color": colour, "width": 1, "dash": "dash"}, opacity=0.7, layer="below")
        fig.add_shape(type="line", xref="x", yref="paper", x0=x0, x1=x0, y0=0, y1=1,
                      line={"color": colour, "width": 1, "dash": "dot"}, layer="below")
        label = f"{i + 1}" if many else f"{i + 1}: {fault_label(w)}"
        fig.add_annotation(x=x0, xref="x", y=1, yref="paper", yanchor="bottom", xanchor="left",
                           yshift=22 + 15 * (i % 3), text=html.escape(label), showarrow=False,
                           font={"size": 11, "color": colour}, hovertext=html.escape(_window_text(i, w)))


def _window_text(i: int, w: dict[str, Any]) -> str:
    """A fault window's parts in one line: "1: SIGKILL broker2: down 15.6–21.7 s, recovering until 23.9 s"."""
    label = w.get("detail") or fault_label(w)
    if w["end_ns"] is None:
        return f"{i + 1}: {label}: from {w['start_ns'] / NS:.1f} s, never healed"
    down = w.get("down_ns", w["end_ns"])
    text = f"{i + 1}: {label}: down {w['start_ns'] / NS:.1f}–{down / NS:.1f} s"
    back = w.get("recovered_ns", down)
    if back is None:
        return text + "; not serving again by the end"
    return text + (f", recovering until {back / NS:.1f} s" if back != down else "")
