"""The fault interface: a fault chooses its victims, breaks them, and heals them.

Node faults speak only to :class:`clusters.node.Node` and
:class:`clusters.cluster.Cluster`; client faults only to the workload's
:class:`workloads.client.Client` handles (never to a process directly). The
schedule (faults/schedule.py) times them and records them. A new fault is
one entry in the catalogue (catalogue/faults.py: what it does to its victim,
which the class reads) and one module with one subclass, registered in
``faults.registry``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from catalogue.faults import fault_kind
from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.node import Node
from clusters.spec import ClusterSpec
from faults.targets import CLIENT_TARGETS, NODE_TARGETS, choose_clients, choose_targets
from workloads.client import Client

Victim = TypeVar("Victim", Node, Client)


class FaultError(RuntimeError):
    """A fault could not be applied or healed, or did not take effect."""


class FaultSkipped(Exception):
    """Raised by ``apply`` before it changes anything: this application has nothing to do right now.

    The schedule records it in events.jsonl (``phase: skipped`` with the
    reason) and goes on; a run in which no fault took effect is not judged.
    """


class Fault(ABC, Generic[Victim]):
    """One kind of fault. ``apply`` and ``heal`` must check that they took effect."""

    kind: ClassVar[str]
    # option name -> default; a scenario's `options:` may set only these
    options: ClassVar[Mapping[str, Any]] = {}
    # option name -> what it does, one line: the documentation's fault reference is generated from it
    option_help: ClassVar[Mapping[str, str]] = {}
    # the targets a scenario may give it: nodes, unless it is a ClientFault
    targets: ClassVar[tuple[str, ...]] = NODE_TARGETS
    # what the catalogue says of its kind (catalogue/faults.py), set for every subclass that names one: whether
    # healing starts its victims again (and waits until they serve), whether its victims' processes serve nothing
    # while it is on, and whether they are nodes or clients
    restarts: ClassVar[bool] = False
    stops_process: ClassVar[bool] = False
    victim: ClassVar[str] = "node"
    request_level: ClassVar[bool] = False  # it works on the request path (clusters/proxy/)
    evidence_kind: ClassVar[str | None] = None  # the events.jsonl kind of the lines ``evidence`` gives

    def __init__(self, cluster: Cluster, topic: str, rng: random.Random,
                 options: Mapping[str, Any] | None = None, clients: Sequence[Client] = ()) -> None:
        self.cluster = cluster
        self.topic = topic
        self.rng = rng
        self.clients = clients
        self.check_options(options or {})
        self.settings: dict[str, Any] = {**self.options, **(options or {})}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        known = fault_kind(getattr(cls, "kind", ""))
        if known is not None:
            cls.restarts, cls.stops_process, cls.victim = known.restarts, known.stops_process, known.victim
            cls.request_level = known.request_level
            cls.evidence_kind = known.evidence

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """Refuse options this fault does not have (FaultError, one line)."""
        unknown = set(options) - set(cls.options)
        if unknown:
            known = ", ".join(cls.options) or "none"
            raise FaultError(f"{cls.kind} has no option {', '.join(sorted(unknown))} (options: {known})")

    @classmethod
    def check_target(cls, target: str) -> None:
        """Refuse a target of the wrong sort: a node fault cannot hit a client, nor the reverse."""
        if target not in cls.targets:
            sort = "workload client" if cls.targets == CLIENT_TARGETS else "node"
            raise FaultError(f"{cls.kind} hits a {sort}: target must be one of {', '.join(cls.targets)}, "
                             f"not {target!r}")

    @classmethod
    def check_plan(cls, target: str, options: Mapping[str, Any], spec: ClusterSpec) -> None:
        """Refuse, before anything starts, a plan that could never do anything on this cluster (FaultError).

        The default accepts every plan; a fault whose plan can be empty by
        construction (a partition that cuts nobody) overrides it.
        """

    @classmethod
    def check_inner(cls, options: Mapping[str, Any], inner: "type[Fault]") -> None:
        """Refuse, before anything starts, a fault nested on this one's victims that could never heal (FaultError).

        The default accepts every inner fault.
        """

    def choose(self, target: str) -> list[Victim]:
        """The nodes this application hits; empty when there is nothing to hit right now."""
        ids = [i for i in (getattr(c, "transactional_id", None) for c in self.clients) if i]
        nodes = choose_targets(self.cluster, self.topic, target, self.rng, transactional_ids=ids)
        return [n for n in nodes if n.running]  # type: ignore[misc]

    @abstractmethod
    def apply(self, nodes: list[Victim]) -> str:
        """Break ``nodes``; return a one-line detail for events.jsonl."""

    @abstractmethod
    def heal(self, nodes: list[Victim]) -> None:
        """Undo ``apply`` and check that it was undone."""

    def evidence(self, origin_ns: int) -> list[dict[str, Any]]:
        """The fields of the events.jsonl lines (of kind ``evidence_kind``) that prove what the last application
        did, asked after it healed; ``origin_ns`` is the run clock's origin. A request fault's say what it did to
        single requests, a rolling fault's when each node came back on which release; most node and client
        faults prove themselves in ``apply`` and have none."""
        return []

    def healed(self) -> str:
        """What healing found out, added to the heal line's detail (lossy-network: the packets it dropped)."""
        return ""

    def no_effect(self) -> str | None:
        """Asked after it healed: why the last application turned out to change nothing (a request fault whose
        window matched no request, a lossy path that dropped no packet), or None when it took effect. The
        schedule then records it as skipped, with this reason, and the run does not count it as applied."""
        return None

    def recover(self, nodes: list[Node]) -> None:
        """Bring stopped nodes back until they serve (shared by the faults that stop processes)."""
        try:
            for node in nodes:
                self.cluster.recover(node)
        except ClusterError as e:
            raise FaultError(str(e)) from None


class ClientFault(Fault[Client]):
    """A fault that hits the workload's producers and consumers, not the cluster."""

    targets = CLIENT_TARGETS
    victim = "client"

    def choose(self, target: str) -> list[Client]:
        return choose_clients(self.clients, target, self.rng)
