"""The nightly job: run every scenario marked ``nightly: true``, build the matrix, write JUnit XML.

``kchaos nightly [--scenarios scenarios] [--out runs] [--junit runs/junit.xml] [--shard K/N]``
runs each nightly scenario in its own ``kchaos run`` process (so one that
dies cannot take the others with it), keeps each one's output in
OUT/nightly-logs/<scenario>.log with its outcome record beside it, writes the
reliability matrix OUT/index.html and one JUnit test case per scenario.
``--shard K/N`` runs only shard K of a partition every shard computes alike
(harness/shard.py); ``kchaos matrix SHARD... --junit FILE`` merges the shards'
folders. Exit code: 0 every expectation met, 1 some expectation not met, 2 some
scenario could not be run or judged.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from catalogue.exits import EXIT_HARNESS, HarnessError
from harness.scenario import load_scenario
from harness.shard import Shard, expected_seconds, load_seconds, partition
from rundir.layout import NIGHTLY_LOGS
from rundir.phases import parse_phases
from spark_analysis.server import for_runs
from verdicts.junit import (TIMINGS, Outcome, append_step_summary, clear_outcomes, load_outcomes, load_timings,
                            nightly_exit_code, save_outcome, save_shard, save_timings, step_summary, summary_line,
                            write_junit)
from verdicts.matrix import write_matrix

RUN_DIR_LINE = re.compile(r"^run directory: (.+)$", re.MULTILINE)
RUN_STOP_TIMEOUT_S = 300  # a stopped run copies logs, reads replica disks and tears down: seconds, not minutes


@dataclass(frozen=True)
class Variant:
    """One nightly run: a scenario file, in one metadata mode when the file asks for several."""

    name: str
    path: Path
    overrides: tuple[str, ...] = ()
    expected_s: float = field(default=0.0, compare=False)  # harness/shard.py's estimate, from the scenario
    load_s: float = field(default=0.0, compare=False)  # workload + settle: the run's wall time less the overhead
    args: tuple[str, ...] = ()  # more of `kchaos run`'s arguments (the explorer's --engine)


def across_versions(variants: list[Variant], setting: str, versions: tuple[str, ...],
                    label: str) -> tuple[list[Variant], list[str]]:
    """Each variant once per version (``setting=version``, named ``<variant>@<label><version>``); the pairs that
    cannot be (ZooKeeper on Kafka 4, a setting the release lacks) are left out, each with a line saying why."""
    if not versions:
        return variants, []
    crossed, left_out = [], []
    for v in variants:
        for version in versions:
            overrides = (*v.overrides, f"{setting}={version}")
            try:
                scenario = load_scenario(v.path, list(overrides), None)
            except HarnessError as e:
                left_out.append(f"{v.name} on {label}{version}: {str(e).split(': ', 1)[-1]}")
                continue
            crossed.append(Variant(f"{v.name}@{label}{version}", v.path, overrides, expected_seconds(scenario),
                                   v.load_s))
    return crossed, left_out


def nightly_scenarios(folder: Path, kafka_versions: tuple[str, ...] = (),
                      client_versions: tuple[str, ...] = ()) -> tuple[list[Variant], list[Outcome]]:
    """The runs the nightly scenario files ask for, and an error outcome for each file that does not load.

    ``nightly: true`` runs a file as written; ``nightly: [zookeeper, kraft]``
    runs it once per metadata mode, named ``<scenario>@<mode>``. Versions are
    an axis: each run once per Kafka release in ``kafka_versions``
    (``<run>@kafka-3.5.2``) and per client release in ``client_versions``
    (workload.client_version, ``<run>@client-2.5.0``); a pair that cannot be
    is left out with a printed line, not counted as broken.
    """
    chosen: list[Variant] = []
    broken: list[Outcome] = []
    for path in sorted(folder.glob("*.y*ml")):
        try:
            scenario = load_scenario(path, [], None)
        except HarnessError as e:
            broken.append(Outcome(path.stem, path, EXIT_HARNESS, 0.0, f"kchaos: {e}"))
            continue
        if scenario.nightly is True:
            chosen.append(Variant(scenario.name, path, (), expected_seconds(scenario), load_seconds(scenario)))
        elif scenario.nightly:
            for mode in scenario.nightly:
                setting = f"cluster.metadata={mode}"
                try:  # a mode the file cannot run in fails when it runs; until then it costs what the file does
                    expected = expected_seconds(load_scenario(path, [setting], None))
                except HarnessError:
                    expected = expected_seconds(scenario)
                chosen.append(Variant(f"{scenario.name}@{mode}", path, (setting,), expected, load_seconds(scenario)))
    chosen, left_out = across_versions(chosen, "cluster.kafka_version", kafka_versions, "kafka-")
    chosen, more = across_versions(chosen, "workload.client_version", client_versions, "client-")
    for line in left_out + more:
        print(f"nightly: left out {line}")
    for i, outcome in enumerate(broken):
        outcome.order = i
    seen: dict[str, Path] = {}
    for v in chosen:
        if v.name in seen and seen[v.name] != v.path:
            raise HarnessError(f"{seen[v.name]} and {v.path} both name scenario {v.name.split('@')[0]!r}: "
                               "nightly runs need names of their own (logs, records and shards go by name)")
        seen[v.name] = v.path
    return chosen, broken


def overhead_phases(phases: dict[str, float], seconds: float, load_s: float) -> dict[str, float]:
    """A run's overhead split by phase (rundir/phases.py): every phase but the load and the settling, the time
    those two took beyond the scenario's workload and settle, and what no phase holds (the process starting,
    imports); they add up to ``seconds - load_s``. {} when the run printed no phases."""
    if not phases:
        return {}
    split = {name: s for name, s in phases.items() if name not in ("load", "settling")}
    split["load and settling past the scenario's"] = phases.get("load", 0.0) + phases.get("settling", 0.0) - load_s
    split["outside the phases"] = seconds - sum(phases.values())
    return split


def run_one(variant: Variant, out: Path, log_dir: Path) -> Outcome:
    """``kchaos run`` in a child process; its output goes to the console and to log_dir/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lines: list[str] = []
    name, path = variant.name, variant.path
    overrides = [arg for setting in variant.overrides for arg in ("--set", setting)]
    with (log_dir / f"{name}.log").open("w") as log:
        # a session of its own: a stop reaches the run once, from here, and never cuts its teardown short
        child = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(out),
                                  *overrides, *variant.args],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                 start_new_session=True)
        assert child.stdout is not None
        try:
            for line in child.stdout:
                sys.stdout.write(line)
                log.write(line)
                lines.append(line)
            code = child.wait()
        except BaseException:  # Ctrl-C, SIGTERM: the run tears its cluster down before the nightly goes
            rest = stop_run(child)
            sys.stdout.write(rest)
            log.write(rest)
            raise
    output = "".join(lines)
    found = RUN_DIR_LINE.findall(output)
    return Outcome(name, path, code, time.monotonic() - started, output, found[-1].strip() if found else None)


