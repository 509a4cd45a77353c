"""The request path's engine: one listening port per broker, each client connection paired with its own
upstream connection, requests framed and matched against hold rules, responses matched to requests.

With no rule active a request is read whole (its length prefix, then its bytes), its fixed header read,
and written upstream at once; a response is read whole and written back. A rule holds the requests it
matches: the first matching request on a connection stops that connection's requests (Kafka answers a
connection's requests in order, so everything behind it waits too) until its hold has passed, then they
go to the broker on the same upstream connection, in order. If the client closes its side meanwhile, the
upstream connection stays open until every held request has been delivered and the broker has answered
the last one (the answers are discarded): the broker sees exactly the late request a slow network would
have delivered. New connections are not held by a rule that covers only the connections open when it
began (``connections="existing"``, the default).

A rule has one of three actions. ``delay`` holds, as above. ``drop-response`` sends the matched request on
at once and drops the broker's answer to it (matched by correlation id); from that request on the
connection is silent both ways, as if the network between them had died: later requests of the client are
not delivered (each is recorded, ``cause`` behind, never delivered) and no answer reaches it, so the client
times the request out and closes the connection (forwarding the later answers instead would show the
client a gap in its correlation ids: the Java client treats that as a protocol error and disconnects at
once, which is not the time-out a lost answer causes). Releasing the rule closes the connections it
silenced. ``replay`` sends the matched request on at once and keeps a copy, which goes to the broker
again when its time has passed, on a new upstream connection of its own (a stale retry); the broker's
answer to the copy is recorded and goes nowhere.

The proxy has one listening port per broker for the workload's clients (listener ``clients``) and, when
the request path also stands between the brokers, a second one per broker for the brokers themselves
(listener ``inter-broker``, on the address the brokers reach the host at): each port forwards to its own
address of the broker (``route``). Rules match on both alike; a broker's own requests carry its client ids
(``broker-<id>-fetcher-<n>``, ``broker-<id>-txn-marker-sender``, the ZooKeeper-mode controller's ``<id>``).

Every held request becomes a :class:`Held` record: which API, from which client id, bound for which
broker, on which connection, when it arrived and when it was delivered, what the broker answered, and
the fields of its body (decoded by kio) that say which transaction it belonged to.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from clusters.proxy import wire

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0   # after its client closed, how long a drained upstream waits for the last answer
HIGH_WATER = 1 << 20      # bytes buffered towards a peer before a pump waits for them to leave


ACTIONS = {"delay": "delayed", "drop-response": "response-dropped", "replay": "replayed",   # -> a record's action
           "watch": "watched"}
CLIENTS, INTER_BROKER = "clients", "inter-broker"   # the proxy's listeners: the workload's clients, the brokers


@dataclass
class Rule:
    """Hold (``action``; or drop the answer to, or replay) requests of ``apis`` bound for ``broker`` (None:
    every broker) from clients whose client.id is one of ``clients`` (None: any; an entry ending in ``*`` is
    a prefix) for a time drawn uniformly from [hold_min_s, hold_max_s] (replay: the time until the copy goes)."""

    rule_id: str
    fault: str
    apis: frozenset[int]
    broker: int | None
    clients: tuple[str, ...] | None
    hold_min_s: float
    hold_max_s: float
    connections: str              # "existing": only connections open when the rule began; "all"
    limit: int | None             # at most this many matched requests (None: no limit)
    action: str = "delay"         # delay | drop-response | replay (ACTIONS)
    existing: frozenset[int] = frozenset()
    matched: int = 0
    active: bool = True
    rng: random.Random = field(default_factory=random.Random, repr=False)

    def matches(self, link: "Link", header: wire.RequestHeader) -> bool:
        if not self.active or header.api_key not in self.apis:
            return False
        if self.broker is not None and link.broker != self.broker:
            return False
        if self.connections == "existing" and link.id not in self.existing:
            return False
        if self.clients is not None and not client_matches(header.client_id or "", self.clients):
            return False
        return self.limit is None or self.matched < self.limit

    def hold_ns(self) -> int:
        return int(self.rng.uniform(self.hold_min_s, self.hold_max_s) * 1e9)


def client_matches(client_id: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``client_id`` is one of ``patterns`` (``name*``: any id that starts with name)."""
    return any(client_id.startswith(p[:-1]) if p.endswith("*") else client_id == p for p in patterns)


