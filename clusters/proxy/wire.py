"""The Kafka wire format as far as the proxy reads it: frames, the request header, API names.

A Kafka message is a 4-byte big-endian length and that many bytes. A request
starts with api_key (int16), api_version (int16), correlation_id (int32) and
client_id (nullable string: int16 length, -1 for null) -- the same in every
header version, so the proxy reads these four by hand on every request. A
response starts with the correlation_id of its request. Anything deeper (a
held request's body, its response's error code) is decoded by ``kio``, and
only for the few requests a fault touches.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

LENGTH = struct.Struct(">i")
HEADER = struct.Struct(">hhih")   # api_key, api_version, correlation_id, client_id length
CORRELATION = struct.Struct(">i")
MAX_FRAME = 512 * 1024 * 1024     # the brokers' socket.request.max.bytes is 100 MiB; more is a broken stream


class WireError(ValueError):
    """Bytes that are not a Kafka request or response."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def frame_length(prefix: bytes) -> int:
    """The payload length a 4-byte prefix announces."""
    (n,) = LENGTH.unpack(prefix)
    if n < 0 or n > MAX_FRAME:
        raise WireError(f"frame length {n} out of range")
    return n


def frame(payload: bytes) -> bytes:
    """``payload`` with its length prefix."""
    return LENGTH.pack(len(payload)) + payload


def request_header(payload: bytes | memoryview) -> RequestHeader:
    """The fixed part of a request header (every header version starts with it)."""
    if len(payload) < HEADER.size:
        raise WireError(f"request of {len(payload)} bytes is shorter than a header")
    api_key, version, correlation_id, n = HEADER.unpack_from(payload)
    if n < 0:
        return RequestHeader(api_key, version, correlation_id, None)
    end = HEADER.size + n
    if end > len(payload):
        raise WireError("client_id runs past the end of the request")
    return RequestHeader(api_key, version, correlation_id, bytes(payload[HEADER.size:end]).decode("utf-8", "replace"))


def response_correlation_id(payload: bytes | memoryview) -> int:
    if len(payload) < CORRELATION.size:
        raise WireError(f"response of {len(payload)} bytes has no correlation id")
    return CORRELATION.unpack_from(payload)[0]


# ------------------------------------------------------------------ API names (kio's index)

def _camel(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


# the ZooKeeper-mode controller's APIs (and a broker's ControlledShutdown to it), removed in Kafka 4.0 and so
# absent from kio's schemas: named here, their bodies not decoded; each answer starts with its error code, in a
# flexible header (a tagged-field count after the correlation id) from these versions on
ZOOKEEPER_APIS = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown"}
ZOOKEEPER_FLEXIBLE = {4: 4, 5: 2, 6: 6, 7: 3}


@cache
def api_names() -> dict[int, str]:
    """Kafka's API names by key, as the protocol guide spells them (EndTxn, AddPartitionsToTxn)."""
    from kio.schema.index import api_key_map
    return {**ZOOKEEPER_APIS, **{key: _camel(name) for key, name in api_key_map.items()}}


def zookeeper_response_error(api: int, version: int, payload: bytes) -> str:
    """The error (kio's name, as error_of gives it) that opens the answer to a ZooKeeper-mode controller API
    (ZOOKEEPER_APIS), read by hand."""
    from kio.schema.errors import ErrorCode
    at = CORRELATION.size + (1 if version >= ZOOKEEPER_FLEXIBLE[api] else 0)   # no tagged fields: one zero byte
    if len(payload) < at + 2:
        raise WireError(f"answer of {len(payload)} bytes has no error code")
    return ErrorCode(struct.unpack_from(">h", payload, at)[0]).name


@cache
def api_keys() -> dict[str, int]:
    return {name: key for key, name in api_names().items()}


def api_name(api_key: int) -> str:
    return api_names().get(api_key, f"api{api_key}")


def api_key(name: str) -> int:
    """The key of an API named as Kafka names it; a ValueError names the known ones when it is not one."""
    try:
        return api_keys()[name]
    except KeyError:
        raise ValueError(f"no Kafka API named {name!r} (known: {', '.join(sorted(api_keys()))})") from None


def api_list(text: str) -> list[str]:
    """Comma-separated API names (a scenario's ``apis``), each checked by ``api_key``; a ValueError when none."""
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise ValueError("must name Kafka APIs, comma-separated (EndTxn, Produce, ...)")
    for name in names:
        api_key(name)
    return names


# ------------------------------------------------------------------ bodies (kio), for held requests only

def _plain(value: Any) -> Any:
    """A kio value as JSON-ready data (entities become dicts, tuples lists; records stay out)."""
    from dataclasses import fields, is_dataclass
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.name != "records"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, Enum):   # an error code: its name ("none", "producer_fenced")
        return value.name
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def decode_request(payload: bytes) -> dict[str, Any]:
    """A request's header and body decoded by kio, as plain data (a Produce request's record bytes left out)."""
    from kio.index import load_request_schema
    from kio.serial import entity_reader
    api, version = HEADER.unpack_from(payload)[:2]
    schema = load_request_schema(api, version)
    header, size = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, size)
    return _plain(body)


