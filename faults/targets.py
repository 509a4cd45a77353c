"""What a fault hits: nodes (a partition's leader, the controller, random nodes, a majority, all, a transaction,
group or share coordinator) or workload clients (a producer, a consumer, an exactly-once pipeline, a share group's
member, any of them)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from clusters.cluster import Cluster
from clusters.errors import ClusterError
from clusters.node import Node
from workloads.client import Client

NODE_TARGETS = ("partition-leader", "controller", "random-broker", "random-node", "majority-brokers", "all-brokers",
                "txn-coordinator", "group-coordinator", "share-coordinator")
# a role's name targets a client of that role; "pipeline" and "share_consumer" are appended so the others keep
# their order
RANDOM_CLIENT = "random-client"  # any of them; every other client target names a role
CLIENT_TARGETS = ("producer", "consumer", RANDOM_CLIENT, "pipeline", "share_consumer")
TARGETS = NODE_TARGETS + CLIENT_TARGETS
# what each target picks, one line: the documentation's fault reference is generated from it
TARGET_HELP = {
    "partition-leader": "the leader of a random partition of the workload's topic (as the brokers' metadata says)",
    "controller": "the active controller: a broker with ZooKeeper, the KRaft quorum's leader",
    "random-broker": "one broker at random",
    "random-node": "one node at random: a broker, a ZooKeeper node or a KRaft controller",
    "majority-brokers": "a random majority of the brokers",
    "all-brokers": "every broker",
    "txn-coordinator": "the transaction coordinator of one of the workload's transactional ids",
    "group-coordinator": "the group coordinator of the workload's consumer group (or the pipeline's, or the share "
                         "group's)",
    "share-coordinator": "the share coordinator of a random partition of the workload's topic in the share group: "
                         "the broker keeping its acknowledged state (the leader of its __share_group_state "
                         "partition)",
    "producer": "a producer process at random",
    "consumer": "a consumer process at random",
    "random-client": "any workload process at random (the default of client faults)",
    "pipeline": "an exactly-once pipeline process at random",
    "share_consumer": "a member of the share group at random",
}


def choose_targets(cluster: Cluster, topic: str, target: str, rng: random.Random,
                   transactional_ids: Sequence[str] = (), group_ids: Sequence[str] = (),
                   share_groups: Sequence[str] = ()) -> list[Node]:
    """Pick nodes for ``target``; random choices come from ``rng`` so a seed reproduces them.

    ``txn-coordinator``: the broker coordinating one of ``transactional_ids``
    (the workload's), picked at random; none while the workload has none.
    ``group-coordinator``: the broker coordinating one of ``group_ids`` (the
    consumers' group, the pipeline's), each group as likely however many
    processes it has; none while the workload has none.
    ``share-coordinator``: the broker keeping the state of one partition of
    ``topic`` in one of ``share_groups``, the partition picked at random.
    """
    brokers = sorted(cluster.brokers, key=lambda n: n.node_id)
    coordinators = {"txn-coordinator": (transactional_ids, cluster.transaction_coordinator),
                    "group-coordinator": (group_ids, cluster.group_coordinator)}
    if target in coordinators:
        keys, coordinator_of = coordinators[target]
        if not keys:
            return []
        coordinator = coordinator_of(rng.choice(sorted(set(keys))))
        return [coordinator] if coordinator is not None else []
    if target == "share-coordinator":
        if not share_groups:
            return []
        group = rng.choice(sorted(set(share_groups)))
        try:
            partitions = sorted(s.partition for s in cluster.partitions(topic))
        except ClusterError:
            return []
        coordinator = cluster.share_coordinator(group, topic, rng.choice(partitions)) if partitions else None
        return [coordinator] if coordinator is not None else []
    if target == "partition-leader":
        try:
            states = cluster.partitions(topic)
        except ClusterError:
            return []
        led = [s for s in states if s.leader is not None]
        return [cluster.broker(rng.choice(led).leader)] if led else []  # type: ignore[arg-type]
    if target == "controller":
        try:
            return [cluster.controller()]
        except ClusterError:
            return []
    if target == "random-broker":
        return [rng.choice(brokers)]
    if target == "random-node":
        return [rng.choice(sorted(cluster.nodes, key=lambda n: n.name))]
    if target == "majority-brokers":
        return sorted(rng.sample(brokers, len(brokers) // 2 + 1), key=lambda n: n.node_id)
    if target == "all-brokers":
        return brokers
    raise ValueError(f"unknown fault target {target!r}; one of {', '.join(TARGETS)}")


def choose_clients(clients: Sequence[Client], target: str, rng: random.Random) -> list[Client]:
    """One running workload process for ``target``; empty when none runs (e.g. no consumers)."""
    if target not in CLIENT_TARGETS:
        raise ValueError(f"unknown client target {target!r}; one of {', '.join(CLIENT_TARGETS)}")
    role = None if target == RANDOM_CLIENT else target  # the others are roles
    running = sorted((c for c in clients if c.running and role in (None, c.role)), key=lambda c: c.name)
    return [rng.choice(running)] if running else []
