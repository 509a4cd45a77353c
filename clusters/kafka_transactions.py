"""Kafka's own view of the run's transactions, asked before teardown: ``kafka-transactions.sh`` (the class
org.apache.kafka.tools.TransactionsCommand of the node image's kafka-tools jar, run with the image's java in a
broker's container through :meth:`clusters.node.Node.exec`).

``find-hanging --broker-id N`` for every broker (the replicas on N with an open transaction the coordinator
does not know as ongoing, idle longer than ``--max-transaction-timeout`` minutes: 0 here, so every open
transaction at the end of the run is weighed against its coordinator, however short the run), and ``list``
once (every transactional id, its coordinator and state). Its arguments are the same in Kafka 3.9.2 and 4.3.1.

Asking never fails the run: a broker that is down, a JVM that dies or times out, output that is not the
tool's table is recorded as "could not ask" with the reason. The document (``ask_cluster``) is written by
the harness as history/kafka-transactions.json (rundir/documents.py); the verdict puts it beside kchaos's
own ``hanging_transaction`` count in results.json (verdicts/verdict.py).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from clusters.errors import ClusterError
from clusters.node import SELF_BOOTSTRAP, Node

log = logging.getLogger(__name__)

TOOL = "org.apache.kafka.tools.TransactionsCommand"
# the tool's own logging goes to stderr, WARN and above (as Kafka's tools-log4j.properties has it): stdout is the table
LOG4J = ("log4j.rootLogger=WARN, err\nlog4j.appender.err=org.apache.log4j.ConsoleAppender\n"
         "log4j.appender.err.Target=System.err\nlog4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
         "log4j.appender.err.layout.ConversionPattern=%p %m%n")
LOG4J2 = ("rootLogger.level=WARN\nrootLogger.appenderRef.err.ref=err\nappender.err.type=Console\n"
          "appender.err.name=err\nappender.err.target=SYSTEM_ERR\nappender.err.layout.type=PatternLayout\n"
          "appender.err.layout.pattern=%p %m%n")
CONF = "/tmp/kchaos-tools-log4j"
SHELL = ["sh", "-c",
         f'printf "%b" "$1" > {CONF}.properties && printf "%b" "$2" > {CONF}2.properties && shift 2 && exec "$@"',
         "sh", LOG4J, LOG4J2]
JAVA = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-XX:SharedArchiveFile=/opt/kafka/classes.jsa",
        f"-Dlog4j.configuration=file:{CONF}.properties", f"-Dlog4j2.configurationFile=file:{CONF}2.properties",
        "-cp", "/opt/kafka/libs/*", TOOL]
MAX_TRANSACTION_TIMEOUT_MIN = 0
TOOL_TIMEOUT_S = 90

# find-hanging's table (3.9.2 and 4.3.1): one header line, one line per hanging transaction
HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                   "LastTimestamp", "Duration(min)")
HANGING_KEYS = ("topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch", "start_offset",
                "last_timestamp_ms", "duration_min")
# list's table
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
LIST_KEYS = ("transactional_id", "coordinator", "producer_id", "state")


class ToolOutputError(ValueError):
    """The tool's output is not the table it prints."""


def _number(text: str) -> int | str:
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def parse_table(text: str, headers: tuple[str, ...], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of one of the tool's tables (columns padded with spaces; no value holds a space), numbers as
    ints. Lines before the header (a JVM warning) are skipped; no header at all is a ToolOutputError."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    start = next((i for i, cells in enumerate(lines) if tuple(cells) == headers), None)
    if start is None:
        first = text.strip().splitlines()[0][:200] if text.strip() else "nothing"
        raise ToolOutputError(f"no {' '.join(headers[:2])} ... table in the output (it said: {first})")
    rows = []
    for cells in lines[start + 1:]:
        if len(cells) != len(headers):
            raise ToolOutputError(f"a row of {len(cells)} cells under {len(headers)} columns: {' '.join(cells)[:200]}")
        rows.append({k: _number(c) for k, c in zip(keys, cells)})
    return rows


def parse_find_hanging(text: str) -> list[dict[str, Any]]:
    """``find-hanging``'s hanging transactions (empty: it found none)."""
    return parse_table(text, HANGING_HEADERS, HANGING_KEYS)


def parse_list(text: str) -> list[dict[str, Any]]:
    """``list``'s transactional ids."""
    return parse_table(text, LIST_HEADERS, LIST_KEYS)


def run_tool(node: Node, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> str:
    """The tool's stdout for ``args`` run in ``node``; ClusterError (with its stderr's last line) when it fails."""
    done = node.exec(*SHELL, *JAVA, "--bootstrap-server", SELF_BOOTSTRAP, *args, timeout_s=timeout_s)
    if done.returncode != 0:
        why = "timed out" if done.returncode in (124, 137) else f"exit {done.returncode}"
        tail = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise ClusterError(f"kafka-transactions.sh {args[0]} in {node.name}: {why}"
                           + (f": {tail[-1][:300]}" if tail else ""))
    return done.stdout


def ask_broker(node: Node) -> dict[str, Any]:
    """One broker's find-hanging: asked or not (and why), the hanging transactions, the raw output."""
    entry: dict[str, Any] = {"broker": node.node_id, "node": node.name, "asked": False, "hanging": None,
                             "error": None, "output": None}
    try:
        out = run_tool(node, "find-hanging", "--broker-id", str(node.node_id),
                       "--max-transaction-timeout", str(MAX_TRANSACTION_TIMEOUT_MIN))
        entry["output"] = out
        entry["hanging"] = parse_find_hanging(out)
        entry["asked"] = True
    except (ClusterError, ToolOutputError) as e:
        entry["error"] = str(e)
    return entry


def ask_cluster(brokers: list[Node], kafka_version: str) -> dict[str, Any]:
    """history/kafka-transactions.json: find-hanging on every broker and one ``list``; never raises."""
    doc: dict[str, Any] = {"tool": f"kafka-transactions.sh ({TOOL}, Kafka {kafka_version})",
                           "kafka_version": kafka_version, "max_transaction_timeout_min": MAX_TRANSACTION_TIMEOUT_MIN,
                           "brokers": [], "transactions": None, "list_error": None, "list_output": None}
    for node in brokers:
        try:
            doc["brokers"].append(ask_broker(node))
        except Exception as e:  # noqa: BLE001 - a second opinion never fails the run
            doc["brokers"].append({"broker": node.node_id, "node": node.name, "asked": False, "hanging": None,
                                   "error": f"{type(e).__name__}: {e}", "output": None})
    answering = [n for n, b in zip(brokers, doc["brokers"]) if b["asked"]] or brokers
    for node in answering[:1]:
        try:
            doc["list_output"] = run_tool(node, "list")
            doc["transactions"] = parse_list(doc["list_output"])
        except (ClusterError, ToolOutputError) as e:
            doc["list_error"] = str(e)
        except Exception as e:  # noqa: BLE001
            doc["list_error"] = f"{type(e).__name__}: {e}"
    for b in doc["brokers"]:
        if not b["asked"]:
            log.warning("Kafka's find-hanging could not be asked on %s: %s", b["node"], b["error"])
    return doc
