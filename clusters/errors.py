"""The one error type the cluster stage raises for problems a user can act on."""


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
