"""The harness's view of one producer process: which seqs it invoked and has not reported.

A producer process announces seqs before it hands them to produce(), so at
any moment the harness knows every message that may be on its way to the
log. When the process dies, exactly these become ``unknown`` sends: an
acknowledgement may have been lost with the process, so none is ``fail``.
"""

from __future__ import annotations

from typing import Any

from catalogue.history import TXN_FIELDS
from rundir.records import ordered
from workloads.protocol import ProtocolError


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


class OpenTxn:
    """A transaction a process began and has not reported the outcome of."""

    __slots__ = ("txn", "begin_ns", "intent", "invoke_ns")

    def __init__(self, txn: int, begin_ns: int) -> None:
        self.txn = txn
        self.begin_ns = begin_ns
        self.intent: str | None = None      # commit | abort, once the process asked for it
        self.invoke_ns: int | None = None


class Transactions:
    """The harness's view of one transactional process: its open transaction and the txn of each pending seq.

    A process reports a transaction's outcome once (``O``); when it dies
    first, :meth:`abandon` turns the open one into an ``unknown`` txns line,
    so every transaction that began has exactly one line.
    """

    def __init__(self) -> None:
        self.open: OpenTxn | None = None
        self._txn_of: dict[int, int] = {}

    def begin(self, txn: int, begin_ns: int) -> None:
        if self.open is not None:
            raise ProtocolError(f"transaction {txn} began while {self.open.txn} was open")
        self.open = OpenTxn(txn, begin_ns)

    def request(self, txn: int, intent: str, invoke_ns: int) -> None:
        open_txn = self._check(txn)
        open_txn.intent, open_txn.invoke_ns = intent, invoke_ns

    def claim(self, first: int, count: int) -> None:
        """Seqs announced now belong to the open transaction (none: not transactional sends)."""
        if self.open is not None:
            txn = self.open.txn
            for seq in range(first, first + count):
                self._txn_of[seq] = txn

    def release(self, seq: int) -> int | None:
        """The txn of a settled or withdrawn seq (None outside transactions)."""
        return self._txn_of.pop(seq, None)

    def finish(self, producer: str, txn: int, outcome: str, complete_ns: int, error: str | None) -> dict[str, Any]:
        """The txns.jsonl line of a reported outcome; the transaction is closed."""
        open_txn = self._check(txn)
        self.open = None
        return txn_line(producer, open_txn, outcome, complete_ns, error)

    def abandon(self, producer: str, complete_ns: int, error: str) -> dict[str, Any] | None:
        """The process is gone: its open transaction, if any, as an ``unknown`` line; everything is forgotten."""
        open_txn, self.open = self.open, None
        self._txn_of = {}
        return None if open_txn is None else txn_line(producer, open_txn, "unknown", complete_ns, error)

    def _check(self, txn: int) -> OpenTxn:
        if self.open is None or self.open.txn != txn:
            raise ProtocolError(f"transaction {txn} is not the open one")
        return self.open


def txn_line(producer: str, txn: OpenTxn, outcome: str, complete_ns: int, error: str | None) -> dict[str, Any]:
    """A txns.jsonl line, its fields in the catalogue's order."""
    return ordered(TXN_FIELDS, {"producer": producer, "txn": txn.txn, "outcome": outcome, "intent": txn.intent,
                                "error": error, "invoke_ns": txn.invoke_ns, "complete_ns": complete_ns,
                                "begin_ns": txn.begin_ns})
