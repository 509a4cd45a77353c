"""The warm checker server (``kchaos spark up|status|down``, spark_analysis/server.py) and where a check runs.

The pure logic (which server a check goes through, what the state says,
the command line's refusals) is tested here without Spark; a real server,
in front of a real standalone cluster, in tests/test_spark_cluster.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from catalogue.exits import HarnessError
from harness.cli import main
from spark_analysis import server
from spark_analysis.server import for_runs, status_line
from spark_analysis.server_state import SERVER_CLASS, SERVER_ENV, ServerState, is_server_process, running
from spark_analysis.session import SMALL_HISTORY, remote_url, spark_conf, sql_settings

BIN = Path(sys.executable).parent


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A server folder of the test's own, and no Spark location from the environment."""
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "server"))
    for name in ("SPARK_REMOTE", "SPARK_MASTER"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "server"


@pytest.fixture
def looks_like_a_server() -> Iterator[int]:
    """A process whose command line names the Connect server's class (a sleep given it as an argument)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", SERVER_CLASS])
    while not is_server_process(proc.pid):  # the child's command line is its own once it has exec'd
        time.sleep(0.01)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def write_state(folder: Path, pid: int, url: str = "sc://127.0.0.1:15999") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    server.write_state(folder, ServerState(url=url, pid=pid, master="local[*]", log="log",
                                           started=time.time()))


def test_a_check_goes_through_the_server_only_while_it_runs_and_nothing_points_elsewhere(
        folder: Path, looks_like_a_server: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert remote_url() is None  # no server: an in-process session
    write_state(folder, os.getpid())  # a state whose process is not a server (a reused pid): none
    assert running() is None and remote_url() is None
    write_state(folder, looks_like_a_server)
    assert running() is not None and remote_url() == "sc://127.0.0.1:15999"
    assert remote_url("local[2]") is None and remote_url("spark://10.0.0.1:7077") is None  # a master asked for
    assert remote_url("sc://10.0.0.9:15002") == "sc://10.0.0.9:15002"
    monkeypatch.setenv("SPARK_MASTER", "spark://10.0.0.1:7077")
    assert remote_url() is None
    monkeypatch.setenv("SPARK_REMOTE", "sc://10.0.0.2:15002")
    assert remote_url() == "sc://10.0.0.2:15002"


def test_status_says_whether_a_server_is_up(folder: Path, looks_like_a_server: int,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark", "status"]) == 0
    assert capsys.readouterr().out.startswith("no checker server is up")
    write_state(folder, looks_like_a_server)
    assert main(["spark", "status"]) == 0
    assert capsys.readouterr().out.startswith("checker server up at sc://127.0.0.1:15999")
    assert "not warmed" in status_line(running())


def test_a_series_of_runs_pointed_elsewhere_starts_no_server(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                                             looks_like_a_server: int) -> None:
    with for_runs(False):
        assert not folder.exists()
    monkeypatch.setenv("SPARK_REMOTE", "sc://10.0.0.2:15002")
    with for_runs(True):
        assert not folder.exists()
    monkeypatch.delenv("SPARK_REMOTE")
    write_state(folder, looks_like_a_server)  # one is up: used as it is, and left up
    with for_runs(True):
        pass
    assert running() is not None


def test_a_taken_port_is_one_line(folder: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(HarnessError, match=r"^port \d+ of 127.0.0.1 is taken by another program"):
            server.up(port=s.getsockname()[1], folder=folder)


@pytest.mark.parametrize("argv, says", [
    (["check", "RUN", "--spark-remote", "spark://10.0.0.1:7077"], "not a Spark Connect URL"),
    (["check", "RUN", "--spark-remote", "sc://a:1", "--spark-master", "local[2]"], "not allowed with argument"),
])
def test_where_to_check_is_refused_in_one_line(tmp_path: Path, argv: list[str], says: str) -> None:
    (tmp_path / "RUN").mkdir()
    result = subprocess.run([str(BIN / "kchaos"), *argv], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1


def test_each_check_sizes_its_session_by_runtime_settings() -> None:
    small, big = sql_settings(2, SMALL_HISTORY - 1), sql_settings(2, 50 * 640 * 2 ** 20)
    assert small["spark.sql.shuffle.partitions"] == "4" and small["spark.sql.codegen.wholeStage"] == "false"
    assert big["spark.sql.shuffle.partitions"] == "50" and big["spark.sql.adaptive.enabled"] == "true"
    assert all(spark_conf("local[2]", SMALL_HISTORY - 1)[key] == value for key, value in small.items())


def test_a_series_of_runs_starts_a_server_in_the_background_and_stops_it_even_when_stopped(
        folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The orchestration alone (a real server: tests/test_spark_cluster.py): ``up`` runs in a thread, unwarmed,
    while the runs go on; ``down`` when they end, also when a nightly is stopped while the server still starts;
    a server that cannot start is a warning, and the runs go on without it."""
    state = ServerState(url="sc://127.0.0.1:15999", pid=1, master="local[*]", log="log",
                        started=time.time())
    calls: list[str] = []
    release = threading.Event()  # set: ``up`` returns
    up_now: list[ServerState] = []

    def up(folder: Path, warm: bool) -> tuple[ServerState, bool]:
        calls.append(f"up warm={warm}")
        release.wait(10)
        up_now.append(state)
        return state, True

    def down(folder: Path) -> ServerState | None:
        calls.append("down")
        release.set()  # a server still starting is stopped: its start returns
        return up_now.pop() if up_now else None

    monkeypatch.setattr(server, "up", up)
    monkeypatch.setattr(server, "down", down)
    release.set()
    with for_runs(True):  # the runs end after the server is up
        while not up_now:
            time.sleep(0.01)
        time.sleep(0.1)
    assert calls == ["up warm=False", "down", "down"]
    assert capsys.readouterr().out.splitlines() == [status_line(state),
                                                    "stopped the checker server at sc://127.0.0.1:15999"]

    calls.clear()
    release.clear()
    with pytest.raises(KeyboardInterrupt):
        with for_runs(True):
            while not calls:
                time.sleep(0.01)
            raise KeyboardInterrupt  # the nightly stopped while its server still starts
    assert calls == ["up warm=False", "down", "down", "down"]  # the started server went at once
    assert capsys.readouterr().out.splitlines() == ["stopped the checker server at sc://127.0.0.1:15999"]

    def cannot(folder: Path, warm: bool) -> tuple[ServerState, bool]:
        raise HarnessError("port 15002 of 127.0.0.1 is taken by another program")

    monkeypatch.setattr(server, "up", cannot)
    calls.clear()
    with for_runs(True):
        time.sleep(0.2)
    assert calls == ["down", "down"] and capsys.readouterr().out == ""  # nothing to stop, and nothing said
