"""The Parquet cache of a history (spark_analysis/columnar.py, cache.py), without Spark.

The conversion must read every line as the reference reader does: the same
rows with the same line numbers, the same HistoryError at the same line, the
same note for a cut-off last line. Files are converted in tiny blocks too, so
that one file mixes blocks read by Arrow with blocks read line by line.
The cache must be rebuilt whenever its JSONL changes, and only then.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import pytest

from checkers.history import read_history
from rundir.lines import HistoryError, lines_at
from spark_analysis import cache, columnar, ranged
from spark_analysis.columnar import READS, SENDS, STATUS_CODES
from spark_analysis.columnar_reader import convert_history
from test_checker_reference import clean, make_run, read, send
from test_spark_checker import CASES

ODD_LINES = {
    "repeated key": '{"producer": "p0", "seq": 7, "seq": 8, "topic": "t", "partition": 0, "offset": 8, "status": "ok"}',
    "brace in a string": '{"producer": "a}{b", "seq": 7, "topic": "t", "partition": 0, "offset": 7, "status": "ok"}',
    "carriage return": '{"producer": "p0", "seq": 7, "topic": "t", "partition": 0, "offset": 7, "status": "ok"}\r',
    "form feed": "\f",
    "blank": "   ",
    "null partition": '{"producer": "p0", "seq": 9, "topic": "t", "partition": null, "status": "unknown"}',
    "old status name": '{"producer": "p0", "seq": 9, "topic": "t", "partition": 0, "status": "info"}',  # unknown
    "escaped name": '{"producer": "p\\u00e9", "seq": 1, "topic": "t", "partition": 0, "offset": 1, "status": "ok"}',
    "leading space": ' {"producer": "p0", "seq": 8, "topic": "t", "partition": 0, "offset": 3, "status": "fail"}',
}


@pytest.fixture(params=["whole", "tiny", "ranges"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Convert in the usual blocks, or in blocks of a line or two (with a line-start mark every few lines), or
    by ranges of a line or two, each a task of its own as on a cluster's executors (ranged.py)."""
    if request.param != "whole":
        monkeypatch.setattr(columnar, "BLOCK_BYTES", 150)
        monkeypatch.setattr(columnar, "MARK_BYTES", 200)
    if request.param == "ranges":
        monkeypatch.setattr(cache, "convert", by_ranges(range_bytes=200, block_bytes=150))
    return request.param


def by_ranges(range_bytes: int, block_bytes: int) -> Callable[..., columnar.Converted]:
    """``cache.convert`` as the executors do it, the tasks run one after another in this process."""
    def convert(source: Path, layout: columnar.Layout, label: str, target: Path,
                metadata: Callable[[columnar.Converted], dict[str, str]]) -> columnar.Converted:
        return ranged.convert_ranges(source, layout, label, target, metadata, ranged.IN_THIS_PROCESS, range_bytes,
                                     block_bytes)
    return convert


def stored_rows(file: cache.ParquetFile, layout: columnar.Layout) -> list[tuple[Any, ...]]:
    """The cache's rows with ids turned back into names, as the reference's tuples (line last)."""
    table = pq.read_table(file.path).to_pylist()
    rows = []
    for r in table:
        named = {}
        for column, (how, field) in layout.stored.items():
            value = r[column]
            if how in columnar.DICTIONARIES and value is not None:
                value = file.names[how][value]
            elif how == "status":
                value = STATUS_CODES[value]
            elif how == "final":
                value = "final" if value else "live"
            named[field] = value
        rows.append(named | {"line": r["line"]})
    return rows


def reference_rows(records: list[Any], layout: columnar.Layout) -> list[dict[str, Any]]:
    fields = [f.name for f in layout.json_schema]
    return [{f: getattr(r, f) for f in fields} | {"line": r.line} for r in records]


def same_as_reference(run: Path) -> None:
    """Convert run/history and compare with the reference reader: rows, notes, or the error."""
    history = run / "history"
    try:
        expected = read_history(history)
    except HistoryError as e:
        with pytest.raises(HistoryError) as error:
            convert_history(history)
        assert str(error.value) == str(e)
        return
    files = convert_history(history)
    assert files is not None
    for layout, records in ((SENDS, expected.sends), (READS, expected.reads)):
        file = files[layout.name]
        if file is None:
            assert not (history / layout.name).exists()
            continue
        assert stored_rows(file, layout) == reference_rows(records, layout)
    notes = [n for f in files.values() if f is not None for n in f.notes]
    assert notes == [n for n in expected.notes if "dropped an incomplete" in n]


