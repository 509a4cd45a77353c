"""What every workload process does besides its Kafka work: spec in, lines out, die with the harness.

A workload process (``python -m workloads.producer SPEC``) is started by the
harness with a JSON spec as its only argument, writes protocol lines to its
stdout and reads ``stop`` on its stdin. It must never outlive the harness,
so EOF on stdin (the harness died, even by SIGKILL) or a broken stdout pipe
ends it at once, without flushing anything: the harness is not there to
record it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, libversion, version

from workloads.history import RDKAFKA_LOG, RunClock
from workloads.protocol import END, STOP, encode_lines, hello, identity, with_binding

EXIT_HARNESS_GONE = 3
# the Kafka client hit a fatal error (e.g. an idempotent producer whose sequence
# numbers the broker lost): what an application does then is make a new one
EXIT_FATAL_CLIENT_ERROR = 4


class LineOut:
    """Writes protocol lines to stdout, each call one write of whole lines."""

    def __init__(self, fd: int = 1) -> None:
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, lines: list[str]) -> None:
        if lines:
            self.write(encode_lines(lines))

    def send_bytes(self, lines: list[bytes]) -> None:
        """Lines already bytes (a consumer's reads.jsonl lines), in one write."""
        if lines:
            self.write(b"\n".join([*lines, b""]))  # the last newline without copying the joined bytes again

    def write(self, data: bytes) -> None:
        """Whole lines, newline-terminated, in one write."""
        view = memoryview(data)
        with self._lock:
            try:
                while view:
                    view = view[os.write(self._fd, view):]
            except BrokenPipeError:  # the harness is gone: nobody to tell anything
                os._exit(EXIT_HARNESS_GONE)


def watch_stdin(stop: threading.Event) -> None:
    """``stop`` sets ``stop``; EOF means the harness died: exit now.

    Raw reads on fd 0: a daemon thread blocked in a buffered stdin would
    abort the interpreter's shutdown.
    """
    pending = b""
    while chunk := os.read(0, 4096):
        pending += chunk
        if STOP in pending:
            stop.set()
    os._exit(EXIT_HARNESS_GONE)


def child_main(work: Callable[[dict[str, Any], RunClock, threading.Event, LineOut], None]) -> None:
    """Run ``work(spec, clock, stop, out)`` as a workload process, then say ``E`` and exit."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the harness, which stops us in order
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO if spec.get("verbose") else logging.WARNING,
                        format=f"%(asctime)s {spec['name']} %(name)s: %(message)s")
    if not spec.get("verbose"):
        RDKAFKA_LOG.setLevel(logging.CRITICAL)
    stop = threading.Event()
    threading.Thread(target=watch_stdin, args=(stop,), name="stdin", daemon=True).start()
    out = LineOut()
    try:
        work(spec, RunClock(origin_ns=spec["origin_ns"]), stop, out)
        out.send([END])
        code = 0
    except KafkaException as e:
        print(f"fatal Kafka client error: {e.args[0].str()}" if e.args[0].fatal() else traceback.format_exc(),
              file=sys.stderr)
        code = EXIT_FATAL_CLIENT_ERROR if e.args[0].fatal() else 1
    except BaseException:  # noqa: BLE001 -- the traceback is the harness's only clue
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)  # no interpreter shutdown: librdkafka's threads and the stdin reader just end


def say_hello(out: LineOut, settings: dict[str, Any]) -> None:
    """``H`` (the client is up), then ``K``: librdkafka's version, the ``settings`` this process runs with and
    the confluent-kafka release it imported (the scenario may pin one: workload.client_version)."""
    out.send([hello(os.getpid()), with_binding(identity("librdkafka", libversion()[0], settings), "confluent-kafka",
                                               confluent_kafka_release())])


def confluent_kafka_release() -> str:
    """The confluent-kafka release this interpreter imported. ``version()`` answers (release, number) in older
    releases (2.5.0) and the bare release in newer ones (2.16.1), whose first item would be its first digit."""
    answer = version()
    return answer if isinstance(answer, str) else answer[0]
