"""rundir/phases.py: the phases line `kchaos run` prints and the nightly reads back."""

from __future__ import annotations

import time

from rundir.phases import PhaseTimer, parse_phases


def test_a_phase_started_again_adds_to_its_total_and_the_line_reads_back() -> None:
    timer = PhaseTimer()
    timer.start("starting the cluster")
    time.sleep(0.02)
    timer.start("reading the replicas' disks")
    timer.start("starting the cluster")
    time.sleep(0.02)
    timer.stop()
    with timer.phase("check"):
        pass
    assert list(timer.seconds) == ["starting the cluster", "reading the replicas' disks", "check"]
    assert timer.seconds["starting the cluster"] >= 0.04
    parsed = parse_phases(f"noise\n{timer.line()}\nverdict: valid\n")
    assert list(parsed) == list(timer.seconds)
    assert all(abs(parsed[k] - v) <= 0.05 for k, v in timer.seconds.items())


def test_the_last_phases_line_wins_and_no_line_is_no_phases() -> None:
    assert parse_phases("phases: load 1.0 s\nphases: load 60.2 s, check 8.0 s\n") == {"load": 60.2, "check": 8.0}
    assert parse_phases("run directory: x\nverdict: valid\n") == {}
