"""``kchaos explore SPACE``: trials drawn from a space, run one after another within a budget; each finding
shrunk, confirmed and written out as a scenario.

Each trial is an ordinary ``kchaos run`` of its own scenario file (DIR/trials/<name>.yaml, run directory under
DIR/runs/), in a child process as the nightly runs them (harness/nightly.py ``run_one``); verdicts/exploration.py
says what it showed. A trial that was not judged is run again (the space's ``retries``) and then reported, never
counted as clean. DIR/exploration.json is rewritten after every run, so an exploration stopped half-way keeps
what it found; DIR/index.html and the JUnit file are drawn from it at the end.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from catalogue.exits import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID, HarnessError
from harness.explore.shrink import DURATION, PRODUCERS, RATE, Simplifier, shrink
from harness.explore.space import Explorable, Trial, load_space
from harness.nightly import Variant, run_one
from rundir.documents import write_atomically
from rundir.layout import JUNIT, REPORT, STAMP_FORMAT
from spark_analysis.server import for_runs
from verdicts.exploration import EXPLORATION, TrialVerdict, trial_verdict, write_junit, write_page

REFUSED_DRAWS = 50  # draws in a row that cannot run: the space is impossible, not unlucky


@dataclass
class TrialRecord:
    name: str
    purpose: str  # explore, retry, shrink or confirm
    settings: dict[str, Any]
    faults: list[dict[str, Any]]
    seed: int
    steps: list[str]
    scenario: str  # relative to the exploration's folder
    started_s: float
    seconds: float = 0.0
    code: int | None = None
    run_dir: str | None = None
    report: str | None = None
    outcome: str = ""
    anomalies: list[str] = field(default_factory=list)
    allowed: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    finding: int | None = None  # the finding a shrink or confirm run serves


Runner = Callable[[Variant, Path, Path], Any]


class Exploration:
    """One exploration's folder and what it has done so far."""

    def __init__(self, explorable: Explorable, out: Path, seed: int, budget_min: float,
                 runner: Runner = run_one, clock: Callable[[], float] = time.monotonic,
                 engine: str | None = None) -> None:
        self.ex, self.out, self.seed, self.budget_min = explorable, out, seed, budget_min
        self.args = ("--engine", engine) if engine else ()
        self.runner, self.clock = runner, clock
        self.began = clock()
        self.trials: list[TrialRecord] = []
        self.findings: list[dict[str, Any]] = []
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.hunt = tuple(explorable.space.hunt)
        for sub in ("trials", "runs", "findings", "logs"):
            (out / sub).mkdir(parents=True, exist_ok=True)

    # --- the budget -------------------------------------------------------------------------------------

    def left_s(self) -> float:
        return self.budget_min * 60 - (self.clock() - self.began)

    def typical_s(self) -> float:
        """What a run has taken so far (the longest: a trial started must be able to end within the budget)."""
        ran = [t.seconds for t in self.trials if t.code is not None]
        return max(ran) if ran else 0.0

    def room(self) -> bool:
        return self.left_s() > self.typical_s()

    # --- running one trial ------------------------------------------------------------------------------

    def run(self, trial: Trial, purpose: str, finding: int | None = None) -> TrialRecord:
        """Run ``trial`` once as an ordinary run and record what it showed."""
        name = f"t{sum(t.outcome != 'refused' for t in self.trials) + 1:03d}"
        scenario_name = f"{self.ex.space.name}-{name}"
        path = self.out / "trials" / f"{name}.yaml"
        raw = self.ex.scenario(trial, scenario_name)
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        record = TrialRecord(name, purpose, dict(trial.settings), [dict(f) for f in trial.faults], trial.seed,
                             list(trial.steps), path.relative_to(self.out).as_posix(),
                             round(self.clock() - self.began, 1), finding=finding)
        self.trials.append(record)
        print(f"explore: {name} ({purpose}): {len(trial.faults)} fault(s), "
              f"{' '.join(trial.overrides()) or 'the base settings'}", flush=True)
        started = self.clock()
        outcome = self.runner(Variant(scenario_name, path, args=self.args), self.out / "runs", self.out / "logs")
        record.seconds = round(self.clock() - started, 1)
        record.code = outcome.code
        run_dir = outcome.run_dir or self._made(scenario_name)
        verdict = trial_verdict(Path(run_dir) if run_dir else None, self.hunt)
        said = harness_error(getattr(outcome, "output", "") or "")
        if verdict.outcome in ("error", "not_judged") and said:
            verdict.reason = said  # what the run itself said stopped it, over "results.json: missing"
        elif verdict.outcome == "error" and outcome.code not in (EXIT_VALID, EXIT_INVALID, EXIT_HARNESS):
            verdict.reason = f"kchaos run exited {outcome.code}"
        self._note(record, verdict, run_dir)
        print(f"explore: {name}: {verdict.outcome}"
              f"{' (' + ', '.join(verdict.anomalies) + ')' if verdict.anomalies else ''}"
              f"{': ' + verdict.reason if verdict.reason else ''}", flush=True)
        self.save()
        return record

    def _made(self, scenario_name: str) -> str | None:
        """The run directory a run that stopped before saying it left (a harness error: the cluster never
        recovered), if it made one."""
        made = sorted((self.out / "runs" / scenario_name).glob("*/"))
        return str(made[-1]) if made else None

    def _note(self, record: TrialRecord, verdict: TrialVerdict, run_dir: str | None) -> None:
        record.outcome, record.anomalies, record.allowed = verdict.outcome, verdict.anomalies, verdict.allowed
        record.reason = verdict.reason
        if run_dir:
            record.run_dir = os.path.relpath(run_dir, self.out)
            if (Path(run_dir) / REPORT).is_file():
                record.report = f"{record.run_dir}/{REPORT}"

    def refused(self, trial: Trial, reason: str) -> None:
        name = f"r{sum(t.outcome == 'refused' for t in self.trials) + 1:03d}"
        self.trials.append(TrialRecord(name, "explore", dict(trial.settings),
                                       [dict(f) for f in trial.faults], trial.seed, [], "", 0.0,
                                       outcome="refused", reason=reason))

    # --- the exploration ----------------------------------------------------------------------------------

    def draw(self, number: int) -> Trial:
        """Trial ``number``: the first draw that can run (refused draws are kept, with why)."""
        for attempt in range(REFUSED_DRAWS):
            trial = self.ex.draw(self.seed, number, attempt)
            try:
                self.ex.validate(trial, self.ex.space.name)
                return trial
            except HarnessError as e:
                self.refused(trial, str(e))
        raise HarnessError(f"{self.ex.path}: {REFUSED_DRAWS} draws in a row could not run (the last: "
                           f"{self.trials[-1].reason}); the space's settings cannot go together")

    def explore(self, trials: int | None = None) -> None:
        """Draw, run and shrink until the budget ends (or ``trials`` trials were drawn)."""
        number = 0
        while self.room() and (trials is None or number < trials):
            number += 1
            trial = self.draw(number)
            record = self.run(trial, "explore")
            for _ in range(self.ex.space.retries):
                if record.outcome not in ("not_judged", "error") or not self.room():
                    break
                record = self.run(trial, "retry")
            if record.outcome == "finding":
                self.shrink(trial, record)

    def shrink(self, trial: Trial, found: TrialRecord) -> None:
        """Shrink a finding for its first anomaly, confirm the smallest scenario, write it out."""
        number = len(self.findings) + 1
        anomaly = found.anomalies[0]
        base = self.ex.base
        simplifier = Simplifier({DURATION: base.workload.duration_s, RATE: base.workload.producers.rate,
                                 PRODUCERS: base.workload.producers.count},
                                tuple(self.ex.space.shrink.moves), self.ex.space.shrink.min_duration_s)

        def runnable(candidate: Trial) -> bool:
            try:
                self.ex.validate(candidate, self.ex.space.name)
            except HarnessError:
                return False  # a simplification that cannot run keeps nothing
            return True

        def shows(candidate: Trial) -> bool:
            return anomaly in self.run(candidate, "shrink", number).anomalies

        print(f"explore: finding {number}: {anomaly} in {found.name}; shrinking", flush=True)
        done = shrink(trial, simplifier, shows, self.ex.space.shrink.runs, self.room, runnable)
        confirm = []
        for _ in range(self.ex.space.shrink.confirm):
            if not self.room():
                break
            confirm.append(self.run(done.trial, "confirm", number))
        shown = sum(anomaly in r.anomalies for r in confirm)
        finding = {"id": number, "anomaly": anomaly, "anomalies": found.anomalies, "trial": found.name,
                   "steps": done.kept, "rate": [shown, len(confirm)], "candidates": done.candidates,
                   "candidates_refused": done.refused,
                   "shrink_runs": done.runs, "out_of_budget": done.out_of_budget or len(confirm) <
                   self.ex.space.shrink.confirm,
                   "confirm_runs": [{"name": r.name, "link": r.report or r.scenario} for r in confirm]}
        path = self.out / "findings" / f"{self.ex.space.name}-finding-{number}.yaml"
        text = self.finding_scenario(done.trial, finding, path.stem)
        path.write_text(text, encoding="utf-8")
        finding.update(scenario=path.relative_to(self.out).as_posix(), scenario_text=text)
        self.findings.append(finding)
        print(f"explore: finding {number}: {anomaly} shown in {shown} of {len(confirm)} runs of {path}", flush=True)
        self.save()

    def finding_scenario(self, trial: Trial, finding: dict[str, Any], name: str) -> str:
        """The shrunk scenario with a header naming the trials behind it, and ``expect:`` from its runs."""
        raw = self.ex.scenario(trial, name)
        shown, runs = finding["rate"]
        if runs and shown == runs:
            raw["expect"] = {finding["anomaly"]: ">0"}
        else:
            raw.pop("expect", None)
        header = [f"Found by `kchaos explore {self.ex.path} --seed {self.seed}`: trial {finding['trial']} showed "
                  f"{', '.join(finding['anomalies'])}.",
                  f"Shrunk from the base scenario {self.ex.base_path} in {len(finding['steps'])} kept "
                  f"step{'' if len(finding['steps']) == 1 else 's'} "
                  f"({finding['candidates']} candidates, {finding['shrink_runs']} runs):",
                  *(f"  - {s}" for s in finding["steps"]),
                  f"This scenario showed {finding['anomaly']} in {shown} of {runs} runs "
                  f"({', '.join(r['name'] for r in finding['confirm_runs']) or 'none run'})"
                  + ("; expect: is written from them." if runs and shown == runs else
                     "; no expect: (not every run showed it), the verdict is judged by the settings' promises."),
                  f"Explored {self.started_at}."]
        return "".join(f"# {line}\n" for line in header) + yaml.safe_dump(raw, sort_keys=False)

    def save(self, ended: bool = False) -> None:
        document = {"space": self.ex.space.name, "space_file": str(self.ex.path), "base": str(self.ex.base_path),
                    "seed": self.seed, "budget_min": self.budget_min, "started_at": self.started_at,
                    "ended_at": datetime.now(timezone.utc).isoformat(timespec="seconds") if ended else None,
                    "hunt": list(self.hunt), "trials": [asdict(t) for t in self.trials], "findings": self.findings}
        write_atomically(self.out / EXPLORATION, json.dumps(document, indent=1) + "\n")

    def exit_code(self) -> int:
        """1 on a finding; else 0 when some drawn trial was judged; else 2 (nothing proved)."""
        if self.findings or any(t.outcome == "finding" for t in self.trials):
            return EXIT_INVALID
        judged = any(t.purpose in ("explore", "retry") and t.outcome in ("clean", "allowed") for t in self.trials)
        return EXIT_VALID if judged else EXIT_HARNESS


