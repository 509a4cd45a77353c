"""The nightly's summary: each run's outcome as a JUnit test case (1: a failure, 2: an error) and one line.

``kchaos nightly`` (harness/nightly.py) runs the scenarios; what it concludes
from their exit codes and output is written here, from what the runs left.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from harness.errors import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID

UNMET_LINE = re.compile(r"^verdict: .*$", re.MULTILINE)
LOG_TAIL = 6000


@dataclass
class Outcome:
    name: str
    path: Path
    code: int
    seconds: float
    output: str
    run_dir: str | None = None

    @property
    def summary(self) -> str:
        verdict = UNMET_LINE.findall(self.output)
        if verdict:
            return verdict[-1]
        lines = [line for line in self.output.strip().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {self.code}"



def junit_xml(outcomes: list[Outcome]) -> ET.ElementTree:
    failures = sum(1 for o in outcomes if o.code == EXIT_INVALID)
    errors = sum(1 for o in outcomes if o.code not in (EXIT_VALID, EXIT_INVALID))
    total = sum(o.seconds for o in outcomes)
    suites = ET.Element("testsuites", name="kchaos nightly", tests=str(len(outcomes)), failures=str(failures),
                        errors=str(errors), time=f"{total:.1f}")
    suite = ET.SubElement(suites, "testsuite", name="kchaos.nightly", tests=str(len(outcomes)),
                          failures=str(failures), errors=str(errors), skipped="0", time=f"{total:.1f}")
    for o in outcomes:
        case = ET.SubElement(suite, "testcase", classname="kchaos.nightly", name=o.name, file=str(o.path),
                             time=f"{o.seconds:.1f}")
        if o.code == EXIT_INVALID:
            ET.SubElement(case, "failure", message=o.summary, type="ExpectationsNotMet").text = o.output[-LOG_TAIL:]
        elif o.code != EXIT_VALID:
            ET.SubElement(case, "error", message=o.summary, type=f"ExitCode{o.code}").text = o.output[-LOG_TAIL:]
        ET.SubElement(case, "system-out").text = o.output[-LOG_TAIL:]
    ET.indent(suites)
    return ET.ElementTree(suites)


def summary_line(o: Outcome) -> str:
    """One run in the nightly's closing list: ok, FAILED (expectations not met) or ERROR (not judged)."""
    state = {EXIT_VALID: "ok", EXIT_INVALID: "FAILED"}.get(o.code, "ERROR")
    return f"{state:7} {o.name} ({o.seconds:.0f} s) {o.summary}"


def nightly_exit_code(outcomes: list[Outcome]) -> int:
    """2 when some run was not judged, else 1 when some expectation was not met, else 0."""
    if any(o.code not in (EXIT_VALID, EXIT_INVALID) for o in outcomes):
        return EXIT_HARNESS
    return EXIT_INVALID if any(o.code == EXIT_INVALID for o in outcomes) else EXIT_VALID
