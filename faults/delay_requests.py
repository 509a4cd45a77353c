"""delay-requests: requests of chosen Kafka APIs from chosen clients to the target brokers are held by the
request path and delivered late, on their own connection, in order, while new connections pass.

This is KAFKA-17754's trigger: the client times out, retries on a new connection (which passes), goes on,
and then the held request (an EndTxn, a Produce) reaches the broker. The fault speaks only to the
cluster's :class:`clusters.request_path.RequestPath`. Applying it starts one hold rule per target broker
on the connections open at that moment; healing stops the rules and waits until every request they held
was delivered (each is held for its full time) and answered, then each becomes a ``request`` line in
events.jsonl (``evidence``): which request, from which client, bound for which broker, on which
connection, when held, when delivered, what the broker answered.

Options (scalars, as every fault's): :class:`RequestOptions` and :class:`TimedRequestOptions` below.

:class:`RequestFault` is what every request-level fault shares (drop-responses and replay-requests are
its other kinds); a window in which it matched no request is recorded as not having taken effect.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from clusters.node import Node
from clusters.request_path import HeldRequest, RequestPathError
from clusters.spec import ClusterSpec
from faults.base import Fault, FaultError, FaultOptions, with_defaults
from faults.targets import CLIENT_TARGETS, RANDOM_CLIENT

log = logging.getLogger(__name__)

# whose requests: each workload role that a client fault can target (their names are said once, there), and the
# brokers' own
ROLES = (*(t for t in CLIENT_TARGETS if t != RANDOM_CLIENT), "broker")
BROKER_TARGETS = ("partition-leader", "random-broker", "majority-brokers", "all-brokers", "txn-coordinator",
                  "group-coordinator", "share-coordinator")
ANSWER_GRACE_S = 35   # after the last delivery, how long heal waits for the broker's answers (the proxy gives up at 30)


def _names(value: Any) -> list[str]:
    """A comma-separated option as a list of names."""
    return [n.strip() for n in str(value).split(",") if n.strip()]


class RequestOptions(FaultOptions):
    """What every request-level fault is told: which requests, from whom, on which connections, how many."""

    apis: str = Field(description="Kafka's API names, comma-separated: EndTxn, Produce, AddPartitionsToTxn, "
                                  "TxnOffsetCommit, Fetch, ShareFetch, ShareAcknowledge, ...")
    roles: str = Field("producer", description="whose requests, comma-separated: producer, consumer, pipeline, "
                       "share_consumer, broker (the brokers' own requests to each other, only with "
                       "cluster.inter_broker_request_path); all: every client, the harness's own too")
    connections: Literal["existing", "all"] = Field(description="existing: only connections open when the fault "
                                                    "starts, so a retry on a new connection passes; all: new ones too")
    limit: int | None = Field(None, ge=1, description="at most this many requests matched per broker; null: no limit")

    @field_validator("apis")
    @classmethod
    def _apis(cls, apis: str) -> str:
        from clusters.proxy.wire import api_list  # the wire protocol's tables load only when a scenario names APIs
        api_list(apis)
        return apis

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: str) -> str:
        names = _names(roles)
        if names != ["all"] and (not names or not set(names) <= set(ROLES)):
            raise ValueError(f"must be a list of {', '.join(ROLES)}, comma-separated (or all: every client)")
        return roles


class TimedRequestOptions(RequestOptions):
    """A request fault that holds what it matches for a while (delay) or sends it again later (replay)."""

    hold_s: float = Field(gt=0, description="how long each request is held (delay) or when its copy is sent "
                                            "(replay)")
    hold_max_s: float | None = Field(None, description="with it, a time drawn per request from [hold_s, "
                                                       "hold_max_s]; null: exactly hold_s")

    @model_validator(mode="after")
    def _hold_range(self) -> "TimedRequestOptions":
        if self.hold_max_s is not None and self.hold_max_s < self.hold_s:
            raise ValueError(f"need hold_s <= hold_max_s, not {self.hold_s} and {self.hold_max_s}")
        return self


def broker_client_ids(brokers: Iterable[int]) -> list[str]:
    """The client.ids a broker's own requests to another broker carry (as the request path recorded them on
    Kafka 3.9): ``broker-<id>-...`` (its replica fetchers ``broker-<id>-fetcher-<n>``, its transaction marker
    sender ``broker-<id>-txn-marker-sender``), a partition leader's AddPartitionsToTxn verification
    ``AddPartitionsManager-client-<id>`` and, in ZooKeeper mode, its broker id alone: the controller's channel
    to each broker and a broker's channel to the controller (AllocateProducerIds)."""
    return ["broker-*", "AddPartitionsManager-client-*", *(str(b) for b in sorted(brokers))]


