"""Local Docker images for kchaos nodes, built with no registry.

Two layers, each tagged by a hash of its recipe so it is rebuilt only when
the recipe changes:

* ``kchaos-base:<hash>`` -- a Debian root file system with a headless JRE,
  made by mmdebstrap and imported with ``docker import`` (no base image is
  ever pulled). On a Debian host mmdebstrap reads the host's own apt
  sources; on any other host (Ubuntu, ...) it builds the Debian suite it
  names from its default mirror, checked with Debian's keyring. Or
  ``KCHAOS_BASE_IMAGE`` names an image with a JRE 17 that the engine has or
  can pull, and neither mmdebstrap nor this layer is needed.
* ``kchaos-kafka:<version>-<hash>`` -- the base plus Kafka's jars for one
  version, resolved from Maven Central by ``clusters/images/pom.xml``
  (log4j 1 for Kafka 3.x, log4j2 for 4.x).

``python -m clusters.prepare`` (make setup) builds them ahead of time;
clusters call :func:`ensure_image` themselves.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import docker.errors

from clusters.errors import ClusterError
from clusters.kafka_versions import DEFAULT_KAFKA_VERSION, kafka_major

log = logging.getLogger(__name__)

DEBIAN_SUITE = "bookworm"
IMAGES_DIR = Path(__file__).resolve().parent / "images"
REPO_ROOT = IMAGES_DIR.parent.parent
CACHE_DIR = REPO_ROOT / ".cache"
APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
OS_RELEASE_ENV = "KCHAOS_OS_RELEASE"  # another os-release to go by (tests: a host that is not Debian)
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
BASE_IMAGE_ENV = "KCHAOS_BASE_IMAGE"
# what clusters/images/run-node.sh and archive-classes.sh run, besides a POSIX sh
NODE_COMMANDS = ("java", "hostname", "awk", "sed", "sync", "mkdir", "basename", "sleep", "cat", "ls", "rm")
NODE_IMAGE_FILES = ("Dockerfile", "archive-classes.sh", "run-node.sh")  # the build context, besides the jars
MIN_JAVA = 17


def uses_log4j2(version: str) -> bool:
    """Kafka 4.x logs to log4j2; 3.x to log4j 1 (reload4j)."""
    return kafka_major(version) >= 4


def recipe_digest(*parts: bytes) -> str:
    """A short hash of a recipe's parts: what names a cached image, jar folder or extract."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:12]


