"""The processes of one trial, started and stopped together (harness/roles.py's parts say what each role does)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workloads.client import ClientProcess


@dataclass
class Workload:
    clients: list[ClientProcess]   # in the order they start: consumers first, producers last

    def start(self) -> None:
        """Start every process, then wait until each is up (the consumers are in their group when the first
        message lands)."""
        for client in self.clients:
            client.start()
        for client in self.clients:
            client.wait_started()

    def abort(self) -> None:
        """Kill every process for good; safe on any exit path and after a normal stop."""
        for client in self.clients:
            client.abort()

    @property
    def failures(self) -> list[str]:
        """Workload processes that died without being killed by a fault."""
        return [f for client in self.clients for f in client.failures]


def stop_all(clients: Sequence[ClientProcess]) -> None:
    """Ask every process to stop before waiting for any: they flush or finish their batch side by side."""
    for client in clients:
        client.ask_to_stop()
    for client in clients:
        client.stop()