@dataclass
class Held:
    """One request a rule held (``cause`` matched) or that waited behind one on its connection (behind)."""

    fault: str
    rule: str
    api: str
    api_version: int
    client: str | None
    node: int
    connection: int
    correlation_id: int
    cause: str                     # "matched" | "behind"
    held_ns: int                   # monotonic clock (time.monotonic_ns) when the proxy read it
    release_at_ns: int             # when it was due (0: as soon as the request before it went)
    action: str = "delayed"
    released_ns: int | None = None     # when it was written to the broker (None: never)
    client_closed: bool = False         # whether the client had closed its side when it was delivered
    response_ns: int | None = None      # when the broker's answer came back
    response_error: Any = None          # the answer's error code (kio's name: "none", "producer_fenced")
    response_forwarded: bool | None = None
    outcome: str = "held"               # held | delivered | answered | upstream-closed | discarded
    detail: dict[str, Any] = field(default_factory=dict)
    listener: str = CLIENTS             # the proxy's listener it came on: clients | inter-broker

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Queued:
    data: bytes
    header: wire.RequestHeader
    record: Held
    expects_response: bool


class Link:
    """One client connection and the upstream connection it is paired with."""

    def __init__(self, link_id: int, broker: int, peer: str, client_r: asyncio.StreamReader,
                 client_w: asyncio.StreamWriter, listener: str = CLIENTS) -> None:
        self.id = link_id
        self.broker = broker
        self.listener = listener
        self.peer = peer
        self.client_r = client_r
        self.client_w = client_w
        self.up_r: asyncio.StreamReader | None = None
        self.up_w: asyncio.StreamWriter | None = None
        self.queue: deque[_Queued] = deque()
        self.draining = False
        self.client_open = True
        self.upstream_open = False
        self.wake = asyncio.Event()
        self.held: dict[int, Held] = {}       # correlation id -> record, for held requests awaiting an answer
        self.awaiting: int | None = None      # correlation id of the last delivered held request that expects an answer
        self.answered = asyncio.Event()
        self.requests = 0
        self.responses = 0
        self.muted: Rule | None = None        # the drop-response rule that silenced this connection
        self.close_when_answered = False      # its rule was released: close once the broker answered all


