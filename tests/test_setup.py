"""scripts/setup.sh chooses its Debian packages without harming a host's own Docker, and installs the locked
Python versions. Run with a fake ``docker`` and ``dpkg-query`` on PATH: nothing is installed or started."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SETUP = REPO / "scripts" / "setup.sh"
BASH = shutil.which("bash") or "/bin/bash"


def print_packages(tmp_path: Path, *, engine: bool, dockerd: bool, installed: tuple[str, ...] = (),
                   os_id: str = "debian", base_image: str | None = None) -> list[str]:
    """What ``setup.sh --print-packages`` would install, on a PATH of fakes (and dirname, grep), on a host
    whose /etc/os-release says ``ID=<os_id>``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    os_release = tmp_path / "os-release"
    os_release.write_text(f'NAME="{os_id}"\nID={os_id}\nID_LIKE=debian\n' if os_id != "debian" else "ID=debian\n")
    env = {"KCHAOS_OS_RELEASE": str(os_release), **({"KCHAOS_BASE_IMAGE": base_image} if base_image else {})}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "grep"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    fakes = {"docker": f"exit {0 if engine else 1}",  # `docker info`: an engine answers, or none
             "dpkg-query": 'case " $FAKE_INSTALLED " in *" $3 "*) printf "install ok installed" ;; *) exit 1 ;; esac'}
    if dockerd:
        fakes["dockerd"] = "exit 0"
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    result = subprocess.run([BASH, str(SETUP), "--print-packages"], capture_output=True, text=True, timeout=60,
                            env={"PATH": str(bin_dir), "FAKE_INSTALLED": " ".join(installed), **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_an_answering_engine_keeps_docker_io_out(tmp_path: Path) -> None:
    chosen = print_packages(tmp_path, engine=True, dockerd=False)
    assert "docker.io" not in chosen and "mmdebstrap" in chosen and "iptables" in chosen


def test_an_installed_dockerd_keeps_docker_io_out_even_when_stopped(tmp_path: Path) -> None:
    assert "docker.io" not in print_packages(tmp_path, engine=False, dockerd=True)


def test_docker_io_is_chosen_only_where_there_is_no_docker_at_all(tmp_path: Path) -> None:
    assert print_packages(tmp_path, engine=False, dockerd=False)[0] == "docker.io"


@pytest.mark.parametrize("engine", [True, False])
def test_nothing_is_chosen_when_dpkg_has_it_all(tmp_path: Path, engine: bool) -> None:
    text = SETUP.read_text()
    packages = re.search(r"^PACKAGES=\((.*)\)$", text, re.MULTILINE)
    assert packages is not None
    assert print_packages(tmp_path, engine=engine, dockerd=False,
                          installed=("docker.io", "mmdebstrap", *packages[1].split())) == []


def test_a_host_that_is_not_debian_gets_debian_s_keyring_for_mmdebstrap(tmp_path: Path) -> None:
    chosen = print_packages(tmp_path, engine=True, dockerd=False, os_id="ubuntu")
    assert "mmdebstrap" in chosen and "debian-archive-keyring" in chosen
    assert "debian-archive-keyring" not in print_packages(tmp_path / "d", engine=True, dockerd=False)


def test_a_base_image_of_one_s_own_needs_no_mmdebstrap(tmp_path: Path) -> None:
    chosen = print_packages(tmp_path, engine=True, dockerd=False, os_id="ubuntu", base_image="my-jre17:1")
    assert "mmdebstrap" not in chosen and "debian-archive-keyring" not in chosen and "iptables" in chosen


def test_an_unknown_argument_is_one_line_and_exit_2() -> None:
    result = subprocess.run([BASH, str(SETUP), "--install-everything"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--print-packages" in result.stderr


# --- the lock --------------------------------------------------------------------------------------------


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_is_pinned_in_the_lock() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(d for extra in project["optional-dependencies"].values() for d in extra)]
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"constraints.txt: {line!r} is not name==version"
            pins[canonical(name)] = version
    missing = [d for d in wanted if canonical(re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0]) not in pins]
    assert not missing, f"not in constraints.txt (make lock): {missing}"


def test_the_setup_stamp_covers_the_lock() -> None:
    """A new constraints.txt must reinstall .venv: the stamp hashes it with pyproject.toml."""
    text = SETUP.read_text()
    assert re.search(r"want=\$\(cat pyproject.toml constraints.txt \| sha256sum", text)
    assert "pip install -q -c constraints.txt -e '.[test,docs]'" in text
