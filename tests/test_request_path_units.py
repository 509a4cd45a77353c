"""The request path without a cluster: the wire format, and the proxy's hold and release logic against a
fake broker made of real asyncio sockets (it answers every request with its correlation id and logs
which of its connections each request came on, and when)."""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.end_txn.v3.response import EndTxnResponse
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader as KioHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from clusters.proxy import wire
from clusters.proxy.core import Proxy
from clusters.request_path import RequestPath

END_TXN = 26
METADATA = 3
HOLD_S = 0.6


def end_txn(correlation_id: int, client_id: str | None = "kchaos-p1", txn: str = "t-1",
            committed: bool = True) -> bytes:
    """A whole EndTxn v3 request, length prefix included, encoded by kio."""
    out = io.BytesIO()
    entity_writer(KioHeader)(out, KioHeader(request_api_key=i16(END_TXN), request_api_version=i16(3),
                                            correlation_id=i32(correlation_id), client_id=client_id))
    entity_writer(EndTxnRequest)(out, EndTxnRequest(transactional_id=txn, producer_id=i64(7),
                                                    producer_epoch=i16(2), committed=committed))
    return wire.frame(out.getvalue())


def metadata_request(correlation_id: int, client_id: str = "kchaos-p1") -> bytes:
    """A Metadata v1 request (header v1, body: an empty topic array), by hand: only its header matters."""
    cid = client_id.encode()
    return wire.frame(struct.pack(">hhih", METADATA, 1, correlation_id, len(cid)) + cid + struct.pack(">i", 0))


def end_txn_response(correlation_id: int, error: ErrorCode = ErrorCode.none) -> bytes:
    out = io.BytesIO()
    entity_writer(ResponseHeader)(out, ResponseHeader(correlation_id=i32(correlation_id)))
    entity_writer(EndTxnResponse)(out, EndTxnResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                                                      error_code=error))
    return wire.frame(out.getvalue())


# ---------------------------------------------------------------------------------------------- wire

def test_request_header_is_read_by_hand_and_agrees_with_kio() -> None:
    payload = end_txn(41, "kchaos-p1")[4:]
    assert wire.frame_length(end_txn(41)[:4]) == len(payload)
    assert wire.request_header(payload) == wire.RequestHeader(END_TXN, 3, 41, "kchaos-p1")
    assert wire.request_header(end_txn(5, None)[4:]).client_id is None
    with pytest.raises(wire.WireError):
        wire.request_header(payload[:5])
    with pytest.raises(wire.WireError):
        wire.frame_length(struct.pack(">i", -1))


def test_api_names_come_from_kio_as_kafka_spells_them() -> None:
    assert wire.api_key("EndTxn") == 26
    assert wire.api_name(0) == "Produce"
    assert wire.api_key("AddPartitionsToTxn") == 24 and wire.api_key("TxnOffsetCommit") == 28
    with pytest.raises(ValueError, match="no Kafka API named 'Endtxn'"):
        wire.api_key("Endtxn")


def test_a_held_body_and_its_answer_are_decoded_by_kio() -> None:
    body = wire.decode_request(end_txn(3, txn="t-9", committed=False)[4:])
    assert wire.summary(END_TXN, body) == {"transactional_id": "t-9", "producer_id": 7, "producer_epoch": 2,
                                            "committed": False}
    answer = wire.decode_response(END_TXN, 3, end_txn_response(3, ErrorCode.producer_fenced)[4:])
    assert wire.error_of(answer) == "producer_fenced"
    assert wire.expects_response(END_TXN, body)
    assert not wire.expects_response(0, {"acks": 0}) and wire.expects_response(0, {"acks": -1})


