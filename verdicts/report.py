"""The per-run report: one self-contained HTML file an operator opens after a run.

``write_report(run_dir, results, scenario, unmet)`` writes RUN/report.html:
the verdict and every count at the top, the settings that matter for
durability, one timeline (throughput, send latency, lost and duplicated
messages at the second they were acknowledged, ISR size and leader changes)
with the fault windows shaded on one shared time axis, a table per
partition, the anomaly examples of results.json written out for a person,
the scenario as run and links to the history and the node logs.

It must stay fast and small for a 10-million-message run, so the history is
read in one streaming pass per file and reduced to per-second aggregates
(counts and a log-bucketed latency histogram per second); lost and
duplicated messages are recounted in that pass with compact arrays indexed
by seq (per producer) and by offset (per partition), never one dict per
message. Charts are Plotly figures; plotly.js is embedded once per page, so
the file opens with no network.
"""

from __future__ import annotations

import html
import json
import logging
import math
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import plotly.graph_objects as go
import plotly.io as pio
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from checkers.anomalies import ANOMALIES, DEFINITIONS, FLAGGED
from harness.errors import EXIT_VALID, HarnessError
from rundir.documents import read_results, read_scenario
from rundir.layout import RunDir
from rundir.lines import HistoryError
from verdicts.expect import Assessment, assess

log = logging.getLogger(__name__)

MAX_BINS = 7200  # above two hours of seconds, the timeline sums several seconds per point
MAX_DENSE = 1 << 27  # seqs and offsets above this go to a dict instead of a dense array
MAX_PARTITION_LINES = 12  # more partitions: the ISR chart shows the minimum and the count under-replicated
NS = 1_000_000_000


# --- settings ---------------------------------------------------------------------------------------


def durability_config(scenario: dict[str, Any] | None) -> dict[str, Any]:
    """The settings that decide what Kafka promises, normalised (also the rows of the matrix)."""
    scenario = scenario or {}
    workload = scenario.get("workload") or {}
    producer = (workload.get("producers") or {}).get("config") or {}
    consumers = workload.get("consumers") or {}
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    acks = str(producer.get("acks", producer.get("request.required.acks", "all")))
    idempotent = _truthy(producer.get("enable.idempotence", False)) or bool(producer.get("transactional.id"))
    unclean = topic_cfg.get("unclean.leader.election.enable", broker.get("unclean.leader.election.enable", False))
    flush_messages = topic_cfg.get("flush.messages", broker.get("log.flush.interval.messages"))
    flush_ms = topic_cfg.get("flush.ms", broker.get("log.flush.interval.ms"))
    flush = []
    if flush_messages is not None:
        flush.append(f"every {flush_messages} msg")
    if flush_ms is not None:
        flush.append(f"every {flush_ms} ms")
    commit = consumers.get("commit", "auto")
    if (consumers.get("config") or {}).get("enable.auto.commit") is not None:
        commit = f"{commit} (enable.auto.commit={consumers['config']['enable.auto.commit']})"
    return {
        "metadata": cluster.get("metadata", "zookeeper"),
        "acks": "all" if acks == "-1" else acks,
        "min.insync.replicas": topic.get("min_insync_replicas", "?"),
        "replication factor": topic.get("replication_factor", "?"),
        "unclean election": _truthy(unclean),
        "idempotence": idempotent,
        "flush": ", ".join(flush) or "OS page cache",
        "commit": commit,
    }


