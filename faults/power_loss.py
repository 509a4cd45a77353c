"""power-loss: a node loses power, and with it everything not yet on its disk.

The node's data directory is an ext4 file system on a loop device of its
own. Right after SIGKILL, a sparse copy of the loop device's backing file
holds exactly what reached the "disk"; writes still in the page cache are
not in it. The node is restarted on that copy: Kafka then recovers from a
log that lost its unflushed tail, exactly as after a real power cut.
Targets may be one node, a majority, or all brokers at once (a rack or
data-centre outage).
"""

from __future__ import annotations

from clusters.errors import ClusterError
from clusters.node import Node
from faults.base import Fault, FaultError
from faults.kill import kill_all


class PowerLossFault(Fault):
    kind = "power-loss"

    def apply(self, nodes: list[Node]) -> str:
        without_disk = [n.name for n in nodes if n.volume is None]
        if without_disk:
            raise FaultError(f"power-loss needs a loop-device data dir; {', '.join(without_disk)} has none")
        kill_all(nodes)
        try:
            # all crash images first: writeback goes on while we work
            crashes = [(n, n.volume.crash_copy()) for n in nodes]  # type: ignore[union-attr]
            for node, crash in crashes:
                node.volume.replace_with(crash)  # type: ignore[union-attr]
        except ClusterError as e:
            raise FaultError(str(e)) from None
        unmounted = [n.name for n in nodes if not n.volume.mounted]  # type: ignore[union-attr]
        if unmounted:
            raise FaultError(f"crash image not mounted for {', '.join(unmounted)}")
        return f"power cut {', '.join(n.name for n in nodes)}; restarted on crash images"

    def heal(self, nodes: list[Node]) -> None:
        self.recover(nodes)
