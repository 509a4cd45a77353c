"""The explorer's pure parts: the space and its draws, the shrinker against fake runners, what a trial's
results count as, and a whole exploration driven by a fake runner that writes run directories.

The cluster test (the known-answer space on a real cluster) is tests/test_explore_cluster.py.
"""

from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalogue.exits import EXIT_HARNESS, EXIT_INVALID, EXIT_VALID, HarnessError
from harness.cli import main
from harness.explore.explorer import Exploration, explore
from harness.explore.shrink import DURATION, PRODUCERS, RATE, Simplifier, shrink
from harness.explore.space import Trial, load_space
from harness.nightly import Variant
from verdicts.exploration import judged_anomalies, trial_verdict

REPO = Path(__file__).resolve().parent.parent
KNOWN = REPO / "spaces" / "acks1-known-loss.yaml"
SPACES = sorted((REPO / "spaces").glob("*.yaml"))


def kinds(trial: Trial) -> list[str]:
    return [f["kind"] for f in trial.faults]


# --- the space ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_every_space_in_the_repository_loads_and_its_draws_run(path: Path) -> None:
    ex = load_space(path)
    drawn = 0
    for number in range(1, 11):
        try:
            ex.validate(ex.draw(1, number), ex.space.name)
            drawn += 1
        except HarnessError:
            pass  # settings that cannot go together: the explorer draws again
    assert drawn >= 5


def test_draws_are_reproducible_and_differ_by_number_and_seed() -> None:
    ex = load_space(KNOWN)
    assert ex.draw(7, 3) == ex.draw(7, 3)
    assert len({json.dumps(ex.draw(7, n).faults) for n in range(1, 10)}) > 3
    assert ex.draw(7, 3) != ex.draw(8, 3)


KNOWN_SEED = 26  # trial 1: a slow network, then a leader kill (the cluster test's)


def test_the_known_answer_seed_draws_another_fault_then_a_leader_kill() -> None:
    """The cluster test relies on it: trial 1 of KNOWN_SEED is a fault that loses nothing, then a leader kill, so
    shrinking it takes one candidate (three runs with the confirmation)."""
    first = load_space(KNOWN).draw(KNOWN_SEED, 1)
    assert kinds(first) == ["slow-network", "kill"] and first.faults[1]["target"] == "partition-leader"


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "base.yaml").write_text((REPO / "scenarios" / "acks1-leader-kill.yaml").read_text())
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


GOOD = "name: s\nbase: base.yaml\nfaults: {kinds: [{kind: kill}]}\n"


@pytest.mark.parametrize("text, said", [
    ("name: s\nbase: nowhere.yaml\nfaults: {kinds: [{kind: kill}]}\n", "base: no scenario file nowhere.yaml"),
    ("name: s\nbase: base.yaml\nfaults: {kinds: [{kind: smash}]}\n", "unknown fault kind 'smash'"),
    ("name: s\nbase: base.yaml\nfaults: {kinds: [{kind: kill, targets: [producer]}]}\n",
     "kill hits a node: target must be one of"),
    ("name: s\nbase: base.yaml\nfaults: {kinds: [{kind: lossy-network, options: {probability: [0.5, 2]}}]}\n",
     "lossy-network probability: input should be less than or equal to 1"),
    ("name: s\nbase: base.yaml\nfaults: {kinds: [{kind: partition, options: {mode: [sideways]}}]}\n",
     "partition mode must be one of isolate"),
    ("name: s\nbase: base.yaml\nfaults: {kinds: [{kind: kill, options: {rate: [1]}}]}\n", "kill has no option rate"),
    ("name: s\nbase: base.yaml\nhunt: [eaten]\nfaults: {kinds: [{kind: kill}]}\n", "unknown anomaly eaten"),
    ("name: s\nbase: base.yaml\nsettings: {workload.producers.speed: [1]}\nfaults: {kinds: [{kind: kill}]}\n",
     "settings.workload.producers.speed: no value runs on the base scenario"),
    ("name: s\nbase: base.yaml\nsettings: {topic.min_insync_replicas: [4]}\nfaults: {kinds: [{kind: kill}]}\n",
     "settings.topic.min_insync_replicas: no value runs"),
    ("name: s\nbase: base.yaml\nfaults: {count: {min: 3, max: 1}, kinds: [{kind: kill}]}\n", "min 3 is above max 1"),
    ("name: s\nbase: base.yaml\n", "faults: field required"),
    ("name: [s\n", "not valid YAML"),
])
def test_a_bad_space_is_one_line(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(HarnessError) as e:
        load_space(write(tmp_path, text))
    assert said.lower() in str(e.value).lower() and "\n" not in str(e.value)


def test_a_bad_space_exits_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "name: s\nbase: base.yaml\nfaults: {kinds: [{kind: smash}]}\n")
    assert main(["explore", str(path), "--out", str(tmp_path / "out")]) == EXIT_HARNESS
    err = capsys.readouterr().err
    assert err.startswith("kchaos: ") and "smash" in err and err.count("\n") == 1


