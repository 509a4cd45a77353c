"""A node's data directory: an ext4 file system on its own loop device.

The power-loss fault needs the data to sit on a block device of its own: it
cuts the file system off its device (nothing more reaches it) and copies the
backing file, which then holds exactly what had reached the device. Backing
files end in ``.kchaos.img`` so that leftovers of a harness that was killed
can be found (see clusters/cleanup.py).
"""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from clusters.errors import ClusterError

IMAGE_SUFFIX = ".kchaos.img"
FILLER = "kchaos-disk-full"
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32) in linux/fs/ext4/ext4.h
EXT4_GOING_FLAGS_NOLOGFLUSH = 2  # shut down flushing neither dirty pages nor the journal


def run(cmd: list[str], what: str) -> str:
    """Run a system command; a failure becomes a one-line ClusterError."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{what} failed: {detail[-1] if detail else 'exit ' + str(result.returncode)}")
    return result.stdout


@dataclass
class LoopVolume:
    """A sparse file formatted as ext4, attached to a loop device and mounted."""

    image: Path
    mountpoint: Path
    size_mb: int
    device: str | None = None
    power_cut: bool = False  # the mounted file system no longer writes to its device

    def create(self) -> "LoopVolume":
        self.image.parent.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with self.image.open("wb") as f:
            f.truncate(self.size_mb * 1024 * 1024)
        run(["mkfs.ext4", "-q", "-F", "-m", "0", str(self.image)], f"mkfs.ext4 on {self.image.name}")
        self.device = run(["losetup", "--find", "--show", str(self.image)], "losetup").strip()
        run(["mount", "-t", "ext4", self.device, str(self.mountpoint)], f"mounting {self.device}")
        return self

    def cut_power(self) -> None:
        """From now on nothing reaches the device: the disk stays as it is at this instant.

        The writes of a killed process still sit in the host's page cache,
        and writeback would push them to the loop device at any time, even
        while its backing file is being copied. ext4's shutdown ioctl with no
        flush (fstests' way to simulate a crash) drops them: dirty pages are
        never written, the journal stops, every later access fails with EIO.
        (``blockdev --setro`` would not do: the block layer only warns and
        writes anyway.) Then we wait for the requests already in flight.
        """
        fd = self._open_own_mount()
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        except OSError as e:
            raise ClusterError(f"cannot cut {self.mountpoint} off {self.device}: {e.strerror}") from None
        finally:
            os.close(fd)
        self.power_cut = True
        self._await_quiet_device()

    def _open_own_mount(self) -> int:
        """A descriptor of the mountpoint, checked to be this volume's file system (never the host's)."""
        if self.device is None:
            raise ClusterError(f"{self.image.name} is not attached to a loop device")
        try:
            fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise ClusterError(f"cannot open {self.mountpoint}: {e.strerror}") from None
        if os.fstat(fd).st_dev != os.stat(self.device).st_rdev:
            os.close(fd)
            raise ClusterError(f"{self.mountpoint} is not the file system of {self.device}")
        return fd

    def _await_quiet_device(self, timeout_s: float = 30) -> None:
        """Wait until the loop device has no request in flight: its backing file is then final."""
        inflight = Path("/sys/block") / Path(str(self.device)).name / "inflight"  # "reads writes"
        deadline = time.monotonic() + timeout_s
        while (left := sum(int(n) for n in inflight.read_text().split())) and time.monotonic() < deadline:
            time.sleep(0.01)
        if left:
            raise ClusterError(f"{self.device} still has {left} requests in flight {timeout_s:g}s after the cut")

    def crash_copy(self) -> Path:
        """A sparse copy of the backing file once the power is cut: exactly what had reached the device.

        Taken right after the node is SIGKILLed, it lacks every write still
        in the file system's page cache, as a machine that lost power would.
        """
        if not self.power_cut:
            self.cut_power()
        crash = self.image.with_name(self.image.name + ".crash")
        run(["cp", "--sparse=always", str(self.image), str(crash)], f"copying {self.image.name}")
        return crash

    def replace_with(self, crash: Path) -> None:
        """Unmount, swap the backing file for ``crash`` and mount it again (ext4 replays its journal)."""
        self.release()
        crash.replace(self.image)
        self.device = run(["losetup", "--find", "--show", str(self.image)], "losetup").strip()
        run(["mount", "-t", "ext4", self.device, str(self.mountpoint)],
            f"mounting the crash image of {self.image.name}")

    @property
    def mounted(self) -> bool:
        return any(line.split()[:2] == [self.device, str(self.mountpoint)]
                   for line in Path("/proc/mounts").read_text().splitlines())

    def fill(self, leave_bytes: int = 0) -> Path:
        """Fill the file system up to ``leave_bytes`` free with one file; returns it.

        fallocate takes all but the last MiB in one call (ext4 refuses to
        allocate its very last blocks that way); appending zeros takes the rest.
        """
        filler = self.mountpoint / FILLER
        bulk = self.free_bytes() - leave_bytes - 1024 * 1024
        if bulk > 0:
            run(["fallocate", "-l", str(bulk), str(filler)], f"filling {self.mountpoint}")
        if leave_bytes == 0:
            with filler.open("ab", buffering=0) as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                except OSError:  # ENOSPC: full, as wanted
                    pass
        return filler

    def unfill(self) -> None:
        (self.mountpoint / FILLER).unlink(missing_ok=True)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.mountpoint)
        return stat.f_bavail * stat.f_frsize

    def release(self) -> None:
        """Unmount and detach; safe to call twice."""
        release_loop(self.image, self.mountpoint)
        self.device = None
        self.power_cut = False


def release_loop(image: Path, mountpoint: Path | None = None) -> None:
    """Unmount whatever the loop devices of ``image`` are mounted at, then detach them (also when the file is
    gone: a test's temporary folder removed under a device still attached)."""
    attached = run(["losetup", "-a", "-O", "NAME,BACK-FILE", "-n"], "losetup -a")
    devices = [name for name, _, back in (line.strip().partition(" ") for line in attached.splitlines())
               if name and back.split(" (deleted)")[0] == str(image)]
    mounts = Path("/proc/mounts").read_text().splitlines()
    for line in mounts:
        source, target = line.split()[:2]
        if source in devices or (mountpoint is not None and target == str(mountpoint)):
            run(["umount", "-l", target], f"unmounting {target}")
    for device in devices:
        run(["losetup", "-d", device], f"detaching {device}")


def leftover_images(name_part: str = "") -> list[Path]:
    """Backing files of kchaos loop devices still attached, optionally of one cluster."""
    out = run(["losetup", "-a", "-O", "BACK-FILE", "-n"], "losetup -a")
    files = {Path(line.strip().split(" (deleted)")[0]) for line in out.splitlines() if line.strip()}
    return sorted(f for f in files if f.name.endswith(IMAGE_SUFFIX) and name_part in f.name)
