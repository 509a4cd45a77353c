"""Kafka's log messages that decide what a partition keeps, as they read from 3.5 to 4.4 (ZooKeeper and KRaft).

Each template is taken from real node logs of this project's runs (runs/measure-*); ``match`` turns a message
into the fields of one event, or None. Kinds whose name starts with ``_`` are half an event that ``parse``
completes with what came before (a fetcher's reason to truncate, then the log's own "Truncating to offset").
Broker ids stay integers (as in events.jsonl's ``leader`` lines); a leader of -1 (none) is null.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Fields = dict[str, Any]

_TP = r"(?P<topic>[\w.-]+)-(?P<partition>\d+)"  # topic names hold letters, digits, '.', '_' and '-'
_INT = r"-?\d+"


def ints(text: str) -> list[int]:
    """Every integer in ``text``, in order: ISR lists come as "1,2,3", "[1, 2]" or "BrokerState(brokerId=1, ...)"."""
    return [int(n) for n in re.findall(_INT, text)]


def broker(value: str) -> int | None:
    """A broker id, or None for Kafka's -1 (no leader)."""
    n = int(value)
    return None if n < 0 else n


def _previous(m: re.Match[str]) -> int | None:
    """``Previous leader None`` / ``Some(3)``."""
    return None if m["prev"] is None else broker(m["prev"])


def _partition(m: re.Match[str]) -> Fields:
    return {"topic": m["topic"], "partition": int(m["partition"])}


@dataclass(frozen=True)
class Template:
    """A message format: substrings one of which every such message holds (a cheap first test), its pattern, its
    fields."""

    needles: tuple[str, ...]
    pattern: re.Pattern[str]
    build: Callable[[re.Match[str]], Fields]

    def match(self, message: str) -> Fields | None:
        if not any(n in message for n in self.needles):
            return None
        m = self.pattern.search(message)
        return None if m is None else self.build(m)


Build = Callable[[re.Match[str]], Fields]


def template(needle: str | tuple[str, ...], pattern: str) -> Callable[[Build], Template]:
    """Decorator: the function below builds the fields of messages matching ``pattern``."""
    def wrap(build: Build) -> Template:
        return Template(needle if isinstance(needle, tuple) else (needle,), re.compile(pattern), build)
    return wrap


# --- leaders: the broker's side (state.change.logger), both modes -----------------------------------------------

# "Previous leader Some(3) and previous leader epoch was 1." since 3.6; 3.5 says only "Previous leader epoch was 1."
_PREVIOUS = (r"(?:Previous leader (?:None|Some\((?P<prev>-?\d+)\)) and previous|Previous) "
             r"leader epoch was (?P<pepoch>-?\d+)")

@template(" starts at leader epoch ", r"^\[Broker id=(?P<node>\d+)\] Leader " + _TP + r" with topic id \S+ starts at "
          r"leader epoch (?P<epoch>-?\d+) from offset (?P<leo>-?\d+) with partition epoch (?P<pe>-?\d+), "
          r"high watermark (?P<hw>-?\d+), ISR \[(?P<isr>[\d,]*)\], adding replicas \[[\d,]*\] and removing "
          r"replicas \[[\d,]*\] ?(?P<under>\(under-min-isr\))?\. " + _PREVIOUS)
def become_leader(m: re.Match[str]) -> Fields:
    """[Broker id=1] Leader chaos-4 with topic id Some(..) starts at leader epoch 2 from offset 14033 with partition
    epoch 5, high watermark 14012, ISR [1,2], adding replicas [] and removing replicas [] (under-min-isr). Previous
    leader Some(3) and previous leader epoch was 1."""
    return {"kind": "become_leader", **_partition(m), "leader": int(m["node"]), "leader_epoch": int(m["epoch"]),
            "partition_epoch": int(m["pe"]), "log_end_offset": int(m["leo"]), "high_watermark": int(m["hw"]),
            "isr": ints(m["isr"]), "under_min_isr": m["under"] is not None, "previous_leader": _previous(m),
            "previous_leader_epoch": int(m["pepoch"])}


