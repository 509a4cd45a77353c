"""client-crash: choosing a client, killing and restarting it, the scenario's targets, and (on a real
cluster) what a killed producer or consumer leaves in the history."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path

import pytest

from catalogue.exits import HarnessError
from checkers.reference import check_run
from clusters.cluster import Cluster
from faults.base import FaultError
from faults.client_crash import ClientCrashFault
from faults.registry import FAULTS
from faults.schedule import FaultPlan, Nemesis
from faults.targets import CLIENT_TARGETS, TARGETS, choose_clients
from harness.scenario import load_scenario
from rundir.layout import RunDir
from workloads.client import Client, Library
from workloads.consumer import ConsumerClient, read_back, record_assignment
from workloads.history import History, RunClock
from workloads.observer import record_committed
from workloads.producer import ProducerClient
from helpers import jsonl, new_topic
from waiting import wait_for


class FakeClient:
    """A Client with no process: kill and restart flip ``running``, freeze and thaw ``frozen``; ``stubborn``
    survives SIGKILL and SIGSTOP."""

    def __init__(self, name: str, role: str, stubborn: bool = False) -> None:
        self.base = name
        self.name = name
        self.role = role
        self.running = True
        self.pid: int | None = 100
        self.stubborn = stubborn
        self.restarts = 0
        self.frozen = False

    def kill(self) -> None:
        self.running = self.stubborn

    def restart(self) -> None:
        self.restarts += 1
        self.name = f"{self.base}.{self.restarts}"
        self.running = True

    def freeze(self) -> None:
        self.frozen = not self.stubborn

    def thaw(self) -> None:
        self.frozen = False


def clients() -> list[FakeClient]:
    return [FakeClient("c0", "consumer"), FakeClient("p0", "producer"), FakeClient("p1", "producer")]


def test_fake_clients_are_clients() -> None:
    assert isinstance(FakeClient("p0", "producer"), Client)
    assert set(CLIENT_TARGETS) <= set(TARGETS)


def test_client_targets_pick_one_running_client_of_the_role() -> None:
    cs = clients()
    rng = random.Random(1)
    assert {choose_clients(cs, "producer", rng)[0].role for _ in range(20)} == {"producer"}
    assert [c.name for c in choose_clients(cs, "consumer", rng)] == ["c0"]
    assert {choose_clients(cs, "random-client", rng)[0].name for _ in range(50)} == {"c0", "p0", "p1"}
    cs[0].running = False
    assert choose_clients(cs, "consumer", rng) == []  # nothing to hit right now: the schedule skips it
    with pytest.raises(ValueError, match="unknown client target"):
        choose_clients(cs, "controller", rng)


def test_the_same_seed_hits_the_same_clients() -> None:
    picks = [[c.name for _ in range(10) for c in choose_clients(clients(), "random-client", random.Random(seed))]
             for seed in (7, 7)]
    assert picks[0] == picks[1]


def test_client_crash_kills_restarts_and_checks_both() -> None:
    cs = clients()
    fault = ClientCrashFault(None, "t", random.Random(3), clients=cs)  # type: ignore[arg-type]
    [victim] = fault.choose("producer")
    detail = fault.apply([victim])
    assert detail == f"SIGKILL {victim.base} (pid 100)" and not victim.running
    fault.heal([victim])
    assert victim.running and victim.name == f"{victim.base}.1"

    stubborn = FakeClient("p9", "producer", stubborn=True)
    with pytest.raises(FaultError, match="did not take effect: p9 still running"):
        fault.apply([stubborn])


def test_targets_match_the_sort_of_fault() -> None:
    FAULTS["client-crash"].check_target("consumer")
    FAULTS["kill"].check_target("partition-leader")
    with pytest.raises(FaultError, match="client-crash hits a workload client"):
        FAULTS["client-crash"].check_target("partition-leader")
    with pytest.raises(FaultError, match="kill hits a node"):
        FAULTS["kill"].check_target("producer")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("faults: [{kind: client-crash, target: controller}]",
     "faults.0: client-crash hits a workload client: target must be one of producer, consumer, random-client"),
    ("faults: [{kind: pause, target: consumer}]", "faults.0: pause hits a node: target must be one of"),
    ("workload: {consumers: {processing_ms: -1}}", "workload.consumers.processing_ms"),
])
def test_scenarios_with_the_wrong_target_get_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HarnessError) as e:
        load_scenario(write(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_client_faults_default_to_any_client_and_consumers_keep_their_config(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, "faults: [{kind: client-crash, duration_s: 2}, {kind: kill}]"),
                      ["workload.consumers.config.auto.commit.interval.ms=200",
                       "workload.consumers.processing_ms=250", "workload.consumers.commit=manual"])
    assert [f.target for f in s.faults] == ["random-client", "partition-leader"]
    assert s.workload.consumers.config == {"auto.commit.interval.ms": 200}
    assert s.workload.consumers.processing_ms == 250 and s.workload.consumers.commit == "manual"
    assert s.resolved()["workload"]["consumers"]["processing_ms"] == 250


# ---------------------------------------------------------------------- real processes on a real cluster




@pytest.mark.cluster
def test_a_producer_killed_mid_load_leaves_info_for_its_in_flight_seqs(cluster: Cluster, tmp_path: Path) -> None:
    topic = new_topic(cluster, "cc")
    clock = RunClock()
    history = History(RunDir(tmp_path), clock)
    # linger.ms=50: a few hundred messages are always in flight when the kill comes
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "1", "linger.ms": 50},
                              history.sends, clock, rate=3000)
    now = clock.seconds()
    nemesis = Nemesis(cluster, topic, [FaultPlan("client-crash", "producer", (100, 100), 3)], history, seed=1,
                      warmup_s=now + 4, load_s=now + 30, clients=[producer])
    try:
        producer.start()
        producer.wait_started()
        nemesis.start()
        wait_for(lambda: producer.name == "p0.1" and producer.running, 60, "the producer was killed and restarted")
        nemesis.stop()
        assert nemesis.error is None
        wait_for(lambda: producer.counts.ok > 20_000, 60, "the restarted producer gets acks")
        producer.stop()
    finally:
        nemesis.stop()
        producer.abort()
    read_back(cluster.bootstrap_servers, topic, 3, history)
    history.close()

    sends = jsonl(tmp_path / "history" / "sends.jsonl")
    killed = [s for s in sends if s["producer"] == "p0" and s["error"] == "producer process killed"]
    assert killed and all(s["status"] == "unknown" for s in killed)
    assert not [s for s in sends if s["status"] == "fail"]
    assert any(s["producer"] == "p0.1" and s["status"] == "ok" for s in sends)
    for name in ("p0", "p0.1"):  # every seq of each process has exactly one line
        seqs = sorted(s["seq"] for s in sends if s["producer"] == name)
        assert seqs == list(range(len(seqs)))
    faults = [e for e in jsonl(tmp_path / "history" / "events.jsonl") if e["kind"] == "fault"]
    assert [(e["phase"], e["fault"], e["targets"]) for e in faults] == [("start", "client-crash", ["p0"]),
                                                                        ("heal", "client-crash", ["p0"])]
    results = check_run(tmp_path)
    counts = results["counts"]
    assert counts["unexpected"] == 0 and counts["failed"] == 0 and counts["lost"] == 0
    assert counts["unknown"] >= len(killed) and results["final_read_complete"]


@pytest.mark.cluster
@pytest.mark.parametrize("client", ["librdkafka", "java"])
@pytest.mark.parametrize("commit", ["auto", "manual"])
def test_a_consumer_killed_while_processing_skips_or_rereads_its_batch(cluster: Cluster, tmp_path: Path,
                                                                       commit: str, client: Library) -> None:
    """Killed half-way through processing a batch. Manual commit: nothing of it was committed, so the
    restarted consumer processes its processed half again (redelivery), skips nothing, and the group's
    committed offsets end at the partitions' ends. Auto commit differs by client: librdkafka's timer has
    already committed the whole polled batch (its unprocessed half is skipped); Kafka's Java consumer
    commits on its timer only inside poll(), and its position passes a batch only when poll() returns the
    next one, so it re-reads instead."""
    topic = new_topic(cluster, "cc")
    group = f"g-{uuid.uuid4().hex[:6]}"
    clock = RunClock()
    history = History(RunDir(tmp_path), clock)
    version = cluster.spec.kafka_version
    producer = ProducerClient("p0", cluster.bootstrap_servers, topic, {"acks": "all"}, history.sends, clock,
                              rate=100)
    # session.timeout.ms: the group gives the dead consumer's partitions away within seconds
    consumer = ConsumerClient("c0", cluster.bootstrap_servers, topic, group, commit,  # type: ignore[arg-type]
                              {"auto.commit.interval.ms": 200, "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 1000}, history.reads, clock, processing_ms=3000,
                              client=client, kafka_version=version)
    consumer.on_assignment = lambda name, change: record_assignment(history, name, group, topic, change)
    crash = ClientCrashFault(cluster, topic, random.Random(1), clients=[consumer])
    try:
        for process in (consumer, producer):
            process.start()
            process.wait_started()
        assert consumer.identity is not None and consumer.identity.library == client
        assert consumer.identity.settings["enable.auto.commit"] == str(commit == "auto").lower()
        wait_for(lambda: producer.counts.ok >= 200, 60, "the producer's writes are acknowledged")
        wait_for(lambda: consumer.batches_done >= 1, 90, "a first batch is processed")
        # a batch of 10 records or more is processed in 10 slices (a poll may return one record: one slice)
        wait_for(lambda: consumer.processing and consumer.last_polled >= 10, 60, "a batch of 10 or more is polled")
        polled, before = time.monotonic(), consumer.count
        wait_for(lambda: consumer.count > before, 2.5, "a first slice of the batch is processed")
        # a third of the way into its 3 s: auto commit's 200 ms timer has had time to commit the polled batch
        wait_for(lambda: time.monotonic() - polled > 1.0, 2.5, "a second into the batch")
        assert consumer.processing, "the kill must land inside the batch"
        crash.apply([consumer])
        cut_short = consumer.count - before
        crash.heal([consumer])
        assert consumer.name == "c0.1" and consumer.running
        # its counters carry over the killed process's (whose batch counts as done): wait for records of its own
        after = consumer.count
        wait_for(lambda: consumer.count > after, 90, "the restarted consumer processes records")
        producer.stop()
        idle = [time.monotonic(), consumer.batches_polled]

        def caught_up() -> bool:
            if consumer.batches_polled != idle[1]:
                idle[:] = [time.monotonic(), consumer.batches_polled]
            return time.monotonic() - idle[0] > 4 and not consumer.processing

        wait_for(caught_up, 120, "the consumer reads everything")
        consumer.stop()
        record_committed(cluster, group, topic, 3, history)
    finally:
        producer.abort()
        consumer.abort()
    assert not consumer.failures
    assert read_back(cluster.bootstrap_servers, topic, 3, history, client=client, kafka_version=version)
    history.close()

    assert cut_short > 0
    results = check_run(tmp_path)
    counts = results["counts"]
    assert counts["unexpected"] == 0 and counts["lost"] == 0 and results["final_read_complete"]
    # each process read its partitions in one assignment, in order: the crash started a new process, no rebalance
    # moved a partition within one, so nothing of its own reads was skipped or read again
    assert counts["poll_skipped"] == counts["poll_nonmonotonic"] == 0
    held: dict[tuple[str, int], set[int]] = {}  # (process, assignment number) -> its partitions from then on
    for e in jsonl(tmp_path / "history" / "events.jsonl"):
        if e["kind"] == "assignment":
            before = held.get((e["process"], e["assignment"] - 1), set())
            held[(e["process"], e["assignment"])] = (before | set(e["partitions"]) if e["change"] == "assigned"
                                                     else before - set(e["partitions"]))
    assert {process for process, _ in held} == {"c0", "c0.1"}
    reads = [r for r in jsonl(tmp_path / "history" / "reads.jsonl") if r["phase"] == "live"]
    assert all(r["partition"] in held[(r["consumer"], r["assignment"])] for r in reads)
    if commit == "auto" and client == "librdkafka":
        assert counts["consumer_skipped"] > 0
        return
    assert counts["consumer_skipped"] == 0
    assert counts["consumer_redelivered"] >= cut_short
    live = [r for r in jsonl(tmp_path / "history" / "reads.jsonl") if r["phase"] == "live"]
    assert {r["consumer"] for r in live} == {"c0", "c0.1"} and all(r["group"] == group for r in live)
    events = jsonl(tmp_path / "history" / "events.jsonl")
    committed = {e["partition"]: e["offset"] for e in events if e["kind"] == "committed"}
    assert committed == {e["partition"]: e["high_watermark"] for e in events if e["kind"] == "final-read"}


def test_client_pause_freezes_and_thaws_and_says_when_it_did_not() -> None:
    fault = FAULTS["client-pause"](None, "t", random.Random(1), clients=clients())  # type: ignore[arg-type]
    [consumer] = fault.choose("consumer")
    assert fault.apply([consumer]) == "SIGSTOP c0 (pid 100)" and consumer.frozen  # type: ignore[attr-defined]
    fault.heal([consumer])
    assert not consumer.frozen and consumer.name == "c0"  # type: ignore[attr-defined]  # the same process goes on
    with pytest.raises(FaultError, match="client-pause did not take effect: c9 not stopped"):
        fault.apply([FakeClient("c9", "consumer", stubborn=True)])  # type: ignore[list-item]


def test_a_frozen_process_is_stopped_in_proc_until_thawed(tmp_path: Path) -> None:
    """freeze and thaw on a real consumer process (its Kafka client needs no broker to start)."""
    history = History(RunDir(tmp_path), RunClock())
    consumer = ConsumerClient("c0", "nowhere:9092", "t", "g", "manual", {}, history.reads, history.clock)
    try:
        consumer.start()
        consumer.wait_started()
        fault = FAULTS["client-pause"](None, "t", random.Random(1), clients=[consumer])  # type: ignore[arg-type]
        fault.apply([consumer])
        assert consumer.frozen and consumer.running
        fault.heal([consumer])
        assert not consumer.frozen and consumer.running
    finally:
        consumer.abort()
        history.close()
