"""The fault interface: a fault chooses nodes, breaks them, and heals them.

Faults speak only to :class:`clusters.node.Node` and :class:`clusters.cluster.Cluster`;
the schedule (faults/schedule.py) times them and records them. A new fault is
one module with one subclass, registered in ``faults.registry``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.node import Node
from faults.targets import choose_targets


class FaultError(RuntimeError):
    """A fault could not be applied or healed, or did not take effect."""


class Fault(ABC):
    """One kind of fault. ``apply`` and ``heal`` must check that they took effect."""

    kind: ClassVar[str]
    # option name -> default; a scenario's `options:` may set only these
    options: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, cluster: Cluster, topic: str, rng: random.Random,
                 options: Mapping[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.topic = topic
        self.rng = rng
        self.check_options(options or {})
        self.settings: dict[str, Any] = {**self.options, **(options or {})}

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse options this fault does not have (FaultError, one line)."""
        unknown = set(options) - set(cls.options)
        if unknown:
            known = ", ".join(cls.options) or "none"
            raise FaultError(f"{cls.kind} has no option {', '.join(sorted(unknown))} (options: {known})")

    def choose(self, target: str) -> list[Node]:
        """The nodes this application hits; empty when there is nothing to hit right now."""
        return [n for n in choose_targets(self.cluster, self.topic, target, self.rng) if n.running]

    @abstractmethod
    def apply(self, nodes: list[Node]) -> str:
        """Break ``nodes``; return a one-line detail for events.jsonl."""

    @abstractmethod
    def heal(self, nodes: list[Node]) -> None:
        """Undo ``apply`` and check that it was undone."""

    def recover(self, nodes: list[Node]) -> None:
        """Bring stopped nodes back until they serve (shared by the faults that stop processes)."""
        try:
            for node in nodes:
                self.cluster.recover(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None
