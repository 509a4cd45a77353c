"""Every fault kind by name: the scenario's ``kind:`` picks one."""

from __future__ import annotations

from faults.base import Fault
from faults.kill import KillFault

FAULTS: dict[str, type[Fault]] = {f.kind: f for f in (KillFault,)}
