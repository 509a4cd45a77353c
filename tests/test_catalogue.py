"""The catalogue's registry: every anomaly has its rule in both checkers and its headline facts, every fault kind
has its fault class, noun and colour, and the catalogue itself imports nothing of kchaos.

A new anomaly or fault kind is an entry in catalogue/ plus its rule in each engine (or its fault module); these
tests say which part is missing when one is forgotten, instead of a silent zero, a grey band or "X fault".
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from catalogue.anomalies import ANOMALIES, ANOMALY_INFO, ANOMALY_LIST, COUNTS, Anomaly
from catalogue.exits import HarnessError
from catalogue.faults import FAULT_KINDS, UNKNOWN_FAULT_COLOUR
from checkers.anomalies import Promises
from faults.base import FaultError
from faults.partition import PartitionFault
from faults.registry import FAULTS
from faults.targets import CLIENT_TARGETS
from harness.scenario import load_scenario
from checkers.polls import SEND_ANOMALY, SEQUENCE_ANOMALIES
from spark_analysis.checker import TXN_COUNTS, spark_counts
from spark_analysis.polls import ANOMALY_SQL
from spark_analysis.shares import AFTER_SQL, no_shares
from spark_analysis.judge import (FLAGS, TXN_METRICS, Pipeline, PositionCounts, Scope, message_counts, message_metrics,
                                  position_metrics)
from verdicts.expect import MET, UNMET, Assessment
from verdicts.report.figure import FAULT_COLOURS
from verdicts.report.headline import FAULT_NOUNS, _faults_text, denominator, headline
from verdicts.report.windows import add_recovery

ROOT = Path(__file__).resolve().parent.parent
NS = 1_000_000_000
FLAGGED = [a for a in ANOMALY_LIST if a.flagged]


def names(items: list[Anomaly]) -> list[str]:
    return [a.name for a in items]


# --- anomalies: a rule in each engine --------------------------------------------------------------------------


def code_strings(path: Path) -> set[str]:
    """The string constants of a module's code (docstrings left out: a name said in prose is no rule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


@pytest.mark.parametrize("anomaly", ANOMALIES)
def test_every_anomaly_has_a_rule_in_the_reference_checker(anomaly: str) -> None:
    # the reference counts what its rules add under the anomaly's name (Findings.messages / positions / count)
    # the reference's own module, and the sequences' and the share group's it calls
    rules = ("reference.py", "polls.py", "shares.py")
    assert any(anomaly in code_strings(ROOT / "checkers" / name) for name in rules), (
        f"{anomaly}: no rule in checkers/reference.py or checkers/polls.py records it")


def aliases(metrics: list[str]) -> dict[str, int]:
    """One distinct value per aggregate a list of Spark SQL metrics names (``... AS name``), as its row would hold."""
    found = [m.rsplit(" AS ", 1)[1] for m in metrics if re.search(r" AS \w+$", m)]
    return {name: 1000 + i for i, name in enumerate(found)}


def test_every_anomaly_is_an_aggregate_of_the_spark_checker() -> None:
    """Each aggregate the judge's SQL names (the widest scope: transactions and a pipeline) reaches results.json's
    count of that name: an anomaly without its column is a missing key or a zero here."""
    scope = Scope(txn=True, pipelines=(Pipeline(gid=0, input_tid=0, output_complete=True),))
    mc = message_counts(aliases(message_metrics("skipped", "redelivered", "true", scope)))
    pc = PositionCounts.of(aliases(position_metrics("true")))
    txn_row = aliases(TXN_METRICS)
    assert set(TXN_COUNTS) == set(txn_row)
    # the sequences' counts, by the names spark_analysis/polls.py's SQL gives its findings
    sequences = {name: 1 for name in SEQUENCE_ANOMALIES if f"'{name}'" in ANOMALY_SQL or name == SEND_ANOMALY}
    # the share group's, by the names spark_analysis/shares.py counts (a redelivery's by AFTER_SQL's names)
    sequences |= {name: 1 for name in no_shares()[0]}
    assert all(f"'{name}'" in AFTER_SQL for name in ("share_redelivered_released", "share_redelivered_failed_ack",
                                                     "share_redelivered_expired", "share_redelivered_after_accept"))
    counts = spark_counts(mc, pc, {name: txn_row[name] for name in TXN_COUNTS}, out_of_order=7,
                          hanging={("t", 0): {}, ("t", 1): {}}, promises=Promises(idempotent=True, ordered=True),
                          sequences=sequences)
    assert list(counts) == list(COUNTS)
    unfed = [a for a in ANOMALIES if not counts[a]]
    assert not unfed, f"no Spark aggregate feeds {', '.join(unfed)} (spark_analysis/judge.py)"


