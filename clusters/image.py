"""Local Docker images for kchaos nodes, built with no registry.

Two layers, each tagged by a hash of its recipe so it is rebuilt only when
the recipe changes:

* ``kchaos-base:<hash>`` -- a Debian root file system with a headless JRE,
  made by mmdebstrap from this machine's own apt sources and imported with
  ``docker import`` (no base image is ever pulled).
* ``kchaos-kafka:<version>-<hash>`` -- the base plus Kafka's jars for one
  version, resolved from Maven Central by ``clusters/images/pom.xml``
  (log4j 1 for Kafka 3.x, log4j2 for 4.x).

``python -m clusters.prepare`` (make setup) builds them ahead of time;
clusters call :func:`ensure_image` themselves.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
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


def _base_packages() -> list[str]:
    text = (IMAGES_DIR / "base-packages.txt").read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def base_tag() -> str:
    recipe = ",".join([DEBIAN_SUITE, *_base_packages()]).encode()
    return f"kchaos-base:{recipe_digest(recipe)}"


def kafka_tag(version: str) -> str:
    files = [IMAGES_DIR / n for n in ("Dockerfile", "run-node.sh", "pom.xml")]
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
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise ClusterError(f"{what} failed (exit {result.returncode}): {' | '.join(tail)}")


def ensure_base_image(client: docker.DockerClient) -> str:
    """Build the Debian + JRE base image with mmdebstrap unless it exists."""
    tag = base_tag()
    if _image_exists(client, tag):
        return tag
    if shutil.which("mmdebstrap") is None:
        raise ClusterError("mmdebstrap is not installed: run `make setup`")
    log.info("building base image %s with mmdebstrap", tag)
    with tempfile.TemporaryDirectory(prefix="kchaos-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        cmd = ["mmdebstrap", "--variant=apt", "--format=tar",
               "--include=" + ",".join(_base_packages()), DEBIAN_SUITE, str(tarball)]
        if APT_SOURCES.exists():  # the machine's own apt sources, never a named host
            cmd.append(str(APT_SOURCES))
        _run(cmd, "mmdebstrap")
        # the docker CLI streams a large tarball; docker-py's import sends it as one header
        _run(["docker", "import", str(tarball), tag], "docker import of the base file system")
    return tag


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
    libs.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    logging_profile = ["-Dkafka.log4j2"] if uses_log4j2(version) else []
    try:
        _run(["mvn", "-q", "-B", "-f", str(pom), f"-Dkafka.version={version}", *logging_profile,
              "dependency:copy-dependencies", f"-DoutputDirectory={scratch}"],
             f"resolving Kafka {version} from Maven Central")
        scratch.rename(libs)
    except OSError:  # another harness finished first: its folder is as good
        pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
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
        for name in ("Dockerfile", "run-node.sh"):
            shutil.copy2(IMAGES_DIR / name, Path(ctx) / name)
        try:
            client.images.build(path=ctx, tag=tag, buildargs={"BASE": base}, rm=True, pull=False)
        except docker.errors.BuildError as e:
            raise ClusterError(f"building {tag} failed: {e}") from None
    return tag
