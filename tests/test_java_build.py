"""The Java workload program: built per Kafka version against that version's kafka-clients, its settings
checked by the Java client itself, and its process speaking the protocol (no cluster needed: a producer with
no broker to reach shows the start, the refusals, the stop and the harness's death)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4
from clusters.java_build import ensure_built
from workloads.java_client import check_config, java_command
from workloads.protocol import STOP, Completed, Hello, Invoked, Withdrawn, parse

VERSIONS = [DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4]
# a loopback port nothing listens on: the client is refused at once, no traffic leaves the machine
NO_BROKER = "127.0.0.1:9"


@pytest.mark.parametrize("version", VERSIONS)
def test_each_version_is_built_against_its_own_kafka_clients(version: str) -> None:
    built = ensure_built(version)
    assert (built / "classes" / "io" / "kchaos" / "workload" / "Main.class").is_file()
    jars = {p.name for p in (built / "libs").iterdir()}
    assert f"kafka-clients-{version}.jar" in jars
    assert not [j for j in jars if j.startswith("kafka-clients-") and j != f"kafka-clients-{version}.jar"]
    assert any(j.startswith("slf4j-simple-") for j in jars) and any(j.startswith("jackson-databind-") for j in jars)
    started = time.monotonic()
    assert ensure_built(version) == built  # cached: no Maven, no javac the second time
    assert time.monotonic() - started < 1
    cmd = java_command(version, "producer", "{}")
    assert cmd[0] == "java" and cmd[-3:] == ["io.kchaos.workload.Main", "producer", "{}"]
    assert str(built / "classes") in cmd[cmd.index("-cp") + 1]


def test_the_build_is_named_by_the_recipe_and_the_cli_builds_both(tmp_path: Path) -> None:
    result = subprocess.run([".venv/bin/python", "-m", "workloads.java_client"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(ensure_built(v)) for v in VERSIONS]


@pytest.mark.parametrize("version", VERSIONS)
def test_check_config_rejects_unknown_names_and_bad_values(version: str) -> None:
    unknown = check_config(version, "producer", {"linger.ms": 5, "queue.buffering.max.messages": 1000})
    assert unknown.unknown == ["queue.buffering.max.messages"]  # a librdkafka name: Java would ignore it
    bad = check_config(version, "producer", {"acks": "2"})
    assert bad.unknown == [] and bad.error is not None and "acks" in bad.error and "\n" not in bad.error
    # only KafkaProducer's constructor checks this one: a delivery time-out shorter than linger + request
    short = check_config(version, "producer", {"delivery.timeout.ms": 5000})
    assert short.error is not None and "delivery.timeout.ms" in short.error
    assert check_config(version, "consumer", {"isolation.level": "read_uncomitted"}).error is not None
    assert check_config(version, "consumer", {"fetch.min.bytes": 1}).unknown == []
    assert check_config(version, "consumer", {"linger.ms": 5}).unknown == ["linger.ms"]  # a producer's name


@pytest.mark.parametrize("version", VERSIONS)
def test_check_config_accepts_java_names_and_reports_defaults(version: str) -> None:
    java = check_config(version, "producer", {"linger.ms": 5, "batch.size": 65536, "compression.type": "lz4"})
    assert java.unknown == [] and java.error is None
    assert java.effective["linger.ms"] == "5"
    # Kafka's Java producer is idempotent with acks=all by default (since 3.0): what an application gets
    default = check_config(version, "producer", {})
    assert default.effective["enable.idempotence"] == "true"
    assert default.effective["acks"] in ("all", "-1")
    assert int(default.effective["delivery.timeout.ms"]) == 120000
    consumer = check_config(version, "consumer", {})
    assert consumer.effective["isolation.level"] == "read_uncommitted"
    assert consumer.effective["auto.offset.reset"] == "earliest"  # what the workload's consumers set


def test_acks_1_quietly_turns_idempotence_off_on_3_9() -> None:
    acks1 = check_config("3.9.2", "producer", {"acks": "1"})
    assert acks1.error is None and acks1.effective["acks"] == "1"
    assert acks1.effective["enable.idempotence"] == "false"
    # naming idempotence with acks=1 is a contradiction the client refuses
    both = check_config("3.9.2", "producer", {"acks": "1", "enable.idempotence": True})
    assert both.error is not None and "idempotence" in both.error.lower()


# ---------------------------------------------------------------------- the process, with no broker


def start(version: str, role: str, spec: dict) -> subprocess.Popen[bytes]:
    full = {"name": "p0", "origin_ns": time.monotonic_ns(), "verbose": False, **spec}
    return subprocess.Popen(java_command(version, role, json.dumps(full)), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def producer_spec(**config: object) -> dict:
    return {"bootstrap_servers": NO_BROKER, "topic": "t", "config": {"max.block.ms": 300, **config},
            "rate": 20, "message_bytes": 50, "flush_timeout_s": 2, "transactions": None}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_producer_says_who_it_is_refuses_what_never_entered_the_client_and_stops(version: str) -> None:
    proc = start(version, "producer", producer_spec(acks="1"))
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        # each send waits max.block.ms for metadata that never comes: stop once a few have been tried (on a
        # loaded machine the JVM may take seconds to send its first)
        head: list[bytes] = []
        deadline = time.monotonic() + 60
        while sum(line.startswith(b"S ") for line in head) < 3 and time.monotonic() < deadline:  # S: a send done
            line = proc.stdout.readline()
            if not line:
                break
            head.append(line)
        proc.stdin.write(STOP)  # and no EOF: that would say the harness died
        proc.stdin.flush()
        out = b"".join(head) + proc.stdout.read()
        proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert isinstance(parse(lines[0].encode()), Hello) and int(lines[0].split()[1]) == proc.pid
    tag, library, client_version, settings = lines[1].split(" ", 3)
    assert (tag, library, client_version) == ("K", "java", version)
    assert json.loads(settings)["enable.idempotence"] == "false" and json.loads(settings)["acks"] == "1"
    assert lines[-1] == "E"
    messages = [parse(line.encode()) for line in lines[2:-1]]
    announced = [s for m in messages if isinstance(m, Invoked) for s in range(m.first, m.first + m.count)]
    done = [m for m in messages if isinstance(m, Completed)]
    assert announced and announced == list(range(len(announced)))
    # no metadata within max.block.ms: refused before it entered the client, so definitely not written
    assert done and all(m.status == "fail" and m.error == "TimeoutException" for m in done)
    withdrawn = {s for m in messages if isinstance(m, Withdrawn) for s in range(m.first, m.first + m.count)}
    assert sorted([m.seq for m in done] + sorted(withdrawn)) == announced  # each seq sent once, or withdrawn


def test_a_producer_halts_when_the_harness_is_gone() -> None:
    proc = start(DEFAULT_KAFKA_VERSION, "producer", producer_spec())
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().startswith(b"H ")
    proc.stdin.close()  # EOF: the harness died
    assert proc.wait(timeout=10) == 3


def test_a_spec_that_is_not_json_is_one_line_and_exit_2() -> None:
    built = ensure_built(DEFAULT_KAFKA_VERSION)
    cmd = java_command(DEFAULT_KAFKA_VERSION, "producer", "{not json")
    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert result.returncode == 2 and built.exists()
    assert result.stderr.count("\n") == 1 and "the spec is not JSON" in result.stderr
    assert "Exception" not in result.stderr and "\tat " not in result.stderr
    assert os.path.basename(cmd[0]) == "java"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_transactional_producer_says_which_commit_error_policy_it_runs(version: str) -> None:
    """TxnPolicy is built with the rest; the K line (the client event's settings) names on_commit_error, said
    before initTransactions, which waits here for a broker that never answers. A policy it does not know is a
    bad spec."""
    txns = {"size": 3, "abort_probability": 0.0, "timeout_ms": 60000, "commit_timeout_s": 1, "partitions": 1,
            "transactional_id": "kchaos-t", "seed": 1, "on_commit_error": "abort"}
    proc = start(version, "producer", {**producer_spec(), "transactions": txns})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"H ")
        tag, library, _, settings = proc.stdout.readline().decode().split(" ", 3)
        assert (tag, library) == ("K", "java")
        assert json.loads(settings)["on_commit_error"] == "abort"
        assert json.loads(settings)["transactional.id"] == "kchaos-t"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    bad = start(version, "producer", {**producer_spec(), "transactions": {**txns, "on_commit_error": "later"}})
    try:
        assert bad.wait(timeout=30) == 2
        assert bad.stderr is not None and "on_commit_error must be replace, retry or abort, not later" in \
            bad.stderr.read().decode()
    finally:
        bad.kill()