@template(" starts at leader epoch ", r"^\[Broker id=(?P<node>\d+)\] Follower " + _TP + r" starts at leader epoch "
          r"(?P<epoch>-?\d+) from offset (?P<leo>-?\d+) with partition epoch (?P<pe>-?\d+) and high watermark "
          r"(?P<hw>-?\d+)\. Current leader is (?P<leader>-?\d+)\. " + _PREVIOUS)
def become_follower(m: re.Match[str]) -> Fields:
    """[Broker id=1] Follower chaos-3 starts at leader epoch 0 from offset 0 with partition epoch 0 and high
    watermark 0. Current leader is 3. Previous leader Some(3) and previous leader epoch was 0."""
    return {"kind": "become_follower", **_partition(m), "leader": broker(m["leader"]), "leader_epoch": int(m["epoch"]),
            "partition_epoch": int(m["pe"]), "log_end_offset": int(m["leo"]), "high_watermark": int(m["hw"]),
            "previous_leader": _previous(m), "previous_leader_epoch": int(m["pepoch"])}


@template("was marked as RECOVERING", r"^\[Broker id=(?P<node>\d+)\] The topic partition " + _TP +
          r" was marked as RECOVERING\. Marking the topic partition as RECOVERED")
def unclean_recovered(m: re.Match[str]) -> Fields:
    """[Broker id=3] The topic partition chaos-1 was marked as RECOVERING. Marking the topic partition as
    RECOVERED. (the leader of an unclean election, once it leads)"""
    return {"kind": "unclean_recovered", **_partition(m), "leader": int(m["node"])}


# --- elections: the controller's side -------------------------------------------------------------------------

@template(" to OnlinePartition with state LeaderAndIsr(", r"^\[Controller id=(?P<cid>\d+) epoch=(?P<cepoch>\d+)\] "
          r"Changed partition " + _TP + r" from (?P<from>\w+) to OnlinePartition with state LeaderAndIsr\(leader="
          r"(?P<leader>-?\d+), leaderEpoch=(?P<epoch>-?\d+), isrWithBrokerEpoch=List\((?P<isr>.*?)\), "
          r"leaderRecoveryState=(?P<lrs>\w+), partitionEpoch=(?P<pe>-?\d+)\)")
def zk_election(m: re.Match[str]) -> Fields:
    """ZooKeeper mode: [Controller id=2 epoch=2] Changed partition chaos-4 from OfflinePartition to OnlinePartition
    with state LeaderAndIsr(leader=1, leaderEpoch=3, isrWithBrokerEpoch=List(BrokerState(brokerId=1,
    brokerEpoch=-1)), leaderRecoveryState=RECOVERING, partitionEpoch=4). RECOVERING: an unclean election
    (KIP-704); from NewPartition: the topic was created."""
    return {"kind": "election", **_partition(m), "leader": broker(m["leader"]), "leader_epoch": int(m["epoch"]),
            "partition_epoch": int(m["pe"]), "isr": [int(b) for b in re.findall(r"brokerId=(\d+)", m["isr"])],
            "unclean": m["lrs"] == "RECOVERING", "from_state": m["from"], "controller": int(m["cid"]),
            "controller_epoch": int(m["cepoch"])}


_CHANGE = re.compile(r"(\w+): (\[[^\]]*\]|[^,\s]+) -> (\[[^\]]*\]|[^,\s]+)")


@template("UNCLEAN partition change for ", r"^\[QuorumController id=\d+\] UNCLEAN partition change for "
          + _TP + r" with topic ID \S+: (?P<diff>.*)$")
def kraft_unclean_election(m: re.Match[str]) -> Fields:
    """KRaft: [QuorumController id=101] UNCLEAN partition change for chaos-1 with topic ID ..: isr: [2] -> [3],
    leader: 2 -> 3, leaderRecoveryState: RECOVERED -> RECOVERING, leaderEpoch: 0 -> 1, partitionEpoch: 2 -> 3.
    Only what changed is listed. Every controller logs the record as it replays it (the active one first); clean
    elections are logged at DEBUG only (the brokers' become_leader lines have them)."""
    change = {name: (old, new) for name, old, new in _CHANGE.findall(m["diff"])}
    fields: Fields = {"kind": "election", **_partition(m), "unclean": True}
    for name, old_key, new_key, convert in (("leader", "previous_leader", "leader", broker),
                                            ("leaderEpoch", "previous_leader_epoch", "leader_epoch", int),
                                            ("partitionEpoch", None, "partition_epoch", int),
                                            ("isr", "old_isr", "isr", ints)):
        if name in change:
            old, new = change[name]
            fields[new_key] = convert(new)
            if old_key is not None:
                fields[old_key] = convert(old)
    return fields