def test_a_write_txn_markers_request_says_which_transactions_and_partitions() -> None:
    from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
    from kio.schema.write_txn_markers.v1.request import (WritableTxnMarker, WritableTxnMarkerTopic,
                                                         WriteTxnMarkersRequest)
    out = io.BytesIO()
    entity_writer(HeaderV2)(out, HeaderV2(request_api_key=i16(27), request_api_version=i16(1),
                                          correlation_id=i32(5), client_id="broker-1-txn-marker-sender"))
    marker = WritableTxnMarker(producer_id=i64(9), producer_epoch=i16(0), transaction_result=True,
                               topics=(WritableTxnMarkerTopic(name="t", partition_indexes=(i32(2), i32(0))),),
                               coordinator_epoch=i32(1))
    entity_writer(WriteTxnMarkersRequest)(out, WriteTxnMarkersRequest(markers=(marker,)))
    body = wire.decode_request(out.getvalue())
    assert wire.summary(27, body) == {"markers": [{"producer_id": 9, "producer_epoch": 0, "committed": True,
                                                   "partitions": ["t-0", "t-2"]}]}


def test_a_share_acknowledgement_and_its_answer_say_what_each_partition_acknowledged_and_was_told() -> None:
    import uuid

    from kio.schema.share_acknowledge.v1 import request as ack, response as answer
    from kio.static.primitive import i8
    topic = uuid.uuid4()
    out = io.BytesIO()
    entity_writer(KioHeader)(out, KioHeader(request_api_key=i16(79), request_api_version=i16(1),
                                            correlation_id=i32(8), client_id="kchaos-s0"))
    batches = (ack.AcknowledgementBatch(first_offset=i64(10), last_offset=i64(12), acknowledge_types=(i8(1),)),
               ack.AcknowledgementBatch(first_offset=i64(13), last_offset=i64(14),
                                        acknowledge_types=(i8(2), i8(3))))
    entity_writer(ack.ShareAcknowledgeRequest)(out, ack.ShareAcknowledgeRequest(
        group_id="g", member_id="m-1", share_session_epoch=i32(3),
        topics=(ack.AcknowledgeTopic(topic_id=topic, partitions=(
            ack.AcknowledgePartition(partition_index=i32(5), acknowledgement_batches=batches),)),)))
    body = wire.decode_request(out.getvalue())
    assert wire.summary(79, body) == {"group_id": "g", "member_id": "m-1",
                                      "acks": [[5, 10, 12, [1]], [5, 13, 14, [2, 3]]]}
    out = io.BytesIO()
    entity_writer(ResponseHeader)(out, ResponseHeader(correlation_id=i32(8)))
    leader = answer.LeaderIdAndEpoch(leader_id=i32(2), leader_epoch=i32(4))
    entity_writer(answer.ShareAcknowledgeResponse)(out, answer.ShareAcknowledgeResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, error_message=None,
        responses=(answer.ShareAcknowledgeTopicResponse(topic_id=topic, partitions=(
            answer.PartitionData(partition_index=i32(5), error_code=ErrorCode.invalid_record_state,
                                 error_message=None, current_leader=leader),)),),
        node_endpoints=()))
    decoded = wire.decode_response(79, 1, out.getvalue())
    assert wire.error_of(decoded) == "none"   # the top level: the partition's word is in the summary
    assert wire.answer_summary(79, decoded) == {"partitions": [[5, "invalid_record_state", None, []]]}
    assert wire.answer_summary(END_TXN, {"error_code": "none"}) is None


# ---------------------------------------------------------------------------------------------- engine

