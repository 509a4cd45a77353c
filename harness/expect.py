"""Does a verdict meet the scenario's ``expect:`` block?"""

from __future__ import annotations

import operator
from typing import Any, Callable

from harness.scenario import EXPECTATION

OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq, "=": operator.eq, ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
}


def unmet(expect: dict[str, Any] | None, results: dict[str, Any]) -> list[str]:
    """The expectations the results do not meet, one readable line each (empty: all met).

    With no expectations, the verdict itself must be valid.
    """
    if not expect:
        return [] if results["valid"] else ["the verdict is not valid"]
    failures = []
    for key, wanted in expect.items():
        if key == "valid":
            if results["valid"] != wanted:
                failures.append(f"valid is {str(results['valid']).lower()}, expected {str(wanted).lower()}")
            continue
        actual = int(results["counts"][key])
        if isinstance(wanted, int):
            op, bound = "==", wanted
        else:
            match = EXPECTATION.match(wanted)
            assert match is not None  # the scenario validated it
            op, bound = match.group(1) or "==", int(match.group(2))
        if not OPS[op](actual, bound):
            failures.append(f"{key} is {actual}, expected {op}{bound}" if op not in ("==", "=")
                            else f"{key} is {actual}, expected {bound}")
    return failures
