"""A confluent-kafka release other than the locked one, in an environment of its own, for the workload processes.

A scenario may pin the librdkafka its workload processes run
(``workload.client_version``: a confluent-kafka release from PyPI, each wheel
with its own librdkafka). One interpreter cannot import two releases, and
need not: every workload process is an interpreter of its own. So a release
gets a virtual environment, ``.cache/clients/confluent-kafka/<version>/<python
tag>/``, holding that confluent-kafka and nothing else, and a ``.pth`` file
that puts the repository and .venv's site-packages after it: the process
imports its own confluent_kafka first and the project's modules and every other
dependency from .venv. The ``.pth`` lines are relative, so the cache moves with
the repository. Built once, on first use, in a scratch folder renamed into
place when its interpreter has said it runs the asked release (two harnesses
building at once never see half an environment). The harness, its admin
requests and the final read-back stay on .venv's locked release.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from clusters.image import CACHE_DIR, REPO_ROOT, filled_in_place

log = logging.getLogger(__name__)

PACKAGE = "confluent-kafka"
CLIENTS_DIR = CACHE_DIR / "clients" / PACKAGE
# a release as PyPI names confluent-kafka's (2.5.0, 0.9.1.2, 2.10.1rc1), never a range or a pip option: it is
# pinned with ==, and a shorter 2.5 would match 2.5.0 under PEP 440 and then not be what the process reports
RELEASE = re.compile(r"^\d+\.\d+\.\d+(\.\d+)?((a|b|rc)\d+)?$")
PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
PTH_NAME = "kchaos-project.pth"
# the project's workload processes, imported by the check: a release too old for them fails here, not mid-run
WORKLOAD_MODULES = ("workloads.producer", "workloads.consumer", "workloads.pipeline")
CHECK_SCRIPT = ("import json, confluent_kafka as ck\n"
                "from workloads.child import confluent_kafka_release\n"
                "for m in {modules!r}: __import__(m)\n"
                "print(json.dumps({{'version': confluent_kafka_release(), 'librdkafka': ck.libversion()[0], "
                "'file': ck.__file__}}))")
INSTALL_TIMEOUT_S = 600
CHECK_TIMEOUT_S = 120


class ClientReleaseError(RuntimeError):
    """The release could not be made ready: PyPI has no wheel of it for this Python, pip failed, or its
    interpreter did not run it (one line)."""


def is_release(version: str) -> bool:
    """Whether ``version`` is written as a confluent-kafka release (whether PyPI has it, only pip can say)."""
    return RELEASE.match(version) is not None


def env_dir(version: str) -> Path:
    """Where the environment of ``version`` for this Python lives."""
    return CLIENTS_DIR / version / PYTHON_TAG


def site_packages(env: Path) -> Path:
    """An environment's own site-packages (the venv layout of this Python)."""
    return Path(sysconfig.get_path("purelib", "venv", vars={"base": str(env), "platbase": str(env)}))


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def interpreter(version: str) -> Path:
    """The interpreter a workload process of ``version`` runs under (its environment built on first use)."""
    return env_python(ensure_env(version))


def ensure_env(version: str) -> Path:
    """The environment of ``version``, built if missing; ClientReleaseError (one line) when it cannot be."""
    if not is_release(version):
        raise ClientReleaseError(f"{PACKAGE} {version!r} is not a release's version (e.g. 2.5.0)")
    target = env_dir(version)
    if env_python(target).exists():
        return target
    log.info("installing %s %s into %s", PACKAGE, version, target)
    try:
        with filled_in_place(target) as scratch:
            build_env(scratch, version)
    finally:
        try:
            target.parent.rmdir()  # a release that never installed leaves no folder behind
        except OSError:
            pass  # it holds an environment (this one, or another Python's)
    return target


def build_env(scratch: Path, version: str) -> None:
    """A virtual environment of ``version`` in ``scratch``, checked to run it (``venv`` is quick without pip: the
    harness's own pip installs into it)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(scratch)], f"creating the {PACKAGE} {version} "
         "environment", version)
    _run([sys.executable, "-m", "pip", "--python", str(env_python(scratch)), "install", "--no-deps",
          "--only-binary=:all:", "--no-input", "--disable-pip-version-check", "-q", f"{PACKAGE}=={version}"],
         f"installing {PACKAGE} {version}", version)
    link_project(site_packages(scratch))
    reported = check_env(scratch)
    if reported["version"] != version:
        raise ClientReleaseError(f"the {PACKAGE} {version} environment runs {PACKAGE} {reported['version']}")
    log.info("%s %s ready (librdkafka %s)", PACKAGE, version, reported["librdkafka"])


def link_project(site: Path) -> None:
    """The ``.pth`` that lets the environment import the project and .venv's packages, after its own."""
    harness_sites = dict.fromkeys(Path(sysconfig.get_path(kind)) for kind in ("purelib", "platlib"))
    lines = [os.path.relpath(path, site) for path in (REPO_ROOT, *harness_sites)]
    (site / PTH_NAME).write_text("".join(f"{line}\n" for line in lines))


def check_env(env: Path) -> dict[str, str]:
    """What the environment's interpreter imports: its confluent_kafka's version, librdkafka's, and the
    file (which must be its own, not .venv's), after importing the workload modules."""
    script = CHECK_SCRIPT.format(modules=WORKLOAD_MODULES)
    try:
        result = subprocess.run([str(env_python(env)), "-c", script], capture_output=True, text=True,
                                cwd=tempfile.gettempdir(), timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ClientReleaseError(f"the {env.parent.name} environment's interpreter did not answer within "
                                 f"{CHECK_TIMEOUT_S}s") from None
    if result.returncode != 0:
        raise ClientReleaseError(f"{PACKAGE} {env.parent.name} cannot run the workload: {last_line(result.stderr)}")
    reported: dict[str, str] = json.loads(result.stdout.strip().splitlines()[-1])
    if not Path(reported["file"]).resolve().is_relative_to(env.resolve()):
        raise ClientReleaseError(f"the {env.parent.name} environment imports another confluent_kafka "
                                 f"({reported['file']})")
    return reported


def _run(cmd: list[str], what: str, version: str) -> None:
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ClientReleaseError(f"{what} took over {INSTALL_TIMEOUT_S}s") from None
    if result.returncode != 0:
        raise ClientReleaseError(pip_failure(version, result.stderr + result.stdout) or
                                 f"{what} failed (exit {result.returncode}): {last_line(result.stderr)}")


def pip_failure(version: str, output: str) -> str | None:
    """pip's "no such version" in one line, with the range of releases that would install here; None for any
    other failure."""
    found = re.search(r"satisfies the requirement \S+ \(from versions: ([^)]*)\)", output)
    if found is None:
        return None
    finals = [v.strip() for v in found.group(1).split(",") if re.fullmatch(r"\d+(\.\d+)+", v.strip())]
    here = f"{finals[0]} to {finals[-1]}" if finals else "none"
    return (f"{PACKAGE} {version}: the package index has no such release with a wheel for Python "
            f"{sys.version_info.major}.{sys.version_info.minor} on this machine (releases that install here: {here})")


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"
