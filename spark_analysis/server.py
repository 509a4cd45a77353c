"""The warm checker server: one Spark Connect server on this machine that every check goes through while it is up.

Why: without it every ``kchaos run`` starts a driver JVM, warms it on a
made-up history and checks once, so a 25-run nightly starts 25 JVMs and
JIT-warms 25 times. ``kchaos spark up`` starts the server once with the
settings a long-lived checker wants (C2 and the throughput collector: it
stays warm), checks a made-up run through it to warm it, and writes down
where it listens; each check then opens a session of its own on it
(session.py's ``remote_url``), sized for its history by runtime settings,
and releases it when done. ``kchaos spark down`` stops it.

It is pyspark's own ``start-connect-server.sh`` (``spark-daemon.sh`` keeps
its pid file and its console log), listening on the loopback interface
only. Its state (this module's ``state.json``, the pid file, the log and the
shuffle files) lives in one folder: KCHAOS_SPARK_SERVER, else one per user
in the temp folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

from catalogue.exits import EXIT_VALID, HarnessError
from spark_analysis.server_state import (SERVER_CLASS, STATE, ServerState, is_server_process, running,
                                         server_dir)

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002  # Spark Connect's own default
APP_NAME = "kchaos-check-server"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
# Spark removes a released session's shuffle files when the driver collects its garbage; a server that is
# mostly idle between checks would do that rarely (default every 30 minutes), and the files would pile up.
CLEANER_INTERVAL = "1min"


def port_taken(port: int) -> bool:
    """Whether something listens on this port of the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_home() -> Path:
    """pyspark's own folder: its jars, bin/ and sbin/ scripts are a Spark distribution's."""
    import pyspark

    return Path(pyspark.__file__).parent


def server_env(folder: Path, master: str = "local[*]") -> dict[str, str]:
    """The environment of the server's scripts: pyspark's Spark, this folder for pid file, log and configuration
    (so no other Spark configuration on the machine applies), this interpreter for Python tasks. Its driver
    listens on the loopback interface when its executors run on this machine; a cluster's must reach it, at
    the address Spark picks or the one SPARK_LOCAL_IP names."""
    from spark_analysis.session import on_this_machine

    conf_dir = folder / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    local_ip = {"SPARK_LOCAL_IP": "127.0.0.1"} if on_this_machine(master) else {}
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_PID_DIR": str(folder),
            "SPARK_LOG_DIR": str(folder), "SPARK_CONF_DIR": str(conf_dir), **local_ip,
            "PYSPARK_PYTHON": sys.executable, "SPARK_IDENT_STRING": "kchaos"}


def server_conf(master: str, port: int, folder: Path) -> dict[str, str]:
    """The server's configuration: the checker's (session.py), sized for big histories (a warm JVM repays C2),
    listening on the loopback interface only, its shuffle files in its own folder."""
    from spark_analysis.session import spark_conf

    conf = {key: value for key, value in spark_conf(master).items() if key not in ("spark.master", "spark.app.name")}
    conf.update({
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.local.dir": str(folder / "tmp"),
        "spark.cleaner.periodicGC.interval": CLEANER_INTERVAL,
    })
    return conf


def up(port: int = DEFAULT_PORT, master: str = "local[*]", warm: bool = True,
       folder: Path | None = None) -> tuple[ServerState, bool]:
    """Start the server (and warm it) unless it runs already; its state, and whether this call started it."""
    folder = folder or server_dir()
    state = running(folder)
    if state is not None:
        return state, False
    if port_taken(port):
        raise HarnessError(f"port {port} of 127.0.0.1 is taken by another program; choose another with --port")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATE).unlink(missing_ok=True)
    env = server_env(folder, master)
    # --name after the script's own (its "Spark Connect server"): the application a cluster lists is kchaos's
    args = [str(spark_home() / "sbin" / "start-connect-server.sh"), "--master", master, "--name", APP_NAME]
    for key, value in server_conf(master, port, folder).items():
        args += ["--conf", f"{key}={value}"]
    started = subprocess.run(args, env=env, capture_output=True, text=True)
    pid = started_pid(folder)
    if started.returncode != 0 or pid is None:
        why = (started.stdout + started.stderr).strip().splitlines()
        raise HarnessError(f"the Spark Connect server did not start: {why[-1] if why else 'no pid file'}")
    console = next(folder.glob(f"spark-*{SERVER_CLASS}-*.out"), folder)
    url = f"sc://127.0.0.1:{port}"
    state = ServerState(url=url, pid=pid, master=master, log=str(console), started=time.time())
    write_state(folder, state)  # from here on, ``down`` can stop it
    try:
        wait_until_serving(url, pid, console)
        if warm:
            state = replace(state, warm_s=warm_up(url, master))
            write_state(folder, state)
    except BaseException:
        down(folder)
        raise
    return state, True


def write_state(folder: Path, state: ServerState) -> None:
    (folder / STATE).write_text(json.dumps(asdict(state), indent=1) + "\n")


