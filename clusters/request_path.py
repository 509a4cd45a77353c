"""The harness's handle on the request path (the proxy process of clusters/proxy/).

Faults speak to this class only: ``hold`` starts holding requests of some Kafka APIs bound for a broker
(or, with its ``action``, dropping the broker's answers to them, or replaying them), ``release`` stops it,
``held`` returns what was held, when it was delivered and what the broker answered.
The proxy runs as its own process (so its event loop never waits on the harness's threads); this handle
starts it, speaks to it over a Unix socket, and stops it. Its stdin is a pipe from this process: if the
harness dies, the proxy exits.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusters.errors import ClusterError

START_TIMEOUT_S = 20
COMMAND_TIMEOUT_S = 10


class RequestPathError(ClusterError):
    """The proxy did not start, or refused or did not answer a command."""


@dataclass(frozen=True)
class HeldRequest:
    """One request the proxy held (``cause`` matched), or that waited behind one on its connection (behind).

    Times are the system's monotonic clock (``time.monotonic_ns``), the clock the run's history counts from.
    """

    fault: str
    rule: str
    api: str
    api_version: int
    client: str | None
    node: int                  # the broker it was bound for
    connection: int            # the proxy's number for the client connection it came on
    correlation_id: int
    cause: str
    action: str                # "delayed" | "response-dropped" | "replayed"
    held_ns: int
    release_at_ns: int
    released_ns: int | None    # when it reached the broker's socket (None: never delivered)
    client_closed: bool        # the client had given up on the connection when it was delivered
    response_ns: int | None
    response_error: Any
    response_forwarded: bool | None
    outcome: str               # held | delivered | answered | upstream-closed | discarded (silenced: never sent)
    detail: Mapping[str, Any] = field(default_factory=dict)
    listener: str = "clients"  # the proxy's listener it came on: clients | inter-broker (a broker's own request)

    @property
    def pending(self) -> bool:
        """Still to go to its broker, or gone and awaiting the answer the broker gives (every request but a
        Produce with acks=0)."""
        answered = not (self.api == "Produce" and self.detail.get("acks") == 0)
        return self.outcome == "held" or (self.outcome == "delivered" and answered)

    @property
    def held_s(self) -> float | None:
        return None if self.released_ns is None else (self.released_ns - self.held_ns) / 1e9

    def event(self, origin_ns: int) -> dict[str, Any]:
        """The fields of its events.jsonl ``request`` line, times counted from the run's origin (DESIGN: the run
        directory)."""
        def rel(t: int | None) -> int | None:
            return None if t is None else t - origin_ns
        return {"fault": self.fault, "api": self.api, "api_version": self.api_version,
                "client": self.client, "node": self.node, "connection": self.connection,
                "correlation_id": self.correlation_id, "action": self.action, "cause": self.cause,
                "held_ns": rel(self.held_ns), "released_ns": rel(self.released_ns),
                "response_ns": rel(self.response_ns), "response_error": self.response_error,
                "client_closed": self.client_closed, "outcome": self.outcome, "detail": dict(self.detail),
                "listener": self.listener}


class RequestPath:
    """A running proxy: one port per broker on the host, each forwarding to its broker's proxied listener;
    with ``inter_broker_host``, one more per broker there, each forwarding to its broker's inter-broker listener."""

    def __init__(self, process: subprocess.Popen[bytes], control: Path, ports: dict[int, int], host: str,
                 inter_broker_ports: dict[int, int] | None = None, inter_broker_host: str | None = None) -> None:
        self._process = process
        self._control = control
        self.ports = ports
        self.host = host
        self.inter_broker_ports = inter_broker_ports or {}
        self.inter_broker_host = inter_broker_host
        self._sock: socket.socket | None = None
        self._file: Any = None
        self._lock = threading.Lock()
        self._rules = itertools.count(1)

    @classmethod
    def start(cls, brokers: Iterable[int], workdir: Path, host: str = "127.0.0.1",
              inter_broker_host: str | None = None) -> "RequestPath":
        """Start the proxy process; it listens at once (the brokers may start after it). ``inter_broker_host``:
        also listen there, one port per broker, for the brokers' own traffic (the address the brokers reach
        this machine at: the cluster network's gateway)."""
        workdir.mkdir(parents=True, exist_ok=True)
        # a Unix socket's path must be short (108 bytes): not under a deep work directory
        control = Path(tempfile.mkdtemp(prefix="kchaos-rp-")) / "control.sock"
        ids = ",".join(str(b) for b in brokers)
        log = open(workdir / "request-path.log", "ab")
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        process = subprocess.Popen([sys.executable, "-m", "clusters.proxy", "--control", str(control),
                                    "--brokers", ids, "--listen", host,
                                    *(["--inter-broker", inter_broker_host] if inter_broker_host else [])],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        assert process.stdout is not None
        ready: list[bytes] = []
        reader = threading.Thread(target=lambda: ready.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not ready or not ready[0]:
            process.kill()
            process.wait()
            raise RequestPathError(f"the request path's proxy did not start within {START_TIMEOUT_S}s "
                                   f"(see {workdir / 'request-path.log'})")
        listening = json.loads(ready[0])
        ports = {int(b): int(p) for b, p in listening["ports"].items()}
        inter_broker = {int(b): int(p) for b, p in listening.get("inter_broker_ports", {}).items()}
        return cls(process, control, ports, host, inter_broker, inter_broker_host)

    # ------------------------------------------------------------------ addresses

    def address(self, broker: int) -> str:
        """host:port where clients reach ``broker`` through the proxy (what the broker advertises to them)."""
        return f"{self.host}:{self.ports[broker]}"

    def inter_broker_address(self, broker: int) -> str:
        """host:port where the other brokers reach ``broker`` through the proxy (what it advertises to them)."""
        if self.inter_broker_host is None:
            raise RequestPathError("the request path does not stand between the brokers")
        return f"{self.inter_broker_host}:{self.inter_broker_ports[broker]}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.address(b) for b in sorted(self.ports))

    def route(self, broker: int, host: str, port: int, listener: str = "clients") -> None:
        """Send new connections for ``broker`` to host:port (its proxied listener's current address; with
        ``listener="inter-broker"``, the other brokers' connections to its inter-broker listener)."""
        self._call("route", broker=broker, host=host, port=port, listener=listener)

    # ------------------------------------------------------------------ faults

    def hold(self, apis: Iterable[str], *, broker: int | None = None, hold_s: float,
             hold_max_s: float | None = None, clients: Iterable[str] | None = None,
             connections: str = "existing", limit: int | None = None, fault: str = "delay-requests",
             seed: int | None = None, action: str = "delay") -> str:
        """Hold requests of ``apis`` (Kafka's names: EndTxn, Produce, ...) bound for ``broker`` (None: any)
        from clients whose client.id is one of ``clients`` (None: any; ``name*``: every id starting with
        name), each for ``hold_s`` seconds
        (or a time drawn from [hold_s, hold_max_s]), then deliver them on their own connection, in order.
        ``connections="existing"`` holds only on connections open now: a client's new connection passes.
        ``action="drop-response"``: deliver them at once and drop the broker's answers (the connection is
        then silent until the client closes it or the rule is released); ``action="replay"``: deliver them at
        once and a copy again after hold_s, on a new connection (clusters/proxy/core.py).
        Returns the rule's id, for ``release``."""
        rule = f"r{next(self._rules)}"
        self._call("hold", rule=rule, apis=list(apis), broker=broker, hold_s=hold_s, hold_max_s=hold_max_s,
                   clients=list(clients) if clients is not None else None, connections=connections,
                   limit=limit, fault=fault, seed=seed, action=action)
        return rule

    def release(self, rule: str, flush: bool = False) -> int:
        """Stop holding new requests under ``rule``; held ones still go when due (now, with ``flush``).
        Returns how many it still held."""
        return int(self._call("release", rule=rule, flush=flush)["pending"])

    def held(self) -> list[HeldRequest]:
        """Every request held so far, as it stands now (a record's delivery and answer fill in later)."""
        answer = self._call("records", since=0)
        return [HeldRequest(**r) for r in answer["records"]]

    def settled(self, rules: Iterable[str], timeout_s: float) -> list[HeldRequest]:
        """What the (released) ``rules`` touched, once none is ``pending`` or after ``timeout_s``."""
        rules = set(rules)
        deadline = time.monotonic() + timeout_s
        while True:
            touched = [h for h in self.held() if h.rule in rules]
            if not any(h.pending for h in touched) or time.monotonic() > deadline:
                return touched
            time.sleep(0.2)

    def stats(self) -> dict[str, Any]:
        """Connections, requests and responses forwarded, requests pending, each rule's matches."""
        return dict(self._call("stats")["stats"])

    # ------------------------------------------------------------------ process

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        """Stop the proxy (its open connections close); safe to call twice."""
        if self._process.poll() is None:
            try:
                self._call("stop")
            except RequestPathError:
                pass
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        shutil.rmtree(self._control.parent, ignore_errors=True)
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()

    def _call(self, op: str, **args: Any) -> dict[str, Any]:
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self._sock.settimeout(COMMAND_TIMEOUT_S)
                    self._sock.connect(str(self._control))
                    self._file = self._sock.makefile("rb")
                self._sock.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
                line = self._file.readline()
            except OSError as e:
                self._sock = None
                raise RequestPathError(f"the request path's proxy did not answer {op}: {e}") from None
            if not line:
                self._sock = None
                raise RequestPathError(f"the request path's proxy closed its control socket during {op}")
            answer = json.loads(line)
            if not answer.pop("ok"):
                raise RequestPathError(f"the request path's proxy refused {op}: {answer['error']}")
            return answer

    def __enter__(self) -> "RequestPath":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