@pytest.mark.parametrize("flag", [f for f in FLAGS if f in ANOMALIES])
def test_every_flag_of_the_spark_message_table_has_its_column(flag: str) -> None:
    # message_metrics counts a flag by its name; the judge's SQL must compute a column of that name
    assert [s for s in code_strings(ROOT / "spark_analysis" / "judge.py") if re.search(rf"\bAS {flag}\b", s)], (
        f"{flag}: spark_analysis/judge.py computes no column ... AS {flag}")


# --- anomalies: what the verdict and the report need ---------------------------------------------------------


def test_every_anomaly_is_complete_and_consistent() -> None:
    assert len(set(ANOMALIES)) == len(ANOMALIES) and set(ANOMALY_INFO) == set(ANOMALIES)
    assert set(ANOMALIES) <= set(COUNTS) and len(set(COUNTS)) == len(COUNTS)
    for a in ANOMALY_LIST:
        assert a.definition and a.role in ("producers", "consumers", "pipeline", "share_consumers"), a.name
        assert a.summary in ("main", "transactions", None), a.name
        assert a.unverified is None or a.unverified == "unbounded" or a.unverified in COUNTS, a.name
        assert a.part_of is None or a.part_of in ANOMALY_INFO, a.name
        assert set(a.chains) <= {"range", "transaction"}, a.name
        assert "range" not in a.chains or a.ranges, f"{a.name}: a range's chain explains a range"
        assert "transaction" not in a.chains or a.role == "producers", \
            f"{a.name}: a transaction's chain is a producer's"
        keys = a.denominator[0] if a.denominator else ()
        assert all(k in COUNTS for k in keys), a.name
    leads = [a.lead for a in ANOMALY_LIST if a.lead is not None]
    assert len(set(leads)) == len(leads), "two anomalies share a lead rank"


@pytest.mark.parametrize("anomaly", names([a for a in FLAGGED if a.part_of is None]))
def test_every_flagged_anomaly_can_lead_the_headline(anomaly: str) -> None:
    info = ANOMALY_INFO[anomaly]
    assert info.lead is not None and info.verb, f"{anomaly}: no lead rank or verb for the report's sentence"
    assert "{d}" not in info.verb or info.denominator, f"{anomaly}: its verb shows a share but it has no denominator"
    counts = {name: 0 for name in COUNTS} | {"sent": 400, "acked": 300, "failed": 50, "reads_live": 200,
                                             "reads_final": 250, "txns_committed": 20, "txns_aborted": 5,
                                             anomaly: 3}
    d, _ = denominator(anomaly, counts)
    top = headline({"valid": False, "counts": counts, "final_read_complete": True},
                   Assessment(UNMET, unmet=[f"{anomaly} is 3, expected 0"]), None, [], {anomaly: 0}, [], [], 0)
    assert f"this run {info.verb.format(n='3', d=f'{d or 0:,}')}" in top.sentence
    assert [r["name"] for r in top.rows] == [anomaly]


@pytest.mark.parametrize("anomaly", names([a for a in ANOMALY_LIST if a.part_of is not None]))
def test_a_part_is_a_share_of_its_whole(anomaly: str) -> None:
    info = ANOMALY_INFO[anomaly]
    assert info.denominator is not None and info.denominator[0] == (info.part_of,)
    counts = {name: 0 for name in COUNTS} | {"acked": 100, info.part_of: 4, anomaly: 2}
    top = headline({"valid": False, "counts": counts}, Assessment(MET), None, [], {}, [], [], 0)
    assert [r["name"] for r in top.rows] == [info.part_of]  # shown inside its whole's row, not a row of its own


# --- fault kinds -------------------------------------------------------------------------------------------------


