"""The nightly job: run every scenario marked ``nightly: true``, build the matrix, write JUnit XML.

``kchaos nightly [--scenarios scenarios] [--out runs] [--junit runs/junit.xml]``
runs each nightly scenario in its own ``kchaos run`` process (so one that
dies cannot take the others with it), keeps each one's output in
OUT/nightly-logs/<scenario>.log, writes the reliability matrix OUT/index.html
and one JUnit test case per scenario. Exit code: 0 every expectation met,
1 some expectation not met, 2 some scenario could not be run or judged.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.errors import EXIT_HARNESS, HarnessError
from verdicts.junit import Outcome, junit_xml, nightly_exit_code, summary_line
from verdicts.matrix import write_matrix
from harness.scenario import load_scenario

RUN_DIR_LINE = re.compile(r"^run directory: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Variant:
    """One nightly run: a scenario file, in one metadata mode when the file asks for several."""

    name: str
    path: Path
    overrides: tuple[str, ...] = ()


def nightly_scenarios(folder: Path) -> tuple[list[Variant], list[Outcome]]:
    """The runs the nightly scenario files ask for, and an error outcome for each file that does not load.

    ``nightly: true`` runs a file as written; ``nightly: [zookeeper, kraft]``
    runs it once per metadata mode, named ``<scenario>@<mode>``.
    """
    chosen, broken = [], []
    for path in sorted(folder.glob("*.y*ml")):
        try:
            scenario = load_scenario(path, [], None)
        except HarnessError as e:
            broken.append(Outcome(path.stem, path, EXIT_HARNESS, 0.0, f"kchaos: {e}"))
            continue
        if scenario.nightly is True:
            chosen.append(Variant(scenario.name, path))
        elif scenario.nightly:
            chosen.extend(Variant(f"{scenario.name}@{mode}", path, (f"cluster.metadata={mode}",))
                          for mode in scenario.nightly)
    return chosen, broken


def run_one(variant: Variant, out: Path, log_dir: Path) -> Outcome:
    """``kchaos run`` in a child process; its output goes to the console and to log_dir/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lines: list[str] = []
    name, path = variant.name, variant.path
    overrides = [arg for setting in variant.overrides for arg in ("--set", setting)]
    with (log_dir / f"{name}.log").open("w") as log:
        child = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(out),
                                  *overrides],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            log.write(line)
            lines.append(line)
        code = child.wait()
    output = "".join(lines)
    found = RUN_DIR_LINE.findall(output)
    return Outcome(name, path, code, time.monotonic() - started, output, found[-1].strip() if found else None)


def nightly(scenarios: Path, out: Path, junit: Path,
            runner: Callable[[Variant, Path, Path], Outcome] = run_one) -> int:
    chosen, outcomes = nightly_scenarios(scenarios)
    if not chosen and not outcomes:
        raise HarnessError(f"{scenarios}: no scenario has `nightly: true`")
    print(f"nightly: {len(chosen)} run(s): {', '.join(v.name for v in chosen)}")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for variant in chosen:
        print(f"== {variant.name} ({' '.join([str(variant.path), *variant.overrides])})", flush=True)
        outcomes.append(runner(variant, out, out / "nightly-logs"))
    matrix = write_matrix(out)
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit_xml(outcomes).write(junit, encoding="utf-8", xml_declaration=True)
    for o in outcomes:
        print(summary_line(o))
    print(f"matrix: {matrix}\njunit: {junit}\nnightly took {(time.monotonic() - started) / 60:.1f} min")
    return nightly_exit_code(outcomes)
