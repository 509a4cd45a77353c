"""The Spark checker on a real Spark standalone cluster: the same job, the same results as the reference.

The test starts a master and two workers from this machine's pyspark
installation (``spark-class``), each in a container of its own on a Docker
network of its own, each worker on a core of its own
(spark_analysis/standalone.py: ``container_cluster``). The executors see the
test's temporary folder at the same path as this machine, and one folder in
it read-only; kchaos's code reaches them with the session. A Spark Connect
server in front of the cluster (``kchaos spark up --master spark://...``)
checks a history as the reference does, with the executors converting the
JSON lines to their Parquet caches (spark_analysis/ranged.py): the caches
must come out as folders of parts, read as the reference reads the lines,
also when cut into many small ranges. A run directory the executors do not
see fails its check in one line; once the server is killed, a check aimed
at it fails in one line. A run directory the executors cannot write (the
driver, here ``kchaos check --spark-master``'s own, can) must fall back to
the JSON lines as a read-only run directory does. The cluster is always
removed, even when the test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkers import reference
from checkers.anomalies import Promises
from checkers.history import read_history
from spark_analysis import cache, columnar, ranged
from spark_analysis import checker as spark_checker
from spark_analysis.server_state import SERVER_ENV, STATE
from spark_analysis.session import spark_session
from spark_analysis.standalone import ClusterError, Standalone, container_cluster, free_port
from test_checker_reference import make_run
from test_columnar import ODD_LINES, same_as_reference
from test_ranged import interleaved
from test_spark_checker import CASES, PROMISES, as_one, everything_at_once

pytestmark = pytest.mark.spark_cluster

BIN = Path(sys.executable).parent
# what the checks through the cluster's own paths judge (a read-only run directory, a server in front of the
# cluster): a few plain anomalies, each case apart; every anomaly at once goes through the executors below
FEW = ("lost", "duplicated", "divergent", "unexpected")


def few_anomalies() -> dict[str, list[Any]]:
    return as_one([CASES[name] for name in FEW])


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """Two workers of a core each, in containers that see the tests' temporary folder, one folder in it
    read-only."""
    try:
        with container_cluster(tmp_path_factory.mktemp("spark-cluster"), [tmp_path_factory.getbasetemp()],
                               read_only=tmp_path_factory.mktemp("executors-read-only")) as cluster:
            yield cluster
    except ClusterError as e:
        pytest.fail(str(e))


def test_a_run_directory_the_executors_cannot_write_means_reading_the_json_lines(spark_cluster: Standalone) -> None:
    assert spark_cluster.read_only is not None
    run = make_run(spark_cluster.read_only / "run", **few_anomalies(), scenario=PROMISES["idempotent"])
    expected = reference.check_run(run)
    result = subprocess.run([str(BIN / "kchaos"), "check", str(run), "--spark-master", spark_cluster.url],
                            capture_output=True, text=True, timeout=900, env=spark_cluster.env(run))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    written = json.loads((run / "results.json").read_text())
    assert {k: v for k, v in written.items() if k in expected and k != "checker"} == {
        k: v for k, v in expected.items() if k != "checker"}
    assert not [p.name for p in (run / "history").iterdir() if "parquet" in p.name]
    assert "cannot write the Parquet cache" in result.stderr and "part-00000.parquet" in result.stderr  # a task's
    assert "Read-only file system" in result.stderr  # the driver wrote its temporary folder: the executors could not


def kchaos(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "kchaos"), *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.timeout(900)
def test_a_check_through_a_server_in_front_of_the_cluster_judges_as_the_reference_and_a_dead_server_fails_one_check(
        spark_cluster: Standalone, tmp_path: Path) -> None:
    """``kchaos spark up --master spark://...``: a Spark Connect server whose jobs run on the cluster, so that
    the executors convert the history through it too (mapInArrow, no RDD); ``kchaos check`` through it judges
    as the reference (and so as local mode: tests/test_spark_checker.py). Then the server is killed."""
    env = {**spark_cluster.env(tmp_path), SERVER_ENV: str(tmp_path / "server")}
    for name in ("SPARK_REMOTE", "SPARK_MASTER"):
        env.pop(name, None)
    port = free_port()
    run = make_run(tmp_path / "run", **few_anomalies(), scenario=PROMISES["idempotent"])
    try:
        started = kchaos("spark", "up", "--port", str(port), "--master", spark_cluster.url, "--no-warm", env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.startswith(f"checker server up at sc://127.0.0.1:{port}")
        again = kchaos("spark", "up", "--port", str(port), env=env)
        assert again.returncode == 0 and again.stdout.startswith("already up")

        checked = kchaos("check", str(run), env=env)
        assert checked.returncode == 1, checked.stdout + checked.stderr  # anomalies: expectations not met
        assert "Using Spark's default log4j profile" not in checked.stdout + checked.stderr  # a quiet console
        # the jobs really ran on the cluster: the server is its application, with an executor in each container
        state = spark_cluster.state()
        assert [app["name"] for app in state["activeapps"]] == ["kchaos-check-server"]
        assert len({w["host"] for w in state["workers"]}) == 2
        assert [(w["cores"], w["coresused"]) for w in state["workers"]] == [(1, 1), (1, 1)]
        assert checked.stdout.startswith(f"checked through the Spark Connect server at sc://127.0.0.1:{port}")
        for name in ("sends.parquet", "reads.parquet"):  # converted by the executors: a folder of parts each
            assert (run / "history" / name / ranged.META).is_file()
        written = json.loads((run / "results.json").read_text())
        expected = reference.check_run(run)
        assert written["checker"] == "spark" and expected.pop("checker") == "python"
        assert {k: v for k, v in written.items() if k in expected and k != "checker"} == expected

        unshared = Path(tempfile.mkdtemp(prefix="kchaos-not-shared-"))  # outside what the containers see
        try:
            make_run(unshared / "run", **few_anomalies(), scenario=PROMISES["idempotent"])
            alone = kchaos("check", str(unshared / "run"), env=env)
        finally:
            shutil.rmtree(unshared)
        assert alone.returncode == 2 and len(alone.stderr.splitlines()) == 1, alone.stderr
        assert alone.stderr.startswith(f"kchaos: the Spark executors cannot read {unshared}/run/history/sends.jsonl")
        assert "same path" in alone.stderr

        state = json.loads((tmp_path / "server" / STATE).read_text())
        os.kill(state["pid"], signal.SIGKILL)  # a crash, or the kernel's out-of-memory killer
        kept = {p: p.read_bytes() for p in (run / "results.json", *sorted((run / "history").glob("*.jsonl")))}
        failed = kchaos("check", str(run), "--spark-remote", f"sc://127.0.0.1:{port}", env=env)
        assert failed.returncode == 2 and len(failed.stderr.splitlines()) == 1, failed.stderr
        assert failed.stderr.startswith("kchaos: the Spark checker failed: ")
        assert {p: p.read_bytes() for p in kept} == kept  # nothing recorded is lost
        status = kchaos("spark", "status", env=env)
        assert status.stdout.startswith("no checker server is up")
    finally:
        stopped = kchaos("spark", "down", env=env)
    assert stopped.returncode == 0 and not (tmp_path / "server" / "tmp").exists()


# --- in this process, on a session of the cluster's (last: it holds the worker's cores until the module ends) ---


@pytest.fixture(scope="module")
def cluster_session(spark_cluster: Standalone, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    env = spark_cluster.env(tmp_path_factory.mktemp("session"))
    with pytest.MonkeyPatch.context() as mp:  # the executors reach this driver, and run this Python
        for name in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON"):
            mp.setenv(name, env[name])
        session = spark_session(spark_cluster.url, history_bytes=0)
        try:
            yield session
        finally:
            session.stop()


@pytest.fixture
def tiny_ranges(cluster_session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every conversion by the cluster's executors, in ranges of a line or two, each in blocks of a line or two."""
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 150)
    monkeypatch.setattr(ranged, "RANGE_BYTES", 200)
    tasks = ranged.on_executors(cluster_session)

    def convert(source: Path, layout: columnar.Layout, label: str, target: Path, metadata: Any) -> Any:
        return ranged.convert_ranges(source, layout, label, target, metadata, tasks)

    monkeypatch.setattr(cache, "convert", convert)


