"""The KRaft cluster's finalized features, read and set with Kafka's own ``kafka-features.sh`` inside a broker.

A feature level decides behaviour this project measures: ``eligible.leader.replicas.version`` (KIP-966's
Eligible Leader Replicas, off in 4.0, on in new clusters from 4.1), ``transaction.version`` (2: KIP-890's
transactions, on in new 4.x clusters), ``metadata.version`` (what a rolling upgrade raises last). ZooKeeper
mode has none of them.
"""

from __future__ import annotations

import re

from clusters.errors import ClusterError
from clusters.kafka_versions import at_least
from clusters.node import SELF_BOOTSTRAP, Node

# kafka-features.sh: the Java tool since 3.7, the Scala one before (3.7-3.9 ship both)
TOOL, OLD_TOOL = "org.apache.kafka.tools.FeatureCommand", "kafka.admin.FeatureCommand"
TOOL_TIMEOUT_S = 120
# the features a scenario may set, and the release that brought each (metadata.version: a rolling upgrade's)
SETTABLE = {"eligible.leader.replicas.version": (4, 0), "transaction.version": (4, 0), "group.version": (4, 0)}


def run_features(broker: Node, *args: str) -> str:
    """kafka-features.sh ``args`` run in ``broker`` against itself; its stdout (ClusterError, one line, when it
    fails)."""
    tool = TOOL if at_least(broker.version, 3, 7) else OLD_TOOL
    done = broker.exec("java", "-Xmx256m", "-cp", "/opt/kafka/libs/*", tool, "--bootstrap-server", SELF_BOOTSTRAP,
                       *args, timeout_s=TOOL_TIMEOUT_S)
    if done.returncode != 0:
        tail = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise ClusterError(f"kafka-features.sh {' '.join(args)} in {broker.name} failed (exit {done.returncode})"
                           + (f": {tail[-1][:300]}" if tail else ""))
    return done.stdout


def finalized_level(describe: str, feature: str) -> str | None:
    """A feature's FinalizedVersionLevel in ``kafka-features.sh describe``'s output (one feature a line, its
    ``Name: value`` cells apart by a tab before 4.0 and by padding since), or None when it does not list it."""
    for line in describe.splitlines():
        found = re.match(r"\s*Feature: (\S+)\s.*?\bFinalizedVersionLevel: (\S+)", line)
        if found is not None and found.group(1) == feature:
            return found.group(2)
    return None


def set_feature(broker: Node, feature: str, level: int) -> None:
    """Finalize ``feature`` at ``level`` (upgrade or downgrade from where it is; a feature not listed is at 0),
    and check that the cluster says so."""
    now = int(finalized_level(run_features(broker, "describe"), feature) or 0)
    if now != level:
        run_features(broker, "upgrade" if level > now else "downgrade", "--feature", f"{feature}={level}")
    after = int(finalized_level(run_features(broker, "describe"), feature) or 0)
    if after != level:
        raise ClusterError(f"{feature} is finalized at {after} after kafka-features.sh set it to {level}")


def raise_metadata_version(broker: Node, release: str) -> str:
    """``kafka-features.sh upgrade --metadata`` (what finishes an upgrade in KRaft: the old release's
    metadata.version stays until an operator raises it), checked with ``describe``; the level it reached."""
    run_features(broker, "upgrade", "--metadata", release)
    finalized = finalized_level(run_features(broker, "describe"), "metadata.version")
    if finalized is None or not finalized.startswith(f"{release}-"):
        raise ClusterError(f"metadata.version is {finalized} after kafka-features.sh upgrade --metadata {release}")
    return finalized