def test_a_trial_is_the_base_with_its_settings_and_faults() -> None:
    ex = load_space(KNOWN)
    trial = Trial({"workload.duration_s": 20, "workload.producers.config.acks": "all"},
                  [{"kind": "kill", "target": "partition-leader", "duration_s": 3}], 5)
    scenario = ex.validate(trial, "x-t001")
    assert scenario.workload.duration_s == 20 and scenario.workload.producers.config["acks"] == "all"
    assert [f.kind for f in scenario.faults] == ["kill"] and scenario.seed == 5 and scenario.expect is None
    assert scenario.topic.name == "chaos"  # the rest is the base's


# --- the shrinker ------------------------------------------------------------------------------------------

BASE = {DURATION: 60.0, RATE: 4000, PRODUCERS: 2}
FAULTS = [{"kind": "slow-network", "target": "random-broker", "duration_s": 8.0, "options": {"rate": "1mbit"}},
          {"kind": "kill", "target": "partition-leader", "duration_s": 8.0,
           "then": {"kind": "pause", "target": "same", "after_s": 1.0, "duration_s": 2.0}},
          {"kind": "pause", "target": "random-broker", "duration_s": 4.0}]
SETTINGS = {"workload.client": "java", "cluster.metadata": "kraft"}


def has_kill(trial: Trial) -> bool:
    return "kill" in kinds(trial)


def always() -> bool:
    return True


def test_a_deterministic_finding_shrinks_to_the_one_fault_that_matters() -> None:
    done = shrink(Trial(dict(SETTINGS), list(FAULTS), 1), Simplifier(BASE), has_kill, 3, always)
    t = done.trial
    assert kinds(t) == ["kill"] and "then" not in t.faults[0] and t.faults[0]["duration_s"] == 1.0
    assert t.settings == {DURATION: 30.0, RATE: 125, PRODUCERS: 1}  # the drawn settings went back to the base's
    assert t.steps[0] == "removed fault 1 (slow-network random-broker)" and len(done.kept) == len(t.steps)
    assert not done.out_of_budget
    # a candidate that loses the anomaly is run `runs` times, one that keeps it once
    assert done.runs == done.candidates + 2 * (done.candidates - len(done.kept))


def test_a_finding_that_depends_on_a_setting_keeps_it() -> None:
    def java_kill(trial: Trial) -> bool:
        return has_kill(trial) and trial.settings.get("workload.client") == "java"
    done = shrink(Trial(dict(SETTINGS), list(FAULTS), 1), Simplifier(BASE, moves=("faults", "settings")),
                  java_kill, 2, always)
    assert kinds(done.trial) == ["kill"] and done.trial.settings == {"workload.client": "java"}


def test_a_probabilistic_finding_shrinks_with_retries_and_the_steps_say_which_run_showed_it() -> None:
    rng = random.Random(4)

    def half_the_time(trial: Trial) -> bool:
        return has_kill(trial) and rng.random() < 0.5
    done = shrink(Trial({}, list(FAULTS), 1), Simplifier(BASE, moves=("faults",)), half_the_time, 6, always)
    assert kinds(done.trial) == ["kill"]
    assert all(" (shown by run " in k and k.endswith(" of up to 6)") for k in done.kept)
    assert any("shown by run 1 " not in k for k in done.kept) or done.runs > done.candidates


def test_a_finding_that_disappears_keeps_the_trial_as_it_was() -> None:
    trial = Trial(dict(SETTINGS), list(FAULTS), 1)
    done = shrink(trial, Simplifier(BASE), lambda t: False, 2, always)
    assert done.trial == trial and done.kept == [] and done.runs == 2 * done.candidates > 0


