"""power-loss: a node loses power, and with it everything not yet on its disk.

The node's data directory is an ext4 file system on a loop device of its
own. Right after SIGKILL the file system is cut off its device (ext4's
shutdown ioctl, nothing flushed): writes still in the page cache never reach
it, though writeback would otherwise push them at any time. The backing file
then stays as it was at that one instant; its sparse copy is the crash image,
and the node restarts on it: Kafka recovers from a log that lost its
unflushed tail, exactly as after a real power cut. The fault's detail says
how long after SIGKILL the disks stopped and how long the copies took.
Targets may be one node, a majority, or all brokers at once (a rack or
data-centre outage).
"""

from __future__ import annotations

import time

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
        kills_sent = time.monotonic()  # kill_all returns once docker saw every process exit
        kill_all(nodes)
        try:
            for node in nodes:  # every disk stops first, right after the kills
                node.volume.cut_power()  # type: ignore[union-attr]
            cut = time.monotonic()
            crashes = [(n, n.volume.crash_copy()) for n in nodes]  # type: ignore[union-attr]
            copied = time.monotonic()
            for node, crash in crashes:
                node.volume.replace_with(crash)  # type: ignore[union-attr]
        except ClusterError as e:
            raise FaultError(str(e)) from None
        unmounted = [n.name for n in nodes if not n.volume.mounted]  # type: ignore[union-attr]
        if unmounted:
            raise FaultError(f"crash image not mounted for {', '.join(unmounted)}")
        return (f"power cut {', '.join(n.name for n in nodes)}: disks stopped {(cut - kills_sent) * 1000:.0f} ms "
                f"after SIGKILL, nothing reached them later; crash images copied in {copied - cut:.2f} s; "
                f"restarted on crash images")

    def heal(self, nodes: list[Node]) -> None:
        self.recover(nodes)
