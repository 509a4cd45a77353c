"""parse_json_line takes orjson's fast path, but Python's json decides what a history line holds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rundir.lines import parse_json_line, python_json_line


def outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    """What a parser makes of a line: its value (repr, so NaN equals NaN), or the error's type and text."""
    try:
        return "value", repr(parse(raw))
    except (ValueError, RecursionError) as e:
        return type(e).__name__, str(e)


# Lines where orjson and Python's json disagree: orjson refuses each of these, and the line keeps the verdict
# Python's json gives it.
EDGES = [
    b'{"seq": NaN}\n',  # Python's json takes NaN and Infinity
    b'{"seq": -Infinity}',
    b'{"offset": 123456789012345678901234567890}',  # past 64 bits
    b'{"producer": "\\ud800"}',  # a lone surrogate, escaped
    b'\x0c{"seq": 1}\x0b\n',  # white space that is not JSON's, around the object
    b'{"seq": 1} \xc2\xa0',  # a no-break space after it
    b'{"seq": 1} {"seq": 2}',  # extra data
    b'{"seq": 1',  # cut off
    b'{"producer": "p\xff"}',  # not UTF-8
    b'{"producer": "a\tb"}',  # a raw control character in a string
    b'\xef\xbb\xbf{"seq": 1}',  # a byte order mark
    b'',
    b'[1, 2]',
    b'"just a string"',
    b'{"seq": 1e400}',
    b'{"a": 1, "a": 2}',
]


@pytest.mark.parametrize("raw", EDGES)
def test_lines_orjson_refuses_get_python_json_s_verdict(raw: bytes) -> None:
    assert outcome(parse_json_line, raw) == outcome(python_json_line, raw)


def test_a_history_line_parses_to_the_same_object() -> None:
    raw = (b'{"producer":"p1","seq":2,"status":"ok","topic":"chaos","partition":1,"offset":0,'
           b'"invoke_ns":7703638007,"complete_ns":7703938007,"error":null,"final":true}\n')
    assert parse_json_line(raw) == json.loads(raw) == python_json_line(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from([b"", b"\n", b" \r\n", b"\x0c", b" x"]))
def test_any_value_and_ending_gets_the_same_verdict(value: Any, ending: bytes) -> None:
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass") + ending
    assert outcome(parse_json_line, raw) == outcome(python_json_line, raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_any_bytes_get_the_same_verdict(raw: bytes) -> None:
    assert outcome(parse_json_line, raw) == outcome(python_json_line, raw)