def decode_response(api: int, version: int, payload: bytes) -> dict[str, Any]:
    """A response's body decoded by kio, as plain data."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader
    schema = load_response_schema(api, version)
    _, size = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, size)
    return _plain(body)


def expects_response(api: int, body: dict[str, Any] | None) -> bool:
    """Whether the broker answers: every request but a Produce with acks=0."""
    return not (api == 0 and body is not None and body.get("acks") == 0)


def summary(api: int, body: dict[str, Any]) -> dict[str, Any]:
    """What a record of a held request keeps of its body: the fields that tell which transaction it was."""
    keep = ("transactional_id", "producer_id", "producer_epoch", "committed", "acks", "group_id", "generation_id")
    out = {k: body[k] for k in keep if k in body}
    if api == 0:   # Produce: which partitions
        out["partitions"] = sorted(f"{t.get('name', '')}-{p['index']}" for t in body.get("topic_data", [])
                                   for p in t.get("partition_data", []))
    elif api == 24:   # AddPartitionsToTxn v0-3: topics at the top; v4+: per transaction
        topics = body.get("v3_and_below_topics") or [t for x in body.get("transactions", [])
                                                     for t in x.get("topics", [])]
        out["partitions"] = sorted(f"{t['name']}-{p}" for t in topics for p in t.get("partitions", []))
    elif api == 27:   # WriteTxnMarkers (a transaction coordinator's, to a partition leader): each marker's transaction
        out["markers"] = [{"producer_id": m.get("producer_id"), "producer_epoch": m.get("producer_epoch"),
                           "committed": m.get("transaction_result"),
                           "partitions": sorted(f"{t['name']}-{p}" for t in m.get("topics", [])
                                                for p in t.get("partition_indexes", []))}
                          for m in body.get("markers", [])]
    elif api in (78, 79):   # ShareFetch, ShareAcknowledge: the member and the acknowledgements it carries
        out["member_id"] = body.get("member_id")
        out["acks"] = _share_acks(body)
    elif api == 28:   # TxnOffsetCommit
        out["partitions"] = sorted(f"{t['name']}-{p['partition_index']}" for t in body.get("topics", [])
                                   for p in t.get("partitions", []))
    return out


def _share_acks(body: dict[str, Any]) -> list[list[Any]]:
    """A share request's acknowledgement batches as [partition, first offset, last offset, types] (KIP-932's
    types: 0 gap, 1 accept, 2 release, 3 reject, 4 renew; one type for the whole batch, or one per offset)."""
    return [[p["partition_index"], b["first_offset"], b["last_offset"], list(b["acknowledge_types"])]
            for t in body.get("topics", []) for p in t.get("partitions", [])
            for b in p.get("acknowledgement_batches", [])]


def answer_summary(api: int, body: dict[str, Any]) -> dict[str, Any] | None:
    """What a record keeps of an answer beyond its first error: a share answer's word per partition,
    [partition, error, acknowledgement error (ShareFetch), records acquired as [first, last, delivery count]]."""
    if api not in (78, 79):
        return None
    return {"partitions": [[p["partition_index"], p.get("error_code"), p.get("acknowledge_error_code"),
                            [[a["first_offset"], a["last_offset"], a["delivery_count"]]
                             for a in p.get("acquired_records", [])]]
                           for t in body.get("responses", []) for p in t.get("partitions", [])]}


def error_of(body: dict[str, Any]) -> Any:
    """A response's top-level error code, or the first per-item one (None when it has none)."""
    if "error_code" in body:
        return body["error_code"]
    stack = [v for v in body.values() if isinstance(v, list)]
    while stack:
        for item in stack.pop(0):
            if isinstance(item, dict):
                if "error_code" in item:
                    return item["error_code"]
                stack.extend(v for v in item.values() if isinstance(v, list))
    return None