# --- ISR changes --------------------------------------------------------------------------------------------------

_OUT_OF_SYNC = re.compile(r"\(brokerId: (\d+), endOffset: (-?\d+|unknown), lastCaughtUpTimeMs: (-?\d+|unknown)\)")


def _int_or_none(text: str) -> int | None:
    return None if text == "unknown" else int(text)


@template("Shrinking ISR from ", r"^\[Partition " + _TP + r" broker=(?P<node>\d+)\] Shrinking ISR from (?P<old>[\d,]*) "
          r"to (?P<new>[\d,]*)\. Leader: \(highWatermark: (?P<hw>-?\d+), endOffset: (?P<leo>-?\d+)\)\. Out of sync "
          r"replicas: (?P<oos>.*)$")
def leader_isr_shrink(m: re.Match[str]) -> Fields:
    """[Partition chaos-3 broker=1] Shrinking ISR from 1,2,3 to 1,3. Leader: (highWatermark: 14012, endOffset:
    14033). Out of sync replicas: (brokerId: 2, endOffset: 14012, lastCaughtUpTimeMs: 1795504301927).
    The leader's proposal: the controller may still refuse it (an ``isr_update`` follows when it is committed)."""
    return {"kind": "isr_shrink", **_partition(m), "by": "leader", "leader": int(m["node"]), "old_isr": ints(m["old"]),
            "new_isr": ints(m["new"]), "high_watermark": int(m["hw"]), "log_end_offset": int(m["leo"]),
            "out_of_sync": [{"broker": int(b), "log_end_offset": _int_or_none(leo),
                             "last_caught_up_ms": _int_or_none(t)} for b, leo, t in _OUT_OF_SYNC.findall(m["oos"])]}


@template(" after removing replica ", r"^\[Controller id=(?P<cid>\d+) epoch=\d+\] Partition " + _TP + r" state changed "
          r"to \(Leader:(?P<leader>-?\d+),ISR:(?P<isr>[\d,]*),LeaderRecoveryState:\w+,LeaderEpoch:(?P<epoch>-?\d+),"
          r"ZkVersion:(?P<zkv>-?\d+),ControllerEpoch:\d+\) after removing replica (?P<removed>\d+) from the ISR")
def controller_isr_shrink(m: re.Match[str]) -> Fields:
    """ZooKeeper mode, a broker gone: [Controller id=2 epoch=2] Partition chaos-7 state changed to
    (Leader:-1,ISR:2,LeaderRecoveryState:RECOVERED,LeaderEpoch:4,ZkVersion:6,ControllerEpoch:2) after removing
    replica 1 from the ISR as part of transition to OfflineReplica. Written to ZooKeeper: committed."""
    return {"kind": "isr_shrink", **_partition(m), "by": "controller", "controller": int(m["cid"]),
            "leader": broker(m["leader"]), "leader_epoch": int(m["epoch"]), "partition_epoch": int(m["zkv"]),
            "old_isr": None, "new_isr": ints(m["isr"]), "removed": [int(m["removed"])]}


@template("ISR updated to ", r"^\[Partition " + _TP + r" broker=(?P<node>\d+)\] ISR updated to (?P<isr>[\d,]*)\s+"
          r"(?P<under>\(under-min-isr\))?\s*and version updated to (?P<pe>-?\d+)")
def isr_committed(m: re.Match[str]) -> Fields:
    """[Partition chaos-3 broker=1] ISR updated to 1,3  and version updated to 6: the controller accepted the
    leader's new ISR. Neither version logs expansions otherwise ("Expanding ISR" is gone since 3.x); ``parse``
    calls it ``isr_expand`` or ``isr_update`` by the ISR it knew before."""
    return {"kind": "_isr_committed", **_partition(m), "leader": int(m["node"]), "new_isr": ints(m["isr"]),
            "partition_epoch": int(m["pe"]), "under_min_isr": m["under"] is not None}


