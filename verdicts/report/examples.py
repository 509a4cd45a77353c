"""The anomaly examples of results.json written out for a person: each message's send and reads, placed
against the nearest fault ("0.21 s before fault 2 (kill broker2) began"), with the causal chain that explains
it (results.json ``forensics``) or, without one, the node-log events of its partition that did it: the
election of a leader that never had the message, the truncation that removed it."""

from __future__ import annotations

from typing import Any

from checkers.anomalies import ANOMALIES, DEFINITIONS
from verdicts.report.chains import chain_for, step_rows
from verdicts.report.scan import NS, Scan
from verdicts.report.windows import fault_context

ACKNOWLEDGED = ("lost", "lost_after_read", "divergent")  # anomalies whose moment is an acknowledgement


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
                      at_offsets: dict[tuple[str, int, int], list[dict[str, Any]]] | None = None,
                      chains: list[dict[str, Any]] | None = None, scan: Scan | None = None
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
            elif "consumer" in ex:  # a consumer's reads out of sequence (poll_*): where it was, where it read next
                what = (f"{ex.get('consumer')} on {ex.get('topic')}-{ex.get('partition')}: offset {ex.get('offset')} "
                        f"after {ex.get('previous_offset')}")
                last = [r["time_ns"] for r in ex.get("reads") or [] if isinstance(r.get("time_ns"), int)]
                detail = fault_context(last[-1] if last else None, faults)
            elif "deliveries" in ex:  # a share group's record (share_*): its deliveries and what came of each
                what = (f"{ex.get('topic')}-{ex.get('partition')} @ offset {ex.get('offset')} "
                        f"({ex.get('producer')}/{ex.get('seq')})")
                given = ex.get("deliveries") or []
                detail = "; ".join(f"{d.get('member')} #{d.get('delivery')} at {seconds_text(d.get('time_ns'))}: "
                                   f"{d.get('ack') or 'no acknowledgement'}"
                                   + (f" {d.get('result')}" if d.get("ack") else "") for d in given)
                context = fault_context(given[-1].get("time_ns") if given else None, faults)
                detail = (detail or "never given to a member") + (f" ({context})" if context else "")
            elif "offset" in ex and "partition" in ex:  # a position (divergent, foreign unexpected)
                what = f"{ex.get('topic')}-{ex.get('partition')} @ offset {ex.get('offset')}"
                if not ex.get("send"):  # two reads disagree: when the first was made
                    first = min((r["time_ns"] for r in ex.get("reads") or [] if isinstance(r.get("time_ns"), int)),
                                default=None)
                    detail = fault_context(first, faults)
            else:
                what = f"{ex.get('producer')}/{ex.get('seq')}" + (f" (group {ex['group']})" if ex.get("group") else "")
            row: dict[str, Any] = {"what": what, "detail": detail, "send": None, "reads": [], "there": [],
                                   "chain": "", "steps": [],
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
                    "context": fault_context(send.get("complete_ns") or send.get("invoke_ns"), faults,
                                             acknowledged=name in ACKNOWLEDGED),
                }
                if name in ACKNOWLEDGED:
                    chain = chain_for(chains or [], send.get("topic"), send.get("partition"), send.get("offset"),
                                      send.get("complete_ns"))
                    row["chain"] = chain["sentence"] if chain else ""
                    row["steps"] = chain["steps"] if chain else step_rows(evidence(send, scan))
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


def evidence(send: dict[str, Any], scan: Scan | None) -> list[dict[str, Any]]:
    """What the node logs say happened to an acknowledged message's partition afterwards, as chain steps: the
    first leader elected after the acknowledgement (and whether its log reached the offset) and the first
    truncation below the offset, the acknowledging leader's own when it has one."""
    topic, partition, offset, acked = (send.get("topic"), send.get("partition"), send.get("offset"),
                                       send.get("complete_ns"))
    if scan is None or not isinstance(acked, int) or not isinstance(offset, int):
        return []
    later = [e for e in scan.broker_events if e.get("topic") == topic and e.get("partition") == partition
             and e.get("time_ns", -1) >= acked]
    steps = []
    leader = next((e for e in later if e.get("kind") == "become_leader"), None)
    if leader is not None:
        end = leader.get("log_end_offset")
        had = (f"; its log ended at offset {end:,}, " + ("without the message" if end <= offset else "past it")
               if isinstance(end, int) else "")
        steps.append({**leader, "what": f"{leader['node']} became leader of {topic}-{partition}"
                      + (f" in epoch {leader['leader_epoch']}" if leader.get("leader_epoch") is not None else "")
                      + had})
    cuts = [e for e in later if e.get("kind") == "truncate" and isinstance(e.get("to_offset"), int)
            and e["to_offset"] <= offset]
    acking = f"broker{scan.leader_at(topic, partition, acked)}"
    cut = next((e for e in cuts if e.get("node") == acking), cuts[0] if cuts else None)
    if cut is not None:
        steps.append({**cut, "what": f"{cut['node']} truncated {topic}-{partition} to offset {cut['to_offset']:,}, "
                                     f"below the message's {offset:,}"
                                     + (" (it had acknowledged the message as leader)"
                                        if cut["node"] == acking else "")})
    return sorted(steps, key=lambda e: e["time_ns"])
