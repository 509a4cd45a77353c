"""The exit codes of every kchaos command, and the error that means exit 2 (docs/architecture.md, "Command line
and exit codes")."""

from __future__ import annotations

EXIT_VALID = 0  # the verdict meets the scenario's expectations (or is valid when it has none)
EXIT_INVALID = 1  # it does not
EXIT_HARNESS = 2  # not judged: the harness could not do its job, or the run proved nothing

EXIT_MEANINGS = {EXIT_VALID: "met", EXIT_INVALID: "not met", EXIT_HARNESS: "not judged"}


class HarnessError(RuntimeError):
    """The harness could not do its job: bad input, a fault not applied, a cluster never ready (exit 2, one line)."""