# --- truncations --------------------------------------------------------------------------------------------------

@template("Truncating partition ", r"^\[ReplicaFetcher replicaId=\d+, leaderId=(?P<leader>\d+), fetcherId=\d+\] "
          r"Truncating partition " + _TP + r" with TruncationState\(offset=(?P<offset>-?\d+), completed=\w+\) due to "
          r"(?:local high watermark (?P<hw>-?\d+)|leader epoch and offset EpochEndOffset\(errorCode=-?\d+, "
          r"partition=\d+, leaderEpoch=(?P<epoch>-?\d+), endOffset=(?P<end>-?\d+)\))")
def truncation_reason(m: re.Match[str]) -> Fields:
    """[ReplicaFetcher replicaId=3, leaderId=1, fetcherId=0] Truncating partition chaos-5 with
    TruncationState(offset=0, completed=true) due to local high watermark 0 | due to leader epoch and offset
    EpochEndOffset(errorCode=0, partition=5, leaderEpoch=0, endOffset=6851): the leader's end offset of the
    follower's last epoch (``epoch``, ``epoch_end_offset``). The log's own line says whether anything went."""
    fields: Fields = {"kind": "_truncation_reason", **_partition(m), "leader": int(m["leader"])}
    if m["epoch"] is None:
        fields["reason"] = "high_watermark"
    else:
        fields.update(reason="leader_epoch", epoch=int(m["epoch"]), epoch_end_offset=int(m["end"]))
    return fields


@template("Truncating to ", r"^\[UnifiedLog partition=" + _TP + r", dir=[^\]]+\] Truncating to "
          r"(?:offset (?P<offset>-?\d+)$|(?P<noop>-?\d+) has no effect)")
def log_truncation(m: re.Match[str]) -> Fields:
    """[UnifiedLog partition=chaos-5, dir=/data/kafka] Truncating to offset 23824 (records at and past it go), or
    "Truncating to 0 has no effect as the largest offset in the log is -1" (nothing went: no event)."""
    if m["noop"] is not None:
        return {"kind": "_truncation_noop", **_partition(m)}
    return {"kind": "truncate", **_partition(m), "to_offset": int(m["offset"])}


@template("Corruption found in segment ", r"^\[LogLoader partition=" + _TP + r", dir=[^\]]+\] Corruption found in "
          r"segment (?P<segment>\d+), truncating to offset (?P<offset>-?\d+)")
def corruption_truncation(m: re.Match[str]) -> Fields:
    """WARN [LogLoader partition=chaos-5, dir=/data/kafka] Corruption found in segment 0, truncating to offset
    23824: recovery after a crash cut a torn tail (what the disk never fully got)."""
    return {"kind": "truncate", **_partition(m), "to_offset": int(m["offset"]), "reason": "corruption",
            "segment": int(m["segment"])}


@template("Truncated to offset ", r"^\[RaftManager id=\d+\] Truncated to offset (?P<offset>-?\d+) from Fetch response "
          r"from leader (?P<leader>\d+)")
def metadata_truncation(m: re.Match[str]) -> Fields:
    """KRaft: [RaftManager id=1] Truncated to offset 254 from Fetch response from leader 101: the reason for the
    metadata log's "Truncating to offset 254" just before it."""
    return {"kind": "_raft_truncation", "topic": "__cluster_metadata", "partition": 0, "to_offset": int(m["offset"]),
            "reason": "raft_fetch", "leader": int(m["leader"])}


# --- recovery after a crash ---------------------------------------------------------------------------------------

@template(" logs from ", r"^(?:Recovering (?P<unclean>\d+) logs from (?P<dir>\S+) since no clean shutdown file was "
          r"found|Skipping recovery of (?P<clean>\d+) logs from (?P<cdir>\S+) since clean shutdown file was found)")