@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_made_histories_convert_as_the_reference_reads_them(tmp_path: Path, blocks: str, name: str) -> None:
    same_as_reference(make_run(tmp_path, **CASES[name]))


@pytest.mark.parametrize("odd", sorted(ODD_LINES))
def test_odd_but_valid_lines(tmp_path: Path, blocks: str, odd: str) -> None:
    h = clean()
    h["sends"] = h["sends"][:1] + [ODD_LINES[odd]] + h["sends"][1:]
    same_as_reference(make_run(tmp_path, **h))


def test_an_old_info_status_is_stored_as_unknown_by_arrow(tmp_path: Path) -> None:
    """A history written before the status was renamed says ``info`` where it now says ``unknown``: Arrow reads
    such a block on its own (the rules are not needed for it) and stores unknown's code, as the reference reads it."""
    h = clean()
    h["sends"] += [send("p0", 3, status="info"), send("p0", 4, status="info"), send("p0", 5, status="unknown")]
    run = make_run(tmp_path, **h)
    same_as_reference(run)
    files = convert_history(run / "history")
    assert files is not None and (sends := files[SENDS.name]) is not None
    assert json.loads((cache.footer(sends.path) or {})["blocks"]) == {"arrow": 1, "rules": 0}
    unknown = STATUS_CODES.index("unknown")
    assert [r["status"] for r in pq.read_table(sends.path).to_pylist()][-3:] == [unknown] * 3


@pytest.mark.parametrize("bad", [
    '{"producer": "p0", "seq": ',  # cut short, but not the last line
    '{"a": 1}{"b": 2}',
    '{"a": 1}\t{"b": 2}',
    '{"a": 1} trailing',
    "[1, 2]",
    "{'single': 'quotes'}",
    '\ufeff{"producer": "p0", "seq": 1, "topic": "t", "partition": 0, "status": "fail"}',
    '{"producer": "p0", "seq": 1, "topic": "t", "status": "fail"}',  # partition missing, not null
    '{"producer": "p0", "seq": 1.0, "topic": "t", "partition": 0, "status": "fail"}',
    '{"producer": "p0", "seq": 1, "topic": "t", "partition": 0, "status": "lost"}',
    '{"producer": null, "seq": 1, "topic": "t", "partition": 0, "status": "fail"}',
])
def test_bad_line_in_the_middle_is_the_same_error(tmp_path: Path, blocks: str, bad: str) -> None:
    h = clean()
    h["sends"] = h["sends"][:2] + [bad] + h["sends"][2:]
    same_as_reference(make_run(tmp_path, **h))


def test_foreign_reads_need_both_fields(tmp_path: Path, blocks: str) -> None:
    h = clean()
    foreign = {k: v for k, v in read(None, None, 9).items() if k != "seq"}
    h["reads"] = h["reads"][:1] + [read(None, None, 8), foreign] + h["reads"][1:]
    same_as_reference(make_run(tmp_path, **h))


def test_invalid_utf8_in_an_unread_field_is_the_same_error(tmp_path: Path, blocks: str) -> None:
    run = make_run(tmp_path, **clean())
    path = run / "history" / "sends.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(1, b'{"producer": "p0", "seq": 9, "topic": "t", "partition": 0, "status": "fail", "x": "\xff"}')
    path.write_bytes(b"\n".join(lines))
    same_as_reference(run)


@pytest.mark.parametrize("tail", [
    '{"producer": "p0", "seq": 4, "top',  # the harness died mid-line: no newline
    '{"producer": "p0", "seq": 4, "top\n\n  \n',  # then blank lines
])
def test_cut_off_last_line_is_dropped_with_the_same_note(tmp_path: Path, blocks: str, tail: str) -> None:
    run = make_run(tmp_path, **clean())
    with (run / "history" / "sends.jsonl").open("a") as f:
        f.write(tail)
    same_as_reference(run)
    files = convert_history(run / "history")
    assert files is not None and files["sends.jsonl"] is not None
    assert files["sends.jsonl"].notes == ["history/sends.jsonl: dropped an incomplete last line (line 4)"]


def test_cut_inside_a_multibyte_character(tmp_path: Path, blocks: str) -> None:
    run = make_run(tmp_path, **clean())
    with (run / "history" / "reads.jsonl").open("ab") as f:
        f.write('{"consumer": "c\u00e9'.encode()[:-1])
    same_as_reference(run)


