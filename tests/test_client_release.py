"""workload.client_version: a confluent-kafka release other than the locked one, run by the workload processes.

The scenario's rules (which roles a pin reaches, what is refused in one line), the K line's binding, and one real
environment: confluent-kafka 2.5.0 (librdkafka 2.5.0, July 2024) from the package index, built once into .cache
(seconds; a second time it is only looked at) and running the project's own producer process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from catalogue.exits import HarnessError
from clusters.image import filled_in_place
from harness.cli import main
from harness.scenario import load_scenario
from workloads import protocol
from workloads.child import confluent_kafka_release
from workloads.client import ClientIdentity, WorkloadError
from workloads.confluent_release import ClientReleaseError, ensure_env, env_dir, interpreter, is_release, pip_failure
from workloads.history import RunClock
from workloads.producer import ProducerClient

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "acks1-leader-kill.yaml"
OLDER = "2.5.0"          # a 2024 release with manylinux wheels for CPython 3.11
NO_BROKER = "127.0.0.1:9"  # nothing listens: the producer starts, produce() queues, nothing is acknowledged


def scenario(*settings: str):
    return load_scenario(SCENARIO, list(settings))


# ---------------------------------------------------------------------- the scenario key


@pytest.mark.parametrize("version, ok", [("2.5.0", True), ("0.9.1.2", True), ("2.10.1rc1", True), ("2.5", False),
                                         ("2", False), ("latest", False), (">=2.5.0", False),
                                         ("2.5.0 --index-url=x", False), ("", False)])
def test_a_release_is_written_as_one(version: str, ok: bool) -> None:
    assert is_release(version) is ok


def test_one_version_pins_every_librdkafka_role_and_nothing_else() -> None:
    w = scenario("workload.client_version=2.5.0").workload
    assert (w.role("producers").release, w.role("consumers").release, w.pinned_releases) == ("2.5.0", "2.5.0",
                                                                                             ["2.5.0"])
    assert scenario().workload.pinned_releases == []
    assert scenario().workload.role("producers").release is None


def test_a_role_may_pin_its_own_release() -> None:
    w = scenario("workload.client_version=2.5.0", "workload.producers.client_version=2.3.0").workload
    assert (w.role("producers").release, w.role("consumers").release, w.pinned_releases) == ("2.3.0", "2.5.0",
                                                                                         ["2.3.0", "2.5.0"])


def test_a_version_belongs_to_its_client_kind() -> None:
    """workload.client_version pins the roles that run workload.client: a Java producer beside librdkafka consumers
    runs kafka-clients as always, and a librdkafka role among Java ones runs the locked release unless it pins."""
    w = scenario("workload.client_version=2.5.0", "workload.producers.client=java").workload
    assert (w.role("producers").release, w.role("consumers").release, w.pinned_releases) == (None, "2.5.0", ["2.5.0"])
    w = scenario("workload.client=java", "workload.consumers.client=librdkafka").workload
    assert w.role("consumers").release is None and w.pinned_releases == []


@pytest.mark.parametrize("settings, said", [
    (["workload.client_version=2.5"], "workload.client_version: '2.5' is not a client release (e.g. 2.5.0 for "
                                      "confluent-kafka"),
    (["workload.consumers.client_version=latest"], "workload.consumers.client_version: 'latest' is not a "
                                                   "client release"),
    (["workload.client_version=2.5.0", "workload.client=java"],
     "workload.producers.client_version=2.5.0: the role runs java, and kchaos builds its Java program against "
     "kafka-clients 3.5.0 and later"),
    (["workload.producers.client=java", "workload.producers.client_version=3.4.1"],
     "workload.producers.client_version=3.4.1: the role runs java"),
])
def test_a_pin_that_cannot_be_is_refused_in_one_line(settings: list[str], said: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HarnessError) as refused:
        scenario(*settings)
    assert said in str(refused.value)
    assert run(settings, tmp_path, capsys) == f"kchaos: {refused.value}"
    assert not any(tmp_path.iterdir()), "refused before a run directory was begun"


def run(settings: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``kchaos run`` of the scenario with these settings, which must end in exit 2 with one line on stderr."""
    args = [arg for s in settings for arg in ("--set", s)]
    assert main(["run", str(SCENARIO), *args, "--engine", "python", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_release_the_index_lacks_is_one_line_naming_what_installs() -> None:
    output = ("ERROR: Ignored the following yanked versions: 2.6.2\nERROR: Could not find a version that satisfies the "
              "requirement confluent-kafka==9.9.9 (from versions: 2.0.2, 2.1.0, 2.10.1rc1, 2.16.1)\n"
              "ERROR: No matching distribution found for confluent-kafka==9.9.9\n")
    said = pip_failure("9.9.9", output)
    assert said is not None and "\n" not in said
    assert said.startswith("confluent-kafka 9.9.9: the package index has no such release with a wheel for Python")
    assert said.endswith("(releases that install here: 2.0.2 to 2.16.1)")
    assert pip_failure("9.9.9", "ERROR: network unreachable") is None


def test_a_java_pin_runs_its_kafka_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Java role's client_version is the kafka-clients release its program is built against; without one it runs
    the cluster's; the scenario lists each release to build before the cluster starts."""
    s = scenario("workload.client=java", "workload.producers.client_version=3.7.2", "workload.consumers.count=1")
    assert (s.workload.role("producers").release, s.workload.role("consumers").release) == ("3.7.2", None)
    assert s.java_client_releases == ["3.7.2", s.cluster.kafka_version] and s.workload.pinned_releases == []
    monkeypatch.setattr("workloads.java_client.java_command", lambda release, role, spec: [release, role])
    pinned = ProducerClient("p0", NO_BROKER, "t", {}, None, RunClock(), client="java",  # type: ignore[arg-type]
                            kafka_version="3.9.2", client_version="3.7.2")
    unpinned = ProducerClient("p0", NO_BROKER, "t", {}, None, RunClock(), client="java",  # type: ignore[arg-type]
                              kafka_version="3.9.2")
    assert (pinned.command("{}")[0], unpinned.command("{}")[0]) == ("3.7.2", "3.9.2")


def test_a_release_that_cannot_be_made_is_the_workloads_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(version: str) -> Path:
        raise ClientReleaseError(f"confluent-kafka {version}: no")
    monkeypatch.setattr("workloads.confluent_release.interpreter", refuse)
    p = ProducerClient("p0", NO_BROKER, "t", {}, None, RunClock(), client_version="9.9.9")  # type: ignore[arg-type]
    with pytest.raises(WorkloadError, match="confluent-kafka 9.9.9: no"):
        p.command("{}")


# ---------------------------------------------------------------------- the K line's binding


@pytest.mark.parametrize("answer", [("2.5.0", 33882112), "2.5.0"])
def test_the_binding_release_is_read_from_either_shape_of_version(answer: object,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """confluent-kafka 2.5.0's version() is (release, number); 2.16.1's the bare release."""
    monkeypatch.setattr("workloads.child.version", lambda: answer)
    assert confluent_kafka_release() == "2.5.0"


def test_the_k_line_carries_the_binding_after_its_settings() -> None:
    line = protocol.with_binding(protocol.identity("librdkafka", "2.5.0", {"client.id": "a b"}), "confluent-kafka",
                                 "2.5.0")
    assert line == 'K librdkafka 2.5.0 {"client.id":"a b"} confluent-kafka/2.5.0'
    said = ClientIdentity.from_line(line.encode())
    assert (said.version, said.settings, said.binding) == ("2.5.0", {"client.id": "a b"}, "confluent-kafka 2.5.0")
    java = ClientIdentity.from_line(b'K java 3.9.2 {"acks":"all"}')
    assert (java.library, java.binding) == ("java", None)


# ---------------------------------------------------------------------- the cache folder, filled in place


def test_a_cache_folder_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "2.5.0" / "cp311"
    with pytest.raises(ClientReleaseError):
        with filled_in_place(target) as scratch:
            (scratch / "half").write_text("")
            raise ClientReleaseError("pip failed")
    assert list(target.parent.iterdir()) == []
    with filled_in_place(target) as scratch:
        (scratch / "first").write_text("")
    with filled_in_place(target) as scratch:  # another harness that finished second keeps the first one's
        (scratch / "second").write_text("")
    assert [p.name for p in target.iterdir()] == ["first"] and list(target.parent.iterdir()) == [target]


# ---------------------------------------------------------------------- a real environment of an older release


class Discard:
    """Stands in for the history's sends writer: a producer's sends are not these tests'."""

    def write_many(self, records: list[dict]) -> None: ...

    def write_lines(self, lines: list[bytes]) -> None: ...


@pytest.fixture(scope="module")
def older_env() -> Path:
    """confluent-kafka 2.5.0's environment (built from the package index the first time: about 5 s)."""
    try:
        return ensure_env(OLDER)
    except ClientReleaseError as e:
        pytest.fail(f"confluent-kafka {OLDER} could not be installed: {e}")


def test_the_older_release_imports_the_projects_producer_with_its_own_librdkafka(older_env: Path) -> None:
    assert older_env == env_dir(OLDER) and interpreter(OLDER) == older_env / "bin" / "python"
    out = subprocess.run([str(interpreter(OLDER)), "-c", "import json, confluent_kafka as ck, workloads.producer as p;"
                          "from workloads.child import confluent_kafka_release as release;"
                          "print(json.dumps([release(), ck.libversion()[0], ck.__file__, p.__file__]))"],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir(), timeout=60).stdout
    version, librdkafka, binding_file, producer_file = json.loads(out)
    assert (version, librdkafka) == (OLDER, OLDER)
    assert Path(binding_file).is_relative_to(older_env)
    assert Path(producer_file) == ROOT / "workloads" / "producer.py"
    assert confluent_kafka_release() != OLDER, "the harness itself stays on the locked release"


def test_a_pinned_producer_process_says_it_runs_the_older_release_and_goes_on(older_env: Path) -> None:
    """A real producer process of the pinned release starts (no broker needed to start), its K line says
    librdkafka 2.5.0 through confluent-kafka 2.5.0 (what the history's client event and results.json record), and
    it goes on producing with the calls that release has (it has no produce_batch())."""
    said: list[tuple[str, ClientIdentity]] = []
    p = ProducerClient("p0", NO_BROKER, "t", {}, Discard(), RunClock(), rate=1,  # type: ignore[arg-type]
                       flush_timeout_s=1, client_version=OLDER)
    p.on_identity = lambda name, identity: said.append((name, identity))
    assert p.command("{}")[0] == str(older_env / "bin" / "python")
    try:
        p.start()
        p.wait_started()
        deadline = time.monotonic() + 10
        while not said and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # a few sends at rate 1, queued for a broker that is not there
        assert p.running and p.failures == []
    finally:
        p.abort()
    assert [(name, i.library, i.version, i.binding) for name, i in said] == [
        ("p0", "librdkafka", OLDER, f"confluent-kafka {OLDER}")]
    assert sys.executable != p.command("{}")[0]


def test_a_release_the_index_lacks_ends_the_run_before_it_begins(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """pip asks the package index and finds no 9.9.9: one line, exit 2, no run directory, no container."""
    said = run(["workload.client_version=9.9.9"], tmp_path, capsys)
    assert said.startswith("kchaos: confluent-kafka 9.9.9: the package index has no such release"), said
    assert not any(tmp_path.iterdir()) and not env_dir("9.9.9").parent.exists()
