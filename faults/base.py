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
from typing import Any, ClassVar, Generic, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.fields import FieldInfo

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


class FaultOptions(BaseModel):
    """A fault kind's options, typed once. Scenario validation, the generated fault reference and the explorer's
    space all read the subclass a kind names: each field's type, default and bounds (``gt``, ``ge``, ``le``,
    ``Literal`` choices) and its description, the option's one-line help. A kind with no options keeps this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Options = TypeVar("Options", bound=FaultOptions)


def with_defaults(model: type[Options], name: str, **defaults: Any) -> type[Options]:
    """``model`` with other defaults, for kinds that share options but not their defaults."""
    fields: dict[str, Any] = {k: (model.model_fields[k].annotation,
                                  FieldInfo.merge_field_infos(model.model_fields[k], default=v))
                             for k, v in defaults.items()}
    return create_model(name, __base__=model, **fields)


def options_error(kind: str, model: type[FaultOptions], error: ValidationError) -> str:
    """One line for the first thing wrong with a fault's options."""
    first = error.errors()[0]
    name = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        unknown = sorted(str(e["loc"][0]) for e in error.errors() if e["type"] == "extra_forbidden")
        return f"{kind} has no option {', '.join(unknown)} (options: {', '.join(model.model_fields) or 'none'})"
    if first["type"] == "literal_error":
        choices = get_args(model.model_fields[name].annotation)
        return f"{kind} {name} must be one of {', '.join(map(str, choices))}, not {first['input']!r}"
    message = first["msg"].removeprefix("Value error, ")
    message = message[:1].lower() + message[1:]
    return f"{kind} {name}: {message}" if name else f"{kind}: {message}"


class Fault(ABC, Generic[Victim]):
    """One kind of fault. ``apply`` and ``heal`` must check that they took effect."""

    kind: ClassVar[str]
    # its options: a scenario's `options:` may set only these (FaultOptions says who else reads them)
    Options: ClassVar[type[FaultOptions]] = FaultOptions
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
        self.settings = self.check_options(options or {})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        known = fault_kind(getattr(cls, "kind", ""))
        if known is not None:
            cls.restarts, cls.stops_process, cls.victim = known.restarts, known.stops_process, known.victim
            cls.request_level = known.request_level
            cls.evidence_kind = known.evidence

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> Any:
        """The options as its typed model, defaults filled in; options it does not have, or values of the wrong
        type or out of bounds, are refused (FaultError, one line)."""
        try:
            return cls.Options.model_validate(dict(options))
        except ValidationError as e:
            raise FaultError(options_error(cls.kind, cls.Options, e)) from None

    @classmethod
    def check_target(cls, target: str) -> None:
        """Refuse a target of the wrong sort: a node fault cannot hit a client, nor the reverse."""
        if target not in cls.targets:
            sort = "workload client" if cls.targets == CLIENT_TARGETS else "node"
            raise FaultError(f"{cls.kind} hits a {sort}: target must be one of {', '.join(cls.targets)}, "
                             f"not {target!r}")

    @classmethod
    def check_plan(cls, target: str, options: Any, spec: ClusterSpec) -> None:
        """Refuse, before anything starts, a plan that could never do anything on this cluster (FaultError).

        The default accepts every plan; a fault whose plan can be empty by
        construction (a partition that cuts nobody) overrides it.
        """

    @classmethod
    def check_inner(cls, options: Any, inner: "type[Fault]") -> None:
        """Refuse, before anything starts, a fault nested on this one's victims that could never heal (FaultError).

        The default accepts every inner fault.
        """

    def choose(self, target: str) -> list[Victim]:
        """The nodes this application hits; empty when there is nothing to hit right now."""
        ids = [i for i in (getattr(c, "transactional_id", None) for c in self.clients) if i]
        groups = [g for g in (getattr(c, "group", None) for c in self.clients) if g]  # consumers', pipelines', shares'
        shares = [g for c in self.clients if c.role == "share_consumer" and (g := getattr(c, "group", None))]
        nodes = choose_targets(self.cluster, self.topic, target, self.rng, transactional_ids=ids, group_ids=groups,
                               share_groups=shares)
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

    @staticmethod
    def signal(clients: list[Client], method: str, name: str) -> str:
        """Call each client's ``method`` (kill, freeze, thaw); the detail line: the signal ``name`` it sends and
        each process's pid."""
        pids = {c.name: c.pid for c in clients}
        for client in clients:
            getattr(client, method)()
        return f"{name} " + ", ".join(f"{process} (pid {pid})" for process, pid in pids.items())
