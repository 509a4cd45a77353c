"""Where the checker server (server.py) keeps its state, and whether it runs: all that a check needs to know to
go through it (session.py's ``remote_url``), without importing the server's own machinery."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

SERVER_ENV = "KCHAOS_SPARK_SERVER"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE = "state.json"


@dataclass(frozen=True)
class ServerState:
    """What ``kchaos spark up`` wrote down: where the server listens and how to find it again."""

    url: str
    pid: int
    master: str
    log: str
    started: float  # seconds since the epoch
    warm_s: float | None = None  # how long the warm-up check took (None: not warmed)


def server_dir() -> Path:
    """The server's folder: KCHAOS_SPARK_SERVER, else one per user in the temp folder."""
    configured = os.environ.get(SERVER_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"kchaos-spark-server-{os.getuid()}"


def read_state(folder: Path | None = None) -> ServerState | None:
    """The state ``up`` wrote, or None (never started, or not readable)."""
    path = (folder or server_dir()) / STATE
    try:
        return ServerState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def is_server_process(pid: int) -> bool:
    """Whether ``pid`` is alive and is a Spark Connect server (not a process that reused its number)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return SERVER_CLASS.encode() in command


def running(folder: Path | None = None) -> ServerState | None:
    """The server this machine's ``kchaos spark up`` started, if it is still running."""
    state = read_state(folder)
    return state if state is not None and is_server_process(state.pid) else None
