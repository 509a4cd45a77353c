"""disk-full: fill a broker's data file system; healing frees it.

Kafka takes a log directory offline on the first failed write (and a broker
whose only log directory failed shuts down), so producers must see errors,
never silent loss. Healing removes the filler and restarts what stopped.
"""

from __future__ import annotations

from pydantic import Field

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError, FaultOptions


class DiskFullOptions(FaultOptions):
    leave_bytes: int = Field(0, ge=0, description="free bytes left on the data file system")


class DiskFullFault(Fault):
    kind = "disk-full"
    Options = DiskFullOptions
    settings: DiskFullOptions

    def apply(self, nodes: list[Node]) -> str:
        if any(n.volume is None for n in nodes):
            raise FaultError("disk-full needs brokers with their own data file system")
        try:
            for node in nodes:
                node.volume.fill(self.settings.leave_bytes)  # type: ignore[union-attr]
        except ClusterError as e:
            raise FaultError(str(e)) from None
        left = {n.name: n.volume.free_bytes() for n in nodes}  # type: ignore[union-attr]
        if any(free > self.settings.leave_bytes + 1024 * 1024 for free in left.values()):
            raise FaultError(f"disk-full did not take effect: free bytes {left}")
        return f"filled {', '.join(left)}"

    def heal(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.volume is not None:
                node.volume.unfill()
        self.recover(nodes)
