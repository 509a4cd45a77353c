"""A thread that works until it is told to stop and hands any failure to whoever joins it."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod


class Worker(ABC):
    """Base of the harness's background threads, e.g. the leader observer (dataclasses that call ``__post_init__``)."""

    name: str

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"{type(self).__name__}-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def join(self) -> None:
        """Wait for the thread; re-raise what made it fail."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # surfaced by join()
            self._error = e

    @abstractmethod
    def work(self) -> None:
        """Loop until ``stopping``."""