def test_integers_beyond_64_bits_stop_the_conversion(tmp_path: Path) -> None:
    h = clean()
    h["sends"].insert(1, {**send("p0", 9), "seq": 2 ** 70})
    with pytest.raises(HistoryError, match=r"^history/sends\.jsonl line 2: field 'seq' does not fit in 64 bits"):
        convert_history(make_run(tmp_path, **h) / "history")


def test_many_lines_in_tiny_blocks(tmp_path: Path, blocks: str) -> None:
    rng = random.Random(7)
    sends = [send(f"p{rng.randrange(4)}", i, status=rng.choice(["ok", "ok", "fail", "unknown"]),
                  partition=rng.choice([0, 1, None])) for i in range(300)]
    reads = [read(rng.choice(["p0", "p1", None]), i, i, phase=rng.choice(["live", "final"])) for i in range(300)]
    reads = [r if r["producer"] else {**r, "seq": None} for r in reads]
    same_as_reference(make_run(tmp_path, sends=sends, reads=reads, events=[]))


def test_arrow_reads_ordinary_blocks_and_the_rules_only_odd_ones(tmp_path: Path, blocks: str) -> None:
    run = make_run(tmp_path, sends=[send("p0", i, partition=None if i % 5 else 0) for i in range(50)],
                   reads=[read("p0", 0, 0)])
    convert_history(run / "history")
    assert json.loads(footer(run)["blocks"])["rules"] == 0
    with (run / "history" / "sends.jsonl").open("a") as f:
        f.write("\n" + json.dumps(send("p0", 50)) + "\n" + '{"cut')
    convert_history(run / "history")
    counts = json.loads(footer(run)["blocks"])
    assert counts["rules"] >= 1  # the blank line's block and the cut-off tail ...
    assert blocks == "whole" or counts["arrow"] > counts["rules"]  # ... but not the others


# --- the cache ---------------------------------------------------------------------------------------


def footer(run: Path, name: str = "sends.parquet") -> dict[str, str]:
    meta = cache.footer(run / "history" / name)
    assert meta is not None
    return meta


