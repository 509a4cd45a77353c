"""Every fault kind and what the offline stages must know of it without importing the fault's code.

The fault modules (faults/) take ``stops_process`` and ``restarts`` from
here; forensics, the report's windows, ISR strips, headline and colours read
the same entry, so a new kind is one entry here and one module in faults/.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultKind:
    """One fault kind.

    ``stops_process``: while it is on, the victim's process serves nothing
    (gone, frozen, or shut down by itself), so it can lead no partition.
    ``restarts``: healing starts the victim's process again and waits until it
    serves; a cut that isolates the victim must not wrap it.
    ``loses_unsynced``: it takes from its victims what they had not yet
    fsynced, so with no fsync one on several brokers at once can lose
    acknowledged writes (the report's allowance).
    ``proves``: what the fault checks before it counts as applied (a fault that
    cannot prove it took effect stops the run, or is recorded as skipped).
    ``evidence``: the events.jsonl kind of the lines it writes after healing to
    say what it did (request-level faults: ``request``; rolling faults, each
    node's step: ``node-version``); None: its fault lines say it all.
    """

    name: str
    victim: str  # "node" or "client"
    does: str  # what it does, one line (docs/faults.md)
    noun: tuple[str, str]  # one, many: "kill", "kills"
    colour: str  # its band in the report's timeline
    stops_process: bool
    restarts: bool
    proves: str  # how it proves it took effect, one line (the documentation's fault reference)
    request_level: bool = False  # it works on the request path: a scenario with one starts the cluster's proxy
    loses_unsynced: bool = False
    evidence: str | None = None


FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("kill", "node", "SIGKILL the process, restart it when healed", ("kill", "kills"), "#e53935",
              proves="every victim's process is gone when the kill returns; healing waits until each serves again",
              stops_process=True, restarts=True),
    FaultKind("pause", "node", "freeze every process of the node (the container's cgroup freezer), thaw it when "
              "healed: a long GC pause",
              ("pause", "pauses"), "#8e24aa",
              proves="each victim's container reads as paused before the fault counts; healing waits until it serves",
              stops_process=True, restarts=False),
    FaultKind("partition", "node", "drop traffic with iptables inside the node's network namespace",
              ("network partition", "network partitions"), "#fb8c00",
              proves="every cut pair is probed and drops traffic both ways (clients mode: the clients reach no cut "
              "node); a plan that cuts no link is skipped; healing probes every pair open again",
              stops_process=False, restarts=False),
    FaultKind("power-loss", "node", "lose everything not yet fsynced; the node restarts on its crash image",
              ("power loss", "power losses"), "#6d4c41",
              proves="every victim's process is gone and its disk stopped, and its crash image is mounted before it "
              "restarts; the detail says how many ms after SIGKILL the disks stopped",
              stops_process=True, restarts=True, loses_unsynced=True),
    FaultKind("slow-network", "node", "limit the node's bandwidth with tc tbf",
              ("network slowdown", "network slowdowns"), "#1e88e5",
              proves="tc shows the tbf on the victim's interface; healing checks it is gone",
              stops_process=False, restarts=False),
    FaultKind("disk-full", "node", "fill the node's data file system; a broker that shut itself down is "
              "restarted when healed", ("full disk", "full disks"), "#546e7a",
              proves="the data file system's free bytes read back within 1 MiB of leave_bytes",
              stops_process=True, restarts=True),
    FaultKind("client-crash", "client", "SIGKILL a producer, consumer, pipeline or share consumer process; a new "
              "one takes its place when healed", ("crash", "crashes"), "#00897b",
              proves="each victim's process is gone; healing checks that its replacement runs",
              stops_process=True, restarts=True),
    FaultKind("client-pause", "client", "SIGSTOP a producer, consumer, pipeline or share consumer process "
              "(every thread: its client's heartbeats too); SIGCONT it when healed, and the same process goes on",
              ("client pause", "client pauses"), "#5e35b1",
              proves="each victim's process reads as stopped in /proc; healing checks that it runs again",
              stops_process=True, restarts=False),
    FaultKind("delay-requests", "node", "hold requests of chosen Kafka APIs from chosen clients to the broker, "
              "then deliver them late on their own connection while new connections pass",
              ("request delay", "request delays"), "#c0ca33",
              proves="a request line per held request in events.jsonl, written after healing; a window that "
              "matched no request is recorded as skipped",
              stops_process=False, restarts=False, request_level=True, evidence="request"),
    FaultKind("drop-responses", "node", "deliver requests of chosen Kafka APIs from chosen clients to the broker "
              "and drop its answers: the write takes effect, the client times out", ("dropped response",
              "dropped responses"), "#f9a825",
              proves="a request line per dropped response in events.jsonl; a window that matched no request is "
              "recorded as skipped",
              stops_process=False, restarts=False, request_level=True, evidence="request"),
    FaultKind("replay-requests", "node", "deliver a request of a chosen Kafka API to the broker again later, on a "
              "new connection: a stale retry", ("replayed request", "replayed requests"), "#7cb342",
              proves="a request line per replayed request in events.jsonl, with the broker's answer to the copy; "
              "a window that matched no request is recorded as skipped",
              stops_process=False, restarts=False, request_level=True, evidence="request"),
    FaultKind("lossy-network", "node", "drop a fraction of the node's packets at random (iptables statistic)",
              ("lossy network", "lossy networks"), "#26a69a",
              proves="its chain is read back hooked in on each victim; healing reads its packet counters (a window "
              "that dropped nothing is skipped) and checks the chain is gone",
              stops_process=False, restarts=False),
    FaultKind("rolling-restart", "node", "every broker in turn: controlled shutdown (SIGTERM), start, wait until "
              "it is back in every ISR it left, next", ("rolling restart", "rolling restarts"), "#5c6bc0",
              proves="each broker stops and serves again, and is back in every ISR it left within isr_wait_s, "
              "else the run stops",
              stops_process=False, restarts=False, evidence="node-version"),
    FaultKind("rolling-upgrade", "node", "the rolling restart with each node coming back on another Kafka "
              "release's image (KRaft: controllers first), then the version setting raised: metadata.version, or "
              "inter.broker.protocol.version and a second roll", ("rolling upgrade", "rolling upgrades"), "#3949ab",
              proves="as rolling-restart, on the new image; the raised metadata.version is read back with "
              "kafka-features.sh describe",
              stops_process=False, restarts=False, evidence="node-version"),
)}
UNKNOWN_FAULT_COLOUR = "#757575"


def fault_kind(name: str) -> FaultKind | None:
    """The catalogue's entry for a fault named in a history (None for a kind this kchaos does not know)."""
    return FAULT_KINDS.get(name)


def writing_evidence(kind: str) -> tuple[str, ...]:
    """The fault kinds whose evidence lines are of this events.jsonl kind."""
    return tuple(k.name for k in FAULT_KINDS.values() if k.evidence == kind)