def wait_until_serving(url: str, pid: int, console: Path, timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until the server answers a query; a HarnessError naming its log if it dies or never answers."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

    class NotYet(Exception):
        pass

    def ask() -> None:
        if not is_server_process(pid):
            raise HarnessError(f"the Spark Connect server stopped while starting (its log: {console})")
        try:
            from spark_analysis.session import connect_session

            spark = connect_session(url, 0)
            try:
                spark.range(1).count()
            finally:
                spark.stop()
        except Exception as e:  # noqa: BLE001 - not listening yet, or its session not ready: ask again
            raise NotYet(str(e)) from e

    try:
        for attempt in Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(1.0),
                                retry=retry_if_exception_type(NotYet), reraise=True):
            with attempt:
                ask()
    except NotYet:
        raise HarnessError(f"the Spark Connect server did not answer within {timeout_s:g} s (its log: {console})"
                           ) from None


def warm_up(url: str, master: str) -> float | None:
    """Check a made-up run through the server once (warm.py's), how long it took; None when ``master``'s executors
    run on other machines, which would not see it."""
    from spark_analysis.session import connect_session
    from spark_analysis.warm import check_made_up_run

    begun = time.monotonic()
    spark = connect_session(url, None)
    try:
        warmed = check_made_up_run(spark, master)
    finally:
        spark.stop()
    return time.monotonic() - begun if warmed else None


def down(folder: Path | None = None) -> ServerState | None:
    """Stop the server this machine's ``up`` started, if it runs, and remove its shuffle files; what it was.
    One still starting (its pid file written, its state not yet) is stopped too."""
    folder = folder or server_dir()
    state = running(folder)
    pid = state.pid if state is not None else started_pid(folder)
    if pid is not None and is_server_process(pid):
        subprocess.run([str(spark_home() / "sbin" / "stop-connect-server.sh")], env=server_env(folder),
                       capture_output=True, text=True)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while is_server_process(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if is_server_process(pid):  # it did not stop when asked: this very process, no other
            os.kill(pid, signal.SIGKILL)
    (folder / STATE).unlink(missing_ok=True)
    shutil.rmtree(folder / "tmp", ignore_errors=True)
    return state


def started_pid(folder: Path) -> int | None:
    """The pid in the folder's pid file (spark-daemon.sh's), if there is one."""
    pid_file = next(folder.glob(f"spark-*{SERVER_CLASS}-*.pid"), None)
    try:
        return int(pid_file.read_text().split()[0]) if pid_file is not None else None
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def for_runs(wanted: bool = True) -> Iterator[None]:
    """A checker server for a series of ``kchaos run`` processes (a nightly's shard, an exploration).

    The one up is used as it is. Else, unless not ``wanted`` or checks are
    pointed elsewhere (SPARK_REMOTE, SPARK_MASTER), one is started in the
    background (the first run's cluster starts meanwhile; a run that checks
    before it answers starts its own session) and stopped at the end. One
    that cannot start is a warning: each run then checks in its own session.
    """
    from spark_analysis.session import REMOTE_ENV

    if not wanted or os.environ.get(REMOTE_ENV) or os.environ.get("SPARK_MASTER") or running() is not None:
        yield
        return
    folder = server_dir()
    stopping = threading.Event()
    stopped: list[ServerState | None] = []  # what each ``down`` stopped, from either thread

    def start() -> None:
        try:
            # not warmed: a warm-up check would compete with the first run for the CPU, and the runs' own checks
            # warm it (a warm JVM barely changes a big check's time: benchmarks/README.md)
            state, _ = up(folder=folder, warm=False)
            if stopping.is_set():  # the runs ended (or were stopped) while it started: it goes at once
                stopped.append(down(folder))
            else:
                print(status_line(state), flush=True)
        except Exception as e:  # noqa: BLE001 - the runs check in sessions of their own
            if not stopping.is_set():
                log.warning("no checker server for these runs (%s); each checks in a session of its own",
                            str(e).splitlines()[0] if str(e) else type(e).__name__)

    starter = threading.Thread(target=start, name="kchaos-checker-server", daemon=True)
    starter.start()
    try:
        yield
    finally:
        stopping.set()
        stopped.append(down(folder))  # one still starting dies here
        starter.join(timeout=STOP_TIMEOUT_S)
        stopped.append(down(folder))  # one whose start script had not written its pid file yet
        gone = next((state for state in stopped if state is not None), None)
        if gone is not None:
            print(f"stopped the checker server at {gone.url}", flush=True)


def status_line(state: ServerState | None) -> str:
    """One line for ``kchaos spark status``."""
    if state is None:
        return "no checker server is up (`kchaos spark up` starts one); checks start their own Spark session"
    warm = f", warmed in {state.warm_s:.1f} s" if state.warm_s is not None else ", not warmed"
    return (f"checker server up at {state.url} (pid {state.pid}, master {state.master}, up "
            f"{(time.time() - state.started) / 60:.1f} min{warm}); log: {state.log}")


def spark_cmd(action: str, port: int = DEFAULT_PORT, master: str = "local[*]", warm: bool = True) -> int:
    """``kchaos spark up|status|down``."""
    if action == "up":
        state, started = up(port, master, warm)
        print(status_line(state) if started else f"already up: {status_line(state)}")
        return EXIT_VALID
    if action == "status":
        print(status_line(running()))
        return EXIT_VALID
    state = down()
    print(f"stopped the checker server at {state.url}" if state else "no checker server was up")
    return EXIT_VALID