def recovery_start(m: re.Match[str]) -> Fields:
    """Recovering 56 logs from /data/kafka since no clean shutdown file was found (a crash: every log is
    checked) | Skipping recovery of 56 logs from /data/kafka since clean shutdown file was found."""
    clean = m["clean"] is not None
    return {"kind": "recovery_start", "clean_shutdown": clean, "logs": int(m["clean"] if clean else m["unclean"]),
            "dir": m["cdir"] if clean else m["dir"]}


@template("Recovering unflushed segment ", r"^\[LogLoader partition=" + _TP + r", dir=[^\]]+\] Recovering unflushed "
          r"segment (?P<segment>\d+)\. (?P<done>\d+)(?:/(?P<total>\d+))? recovered for ")
def segment_recovery(m: re.Match[str]) -> Fields:
    """[LogLoader partition=chaos-5, dir=/data/kafka] Recovering unflushed segment 0. 0/1 recovered for chaos-5.
    (3.9.2; 4.3.1 writes "0 recovered for"): a segment past the recovery point is read back record by record."""
    return {"kind": "recovery", **_partition(m), "segment": int(m["segment"]), "segments_done": int(m["done"]),
            "segments_to_recover": None if m["total"] is None else int(m["total"])}


@template("Completed load of Log(", r"^Completed load of Log\(dir=[^,]+, topicId=[^,]*, topic=(?P<topic>[^,]+), "
          r"partition=(?P<partition>\d+), highWatermark=(?P<hw>-?\d+), lastStableOffset=(?P<lso>-?\d+), "
          r"logStartOffset=(?P<start>-?\d+), logEndOffset=(?P<leo>-?\d+)\) with (?P<segments>\d+) segments")
def log_loaded(m: re.Match[str]) -> Fields:
    """Completed load of Log(dir=/data/kafka/chaos-5, topicId=.., topic=chaos, partition=5, highWatermark=0,
    lastStableOffset=0, logStartOffset=0, logEndOffset=23824) with 1 segments, ...: what a restarted broker kept."""
    return {"kind": "log_loaded", **_partition(m), "high_watermark": int(m["hw"]),
            "last_stable_offset": int(m["lso"]), "log_start_offset": int(m["start"]),
            "log_end_offset": int(m["leo"]), "segments": int(m["segments"])}


@template("Loading producer state till offset ", r"^\[(?:LogLoader|UnifiedLog) partition=" + _TP + r", dir=[^\]]+\] "
          r"Loading producer state till offset (?P<offset>-?\d+)")
def producer_state(m: re.Match[str]) -> Fields:
    """[LogLoader partition=chaos-5, dir=/data/kafka] Loading producer state till offset 23824 (with message format
    version 2, 3.9.2 only): the idempotence state is rebuilt up to the log's end."""
    return {"kind": "producer_state", **_partition(m), "to_offset": int(m["offset"])}


@template("Loading producer state from snapshot file ", r"^\[ProducerStateManager partition=" + _TP + r"\] ?Loading "
          r"producer state from snapshot file 'SnapshotFile\(offset=(?P<offset>-?\d+)")
def producer_snapshot(m: re.Match[str]) -> Fields:
    """[ProducerStateManager partition=chaos-5] Loading producer state from snapshot file
    'SnapshotFile(offset=14012, file=/data/kafka/chaos-5/00000000000000014012.snapshot)'. 3.5 writes no space
    after the bracket."""
    return {"kind": "producer_snapshot", **_partition(m), "snapshot_offset": int(m["offset"])}


# --- nodes and controllers ----------------------------------------------------------------------------------------

@template("Registered signal handlers for ", r"^Registered signal handlers for ")
def process_start(m: re.Match[str]) -> Fields:
    """Registered signal handlers for TERM, INT, HUP: kafka.Kafka's main logs it once per start of the server, so a
    restart after a kill or a power cut shows here (not the Log4jController line: in KRaft mode the storage
    formatter run before each start logs that one too)."""
    return {"kind": "process_start"}


@template(("] started", "Kafka Server started"), r"^(?:\[KafkaServer id=(?P<zk>\d+)\] started|"
          r"\[KafkaRaftServer nodeId=(?P<kraft>\d+)\] Kafka Server started)$")
