"""The one error type the cluster stage raises for problems a user can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only annotated: the CLI catches ClusterError without loading librdkafka
    from confluent_kafka import KafkaError


class ClusterError(RuntimeError):
    """A cluster could not be built, started, reached or torn down.

    The message is one line meant for the operator; the CLI prints it and
    exits 2 instead of showing a traceback.
    """


class AdminError(ClusterError):
    """A Kafka error answered to an AdminClient request; ``code`` is librdkafka's, for callers that retry some."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    @classmethod
    def answered(cls, what: str, error: KafkaError) -> "AdminError":
        """``cannot <what>: <librdkafka's message>``, keeping the error's code."""
        return cls(f"cannot {what}: {error.str()}", error.code())
