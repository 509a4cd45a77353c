"""Partition state as ZooKeeper holds it: the authority in ZooKeeper mode.

A broker's own metadata can be stale (a broker cut off from the controller
still reports itself in the ISR), and the AdminClient may ask any broker.
The controller writes leader and ISR to ZooKeeper, so that is where kchaos
reads them.
"""

from __future__ import annotations

import json
import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from clusters.errors import ClusterError

logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection loss is what faults are for


class ZooKeeperMetadata:
    """A read-only view of /brokers and /controller."""

    def __init__(self, hosts: str, timeout_s: float = 5) -> None:
        self._timeout_s = timeout_s
        self._client = KazooClient(hosts=hosts, timeout=timeout_s, read_only=True)
        try:
            self._client.start(timeout=timeout_s * 2)
        except KazooTimeoutError:
            raise ClusterError(f"cannot reach ZooKeeper at {hosts}") from None

    def _read(self, path: str) -> bytes | None:
        """The znode's data, None when it does not exist."""
        try:
            data, _ = self._client.get_async(path).get(timeout=self._request_timeout_s)
        except NoNodeError:
            return None
        except (KazooException, KazooTimeoutError) as e:
            raise ClusterError(f"cannot read {path} from ZooKeeper: {type(e).__name__}") from None
        return data

    @property
    def _request_timeout_s(self) -> float:
        """How long one read may wait. kazoo's own calls wait for ever: a request queued while the session is
        being re-established (seen on a machine at load average 200) froze the observer and the nemesis."""
        return self._timeout_s * 2

    def _json(self, path: str) -> dict:
        data = self._read(path)
        if data is None:
            raise ClusterError(f"ZooKeeper has no {path}")
        return json.loads(data)

    def broker_ids(self) -> set[int]:
        """Brokers with a live ZooKeeper session (their ephemeral registration exists)."""
        try:
            children = self._client.get_children_async("/brokers/ids").get(timeout=self._request_timeout_s)
            return {int(b) for b in children}
        except (KazooException, KazooTimeoutError) as e:
            raise ClusterError(f"cannot list /brokers/ids in ZooKeeper: {type(e).__name__}") from None

    def controller_id(self) -> int | None:
        """The broker that won the last controller election, None while there is none."""
        data = self._read("/controller")
        return None if data is None else int(json.loads(data)["brokerid"])

    def replicas(self, topic: str) -> dict[int, list[int]]:
        assignment = self._json(f"/brokers/topics/{topic}")["partitions"]
        return {int(p): list(r) for p, r in assignment.items()}

    def state(self, topic: str, partition: int) -> tuple[int | None, list[int]]:
        """(leader or None, isr) of one partition."""
        state = self._json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        leader = int(state["leader"])
        return (leader if leader >= 0 else None), list(state["isr"])

    def close(self) -> None:
        try:
            self._client.stop()
            self._client.close()
        except KazooException:
            pass
