"""The command line: every bad input is one line and exit 2, before any container; --version; --help.

Kafka setting typos are caught offline: client settings by librdkafka at
construction, broker and topic settings against the names read from the
scenario's Kafka version's own jars (cached by `make setup`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import docker
import pytest
import yaml

from clusters import config_names as names_module
from clusters.config import broker_defaults, controller_defaults
from clusters.config_names import config_names
from clusters.errors import ClusterError
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, NEWEST_KAFKA_4
from clusters.spec import ClusterSpec
from harness import cli
from harness.scenario import load_scenario

KCHAOS = Path(sys.executable).parent / "kchaos"
SCENARIOS = sorted(Path("scenarios").glob("*.yaml"))
VALID = Path("scenarios/acks1-leader-kill.yaml")


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input must fail during validation: starting a run, a cluster or Docker fails the test."""
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("bad input reached the point of starting a cluster")
    monkeypatch.setattr("harness.commands.run_scenario", refuse)
    monkeypatch.setattr("harness.cluster_cmd.Cluster.start", refuse)
    monkeypatch.setattr(docker, "from_env", refuse)


def kchaos(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI's entry point in this process: (exit code, stdout, stderr)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse: --version, --help, usage errors
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_exit_2(code: int, err: str, fragment: str) -> None:
    assert "Traceback" not in err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("kchaos: "), err
    assert fragment in err


# each: files to write under tmp_path (name -> bytes), the command line ({tmp} is tmp_path), what stderr says
BAD_INPUTS: dict[str, tuple[dict[str, bytes], list[str], str]] = {
    "missing scenario": ({}, ["run", "{tmp}/nope.yaml"], "no such scenario file"),
    "directory as scenario": ({}, ["run", "{tmp}"], "a directory, not a scenario file"),
    "unreadable scenario": ({"f": b""}, ["run", "{tmp}/f/s.yaml"], "cannot read the scenario file"),
    "non-UTF-8 scenario": ({"s.yaml": b"name: caf\xe9\n"}, ["run", "{tmp}/s.yaml"], "not UTF-8 text (byte 0xe9"),
    "non-YAML scenario": ({"s.yaml": b"name: [unclosed\n"}, ["run", "{tmp}/s.yaml"], "not valid YAML"),
    "control character": ({"s.yaml": b"name: a\x01b\n"}, ["run", "{tmp}/s.yaml"], "not valid YAML"),
    "non-mapping scenario": ({"s.yaml": b"- a\n- b\n"}, ["run", "{tmp}/s.yaml"], "a scenario is a mapping"),
    "unknown key": ({"s.yaml": b"workload: {durration_s: 5}\n"}, ["run", "{tmp}/s.yaml"],
                    "workload.durration_s: unknown key"),
    "min.insync above RF": ({"s.yaml": b"topic: {replication_factor: 3, min_insync_replicas: 4}\n"},
                            ["run", "{tmp}/s.yaml"], "min_insync_replicas=4 is above replication_factor=3"),
    "producer setting typo": ({}, ["run", str(VALID), "--set", "workload.producers.config.enable.idempotance=true"],
                              "workload.producers.config.enable.idempotance: librdkafka has no such setting "
                              "(did you mean enable.idempotence?)"),
    "consumer setting typo": ({}, ["run", str(VALID), "--set", "workload.consumers.config.sesion.timeout.ms=6000"],
                              "did you mean session.timeout.ms?"),
    "invalid client value": ({}, ["run", str(VALID), "--set", "workload.producers.config.linger.ms=soon"],
                             "Invalid value for configuration property"),
    "impossible client combination": ({}, ["run", str(VALID), "--set", "workload.producers.config.acks=1",
                                           "--set", "workload.producers.config.enable.idempotence=true"],
                                      "`acks` must be set to `all` when `enable.idempotence` is true"),
    "consumer setting given to producers": ({}, ["run", str(VALID), "--set",
                                                 "workload.producers.config.session.timeout.ms=6000"],
                                            "session.timeout.ms: a consumer setting, which a producer ignores"),
    "setting the harness overrides": ({}, ["run", str(VALID), "--set", "workload.consumers.config.group.id=mine"],
                                      "group.id: the harness sets it itself"),
    "broker setting typo": ({}, ["run", str(VALID), "--set", "cluster.broker_config.replica.fetch.min.byte=1"],
                            "cluster.broker_config.replica.fetch.min.byte: not a Kafka 3.9.2 broker setting, the "
                            "broker would silently ignore it (did you mean replica.fetch.min.bytes"),
    "topic setting in broker config": ({}, ["run", str(VALID), "--set", "cluster.broker_config.retention.ms=1000"],
                                       "(did you mean log.retention.ms?)"),
    "kafka 4 broker setting typo": ({}, ["run", str(VALID), "--set", "cluster.metadata=kraft", "--set",
                                         f"cluster.kafka_version={NEWEST_KAFKA_4}", "--set",
                                         "cluster.broker_config.unclean.leader.election.enabled=true"],
                                    f"not a Kafka {NEWEST_KAFKA_4} broker setting"),
    "topic setting typo": ({}, ["run", str(VALID), "--set", "topic.config.retention.msx=1"],
                           "topic.config.retention.msx: not a Kafka 3.9.2 topic setting (did you mean retention.ms?)"),
    "--set without =": ({}, ["run", str(VALID), "--set", "nonsense"], "expected key=value"),
    "validate a missing file": ({}, ["validate", "{tmp}/nope.yaml"], "no such scenario file"),
    "validate min.insync above RF": ({"s.yaml": b"topic: {replication_factor: 3, min_insync_replicas: 4}\n"},
                                     ["validate", "{tmp}/s.yaml"],
                                     "min_insync_replicas=4 is above replication_factor=3"),
    "validate a broker setting typo": ({}, ["validate", str(VALID), "--set", "cluster.broker_config.log.flush.ms=1"],
                                       "not a Kafka 3.9.2 broker setting"),
    "--set past a list": ({}, ["run", str(VALID), "--set", "faults.7.duration_s=1"], "not an existing list item"),
    "--set non-YAML value": ({}, ["run", str(VALID), "--set", "topic.partitions=[1,"], "not valid YAML"),
    "--seed not a number": ({}, ["run", str(VALID), "--seed", "abc"], "invalid int value: 'abc'"),
    "--out a file": ({"f": b""}, ["run", str(VALID), "--out", "{tmp}/f"], "not a directory"),
    "no command": ({}, [], "required: COMMAND"),
    "unknown command": ({}, ["explode"], "invalid choice: 'explode'"),
    "check a missing path": ({}, ["check", "{tmp}/nope"], "no such directory"),
    "check a file": ({"f": b""}, ["check", "{tmp}/f"], "not a directory"),
    "report a missing path": ({}, ["report", "{tmp}/nope"], "no such directory"),
    "report a file": ({"f": b""}, ["report", "{tmp}/f"], "not a directory"),
    "matrix a missing path": ({}, ["matrix", "{tmp}/nope"], "no such directory"),
    "matrix a file": ({"f": b""}, ["matrix", "{tmp}/f"], "not a directory"),
    "nightly a missing folder": ({}, ["nightly", "--scenarios", "{tmp}/nope", "--out", "{tmp}/runs"],
                                 "no such directory"),
    "nightly --shard not K/N": ({}, ["nightly", "--shard", "2of4"], "'2of4': expected K/N"),
    "nightly --shard 0/4": ({}, ["nightly", "--shard", "0/4"], "0/4: K must be between 1 and N"),
    "nightly --shard 5/4": ({}, ["nightly", "--shard", "5/4"], "5/4: K must be between 1 and N"),
    "nightly --shard 1/0": ({}, ["nightly", "--shard", "1/0"], "1/0: K must be between 1 and N"),
    "matrix a second root missing": ({}, ["matrix", "{tmp}", "{tmp}/nope"], "no such directory"),
    "matrix --out a file": ({"f": b""}, ["matrix", "{tmp}", "--out", "{tmp}/f"], "not a directory"),
    "matrix --junit without records": ({}, ["matrix", "{tmp}", "--junit", "{tmp}/j.xml"],
                                       "no nightly outcome record"),
    "cluster up of no brokers": ({}, ["cluster", "up", "--brokers", "0"], "cluster.brokers must be at least 1"),
    "cluster up of a bad version": ({}, ["cluster", "up", "--kafka-version", "banana"],
                                    "cluster.kafka_version must be an Apache Kafka release such as 3.9.2"),
}


@pytest.mark.parametrize("files, argv, fragment", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_and_exit_2_before_any_cluster(
        files: dict[str, bytes], argv: list[str], fragment: str, tmp_path: Path, no_cluster: None,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    code, _, err = kchaos([arg.replace("{tmp}", str(tmp_path)) for arg in argv], capsys)
    assert_one_line_exit_2(code, err, fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["run", "scenarios"], "scenarios: a directory, not a scenario file"),
    (["run", "{tmp}/latin1.yaml"], "not UTF-8 text"),
    (["matrix", "{tmp}/nope"], "no such directory"),
    (["matrix", "{tmp}/latin1.yaml"], "not a directory"),
])
def test_the_installed_command_prints_one_line_and_exits_2(argv: list[str], fragment: str, tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    result = subprocess.run([str(KCHAOS), *(a.replace("{tmp}", str(tmp_path)) for a in argv)],
                            capture_output=True, text=True, timeout=120)
    assert_one_line_exit_2(result.returncode, result.stderr, fragment)
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_validate_says_what_a_shipped_scenario_would_run_and_starts_nothing(
        path: Path, no_cluster: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = kchaos(["validate", str(path)], capsys)
    scenario = load_scenario(path)
    assert (code, err) == (0, "")
    assert out == (f"{path}: valid: {scenario.name}, Kafka {scenario.cluster.kafka_version} "
                   f"({scenario.cluster.metadata}), {scenario.workload.client} client, {len(scenario.faults)} "
                   f"fault{'' if len(scenario.faults) == 1 else 's'}, {scenario.workload.duration_s:g} s\n")


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kchaos(["--version"], capsys)
    assert code == 0
    assert out == f"kchaos {version('kchaos')}\n"
    installed = subprocess.run([str(KCHAOS), "--version"], capture_output=True, text=True, timeout=120)
    assert (installed.returncode, installed.stdout) == (0, out)


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = kchaos(["--help"], capsys)
    assert code == 0
    codes = out[out.index("exit codes:"):].splitlines()[1:]
    assert [line.split()[0] for line in codes if line.startswith("  ") and line.split()[0].isdigit()] == \
           ["0", "1", "2"]
    assert "--version" in out


def parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from parsers(child)


def test_every_command_and_option_has_help() -> None:
    missing = []
    for prog, parser in parsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{prog} {name}" for name in action.choices if name not in listed]
            elif not action.help:
                missing.append(f"{prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


# ---------------------------------------------------------------- Kafka's own setting names


@pytest.mark.parametrize("kafka_version, modes", [(DEFAULT_KAFKA_VERSION, ("zookeeper", "kraft")),
                                                  (NEWEST_KAFKA_4, ("kraft",))])
def test_the_names_the_harness_and_the_scenarios_use_are_known(kafka_version: str, modes: tuple[str, ...]) -> None:
    names = config_names(kafka_version)
    used = {key for mode in modes for key in [*broker_defaults(ClusterSpec(kafka_version, mode), 1),
                                              *controller_defaults(ClusterSpec(kafka_version, mode), 101)]}
    shipped = [yaml.safe_load(path.read_text()) for path in SCENARIOS]
    used |= {key for s in shipped for key in s.get("cluster", {}).get("broker_config", {})}
    assert [key for key in sorted(used) if not names.broker_accepts(key)] == []
    topic_keys = {key for s in shipped for key in s.get("topic", {}).get("config", {})} | {"min.insync.replicas"}
    assert topic_keys <= names.topic
    # names scoped to a listener, internal settings and dynamic ones that Kafka documents
    assert names.broker_accepts("listener.name.plaintext.ssl.keystore.location")
    assert names.broker_accepts("listener.name.sasl_plaintext.plain.sasl.jaas.config")
    assert names.broker_accepts("unstable.api.versions.enable")
    assert not names.broker_accepts("listener.name.plaintext.no.such.setting")
    assert not names.broker_accepts("retention.ms") and "retention.ms" in names.topic


@pytest.fixture
def empty_names_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(names_module, "NAMES_DIR", tmp_path)
    config_names.cache_clear()
    yield tmp_path
    config_names.cache_clear()


def test_missing_names_are_extracted_from_the_jars_and_cached(empty_names_cache: Path) -> None:
    names = config_names(DEFAULT_KAFKA_VERSION)
    cached = list(empty_names_cache.glob(f"{DEFAULT_KAFKA_VERSION}/config-names-*.json"))
    assert len(cached) == 1
    assert {"replica.fetch.min.bytes", "min.insync.replicas", "zookeeper.connect"} <= names.broker
    assert {"retention.ms", "min.insync.replicas", "flush.messages"} <= names.topic


def test_names_that_cannot_be_extracted_are_one_line_never_a_silent_skip(
        empty_names_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(names_module.shutil, "which", lambda _name: None)
    with pytest.raises(ClusterError, match="java is not installed"):
        config_names(DEFAULT_KAFKA_VERSION)
    scenario = tmp_path / "s.yaml"
    scenario.write_text("cluster: {broker_config: {replica.fetch.min.bytes: 1}}\n")
    with pytest.raises(Exception, match="cannot read Kafka 3.9.2's setting names: java is not installed") as e:
        load_scenario(scenario)
    assert "\n" not in str(e.value)


def os_threads() -> int:
    return len(list(Path("/proc/self/task").iterdir()))


def test_validation_leaves_no_client_behind() -> None:
    """Each client the check builds is closed or destroyed: validations leave no librdkafka thread behind."""
    load_scenario(VALID)
    before = os_threads()
    for _ in range(20):
        load_scenario(VALID)
    assert os_threads() == before


def test_a_run_without_a_docker_engine_is_one_line_and_keeps_its_run_directory(tmp_path: Path) -> None:
    """No engine at DOCKER_HOST: the run directory already written (its scenario) stays, and the error is one
    line saying how to start one."""
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = subprocess.run([str(KCHAOS), "run", "scenarios/acks1-leader-kill.yaml", "--out", str(tmp_path / "runs")],
                            capture_output=True, text=True, timeout=120, env=env)
    assert_one_line_exit_2(result.returncode, result.stderr, "Docker engine error")
    assert "is dockerd running? `make setup` starts it" in result.stderr
    assert [p.name for p in (tmp_path / "runs").glob("*/*/scenario.yaml")] == ["scenario.yaml"]