def stop_run(child: subprocess.Popen[str], timeout_s: float = RUN_STOP_TIMEOUT_S) -> str:
    """SIGTERM to a running ``kchaos run`` and wait for it (its teardown included); what it printed meanwhile.
    Killed only if it does not end within ``timeout_s``: its cluster is then an orphan the next run removes."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        rest, _ = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        rest, _ = child.communicate()
    return rest or ""


def durations(chosen: list[Variant], log_dir: Path) -> tuple[dict[str, float], str]:
    """Each variant's expected seconds and where they come from.

    The wall times in log_dir/timings.json (written by the last unsharded or
    merged nightly, never by a shard) are used when they cover every variant;
    else every variant's estimate from its scenario. All or nothing, and from
    a file no shard changes: shards given the same folder agree.
    """
    measured = load_timings(log_dir)
    if chosen and all(v.name in measured for v in chosen):
        return {v.name: measured[v.name] for v in chosen}, f"measured: {log_dir / TIMINGS}"
    return {v.name: v.expected_s for v in chosen}, "estimated from the scenarios"


def choose(chosen: list[Variant], expected: dict[str, float], shard: Shard | None) -> list[Variant]:
    """The variants this nightly runs (all, or its shard's), in the nightly's order; prints the partition."""
    if shard is None:
        print(f"nightly: {len(chosen)} run(s): {', '.join(v.name for v in chosen)}")
        return chosen
    parts = partition(expected, shard.count)
    for i, names in enumerate(parts, 1):  # every shard prints the whole partition: a mismatch shows
        print(f"nightly: shard {i}/{shard.count}: expected {sum(expected[n] for n in names) / 60:.1f} min: "
              f"{', '.join(sorted(names)) or 'no run'}")
    mine = set(parts[shard.index - 1])
    return [v for v in chosen if v.name in mine]


def nightly(scenarios: Path, out: Path, junit: Path,
            runner: Callable[[Variant, Path, Path], Outcome] = run_one, shard: Shard | None = None,
            kafka_versions: tuple[str, ...] = (), client_versions: tuple[str, ...] = ()) -> int:
    chosen, broken = nightly_scenarios(scenarios, kafka_versions, client_versions)
    if not chosen and not broken:
        raise HarnessError(f"{scenarios}: no scenario has `nightly: true`")
    log_dir = out / NIGHTLY_LOGS
    expected, source = durations(chosen, log_dir)
    order = {v.name: len(broken) + i for i, v in enumerate(chosen)}
    mine = choose(chosen, expected, shard)
    what = "nightly" if shard is None else f"shard {shard}"
    mine_s = sum(expected[v.name] for v in mine)
    print(f"{what}: {len(mine)} run(s), expected {mine_s / 60:.1f} min ({source})")
    out.mkdir(parents=True, exist_ok=True)
    clear_outcomes(log_dir)
    for outcome in broken:  # every shard reports a broken file: each one's JUnit and exit code show it
        save_outcome(log_dir, outcome, out)
    started = time.monotonic()
    overheads: list[float] = []
    by_phase: list[dict[str, float]] = []
    # every run's Spark check goes through one warm checker server (spark_analysis/server.py), not a JVM each
    with for_runs(runner is run_one):
        for variant in mine:
            print(f"== {variant.name} ({' '.join([str(variant.path), *variant.overrides])})", flush=True)
            outcome = runner(variant, out, log_dir)
            outcome.order = order[variant.name]
            save_outcome(log_dir, outcome, out)
            overheads.append(outcome.seconds - variant.load_s)
            by_phase.append(overhead_phases(parse_phases(outcome.output), outcome.seconds, variant.load_s))
            print(f"{variant.name}: {outcome.seconds:.0f} s, of which overhead {overheads[-1]:.1f} s (cluster "
                  f"start, read-back, check, report, teardown: all but the {variant.load_s:.0f} s of workload and "
                  "settling)")
    wall_s = time.monotonic() - started
    matrix = write_matrix(out)
    outcomes = load_outcomes(log_dir)
    write_junit(outcomes, junit)
    shards = []
    if shard is None:
        save_timings(log_dir, outcomes)
    else:
        shards.append({"shard": str(shard), "runs": [v.name for v in mine], "expected_s": mine_s, "wall_s": wall_s,
                       "durations": source})
        save_shard(log_dir, str(shard), shards[-1])
    for o in outcomes:
        print(summary_line(o))
    print(f"matrix: {matrix}\njunit: {junit}\n{what} took {wall_s / 60:.1f} min (expected {mine_s / 60:.1f} min)")
    if overheads:
        print(f"per-run overhead: mean {sum(overheads) / len(overheads):.1f} s, max {max(overheads):.1f} s over "
              f"{len(overheads)} run(s)")
        timed = [p for p in by_phase if p]
        if timed:
            names = list(dict.fromkeys(name for p in timed for name in p))
            means = ", ".join(f"{name} {sum(p.get(name, 0.0) for p in timed) / len(timed):.1f} s" for name in names)
            print(f"per-run overhead by phase, mean over {len(timed)} run(s): {means}")
    append_step_summary(step_summary(outcomes, shards))
    return nightly_exit_code(outcomes)
