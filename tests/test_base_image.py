"""The node image's base: Debian built by mmdebstrap (with Debian's keyring on a host that is not Debian), or
an image of one's own named by KCHAOS_BASE_IMAGE, checked before a node image is built on it."""

from __future__ import annotations

import io
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from clusters import image
from clusters.errors import ClusterError
from clusters.image import tool_failure
from clusters.image import BASE_IMAGE_ENV, DEBIAN_KEYRING, base_problem, host_is_debian, mmdebstrap_command

UBUNTU = 'NAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n'


def test_only_debian_itself_counts_as_a_debian_host() -> None:
    assert host_is_debian('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    assert host_is_debian('ID="debian"\n')
    assert not host_is_debian(UBUNTU)
    assert not host_is_debian("")


def test_mmdebstrap_reads_the_debian_host_s_sources_and_checks_others_with_debian_s_keyring() -> None:
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    on_debian = mmdebstrap_command(Path("/t/rootfs.tar"), True, sources)
    assert on_debian[-3:] == [image.DEBIAN_SUITE, "/t/rootfs.tar", str(sources)]
    assert not any(arg.startswith("--keyring") for arg in on_debian)
    elsewhere = mmdebstrap_command(Path("/t/rootfs.tar"), False, sources)
    assert f"--keyring={DEBIAN_KEYRING}" in elsewhere
    assert elsewhere[-2:] == [image.DEBIAN_SUITE, "/t/rootfs.tar"]  # the suite from mmdebstrap's own default


@pytest.mark.parametrize(("probe", "problem"), [
    ('openjdk version "17.0.13" 2024-10-15\n', None),
    ('openjdk version "21" 2023-09-19\n', None),
    ('openjdk version "11.0.25" 2024-10-15\n', "its java is version 11; a node needs 17 or newer"),
    ('java version "1.8.0_292"\n', "its java is version 8; a node needs 17 or newer"),
    ("missing java\nmissing hostname\nsh: java: not found\n", "it lacks java, hostname"),
    ("sh: java: not found\n", "its java is not a JRE it can read"),
])
def test_what_keeps_a_base_from_running_a_node(probe: str, problem: str | None) -> None:
    found = base_problem(probe)
    assert found == problem if problem is None else found is not None and found.startswith(problem)


def test_the_given_base_names_the_node_image(monkeypatch: pytest.MonkeyPatch) -> None:
    default = image.kafka_tag("3.9.2")
    monkeypatch.setenv(BASE_IMAGE_ENV, "my-registry-free-jre:17")
    assert image.base_tag() == "my-registry-free-jre:17"
    assert image.kafka_tag("3.9.2") != default


# ---------------------------------------------------------------------- with a real engine


@pytest.fixture
def engine() -> docker.DockerClient:
    return docker.from_env()


@pytest.fixture
def made(engine: docker.DockerClient) -> Iterator[list[str]]:
    """Image tags a test made; removed afterwards."""
    tags: list[str] = []
    yield tags
    for tag in reversed(tags):
        try:
            engine.images.remove(tag)
        except docker.errors.ImageNotFound:
            pass


def local_base(engine: docker.DockerClient, made: list[str], without_java: bool = False) -> str:
    """kchaos's own base under another name (a locally tagged image, as a user's would be), or one
    built from it with java removed."""
    own = image.ensure_base_image(engine)
    tag = f"kchaos-test-base:{uuid.uuid4().hex[:8]}"
    if without_java:
        dockerfile = f"FROM {own}\nRUN rm -f /usr/bin/java /etc/alternatives/java\n"
        engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, pull=False)
    else:
        engine.images.get(own).tag(tag)
    made.append(tag)
    return tag


@pytest.mark.cluster
def test_a_node_image_is_built_on_a_locally_tagged_base_and_runs_java(engine: docker.DockerClient, made: list[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    base = local_base(engine, made)
    monkeypatch.setenv(BASE_IMAGE_ENV, base)
    tag = image.ensure_image("3.9.2", engine)
    made.append(tag)
    assert tag == image.kafka_tag("3.9.2")
    monkeypatch.delenv(BASE_IMAGE_ENV)
    assert tag != image.kafka_tag("3.9.2")  # kchaos's own base gives another node image
    out = engine.containers.run(tag, entrypoint=["java", "-version"], remove=True, stderr=True, stdout=True,
                                network_mode="none")
    assert b'version "17' in out


@pytest.mark.cluster
def test_a_base_without_java_is_refused_in_one_line(engine: docker.DockerClient, made: list[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    base = local_base(engine, made, without_java=True)
    monkeypatch.setenv(BASE_IMAGE_ENV, base)
    with pytest.raises(ClusterError) as refused:
        image.ensure_image("3.9.2", engine)
    assert str(refused.value) == f"{BASE_IMAGE_ENV}={base}: it lacks java (a node needs a JRE 17 and " \
                                 "hostname, awk, sed, sync, mkdir, basename, sleep, cat, ls, rm)"
    assert "\n" not in str(refused.value)


# Maven's output when a release's jars are not there (stdout: its errors after colour codes; stderr: colour resets)
MAVEN_MISSING = subprocess.CompletedProcess(
    ["mvn"], 1,
    "\x1b[0m\x1b[0m\x1b[0m[ERROR] Failed to execute goal on project kafka-runtime: Could not resolve dependencies for "
    "project io.kchaos:kafka-runtime:pom:1: The following artifacts could not be resolved: "
    "org.apache.kafka:kafka_2.13:jar:4.0.9, org.apache.kafka:kafka-tools:jar:4.0.9: Could not find artifact "
    "org.apache.kafka:kafka_2.13:jar:4.0.9\n[ERROR] \n[ERROR] To see the full stack trace of the errors, re-run "
    "Maven with the -e switch.\n\x1b[0m",
    "\x1b[0m\x1b[0m")


def test_a_build_tool_failure_names_what_maven_could_not_resolve() -> None:
    assert tool_failure("resolving Kafka 4.0.9 from Maven Central", MAVEN_MISSING) == (
        "resolving Kafka 4.0.9 from Maven Central failed (exit 1): Maven could not resolve "
        "org.apache.kafka:kafka_2.13:jar:4.0.9, org.apache.kafka:kafka-tools:jar:4.0.9")
    other = subprocess.CompletedProcess(["mvn"], 1, "[ERROR] \x1b[1mNo plugin found for prefix 'x'\x1b[m\n", "")
    assert tool_failure("building", other) == "building failed (exit 1): No plugin found for prefix 'x'"
    assert tool_failure("building", subprocess.CompletedProcess(["x"], 3, "", "")) == \
        "building failed (exit 3): it printed nothing"
