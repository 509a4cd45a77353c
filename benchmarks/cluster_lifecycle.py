"""How long `kchaos cluster up` takes to a ready cluster, and `kchaos cluster down` to remove it.

    .venv/bin/python benchmarks/cluster_lifecycle.py [--repeat 5] [--metadata zookeeper kraft]

Runs the CLI as a user does (``.venv/bin/kchaos cluster up [--metadata kraft]``,
then ``.venv/bin/kchaos cluster down --id <its id>``) ``--repeat`` times for
3 ZooKeeper + 3 brokers and for 3 KRaft controllers + 3 brokers, and prints
each wall time (process start to exit: Python start-up and imports included),
the CLI's own "ready in" figure, the medians against the targets (ready
< 40 s, teardown < 10 s), and whether the node image was reused (the
``kchaos-*`` image ids before and after are the same: nothing was built).

``down`` is always given the cluster's id: a bare ``kchaos cluster down``
removes every kchaos cluster on the machine, other people's included. On
any exit (Ctrl-C, SIGTERM) the cluster being measured is removed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KCHAOS = ROOT / ".venv" / "bin" / "kchaos"
LABEL = "io.kchaos.cluster"
TARGET_UP_S = 40.0
TARGET_DOWN_S = 10.0
NO_SUCH_CLUSTER = "kcbench-none"   # measures the CLI's own start-up: no cluster has this id


class Terminated(BaseException):
    pass


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signal.Signals(signum).name)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f}"


def say(text: str) -> None:
    print(f"{text}  [{load()}]", flush=True)


def kchaos_images() -> dict[str, str]:
    """tag -> image id of every kchaos-* image."""
    out = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.startswith("kchaos-"))


def cluster_ids() -> set[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={LABEL}", "--format",
                          f'{{{{.Label "{LABEL}"}}}}'], capture_output=True, text=True, check=True).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def leftovers(cluster_id: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={LABEL}={cluster_id}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def candidates(started_wall: float, before: set[str]) -> set[str]:
    """Ids `cluster up` may have given a cluster started at ``started_wall`` (kc + epoch seconds mod 10^6)."""
    seconds = range(int(started_wall) - 1, int(time.time()) + 1)
    names = {f"kc{s % 1_000_000:06d}" for s in seconds}
    return (cluster_ids() - before) & names


def down(cluster_id: str) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.run([str(KCHAOS), "cluster", "down", "--id", cluster_id], capture_output=True, text=True,
                          cwd=ROOT)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"kchaos cluster down --id {cluster_id} failed: {(proc.stderr or proc.stdout).strip()}")
    return elapsed, proc.stdout.strip()


def measure(metadata: str, extra: list[str]) -> dict[str, object]:
    """One up + down; the cluster is removed on every exit path."""
    before = cluster_ids()
    cmd = [str(KCHAOS), "cluster", "up", "--metadata", metadata, *extra]
    started_wall = time.time()
    started = time.monotonic()
    cluster_id: str | None = None
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        up_s = time.monotonic() - started
        m = re.search(r"cluster (\S+) ready in ([\d.]+)s", proc.stdout)
        if proc.returncode != 0 or m is None:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
        cluster_id = m.group(1)
        load_up = load()
        down_s, down_out = down(cluster_id)
        left = leftovers(cluster_id)
        cluster_id = None if not left else cluster_id
        return {"up_s": up_s, "cli_ready_s": float(m.group(2)), "down_s": down_s, "id": m.group(1),
                "down_out": down_out, "left": left, "load_up": load_up}
    finally:
        ids = {cluster_id} if cluster_id else candidates(started_wall, before)
        for cid in ids:  # interrupted, or something failed: leave nothing behind
            try:
                down(cid)
            except Exception as e:  # noqa: BLE001
                print(f"could not remove {cid}: {e}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--metadata", nargs="+", choices=("zookeeper", "kraft"), default=["zookeeper", "kraft"])
    parser.add_argument("--kafka-version", help="default: the CLI's default (3.9.2)")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)
    extra = ["--kafka-version", args.kafka_version] if args.kafka_version else []
    images_before = kchaos_images()
    say(f"cluster_lifecycle: {args.repeat} x up/down for {', '.join(args.metadata)}; "
        f"kchaos images before: {len(images_before)}")
    floor = statistics.median(down(NO_SUCH_CLUSTER)[0] for _ in range(3))
    say(f"CLI floor: `kchaos cluster down --id {NO_SUCH_CLUSTER}` (Python start-up, imports, one Docker query, "
        f"nothing to remove) takes {floor:.1f} s (median of 3); it is part of every figure below")
    summary = []
    for metadata in args.metadata:
        quorum = "3 ZooKeeper + 3 brokers" if metadata == "zookeeper" else "3 KRaft controllers + 3 brokers"
        ups, downs = [], []
        for i in range(args.repeat):
            r = measure(metadata, extra)
            ups.append(r["up_s"])
            downs.append(r["down_s"])
            left = f"; LEFT BEHIND: {r['left']}" if r["left"] else ""
            print(f"{metadata:<9} #{i + 1}: up {r['up_s']:5.1f} s (CLI says ready in {r['cli_ready_s']:.1f} s) "
                  f"[{r['load_up']}]   down {r['down_s']:4.1f} s ({r['down_out']}){left}  [{load()}]", flush=True)
        up_med, down_med = statistics.median(ups), statistics.median(downs)
        line = (f"{metadata:<9} ({quorum}): median up {up_med:.1f} s (target < {TARGET_UP_S:.0f} s: "
                f"{'met' if up_med < TARGET_UP_S else 'NOT met'}), median down {down_med:.1f} s "
                f"(target < {TARGET_DOWN_S:.0f} s: {'met' if down_med < TARGET_DOWN_S else 'NOT met'}); "
                f"up min/max {min(ups):.1f}/{max(ups):.1f} s, down min/max {min(downs):.1f}/{max(downs):.1f} s")
        say(line)
        summary.append(line)
    images_after = kchaos_images()
    new = sorted(set(images_after.items()) - set(images_before.items()))
    reused = "reused (no image was built: the kchaos-* image ids are unchanged)" if not new else \
        f"NOT reused: new images {', '.join(t for t, _ in new)}"
    print()
    say("summary")
    for line in summary:
        print(f"  {line}")
    print(f"  node image: {reused}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, Terminated):
        print("interrupted; the cluster being measured was removed", file=sys.stderr)
        sys.exit(130)