CLUSTER_LINES = {**{f"odd: {k}": v for k, v in ODD_LINES.items()},
                 "cut short in the middle": '{"producer": "p0", "seq": ', "two objects": '{"a": 1}{"b": 2}',
                 "bad field": '{"producer": "p0", "seq": 1.0, "topic": "t", "partition": 0, "status": "fail"}'}


@pytest.mark.parametrize("name", sorted(CLUSTER_LINES))
def test_lines_converted_by_the_executors_read_as_the_reference_reads_them(tiny_ranges: None, tmp_path: Path,
                                                                           name: str) -> None:
    h = interleaved(20)
    h["sends"].insert(9, CLUSTER_LINES[name])
    same_as_reference(make_run(tmp_path, **h))


@pytest.mark.parametrize("name", ["everything at once", "lost", "duplicated"])
def test_histories_converted_by_the_executors_are_judged_as_the_reference_judges_them(
        cluster_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 150)
    monkeypatch.setattr(ranged, "RANGE_BYTES", 300)
    history = everything_at_once() if name == "everything at once" else CASES[name]
    run = make_run(tmp_path, **history)
    with (run / "history" / "reads.jsonl").open("a") as f:
        f.write('{"consumer": "c0", "gr')  # the harness died mid-line: a note on every check
    promises = Promises(idempotent=True, ordered=True)
    expected = reference.check(read_history(run / "history"), promises)
    judged = spark_checker.check(cluster_session, run / "history", promises)
    assert judged.pop("checker") == "spark" and expected.pop("checker") == "python"
    assert judged == expected
    assert len(ranged.parts_of(run / "history" / "reads.parquet")) > 1