class RequestFault(Fault[Node]):
    """What the request-level faults share: a rule of the request path per target broker, for the chosen APIs
    from the chosen roles' clients; healing stops the rules, waits until what they touched was delivered and
    answered, and each request becomes a ``request`` line (``evidence``). A window in which the rules matched
    no request changed nothing: ``no_effect`` says so, and the run counts it as not having taken effect."""

    targets: ClassVar[tuple[str, ...]] = BROKER_TARGETS  # the request path sits before brokers only
    action: ClassVar[str]       # the request path's action (clusters/proxy/core.py ACTIONS)
    settings: RequestOptions

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rules: list[str] = []
        self._held: list[HeldRequest] = []
        self._nodes: list[str] = []

    @classmethod
    def check_plan(cls, target: str, options: RequestOptions, spec: ClusterSpec) -> None:
        if "broker" in _names(options.roles) and not spec.inter_broker_request_path:
            raise FaultError(f"{cls.kind}: roles broker needs the request path between the brokers: set "
                             "cluster.inter_broker_request_path: true")
        if not spec.request_path:
            raise FaultError(f"{cls.kind} needs the cluster's request path (ClusterSpec.request_path)")

    def choose(self, target: str) -> list[Node]:
        return [n for n in super().choose(target) if n.role == "broker"]

    def _client_ids(self) -> list[str] | None:
        """The client.ids of the chosen roles' processes: ``kchaos-<name>`` and its replacements' ``kchaos-<name>.N``;
        role broker adds the brokers' own (broker_client_ids)."""
        roles = _names(self.settings.roles)
        if roles == ["all"]:
            return None
        names = sorted({getattr(c, "base_name", c.name) for c in self.clients if c.role in roles})
        ids = [p for n in names for p in (f"kchaos-{n}", f"kchaos-{n}.*")]
        if "broker" in roles:
            ids += broker_client_ids(b.node_id for b in self.cluster.brokers)
        return ids

    def _longest_s(self) -> float:
        """The longest a request is held (a copy kept) before it goes."""
        s = self.settings
        return (s.hold_max_s or s.hold_s) if isinstance(s, TimedRequestOptions) else 0.0

    def apply(self, nodes: list[Node]) -> str:
        path = self.cluster.request_path
        if path is None:
            raise FaultError(f"{self.kind}: this cluster has no request path")
        s = self.settings
        clients = self._client_ids()
        apis = _names(s.apis)
        if clients == []:
            raise FaultError(f"{self.kind}: the workload has no {s.roles} whose requests it could touch")
        hold_s, hold_max_s = (s.hold_s, s.hold_max_s) if isinstance(s, TimedRequestOptions) else (0.0, None)
        try:
            for node in nodes:
                self._rules.append(path.hold(apis, broker=node.node_id, hold_s=hold_s, hold_max_s=hold_max_s,
                                             clients=clients, connections=s.connections, limit=s.limit,
                                             fault=self.kind, seed=self.rng.randrange(1 << 32),
                                             action=self.action))
        except RequestPathError as e:
            raise FaultError(str(e)) from None
        self._nodes = [n.name for n in nodes]
        who = "every client" if clients is None else "/".join(_names(s.roles))
        scope = "connections open now" if s.connections == "existing" else "every connection"
        return self._describe(", ".join(apis), who, ", ".join(self._nodes), scope)

    def _describe(self, apis: str, who: str, nodes: str, scope: str) -> str:
        raise NotImplementedError

    def heal(self, nodes: list[Node]) -> None:
        """Stop the rules; wait until what they touched has gone to its broker (when due) and been answered."""
        path = self.cluster.request_path
        if path is None or not self._rules:
            return
        try:
            for rule in self._rules:
                path.release(rule)
            held = path.settled(self._rules, self._longest_s() + ANSWER_GRACE_S)
        except RequestPathError as e:
            raise FaultError(str(e)) from None
        if any(h.outcome == "held" for h in held):
            raise FaultError(f"{self.kind}: {sum(h.outcome == 'held' for h in held)} held requests were never "
                             "delivered")
        self._held = held
        matched = sum(h.cause == "matched" for h in held)
        log.info("%s touched %d requests (%d more behind them)", self.kind, matched, len(held) - matched)

    def evidence(self, origin_ns: int) -> list[dict[str, Any]]:
        """A ``request`` line for every request it touched, times on the run's clock."""
        return [h.event(origin_ns) for h in self._held]

    def no_effect(self) -> str | None:
        if not self._rules or any(h.cause == "matched" for h in self._held):
            return None
        return (f"{self.kind} matched no request in its window ({self.settings.apis} from "
                f"{self.settings.roles} to {', '.join(self._nodes)})")


class DelayRequestsFault(RequestFault):
    kind = "delay-requests"
    action = "delay"
    Options = with_defaults(TimedRequestOptions, "DelayRequestsOptions", apis="EndTxn", hold_s=6.0,
                            connections="existing")
    settings: TimedRequestOptions

    def _describe(self, apis: str, who: str, nodes: str, scope: str) -> str:
        s = self.settings
        hold = f"{s.hold_s} s" if s.hold_max_s is None else f"{s.hold_s}-{s.hold_max_s} s"
        return f"hold {apis} from {who} to {nodes} for {hold} on {scope}"
