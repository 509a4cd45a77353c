"""Every writer of the history files and of the line protocol (Python and Java) against catalogue.history: the
fields each puts on a line, in the order it puts them, and nothing the catalogue does not list (#34)."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Message

from catalogue.history import (EVENT_FIELDS, LINE_FIELDS, LINE_NULL, LINE_OPTIONAL_FIELDS, LIVE_READ_FIELDS,
                               PIPELINE_READ_FIELDS, PIPELINE_SEND_FIELDS, READ_FIELDS, SEND_FIELDS, TXN_FIELDS)
from clusters.request_path import HeldRequest
from faults.rolling import RollStep
from rundir.layout import RunDir
from rundir.records import event_record, head, ordered, template
from workloads import protocol
from workloads.consumer import ConsumerClient, ReaderClient, ReadLines, read_record
from workloads.history import History, RunClock
from workloads.messages import encode, encode_output
from workloads.pending import OpenTxn, txn_line
from workloads.pipeline import PipelineClient
from workloads.producer import ProducerClient

REPO = Path(__file__).resolve().parent.parent
JAVA = REPO / "workloads" / "java" / "src" / "main" / "java" / "io" / "kchaos" / "workload"


class Lines:
    """Stands in for a HistoryWriter: the keys of every line, in the order they were written."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, ...]] = []

    def write(self, record: dict) -> None:
        self.keys.append(tuple(record))

    def write_many(self, records: list[dict]) -> None:
        self.keys.extend(tuple(r) for r in records)

    def write_lines(self, lines: list[bytes]) -> None:
        self.keys.extend(tuple(json.loads(line)) for line in lines)


# ---------------------------------------------------------------------- history/*.jsonl


def test_every_kind_of_sends_line_has_the_catalogues_fields_in_its_order() -> None:
    """The harness's quick path for an acknowledgement, its path for any other completion, a transactional
    send and what a dead process left: each line has exactly SEND_FIELDS, in that order."""
    plain, txnal = Lines(), Lines()
    p = ProducerClient("p0", "nowhere:9092", "t", {}, plain, RunClock())  # type: ignore[arg-type]
    p.on_lines("p0", [protocol.invoked(0, 4, 1).encode(), protocol.completed("ok", 0, 1, 5, 2, None).encode(),
                      protocol.completed("unknown", 1, 1, None, 3, "x y").encode()])
    p.on_exit("p0", clean=False, how="killed")
    t = ProducerClient("p1", "nowhere:9092", "t", {}, txnal, RunClock(),  # type: ignore[arg-type]
                       transactions={"transactional_id": "x", "timeout_ms": 1, "commit_timeout_s": 1},
                       txns=Lines())  # type: ignore[arg-type]
    t.on_lines("p1", [protocol.txn_begun(0, 1).encode(), protocol.invoked(0, 2, 1).encode(),
                      protocol.completed("ok", 0, 0, 1, 2, None).encode()])
    t.on_exit("p1", clean=True, how="stopped")
    assert plain.keys == [SEND_FIELDS] * 4 and txnal.keys == [SEND_FIELDS] * 2


def test_a_pipelines_sends_lines_add_the_catalogues_source_fields(tmp_path: Path) -> None:
    (tmp_path / "history").mkdir()
    history = History(RunDir(tmp_path), RunClock(), transactions=True)
    client = PipelineClient("pipe0", "nowhere:9092", "in", "in.out", "g", "t", history)
    sends = client.sends = Lines()  # type: ignore[assignment]
    client.on_lines("pipe0", [line.encode() for line in (
        protocol.polled(2, 1), protocol.txn_begun(0, 2), protocol.processed(0, 0, "p0", 0, 3),
        protocol.joined(0, "p0", 0, 3), protocol.processed(0, 1, None, None, 3), protocol.joined(1, None, None, 3),
        protocol.completed("ok", 0, 1, 4, 5, None))])
    client.on_exit("pipe0", clean=False, how="killed")
    history.close()
    assert sends.keys == [(*SEND_FIELDS, *PIPELINE_SEND_FIELDS)] * 2


@pytest.mark.parametrize("value, fields", [(encode("p0", 3, 30), READ_FIELDS), (b"foreign", READ_FIELDS),
                                           (encode_output("pipe0", 1, "p0", 7), (*READ_FIELDS, *PIPELINE_READ_FIELDS))])
