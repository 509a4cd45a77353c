"""Sharding the nightly: a partition every shard computes alike, and shard folders that merge into what one
unsharded nightly writes (matrix and JUnit byte for byte). No cluster: the runs are made by hand."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker

import pytest

from catalogue.exits import HarnessError
from harness.cli import main
from clusters.node import LABEL_CLUSTER, LABEL_WORKDIR
from harness.nightly import RUN_STOP_TIMEOUT_S, Variant, nightly, nightly_scenarios
from harness.scenario import load_scenario
from harness.shard import Shard, expected_seconds, parse_shard, partition
from rundir.layout import INDEX, NIGHTLY_LOGS
from spark_analysis.server_state import SERVER_ENV
from verdicts.junit import TIMINGS, Outcome, load_outcomes, load_shards, save_outcome, save_shard, save_timings
from test_report import Dom, make_run

REPO = Path(__file__).resolve().parent.parent
CATALOG = ["acks1-leader-kill.yaml", "acksall-leader-kill.yaml", "acks0-leader-kill.yaml"]
BROKEN = "name: broken\nnightly: true\nno_such_key: 1\n"


def catalog_durations() -> dict[str, float]:
    chosen, broken = nightly_scenarios(REPO / "scenarios")
    assert not broken
    return {v.name: v.expected_s for v in chosen}


def loads(durations: dict[str, float], shards: list[list[str]]) -> list[float]:
    return [sum(durations[n] for n in names) for names in shards]


# --- the partition ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, shard", [("1/1", Shard(1, 1)), ("2/4", Shard(2, 4)), (" 4 / 4 ", Shard(4, 4))])
def test_shard_parses_k_of_n(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard and str(shard) == f"{shard.index}/{shard.count}"


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "2", "2/4/8", "a/b", "-1/4", ""])
def test_shard_refuses_anything_but_k_of_n(text: str) -> None:
    with pytest.raises(HarnessError):
        parse_shard(text)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 30])
def test_every_variant_runs_in_exactly_one_shard(count: int) -> None:
    durations = catalog_durations()
    shards = partition(durations, count)
    assert len(shards) == count
    names = [n for shard in shards for n in shard]
    assert sorted(names) == sorted(durations) and len(names) == len(set(names))


def test_the_partition_depends_on_the_inputs_alone() -> None:
    durations = catalog_durations()
    expected = partition(durations, 4)
    items = list(durations.items())
    for seed in range(5):  # another order of the same variants: the same shards
        random.Random(seed).shuffle(items)
        assert partition(dict(items), 4) == expected


def test_ties_go_by_name_then_by_shard_number() -> None:
    assert partition({"c": 10.0, "a": 10.0, "b": 10.0, "d": 30.0}, 2) == [["d"], ["a", "b", "c"]]
    assert partition({"b": 5.0, "a": 5.0}, 3) == [["a"], ["b"], []]


def test_the_real_catalog_balances_within_20_percent_at_4_shards() -> None:
    durations = catalog_durations()
    shards = partition(durations, 4)
    per_shard = loads(durations, shards)
    mean = sum(per_shard) / len(per_shard)
    figures = "; ".join(f"shard {i}/4: {s:.0f} s ({', '.join(names)})"
                        for i, (s, names) in enumerate(zip(per_shard, shards), 1))
    assert max(per_shard) <= 1.2 * mean and min(per_shard) >= 0.8 * mean, figures


def test_the_expected_duration_is_load_settle_and_an_overhead_growing_with_the_cluster() -> None:
    path = REPO / "scenarios" / "acks1-leader-kill.yaml"
    base = expected_seconds(load_scenario(path, ["schedule.warmup_s=10"]))
    assert expected_seconds(load_scenario(path, ["workload.duration_s=90"])) == base + 30
    assert expected_seconds(load_scenario(path, ["schedule.settle_s=25"])) == base + 15
    assert expected_seconds(load_scenario(path, ["cluster.brokers=5"])) > base
    assert expected_seconds(load_scenario(path, ["schedule.warmup_s=30"])) == base  # warm-up is part of the load


# --- shards and their merge --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def made_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One finished run directory per nightly variant of CATALOG, made once: every fake nightly copies them."""
    root = tmp_path_factory.mktemp("made")
    chosen, _ = nightly_scenarios(catalog(tmp_path_factory.mktemp("catalog"), broken=False))
    return {v.name: make_run(root / v.name, v.path.name, lossy=v.name.startswith("acks1"),
                             stamp=f"2026010{i + 1}T000000.000000Z") for i, v in enumerate(chosen)}


