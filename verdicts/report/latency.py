"""Every send's latency for the report's Jepsen-style plot, small enough to embed in the page.

A stall is a run of slow or missing completions, and a per-second summary hides exactly that: the plot draws
one point per send (x: when it was invoked, y: how long it took; acknowledged, failed and unknown in their own
colours) with Plotly's ``scattergl``, which stays interactive with a million points. Past ``MAX_ACKED``
acknowledged sends (or ``MAX_OTHER`` failed or unknown ones) every k-th is kept, k doubling as the history
grows, and the plot's title says so ("drawn: every 2nd of 2,400,000 acknowledged").

The points are encoded for the page, not as JSON numbers (about 20 bytes a point), but as zig-zag varints of
the differences between neighbours (invoke times in 0.1 ms, latency as ``round(ln(1 + µs) · 2000)``, within
0.05 %), deflated and base64'd: 2 to 3 bytes a point. The page inflates them with the browser's own
``DecompressionStream`` (``latency_script``) and hands Plotly typed arrays.
"""

from __future__ import annotations

import base64
import math
import zlib
from array import array
from typing import Any

from catalogue.history import SEND_STATUSES

MAX_ACKED = 1_000_000  # acknowledged sends drawn before thinning: what scattergl keeps interactive
MAX_OTHER = 250_000  # failed and unknown sends each (there are rarely more than a few thousand)
X_UNIT_NS = 100_000  # invoke times in 0.1 ms
Y_SCALE = 2000  # latency as round(ln(1 + µs) * Y_SCALE)
OK, FAIL, UNKNOWN = SEND_STATUSES
STATUSES = (OK, UNKNOWN, FAIL)  # one series each, drawn in this order


class Points:
    """Every k-th (invoke, latency) pair of one status, k doubling whenever more than ``cap`` are kept, so
    memory stays bounded and the choice is the same on every run of the report. ``latency`` -1: no
    completion (the send was still in flight when the history ended)."""

    __slots__ = ("cap", "stride", "seen", "invoke", "latency")

    def __init__(self, cap: int) -> None:
        self.cap, self.stride, self.seen = cap, 1, 0
        self.invoke, self.latency = array("q"), array("q")

    def add(self, invoke_ns: int, latency_ns: int) -> None:
        if self.seen % self.stride == 0:
            self.invoke.append(invoke_ns)
            self.latency.append(latency_ns)
            if len(self.invoke) > self.cap:
                self.invoke, self.latency = self.invoke[::2], self.latency[::2]
                self.stride *= 2
        self.seen += 1


def new_points() -> dict[str, Points]:
    """One thinned series per send status."""
    return {status: Points(MAX_ACKED if status == OK else MAX_OTHER) for status in STATUSES}


def _varints(values: Any, out: bytearray) -> None:
    prev = 0
    append = out.append
    for v in values:
        d, prev = v - prev, v
        z = d << 1 if d >= 0 else (-d << 1) - 1
        while z >= 0x80:
            append((z & 0x7F) | 0x80)
            z >>= 7
        append(z)


def encode(points: dict[str, Points], end_ns: int) -> dict[str, Any]:
    """The series as the page embeds them: per status its count, how many sends it stands for, its thinning
    stride and the packed points; a send without completion is drawn at the end of the history (a lower
    bound on its latency)."""
    series = {}
    for status, p in points.items():
        if not p.invoke:
            continue
        xs = [t // X_UNIT_NS for t in p.invoke]
        ys = [round(math.log1p(max(lat if lat >= 0 else end_ns - t, 0) / 1000) * Y_SCALE)
              for t, lat in zip(p.invoke, p.latency)]
        packed = bytearray()
        _varints(xs, packed)
        _varints(ys, packed)
        series[status] = {"n": len(xs), "sends": p.seen, "stride": p.stride,
                          "data": base64.b64encode(zlib.compress(bytes(packed), 9)).decode("ascii")}
    return {"x_unit_s": X_UNIT_NS / 1e9, "y_scale": Y_SCALE, "series": series}


def decode(encoded: dict[str, Any]) -> dict[str, tuple[list[float], list[float]]]:
    """The page's decoding in Python (seconds, milliseconds), for the tests to hold the encoding to."""
    out = {}
    for status, s in encoded["series"].items():
        raw = zlib.decompress(base64.b64decode(s["data"]))
        values, pos = [], 0
        for _ in range(2 * s["n"]):
            z = shift = 0
            while True:
                b = raw[pos]
                pos += 1
                z |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            values.append(z >> 1 if not z & 1 else -((z + 1) >> 1))
        xs, ys, acc = [], [], 0
        for i, d in enumerate(values):
            acc = 0 if i == s["n"] else acc
            acc += d
            (xs if i < s["n"] else ys).append(acc)
        out[status] = ([x * encoded["x_unit_s"] for x in xs],
                       [math.expm1(y / encoded["y_scale"]) / 1000 for y in ys])
    return out
