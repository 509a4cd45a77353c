"""The anomaly examples of results.json written out for a person: each message's send and reads, placed
against the fault windows ("during kill broker1 (+0.42 s)")."""

from __future__ import annotations

from typing import Any

from checkers.anomalies import ANOMALIES, DEFINITIONS
from verdicts.report.scan import NS, fault_label


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


def seconds_text(t: Any) -> str:
    """A time of the history (ns since the run started) in seconds, or a dash when there is none."""
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
            detail = ""
            if name == "torn_transaction":
                what = f"{ex.get('producer')} transaction {ex.get('txn')} ({ex.get('outcome')})"
                detail = (f"visible to read_committed: {ex.get('visible_count')} (seqs {_seqs(ex.get('visible'))}); "
                          f"missing: {ex.get('missing_count')} (seqs {_seqs(ex.get('missing'))})")
            elif name == "hanging_transaction":
                what = f"{ex.get('topic')}-{ex.get('partition')}"
                context = fault_context(ex.get("from_ns"), faults)
                detail = (f"last stable offset {ex.get('last_stable_offset')} below high watermark "
                          f"{ex.get('high_watermark')} for {ex.get('stuck_ms', 0) / 1000:.1f} s, from "
                          f"{seconds_text(ex.get('from_ns'))}{f' ({context})' if context else ''} to "
                          f"{seconds_text(ex.get('to_ns'))}")
            elif "offset" in ex and "partition" in ex:  # a position (divergent, foreign unexpected)
                what = f"{ex.get('topic')}-{ex.get('partition')} @ offset {ex.get('offset')}"
            else:
                what = f"{ex.get('producer')}/{ex.get('seq')}" + (f" (group {ex['group']})" if ex.get("group") else "")
            row: dict[str, Any] = {"what": what, "detail": detail, "send": None, "reads": [], "there": [],
                                   "outputs": [_read_row(r, faults) for r in ex.get("outputs") or []]}
            if send:
                latency = (send["complete_ns"] - send["invoke_ns"]) / 1e6 if isinstance(send.get("complete_ns"), int) \
                    and isinstance(send.get("invoke_ns"), int) else None
                row["send"] = {
                    "msg": f"{send.get('producer')}/{send.get('seq')}",
                    "where": f"{send.get('topic')}-{send.get('partition')} @ {send.get('offset')}"
                             if send.get("partition") is not None else f"{send.get('topic')} (no partition)",
                    "status": send.get("status"), "error": send.get("error"),
                    "txn": send.get("txn"),
                    "invoked": seconds_text(send.get("invoke_ns")), "completed": seconds_text(send.get("complete_ns")),
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


def _seqs(seqs: Any) -> str:
    return ", ".join(str(s) for s in seqs or []) or "none"


def _read_row(r: dict[str, Any], faults: list[dict[str, Any]]) -> dict[str, Any]:
    source = f" from {r['from_producer']}/{r['from_seq']}" if r.get("from_producer") is not None else ""
    return {
        "who": f"{r.get('consumer')}" + (f" ({r['group']})" if r.get("group") else ""),
        "phase": r.get("phase") + (" read_committed" if r.get("isolation") == "read_committed" else ""),
        "where": f"{r.get('topic')}-{r.get('partition')} @ {r.get('offset')}",
        "msg": f"{r.get('producer')}/{r.get('seq')}{source}", "time": seconds_text(r.get("time_ns")),
        "context": fault_context(r.get("time_ns"), faults),
    }