def catalog(folder: Path, broken: bool = True) -> Path:
    for name in CATALOG:
        shutil.copy(REPO / "scenarios" / name, folder / name)
    if broken:
        (folder / "broken.yaml").write_text(BROKEN)
    return folder


def fake_runner(made: dict[str, Path], ran: list[str]):
    """A runner that leaves the made run of the variant in out, as `kchaos run` would, and says so."""

    def run(variant: Variant, out: Path, log_dir: Path) -> Outcome:
        ran.append(variant.name)
        source = made[variant.name]
        target = out / source.parent.name / source.name
        shutil.copytree(source, target, dirs_exist_ok=True)  # a second night may find it
        code = 1 if variant.name.startswith("acksall") else 0
        text = (f"run directory: {target.relative_to(out)}\n"
                f"verdict: {'valid; expectations NOT met: lost is 0' if code else 'ok'}\n")
        return Outcome(variant.name, variant.path, code, 60.0 + len(variant.name), text, str(target))

    return run


def test_two_shards_merge_into_exactly_what_one_nightly_writes(
        made_runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scenarios").mkdir()
    scenarios = catalog(tmp_path / "scenarios")
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    ran: list[list[str]] = [[], [], []]
    one = tmp_path / "unsharded" / "runs"
    assert nightly(scenarios, one, one / "junit.xml", fake_runner(made_runs, ran[0])) == 2  # broken.yaml
    codes = [nightly(scenarios, tmp_path / f"shard-{k}", tmp_path / f"shard-{k}" / "junit.xml",
                     fake_runner(made_runs, ran[k]), shard=Shard(k, 2)) for k in (1, 2)]
    assert codes == [2, 2]  # every shard reports the broken file
    out = capsys.readouterr().out
    assert "shard 1/2 took" in out and "shard 2/2 took" in out and "(expected" in out
    assert sorted(ran[1] + ran[2]) == sorted(ran[0]) and not set(ran[1]) & set(ran[2]) and ran[1] and ran[2]

    merged = tmp_path / "merged" / "runs"
    assert main(["matrix", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"), "--out", str(merged),
                 "--junit", str(merged / "junit.xml")]) == 0
    assert (merged / INDEX).read_bytes() == (one / INDEX).read_bytes()
    assert (merged / "junit.xml").read_bytes() == (one / "junit.xml").read_bytes()
    links = [a["href"] for a in Dom((merged / INDEX).read_text()).having("a", "run")]
    assert links and all((merged / link).is_file() for link in links)
    text = summary.read_text()
    assert "shard 1/2:" in text and "shard 2/2:" in text and "| broken | error:" in text
    assert "| acksall-leader-kill@kraft | failure:" in text

    # the same merge into the first shard's folder: the same page and JUnit
    assert main(["matrix", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"),
                 "--junit", str(tmp_path / "shard-1" / "junit.xml")]) == 0
    assert (tmp_path / "shard-1" / INDEX).read_bytes() == (one / INDEX).read_bytes()
    assert (tmp_path / "shard-1" / "junit.xml").read_bytes() == (one / "junit.xml").read_bytes()
    # and again: merging is idempotent
    assert main(["matrix", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"), "--out", str(merged),
                 "--junit", str(merged / "junit.xml")]) == 0
    assert (merged / "junit.xml").read_bytes() == (one / "junit.xml").read_bytes()


def test_a_merge_refuses_two_different_runs_under_one_name(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    for root, seconds in (("a", 1.0), ("b", 2.0)):
        save_outcome(tmp_path / root / NIGHTLY_LOGS, Outcome("x", Path("x.yaml"), 0, seconds, "ok\n"), tmp_path)
    assert main(["matrix", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "differ" in err
    assert not (tmp_path / "m").exists()


def test_a_merge_says_which_shards_are_missing_and_refuses_shards_of_two_splits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = {"runs": [], "expected_s": 1.0, "wall_s": 1.0, "durations": "estimated from the scenarios"}
    for root, shard in (("a", "1/3"), ("b", "3/3"), ("c", "2/4")):
        save_shard(tmp_path / root / NIGHTLY_LOGS, shard, record)
    assert main(["matrix", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0
    assert "shard(s) 2 of 3 missing" in capsys.readouterr().err
    assert main(["matrix", str(tmp_path / "a"), str(tmp_path / "c"), "--out", str(tmp_path / "n")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "split 3 and 4 ways" in err


def test_measured_wall_times_replace_the_estimates_only_when_they_cover_every_variant(tmp_path: Path) -> None:
    from harness.nightly import durations

    chosen, _ = nightly_scenarios(REPO / "scenarios")
    logs = tmp_path / NIGHTLY_LOGS
    estimated, source = durations(chosen, logs)
    assert source == "estimated from the scenarios"
    outcomes = [Outcome(v.name, v.path, 0, 100.0 + i, "") for i, v in enumerate(chosen)]
    save_timings(logs, outcomes[1:])
    assert durations(chosen, logs) == (estimated, "estimated from the scenarios")  # one has none
    save_timings(logs, [Outcome(chosen[0].name, chosen[0].path, 2, 5.0, ""), *outcomes[1:]])
    assert durations(chosen, logs)[0] == estimated  # a run that was not judged says nothing of its length
    save_timings(logs, outcomes)
    measured, source = durations(chosen, logs)
    assert source.startswith("measured") and measured == {o.name: o.seconds for o in outcomes}


def test_shards_never_change_the_timings_they_balance_by(
        made_runs: dict[str, Path], tmp_path: Path) -> None:
    """Shards run one after the other into one folder read the same timings: only whole nightlies write them."""
    (tmp_path / "scenarios").mkdir()
    scenarios = catalog(tmp_path / "scenarios", broken=False)
    out = tmp_path / "runs"
    assert nightly(scenarios, out, out / "junit.xml", fake_runner(made_runs, [])) == 1
    timings = (out / NIGHTLY_LOGS / TIMINGS).read_bytes()
    ran: list[list[str]] = [[], []]
    for k in (1, 2):
        nightly(scenarios, out, out / "junit.xml", fake_runner(made_runs, ran[k - 1]), shard=Shard(k, 2))
        assert (out / NIGHTLY_LOGS / TIMINGS).read_bytes() == timings
        assert load_shards(out / NIGHTLY_LOGS)[0]["durations"].startswith("measured")
    assert sorted(ran[0] + ran[1]) == sorted(made_runs)


# --- a real sharded nightly --------------------------------------------------------------------------------

TINY = {  # three short runs on one-broker clusters: two variants of a quiet one, and a producer crash
    "tiny-quiet.yaml": """\
nightly: [zookeeper, kraft]
cluster: {brokers: 1, zookeepers: 1, controllers: 1}
topic: {partitions: 2, replication_factor: 1}
workload: {duration_s: 5, producers: {count: 1, rate: 200}, consumers: {count: 1}}
schedule: {warmup_s: 1, settle_s: 1, final_read_timeout_s: 30}
expect: {valid: true}
""",
    "tiny-producer-crash.yaml": """\
nightly: true
cluster: {brokers: 1, zookeepers: 1}
topic: {partitions: 2, replication_factor: 1}
workload: {duration_s: 5, producers: {count: 1, rate: 200}, consumers: {count: 1}}
faults: [{kind: client-crash, target: producer, interval_s: 2, duration_s: 1}]
schedule: {warmup_s: 1, settle_s: 1, final_read_timeout_s: 30}
expect: {lost: 0}
""",
}


def tiny_catalog(folder: Path) -> Path:
    folder.mkdir()
    for name, text in TINY.items():
        (folder / name).write_text(text)
    return folder


def test_the_tiny_catalog_loads_and_splits_two_and_one(tmp_path: Path) -> None:
    chosen, broken = nightly_scenarios(tiny_catalog(tmp_path / "scenarios"))
    assert not broken and len(chosen) == 3
    assert sorted(len(s) for s in partition({v.name: v.expected_s for v in chosen}, 2)) == [1, 2]


@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_a_real_nightly_in_two_shards_merges_into_the_unsharded_matrix_and_junit(tmp_path: Path) -> None:
    scenarios = tiny_catalog(tmp_path / "scenarios")
    partitions = []
    for k in (1, 2):
        result = subprocess.run([sys.executable, "-m", "harness.cli", "nightly", "--scenarios", str(scenarios),
                                 "--out", str(tmp_path / f"shard-{k}"), "--shard", f"{k}/2"],
                                capture_output=True, text=True, timeout=300, cwd=REPO, env=own_server(tmp_path))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        assert f"shard {k}/2 took" in result.stdout

        partitions.append([line for line in result.stdout.splitlines() if line.startswith("nightly: shard ")])
    assert partitions[0] == partitions[1] and len(partitions[0]) == 2  # both computed the same split

    merged = tmp_path / "merged"
    assert main(["matrix", str(tmp_path / "shard-1"), str(tmp_path / "shard-2"), "--out", str(merged),
                 "--junit", str(merged / "junit.xml")]) == 0
    one = tmp_path / "one"  # the same run directories and records, copied into one folder by hand
    for k in (1, 2):
        shutil.copytree(tmp_path / f"shard-{k}", one, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(INDEX, "junit.xml", "cluster"))
    assert main(["matrix", str(one), "--junit", str(one / "junit.xml")]) == 0
    assert (merged / INDEX).read_bytes() == (one / INDEX).read_bytes()
    assert (merged / "junit.xml").read_bytes() == (one / "junit.xml").read_bytes()
    outcomes = load_outcomes(merged / NIGHTLY_LOGS)
    assert sorted(o.name for o in outcomes) == ["tiny-producer-crash", "tiny-quiet@kraft", "tiny-quiet@zookeeper"]
    assert all(o.code == 0 for o in outcomes)
    links = [a["href"] for a in Dom((merged / INDEX).read_text()).having("a", "run")]
    assert len(links) == 3 and all((merged / link).is_file() and link.endswith("report.html") for link in links)


def test_nightly_prints_each_runs_overhead_beyond_its_workload(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The overhead is a run's wall time less the workload and the settling the scenario asks for."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "one.yaml").write_text("name: one\nnightly: true\nworkload: {duration_s: 40}\n"
                                        "schedule: {settle_s: 5}\n")
    (scenarios / "two.yaml").write_text("name: two\nnightly: true\nworkload: {duration_s: 60}\n"
                                        "schedule: {settle_s: 10}\n")
    walls = {"one": 57.5, "two": 82.0}

    def fake_run(variant: Variant, out_dir: Path, log_dir: Path) -> Outcome:
        return Outcome(variant.name, variant.path, 0, walls[variant.name], "verdict: valid; expectations met\n")

    assert nightly(scenarios, tmp_path / "runs", tmp_path / "junit.xml", runner=fake_run) == 0
    printed = capsys.readouterr().out
    assert "one: 58 s, of which overhead 12.5 s" in printed and "two: 82 s, of which overhead 12.0 s" in printed
    assert "per-run overhead: mean 12.2 s, max 12.5 s over 2 run(s)" in printed
    assert "by phase" not in printed  # the runs printed no phases line


def test_nightly_splits_the_overhead_by_the_phases_each_run_printed(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`kchaos run`'s phases line, averaged: each phase outside the load, what the load and the settling took
    beyond the scenario's, and the rest of the wall time; the parts add up to the overhead."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("one", "two"):
        (scenarios / f"{name}.yaml").write_text(f"name: {name}\nnightly: true\nworkload: {{duration_s: 40}}\n"
                                                "schedule: {settle_s: 5}\n")
    printed_phases = {
        "one": "phases: starting the cluster 5.0 s, load 40.2 s, settling 5.0 s, reading the replicas' disks 3.0 s, "
               "check 8.0 s, report 1.0 s",
        "two": "phases: starting the cluster 7.0 s, load 41.8 s, settling 9.0 s, check 6.0 s, report 2.0 s"}

    def fake_run(variant: Variant, out_dir: Path, log_dir: Path) -> Outcome:
        output = f"run directory: x\n{printed_phases[variant.name]}\nverdict: valid; expectations met\n"
        return Outcome(variant.name, variant.path, 0, {"one": 63.0, "two": 67.0}[variant.name], output)

    assert nightly(scenarios, tmp_path / "runs", tmp_path / "junit.xml", runner=fake_run) == 0
    printed = capsys.readouterr().out
    assert "per-run overhead: mean 20.0 s" in printed
    assert ("per-run overhead by phase, mean over 2 run(s): starting the cluster 6.0 s, reading the replicas' disks "
            "1.5 s, check 7.0 s, report 1.5 s, load and settling past the scenario's 3.0 s, outside the phases 1.0 s"
            in printed)


@pytest.mark.cluster
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_nightly_stops_its_run_and_the_runs_cluster(tmp_path: Path, sig: signal.Signals,
                                                              nothing_left: Callable[[str, Path], None]) -> None:
    """A nightly stopped mid-run (CI cancelling the job, Ctrl-C) stops that run, which tears its cluster down,
    before the nightly says so: no run or container outlives it (before the fix the run went on alone)."""
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    (scenarios / "long.yaml").write_text(TINY["tiny-quiet.yaml"].replace("nightly: [zookeeper, kraft]", "nightly: true")
                                         .replace("duration_s: 5", "duration_s: 120"))
    proc = subprocess.Popen(["env", "--default-signal=INT", sys.executable, "-m", "harness.cli", "nightly",
                             "--scenarios", str(scenarios), "--out", str(tmp_path / "out")], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=own_server(tmp_path))
    deadline = time.monotonic() + 300
    run = None
    while time.monotonic() < deadline and run is None:
        found = list((tmp_path / "out").glob("*/*/history/sends.jsonl"))
        if found and found[0].stat().st_size > 0:
            run = found[0].parent.parent
        time.sleep(0.5)
    assert run is not None, "the run never started"
    runs = [p for p in Path("/proc").glob("[0-9]*") if b"harness.cli\x00run" in _cmdline(p)
            and str(scenarios).encode() in _cmdline(p)]
    assert len(runs) == 1
    cluster_id = docker.from_env().containers.list(
        all=True, filters={"label": f"{LABEL_WORKDIR}={run / 'cluster'}"})[0].labels[LABEL_CLUSTER]
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=RUN_STOP_TIMEOUT_S + 60)
    assert proc.returncode != 0
    assert _cmdline(runs[0]) == b"", "the run outlived the nightly"
    assert "kchaos: " in stdout + stderr  # the run said it was stopped, and the nightly too
    nothing_left(cluster_id, run / "cluster")


def own_server(tmp_path: Path) -> dict[str, str]:
    """The environment of a nightly whose runs each check in a session of their own, as before the checker server
    (whose start and stop for a nightly are tests/test_spark_server.py's; a real one, tests/test_spark_cluster.py's):
    what these tests prove does not need one, and starting it would cost them half a minute."""
    return {**os.environ, "SPARK_MASTER": "local[*]", SERVER_ENV: str(tmp_path / "server")}


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_versions_are_an_axis_and_impossible_pairs_are_left_out(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Each nightly run once per Kafka release named, and per client release; ZooKeeper on 4.x is no run (a line
    says so), not a broken file."""
    chosen, broken = nightly_scenarios(tiny_catalog(tmp_path / "scenarios"), ("3.5.2", "4.4.0"), ("2.3.0",))
    assert not broken
    assert sorted(v.name for v in chosen) == [
        "tiny-producer-crash@kafka-3.5.2@client-2.3.0",
        "tiny-quiet@kraft@kafka-3.5.2@client-2.3.0", "tiny-quiet@kraft@kafka-4.4.0@client-2.3.0",
        "tiny-quiet@zookeeper@kafka-3.5.2@client-2.3.0"]
    quiet = next(v for v in chosen if v.name == "tiny-quiet@kraft@kafka-4.4.0@client-2.3.0")
    assert quiet.overrides == ("cluster.metadata=kraft", "cluster.kafka_version=4.4.0", "workload.client_version=2.3.0")
    out = capsys.readouterr().out
    assert "nightly: left out tiny-producer-crash on kafka-4.4.0: Kafka 4.4.0 has no ZooKeeper mode" in out
    assert "nightly: left out tiny-quiet@zookeeper on kafka-4.4.0" in out
