"""A history file converted by ranges, each a task of its own (spark_analysis/ranged.py), without Spark.

The tasks run one after another in this process (``ranged.IN_THIS_PROCESS``):
the same functions Spark runs on the executors. What is proved here is the
driver's part: cutting at line starts, numbering each range's lines as the
file does, merging the ranges' notes, errors, marks and dictionaries as one
conversion would, and falling back when the tasks cannot write.
tests/test_columnar.py runs its whole comparison with the reference reader
by ranges too (the ``ranges`` variant of its ``blocks`` fixture), and
tests/test_spark_cluster.py on a standalone cluster's executors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from rundir.lines import HistoryError, lines_at
from spark_analysis import cache, columnar, ranged
from spark_analysis.columnar import READS, SENDS
from spark_analysis.columnar_reader import convert_history
from test_checker_reference import clean, make_run, read, send
from test_columnar import by_ranges, reference_rows, same_as_reference, stored_rows


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- cutting ----------------------------------------------------------------------------------------


def test_every_range_starts_at_a_line_start(tmp_path: Path) -> None:
    data = b"".join(b"%d%s\n" % (i, b"x" * (i % 7)) for i in range(200))
    path = write(tmp_path / "f", data)
    for size in (1, 5, 16, 100, len(data) - 1, len(data), 10 * len(data)):
        spans = ranged.cut(path, len(data), size)
        assert spans[0][0] == 0 and spans[-1][1] == len(data)
        assert all(end == start for (_, end), (start, _) in zip(spans, spans[1:]))  # no gap, no overlap
        assert all(data[start - 1:start] == b"\n" for start, _ in spans[1:])
        assert all(end > start for start, end in spans)


def test_a_boundary_inside_a_line_moves_to_the_next_line_start(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"aaaa\nbbbbbbbbbb\ncc\n")  # lines start at 0, 5 and 16; 19 bytes
    assert ranged.cut(path, 19, 7) == [(0, 16), (16, 19)]  # 7 falls inside "bbbb...": the range ends after it
    assert ranged.cut(path, 19, 5) == [(0, 5), (5, 16), (16, 19)]  # 5 is a line start already
    assert ranged.cut(path, 19, 3) == [(0, 5), (5, 16), (16, 19)]


def test_a_line_longer_than_a_range_and_a_last_line_without_newline(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"a\n" + b"b" * 50 + b"\nc")
    assert ranged.cut(path, 54, 2) == [(0, 2), (2, 53), (53, 54)]
    path = write(tmp_path / "g", b"a\n" + b"b" * 50)  # the cut-off last line is the rest of the file
    assert ranged.cut(path, 52, 2) == [(0, 2), (2, 52)]


def test_a_file_is_cut_into_a_multiple_of_the_slots() -> None:
    assert ranged.range_bytes(150, slots=2, most=64) == 38  # 3 ranges of 50 would leave a slot idle: 4 of 38
    assert ranged.range_bytes(100, slots=2, most=64) == 50
    assert ranged.range_bytes(10, slots=4, most=64) == 3
    assert ranged.range_bytes(0, slots=2, most=64) == 1
    assert ranged.range_bytes(1000, slots=1, most=64) == 63  # 16 ranges


def test_an_empty_file_is_one_empty_range(tmp_path: Path) -> None:
    assert ranged.cut(write(tmp_path / "f", b""), 0, 10) == [(0, 0)]


def test_newlines_are_counted_within_a_range(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"a\nb\n\nc")
    assert [ranged.count_newlines((str(path), s, e)) for s, e in [(0, 2), (2, 5), (5, 6), (0, 6)]] == [1, 2, 0, 3]


# --- merging ----------------------------------------------------------------------------------------


def part(rows: int = 1, lines: int = 1, unparsed: tuple[int, str] | None = None, error: str | None = None,
         names: dict[str, list[str]] | None = None, oserror: str | None = None) -> ranged.Part:
    return ranged.Part(lines=lines, rows=rows, marks=[(lines, 0)], names=names or {}, unparsed=unparsed,
                       error=error, oserror=oserror)


def test_a_line_held_at_a_range_end_is_an_error_when_a_later_range_has_a_line() -> None:
    held = (4, "not valid JSON (Expecting value at column 1)")
    with pytest.raises(HistoryError, match=r"^f line 4: not valid JSON"):
        ranged.merge([part(unparsed=held, lines=4), part(rows=0, lines=6), part(lines=7)], SENDS, "f")
    with pytest.raises(HistoryError, match=r"^f line 4: "):  # before the later range's own bad line
        ranged.merge([part(unparsed=held, lines=4), part(error="f line 9: missing field 'seq'", lines=9)], SENDS, "f")


def test_a_line_held_at_the_end_followed_by_blank_ranges_is_the_cut_off_last_line() -> None:
    held = (4, "not valid JSON (Unterminated string at column 3)")
    merged = ranged.merge([part(lines=3), part(unparsed=held, lines=4), part(rows=0, lines=6)], SENDS, "f")
    assert merged.converted.notes == ["f: dropped an incomplete last line (line 4)"]
    assert merged.converted.lines == 6


def test_the_first_bad_range_wins_and_a_task_that_cannot_write_means_no_cache() -> None:
    with pytest.raises(HistoryError, match="^f line 2: a$"):
        ranged.merge([part(lines=1), part(error="f line 2: a"), part(error="f line 3: b")], SENDS, "f")
    with pytest.raises(OSError, match="read-only"):  # as when the driver cannot write: the JSON lines are read
        ranged.merge([part(error="f line 2: a"), part(oserror="part-1: read-only file system")], SENDS, "f")


def test_dictionaries_merge_in_first_seen_order_and_parts_numbered_otherwise_are_remapped() -> None:
    parts = [part(names={"producers": ["b", "a"], "topics": ["t"], "groups": [], "consumers": ["c0"]}),
             part(names={"producers": ["b", "a", "c"], "topics": ["t"], "groups": ["g"], "consumers": ["c0"]}),
             part(names={"producers": ["c", "a"], "topics": ["u", "t"], "groups": [], "consumers": ["c1", "c0"]})]
    merged = ranged.merge(parts, READS, "f")
    assert merged.converted.names == {"producers": ["b", "a", "c"], "topics": ["t", "u"], "groups": ["g"],
                                      "consumers": ["c0", "c1"]}
    assert merged.remaps == [None, None, {"producers": [2, 1], "topics": [1, 0], "consumers": [1, 0]}]
    assert merged.converted.marks == [(1, 0), (1, 0), (1, 0)]


# --- whole files --------------------------------------------------------------------------------------


@pytest.fixture
def by_tiny_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "MARK_BYTES", 200)
    monkeypatch.setattr(cache, "convert", by_ranges(range_bytes=200, block_bytes=150))


def interleaved(n: int = 60) -> dict[str, list[Any]]:
    """Producers and topics first seen in a different order in every range: parts are remapped."""
    names = ["p0", "p1", "p2", "pé"]
    sends = [send(names[(i * 7 + i // 5) % 4], i, topic=f"t{(i // 3) % 3}") for i in range(n)]
    reads = [read(s["producer"], s["seq"], s["offset"], phase="live", topic=s["topic"], group=f"g{i % 3}",
                  consumer=f"c{i % 2}") for i, s in enumerate(sends)]
    reads += [read(s["producer"], s["seq"], s["offset"], topic=s["topic"]) for s in reversed(sends)]
    return {"sends": sends, "reads": reads, "events": []}


def test_remapped_parts_read_as_the_reference_reads_them(tmp_path: Path, by_tiny_ranges: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    remapped = []

    def remap_part(job: tuple[str, str, dict[str, list[int]]]) -> str | None:
        remapped.append(job)
        return real(job)

    real = ranged.remap_part
    monkeypatch.setattr(ranged, "remap_part", remap_part)
    run = make_run(tmp_path, **interleaved())
    same_as_reference(run)
    files = convert_history(run / "history")
    assert files is not None
    assert len(ranged.parts_of(files["sends.jsonl"].path)) > 10
    assert {kind for _, _, remap in remapped for kind in remap} == {"producers", "topics", "groups", "consumers"}


def test_a_broken_line_in_the_middle_of_a_range_and_a_cut_off_last_line(tmp_path: Path, by_tiny_ranges: None) -> None:
    h = clean(20)
    h["sends"].insert(7, '{"producer": "p0", "seq": ')  # a range of ~200 bytes holds it with whole lines around
    same_as_reference(make_run(tmp_path / "middle", **h))
    h = clean(20)
    run = make_run(tmp_path / "end", **h)
    with (run / "history" / "sends.jsonl").open("a") as f:
        f.write('{"producer": "p0", "se')
    same_as_reference(run)
    files = convert_history(run / "history")
    assert files is not None and files["sends.jsonl"].notes == [
        "history/sends.jsonl: dropped an incomplete last line (line 21)"]
    written = (run / "history" / "sends.parquet" / ranged.META).stat().st_mtime_ns
    again = convert_history(run / "history")  # from the folder cache's footer: the note on every check
    assert again is not None and again["sends.jsonl"].notes == files["sends.jsonl"].notes
    assert (run / "history" / "sends.parquet" / ranged.META).stat().st_mtime_ns == written


def test_example_lines_are_found_through_the_marks_of_every_range(tmp_path: Path, by_tiny_ranges: None) -> None:
    sends = [send(f"p{i % 3}", i) for i in range(100)]
    run = make_run(tmp_path, sends=sends[:50] + ["", "  "] + sends[50:], reads=[read("p0", 0, 0)], events=[])
    files = convert_history(run / "history")
    assert files is not None
    wanted = {1, 2, 30, 50, 53, 77, 102}
    assert files["sends.jsonl"].lines(wanted) == lines_at(run / "history" / "sends.jsonl", wanted)


def test_a_folder_cache_and_a_file_cache_replace_each_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path, **clean(20))
    history = run / "history"
    convert_history(history)
    assert (history / "sends.parquet").is_file()
    monkeypatch.setattr(cache, "convert", by_ranges(range_bytes=200, block_bytes=150))
    source = history / "sends.jsonl"
    with source.open("a") as f:
        f.write(json.dumps(send("p0", 20)) + "\n")
    files = convert_history(history)
    assert files is not None and (history / "sends.parquet").is_dir()
    written = (history / "sends.parquet" / ranged.META).stat().st_mtime_ns
    assert convert_history(history) is not None  # fresh: used as it is
    assert (history / "sends.parquet" / ranged.META).stat().st_mtime_ns == written
    assert stored_rows(files["sends.jsonl"], SENDS)[-1]["seq"] == 20
    assert files["sends.jsonl"].value_ranges(["seq", "offset"]) == {"seq": (0, 20), "offset": (0, 20)}
    monkeypatch.undo()
    with source.open("a") as f:
        f.write(json.dumps(send("p0", 21)) + "\n")
    files = convert_history(history)
    assert files is not None and (history / "sends.parquet").is_file()
    assert len(pq.read_table(files["sends.jsonl"].path)) == 22
    assert sorted(p.name for p in history.iterdir()) == [
        "events.jsonl", "reads.jsonl", "reads.parquet", "sends.jsonl", "sends.parquet"]


def test_tasks_that_cannot_write_mean_reading_the_json_lines(tmp_path: Path, by_tiny_ranges: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = make_run(tmp_path, **clean(10))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ranged, "parquet_writer", refuse)
    assert convert_history(run / "history") is None
    assert sorted(p.name for p in (run / "history").iterdir()) == ["events.jsonl", "reads.jsonl", "sends.jsonl"]


def test_a_stored_range_is_the_reference_rows(tmp_path: Path, by_tiny_ranges: None) -> None:
    """The rows of every part in file order, with the line numbers of the whole file."""
    from checkers.history import read_history

    run = make_run(tmp_path, **interleaved(30))
    files = convert_history(run / "history")
    assert files is not None
    expected = read_history(run / "history")
    assert stored_rows(files["reads.jsonl"], READS) == reference_rows(expected.reads, READS)