def harness_error(output: str) -> str:
    """The one line ``kchaos run`` ends with when it stops on an error (``kchaos: ...``), or empty."""
    said = [line.removeprefix("kchaos: ").strip() for line in output.splitlines() if line.startswith("kchaos: ")]
    return said[-1] if said else ""


def default_folder(space_file: Path) -> Path:
    """runs/explore/<space file's stem>/<UTC time>: beside the runs, out of the matrix's way (it reads
    runs/<scenario>/<time>/ only)."""
    return Path("runs") / "explore" / space_file.stem / datetime.now(timezone.utc).strftime(STAMP_FORMAT)


def explore(space_file: Path, budget_min: float, seed: int, out: Path, junit: Path | None,
            engine: str | None = None, trials: int | None = None, runner: Runner = run_one,
            clock: Callable[[], float] = time.monotonic) -> int:
    """``kchaos explore``: explore until the budget ends, then write the page and the JUnit file."""
    explorable = load_space(space_file)
    if budget_min <= 0:
        raise HarnessError(f"--budget-min must be above 0, not {budget_min:g}")
    if trials is not None and trials < 1:
        raise HarnessError(f"--trials must be at least 1, not {trials}")
    exploration = Exploration(explorable, out, seed, budget_min, runner, clock, engine)
    try:
        # the trials' Spark checks go through one warm checker server (spark_analysis/server.py)
        with for_runs(runner is run_one and engine in (None, "spark")):
            exploration.explore(trials)
    finally:
        exploration.save(ended=True)
        page = write_page(out)
        write_junit(out, junit or out / JUNIT)
        print(f"explore: {sum(t.purpose == 'explore' and t.outcome != 'refused' for t in exploration.trials)} "
              f"trials, {len(exploration.findings)} finding(s); page: {page}", flush=True)
    return exploration.exit_code()