class Proxy:
    """The engine; the process around it (clusters/proxy/__main__.py) adds the control socket."""

    def __init__(self, brokers: list[int], listen_host: str = "127.0.0.1",
                 clock: Callable[[], int] = time.monotonic_ns, inter_broker_host: str | None = None) -> None:
        self.brokers = list(brokers)
        self.listen_host = listen_host
        self.clock = clock
        # listener -> the host it listens on; clients always, inter-broker when the brokers go through it too
        self.hosts = {CLIENTS: listen_host, **({INTER_BROKER: inter_broker_host} if inter_broker_host else {})}
        self.listening: dict[str, dict[int, int]] = {name: {} for name in self.hosts}             # -> broker -> port
        self.routing: dict[str, dict[int, tuple[str, int]]] = {name: {} for name in self.hosts}   # -> broker -> address
        self.routes = self.routing[CLIENTS]
        self.ports = self.listening[CLIENTS]
        self.rules: dict[str, Rule] = {}
        self.records: list[Held] = []
        self.links: dict[int, Link] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._next_link = 1
        self._replays = 0   # copies not yet delivered
        self._tasks: set[asyncio.Task[Any]] = set()
        self.totals = {"connections": 0, "requests": 0, "responses": 0, "refused": 0}

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ports: dict[int, int] | None = None) -> dict[int, int]:
        """Listen on one port per broker and listener (the clients' ``ports``, or free ones the system picks);
        returns the clients' (``listening`` has every listener's)."""
        for listener, host in self.hosts.items():
            for broker in self.brokers:
                server = await asyncio.start_server(
                    lambda r, w, b=broker, name=listener: self._accept(b, r, w, name), host,
                    (ports or {}).get(broker, 0) if listener == CLIENTS else 0)
                self._servers.append(server)
                self.listening[listener][broker] = server.sockets[0].getsockname()[1]
        return dict(self.ports)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for link in list(self.links.values()):
            _close(link.client_w)
            if link.up_w is not None:
                _close(link.up_w)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def route(self, broker: int, host: str, port: int, listener: str = CLIENTS) -> None:
        """Where new connections for ``broker`` on ``listener`` go (a restarted broker may have a new address)."""
        if listener not in self.listening:
            raise ValueError(f"the proxy has no listener {listener!r}")
        if broker not in self.listening[listener]:
            raise ValueError(f"the proxy has no port for broker {broker}")
        self.routing[listener][broker] = (host, port)

    # ------------------------------------------------------------------ rules

    def hold(self, rule_id: str, apis: list[str], broker: int | None = None, clients: list[str] | None = None,
             hold_s: float = 5.0, hold_max_s: float | None = None, connections: str = "existing",
             limit: int | None = None, fault: str = "delay-requests", seed: int | None = None,
             action: str = "delay") -> Rule:
        if rule_id in self.rules and self.rules[rule_id].active:
            raise ValueError(f"rule {rule_id!r} is already active")
        if connections not in ("existing", "all"):
            raise ValueError(f"connections must be existing or all, not {connections!r}")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
        if broker is not None and broker not in self.ports:
            raise ValueError(f"the proxy has no port for broker {broker}")
        hold_max = hold_s if hold_max_s is None else hold_max_s
        if hold_s < 0 or hold_max < hold_s:
            raise ValueError(f"hold time must be 0 <= {hold_s} <= {hold_max}")
        rule = Rule(rule_id, fault, frozenset(wire.api_key(a) for a in apis), broker,
                    tuple(clients) if clients is not None else None, hold_s, hold_max, connections, limit,
                    action=action, existing=frozenset(self.links), rng=random.Random(seed))
        self.rules[rule_id] = rule
        return rule

    def release(self, rule_id: str, flush: bool = False) -> int:
        """Stop the rule matching; with ``flush``, deliver what it holds (or the copies it keeps) now instead
        of when due. The connections a drop-response rule silenced close once the broker has answered every
        request delivered on them.

        Returns how many requests it still holds (0 after a flush once they went)."""
        rule = self.rules.get(rule_id)
        if rule is None:
            raise ValueError(f"no rule {rule_id!r}")
        rule.active = False
        pending = 0
        for link in self.links.values():
            for q in link.queue:
                if q.record.rule == rule_id:
                    pending += 1
                    if flush:
                        q.record.release_at_ns = 0
            if flush:
                link.wake.set()
            if link.muted is rule:
                link.close_when_answered = True
                if not link.held:
                    _close(link.client_w)
        for record in self.records:
            if record.rule == rule_id and record.action == "replayed" and record.outcome == "held":
                pending += 1
                if flush:
                    record.release_at_ns = 0
        return pending

    def pending(self) -> int:
        return sum(len(link.queue) for link in self.links.values()) + self._replays

    def stats(self) -> dict[str, Any]:
        return {**self.totals, "open": len(self.links), "pending": self.pending(), "records": len(self.records),
                "rules": {r.rule_id: {"active": r.active, "matched": r.matched} for r in self.rules.values()}}

    # ------------------------------------------------------------------ connections

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _accept(self, broker: int, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                      listener: str = CLIENTS) -> None:
        route = self.routing[listener].get(broker)
        if route is None:   # the broker's address is not known yet: like a port nothing listens on
            self.totals["refused"] += 1
            _close(client_w)
            return
        peer = client_w.get_extra_info("peername")
        link = Link(self._next_link, broker, f"{peer[0]}:{peer[1]}" if peer else "?", client_r, client_w, listener)
        self._next_link += 1
        try:
            link.up_r, link.up_w = await asyncio.open_connection(*route)
        except OSError:
            self.totals["refused"] += 1
            _close(client_w)
            return
        link.upstream_open = True
        self.links[link.id] = link
        self.totals["connections"] += 1
        responses = self._spawn(self._responses(link))
        try:
            await self._requests(link)
        finally:
            link.client_open = False
            if link.muted is not None and link.held and link.upstream_open:   # the dropped answer still due
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(link.answered.wait(), DRAIN_TIMEOUT_S)
            if not link.queue and not link.draining:
                self._close_upstream(link)
            await asyncio.gather(responses, return_exceptions=True)
            self.links.pop(link.id, None)

    async def _requests(self, link: Link) -> None:
        """Client -> broker: frame each request, hold it or send it on."""
        reader, up = link.client_r, link.up_w
        assert up is not None
        try:
            while True:
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(wire.frame_length(prefix))
                header = wire.request_header(payload)
                link.requests += 1
                self.totals["requests"] += 1
                if link.muted is not None:   # silent since a dropped answer: nothing more reaches the broker
                    record, _ = self._record(link, prefix + payload, header, link.muted, "behind")
                    record.outcome = "discarded"
                    self.records.append(record)
                    continue
                if link.queue or link.draining:
                    self._enqueue(link, prefix + payload, header, None)
                    continue
                rule = self._match(link, header)
                if rule is not None and rule.action == "delay":
                    self._enqueue(link, prefix + payload, header, rule)
                    link.draining = True
                    self._spawn(self._drain(link))
                    continue
                if rule is not None and link.upstream_open:
                    self._act(link, prefix + payload, header, rule)
                if not link.upstream_open:
                    return
                up.write(prefix)
                up.write(payload)
                if up.transport.get_write_buffer_size() > HIGH_WATER:
                    await up.drain()
        except (asyncio.IncompleteReadError, ConnectionError, wire.WireError):
            return

    def _match(self, link: Link, header: wire.RequestHeader) -> Rule | None:
        """The rule that acts on this request: a fault's before a watch (a fault's record says what the watch's
        would, its answer included), else the first that matches."""
        watched = None
        for rule in self.rules.values():
            if rule.matches(link, header):
                if rule.action != "watch":
                    return rule
                watched = watched or rule
        return watched

    def _enqueue(self, link: Link, data: bytes, header: wire.RequestHeader, rule: Rule | None) -> None:
        if rule is not None:
            rule.matched += 1
            record, expects = self._record(link, data, header, rule, "matched")
        else:   # behind a held request: goes as soon as the one before it went
            first = link.queue[0].record if link.queue else None
            record, expects = self._record(link, data, header, None, "behind")
            record.rule, record.fault = (first.rule, first.fault) if first else ("", "")
        self.records.append(record)
        link.queue.append(_Queued(data, header, record, expects))

    def _act(self, link: Link, data: bytes, header: wire.RequestHeader, rule: Rule) -> None:
        """A drop-response, replay or watch rule matched a request about to go to the broker: note what to drop,
        keep a copy to send again, or only note it and its answer. A request the broker does not answer (a
        Produce with acks=0) has no answer to drop: it passes unmatched."""
        record, expects = self._record(link, data, header, rule, "matched")
        if rule.action == "watch":   # recorded, with its answer: nothing else changes
            record.released_ns = record.held_ns
            record.outcome = "delivered"
            if expects:
                link.held[header.correlation_id] = record
        elif rule.action == "drop-response":
            if not expects:
                return
            record.released_ns = record.held_ns
            record.outcome = "delivered"
            link.held[header.correlation_id] = record
            link.awaiting = header.correlation_id
            link.answered.clear()
            link.muted = rule
        else:
            self._replays += 1
            self._spawn(self._replay(link.broker, data, record, expects, link.listener))
        rule.matched += 1
        self.records.append(record)

    def _record(self, link: Link, data: bytes, header: wire.RequestHeader, rule: Rule | None,
                cause: str) -> tuple[Held, bool]:
        """A record of a request a rule touched (or that waited behind one), and whether the broker answers it."""
        now = self.clock()
        rule_id, fault = (rule.rule_id, rule.fault) if rule is not None else ("", "")
        action = ACTIONS[rule.action] if rule is not None else "delayed"
        due = now + rule.hold_ns() if rule is not None and cause == "matched" else 0
        body: dict[str, Any] | None = None
        detail: dict[str, Any] = {}
        try:
            body = wire.decode_request(data[4:])
            detail = wire.summary(header.api_key, body)
        except Exception as e:  # kio does not know this version, or the body is not what it says
            detail = {"undecoded": f"{type(e).__name__}: {e}"[:200]}
        record = Held(fault, rule_id, wire.api_name(header.api_key), header.api_version, header.client_id,
                      link.broker, link.id, header.correlation_id, cause, now, due, action=action, detail=detail,
                      listener=link.listener)
        return record, wire.expects_response(header.api_key, body)

    async def _replay(self, broker: int, data: bytes, record: Held, expects: bool, listener: str = CLIENTS) -> None:
        """Send a copy of a request again when due, on a new upstream connection to the listener it came for;
        note the broker's answer."""
        writer: asyncio.StreamWriter | None = None
        try:
            while (due := record.release_at_ns - self.clock()) > 0:   # a flush sets release_at_ns to 0
                await asyncio.sleep(min(due / 1e9, 0.05))
            route = self.routing[listener].get(broker)
            if route is None:
                raise ConnectionError(f"no route to broker {broker}")
            reader, writer = await asyncio.open_connection(*route)
            record.detail["replay_connection"] = self._next_link
            self._next_link += 1
            writer.write(data)
            record.released_ns = self.clock()
            record.outcome = "delivered"
            await writer.drain()
            if expects:
                async def answer() -> bytes:
                    return await reader.readexactly(wire.frame_length(await reader.readexactly(4)))
                self._note_answer(record, await asyncio.wait_for(answer(), DRAIN_TIMEOUT_S), forwarded=False)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, wire.WireError) as e:
            if record.released_ns is None:
                record.outcome = "upstream-closed"
            record.detail["replay_error"] = f"{type(e).__name__}: {e}"[:200]
        finally:
            self._replays -= 1
            if writer is not None:
                _close(writer)

    async def _drain(self, link: Link) -> None:
        """Deliver the held requests of ``link`` in order, each when due; then close an abandoned upstream."""
        try:
            while link.queue:
                item = link.queue[0]
                delay_ns = item.record.release_at_ns - self.clock()
                if delay_ns > 0:
                    link.wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(link.wake.wait(), delay_ns / 1e9)
                    continue
                link.queue.popleft()
                record = item.record
                if not link.upstream_open or link.up_w is None:
                    record.outcome = "upstream-closed"
                    continue
                if item.expects_response:
                    link.held[item.header.correlation_id] = record
                    link.awaiting = item.header.correlation_id
                    link.answered.clear()
                link.up_w.write(item.data)
                record.released_ns = self.clock()
                record.client_closed = not link.client_open
                record.outcome = "delivered"
                with contextlib.suppress(ConnectionError):
                    await link.up_w.drain()
        finally:
            link.draining = False
        if not link.client_open:
            if link.awaiting is not None and link.upstream_open:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(link.answered.wait(), DRAIN_TIMEOUT_S)
            self._close_upstream(link)

    async def _responses(self, link: Link) -> None:
        """Broker -> client: frame each response; note the answers to held requests."""
        reader, client = link.up_r, link.client_w
        assert reader is not None
        try:
            while True:
                prefix = await reader.readexactly(4)
                payload = await reader.readexactly(wire.frame_length(prefix))
                link.responses += 1
                self.totals["responses"] += 1
                record = link.held.pop(wire.response_correlation_id(payload), None) if link.held else None
                if record is not None:
                    self._answered(link, record, payload)
                # answers to requests sent before the dropped one still pass (Kafka answers in order, and
                # nothing after it was delivered): only the dropped answer is withheld
                if link.client_open and (record is None or record.action != ACTIONS["drop-response"]):
                    client.write(prefix)
                    client.write(payload)
                    if client.transport.get_write_buffer_size() > HIGH_WATER:
                        with contextlib.suppress(ConnectionError):
                            await client.drain()
                if link.close_when_answered and not link.held:
                    _close(client)   # a silenced connection whose rule was released: answered, now closed
        except (asyncio.IncompleteReadError, ConnectionError, wire.WireError):
            pass
        finally:
            link.upstream_open = False
            link.answered.set()
            link.wake.set()
            _close(client)   # the broker closed: so does the client's side, as a direct connection would

    def _answered(self, link: Link, record: Held, payload: bytes) -> None:
        self._note_answer(record, payload, forwarded=link.client_open and record.action != ACTIONS["drop-response"])
        if record.correlation_id == link.awaiting:
            link.answered.set()

    def _note_answer(self, record: Held, payload: bytes, forwarded: bool) -> None:
        record.response_ns = self.clock()
        record.response_forwarded = forwarded
        record.outcome = "answered"
        try:
            api = wire.api_keys()[record.api]
            if api in wire.ZOOKEEPER_APIS:
                record.response_error = wire.zookeeper_response_error(api, record.api_version, payload)
            else:
                body = wire.decode_response(api, record.api_version, payload)
                record.response_error = wire.error_of(body)
                if answer := wire.answer_summary(api, body):
                    record.detail["answer"] = answer
        except Exception as e:
            record.response_error = f"undecoded: {type(e).__name__}"

    def _close_upstream(self, link: Link) -> None:
        if link.up_w is not None:
            _close(link.up_w)


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
