"""client-pause: SIGSTOP one producer, consumer or pipeline process, and SIGCONT it when the fault heals.

An application instance that stalls (a long GC pause, a VM stall, a laptop
lid): every thread of the process stops, its Kafka client's heartbeats too,
while its sockets stay open. Held past the group's session timeout, the
group gives a consumer's partitions to the others; thawed, the process goes
on where it stopped, a zombie until its client notices: it finishes
processing the batch it had polled, and its commit, if any, is refused. The
same process goes on (no new name), so the history shows what one consumer
did across its own stall: its next reads come after a rebalance.
"""

from __future__ import annotations

from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from faults.base import ClientFault, FaultError
from workloads.client import Client

SIGNAL_WAIT_S = 5  # a signal is delivered at once; /proc says so within this


@retry(stop=stop_after_delay(SIGNAL_WAIT_S), wait=wait_fixed(0.05), retry=retry_if_result(bool),
       retry_error_callback=lambda state: state.outcome.result())
def not_yet(clients: list[Client], frozen: bool) -> list[str]:
    """The clients whose process is not (yet) as ``frozen`` says, waiting up to SIGNAL_WAIT_S for them."""
    return [c.name for c in clients if c.frozen != frozen]


class ClientPauseFault(ClientFault):
    kind = "client-pause"

    def apply(self, clients: list[Client]) -> str:
        detail = self.signal(clients, "freeze", "SIGSTOP")
        running = not_yet(clients, frozen=True)
        if running:
            raise FaultError(f"client-pause did not take effect: {', '.join(running)} not stopped")
        return detail

    def heal(self, clients: list[Client]) -> None:
        self.signal(clients, "thaw", "SIGCONT")
        stopped = not_yet(clients, frozen=False)
        if stopped:
            raise FaultError(f"client-pause could not thaw {', '.join(stopped)}")
