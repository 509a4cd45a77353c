"""Every fault kind by name: the scenario's ``kind:`` picks one."""

from __future__ import annotations

from faults.base import Fault
from faults.client_crash import ClientCrashFault
from faults.client_pause import ClientPauseFault
from faults.delay_requests import DelayRequestsFault
from faults.disk_full import DiskFullFault
from faults.drop_responses import DropResponsesFault
from faults.kill import KillFault
from faults.lossy_network import LossyNetworkFault
from faults.partition import PartitionFault
from faults.pause import PauseFault
from faults.power_loss import PowerLossFault
from faults.replay_requests import ReplayRequestsFault
from faults.rolling import RollingRestartFault, RollingUpgradeFault
from faults.slow_network import SlowNetworkFault

FAULTS: dict[str, type[Fault]] = {
    f.kind: f for f in (KillFault, PauseFault, PartitionFault, PowerLossFault, SlowNetworkFault, DiskFullFault,
                        ClientCrashFault, ClientPauseFault, DelayRequestsFault, DropResponsesFault, ReplayRequestsFault,
                        LossyNetworkFault, RollingRestartFault, RollingUpgradeFault)
}
