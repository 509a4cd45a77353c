"""client-crash: SIGKILL one producer, consumer or pipeline process, and start a new one when the fault heals.

An application instance that crashes: whatever its producer had in flight
becomes ``unknown`` in the history (its acks may have died with it), and a
consumer killed between poll and commit skips or re-reads records. The new
process takes the old one's place: a producer under a new id (p0 -> p0.1,
so (producer, seq) stays unique), a consumer in the same group, a pipeline
both (under the same transactional.id, so its start fences the dead one's
open transaction, which the coordinator aborts).
"""

from __future__ import annotations

from faults.base import ClientFault, FaultError
from workloads.client import Client, WorkloadError


class ClientCrashFault(ClientFault):
    kind = "client-crash"

    def apply(self, clients: list[Client]) -> str:
        detail = self.signal(clients, "kill", "SIGKILL")
        alive = [c.name for c in clients if c.running]
        if alive:
            raise FaultError(f"client-crash did not take effect: {', '.join(alive)} still running")
        return detail

    def heal(self, clients: list[Client]) -> None:
        try:
            for client in clients:
                client.restart()
        except WorkloadError as e:
            raise FaultError(f"client-crash could not restart: {e}") from None
        down = [c.name for c in clients if not c.running]
        if down:
            raise FaultError(f"client-crash restart did not take effect: {', '.join(down)} not running")