def test_every_kind_of_reads_line_has_the_catalogues_fields_in_its_order(tmp_path: Path, value: bytes,
                                                                         fields: tuple[str, ...]) -> None:
    """The read-back's and a librdkafka consumer's lines (ReadLines, read_record), the harness's lines from the
    Java consumer's and the Java reader's ``R`` lines."""
    msg = Message(topic="t", partition=0, offset=5, value=value)
    assert tuple(read_record(msg, "c0", "g", "live", 1, "read_committed")) == fields  # type: ignore[arg-type]
    [line] = ReadLines("c0", "g", "live", "t", "read_committed").lines([msg], 1)  # type: ignore[list-item]
    assert tuple(json.loads(line)) == fields
    live = (*READ_FIELDS, *LIVE_READ_FIELDS, *fields[len(READ_FIELDS):])  # an application consumer's live read
    assert tuple(read_record(msg, "c0", "g", "live", 1, "read_committed", 2)) == live  # type: ignore[arg-type]
    lines = ReadLines("c0", "g", "live", "t", "read_committed", assignment=1)
    lines.reassigned(2)
    [line] = lines.lines([msg], 1)  # type: ignore[list-item]
    assert json.loads(line) == read_record(msg, "c0", "g", "live", 1, "read_committed", 2)  # type: ignore[arg-type]
    reads = Lines()
    consumer = ConsumerClient("c0", "nowhere:9092", "t", "g", "auto", {}, reads, RunClock(),  # type: ignore[arg-type]
                              client="java", kafka_version="3.9.2")
    consumer.on_lines("c0", [protocol.assignment_changed(1, "assigned", [0], 1).encode(),
                             protocol.processed(0, 5, "p0", 3, 1).encode()])
    (tmp_path / "history").mkdir()
    history = History(RunDir(tmp_path), RunClock())
    reader = ReaderClient("nowhere:9092", "t", 1, {0: 9}, "read_committed", 1, history, "3.9.2")
    reader.reads = Lines()  # type: ignore[assignment]
    reader.on_lines(reader.name, [b"R 0 5 p0 3 1", b"R 0 6 pipe0 1 1 p0 7"])
    history.close()
    assert reads.keys == [(*READ_FIELDS, *LIVE_READ_FIELDS)]
    assert reader.reads.keys == [READ_FIELDS, (*READ_FIELDS, *PIPELINE_READ_FIELDS)]  # type: ignore[attr-defined]


def test_a_txns_line_has_the_catalogues_fields_in_its_order() -> None:
    assert tuple(txn_line("p0", OpenTxn(3, 1), "committed", 2, None)) == TXN_FIELDS


def held_request() -> HeldRequest:
    """A request a request-level fault held, as the proxy reports it."""
    return HeldRequest(fault="delay-requests", rule="r1", api="EndTxn", api_version=3, client="kchaos-p0", node=1,
                       connection=4, correlation_id=9, cause="matched", action="delayed", held_ns=10, release_at_ns=20,
                       released_ns=21, client_closed=True, response_ns=22, response_error="none",
                       response_forwarded=False, outcome="answered")


def event_calls() -> dict[str, set[str]]:
    """kind -> the fields some ``….event("kind", field=...)`` call in the project's source gives it (a ``**name``
    counts the keys of the dict literals assigned to ``name`` in the same function)."""
    found: dict[str, set[str]] = {}
    for path in REPO.glob("*/**/*.py"):
        if path.parts[len(REPO.parts)] in (".venv", "tests", "benchmarks"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            dicts: dict[str, set[str]] = {}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    keys = {k.value for d in ast.walk(node.value) if isinstance(d, ast.Dict)
                            for k in d.keys if isinstance(k, ast.Constant)}
                    dicts.setdefault(node.targets[0].id, set()).update(keys)
            for node in ast.walk(function):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "event"
                        and node.args and isinstance(node.args[0], ast.Constant)):
                    fields = found.setdefault(node.args[0].value, set())
                    for kw in node.keywords:
                        fields |= {kw.arg} if kw.arg is not None else dicts.get(getattr(kw.value, "id", ""), set())
    return found


def test_the_events_the_harness_writes_are_the_catalogues_kinds_and_fields() -> None:
    """Every event kind and field some writer gives, and no more: each catalogue field is written somewhere."""
    calls = event_calls()
    calls["request"] = set(held_request().event(0))  # the nemesis writes a request-level fault's evidence as given
    calls["node-version"] = set(RollStep("rolling-upgrade", 5, "broker1", "broker", "3.9.2", "4.3.1", 1, 7).event(0)) \
        | set(RollStep("rolling-upgrade", 9, setting="metadata.version", value="4.3-IV0").event(0))  # a roll's too
    assert {kind: sorted(fields) for kind, fields in calls.items()} == \
        {kind: sorted(fields) for kind, fields in EVENT_FIELDS.items()}