def durability_settings(scenario: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Every setting that matters for durability, as (name, value) rows for the report."""
    if not scenario:
        return [("scenario", "unknown (no scenario.yaml)")]
    producer = ((scenario.get("workload") or {}).get("producers") or {}).get("config") or {}
    cluster, topic = scenario.get("cluster") or {}, scenario.get("topic") or {}
    broker, topic_cfg = cluster.get("broker_config") or {}, topic.get("config") or {}
    cfg = durability_config(scenario)
    flush = [(name, topic_cfg.get(name, broker.get(alias, "default")))
             for name, alias in (("flush.messages", "log.flush.interval.messages"),
                                 ("flush.ms", "log.flush.interval.ms"))]
    return [
        ("Kafka", f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})"),
        ("brokers", cluster.get("brokers", "?")),
        ("acks", producer.get("acks", "all (librdkafka default)")),
        ("enable.idempotence", producer.get("enable.idempotence", False)),
        ("retries", producer.get("retries", "default")),
        ("max.in.flight", producer.get("max.in.flight.requests.per.connection", producer.get("max.in.flight", 1000000))),
        ("delivery.timeout.ms", producer.get("delivery.timeout.ms", "default")),
        ("replication factor", cfg["replication factor"]),
        ("min.insync.replicas", cfg["min.insync.replicas"]),
        ("unclean.leader.election.enable", cfg["unclean election"]),
        *[(name, "default (OS page cache)" if value == "default" else value) for name, value in flush],
        ("consumer commit", cfg["commit"]),
        ("faults", ", ".join(f"{f.get('kind')} {f.get('target')}" for f in scenario.get("faults") or []
                             if isinstance(f, dict)) or "none"),
    ]


def promises(cfg: dict[str, Any]) -> list[str]:
    """What Kafka promises for one durability configuration, in a few short sentences."""
    said = []
    acks, isr, rf = cfg["acks"], cfg["min.insync.replicas"], cfg["replication factor"]
    if acks == "0":
        said.append("acks=0: nothing is acknowledged by a broker, any fault may lose writes")
    elif acks == "1":
        said.append("acks=1: the leader alone acknowledges; a leader that dies before its followers copy "
                    "the tail loses acknowledged writes")
    elif isinstance(isr, int) and isr >= 2:
        said.append(f"acks=all, min.insync={isr}: an acknowledged write is on ≥{isr} replicas; no loss while "
                    f"fewer than {isr} brokers fail at once")
    else:
        said.append("acks=all but min.insync=1: the ISR may shrink to the leader alone, which then acknowledges "
                    "by itself; loss is possible")
    if isinstance(rf, int) and isinstance(isr, int) and rf <= isr and acks == "all":
        said.append(f"RF {rf} ≤ min.insync {isr}: one broker down stops writes")
    if cfg["unclean election"]:
        said.append("unclean election: an out-of-sync replica may become leader and drop acknowledged writes")
    said.append("idempotent: retries neither duplicate nor reorder" if cfg["idempotence"]
                else "not idempotent: retries may duplicate and reorder")
    if cfg["flush"] == "OS page cache":
        said.append("no fsync: power loss on every replica at once can lose acknowledged writes")
    else:
        said.append(f"fsync {cfg['flush']}")
    said.append("consumer commits after processing: at-least-once" if str(cfg["commit"]).startswith("manual")
                else "auto commit: offsets may be committed before processing")
    return said


def _truthy(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


# --- the streaming pass ------------------------------------------------------------------------------


def _iter_jsonl(path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    """Every JSON object line; an incomplete last line is dropped with a note, other bad lines counted."""
    if not path.is_file():
        notes.append(f"history/{path.name} is missing")
        return
    decode = json.JSONDecoder().raw_decode
    bad: tuple[int, int] | None = None  # (count, first line number) of lines that are not JSON objects
    held: int | None = None
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if held is not None:
                bad = (bad[0] + 1, bad[1]) if bad else (1, held)
                held = None
            try:
                obj = decode(raw.decode("utf-8").strip())[0]
            except ValueError:
                if raw.strip():
                    held = number
                continue
            if type(obj) is dict:
                yield obj
    if held is not None:
        notes.append(f"history/{path.name}: dropped an incomplete last line (line {held})")
    if bad:
        notes.append(f"history/{path.name}: skipped {bad[0]} lines that are not JSON (first: line {bad[1]})")


class Grow:
    """A list of ints indexed by second that grows as later seconds appear."""

    __slots__ = ("v",)

    def __init__(self) -> None:
        self.v: list[int] = []

    def add(self, i: int, n: int = 1) -> None:
        v = self.v
        if i >= len(v):
            v.extend([0] * (i + 1 - len(v)))
        v[i] += n


def latency_bucket(ns: int) -> int:
    """Log buckets of microseconds, 8 per power of two (about 6 % wide); exact below 8 µs."""
    us = ns // 1000
    if us < 8:
        return max(us, 0)
    b = us.bit_length()
    return b * 8 + ((us >> (b - 4)) & 7)


def bucket_ms(bucket: int) -> float:
    """The middle of a latency bucket, in milliseconds."""
    if bucket < 8:
        return bucket / 1000
    b, sub = divmod(bucket, 8)
    width = 1 << (b - 4)
    return ((8 + sub) * width + width / 2) / 1000


class MessageTable:
    """Per producer, by seq: where a message sits in the final read, in 13 bytes a message."""

    __slots__ = ("part", "offset", "dup", "extra")

    def __init__(self) -> None:
        self.part = array("i")  # partition index + 1 of its first final-read position; 0: not in the final read
        self.offset = array("q")  # offset of that position
        self.dup = bytearray()  # 1: seen at a second distinct position in the final read; 2: already placed
        self.extra: dict[int, list[int]] = {}  # seqs beyond MAX_DENSE: [part, offset, dup]

    def grow(self, seq: int) -> None:
        n = max(seq + 1, len(self.part) * 3 // 2) - len(self.part)
        self.part.extend(array("i", bytes(4 * n)))
        self.offset.extend(array("q", bytes(8 * n)))
        self.dup.extend(bytes(n))


class PositionTable:
    """Per partition, by offset: the first message read there (id + 1; -1: a value kchaos did not write),
    and whether the offset was seen holding different messages (9 bytes an offset)."""

    __slots__ = ("first", "div", "extra", "extra_div")

    def __init__(self) -> None:
        self.first = array("q")
        self.div = bytearray()
        self.extra: dict[int, int] = {}  # offsets beyond MAX_DENSE
        self.extra_div: set[int] = set()

    def grow(self, offset: int) -> None:
        n = max(offset + 1, len(self.first) * 3 // 2) - len(self.first)
        self.first.extend(array("q", bytes(8 * n)))
        self.div.extend(bytes(n))

    def mark(self, offset: int) -> None:
        if 0 <= offset < len(self.div):
            self.div[offset] = 1
        else:
            self.extra_div.add(offset)

    def divergent(self) -> int:
        return self.div.count(1) + len(self.extra_div)


@dataclass
class Partition:
    label: str
    sends: int = 0
    acked: int = 0
    lost: int = 0
    unverifiable: int = 0
    duplicated: int = 0
    divergent: int = 0
    reads_live: int = 0
    reads_final: int = 0
    high_watermark: int | None = None
    complete: bool | None = None
    leader: Any = None
    leader_changes: int = 0
    min_isr: int | None = None


@dataclass
class Scan:
    """What one streaming pass over the history leaves: per-second series, per-partition rows, events."""

    acked: Grow = field(default_factory=Grow)
    failed: Grow = field(default_factory=Grow)
    unknown: Grow = field(default_factory=Grow)
    reads_live: Grow = field(default_factory=Grow)
    reads_final: Grow = field(default_factory=Grow)
    lost: Grow = field(default_factory=Grow)
    duplicated: Grow = field(default_factory=Grow)
    latency: list[Counter[int] | None] = field(default_factory=list)
    latency_max: Grow = field(default_factory=Grow)
    partitions: list[Partition] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    leaders: dict[int, list[tuple[int, Any, int]]] = field(default_factory=dict)  # part -> (t_ns, leader, isr)
    leader_changes: list[tuple[int, int, Any, Any]] = field(default_factory=list)  # (t_ns, part, old, new)
    end_ns: int = 0
    start_ns: int | None = None  # the first send or leader observation: the run clock starts before the cluster
    final_read: list[int] = field(default_factory=list)  # [first, last] time_ns of the final read-back
    sent: int = 0
    totals: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # how long the scan took
    at_offsets: dict[tuple[str, int, int], list[dict[str, Any]]] = field(default_factory=dict)  # wanted positions


def scan_history(history: Path, wanted: set[tuple[str, int, int]] | None = None) -> Scan:
    """Read events, reads and sends once each and reduce them to what the report shows.

    ``wanted`` positions (topic, partition, offset) get their first reads kept in ``scan.at_offsets``:
    what sits where a lost message was acknowledged.
    """
    started = time.monotonic()
    scan = Scan()
    scan.at_offsets = {pos: [] for pos in wanted or ()}
    part_index: dict[tuple[str, int], int] = {}

    def part_of(topic: str, partition: int) -> int:
        key = (topic, partition)
        i = part_index.get(key)
        if i is None:
            i = part_index[key] = len(scan.partitions)
            scan.partitions.append(Partition(label=f"{topic}-{partition}"))
        return i

    _scan_events(history, scan, part_of)
    producers: dict[str, int] = {}
    tables: list[MessageTable] = []
    positions: list[PositionTable] = []
    _scan_reads(history, scan, part_of, producers, tables, positions)
    _scan_sends(history, scan, part_of, producers, tables, positions)
    for part, pt in enumerate(positions):
        scan.partitions[part].divergent = pt.divergent()
    scan.totals = {
        "lost": sum(p.lost for p in scan.partitions),
        "duplicated": sum(p.duplicated for p in scan.partitions),
        "divergent": sum(p.divergent for p in scan.partitions),
    }
    if len({p.label.rsplit("-", 1)[0] for p in scan.partitions}) == 1:
        for p in scan.partitions:
            p.label = "p" + p.label.rsplit("-", 1)[1]
    scan.seconds = time.monotonic() - started
    return scan


def _scan_events(history: Path, scan: Scan, part_of: Any) -> None:
    windows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in _iter_jsonl(history / "events.jsonl", scan.notes):
        kind = e.get("kind")
        t = e.get("time_ns")
        if isinstance(t, int):
            scan.end_ns = max(scan.end_ns, t)
        try:
            if kind == "fault":
                targets = e.get("targets") or []
                key = (e.get("fault"), e.get("target"), tuple(targets), e.get("start_ns"))
                w = windows.setdefault(key, {"fault": e.get("fault"), "target": e.get("target"),
                                             "targets": list(targets), "detail": e.get("detail"),
                                             "start_ns": e.get("start_ns") if e.get("start_ns") is not None else t,
                                             "end_ns": None})
                if e.get("phase") == "heal" or e.get("end_ns") is not None:
                    w["end_ns"] = e.get("end_ns") if e.get("end_ns") is not None else t
            elif kind == "leader":
                i = part_of(e["topic"], e["partition"])
                isr = len(e.get("isr") or [])
                obs = scan.leaders.setdefault(i, [])
                if obs and obs[-1][1] != e.get("leader"):
                    scan.leader_changes.append((t, i, obs[-1][1], e.get("leader")))
                    scan.partitions[i].leader_changes += 1
                obs.append((t, e.get("leader"), isr))
                if isinstance(t, int) and (scan.start_ns is None or t < scan.start_ns):
                    scan.start_ns = t
                p = scan.partitions[i]
                p.leader = e.get("leader")
                p.min_isr = isr if p.min_isr is None else min(p.min_isr, isr)
            elif kind == "final-read":
                p = scan.partitions[part_of(e["topic"], e["partition"])]
                p.complete = bool(p.complete) or bool(e.get("complete"))
                if e.get("high_watermark") is not None:
                    p.high_watermark = e["high_watermark"]
        except (KeyError, TypeError):
            continue
    scan.faults = sorted(windows.values(), key=lambda w: (w["start_ns"] or 0))


def _scan_reads(history: Path, scan: Scan, part_of: Any, producers: dict[str, int], tables: list[MessageTable],
                positions: list[PositionTable]) -> None:
    live_s, final_s, parts = scan.reads_live, scan.reads_final, scan.partitions
    end = scan.end_ns
    at_offsets = scan.at_offsets
    first_final = scan.final_read
    for r in _iter_jsonl(history / "reads.jsonl", scan.notes):
        try:
            part = part_of(r["topic"], r["partition"])
            offset, producer, seq, t = r["offset"], r.get("producer"), r.get("seq"), r.get("time_ns") or 0
            final = r.get("phase") == "final"
        except (KeyError, TypeError):
            continue
        if t > end:
            end = t
        if at_offsets:
            kept = at_offsets.get((r["topic"], r["partition"], offset))
            if kept is not None and len(kept) < 4:
                kept.append(r)
        sec = t // NS
        if final:
            final_s.add(sec)
            parts[part].reads_final += 1
            if not first_final or t < first_final[0]:
                first_final[:1] = [t]
            if len(first_final) < 2 or t > first_final[1]:
                first_final[1:2] = [t]
        else:
            live_s.add(sec)
            parts[part].reads_live += 1
        # the message at this position: id + 1 (producer index << 40 | seq), -1 when kchaos did not write it
        if producer is None or type(seq) is not int:
            ident = -1
        else:
            p = producers.get(producer)
            if p is None:
                p = producers[producer] = len(producers)
                tables.append(MessageTable())
            ident = (p << 40 | seq) + 1
        while part >= len(positions):
            positions.append(PositionTable())
        pt = positions[part]
        if 0 <= offset < MAX_DENSE:
            if offset >= len(pt.first):
                pt.grow(offset)
            seen = pt.first[offset]
            if seen == 0:
                pt.first[offset] = ident
            elif seen != ident:
                pt.div[offset] = 1
        else:
            seen = pt.extra.setdefault(offset, ident)
            if seen != ident:
                pt.extra_div.add(offset)
        if not final or ident == -1:
            continue
        table = tables[p]
        if 0 <= seq < MAX_DENSE:
            if seq >= len(table.part):
                table.grow(seq)
            where = table.part[seq]
            if where == 0:
                table.part[seq] = part + 1
                table.offset[seq] = offset
            elif (where != part + 1 or table.offset[seq] != offset) and not table.dup[seq]:
                table.dup[seq] = 1
        else:
            entry = table.extra.setdefault(seq, [part + 1, offset, 0])
            if (entry[0] != part + 1 or entry[1] != offset) and not entry[2]:
                entry[2] = 1
    scan.end_ns = end


def _scan_sends(history: Path, scan: Scan, part_of: Any, producers: dict[str, int], tables: list[MessageTable],
                positions: list[PositionTable]) -> None:
    acked, failed, unknown = scan.acked, scan.failed, scan.unknown
    lost_s, dup_s, lat_max, latency = scan.lost, scan.duplicated, scan.latency_max, scan.latency
    parts = scan.partitions
    end = scan.end_ns
    n = first = 0
    for s in _iter_jsonl(history / "sends.jsonl", scan.notes):
        try:
            producer, seq, status, partition = s["producer"], s["seq"], s["status"], s.get("partition")
            invoke, complete = s.get("invoke_ns") or 0, s.get("complete_ns")
            part = None if partition is None else part_of(s["topic"], partition)
        except (KeyError, TypeError):
            continue
        n += 1
        if n == 1 or invoke < first:
            first = invoke
        t = complete if isinstance(complete, int) else invoke
        if t > end:
            end = t
        sec = t // NS
        if part is not None:
            parts[part].sends += 1
        if status == "ok":
            acked.add(sec)
        elif status == "fail":
            failed.add(sec)
        else:
            unknown.add(sec)
        if status != "info" and isinstance(complete, int):
            lat = complete - invoke
            if sec >= len(latency):
                latency.extend([None] * (sec + 1 - len(latency)))
            hist = latency[sec]
            if hist is None:
                hist = latency[sec] = Counter()
            hist[latency_bucket(lat)] += 1
            if sec >= len(lat_max.v):
                lat_max.add(sec, 0)
            if lat > lat_max.v[sec]:
                lat_max.v[sec] = lat
        p = producers.get(producer)
        table = tables[p] if p is not None else None
        if table is not None and type(seq) is int:
            if 0 <= seq < MAX_DENSE:
                inside = seq < len(table.part)
                where = table.part[seq] if inside else 0
                dup = table.dup[seq] if inside else 0
                if dup == 1:
                    table.dup[seq] = 2
            else:
                entry = table.extra.get(seq, [0, 0, 0])
                where, dup = entry[0], entry[2]
                if dup == 1:
                    entry[2] = 2
        else:
            where, dup = 0, 0
        if dup == 1:  # duplicated: placed once, at its ack (or completion) time, in its final-read partition
            dup_s.add(sec)
            parts[where - 1].duplicated += 1
        if status != "ok" or part is None:
            continue
        pr = parts[part]
        pr.acked += 1
        if where != part + 1:
            if pr.complete:
                pr.lost += 1
                lost_s.add(sec)
            else:
                pr.unverifiable += 1
        offset = s.get("offset")
        if type(offset) is int and part < len(positions):  # an ack's offset against what was read there
            pt = positions[part]
            seen = (pt.first[offset] if offset < len(pt.first) else 0) if 0 <= offset < MAX_DENSE \
                else pt.extra.get(offset, 0)
            # a producer no read ever named (p None): whatever was read there is another message
            if seen != 0 and (p is None or seen != (p << 40 | seq) + 1):
                pt.mark(offset)
    scan.end_ns = end
    scan.sent = n
    if n:
        scan.start_ns = first if scan.start_ns is None else min(scan.start_ns, first)


# --- the timeline ----------------------------------------------------------------------------------------


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


def fault_label(w: dict[str, Any]) -> str:
    return f"{w['fault']} {', '.join(w['targets']) or w.get('target') or ''}".strip()


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


# --- examples ----------------------------------------------------------------------------------------------


def fault_context(t_ns: int | None, faults: list[dict[str, Any]]) -> str:
    """Where a moment sits relative to the faults: during one, or how long after the last heal."""
    if t_ns is None:
        return ""
    during = [w for w in faults if w["start_ns"] is not None and w["start_ns"] <= t_ns
              and (w["end_ns"] is None or t_ns <= w["end_ns"])]
    if during:
        return "; ".join(f"during {fault_label(w)} (+{(t_ns - w['start_ns']) / NS:.2f} s)" for w in during)
    before = [w for w in faults if w["end_ns"] is not None and w["end_ns"] < t_ns]
    if before:
        w = max(before, key=lambda w: w["end_ns"])
        return f"{(t_ns - w['end_ns']) / NS:.2f} s after {fault_label(w)} healed"
    if faults:
        return f"{(faults[0]['start_ns'] - t_ns) / NS:.2f} s before the first fault"
    return ""


def _seconds(t: Any) -> str:
    return f"{t / NS:.3f} s" if isinstance(t, int) else "—"


def example_positions(results: dict[str, Any]) -> set[tuple[str, int, int]]:
    """Where the lost examples were acknowledged: the report shows what the reads found there instead."""
    wanted = set()
    for name in ("lost", "lost_after_read"):
        for ex in (results.get("examples") or {}).get(name) or []:
            send = ex.get("send") or {}
            if send.get("partition") is not None and send.get("offset") is not None:
                wanted.add((send.get("topic"), send["partition"], send["offset"]))
    return wanted


def describe_examples(results: dict[str, Any], faults: list[dict[str, Any]],
                      at_offsets: dict[tuple[str, int, int], list[dict[str, Any]]] | None = None
                      ) -> list[dict[str, Any]]:
    """The examples of results.json as rows a person can read, one section per anomaly that has any."""
    sections = []
    for name in ANOMALIES:
        examples = (results.get("examples") or {}).get(name) or []
        if not examples:
            continue
        rows = []
        for ex in examples:
            send = ex.get("send")
            if "offset" in ex and "partition" in ex:  # a position (divergent, foreign unexpected)
                what = f"{ex.get('topic')}-{ex.get('partition')} @ offset {ex.get('offset')}"
            else:
                what = f"{ex.get('producer')}/{ex.get('seq')}" + (f" (group {ex['group']})" if ex.get("group") else "")
            row: dict[str, Any] = {"what": what, "send": None, "reads": [], "there": []}
            if send:
                latency = (send["complete_ns"] - send["invoke_ns"]) / 1e6 if isinstance(send.get("complete_ns"), int) \
                    and isinstance(send.get("invoke_ns"), int) else None
                row["send"] = {
                    "msg": f"{send.get('producer')}/{send.get('seq')}",
                    "where": f"{send.get('topic')}-{send.get('partition')} @ {send.get('offset')}"
                             if send.get("partition") is not None else f"{send.get('topic')} (no partition)",
                    "status": send.get("status"), "error": send.get("error"),
                    "invoked": _seconds(send.get("invoke_ns")), "completed": _seconds(send.get("complete_ns")),
                    "latency": f"{latency:.1f} ms" if latency is not None else "—",
                    "context": fault_context(send.get("complete_ns") or send.get("invoke_ns"), faults),
                }
            if send and name in ("lost", "lost_after_read") and at_offsets is not None:
                row["there"] = [_read_row(r, faults) for r in
                                at_offsets.get((send.get("topic"), send.get("partition"), send.get("offset")), [])]
            row["reads"] = [_read_row(r, faults) for r in ex.get("reads") or []]
            rows.append(row)
        sections.append({"name": name, "definition": DEFINITIONS.get(name, ""),
                         "count": (results.get("counts") or {}).get(name, len(examples)), "rows": rows})
    return sections


def _read_row(r: dict[str, Any], faults: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "who": f"{r.get('consumer')}" + (f" ({r['group']})" if r.get("group") else ""),
        "phase": r.get("phase"), "where": f"{r.get('topic')}-{r.get('partition')} @ {r.get('offset')}",
        "msg": f"{r.get('producer')}/{r.get('seq')}", "time": _seconds(r.get("time_ns")),
        "context": fault_context(r.get("time_ns"), faults),
    }


# --- the page ------------------------------------------------------------------------------------------------


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("verdicts", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["num"] = lambda v: f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else ("—" if v is None else v)
    env.filters["setting"] = lambda v: str(v).lower() if isinstance(v, bool) else v
    return env


def plotly_script() -> Markup:
    """plotly.js, inline, once per page."""
    return Markup(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def _files(run_dir: Path) -> list[tuple[str, str]]:
    links = []
    for name in ("history/sends.jsonl", "history/reads.jsonl", "history/events.jsonl", "results.json", "scenario.yaml"):
        path = run_dir / name
        if path.exists():
            links.append((name, _size(path.stat().st_size)))
    logs = run_dir / "logs"
    if logs.is_dir():
        links += [(f"logs/{p.name}", _size(p.stat().st_size)) for p in sorted(logs.iterdir()) if p.is_file()]
    return links


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def write_report(run: RunDir, results: dict[str, Any], scenario: dict[str, Any] | None,
                 assessment: Assessment) -> Path:
    """Write RUN/report.html and return its path."""
    run_dir = run.path
    try:
        scan = scan_history(run_dir / "history", example_positions(results))
    except Exception as e:  # noqa: BLE001 - a report without a timeline beats a run that ends in a traceback
        log.exception("reading the history for the report failed")
        scan = Scan(notes=[f"the report could not read the history ({type(e).__name__}: {e}): no timeline"])
    counts = results.get("counts") or {}
    notes = list(scan.notes)
    for name in ("lost", "duplicated", "divergent"):
        if name in counts and scan.totals.get(name) != counts[name]:
            notes.append(f"the timeline and partition table recount {name} from the history as "
                         f"{scan.totals.get(name):,}; the checker counted {counts[name]:,} (the counts above are the "
                         "checker's)")
    figure = timeline_figure(scan)
    chart = Markup(pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id="timeline",
                               config={"displaylogo": False, "responsive": True}))
    scenario = scenario or None
    scenario_text = (run_dir / "scenario.yaml").read_text() if (run_dir / "scenario.yaml").is_file() else ""
    faults = [{**w, "label": fault_label(w), "start": _seconds(w["start_ns"]),
               "end": _seconds(w["end_ns"]) if w["end_ns"] is not None else "never healed",
               "length": f"{((w['end_ns'] or scan.end_ns) - w['start_ns']) / NS:.1f} s"} for w in scan.faults]
    cluster = (scenario or {}).get("cluster") or {}
    headline = {
        "acked": counts.get("acked"), "failed": counts.get("failed"), "unknown": counts.get("indeterminate"),
        "reads_live": counts.get("reads_live"), "reads_final": counts.get("reads_final"),
        "duration": f"{scan.end_ns / NS:.1f} s",
        "planned": (((scenario or {}).get("workload") or {}).get("duration_s")),
        "kafka": f"{cluster.get('kafka_version', '?')} ({cluster.get('metadata', '?')})" if cluster else "unknown",
        "faults": len(scan.faults),
    }
    page = _environment().get_template("report.html.j2").render(
        name=(scenario or {}).get("name", run_dir.name), description=(scenario or {}).get("description", ""),
        started_at=(scenario or {}).get("started_at", ""), run_dir=str(run_dir),
        results=results, counts=counts, assessment=assessment, expect=(scenario or {}).get("expect") or {},
        settings=durability_settings(scenario), promises=promises(durability_config(scenario)) if scenario else [],
        violations=FLAGGED, anomalies=ANOMALIES, definitions=DEFINITIONS, headline=headline,
        plotly=plotly_script(), chart=chart, partitions=scan.partitions, faults=faults,
        examples=describe_examples(results, scan.faults, scan.at_offsets), scenario_text=scenario_text, files=_files(run_dir),
        notes=list(results.get("notes") or []) + notes, scan_seconds=f"{scan.seconds:.1f}",
        leader_changes=len(scan.leader_changes))
    path = run.report
    tmp = path.with_name(".report.html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path


def report_cmd(run_dir: Path) -> int:
    """``kchaos report RUN``: (re)write RUN/report.html from RUN/results.json and RUN/history."""
    run = RunDir(run_dir)
    try:
        run.require()
        results = read_results(run)
        scenario = read_scenario(run)
    except HistoryError as e:
        raise HarnessError(str(e)) from None
    started = time.monotonic()
    path = write_report(run, results, scenario, assess((scenario or {}).get("expect"), results, scenario))
    print(f"report: {path} ({_size(path.stat().st_size)}, {time.monotonic() - started:.1f} s)")
    return EXIT_VALID