@contextmanager
def filled_in_place(target: Path, prefix: str = "build-") -> Iterator[Path]:
    """A scratch folder beside ``target`` to fill, renamed to ``target`` when the block ends without an error and
    removed either way: two harnesses filling one cache folder at once never see it half filled (the one that
    finishes second keeps the first one's, which is as good)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        yield scratch
        try:
            scratch.rename(target)
        except OSError:  # another harness finished first
            pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _base_packages() -> list[str]:
    text = (IMAGES_DIR / "base-packages.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def given_base() -> str | None:
    """The base image ``KCHAOS_BASE_IMAGE`` names, if any: then kchaos builds no base of its own."""
    return os.environ.get(BASE_IMAGE_ENV, "").strip() or None


def base_tag() -> str:
    """The base the node image is built on (its name is part of the node image's tag)."""
    given = given_base()
    if given is not None:
        return given
    recipe = ",".join([DEBIAN_SUITE, *_base_packages()]).encode()
    return f"kchaos-base:{recipe_digest(recipe)}"


def kafka_tag(version: str) -> str:
    files = [IMAGES_DIR / n for n in (*NODE_IMAGE_FILES, "pom.xml")]
    return f"kchaos-kafka:{version}-{recipe_digest(base_tag().encode(), *(f.read_bytes() for f in files))}"


def _image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _run(cmd: list[str], what: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError(tool_failure(what, result))


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ARTIFACT = re.compile(r"[\w.-]+:[\w.-]+:(?:jar|pom):[\w.-]+")


def tool_failure(what: str, result: subprocess.CompletedProcess[str]) -> str:
    """A build tool's failure in one line: what failed, its exit code and its own words, colour codes stripped
    (Maven prints its errors on stdout and only colour resets on stderr). Where Maven names artifacts it could not
    resolve, those; else its first error lines; else the output's last lines."""
    lines = [ANSI.sub("", line).strip() for line in f"{result.stdout}\n{result.stderr}".splitlines()]
    lines = [line for line in lines if line and line != "[ERROR]"]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    missing = list(dict.fromkeys(a for e in errors for a in ARTIFACT.findall(re.sub(r"for project \S+", "", e))))
    words = f"Maven could not resolve {', '.join(missing)}" if missing else " | ".join(errors[:2] or lines[-5:])
    return f"{what} failed (exit {result.returncode}): {words or 'it printed nothing'}"


def host_is_debian(os_release: str) -> bool:
    """Whether /etc/os-release describes Debian itself (Ubuntu, though ``ID_LIKE=debian``, is not)."""
    return re.search(r'^ID="?debian"?\s*$', os_release, re.MULTILINE) is not None


def mmdebstrap_command(tarball: Path, debian_host: bool, host_sources: Path | None) -> list[str]:
    """mmdebstrap's command line for the base file system.

    On Debian, the host's own apt sources (never a named host). Elsewhere the
    host's sources are not Debian's: mmdebstrap's default mirror for the suite,
    its signatures checked with Debian's keyring (package debian-archive-keyring).
    """
    cmd = ["mmdebstrap", "--variant=apt", "--format=tar", "--include=" + ",".join(_base_packages())]
    if not debian_host:
        cmd.append(f"--keyring={DEBIAN_KEYRING}")
    cmd += [DEBIAN_SUITE, str(tarball)]
    if debian_host and host_sources is not None:
        cmd.append(str(host_sources))
    return cmd


def ensure_base_image(client: docker.DockerClient) -> str:
    """The base image: the one ``KCHAOS_BASE_IMAGE`` names (checked), else Debian + JRE built with mmdebstrap."""
    given = given_base()
    if given is not None:
        return _check_given_base(client, given)
    tag = base_tag()
    if not _image_exists(client, tag):
        build_base_image(tag)
    return tag


def build_base_image(tag: str) -> None:
    """mmdebstrap the Debian + JRE file system and import it as ``tag``."""
    if shutil.which("mmdebstrap") is None:
        raise ClusterError("mmdebstrap is not installed: run `make setup`")
    os_release = Path(os.environ.get(OS_RELEASE_ENV) or "/etc/os-release")
    debian_host = host_is_debian(os_release.read_text() if os_release.exists() else "")
    if not debian_host and not DEBIAN_KEYRING.exists():
        raise ClusterError(f"building the Debian base on a host that is not Debian needs {DEBIAN_KEYRING} "
                           f"(package debian-archive-keyring; `make setup` installs it), or set {BASE_IMAGE_ENV}")
    log.info("building base image %s with mmdebstrap", tag)
    with tempfile.TemporaryDirectory(prefix="kchaos-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        _run(mmdebstrap_command(tarball, debian_host, APT_SOURCES if APT_SOURCES.exists() else None), "mmdebstrap")
        # the docker CLI streams a large tarball; docker-py's import sends it as one header
        _run(["docker", "import", str(tarball), tag], "docker import of the base file system")


def _check_given_base(client: docker.DockerClient, image: str) -> str:
    """``image`` if the engine has it (pulled when it has not) and it can run a node: a JRE 17 and run-node.sh's
    tools."""
    where = f"{BASE_IMAGE_ENV}={image}"
    if not _image_exists(client, image):
        try:
            client.images.pull(image)
        except docker.errors.APIError as e:
            raise ClusterError(f"{where}: the engine does not have it and cannot pull it: "
                               f"{(e.explanation or str(e)).splitlines()[0]}") from None
    probe = 'for c in "$@"; do command -v "$c" >/dev/null 2>&1 || echo "missing $c"; done; java -version 2>&1; exit 0'
    try:
        out = client.containers.run(image, entrypoint=["sh", "-c", probe, "probe", *NODE_COMMANDS],
                                     remove=True, network_mode="none")
    except docker.errors.DockerException as e:
        raise ClusterError(f"{where}: cannot run a shell in it: {str(e).splitlines()[0]}") from None
    problem = base_problem(out.decode(errors="replace"))
    if problem is not None:
        raise ClusterError(f"{where}: {problem}")
    return image


def base_problem(probe_output: str) -> str | None:
    """What keeps a base image from running a node, from its probe's output (``missing <cmd>`` lines, then
    ``java -version``); None when nothing does."""
    missing = [line.split(" ", 1)[1] for line in probe_output.splitlines() if line.startswith("missing ")]
    if missing:
        return f"it lacks {', '.join(missing)} (a node needs a JRE {MIN_JAVA} and {', '.join(NODE_COMMANDS[1:])})"
    found = re.search(r'version "(?:1\.)?(\d+)', probe_output)  # "17.0.13"; before 9, "1.8.0_292"
    major = int(found.group(1)) if found else None
    if major is None or major < MIN_JAVA:
        return (f"its java is {'not a JRE it can read' if major is None else f'version {major}'}; "
                f"a node needs {MIN_JAVA} or newer")
    return None


def kafka_jars(version: str) -> Path:
    """Resolve Kafka's runtime jars with Maven into a cache folder, once per version and pom.

    Resolved into a scratch folder and renamed into place, so two harnesses
    building at once never see a half-filled folder.
    """
    pom = IMAGES_DIR / "pom.xml"
    libs = CACHE_DIR / "kafka" / version / recipe_digest(pom.read_bytes()) / "libs"
    if libs.exists():
        return libs
    if shutil.which("mvn") is None:
        raise ClusterError("mvn is not installed: run `make setup`")
    log.info("resolving Kafka %s jars with Maven", version)
    logging_profile = ["-Dkafka.log4j2"] if uses_log4j2(version) else []
    with filled_in_place(libs, prefix="libs-") as scratch:
        _run(["mvn", "-q", "-B", "-f", str(pom), f"-Dkafka.version={version}", *logging_profile,
              "dependency:copy-dependencies", f"-DoutputDirectory={scratch}"],
             f"resolving Kafka {version} from Maven Central")
    return libs


def ensure_image(version: str = DEFAULT_KAFKA_VERSION, client: docker.DockerClient | None = None) -> str:
    """Return the tag of the node image for ``version``, building what is missing."""
    client = client or docker.from_env()
    tag = kafka_tag(version)
    if _image_exists(client, tag):
        return tag
    base = ensure_base_image(client)
    libs = kafka_jars(version)
    log.info("building node image %s", tag)
    with tempfile.TemporaryDirectory(prefix="kchaos-image-") as ctx:
        shutil.copytree(libs, Path(ctx) / "libs")
        for name in NODE_IMAGE_FILES:
            shutil.copy2(IMAGES_DIR / name, Path(ctx) / name)
        try:
            client.images.build(path=ctx, tag=tag, buildargs={"BASE": base}, rm=True, pull=False)
        except docker.errors.BuildError as e:
            raise ClusterError(f"building {tag} failed: {e}") from None
    return tag