class FakeBroker:
    """Answers every request with an EndTxn response carrying its correlation id; logs each arrival."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[int, int, int, float]] = []   # (connection, api, correlation id, time)
        self.closed: list[tuple[int, float]] = []
        self.connections = 0
        self.port = 0
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> "FakeBroker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        try:
            while True:
                payload = await r.readexactly(wire.frame_length(await r.readexactly(4)))
                h = wire.request_header(payload)
                self.arrivals.append((conn, h.api_key, h.correlation_id, time.monotonic()))
                w.write(end_txn_response(h.correlation_id))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.append((conn, time.monotonic()))
        finally:
            w.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


class Client:
    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    @classmethod
    async def connect(cls, port: int) -> "Client":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, data: bytes) -> None:
        self.w.write(data)

    async def answer(self, timeout: float = 5) -> int:
        async def read() -> bytes:
            return await self.r.readexactly(wire.frame_length(await self.r.readexactly(4)))
        return wire.response_correlation_id(await asyncio.wait_for(read(), timeout))


def run(test: Callable[[Proxy, FakeBroker], Awaitable[None]]) -> None:
    async def main() -> None:
        broker = await FakeBroker().start()
        proxy = Proxy([1, 2])
        await proxy.start()
        proxy.route(1, "127.0.0.1", broker.port)
        try:
            await test(proxy, broker)
        finally:
            await proxy.close()
            broker.close()
    asyncio.run(main())


async def until(condition: Callable[[], Any], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def test_requests_pass_and_answers_return_with_no_rule() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        for i in range(1, 4):
            c.send(end_txn(i))
        assert [await c.answer() for _ in range(3)] == [1, 2, 3]
        assert [a[2] for a in broker.arrivals] == [1, 2, 3]
        assert proxy.records == []
    run(test)


def test_a_held_request_and_those_behind_it_arrive_late_in_order_while_a_new_connection_passes() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        old = await Client.connect(proxy.ports[1])
        old.send(metadata_request(1))
        assert await old.answer() == 1
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=HOLD_S)
        sent = time.monotonic()
        old.send(end_txn(2))
        old.send(metadata_request(3))   # not an EndTxn, but behind one on the same connection
        await asyncio.sleep(0.1)
        new = await Client.connect(proxy.ports[1])   # the client's retry, on a new connection
        new.send(end_txn(100))
        assert await new.answer() == 100
        new_arrival = broker.arrivals[-1]
        assert new_arrival[2] == 100 and new_arrival[3] - sent < HOLD_S / 2
        assert [await old.answer() for _ in range(2)] == [2, 3]
        late = [a for a in broker.arrivals if a[2] in (2, 3)]
        assert [a[2] for a in late] == [2, 3] and {a[0] for a in late} == {1}   # in order, on the old connection
        assert late[0][3] - sent >= HOLD_S
        matched, behind = proxy.records
        assert (matched.api, matched.cause, matched.correlation_id, matched.client) == ("EndTxn", "matched", 2,
                                                                                        "kchaos-p1")
        assert (behind.api, behind.cause, behind.correlation_id) == ("Metadata", "behind", 3)
        assert matched.detail["transactional_id"] == "t-1" and matched.detail["committed"] is True
        assert matched.released_ns is not None and matched.released_ns - matched.held_ns >= HOLD_S * 1e9
        assert matched.outcome == "answered" and matched.response_error == "none" and matched.response_forwarded
        assert not matched.client_closed
        assert proxy.pending() == 0
    run(test)


def test_a_request_held_after_its_client_gave_up_still_reaches_the_broker_on_its_own_connection() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        c.send(metadata_request(1))
        assert await c.answer() == 1
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=HOLD_S)
        c.send(end_txn(2, committed=False))
        await asyncio.sleep(0.1)
        c.w.close()   # the client's request time-out: it closes the connection
        await until(lambda: proxy.records and proxy.records[0].outcome == "answered")
        (held,) = proxy.records
        assert held.client_closed and held.response_forwarded is False
        assert [(a[0], a[2]) for a in broker.arrivals] == [(1, 1), (1, 2)]
        await until(lambda: broker.closed)   # the abandoned upstream closes once answered
        assert broker.closed[0][0] == 1 and not proxy.links
    run(test)


def test_release_stops_matching_and_flush_delivers_at_once() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        await until(lambda: proxy.links)
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=30)
        c.send(end_txn(1))
        await until(lambda: proxy.pending() == 1)
        started = time.monotonic()
        assert proxy.release("r1", flush=True) == 1
        assert await c.answer() == 1 and time.monotonic() - started < 1
        c.send(end_txn(2))   # the rule no longer matches
        assert await c.answer() == 2 and len(proxy.records) == 1
    run(test)


def test_rules_choose_by_api_broker_client_and_connection() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        proxy.route(2, "127.0.0.1", broker.port)
        a = await Client.connect(proxy.ports[1])
        b = await Client.connect(proxy.ports[2])
        await until(lambda: len(proxy.links) == 2)
        proxy.hold("r1", ["EndTxn"], broker=1, clients=["kchaos-p*", "other"], hold_s=HOLD_S)
        a.send(end_txn(1, client_id="kchaos-c1"))   # another client
        assert await a.answer(1) == 1
        a.send(metadata_request(2))                  # another API
        assert await a.answer(1) == 2
        b.send(end_txn(3))                           # another broker
        assert await b.answer(1) == 3
        assert proxy.records == []
        a.send(end_txn(4))
        with pytest.raises(asyncio.TimeoutError):
            await a.answer(HOLD_S / 3)
        assert await a.answer() == 4 and [r.correlation_id for r in proxy.records] == [4]
        proxy.hold("r2", ["EndTxn"], broker=1, hold_s=HOLD_S, connections="all", limit=1)
        proxy.release("r1")
        c = await Client.connect(proxy.ports[1])   # new, but the rule covers all connections
        started = time.monotonic()
        c.send(end_txn(5))
        assert await c.answer() == 5 and time.monotonic() - started >= HOLD_S
        c.send(end_txn(6))                          # the limit is reached
        assert await c.answer(HOLD_S / 3) == 6
    run(test)


def test_the_proxy_process_is_driven_through_its_handle(tmp_path: Path) -> None:
    async def main() -> None:
        broker = await FakeBroker().start()
        path = await asyncio.to_thread(RequestPath.start, [1, 2, 3], tmp_path)
        try:
            assert set(path.ports) == {1, 2, 3} and path.bootstrap_servers.startswith("127.0.0.1:")
            await asyncio.to_thread(path.route, 1, "127.0.0.1", broker.port)
            c = await Client.connect(path.ports[1])
            c.send(metadata_request(1))
            assert await c.answer() == 1
            rule = await asyncio.to_thread(lambda: path.hold(["EndTxn"], broker=1, hold_s=HOLD_S))
            c.send(end_txn(2))
            assert await c.answer() == 2
            (held,) = await asyncio.to_thread(path.held)
            assert held.api == "EndTxn" and held.rule == rule and held.held_s is not None
            assert held.held_s >= HOLD_S and held.outcome == "answered"
            event = held.event(held.held_ns - 1000)
            assert event["held_ns"] == 1000 and event["action"] == "delayed"
            assert await asyncio.to_thread(path.release, rule) == 0
            stats = await asyncio.to_thread(path.stats)
            assert stats["requests"] == 2 and stats["rules"][rule] == {"active": False, "matched": 1}
            with pytest.raises(Exception, match="no Kafka API named"):
                await asyncio.to_thread(lambda: path.hold(["Nope"], hold_s=1))
        finally:
            await asyncio.to_thread(path.stop)
            broker.close()
        assert not path.running
    asyncio.run(main())


def test_a_dropped_answer_leaves_the_request_delivered_and_the_connection_silent_until_released() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        await until(lambda: proxy.links)
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=0, action="drop-response", fault="drop-responses")
        c.send(metadata_request(1))   # in flight when the EndTxn goes: its answer still comes back
        c.send(end_txn(2))
        c.send(metadata_request(3))   # behind the lost answer: the connection is silent, it never goes
        assert await c.answer() == 1
        await until(lambda: len(proxy.records) == 2 and proxy.records[0].outcome == "answered")
        with pytest.raises(asyncio.TimeoutError):
            await c.answer(0.3)
        assert [a[2] for a in broker.arrivals] == [1, 2]   # the request took effect, nothing after it went
        dropped, behind = proxy.records
        assert (dropped.fault, dropped.action, dropped.cause, dropped.correlation_id) == \
            ("drop-responses", "response-dropped", "matched", 2)
        assert dropped.response_error == "none" and dropped.response_forwarded is False
        assert dropped.released_ns is not None and dropped.response_ns is not None
        assert (behind.cause, behind.correlation_id, behind.outcome, behind.released_ns) == \
            ("behind", 3, "discarded", None)
        new = await Client.connect(proxy.ports[1])   # the client's next connection
        await until(lambda: len(proxy.links) == 2)
        assert proxy.release("r1") == 0
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await c.answer(2)   # released: the silenced connection is closed, the client reconnects
        new.send(end_txn(4))
        assert await new.answer() == 4
        assert proxy.stats()["rules"]["r1"] == {"active": False, "matched": 1}
    run(test)


def test_a_watched_request_passes_at_once_and_its_answer_is_noted_and_forwarded() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        proxy.hold("w", ["EndTxn"], hold_s=0, connections="all", action="watch", fault="watch")
        c.send(metadata_request(1))
        c.send(end_txn(2))
        assert [await c.answer(), await c.answer()] == [1, 2]
        await until(lambda: proxy.records and proxy.records[0].outcome == "answered")
        (watched,) = proxy.records   # the Metadata request is not watched
        assert (watched.fault, watched.action, watched.correlation_id, watched.response_error) == \
            ("watch", "watched", 2, "none")
        assert watched.response_forwarded is True and watched.released_ns == watched.held_ns
        assert [a[2] for a in broker.arrivals] == [1, 2]
    run(test)


def test_a_fault_on_a_watched_api_acts_and_its_record_says_what_the_watch_would() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        await until(lambda: proxy.links)
        proxy.hold("w", ["EndTxn"], hold_s=0, connections="all", action="watch", fault="watch")
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=0, action="drop-response", fault="drop-responses")
        c.send(end_txn(2))
        await until(lambda: proxy.records and proxy.records[0].outcome == "answered")
        with pytest.raises(asyncio.TimeoutError):
            await c.answer(0.3)   # the fault's rule acted: the answer was dropped, not forwarded
        (dropped,) = proxy.records
        assert (dropped.fault, dropped.action, dropped.response_error) == ("drop-responses", "response-dropped", "none")
        assert proxy.stats()["rules"]["w"]["matched"] == 0
        proxy.release("r1")
    run(test)


def test_a_replayed_request_reaches_the_broker_again_later_on_a_new_connection() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        await until(lambda: proxy.links)
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=HOLD_S, action="replay", fault="replay-requests", limit=1)
        sent = time.monotonic()
        c.send(end_txn(2))
        assert await c.answer() == 2 and time.monotonic() - sent < HOLD_S / 2   # the original passes at once
        c.send(end_txn(3))   # the limit is reached: no copy
        assert await c.answer() == 3
        assert proxy.pending() == 1
        await until(lambda: proxy.records[0].outcome == "answered")
        # the copy, on a connection of its own
        assert [(a[0], a[2]) for a in broker.arrivals] == [(1, 2), (1, 3), (2, 2)]
        assert broker.arrivals[-1][3] - sent >= HOLD_S
        (copy,) = proxy.records
        assert (copy.action, copy.cause, copy.correlation_id, copy.response_error) == ("replayed", "matched", 2, "none")
        assert copy.response_forwarded is False and copy.detail["replay_connection"] != copy.connection
        assert copy.released_ns is not None and copy.released_ns - copy.held_ns >= HOLD_S * 1e9
        assert proxy.pending() == 0
    run(test)


def test_a_replay_flushed_on_release_goes_at_once() -> None:
    async def test(proxy: Proxy, broker: FakeBroker) -> None:
        c = await Client.connect(proxy.ports[1])
        await until(lambda: proxy.links)
        proxy.hold("r1", ["EndTxn"], broker=1, hold_s=30, action="replay")
        c.send(end_txn(2))
        assert await c.answer() == 2
        assert proxy.release("r1", flush=True) == 1
        await until(lambda: proxy.records[0].outcome == "answered", timeout=2)
        with pytest.raises(ValueError, match="action must be one of"):
            proxy.hold("r2", ["EndTxn"], action="mangle")
    run(test)


def test_the_brokers_own_requests_go_through_their_own_listener_and_a_broker_rule_holds_them(tmp_path: Path) -> None:
    """With an inter-broker host the proxy has a second port per broker, routed to another address of the
    broker (its inter-broker listener); a rule for the brokers' client ids holds a replica fetcher's request
    and the ZooKeeper-mode controller's (client.id: its broker id), and not a workload client's."""
    from faults.delay_requests import broker_client_ids

    async def main() -> None:
        clients_side, brokers_side = await FakeBroker().start(), await FakeBroker().start()
        path = await asyncio.to_thread(RequestPath.start, [1, 2, 3], tmp_path, inter_broker_host="127.0.0.2")
        try:
            assert set(path.inter_broker_ports) == {1, 2, 3}
            assert path.inter_broker_address(2) == f"127.0.0.2:{path.inter_broker_ports[2]}"
            assert not set(path.inter_broker_ports.values()) & set(path.ports.values())
            await asyncio.to_thread(path.route, 1, "127.0.0.1", clients_side.port)
            await asyncio.to_thread(path.route, 1, "127.0.0.1", brokers_side.port, "inter-broker")
            rule = await asyncio.to_thread(lambda: path.hold(["EndTxn"], broker=1, hold_s=HOLD_S, connections="all",
                                                             clients=broker_client_ids([1, 2, 3])))
            client = await Client.connect(path.ports[1])
            started = time.monotonic()
            client.send(end_txn(1))                  # a workload client's: passes
            assert await client.answer() == 1 and time.monotonic() - started < HOLD_S / 2
            r, w = await asyncio.open_connection("127.0.0.2", path.inter_broker_ports[1])
            fetcher = Client(r, w)
            fetcher.send(end_txn(2, client_id="broker-2-fetcher-0"))
            fetcher.send(end_txn(3, client_id="3"))   # the controller's channel, behind it
            assert [await fetcher.answer() for _ in range(2)] == [2, 3] and time.monotonic() - started >= HOLD_S
            assert [a[2] for a in clients_side.arrivals] == [1] and [a[2] for a in brokers_side.arrivals] == [2, 3]
            held = await asyncio.to_thread(path.held)
            assert [(h.client, h.cause, h.listener) for h in held] == \
                [("broker-2-fetcher-0", "matched", "inter-broker"), ("3", "behind", "inter-broker")]
            assert held[0].event(0)["listener"] == "inter-broker"
            await asyncio.to_thread(path.release, rule)
            fetcher.send(end_txn(4, client_id="2"))
            assert await fetcher.answer(HOLD_S / 2) == 4
            rule = await asyncio.to_thread(lambda: path.hold(["EndTxn"], broker=1, hold_s=HOLD_S, connections="all",
                                                             clients=["2"]))
            fetcher.send(end_txn(5, client_id="2"))
            await asyncio.sleep(0.1)
            assert await asyncio.to_thread(path.release, rule, True) == 1
            assert await fetcher.answer() == 5
        finally:
            await asyncio.to_thread(path.stop)
            clients_side.close()
            brokers_side.close()
    asyncio.run(main())


def test_a_replayed_broker_request_goes_again_to_the_listener_it_came_for() -> None:
    async def main() -> None:
        clients_side, brokers_side = await FakeBroker().start(), await FakeBroker().start()
        proxy = Proxy([1], inter_broker_host="127.0.0.1")
        await proxy.start()
        proxy.route(1, "127.0.0.1", clients_side.port)
        proxy.route(1, "127.0.0.1", brokers_side.port, listener="inter-broker")
        with pytest.raises(ValueError, match="no listener"):
            proxy.route(1, "127.0.0.1", 1, listener="controller")
        try:
            proxy.hold("r1", ["EndTxn"], broker=1, hold_s=0.1, connections="all", action="replay", limit=1)
            c = await Client.connect(proxy.listening["inter-broker"][1])
            c.send(end_txn(1, client_id="broker-1-txn-marker-sender"))
            assert await c.answer() == 1
            await until(lambda: proxy.records[0].outcome == "answered")
            assert [a[2] for a in brokers_side.arrivals] == [1, 1] and not clients_side.arrivals
            assert brokers_side.connections == 2 and proxy.records[0].listener == "inter-broker"
        finally:
            await proxy.close()
            clients_side.close()
            brokers_side.close()
    asyncio.run(main())


# ---------------------------------------------------------------------------------------------- broker config

def broker_properties(**kwargs: Any) -> dict[str, str]:
    from clusters import config
    from clusters.spec import ClusterSpec

    metadata = kwargs.pop("metadata", "zookeeper")
    text = config.server_properties(ClusterSpec(metadata=metadata, request_path=True), 2, **kwargs)
    return dict(line.split("=", 1) for line in text.splitlines())


@pytest.mark.parametrize("metadata", ["zookeeper", "kraft"])
def test_the_inter_broker_listener_advertises_the_request_path_and_carries_the_brokers_traffic(metadata: str) -> None:
    clients_only = broker_properties(metadata=metadata, proxied="127.0.0.1:40001")
    assert clients_only["listeners"] == "PLAINTEXT://0.0.0.0:9092,PROXIED://0.0.0.0:9094"
    assert clients_only["advertised.listeners"] == "PLAINTEXT://@NODE_IP@:9092,PROXIED://127.0.0.1:40001"
    assert clients_only["inter.broker.listener.name"] == "PLAINTEXT"
    both = broker_properties(metadata=metadata, proxied="127.0.0.1:40001", inter_broker="172.18.0.1:40002")
    assert both["listeners"] == "PLAINTEXT://0.0.0.0:9092,PROXIED://0.0.0.0:9094,INTERBROKER://0.0.0.0:9095"
    assert both["advertised.listeners"] == ("PLAINTEXT://@NODE_IP@:9092,PROXIED://127.0.0.1:40001,"
                                            "INTERBROKER://172.18.0.1:40002")
    assert both["inter.broker.listener.name"] == "INTERBROKER"
    kraft = "CONTROLLER:PLAINTEXT," if metadata == "kraft" else ""
    assert both["listener.security.protocol.map"] == \
        f"PLAINTEXT:PLAINTEXT,{kraft}PROXIED:PLAINTEXT,INTERBROKER:PLAINTEXT"
    if metadata == "kraft":   # the brokers reach the controllers directly, as before
        assert both["controller.listener.names"] == "CONTROLLER" and "CONTROLLER" not in both["listeners"]
    plain = broker_properties(metadata=metadata)
    assert plain["listeners"] == "PLAINTEXT://0.0.0.0:9092" and "inter.broker.listener.name" not in plain


def test_the_inter_broker_request_path_needs_the_request_path() -> None:
    from clusters.errors import ClusterError
    from clusters.spec import ClusterSpec

    with pytest.raises(ClusterError, match="inter_broker_request_path needs the request path"):
        ClusterSpec(inter_broker_request_path=True).validate()
    ClusterSpec(request_path=True, inter_broker_request_path=True).validate()


def test_the_zookeeper_controllers_apis_are_named_and_their_answers_error_read_by_hand() -> None:
    """kio has no schema for the APIs Kafka 4.0 removed: the controller's LeaderAndIsr, UpdateMetadata,
    StopReplica and a broker's ControlledShutdown are still named, and their answers' leading error code read."""
    assert [wire.api_key(n) for n in ("LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown")] == \
        [4, 5, 6, 7]
    flexible = struct.pack(">iBh", 9, 0, 0)   # correlation id, no tagged fields, error none
    assert wire.zookeeper_response_error(4, 7, flexible) == "none"
    assert wire.zookeeper_response_error(6, 5, struct.pack(">ih", 9, 11)) == "stale_controller_epoch"
    with pytest.raises(wire.WireError):
        wire.zookeeper_response_error(5, 3, struct.pack(">iB", 9, 0))
