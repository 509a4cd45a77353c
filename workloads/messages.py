"""Message values that say who sent them: ``<producer>:<seq>:<padding>``.

Every value carries its producer and seq so that any read can be matched to
its send, whatever partition or offset it turns up at. A record written by
an exactly-once pipeline is ``<pipeline>:<seq>:<from_producer>:<from_seq>:``:
it is a send of the pipeline and also names the input it was made from, so
the checker can tell a lost or duplicated input from a lost output.
"""

from __future__ import annotations


def encode(producer: str, seq: int, size: int) -> bytes:
    head = f"{producer}:{seq}:".encode()
    return head + b"x" * max(0, size - len(head))


def encode_output(pipeline: str, seq: int, from_producer: str, from_seq: int) -> bytes:
    """A pipeline's output value: decode gives (pipeline, seq), decode_source (from_producer, from_seq)."""
    return f"{pipeline}:{seq}:{from_producer}:{from_seq}:".encode()


def decode(value: bytes | None) -> tuple[str | None, int | None]:
    """(producer, seq) of a value, or (None, None) for a value kchaos did not write."""
    if not value:
        return None, None
    parts = value.split(b":", 2)
    if len(parts) < 3:
        return None, None
    try:
        return parts[0].decode(), int(parts[1])
    except (UnicodeDecodeError, ValueError):
        return None, None


def decode_source(value: bytes | None) -> tuple[str | None, int | None]:
    """(from_producer, from_seq) of a pipeline output value, or (None, None) for any other value."""
    if not value:
        return None, None
    parts = value.split(b":", 4)
    if len(parts) != 5 or parts[4]:  # a producer's padding is x's, never empty after a 4th colon
        return None, None
    try:
        return parts[2].decode(), int(parts[3])
    except (UnicodeDecodeError, ValueError):
        return None, None
