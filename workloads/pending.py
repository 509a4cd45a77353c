"""The harness's view of one producer process: which seqs it invoked and has not reported.

A producer process announces seqs before it hands them to produce(), so at
any moment the harness knows every message that may be on its way to the
log. When the process dies, exactly these become ``info`` sends: an
acknowledgement may have been lost with the process, so none is ``fail``.
"""

from __future__ import annotations


class PendingSends:
    """seq -> invoke_ns of the sends invoked but not completed (touched by one reader thread)."""

    def __init__(self) -> None:
        self._invoked: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._invoked)

    def invoke(self, first: int, count: int, invoke_ns: int) -> None:
        for seq in range(first, first + count):
            self._invoked[seq] = invoke_ns

    def withdraw(self, first: int, count: int) -> None:
        """Announced but never handed to the client: not a send at all."""
        for seq in range(first, first + count):
            self._invoked.pop(seq, None)

    def complete(self, seq: int) -> int | None:
        """The invoke_ns of ``seq``, now settled; None when it was not pending."""
        return self._invoked.pop(seq, None)

    def drain(self) -> list[tuple[int, int]]:
        """Every pending (seq, invoke_ns) in seq order, leaving none."""
        left, self._invoked = self._invoked, {}
        return sorted(left.items())
