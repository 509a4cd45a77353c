"""Message values that say who sent them: ``<producer>:<seq>:<padding>``.

Every value carries its producer and seq so that any read can be matched to
its send, whatever partition or offset it turns up at.
"""

from __future__ import annotations


def encode(producer: str, seq: int, size: int) -> bytes:
    head = f"{producer}:{seq}:".encode()
    return head + b"x" * max(0, size - len(head))


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