def test_a_candidate_that_cannot_run_is_skipped_without_a_run() -> None:
    def no_java(trial: Trial) -> bool:  # say the harness refuses every candidate without the Java client
        return trial.settings.get("workload.client") == "java"
    done = shrink(Trial(dict(SETTINGS), list(FAULTS), 1), Simplifier(BASE, moves=("faults", "settings")),
                  has_kill, 3, always, no_java)
    assert kinds(done.trial) == ["kill"] and done.trial.settings.get("workload.client") == "java"
    assert done.refused >= 1  # the move that put the client back to the base's, at least
    assert done.runs == done.candidates + 2 * (done.candidates - len(done.kept))  # refused ones ran nothing


def test_the_budget_stops_shrinking_and_the_smallest_so_far_wins() -> None:
    calls = []

    def budget_left() -> bool:
        return len(calls) < 3

    def shows(trial: Trial) -> bool:
        calls.append(trial)
        return has_kill(trial)
    done = shrink(Trial({}, list(FAULTS), 1), Simplifier(BASE), shows, 3, budget_left)
    assert done.out_of_budget and done.runs == 3 and kinds(done.trial) == ["kill", "pause"]


# --- what a trial counts as ----------------------------------------------------------------------------------

def scenario_with(acks: str, isr: int, idempotent: bool) -> dict[str, Any]:
    return {"topic": {"replication_factor": 3, "min_insync_replicas": isr},
            "workload": {"producers": {"config": {"acks": acks, "enable.idempotence": idempotent}}},
            "faults": [{"kind": "kill", "target": "partition-leader"}]}


def results_with(**counts: int) -> dict[str, Any]:
    return {"counts": {"acked": 1000, **counts}, "promises": {"idempotent": False, "ordered": False},
            "final_read_complete": True, "faults": {"applied": 3}}


def test_loss_under_acks1_is_allowed_unless_hunted_and_under_acks_all_is_a_finding() -> None:
    acks1 = scenario_with("1", 1, False)
    assert judged_anomalies(results_with(lost=5, divergent=5), acks1) == ([], {"lost": "acks=1",
                                                                                "divergent": "acks=1"})
    assert judged_anomalies(results_with(lost=5), acks1, ("lost",)) == (["lost"], {})
    assert judged_anomalies(results_with(lost=5), scenario_with("all", 2, False))[0] == ["lost"]


def test_duplicates_count_only_where_idempotence_was_promised() -> None:
    plain = results_with(duplicated=3)
    assert judged_anomalies(plain, scenario_with("all", 2, False)) == ([], {})  # not flagged without the promise
    promised = {**plain, "promises": {"idempotent": True, "ordered": True}}
    assert judged_anomalies(promised, scenario_with("all", 2, True))[0] == ["duplicated"]