def test_an_event_line_takes_the_catalogues_order_and_refuses_a_field_it_does_not_list() -> None:
    assert list(event_record("final-read", {"isolation": "read_committed", "topic": "t", "partition": 0,
                                            "complete": True, "high_watermark": 3, "time_ns": 1})) == \
        ["kind", "topic", "partition", "high_watermark", "complete", "time_ns", "isolation"]
    with pytest.raises(ValueError, match="colour"):
        event_record("leader", {"topic": "t", "colour": "red"})
    with pytest.raises(KeyError):
        event_record("no-such-kind", {})


def test_a_template_is_its_records_json_and_refuses_arguments_out_of_the_catalogues_order() -> None:
    fields = ("a", "b", "c", "d")
    line = template(fields, {"a": b'"100%"', "c": b"null"}, {"b": b"%d", "d": b'"%s"'})
    assert line % (5, b"x") == json.dumps({"a": "100%", "b": 5, "c": None, "d": "x"}, separators=(",", ":")).encode()
    assert head(fields, {"a": b'"100%"'}) == b'{"a":"100%","b":'
    with pytest.raises(ValueError, match="in this order"):
        template(fields, {"a": b"1", "c": b"null"}, {"d": b"%s", "b": b"%s"})
    with pytest.raises(ValueError):
        ordered(("a",), {"a": 1, "z": 2})


# ---------------------------------------------------------------------- the line protocol (Python)


# the formatters' parameter names where they differ from the catalogue's field names
PARAMETER_ALIASES = {"first": "first_seq", "settings": "settings_json"}
FORMATTERS = {"H": protocol.hello, "K": protocol.identity, "I": protocol.invoked, "X": protocol.withdrawn,
              "S": protocol.completed, "J": protocol.joined, "T": protocol.txn_begun, "C": protocol.txn_requested,
              "O": protocol.txn_outcome, "P": protocol.polled, "R": protocol.processed,
              "A": protocol.assignment_changed, "V": protocol.delivered, "Q": protocol.acknowledged}


@pytest.mark.parametrize("tag", sorted(FORMATTERS))
def test_each_python_formatter_writes_the_catalogues_fields_in_its_order(tag: str) -> None:
    """Called with a distinct value per parameter, a formatter writes them in the catalogue's order, its
    parameters are named as the catalogue names the fields, and ``parse`` reads them back."""
    formatter = FORMATTERS[tag]
    names = list(inspect.signature(formatter).parameters)
    assert tuple(PARAMETER_ALIASES.get(n, n) for n in names) == LINE_FIELDS[tag]
    values = {n: 1000 + i for i, n in enumerate(names)}
    values |= {"status": "unknown", "intent": "abort", "outcome": "aborted", "library": "java", "version": "3.9",
               "settings": {"acks": "all"}, "producer": "p7", "from_producer": "p8", "error": "e r",
               "change": "lost", "partitions": [5, 2], "ack": "release", "result": "fail"}
    line = formatter(**{n: values[n] for n in names})  # type: ignore[operator]
    assert line.split(" ", len(names))[0] == tag
    written = line.split(" ", len(names))[1:]
    shown = {"settings": json.dumps(values["settings"], separators=(",", ":")), "partitions": "2,5"}
    expected = [shown.get(n, str(values[n])) for n in names]
    assert written == expected
    if tag != "K":
        parsed = protocol.parse(line.encode())
        assert [",".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in parsed] == expected


def test_the_constant_lines_and_a_null_field() -> None:
    assert (protocol.BATCH_DONE, protocol.END) == ("D", "E") and LINE_FIELDS["D"] == LINE_FIELDS["E"] == ()
    assert protocol.NULL == LINE_NULL
    assert protocol.parse(b"F 3 17") == protocol.ReadPosition(3, 17)
    assert protocol.parse(protocol.joined(2, None, None, 9).encode()) == protocol.Joined(2, None, None, 9)


