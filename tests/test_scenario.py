"""Scenario files: validation in one line, overrides, expectations, the shipped scenarios."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from catalogue.exits import HarnessError
from verdicts.expect import MET, NOT_JUDGED, UNMET, Assessment, assess
from harness import pipeline_role
from harness.scenario import load_scenario

SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("topic: {replication_factor: 3, min_insync_replicas: 4}", "min_insync_replicas=4 is above replication_factor=3"),
    ("cluster: {brokers: 2}", "replication_factor=3 is impossible with 2 brokers"),
    ("workload: {producers: {count: many}}", "workload.producers.count: Input should be a valid integer"),
    ("bogus: 1", "bogus: unknown key"),
    ("workload: {durration_s: 5}", "workload.durration_s: unknown key"),
    ("faults: [{kind: explode}]", "faults.0.kind: unknown fault 'explode'"),
    ("faults: [{kind: kill, target: everyone}]", "unknown target 'everyone'"),
    ("faults: [{kind: kill, interval_s: [5, 1]}]", "interval_s must be a positive [min, max]"),
    ("faults: [{kind: partition, duration_s: 10, then: {kind: kill, after_s: 8, duration_s: 5}}]",
     "outlasts the outer fault's duration_s = 10 s"),
    ("faults: [{kind: kill, duration_s: 10, then: {kind: client-crash}}]", "client-crash hits"),
    ("faults: [{kind: kill, duration_s: 10, then: {kind: explode}}]", "faults.0.then.kind: unknown fault 'explode'"),
    ("faults: [{kind: kill, duration_s: 10, then: {kind: kill, interval_s: 3}}]", "then.interval_s: unknown key"),
    ("faults: [{kind: partition, options: {mode: sideways}}]", "partition mode must be one of"),
    ("faults: [{kind: partition, duration_s: 20, then: {kind: kill, duration_s: 5}}]",
     "faults.0.then: kill nested in a partition in mode isolate restarts its victim while it is cut from the "
     "metadata quorum"),
    ("faults: [{kind: partition, options: {mode: zookeeper}, duration_s: 20, then: {kind: power-loss}}]",
     "faults.0.then: power-loss nested in a partition in mode zookeeper"),
    ("nightly: [etcd]", "nightly"),
    ("expect: {lost: lots}", "expect.lost must be a count or a comparison"),
    ("expect: {happiness: 1}", "cannot expect 'happiness'"),
    ("expect: {indeterminate: \">0\"}", "expect: cannot expect 'indeterminate': it is called 'unknown' now"),
    ("workload: {producers: {config: {acks: 2}}}", "acks must be 0, 1, all or -1"),
    ("workload: {transactions: {size: 5}, producers: {config: {acks: 1}}}",
     "workload.transactions needs workload.producers.config.acks=all"),
    ("workload: {transactions: {}, producers: {config: {enable.idempotence: false}}}",
     "workload.transactions needs enable.idempotence"),
    ("workload: {transactions: {}, producers: {config: {transactional.id: mine}}}",
     "transactional.id: the harness sets it itself"),
    ("workload: {transactions: {timeout_ms: 120000}}\ncluster: {broker_config: {transaction.max.timeout.ms: 60000}}",
     "above the brokers' transaction.max.timeout.ms=60000"),
    ("workload: {transactions: {abort_probability: 2}}", "workload.transactions.abort_probability"),
    ("workload: {transactions: {timeout_ms: 10000}, producers: {config: {message.timeout.ms: 30000}}}",
     "message.timeout.ms=30000 is above workload.transactions.timeout_ms=10000"),
    ("workload: {transactions: {}, producers: {config: {transaction.timeout.ms: 5000}}}",
     "workload.producers.config.transaction.timeout.ms: the harness sets it itself (to 60000 here)"),
    ("workload: {transactions: {sise: 2}}", "workload.transactions.sise: unknown key"),
    ("workload: {transactions: {on_commit_error: later}}",
     "workload.transactions.on_commit_error: Input should be 'replace', 'retry' or 'abort'"),
    ("workload: {pipeline: {on_commit_error: ignore}}", "workload.pipeline.on_commit_error: Input should be"),
    ("workload: {pipeline: {}, producers: {config: {transaction.timeout.ms: 5000}}}",
     "workload.producers.config.transaction.timeout.ms: the harness sets the pipeline's itself: set "
     "workload.pipeline.timeout_ms"),
    ("workload: {pipeline: {}, producers: {config: {message.timeout.ms: 90000}}}",
     "message.timeout.ms=90000 is above the pipeline's transaction.timeout.ms=60000"),
    ("workload: {pipeline: {timeout_ms: 5000}, producers: {config: {socket.timeout.ms: 10000}}}",
     "workload.producers.config: librdkafka refuses it: Failed to create producer: `socket.timeout.ms` must be set "
     "<= `transaction.timeout.ms` + 100"),
    ("workload: {pipeline: {timeout_ms: 120000}}\ncluster: {broker_config: {transaction.max.timeout.ms: 60000}}",
     "workload.pipeline.timeout_ms=120000 is above the brokers' transaction.max.timeout.ms=60000"),
    ("workload: {client: java, transactions: {}, producers: {config: {socket.timeout.ms: 2000}}}",
     "workload.producers.config.socket.timeout.ms: Kafka 3.9.2's Java producer has no such setting (a librdkafka "
     "setting"),
    ("topic: {name: t}\nworkload: {pipeline: {output_topic: t}}", "output_topic must differ from topic.name"),
    ("workload: {consumers: {isolation: read_committed, config: {isolation.level: read_committed}}}",
     "set isolation or config.isolation.level, not both"),
    ("workload: {consumers: {isolation: serializable}}", "workload.consumers.isolation"),
    ("faults: [{kind: client-crash, target: pipeline}]", "faults.0: target pipeline, but the workload has no pipeline"),
    ("faults: [{kind: pause, target: txn-coordinator}]",
     "faults.0: target txn-coordinator, but the workload has no transactions"),
    ("workload: {consumers: {count: 0}}\nfaults: [{kind: pause, target: group-coordinator}]",
     "faults.0: target group-coordinator, but the workload has no consumer group (no consumers, no pipeline)"),
    ("workload: {consumers: {count: 0}}\nfaults: [{kind: partition, duration_s: 20, then: {kind: pause, "
     "target: group-coordinator}}]", "faults.0.then: target group-coordinator, but the workload has no consumer group"),
    ("workload: {pipeline: {config: {session.timeout.msec: 6000}}}", "workload.pipeline.config.session.timeout.msec"),
    ("workload: {client: jvm}", "workload.client: Input should be 'librdkafka' or 'java'"),
    ("workload: {client: java, producers: {config: {lingr.ms: 5}}}",
     "workload.producers.config.lingr.ms: Kafka 3.9.2's Java producer has no such setting (did you mean linger.ms?)"),
    ("workload: {client: java, producers: {config: {queue.buffering.max.messages: 5}}}",
     "has no such setting (a librdkafka setting: workload.producers.librdkafka_config holds what only librdkafka"),
    ("workload: {producers: {client: java, java_config: {value.serializer: x}}}",
     "workload.producers.java_config.value.serializer: the harness sets it itself"),
    ("workload: {consumers: {client: java, config: {group.id: g}}}",
     "workload.consumers.config.group.id: the harness sets it itself"),
    ("workload: {client: java, consumers: {client: librdkafka, config: {fetch.max.wait.ms: 10}}}",
     "workload.consumers.config.fetch.max.wait.ms: librdkafka has no such setting"),
    ("workload: {producers: {librdkafka_config: {buffer.memory: 5}}}", "librdkafka has no such setting"),
    ("workload: {client: java, producers: {config: {acks: 1, enable.idempotence: true}}}",
     "workload.producers: Kafka 3.9.2's Java producer refuses these settings: "),
    ("workload: {client: java, consumers: {java_config: {max.poll.records: 0}}}",
     "workload.consumers: Kafka 3.9.2's Java consumer refuses these settings: Invalid value 0 for configuration "
     "max.poll.records"),
    ("faults: [{kind: delay-requests, target: txn-coordinator, options: {apis: EndTx}}]",
     "faults.0: delay-requests apis: no Kafka API named 'EndTx'"),
    ("faults: [{kind: delay-requests, target: controller}]", "target must be one of partition-leader"),
    ("cluster: {watch_requests: ShareAck}", "cluster.watch_requests: no Kafka API named 'ShareAck'"),
    ("faults: [{kind: delay-requests, options: {roles: admins}}]", "roles: must be a list of producer"),
    ("name: [unclosed", "not valid YAML"),
    ("- a list", "a scenario is a mapping"),
])
def test_bad_scenarios_get_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HarnessError) as e:
        load_scenario(write(tmp_path, text))
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("workload", ["{}", "{consumers: {count: 0}, pipeline: {}}"], ids=["consumers", "pipeline"])
def test_a_group_coordinator_target_needs_a_consumer_group_of_either_role(tmp_path: Path, workload: str) -> None:
    text = (f"workload: {workload}\nfaults: [{{kind: pause, target: group-coordinator}},\n"
            "         {kind: delay-requests, target: group-coordinator, options: {apis: OffsetCommit}}]")
    assert [f.target for f in load_scenario(write(tmp_path, text)).faults] == ["group-coordinator"] * 2


def test_a_request_level_fault_puts_the_request_path_in_the_cluster(tmp_path: Path) -> None:
    text = ("faults: [{kind: delay-requests, target: partition-leader, duration_s: 10,\n"
            "          options: {apis: \"EndTxn,TxnOffsetCommit\", hold_s: 6, roles: \"producer,pipeline\"}}]")
    assert load_scenario(write(tmp_path, text)).cluster_spec().request_path
    assert not load_scenario(write(tmp_path, "faults: [{kind: kill}]")).cluster_spec().request_path
    nested = "faults: [{kind: partition, duration_s: 20, then: {kind: delay-requests, target: partition-leader}}]"
    assert load_scenario(write(tmp_path, nested)).cluster_spec().request_path
    watched = "cluster: {watch_requests: \"ShareAcknowledge, ShareFetch\"}"
    assert load_scenario(write(tmp_path, watched)).cluster_spec().request_path


def test_a_restart_inside_a_cut_that_keeps_the_quorum_reachable_is_accepted(tmp_path: Path) -> None:
    text = ("faults: [{kind: partition, options: {mode: brokers}, duration_s: 20, then: {kind: kill}},\n"
            "         {kind: partition, duration_s: 20, then: {kind: kill, target: random-broker}}]")
    assert [f.then.kind for f in load_scenario(write(tmp_path, text)).faults] == ["kill", "kill"]


def test_overrides_reach_nested_keys_config_maps_and_list_items(tmp_path: Path) -> None:
    path = write(tmp_path, "faults: [{kind: kill}]")
    s = load_scenario(path, ["workload.producers.config.enable.idempotence=true", "topic.partitions=3",
                             "faults.0.duration_s=7", "cluster.broker_config.log.flush.interval.messages=1"],
                      seed=99)
    assert s.workload.producers.config == {"enable.idempotence": True}
    assert s.topic.partitions == 3
    assert s.faults[0].duration_s == 7
    assert s.cluster_spec().broker_config == {"log.flush.interval.messages": "1"}
    assert s.seed == 99
    assert s.name == "s"


def test_commit_error_policies_and_short_client_time_outs_reach_both_clients(tmp_path: Path) -> None:
    """on_commit_error for the producers and the pipeline (default replace, shown in the resolved scenario), and
    the short time-outs a delayed EndTxn needs: socket.timeout.ms (librdkafka only), request.timeout.ms and
    transaction.timeout.ms (workload.transactions.timeout_ms, workload.pipeline.timeout_ms) for both clients."""
    s = load_scenario(write(tmp_path, "workload: {transactions: {}, pipeline: {}}"))
    assert s.workload.transactions.on_commit_error == "replace" and s.workload.pipeline.on_commit_error == "replace"
    assert s.resolved()["workload"]["transactions"]["on_commit_error"] == "replace"
    assert s.resolved()["workload"]["pipeline"]["on_commit_error"] == "replace"
    for client in ("librdkafka", "java"):
        s = load_scenario(write(tmp_path, f"""
