"""Pure logic of the faults: who is cut from whom, and which options a fault takes."""

from __future__ import annotations

from itertools import combinations

import pytest

from faults.base import FaultError
from faults.partition import PartitionFault, ring_grudges
from faults.registry import FAULTS


class Named:
    """Stands in for a Node where only its name matters (the ring is pure arithmetic)."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_majority_ring_gives_every_node_a_different_majority(n: int) -> None:
    nodes = [Named(f"n{i}") for i in range(n)]
    grudges = ring_grudges(nodes)  # type: ignore[arg-type]
    sees = {node.name: {m.name for m in nodes} - grudges[node.name] for node in nodes}
    for name, visible in sees.items():
        assert name in visible and len(visible) >= n // 2 + 1
    if n >= 5:
        assert all(sees[a] != sees[b] for a, b in combinations(sees, 2))
    for a in sees:  # the cut is symmetric: a link is either up or down
        for b in grudges[a]:
            assert a in grudges[b]


def test_fault_options_are_checked() -> None:
    PartitionFault.check_options({"mode": "halves"})
    with pytest.raises(FaultError, match="partition mode must be one of"):
        PartitionFault.check_options({"mode": "sideways"})
    with pytest.raises(FaultError, match="kill has no option rate"):
        FAULTS["kill"].check_options({"rate": "1mbit"})
    assert set(FAULTS) == {"kill", "pause", "partition", "power-loss", "slow-network", "disk-full"}
