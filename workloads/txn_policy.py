"""What a transactional application does when ending a transaction fails: ``on_commit_error``.

``workload.transactions.on_commit_error`` (and ``workload.pipeline.on_commit_error``), the same for both
clients (workloads/java/.../TxnPolicy.java is this module's twin):

* ``replace`` (the default): a commit (or abort) the client calls retriable is called again until
  ``commit_timeout_s``; then the outcome is unknown and the process ends, and the harness starts a new producer
  under the same transactional.id, which fences the old one.
* ``retry``: the same call again, with the same producer, for as long as it takes (librdkafka: a retriable,
  timed-out commit_transaction() "may be called again" and resumes; Java: after a TimeoutException "it is safe to
  retry"). A time-out never replaces the producer; the outcome is reported when the client gives it, and is
  unknown only if the process ends first (killed, or stopped and not done in time).
* ``abort``: after a retriable (timed-out) commit, abort_transaction()/abortTransaction() and go on with the same
  producer. Both clients refuse that abort while the timed-out commit may still complete (librdkafka:
  ``_CONFLICT``, "Conflicting commit_transaction API call is already in progress"; Java: IllegalStateException,
  "the previous call to `commitTransaction` timed out and must be retried"): the refusal is recorded and the
  commit resumed, as ``retry`` does, and the outcome is the one the client reports.

Whatever the policy: an abortable error of a commit aborts the transaction (both clients' documentation); a
fatal error ends the process (the harness replaces it); an error neither retriable nor abortable is treated as
fatal, as the clients' documentation says.
"""

from __future__ import annotations

from typing import Literal, get_args

OnCommitError = Literal["replace", "retry", "abort"]
ON_COMMIT_ERROR: tuple[str, ...] = get_args(OnCommitError)
DEFAULT_ON_COMMIT_ERROR: OnCommitError = "replace"
ON_COMMIT_ERROR_DESCRIPTION = (
    "what the application does when a commit fails or times out: replace (retry until commit_timeout_s, then the "
    "outcome is unknown and a new producer under the same transactional.id fences this one), retry (call commit "
    "again with the same producer until it answers), abort (call abort, and go on with the same producer; a "
    "client that refuses the abort because the commit may still complete has the commit resumed). An abortable "
    "error aborts and a fatal one ends the process under every policy")

Call = Literal["commit", "abort"]
# what an error of a commit or abort is, as the client classifies it
ErrorKind = Literal["fatal", "abortable", "retriable", "refused", "other"]


def next_call(policy: str, calling: Call, kind: ErrorKind, past_deadline: bool, abort_refused: bool) -> Call | None:
    """The call to make after ``calling`` failed with an error of ``kind``; None: give up (the outcome is
    unknown, the process ends and is replaced).

    ``past_deadline``: commit_timeout_s has passed since the transaction was asked to end (only ``replace``
    gives up for that). ``abort_refused``: an abort after a timed-out commit was refused already (``abort``
    does not ask again). ``refused``: the client refused an abort because its commit is still in progress.
    """
    if policy not in ON_COMMIT_ERROR:
        raise ValueError(f"on_commit_error must be one of {', '.join(ON_COMMIT_ERROR)}, not {policy!r}")
    if kind in ("fatal", "other"):
        return None
    if kind == "refused":  # the commit is still the client's call in progress: resume it, or nothing
        return "commit" if calling == "abort" else None
    if kind == "abortable":
        return "abort" if calling == "commit" else None
    if policy == "replace" and past_deadline:
        return None
    if calling == "commit" and policy == "abort" and not abort_refused:
        return "abort"
    return calling


class TxnEnd:
    """One transaction's way to its end: the call to make now, and what the errors so far say (the ``error`` of
    its txns.jsonl line). The client's own code classifies each error (an ErrorKind) and asks :meth:`failed`."""

    def __init__(self, policy: str, calling: Call) -> None:
        if policy not in ON_COMMIT_ERROR:
            raise ValueError(f"on_commit_error must be one of {', '.join(ON_COMMIT_ERROR)}, not {policy!r}")
        self.policy = policy
        self.calling: Call = calling
        self.abort_chosen = False    # the abort under way is the policy's choice after a timed-out commit
        self.abort_refused = False   # ... and the client refused it: the commit was resumed
        self._refusal: str | None = None
        self._last: str | None = None

    @property
    def why(self) -> str | None:
        """The errors that led to the outcome: the refused abort, if any, and the last error."""
        return "; ".join(part for part in (self._refusal, self._last) if part) or None

    @property
    def choosing_abort(self) -> bool:
        """An abort the client may refuse because the commit before it is still in progress."""
        return self.calling == "abort" and self.abort_chosen and not self.abort_refused

    def failed(self, kind: ErrorKind, name: str, past_deadline: bool) -> bool:
        """The call failed with an error of ``kind`` (``name``): True to give up (the outcome is unknown and the
        process ends), else :attr:`calling` is the next call."""
        step = next_call(self.policy, self.calling, kind, past_deadline, self.abort_refused)
        if step is None:
            return True
        if kind == "refused":
            self.abort_refused = True
            self._refusal, self._last = f"{self._last}, abort refused ({name}): commit resumed", None
        elif step == self.calling:
            self._last = f"retried after {name}"
        elif kind == "abortable":
            self._last = f"commit failed: {name}"
        else:  # on_commit_error abort, after a retriable (timed-out) commit
            self.abort_chosen = True
            self._last = f"commit failed: {name}, aborted (on_commit_error abort)"
        self.calling = step
        return False
