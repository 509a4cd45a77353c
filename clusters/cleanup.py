"""Remove what a cluster left behind, found by label and by file name.

Used by every teardown and by ``kchaos cluster down``: the same code cleans
up after a normal exit and after a harness that was SIGKILLed mid-run.
Only containers and networks labelled ``io.kchaos.cluster`` and loop devices
backed by ``*.kchaos.img`` files are touched.
"""

from __future__ import annotations

import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.networks import Network
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from clusters.node import LABEL_CLUSTER, LABEL_OWNER, LABEL_WORKDIR
from clusters.storage import leftover_images, release_loop

log = logging.getLogger(__name__)


def _label_filter(cluster_id: str | None) -> dict[str, str]:
    return {"label": f"{LABEL_CLUSTER}={cluster_id}" if cluster_id else LABEL_CLUSTER}


def remove_cluster(cluster_id: str | None = None) -> list[str]:
    """Remove one cluster's containers, network, mounts and loop devices (all clusters when None).

    Returns the cluster ids that had something to remove.
    """
    client = docker.from_env()
    seen: set[str] = set()
    workdirs: set[Path] = set()
    containers = client.containers.list(all=True, filters=_label_filter(cluster_id), ignore_removed=True)
    for c in containers:
        seen.add(c.labels.get(LABEL_CLUSTER, "?"))
        if LABEL_WORKDIR in c.labels:
            workdirs.add(Path(c.labels[LABEL_WORKDIR]))
    # in parallel: one `docker rm -f` takes 1-2 s on a busy machine, six in a row exceed 10 s
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(containers)))) as pool:
        list(pool.map(_remove_container, containers))
    for image in leftover_images(f"{cluster_id}-" if cluster_id else ""):
        seen.add(image.name.split("-", 1)[0])
        release_loop(image)
        image.unlink(missing_ok=True)
    for workdir in workdirs:  # the cluster's own scratch folder: configs and unmounted data dirs
        shutil.rmtree(workdir, ignore_errors=True)
    # last: a network dockerd will not let go of must not keep the mounts and loop devices above
    for net in client.networks.list(filters=_label_filter(cluster_id)):
        seen.add(net.attrs.get("Labels", {}).get(LABEL_CLUSTER, "?"))
        _remove_network(net)
    return sorted(seen)


def endpoints_linger(error: BaseException) -> bool:
    """dockerd refused to remove a network whose containers it has just removed: their endpoints are released a
    moment later (seen after a rolling upgrade had replaced every container)."""
    return isinstance(error, docker.errors.APIError) and "active endpoints" in str(error)


@retry(retry=retry_if_exception(endpoints_linger), stop=stop_after_delay(20), wait=wait_fixed(0.5), reraise=True)
def _remove_network(net: Network) -> None:
    try:
        net.remove()
    except docker.errors.NotFound:
        pass


def _remove_container(container: Container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans() -> list[str]:
    """Remove clusters whose owning harness process is gone (it was killed mid-run). Containers another harness
    removes while they are listed are passed over (``ignore_removed``): a run starting beside another one's
    teardown once ended in a 404."""
    client = docker.from_env()
    orphans = set()
    for c in client.containers.list(all=True, filters={"label": LABEL_OWNER}, ignore_removed=True):
        owner = int(c.labels.get(LABEL_OWNER, "0") or 0)
        if owner > 0 and not _alive(owner):
            orphans.add(c.labels[LABEL_CLUSTER])
    removed = []
    for cluster_id in sorted(orphans):
        log.warning("removing cluster %s left behind by a harness that died", cluster_id)
        removed += remove_cluster(cluster_id)
    return removed