def test_the_cache_records_its_source_and_is_reused(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    source = run / "history" / "sends.jsonl"
    convert_history(run / "history")
    meta = footer(run)
    assert meta["source_size"] == str(source.stat().st_size)
    assert meta["source_mtime_ns"] == str(source.stat().st_mtime_ns)
    written = (run / "history" / "sends.parquet").stat().st_mtime_ns
    convert_history(run / "history")
    assert (run / "history" / "sends.parquet").stat().st_mtime_ns == written  # fresh: not converted again


def test_the_cache_is_rebuilt_when_the_jsonl_grows(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    convert_history(run / "history")
    with (run / "history" / "sends.jsonl").open("a") as f:
        f.write(json.dumps(send("p0", 3)) + "\n")
    files = convert_history(run / "history")
    assert files is not None
    assert [r["seq"] for r in pq.read_table(files["sends.jsonl"].path).to_pylist()] == [0, 1, 2, 3]


def test_the_cache_is_rebuilt_when_the_jsonl_changes_but_keeps_its_size(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    source = run / "history" / "sends.jsonl"
    convert_history(run / "history")
    before = source.stat()
    source.write_text(source.read_text().replace('"seq": 2', '"seq": 7'))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert source.stat().st_size == before.st_size
    files = convert_history(run / "history")
    assert files is not None
    assert [r["seq"] for r in pq.read_table(files["sends.jsonl"].path).to_pylist()] == [0, 1, 7]


def test_the_cache_is_rebuilt_when_it_is_older_than_the_jsonl(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    convert_history(run / "history")
    target = run / "history" / "reads.parquet"
    source = run / "history" / "reads.jsonl"
    old = source.stat().st_mtime_ns - 10 ** 9
    os.utime(target, ns=(old, old))
    convert_history(run / "history")
    assert target.stat().st_mtime_ns > old


def test_a_damaged_cache_is_rebuilt(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    convert_history(run / "history")
    (run / "history" / "sends.parquet").write_bytes(b"not parquet")
    files = convert_history(run / "history")
    assert files is not None and len(pq.read_table(files["sends.jsonl"].path)) == 3


def test_the_cut_off_note_is_kept_by_the_cache(tmp_path: Path) -> None:
    run = make_run(tmp_path, **clean())
    with (run / "history" / "reads.jsonl").open("a") as f:
        f.write('{"consumer": "c0", "gr')
    first = convert_history(run / "history")
    written = (run / "history" / "reads.parquet").stat().st_mtime_ns
    second = convert_history(run / "history")
    assert (run / "history" / "reads.parquet").stat().st_mtime_ns == written
    assert first is not None and second is not None
    assert second["reads.jsonl"].notes == first["reads.jsonl"].notes == [
        "history/reads.jsonl: dropped an incomplete last line (line 7)"]


def test_a_bad_line_leaves_no_cache(tmp_path: Path) -> None:
    h = clean()
    h["sends"].insert(1, "[1, 2]")
    run = make_run(tmp_path, **h)
    with pytest.raises(HistoryError):
        convert_history(run / "history")
    assert not list((run / "history").glob("*parquet*"))


def test_an_unwritable_cache_means_reading_the_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path, **clean())

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("read-only file system")

    monkeypatch.setattr(cache, "convert", refuse)
    assert convert_history(run / "history") is None


def test_example_lines_are_found_through_the_marks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(columnar, "MARK_BYTES", 300)
    sends = [send(f"p{i % 3}", i) for i in range(200)]
    run = make_run(tmp_path, sends=sends[:100] + ["", "  "] + sends[100:], reads=[read("p0", 0, 0)], events=[])
    files = convert_history(run / "history")
    assert files is not None
    file = files["sends.jsonl"]
    assert len(file.marks) > 10
    wanted = {1, 2, 50, 101, 102, 103, 150, 202}
    wanted.discard(101)  # blank
    wanted.discard(102)
    assert file.lines(wanted) == lines_at(run / "history" / "sends.jsonl", wanted)


# --- acks proved in order (spark_analysis/ack_order.py) ------------------------------------------------


def reordered_by_definition(sends: list[dict[str, Any]]) -> bool:
    """Some ack at a lower offset than an ack of a lower seq of its producer in its partition (catalogue)."""
    acks = [s for s in sends if s["status"] == "ok" and s["partition"] is not None and s.get("offset") is not None]
    return any(a["producer"] == b["producer"] and a["topic"] == b["topic"] and a["partition"] == b["partition"]
               and a["seq"] < b["seq"] and a["offset"] > b["offset"] for a in acks for b in acks)


def test_the_conversion_proves_acks_in_order_only_when_none_is_reordered(tmp_path: Path, blocks: str) -> None:
    """Random send files of two producers over two topics' partitions, acks mostly in line order: whenever the
    conversion says "in order", no ack is reordered by the catalogue's definition; and it says so for the usual
    shape (each group's acks rising, interleaved with others' and with failed, unknown and unplaced sends)."""
    rng = random.Random(7)
    proved = 0
    for n in range(40):
        sends, next_seq, next_offset = [], {}, {}
        for _ in range(rng.randint(1, 30)):
            producer, topic, partition = rng.choice(["p0", "p1"]), rng.choice(["t", "u"]), rng.randint(0, 1)
            seq = next_seq[producer] = next_seq.get(producer, -1) + 1
            offset = next_offset[(topic, partition)] = next_offset.get((topic, partition), -1) + rng.randint(1, 2)
            status = rng.choice(["ok"] * 6 + ["fail", "unknown"])
            line = send(producer, seq, status, None if rng.random() < 0.05 else partition, offset, topic)
            if n % 2 and rng.random() < 0.1:  # every other file: a seq or offset out of line order
                line["seq" if rng.random() < 0.5 else "offset"] = rng.randint(0, 30)
            sends.append(line)
        run = make_run(tmp_path / f"run{n}", sends=sends, reads=[read("p0", 0, 0)], events=[])
        files = convert_history(run / "history")
        assert files is not None
        ordered = files["sends.jsonl"].acks_ordered
        assert ordered is not None
        if ordered:
            proved += 1
            assert not reordered_by_definition(sends), sends
        elif n % 2 == 0:
            raise AssertionError(f"rising acks not proved in order: {sends}")
    assert proved >= 20


def test_the_ack_order_follows_a_group_across_blocks_and_ranges() -> None:
    from spark_analysis.ack_order import AckOrder

    first, later = AckOrder(), AckOrder()
    first.extend(("p0", "t", 0), (1, 10, 5, 14))
    later.extend(("p0", "t", 0), (6, 14, 9, 20))  # the same offset as the last one's: not reordered
    first.follow(later)
    assert first.ordered and first.bounds == {("p0", "t", 0): (1, 10, 9, 20)}
    for bounds in ((9, 21, 10, 22), (10, 19, 11, 25)):  # a seq that does not rise, an offset that falls
        again = AckOrder(bounds={("p0", "t", 0): (1, 10, 9, 20)})
        again.extend(("p0", "t", 0), bounds)
        assert not again.ordered
