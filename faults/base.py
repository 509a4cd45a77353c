"""The fault interface: a fault chooses nodes, breaks them, and heals them.

Faults speak only to :class:`clusters.node.Node` and :class:`clusters.cluster.Cluster`;
the schedule (faults/schedule.py) times them and records them. A new fault is
one module with one subclass, registered in ``faults.registry``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import ClassVar

from clusters.cluster import Cluster
from clusters.node import Node


class FaultError(RuntimeError):
    """A fault could not be applied or healed, or did not take effect."""


class Fault(ABC):
    """One kind of fault. ``apply`` must check that it took effect."""

    kind: ClassVar[str]
    targets: ClassVar[tuple[str, ...]]

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic

    @abstractmethod
    def choose(self, target: str, rng: random.Random) -> list[Node]:
        """The nodes this application hits; empty when there is nothing to hit right now."""

    @abstractmethod
    def apply(self, nodes: list[Node]) -> str:
        """Break ``nodes``; return a one-line detail for events.jsonl."""

    @abstractmethod
    def heal(self, nodes: list[Node]) -> None:
        """Undo ``apply`` and check that it was undone."""