workload:
  client: {client}
  transactions: {{timeout_ms: 5000, commit_timeout_s: 2, on_commit_error: abort}}
  pipeline: {{timeout_ms: 6000, commit_timeout_s: 3, on_commit_error: retry}}
  producers:
    config: {{request.timeout.ms: 2000}}
    librdkafka_config: {{socket.timeout.ms: 2000}}
"""))
        w = s.workload
        assert (w.transactions.on_commit_error, w.pipeline.on_commit_error) == ("abort", "retry")
        assert (pipeline_role.timeout_ms(w), pipeline_role.commit_timeout_s(w)) == (6000, 3)
        assert w.role("producers").config["request.timeout.ms"] == 2000
    s = load_scenario(write(tmp_path,
                            "workload: {transactions: {timeout_ms: 7000, commit_timeout_s: 4}, pipeline: {}}"))
    # the producers'
    assert (pipeline_role.timeout_ms(s.workload), pipeline_role.commit_timeout_s(s.workload)) == (7000, 4)


def test_each_role_runs_its_client_with_the_shared_config_and_its_clients_own(tmp_path: Path) -> None:
    text = ("workload:\n  client: java\n  producers:\n    config: {acks: all}\n"
            "    librdkafka_config: {queue.buffering.max.messages: 10}\n    java_config: {buffer.memory: 1048576}\n"
            "  consumers: {client: librdkafka, librdkafka_config: {fetch.wait.max.ms: 10}, java_config: {x.y: 1}}\n")
    w = load_scenario(write(tmp_path, text)).workload
    assert (w.role("producers").client, w.role("consumers").client) == ("java", "librdkafka")
    assert w.role("producers").config == {"acks": "all", "buffer.memory": 1048576}
    assert w.role("consumers").config == {"fetch.wait.max.ms": 10}
    w = load_scenario(write(tmp_path, text), ["workload.producers.client=librdkafka"]).workload
    assert w.role("producers").config == {"acks": "all", "queue.buffering.max.messages": 10}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_runs_on_the_java_client(path: Path) -> None:
    """Checked by the Java client itself (names and values): nothing in the catalog is librdkafka's alone outside
    librdkafka_config. One release (the default's): each check is a JVM, and the catalog on 4.x is loaded by
    tests/test_cluster_spec.py."""
    scenario = load_scenario(path, ["workload.client=java"])
    assert scenario.workload.role("producers").client == "java"


def test_bad_override_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="faults.3 is not an existing list item"):
        load_scenario(write(tmp_path, "faults: []"), ["faults.3.duration_s=1"])
    with pytest.raises(HarnessError, match="expected key=value"):
        load_scenario(write(tmp_path, ""), ["nonsense"])


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenarios_are_valid(path: Path) -> None:
    s = load_scenario(path)
    assert s.name == path.stem
    assert s.expect


def test_expectations() -> None:
    results = {"valid": False, "counts": {"lost": 3, "duplicated": 0}}
    assert assess({"lost": ">0", "duplicated": 0}, results) == Assessment(MET)
    assert assess({"lost": 0}, results) == Assessment(UNMET, unmet=["lost is 3, expected 0"])
    assert assess({"lost": "<=2"}, results).unmet == ["lost is 3, expected <=2"]
    assert assess({"valid": True}, results).unmet == ["valid is false, expected true"]
    assert assess(None, results).unmet == ["the verdict is not valid"]
    assert assess(None, {"valid": True, "counts": {}}) == Assessment(MET)
    assert [assess(e, results).exit_code for e in ({"lost": 3}, {"lost": 2})] == [0, 1]


def test_a_run_directorys_expectation_under_an_old_name_is_judged_under_the_new_one() -> None:
    """A scenario.yaml written into a run directory before ``indeterminate`` became ``unknown`` is judged on the
    count ``unknown`` (a scenario file naming ``indeterminate`` is refused: test_bad_scenarios_get_one_line)."""
    results = {"valid": True, "counts": {"lost": 0, "unknown": 7}}
    assert assess({"lost": 0, "indeterminate": ">0"}, results) == Assessment(MET)
    assert assess({"indeterminate": 0}, results).unmet == ["unknown is 7, expected 0"]


def test_an_expectation_per_client_is_the_one_of_the_client_that_ran_the_role() -> None:
    """Auto-commit skips records under librdkafka and re-reads them under the Java client (measured): a file
    states both, and each anomaly picks by the client of its own role."""
    results = {"valid": True, "counts": {"consumer_skipped": 0, "consumer_redelivered": 900, "lost": 0}}
    expect = {"consumer_skipped": {"librdkafka": ">0", "java": 0}, "consumer_redelivered": {"java": ">0"},
              "lost": {"java": 0}}
    java_consumers = {"workload": {"client": "librdkafka", "consumers": {"client": "java"}}}
    assert assess(expect, results, java_consumers) == Assessment(MET)
    assert assess(expect, results, {"workload": {"client": "java"}}) == Assessment(MET)
    assert assess(expect, results, {"workload": {}}).unmet == ["consumer_skipped is 0, expected >0"]
    assert assess(expect, results, None).unmet == ["consumer_skipped is 0, expected >0"]  # librdkafka unless said


def test_an_expectation_per_release_is_the_first_one_the_cluster_meets() -> None:
    """Hanging transactions before partition verification (3.6) and none after: one file states both."""
    expect = {"hanging_transaction": {"kafka<3.6": ">0", "kafka>=3.6": 0}, "lost": 0}
    results = {"valid": False, "counts": {"hanging_transaction": 2, "lost": 0}}
    on = {"cluster": {"kafka_version": "3.5.2"}}
    assert assess(expect, results, on) == Assessment(MET)
    on = {"cluster": {"kafka_version": "3.10.0"}}  # by number: 3.10 is after 3.6
    assert assess(expect, results, on).unmet == ["hanging_transaction is 2, expected 0"]
    assert assess({"lost": {"kafka>=4": ">0"}}, results, on) == Assessment(MET)  # no condition met: none applies


@pytest.mark.parametrize("text, message", [
    ("expect: {lost: {jvm: 0}}", "expect.lost.jvm: an expectation per client names librdkafka or java"),
    ("expect: {lost: {kafka=>3.6: 0}}", "expect.lost.kafka=>3.6: an expectation per client names librdkafka or "
                                         "java, one per release a condition like kafka<3.6"),
    ("expect: {lost: {java: lots}}", "expect.lost.java must be a count or a comparison"),
])
def test_bad_expectations_per_client_get_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(HarnessError, match=message):
        load_scenario(write(tmp_path, text))


def incomplete(lost: int, unverifiable: int, valid: bool = True) -> dict:
    """Results whose final read of one partition stopped short of the high watermark."""
    return {"valid": valid, "final_read_complete": False, "incomplete_partitions": [["t", 0]], "cut_short": False,
            "counts": {"lost": lost, "lost_unverifiable": unverifiable, "duplicated": 0, "acked": 10}}


def test_an_expectation_the_unverified_messages_could_change_is_not_judged() -> None:
    # 10 acks, the read-back stopped at offset 3: 7 acknowledged messages could not be verified
    open_ = assess({"lost": 0}, incomplete(0, 7))
    assert open_.outcome == NOT_JUDGED and open_.exit_code == 2
    assert open_.not_judged == ["lost: 0 not judged: the final read of 1 partition did not reach the high "
                                "watermark, 7 acknowledged messages not found there; lost could be 0..7"]
    assert assess(None, incomplete(0, 7)).outcome == NOT_JUDGED  # valid, but only as far as it could see
    assert assess({"duplicated": 0}, incomplete(0, 0)).outcome == NOT_JUDGED  # unread messages may repeat


def test_an_expectation_the_unverified_messages_cannot_change_is_judged() -> None:
    assert assess({"lost": ">0"}, incomplete(5, 7)).outcome == MET  # 5..12: more than none whatever they are
    assert assess({"lost": "<=20"}, incomplete(5, 7)).outcome == MET
    assert assess({"lost": 0}, incomplete(5, 7)).outcome == UNMET  # at least 5
    assert assess({"lost": 0}, incomplete(0, 0)).outcome == MET  # every ack was found: nothing unverified
    assert assess({"acked": 10}, incomplete(0, 7)).outcome == MET  # does not depend on the read-back
    assert assess({"valid": False}, incomplete(5, 7, valid=False)).outcome == MET
    both = assess({"lost": 0, "duplicated": 0}, incomplete(5, 7))
    assert both.outcome == UNMET and both.exit_code == 1 and len(both.not_judged) == 1


def test_a_run_that_proved_nothing_is_not_judged() -> None:
    scenario = {"faults": [{"kind": "partition"}], "expect": {"lost": ">0"}}
    done = {"valid": False, "final_read_complete": True, "cut_short": False, "counts": {"lost": 4},
            "faults": {"planned": 1, "applied": 1, "skipped": 0, "skip_reasons": []}}
    assert assess(scenario["expect"], done, scenario).outcome == MET
    never = {**done, "faults": {"planned": 1, "applied": 0, "skipped": 3,
                                "skip_reasons": ["no partition-leader to hit right now"]}}
    assessment = assess(scenario["expect"], never, scenario)
    assert assessment.outcome == NOT_JUDGED and assessment.exit_code == 2
    assert assessment.not_judged == ["none of the scenario's 1 fault took effect (no partition-leader to hit "
                                     "right now)"]
    assert assess(None, {**done, "valid": True, "cut_short": True}).outcome == NOT_JUDGED
    assert assess(None, {**done, "valid": True}, {"faults": []}).outcome == MET  # a run without faults


def test_cli_refuses_a_bad_scenario_with_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, "topic: {replication_factor: 3, min_insync_replicas: 4}")
    result = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(path), "--out", str(tmp_path / "runs")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "min_insync_replicas=4" in result.stderr
    assert not (tmp_path / "runs").exists()
