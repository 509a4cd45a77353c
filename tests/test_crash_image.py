"""The power-loss crash image on real loop devices (root, no Docker): one instant of the disk, nothing later.

A write-back that comes after the power cut (the kernel's flusher may run at
any moment, also while the image is being copied) must not reach the disk.
"""

from __future__ import annotations

import filecmp
import os
import random
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusters.errors import ClusterError
from clusters.storage import LoopVolume
from faults.power_loss import PowerLossFault

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loop devices and mounts need root")

DURABLE = b"fsynced before the power cut\n" * 1000
UNSYNCED = b"only in the page cache\n" * 400_000  # ~9 MB


def new_volume(folder: Path, size_mb: int = 64) -> LoopVolume:
    """Not named *.kchaos.img: a cluster clean-up must never take a test's volume."""
    return LoopVolume(folder / f"crash-test-{uuid.uuid4().hex[:8]}.img", folder / "data", size_mb).create()


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[LoopVolume]:
    vol = new_volume(tmp_path)
    try:
        yield vol
    finally:
        vol.release()


def write_durable(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_back_later(f: object) -> None:
    """Force the write-back of an open file's dirty pages; a file system whose power is cut refuses (EIO)."""
    try:
        os.fsync(f.fileno())  # type: ignore[attr-defined]
    except OSError:
        pass


def assert_released(vol: LoopVolume, image: Path) -> None:
    """No loop device of the image is left, and nothing is mounted at the volume's mountpoint."""
    attached = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True, check=True).stdout
    assert attached == ""
    assert str(vol.mountpoint) not in Path("/proc/mounts").read_text()


def test_a_crash_image_is_the_disk_at_one_instant(volume: LoopVolume) -> None:
    durable, unsynced = volume.mountpoint / "durable", volume.mountpoint / "unsynced"
    write_durable(durable, DURABLE)
    with unsynced.open("wb") as f:
        f.write(UNSYNCED)
        f.flush()  # into the page cache, not onto the disk
        crash = volume.crash_copy()
        write_back_later(f)
    assert filecmp.cmp(volume.image, crash, shallow=False), "a write reached the disk after its crash image"

    image = volume.image
    volume.replace_with(crash)
    assert volume.mounted and not crash.exists()
    assert durable.read_bytes() == DURABLE
    assert not unsynced.exists() or unsynced.read_bytes() != UNSYNCED
    volume.release()
    assert_released(volume, image)


def test_the_power_is_cut_only_on_the_volumes_own_file_system(volume: LoopVolume) -> None:
    """A mountpoint that is not (or no longer) the volume's mount is refused, never shut down.

    The inner volume's mountpoint lies inside the outer test volume, so a
    wrong shutdown could only ever hit that test file system, not the host's.
    """
    inner = new_volume(volume.mountpoint / "inner")
    try:
        subprocess.run(["umount", str(inner.mountpoint)], check=True)  # still attached: device is set
        with pytest.raises(ClusterError, match="is not the file system of /dev/loop"):
            inner.cut_power()
        write_durable(volume.mountpoint / "still-writable", DURABLE)
    finally:
        inner.release()
    with pytest.raises(ClusterError, match="is not attached to a loop device"):
        inner.cut_power()


class Machine:
    """Stands in for a node's container: the process dies on kill; the disk is a real loop volume."""

    def __init__(self, name: str, volume: LoopVolume) -> None:
        self.name, self.volume, self.running = name, volume, True

    def kill(self) -> None:
        self.running = False


def test_the_power_loss_event_says_when_the_disks_stopped_and_how_long_the_copy_took(tmp_path: Path) -> None:
    machines = [Machine(f"broker{i}", new_volume(tmp_path / f"b{i}")) for i in (1, 2)]
    try:
        for m in machines:
            write_durable(m.volume.mountpoint / "durable", DURABLE)
            (m.volume.mountpoint / "unsynced").write_bytes(UNSYNCED)
        detail = PowerLossFault(None, "t", random.Random(1)).apply(machines)  # type: ignore[arg-type]
        assert re.fullmatch(r"power cut broker1, broker2: disks stopped \d+ ms after SIGKILL, nothing reached "
                            r"them later; crash images copied in \d+\.\d\d s; restarted on crash images", detail)
        for m in machines:
            assert m.volume.mounted and (m.volume.mountpoint / "durable").read_bytes() == DURABLE
    finally:
        for m in machines:
            m.volume.release()
