"""The workload's one error: a workload process would not start, died on its own, or broke the protocol."""

from __future__ import annotations


class WorkloadError(RuntimeError):
    """A workload process would not start, died on its own, or broke the protocol."""
