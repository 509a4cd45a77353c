"""The documentation: the site builds in strict mode, and its generated references match the code.

The reference tables in docs/generated/ are made by scripts/docs_reference.py; the site's build refuses
them when stale (scripts/docs_hooks.py), and MkDocs' strict mode refuses a broken link or anchor.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalogue.faults import FAULT_KINDS
from faults.registry import FAULTS
from faults.targets import TARGET_HELP, TARGETS

REPO = Path(__file__).resolve().parent.parent
MKDOCS = Path(sys.executable).parent / "mkdocs"
SITE_FILES = ("mkdocs.yml", "docs", "scripts", "benchmarks/README.md", "README.md")


def load_reference():
    spec = importlib.util.spec_from_file_location("docs_reference", REPO / "scripts" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(site)], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def copy_of_the_site(tmp_path: Path) -> Path:
    """The site's sources in a folder of their own, to break on purpose."""
    root = tmp_path / "repo"
    for name in SITE_FILES:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    return root


def test_the_generated_references_match_the_code() -> None:
    assert load_reference().stale() == []


def test_every_scenario_key_says_what_it_does() -> None:
    assert load_reference().undocumented_keys() == []


def test_every_fault_kind_option_and_target_is_documented() -> None:
    assert [k.name for k in FAULT_KINDS.values() if not k.proves.strip()] == []
    assert [(kind, name) for kind, fault in FAULTS.items() for name, info in fault.Options.model_fields.items()
            if not (info.description or "").strip()] == []
    assert set(TARGET_HELP) == set(TARGETS)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(REPO, out)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_the_site_builds_in_strict_mode_with_every_page_and_reference(site: Path) -> None:
    pages = {p.name for p in site.glob("*.html")}
    nav = re.findall(r":\s*([\w-]+)\.md\s*$", (REPO / "mkdocs.yml").read_text(), re.M)
    assert {f"{name}.html" for name in nav} <= pages
    faults = (site / "faults.html").read_text()
    assert all(f"<code>{kind}</code>" in faults for kind in FAULT_KINDS)
    keys = (site / "writing-a-scenario.html").read_text()
    assert "<code>workload.producers.client_version</code>" in keys and "<code>faults[].then.after_s</code>" in keys
    assert (site / "images" / "report.png").stat().st_size > 10_000
    remote = [(p.name, m) for p in site.glob("*.html")  # it opens offline: no script, style or font fetched
              for m in re.findall(r'(?:src|href)="(https?://[^"]+)"', p.read_text())
              if re.search(r"\.(?:js|css|woff2?|ttf)(?:\?|$)", m) or "fonts." in m]
    assert remote == []


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = copy_of_the_site(tmp_path)
    with (root / "docs" / "faults.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    result = build(root, tmp_path / "site")
    assert result.returncode != 0 and "no-such-page.md" in result.stderr


def test_a_stale_reference_fails_the_build(tmp_path: Path) -> None:
    root = copy_of_the_site(tmp_path)
    stale = root / "docs" / "generated" / "anomalies.md"
    stale.write_text(stale.read_text().replace("`lost`", "`gone`", 1))
    result = build(root, tmp_path / "site")
    assert result.returncode != 0 and "docs/generated/anomalies.md" in result.stderr


def test_the_readme_is_short_and_its_links_exist() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#\s]+)", text)
    assert links and [link for link in links if not (REPO / link).exists()] == []


def test_no_file_names_a_path_outside_the_repository() -> None:
    """A clone is whole: the design is docs/architecture.md, and no tracked file points at notes beside the
    repository (the first design's file, a sibling folder)."""
    found = subprocess.run(["git", "grep", "-n", "-I", "-e", "DESIGN" + ".md", "-e", "../" + "shared"],
                           cwd=REPO, capture_output=True, text=True).stdout
    assert found == "", found
