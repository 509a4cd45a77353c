"""A workload process seen from the harness: start it, read its lines, kill it, restart it.

Producers and consumers run as processes of their own (librdkafka does not
survive fork, so each is ``python -m workloads.<role>``), which is what lets
a fault SIGKILL one the way an application crashes. Faults see them only
through :class:`Client`; :class:`ClientProcess` is the plumbing: one reader
thread per process turns its stdout into history lines (the harness stays
the only writer of the history), one more keeps its stderr for the log.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, Literal, Protocol, runtime_checkable

from workloads.child import EXIT_FATAL_CLIENT_ERROR
from workloads.errors import WorkloadError
from workloads.history import RDKAFKA_LOG, RunClock
from workloads.protocol import END, STOP, LineSplitter, ProtocolError

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT_S = 60      # a Python start plus confluent_kafka's import, on a busy 2-core machine
READ_CHUNK = 1 << 16
PIPE_BYTES = 1 << 20
END_LINE = END.encode()
IDENTITY_TAG = b"K "

Library = Literal["librdkafka", "java"]
LIBRARIES: tuple[Library, ...] = ("librdkafka", "java")


@dataclass(frozen=True)
class ClientIdentity:
    """What a workload process said it is (its ``K`` line): the client library, its version, the
    durability settings it really runs with (the library's defaults filled in, as strings), and the binding
    that ran the library (``confluent-kafka 2.5.0``; None: a Java process, which is its library)."""

    library: str
    version: str
    settings: dict[str, str]
    binding: str | None = None

    @classmethod
    def from_line(cls, line: bytes) -> ClientIdentity:
        """``K <library> <version> <settings as one JSON object> [<binding name>/<version>]``: the settings may
        hold spaces, the binding never does and never ends as the object does."""
        parts = line.split(b" ", 3)
        rest, binding = parts[-1], None
        if len(parts) == 4 and not rest.endswith(b"}") and b" " in rest:
            rest, binding = rest.rsplit(b" ", 1)
        try:
            settings = json.loads(rest)
        except ValueError:
            settings = None
        if len(parts) != 4 or not isinstance(settings, dict):
            raise ProtocolError(f"not a workload protocol line: {line[:80]!r}")
        return cls(parts[1].decode(), parts[2].decode(), {str(k): str(v) for k, v in settings.items()},
                   None if binding is None else binding.decode().replace("/", " ", 1))


@runtime_checkable
class Client(Protocol):
    """What a fault may do to a workload process."""

    @property
    def name(self) -> str:
        """The id in the history (a restarted producer gets a new one: p0, p0.1, ...)."""

    @property
    def role(self) -> str:
        """``producer``, ``consumer``, ``pipeline`` or ``share_consumer``."""

    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The current process's id (None before the first start)."""

    def kill(self) -> None:
        """SIGKILL the process and wait until it is gone and its last lines are recorded."""

    def restart(self) -> None:
        """Start a new process in its place and wait until its Kafka client is up."""

    def freeze(self) -> None:
        """SIGSTOP the process: every thread of it, its Kafka client's too, runs nothing until ``thaw``."""

    def thaw(self) -> None:
        """SIGCONT a frozen process."""

    @property
    def frozen(self) -> bool:
        """The process is stopped by a signal (what ``freeze`` asked for has happened)."""


def widen_pipe(pipe: IO[bytes] | None) -> None:
    """A 1 MiB pipe: a process never waits for a harness busy writing history, or off the CPU a moment."""
    if pipe is None:
        return
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:  # above /proc/sys/fs/pipe-max-size: the default 64 KiB still works, only slower
        pass


def exit_description(returncode: int) -> str:
    if returncode < 0:
        return "killed" if -returncode == signal.SIGKILL else f"killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


class ClientProcess(ABC):
    """One workload client: a process, and the process that replaces it after a crash."""

    role: ClassVar[str]
    module: ClassVar[str]

    def __init__(self, base_name: str, clock: RunClock, client: Library = "librdkafka",
                 kafka_version: str | None = None, client_version: str | None = None) -> None:
        """``client``: the library the process runs (librdkafka through confluent-kafka, or Kafka's Java
        client); ``client_version``: its release, a confluent-kafka one for librdkafka (None: .venv's, the
        harness's own) or a kafka-clients one for Java (None: ``kafka_version``'s, the cluster's)."""
        if client not in LIBRARIES:
            raise ValueError(f"client must be one of {', '.join(LIBRARIES)}, not {client!r}")
        if client == "java" and kafka_version is None and client_version is None:
            raise ValueError("a Java client needs the Kafka version whose kafka-clients it runs")
        self.base_name = base_name
        self.clock = clock
        self.client: Library = client
        self.kafka_version = kafka_version
        self.client_version = client_version
        self.identity: ClientIdentity | None = None   # what the last process said it is
        # told (process name, identity) when a process says what it is: the harness records a client event
        self.on_identity: Callable[[str, ClientIdentity], None] | None = None
        self.generation = 0
        self.failures: list[str] = []     # deaths nobody asked for: the harness reports them (exit 2)
        self._proc: subprocess.Popen[bytes] | None = None
        self._threads: list[threading.Thread] = []
        self._stderr_tail: deque[str] = deque(maxlen=20)
        self._settled = threading.Event()  # the process said hello, or died before it could
        self._hello = False
        self._identified = False
        self._killing = False
        self._closed = False
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ Client

    @property
    def name(self) -> str:
        return self.base_name if self.generation == 0 else f"{self.base_name}.{self.generation}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            self._killing = True
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            self._join(proc)

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        with self._lock:
            if self.running:
                assert self._proc is not None
                os.kill(self._proc.pid, sig)

    @property
    def frozen(self) -> bool:
        """/proc says the process is stopped (state T); a process that is gone is not."""
        pid = self.pid
        if pid is None or not self.running:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")  # after the name, which may hold spaces

    def restart(self) -> None:
        with self._lock:
            if self._closed:
                raise WorkloadError(f"{self.name} was stopped; it is not restarted")
            self.kill()
            self.generation += 1
            self.start()
        self.wait_started()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        with self._lock:
            spec = {**self.spec(), "name": self.name, "origin_ns": self.clock.origin_ns,
                    "verbose": RDKAFKA_LOG.isEnabledFor(logging.WARNING)}
            self._settled.clear()
            self._hello = self._killing = self._identified = False
            self._stderr_tail.clear()
            proc = subprocess.Popen(self.command(json.dumps(spec)), cwd=PROJECT_ROOT,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self._proc = proc
            widen_pipe(proc.stdout)
            stderr = threading.Thread(target=self._drain_stderr, args=(proc, self.name), daemon=True,
                                      name=f"stderr-{self.name}")
            self._threads = [stderr, threading.Thread(target=self._read, args=(proc, self.name, stderr),
                                                      daemon=True, name=f"read-{self.name}")]
            for t in self._threads:
                t.start()

    def wait_started(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Wait for the process's hello (its Kafka client is up); WorkloadError when it never came."""
        if not self._settled.wait(timeout_s):
            raise WorkloadError(f"{self.name} did not start within {timeout_s:.0f}s{self._tail()}")
        if not self._hello:
            raise WorkloadError(f"{self.name} died before it started{self._tail()}")

    def ask_to_stop(self) -> None:
        """Tell the process to finish (``stop`` on its stdin); no restart after. ``stop()`` waits for it."""
        with self._lock:
            self._closed = True
            proc = self._proc
            if proc is None or proc.poll() is not None or proc.stdin is None:
                return
            try:
                proc.stdin.write(STOP)
                proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # already gone, or already asked

    def stop(self, timeout_s: float, ask: bool = True) -> None:
        """Ask the process to finish (``ask``; else it ends by itself) and wait for it; SIGKILL it after
        ``timeout_s``."""
        with self._lock:
            if ask:
                self.ask_to_stop()
            self._closed = True
            proc = self._proc
            if proc is None:
                return
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killed", self.name, timeout_s)
                self._killing = True
                proc.kill()
                proc.wait()
            self._join(proc)

    def abort(self) -> None:
        """Kill the process for good (any exit path of a trial): nothing outlives the harness's work."""
        with self._lock:
            self._closed = True
            self.kill()

    def _join(self, proc: subprocess.Popen[bytes]) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    def command(self, spec_json: str) -> list[str]:
        """The process to start: ``python -m <module>`` (under the pinned confluent-kafka's interpreter, if
        any), or the Java workload program in the same role."""
        if self.client == "java":
            from workloads.java_client import java_command  # builds it on first use
            release = self.client_version or self.kafka_version
            assert release is not None
            return java_command(release, self.role, spec_json)
        return [str(self.interpreter()), "-m", self.module, spec_json]

    def interpreter(self) -> Path:
        """The Python a librdkafka process runs under: the harness's own, or the pinned release's environment
        (built on first use; one that cannot be is a WorkloadError, the workload's one error)."""
        if self.client_version is None:
            return Path(sys.executable)
        from workloads.confluent_release import ClientReleaseError, interpreter  # only a pinned run needs it
        try:
            return interpreter(self.client_version)
        except ClientReleaseError as e:
            raise WorkloadError(str(e)) from None

    # ------------------------------------------------------------------ what the process says

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """What the process needs besides its name and the run's clock origin (JSON)."""

    @abstractmethod
    def on_lines(self, name: str, lines: list[bytes]) -> None:
        """Record one read's worth of protocol lines of process ``name`` (ProtocolError for a foreign line).

        Raw lines, not parsed messages: the lines that come once per message are the harness's hot
        path, and each client turns them into history lines with as little work as it can.
        """

    @abstractmethod
    def on_exit(self, name: str, clean: bool, how: str) -> None:
        """The process ``name`` is gone; ``clean``: it said ``E`` (it stopped as asked)."""

    def _read(self, proc: subprocess.Popen[bytes], name: str, stderr: threading.Thread) -> None:
        assert proc.stdout is not None
        splitter = LineSplitter()
        clean = False
        try:
            while chunk := proc.stdout.read1(READ_CHUNK):
                lines = [line for line in splitter.feed(chunk) if line]
                if not lines:
                    continue
                if not self._hello and lines[0].startswith(b"H "):
                    self._hello = True
                    self._settled.set()
                if not self._identified:
                    lines = self._identify(name, lines)
                self.on_lines(name, lines)
                clean = lines[-1] == END_LINE
        except Exception as e:  # a protocol bug: stop trusting this process, keep the history honest
            self.failures.append(f"{name}: {e}")
            log.error("%s: %s; killing it", name, e)
            proc.kill()
        returncode = proc.wait()
        how = exit_description(returncode)
        stderr.join(5)  # its last words, for the message below
        fatal = returncode == EXIT_FATAL_CLIENT_ERROR and not self._killing
        if fatal:
            how = "ended by a fatal Kafka client error"
            log.warning("%s %s%s; replacing it", name, how, self._tail())
        elif not clean and not self._killing:
            self.failures.append(f"{name} {how} on its own{self._tail()}")
            log.warning("%s %s on its own%s", name, how, self._tail())
        self.on_exit(name, clean, how)
        self._settled.set()
        if fatal:  # as an application would: a new client (not from this thread: restart joins it)
            threading.Thread(target=self._replace, name=f"replace-{name}", daemon=True).start()

    def _identify(self, name: str, lines: list[bytes]) -> list[bytes]:
        """Take the ``K`` line out of the first lines (it follows ``H``): the identity is the client's, not
        the history's. Once any other line has come, the process said all it would about itself."""
        rest = []
        for line in lines:
            if line.startswith(IDENTITY_TAG):
                self.identity = ClientIdentity.from_line(line)
                self._identified = True
                if self.on_identity is not None:
                    self.on_identity(name, self.identity)
            else:
                rest.append(line)
                self._identified = self._identified or not line.startswith(b"H ")
        return rest

    def _replace(self) -> None:
        try:
            if not self._closed:
                self.restart()
        except WorkloadError as e:
            if not self._closed:  # stopped meanwhile: nothing to replace
                self.failures.append(str(e))

    def _drain_stderr(self, proc: subprocess.Popen[bytes], name: str) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self._stderr_tail.append(line)
            log.info("%s: %s", name, line)

    def _tail(self) -> str:
        last = [line for line in self._stderr_tail if line.strip()]
        return f"; stderr: {last[-1]}" if last else ""