def test_the_protocol_docstring_shows_every_line_with_its_fields() -> None:
    """Each tag of the catalogue appears in workloads/protocol.py's docstring as ``<TAG> <field> ...`` with as many
    fields as the catalogue lists (the optional ones in brackets)."""
    shown: dict[str, int] = {}
    for line in (protocol.__doc__ or "").splitlines():
        m = re.match(r"\s{4}([A-Z])((?: <[^>]*>)*)(?: \[((?: ?<[^>]*>)*)\])?(?:\s|$)", line)
        if m:
            shown.setdefault(m[1], m[2].count("<"))
            assert shown[m[1]] == m[2].count("<"), line
            assert (m[3] or "").count("<") == len(LINE_OPTIONAL_FIELDS.get(m[1], ())) or not m[3], line
    assert shown == {tag: len(fields) for tag, fields in LINE_FIELDS.items()}


# ---------------------------------------------------------------------- the line protocol (Java)


def concatenations(source: str) -> list[list[str]]:
    """Every Java string concatenation that starts with a protocol line's tag (``"S " + status + ...``), as its
    terms: the literal words after the tag, then each expression; ``" "`` separators dropped."""
    found = []
    for m in re.finditer(r'"([A-Z])((?: [a-z]+)*) "\s*\+', source):
        depth, i, end = 0, m.end(), len(source)
        while i < end:
            c = source[i]
            if c in "([":
                depth += 1
            elif c in ")]":
                if depth == 0:
                    break
                depth -= 1
            elif c in ";," and depth == 0:
                break
            i += 1
        terms = [t.strip() for t in split_plus(source[m.end():i])]
        found.append([m[1], *m[2].split(), *(t for t in terms if t != '" "')])
    return found


def split_plus(expression: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, c in enumerate(expression):
        depth += c in "([" and 1 or (c in ")]" and -1 or 0)
        if c == "+" and depth == 0:
            terms.append(expression[start:i])
            start = i + 1
    return [*terms, expression[start:]]


# what a Java expression on a line stands for, where its name (camelCase to snake_case, opt(...) taken off) does
# not say it
JAVA_ALIASES = {"first": "first_seq", "java": "library", "clientsVersion()": "version",
                "settings": "settings_json", "p": "partition", "position[p]": "position",
                "from.producer()": "from_producer", "from.seq()": "from_seq",
                "source.producer()": "from_producer", "source.seq()": "from_seq"}


def java_field(term: str) -> str:
    term = re.sub(r"^(?:Lines\.)?opt\((.*)\)$", r"\1", term)
    return JAVA_ALIASES.get(term, re.sub(r"(?<=[a-z])([A-Z])", r"_\1", term).lower())


def java_lines() -> dict[str, list[tuple[str, ...]]]:
    """tag -> the fields of each line the Java program builds with that tag, over all its sources."""
    lines: dict[str, list[tuple[str, ...]]] = {}
    for path in sorted(JAVA.glob("*.java")):
        for tag, *terms in concatenations(path.read_text(encoding="utf-8")):
            lines.setdefault(tag, []).append(tuple(java_field(t) for t in terms))
    return lines


def test_the_java_program_builds_each_line_with_the_catalogues_fields_in_its_order() -> None:
    lines = java_lines()
    assert set(lines) == set(LINE_FIELDS) - {"D", "E"}  # D and E are constants, checked below
    assert {tag: set(shapes) for tag, shapes in lines.items()} == {tag: {LINE_FIELDS[tag]} for tag in lines}
    source = (JAVA / "Lines.java").read_text(encoding="utf-8")
    assert 'BATCH_DONE = "D"' in source and 'out.append("E\\n")' in source
    assert f'NULL = "{LINE_NULL}"' in source


def test_the_java_reader_adds_the_catalogues_optional_source_to_an_r_line() -> None:
    """Reader.line appends the input of a pipeline's output to an ``R`` line: the catalogue's optional fields."""
    source = (JAVA / "Reader.java").read_text(encoding="utf-8")
    m = re.search(r'return source\.producer\(\) == null \? line : line((?: \+ [^;:]+)+);', source)
    assert m is not None
    terms = [t.strip() for t in m[1].split("+") if t.strip() and t.strip() != '" "']
    assert tuple(java_field(t) for t in terms) == LINE_OPTIONAL_FIELDS["R"]


def test_the_java_line_reader_finds_what_it_is_shown() -> None:
    assert concatenations('x = "S " + status + " " + opt(partition) + " " + f(a, b);\n"P " + count') == [
        ["S", "status", "opt(partition)", "f(a, b)"], ["P", "count"]]
    assert [java_field(t) for t in ("Lines.opt(from.seq())", "completeNs", "invokeNs")] == \
        ["from_seq", "complete_ns", "invoke_ns"]
