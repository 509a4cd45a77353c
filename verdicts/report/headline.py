"""The report's first lines: one sentence a person reads in ten seconds, and the anomalies as overlapping sets.

Two badges ("anomalies found", "expectations met") had to be read together and still did not say whether
anything was wrong. The sentence says it: PASS / FAIL / NOT JUDGED from the expectations (the exit code's
rule, ``verdicts.expect``), what happened with its rate and in how many of the faults, and whether these
settings allow it, the scenario expected it, or which expectation broke. Colour follows the same rule: red
only for what breaks a promise of these settings or an expectation (``tone``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from catalogue.anomalies import ANOMALIES, ANOMALY_INFO, ANOMALY_LIST, TALLY_DENOMINATORS
from catalogue.faults import FAULT_KINDS
from verdicts.expect import EXPECTATION, MET, UNMET, Assessment
from verdicts.report.settings import LOSS, allowance

STATUS = {MET: ("PASS", "pass"), UNMET: ("FAIL", "fail")}
NOT_JUDGED = ("NOT JUDGED", "unjudged")
# the anomaly a sentence leads with: the first of these (by the catalogue's ``lead`` rank) the run found
LEAD = tuple(a.name for a in sorted((a for a in ANOMALY_LIST if a.lead is not None), key=lambda a: a.lead))
# what each count is a share of (a count of results.json, or a sum of counts)
DENOMINATORS: dict[str, tuple[tuple[str, ...], str]] = {
    **TALLY_DENOMINATORS, **{a.name: a.denominator for a in ANOMALY_LIST if a.denominator is not None}}
VERBS = {a.name: a.verb for a in ANOMALY_LIST if a.verb is not None}
FAULT_NOUNS = {k.name: k.noun for k in FAULT_KINDS.values()}
# shown as problems: every anomaly but those only counted
FLAGGED = frozenset(a.name for a in ANOMALY_LIST if a.flagged)
TARGET_WORDS = {"partition-leader": "leader", "controller": "controller", "txn-coordinator": "coordinator",
                "group-coordinator": "group coordinator", "random-broker": "broker", "random-node": "node",
                "majority-brokers": "majority", "all-brokers": "whole-cluster", "producer": "producer",
                "consumer": "consumer", "pipeline": "pipeline", "random-client": "client",
                "share-coordinator": "share coordinator", "share_consumer": "share member"}


def percent(n: Any, d: Any) -> str:
    """``n`` as a share of ``d`` for a person: 0.26 %, 0.003 %, 12 %; empty without a denominator."""
    if not isinstance(n, int) or not isinstance(d, int) or d <= 0:
        return ""
    p = 100 * n / d
    if 99 <= p < 100:  # never round a shortfall up to everything
        return f"{min(p, 99.9):.1f} %"
    if p == 0 or p >= 10:
        return f"{p:.0f} %"
    if p >= 1:
        return f"{p:.1f} %"
    return f"{p:.2g} %" if p >= 0.001 else "< 0.001 %"


def denominator(name: str, counts: dict[str, Any]) -> tuple[int | None, str]:
    """What ``name`` counts a share of, and its value (None when results.json has no such count)."""
    keys, noun = DENOMINATORS.get(name, ((), ""))
    if not keys or not all(isinstance(counts.get(k), int) for k in keys):
        return None, noun
    return sum(counts[k] for k in keys), noun


def shares(counts: dict[str, Any]) -> dict[str, str]:
    """Every count that has a denominator as its share of it."""
    return {name: percent(n, denominator(name, counts)[0]) for name, n in counts.items()
            if name in DENOMINATORS and n}


def anticipated(wanted: Any) -> bool:
    """Whether an expectation (3, ">0", ">= 1") lets the count be above zero: the scenario expected the anomaly."""
    if isinstance(wanted, bool) or wanted is None:
        return False
    if isinstance(wanted, int):
        return wanted > 0
    m = EXPECTATION.match(str(wanted))
    return bool(m) and ((m.group(1) in (">", ">=")) or int(m.group(2)) > 0)


def broken_keys(assessment: Assessment) -> set[str]:
    """The counts whose expectation broke ("lost is 12, expected 0" names lost)."""
    return {line.split(" is ", 1)[0] for line in assessment.unmet}


def tone(name: str, count: Any, cfg: dict[str, Any] | None, faults: list[tuple[str, str]],
         expect: dict[str, Any], broken: set[str]) -> str:
    """"broken" (red): the count breaks an expectation, or a promise no expectation anticipated; "allowed":
    an anomaly these settings allow or the scenario expected; "" otherwise."""
    if name in broken:
        return "broken"
    if not count or name not in FLAGGED:
        return ""
    if (cfg is not None and allowance(name, cfg, faults)) or anticipated(expect.get(name)):
        return "allowed"
    return "broken"


@dataclass
class Headline:
    status: str  # PASS, FAIL or NOT JUDGED
    css: str  # pass, fail, unjudged
    sentence: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # the anomalies found, as overlapping sets
    zero: list[tuple[str, str, Any]] = field(default_factory=list)  # anomalies not found: (label, tone, expected)
    tones: dict[str, str] = field(default_factory=dict)  # count name -> broken / allowed / ""


def headline(results: dict[str, Any], assessment: Assessment, cfg: dict[str, Any] | None,
             planned: list[tuple[str, str]], expect: dict[str, Any], windows: list[dict[str, Any]],
             per_fault: list[Counter[str]], lost_divergent: int) -> Headline:
    """The sentence, the anomaly rows and the tone of every count, for one run."""
    counts = results.get("counts") or {}
    status, css = STATUS.get(assessment.outcome, NOT_JUDGED)
    broken = broken_keys(assessment)
    tones = {name: tone(name, counts.get(name), cfg, planned, expect, broken) for name in counts}
    found = [a for a in LEAD if counts.get(a)]
    if "divergent" in found and counts["divergent"] <= lost_divergent and "lost" in found:
        found.remove("divergent")  # every divergent offset is where a lost write was acknowledged
    if assessment.proved_nothing:
        acked = counts.get("acked")
        text = "; ".join(assessment.not_judged) + (f"; {acked:,} writes were acknowledged before that"
                                                  if isinstance(acked, int) and acked else "")
    elif found:
        text = _anomaly_clause(found, counts, cfg, planned, windows, per_fault, lost_divergent)
        text += _tail(found, tones, assessment, expect, cfg, planned)
    else:
        acked = counts.get("acked") or 0
        text = (f"all {acked:,} acknowledged writes were read back exactly once" if results.get("valid")
                else "no anomaly was found") + _through(windows) + _transactions(counts)
        text += _tail([], tones, assessment, expect, cfg, planned)
    return Headline(status, css, f"{status} — {text}.", _rows(counts, tones, cfg, planned, expect, lost_divergent),
                    [(a.replace("_", " "), tones.get(a, ""), expect.get(a)) for a in ANOMALIES
                     if a in FLAGGED and not counts.get(a)], tones)


def _subject(name: str, cfg: dict[str, Any] | None, planned: list[tuple[str, str]]) -> str:
    if cfg is None:
        return "this run"
    allowed = allowance(name, cfg, planned)
    if allowed:
        return allowed
    if name in LOSS:
        return f"acks={cfg['acks']}, min.insync.replicas={cfg['min.insync.replicas']}"
    if name == "duplicated":
        return "the idempotent producer"
    if name == "consumer_skipped":
        return f"{cfg['commit']} commit"
    if ANOMALY_INFO[name].transactional:
        return "transactions"
    return "Kafka"


def _anomaly_clause(found: list[str], counts: dict[str, Any], cfg: dict[str, Any] | None,
                    planned: list[tuple[str, str]], windows: list[dict[str, Any]],
                    per_fault: list[Counter[str]], lost_divergent: int) -> str:
    lead = found[0]
    d, _ = denominator(lead, counts)
    share = percent(counts[lead], d)
    clause = f"{_subject(lead, cfg, planned)} " + VERBS[lead].format(n=f"{counts[lead]:,}", d=f"{d or 0:,}")
    clause += f" ({share})" if share else ""
    hit = sum(1 for c in per_fault if c.get(lead))
    if windows and per_fault and lead in ("lost", "duplicated", "divergent") and hit:
        clause += f" in {hit} of {_faults_text(windows)}"
    else:
        clause += _through(windows)
    also = []
    for name in found[1:3]:
        d, _ = denominator(name, counts)
        n, label = counts[name], name.replace("_", " ")
        if name == "divergent" and lost_divergent:
            n, label = n - lost_divergent, "other divergent offsets"
        share = percent(n, d)
        also.append(f"{n:,} {label}" + (f" ({share})" if share else ""))
    return clause + (f"; also {' and '.join(also)}" if also else "")


def _faults_text(windows: list[dict[str, Any]]) -> str:
    """"5 leader kills", "3 kills", "2 faults": how many faults of what kind the run applied."""
    kinds = {w["fault"] for w in windows}
    if len(kinds) != 1:
        return f"{len(windows)} faults"
    kind = next(iter(kinds))
    one, many = FAULT_NOUNS.get(kind, (f"{kind} fault", f"{kind} faults"))
    targets = {str(w.get("target")) for w in windows}
    word = TARGET_WORDS.get(next(iter(targets)), "") if len(targets) == 1 else ""
    return f"{len(windows)} {word + ' ' if word else ''}{one if len(windows) == 1 else many}"


def _transactions(counts: dict[str, Any]) -> str:
    """How the transactions ended, for a run that had them."""
    committed, aborted, unknown = (counts.get(k) or 0 for k in ("txns_committed", "txns_aborted", "txns_unknown"))
    if not committed + aborted + unknown:
        return ""
    ended = [f"{committed:,} transactions committed"] + [f"{n:,} {what}" for n, what in
                                                         ((aborted, "aborted"), (unknown, "of unknown outcome")) if n]
    return f"; {', '.join(ended[:-1]) + ' and ' + ended[-1] if len(ended) > 1 else ended[0]}, none torn"


def _through(windows: list[dict[str, Any]]) -> str:
    return f" through {_faults_text(windows)}" if windows else " with no fault applied"


def _tail(found: list[str], tones: dict[str, str], assessment: Assessment, expect: dict[str, Any],
          cfg: dict[str, Any] | None, planned: list[tuple[str, str]]) -> str:
    if assessment.outcome == UNMET:
        return "; expectation broken: " + "; ".join(assessment.unmet)
    if assessment.outcome != MET:
        return "; " + "; ".join(assessment.not_judged)
    if not found:
        return ""
    if all(cfg is not None and allowance(a, cfg, planned) for a in found):
        return ", as these settings allow"
    if all(tones.get(a) == "allowed" for a in found):
        return ", as the scenario expects"
    unpromised = [a.replace("_", " ") for a in found if tones.get(a) == "broken"]
    return f", which these settings promise cannot happen ({', '.join(unpromised)}; no expectation covers it)"


def _rows(counts: dict[str, Any], tones: dict[str, str], cfg: dict[str, Any] | None,
          planned: list[tuple[str, str]], expect: dict[str, Any], lost_divergent: int) -> list[dict[str, Any]]:
    """One row per anomaly found; lost_after_read and the divergent offsets of lost writes inside lost."""
    rows = []
    for name in ANOMALIES:
        n = counts.get(name) or 0
        if ANOMALY_INFO[name].part_of:
            continue  # shown in its whole's row
        if name == "divergent" and counts.get("lost"):
            n -= min(lost_divergent, n)
        if not n:
            continue
        d, noun = denominator(name, counts)
        why = allowance(name, cfg, planned) if cfg is not None else None
        row = {"name": name, "count": n, "of": f"of {d:,} {noun}" if d is not None else "",
               "pct": percent(n, d), "tone": tones.get(name, ""), "subsets": [],
               "why": _why(name, tones.get(name, ""), why, expect),
               "label": "other divergent offsets" if name == "divergent" and counts.get("lost")
               else name.replace("_", " ")}
        if name == "lost":
            row["subsets"] = [f"of which {lost_divergent:,} also divergent: the offset each was acknowledged at "
                              "was seen holding another message"] if lost_divergent else []
            if counts.get("lost_after_read"):
                row["subsets"].append(f"of which {counts['lost_after_read']:,} "
                                      f"({percent(counts['lost_after_read'], n)}) had been read by a live consumer "
                                      "before they were lost")
        if name == "unknown" and ("unknown_found" in counts or "unknown_not_found" in counts):
            found, missing = counts.get("unknown_found", 0), counts.get("unknown_not_found", 0)
            row["subsets"] = [f"{found:,} of them {'was' if found == 1 else 'were'} written, "
                              f"{missing:,} {'was' if missing == 1 else 'were'} not"]
        rows.append(row)
    return rows


def _why(name: str, tone_: str, allowed: str | None, expect: dict[str, Any]) -> str:
    if name not in FLAGGED:
        return "counted, not a violation"
    if tone_ == "broken":
        return "breaks an expectation" if name in expect else "breaks what these settings promise"
    if allowed:
        return f"allowed by {allowed}"
    return f"expected by the scenario ({name} {expect.get(name)})"