def started(m: re.Match[str]) -> Fields:
    """[KafkaServer id=3] started (ZooKeeper mode) | [KafkaRaftServer nodeId=1] Kafka Server started (KRaft)."""
    return {"kind": "started", "node_id": int(m["zk"] or m["kraft"])}


@template("[KafkaServer id=", r"^\[KafkaServer id=(?P<id>\d+)\] (?P<phase>shutting down|shut down completed)$")
def shutdown(m: re.Match[str]) -> Fields:
    """[KafkaServer id=3] shutting down | shut down completed (ZooKeeper mode; a SIGKILL logs nothing)."""
    return {"kind": "shutdown", "node_id": int(m["id"]), "completed": m["phase"] == "shut down completed"}


@template("Transitioning from ", r"^\[BrokerLifecycleManager id=(?P<id>\d+)\] .*Transitioning from (?P<old>\w+) to "
          r"(?P<new>\w+)\.")
def broker_state(m: re.Match[str]) -> Fields:
    """KRaft: [BrokerLifecycleManager id=1] The broker has been unfenced. Transitioning from RECOVERY to RUNNING."""
    return {"kind": "broker_state", "node_id": int(m["id"]), "from_state": m["old"], "to_state": m["new"]}


@template("Session expired.", r"^\[ZooKeeperClient Kafka server\] Session expired\.$")
def zk_session_expired(m: re.Match[str]) -> Fields:
    """[ZooKeeperClient Kafka server] Session expired. (the broker's ZooKeeper session; it re-registers)"""
    return {"kind": "zk_session_expired"}


@template(("successfully elected as the controller", "Becoming the active controller"),
          r"^(?:\[Controller id=(?P<zk>\d+)\] \d+ successfully elected as the controller\. Epoch "
          r"incremented to (?P<zkepoch>\d+)|\[QuorumController id=(?P<kraft>\d+)\] Becoming the active controller at "
          r"epoch (?P<kepoch>\d+))")
def controller(m: re.Match[str]) -> Fields:
    """[Controller id=3] 3 successfully elected as the controller. Epoch incremented to 1 and epoch zk version is
    now 1 | [QuorumController id=101] Becoming the active controller at epoch 1, next write offset 1."""
    return {"kind": "controller", "controller": int(m["zk"] or m["kraft"]),
            "controller_epoch": int(m["zkepoch"] or m["kepoch"])}


@template("Fencing broker ", r"^\[QuorumController id=\d+\] Fencing broker (?P<b>\d+)(?: at epoch (?P<epoch>\d+))? "
          r"because (?P<why>.*?)\.?$")
def fenced(m: re.Match[str]) -> Fields:
    """KRaft: [QuorumController id=101] Fencing broker 2 because its session has timed out. (4.3.1: "Fencing
    broker 3 at epoch 22 because ..."): its partitions lose it as leader and from their ISRs."""
    return {"kind": "fenced", "broker": int(m["b"]), "broker_epoch": None if m["epoch"] is None else int(m["epoch"]),
            "reason": m["why"]}


@template(" to unfence has been granted", r"^\[QuorumController id=\d+\] The request from broker (?P<b>\d+) to unfence "
          r"has been granted")
def unfenced(m: re.Match[str]) -> Fields:
    """KRaft: [QuorumController id=101] The request from broker 2 to unfence has been granted because it has
    caught up with the offset of its register broker record 18."""
    return {"kind": "unfenced", "broker": int(m["b"])}


TEMPLATES: tuple[Template, ...] = (
    become_leader, become_follower, unclean_recovered, zk_election, kraft_unclean_election, leader_isr_shrink,
    controller_isr_shrink, isr_committed, truncation_reason, log_truncation, corruption_truncation,
    metadata_truncation, recovery_start, segment_recovery, log_loaded, producer_state, producer_snapshot,
    process_start, started, shutdown, broker_state, zk_session_expired, controller, fenced, unfenced)


def match(message: str) -> Fields | None:
    """The fields of the first template the message fits, or None (most lines are none of Kafka's business here)."""
    for t in TEMPLATES:
        fields = t.match(message)
        if fields is not None:
            return fields
    return None