def run_dir_with(tmp_path: Path, results: dict[str, Any] | None, scenario: dict[str, Any]) -> Path:
    run = tmp_path / "runs" / "s" / "20261128T000000.000000Z"
    run.mkdir(parents=True)
    (run / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    if results is not None:
        (run / "results.json").write_text(json.dumps(results))
    return run


@pytest.mark.parametrize("results, outcome, reason", [
    (None, "not_judged", "results.json: missing"),
    ({**results_with(), "cut_short": True}, "not_judged", "cut short"),
    ({**results_with(), "faults": {"applied": 0, "skip_reasons": ["no leader"]}}, "not_judged", "took effect"),
    ({**results_with(), "final_read_complete": False, "incomplete_partitions": [["chaos", 1]]}, "not_judged",
     "did not reach the high watermark"),
    (results_with(), "clean", ""),
    (results_with(lost=4), "finding", ""),
])
def test_a_trial_that_proved_nothing_is_not_judged(tmp_path: Path, results: dict[str, Any] | None, outcome: str,
                                                   reason: str) -> None:
    verdict = trial_verdict(run_dir_with(tmp_path, results, scenario_with("all", 2, False)))
    assert verdict.outcome == outcome and reason in verdict.reason
    assert trial_verdict(None).outcome == "error"


# --- a whole exploration, with a fake runner -----------------------------------------------------------------

@dataclass
class FakeOutcome:
    code: int
    run_dir: str | None


class Clock:
    """The explorer's clock: only a run moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeRunner:
    """Writes a run directory as `kchaos run` would leave it, 60 s of the clock later: loss whenever a leader
    kill is in the schedule; ``unjudged``: the first N runs are cut short."""

    def __init__(self, unjudged: int = 0) -> None:
        self.runs: list[dict[str, Any]] = []
        self.unjudged = unjudged
        self.clock = Clock()

    def __call__(self, variant: Variant, out: Path, logs: Path) -> FakeOutcome:
        self.clock.now += 60
        scenario = yaml.safe_load(variant.path.read_text())
        self.runs.append(scenario)
        run = out / variant.name / f"2026112{len(self.runs)}"
        run.mkdir(parents=True)
        (run / "scenario.yaml").write_text(yaml.safe_dump(scenario))
        lost = 7 if any(f["kind"] == "kill" for f in scenario["faults"]) else 0
        results = results_with(lost=lost)
        if len(self.runs) <= self.unjudged:
            results["cut_short"] = True
        (run / "results.json").write_text(json.dumps(results))
        (run / "report.html").write_text("<html></html>")
        return FakeOutcome(EXIT_INVALID if lost else EXIT_VALID, str(run))


def test_an_exploration_finds_shrinks_confirms_and_writes_its_folder(tmp_path: Path) -> None:
    runner = FakeRunner()
    out = tmp_path / "x"
    assert explore(KNOWN, 12, KNOWN_SEED, out, tmp_path / "junit.xml", runner=runner,
                   clock=runner.clock) == EXIT_INVALID
    data = json.loads((out / "exploration.json").read_text())
    assert data["findings"], data["trials"]
    finding = data["findings"][0]
    assert finding["anomaly"] == "lost" and finding["rate"] == [1, 1] and finding["trial"] == "t001"
    assert finding["steps"] == ["removed fault 1 (slow-network random-broker) (shown by run 1 of up to 1)"]
    text = (out / finding["scenario"]).read_text()
    shrunk = yaml.safe_load(text)
    assert [f["kind"] for f in shrunk["faults"]] == ["kill"] and shrunk["expect"] == {"lost": ">0"}
    assert text.startswith("# Found by `kchaos explore ") and "t001" in text and "1 of 1 runs" in text
    purposes = [t["purpose"] for t in data["trials"]]
    assert purposes[:3] == ["explore", "shrink", "confirm"]
    page = (out / "index.html").read_text()
    assert "Finding 1" in page and "removed fault 1" in page and 'class="finding explore"' in page
    drawn = sum(t["purpose"] == "explore" and t["outcome"] != "refused" for t in data["trials"])
    assert f"{drawn} trials drawn:" in page
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == str(len(data["findings"]))
    # every trial file is a scenario kchaos run takes as it is
    for t in data["trials"]:
        if t["scenario"]:
            load_space(KNOWN).base.model_validate(yaml.safe_load((out / t["scenario"]).read_text()))


def test_the_budget_ends_an_exploration_and_an_unjudged_trial_is_run_again(tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(KNOWN.read_text().replace("../scenarios/", str(REPO / "scenarios") + "/")
                     .replace("retries: 0", "retries: 1").replace("hunt: [lost]", "hunt: []"))
    runner = FakeRunner(unjudged=1)
    ex = Exploration(load_space(space), tmp_path / "x", KNOWN_SEED, budget_min=5, runner=runner, clock=runner.clock)
    ex.explore()
    assert [t.purpose for t in ex.trials[:2]] == ["explore", "retry"]
    assert ex.trials[0].outcome == "not_judged" and ex.trials[1].outcome == "allowed"  # acks=1 loss: allowed
    assert not ex.findings and ex.exit_code() == EXIT_VALID
    assert 0 < len(runner.runs) <= 5  # 60 s a run in a 5-minute budget


@dataclass
class StoppedOutcome:
    code: int
    run_dir: str | None
    output: str


def test_a_run_stopped_by_a_harness_error_is_not_judged_with_what_it_said(tmp_path: Path) -> None:
    """`kchaos run` that stops before it names its run directory (the cluster never recovered): the explorer
    finds the directory it made, and the trial's reason is the run's own last line."""
    def stopped(variant: Variant, out: Path, logs: Path) -> StoppedOutcome:
        (out / variant.name / "20261128T000000.000000Z" / "history").mkdir(parents=True)
        return StoppedOutcome(EXIT_HARNESS, None, "parsing...\nkchaos: the cluster did not recover after the "
                              "faults were healed: broker2 not ready after 90s\n")
    ex = Exploration(load_space(KNOWN), tmp_path / "x", 1, budget_min=5, runner=stopped)
    record = ex.run(ex.draw(1), "explore")
    assert record.outcome == "not_judged" and record.run_dir == "runs/acks1-known-loss-t001/20261128T000000.000000Z"
    assert record.reason == "the cluster did not recover after the faults were healed: broker2 not ready after 90s"