def test_every_fault_kind_has_its_fault_class_and_every_class_its_kind() -> None:
    assert set(FAULTS) == set(FAULT_KINDS)
    for name, kind in FAULT_KINDS.items():
        cls = FAULTS[name]
        assert cls.kind == name
        assert (kind.restarts, kind.stops_process, kind.victim) == (cls.restarts, cls.stops_process, cls.victim)
        assert kind.victim in ("node", "client")
        assert (cls.targets == CLIENT_TARGETS) == (kind.victim == "client"), f"{name}: a {kind.victim} fault"
        assert not kind.restarts or kind.stops_process, f"{name}: restarts a process it never stopped"


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_every_fault_kind_has_a_noun_and_a_colour(kind: str) -> None:
    one, many = FAULT_KINDS[kind].noun
    assert one and many and one != many
    assert FAULT_NOUNS[kind] == (one, many)
    windows = [{"fault": kind, "target": "random-node", "targets": ["broker1"]}] * 2
    assert _faults_text(windows) == f"2 node {many}"  # never "2 node {kind} faults"
    assert re.fullmatch(r"#[0-9a-f]{6}", FAULT_COLOURS[kind]) and FAULT_COLOURS[kind] != UNKNOWN_FAULT_COLOUR


def test_fault_kinds_are_told_apart_by_colour_and_noun() -> None:
    kinds = FAULT_KINDS.values()
    assert not [c for c, n in Counter(k.colour for k in kinds).items() if n > 1]
    assert not [w for w, n in Counter(k.noun[0] for k in kinds).items() if n > 1]


@pytest.mark.parametrize("kind", sorted(k.name for k in FAULT_KINDS.values()
                                         if k.victim == "node" and (k.restarts or k.stops_process)))
def test_a_fault_that_restarts_or_stops_a_node_is_refused_inside_an_isolating_partition(kind: str) -> None:
    what = "restarts" if FAULT_KINDS[kind].restarts else "thaws"
    with pytest.raises(FaultError, match=f"{kind} nested in a partition in mode isolate {what} its victim"):
        PartitionFault.check_inner(PartitionFault.check_options({"mode": "isolate"}), FAULTS[kind])
    PartitionFault.check_inner(PartitionFault.check_options({"mode": "brokers"}), FAULTS[kind])


def test_a_client_fault_that_restarts_a_client_is_not_refused_inside_a_partition() -> None:
    assert FAULT_KINDS["client-crash"].restarts
    PartitionFault.check_inner(PartitionFault.check_options({"mode": "isolate"}), FAULTS["client-crash"])


def test_a_disk_full_nested_in_an_isolating_partition_is_refused_at_validation(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("faults: [{kind: partition, duration_s: 20, then: {kind: disk-full, duration_s: 5}}]")
    with pytest.raises(HarnessError, match="faults.0.then: disk-full nested in a partition in mode isolate "
                                           "restarts its victim"):
        load_scenario(path)
    path.write_text("faults: [{kind: partition, options: {mode: brokers}, duration_s: 20, then: {kind: disk-full}}]")
    assert load_scenario(path).faults[0].then.kind == "disk-full"


def test_a_disk_full_broker_that_restarted_is_drawn_down_until_its_process_started() -> None:
    window = {"fault": "disk-full", "target": "random-broker", "targets": ["broker2"], "start_ns": 10 * NS,
              "end_ns": 18 * NS}
    events = [{"kind": "process_start", "node": "broker2", "time_ns": 17 * NS}]
    add_recovery([window], {0: [(9 * NS, 1, (1, 2, 3)), (19 * NS, 1, (1, 2, 3))]}, [("t", 0)], events)
    assert window["down_ns"] == 17 * NS


# --- the catalogue sits at the bottom ----------------------------------------------------------------------------


def kchaos_packages() -> set[str]:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    return {p.rstrip("*") for p in found}


@pytest.mark.parametrize("module", sorted(p.name for p in (ROOT / "catalogue").glob("*.py")))
def test_the_catalogue_imports_nothing_of_kchaos(module: str) -> None:
    assert "catalogue" in kchaos_packages() and "checkers" in kchaos_packages()
    tree = ast.parse((ROOT / "catalogue" / module).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level]
    ours = [m for m in imported if m.split(".")[0] in kchaos_packages() - {"catalogue"}]
    assert not ours, f"catalogue/{module} imports {', '.join(ours)}"
