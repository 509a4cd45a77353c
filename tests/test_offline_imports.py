"""The offline stages stand alone: `kchaos check`, `report`, `forensics` and `matrix` need no cluster library, the
room (rundir/, verdicts/, checkers/, forensics/) imports nothing of the stages that run clusters, no module of the
project imports another in a circle or takes another's private names, and package imports point one way, down the
data flow (docs/architecture.md, "Import order, and why"): a package imports only packages below it, and the
catalogue at the bottom imports nothing of kchaos."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from test_verdict import ten_acks_read_back_to

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("catalogue", "checkers", "clusters", "faults", "forensics", "harness", "rundir", "spark_analysis",
            "verdicts", "workloads")
# The stages bottom to top, in the order data flows through them: a package may import only packages before it here.
STAGES = ("catalogue", "rundir", "clusters", "workloads", "faults", "checkers", "spark_analysis", "forensics",
          "verdicts", "harness")
OFFLINE = ("rundir", "verdicts", "checkers", "forensics")
ONLINE = ("clusters", "workloads", "faults")
CLUSTER_LIBRARIES = ("docker", "confluent_kafka", "testcontainers")

# Runs the CLI with the cluster libraries made unimportable, and says which of them got loaded anyway.
WITHOUT_CLUSTER_LIBRARIES = f"""
import importlib.abc, json, sys
BLOCKED = {CLUSTER_LIBRARIES!r}
class Unimportable(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is unimportable in this test")
        return None
sys.meta_path.insert(0, Unimportable())
from harness.cli import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)}}))
"""


def without_cluster_libraries(*argv: str) -> dict:
    result = subprocess.run([sys.executable, "-c", WITHOUT_CLUSTER_LIBRARIES, *argv], capture_output=True,
                            text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_check_report_forensics_and_matrix_run_without_docker_librdkafka_or_testcontainers(tmp_path: Path) -> None:
    run = ten_acks_read_back_to(10, tmp_path, expect={"lost": 0})
    (run / "logs").mkdir()
    (run / "logs" / "broker1.log").write_text("[2026-11-24 07:00:03,250] INFO [KafkaServer id=1] started (x.Y)\n")
    assert without_cluster_libraries("forensics", str(run)) == {"code": 0, "loaded": []}
    assert (run / "history" / "broker-events.jsonl").read_text().startswith('{"kind":"started","node":"broker1"')
    assert without_cluster_libraries("check", str(run), "--engine", "python") == {"code": 0, "loaded": []}
    assert json.loads((run / "results.json").read_text())["expectations"]["outcome"] == "met"
    (run / "report.html").unlink()
    assert without_cluster_libraries("report", str(run)) == {"code": 0, "loaded": []}
    assert (run / "report.html").is_file()
    assert without_cluster_libraries("matrix", str(tmp_path)) == {"code": 0, "loaded": []}


# --- the import graph of the project's own modules, from their source --------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(), str(p))
            for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def imports(tree: ast.Module, modules: set[str]) -> list[tuple[str, list[str]]]:
    """(imported project module, names taken from it) for every import anywhere in the module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            names = [a.name for a in node.names]
            submodules = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in modules]
            found.append((node.module, [n for n in names if f"{node.module}.{n}" not in modules]))
            found += [(m, []) for m in submodules]
    return found


def graph() -> dict[str, set[str]]:
    trees = sources()
    modules = set(trees)
    return {name: {m for m, _ in imports(tree, modules) if m in modules and m != name}
            for name, tree in trees.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_no_module_imports_another_in_a_circle() -> None:
    assert cycles(graph()) == []


def test_the_offline_room_reaches_nothing_that_runs_clusters() -> None:
    edges = graph()
    for start in (m for m in edges if m.split(".")[0] in OFFLINE):
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module in seen:
                continue
            seen.add(module)
            todo += edges.get(module, ())
        assert not [m for m in seen if m.split(".")[0] in ONLINE], f"{start} reaches {sorted(seen)}"


def test_no_module_takes_another_modules_private_names() -> None:
    trees = sources()
    taken = [(name, module, n) for name, tree in trees.items() for module, names in imports(tree, set(trees))
             for n in names if n.startswith("_") and module != name]
    assert taken == []


def source_path(module: str) -> str:
    """The file of a project module, relative to the repository (a package's is its __init__.py)."""
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if (REPO / path).is_dir() else f"{path}.py"


def upward_imports(trees: dict[str, ast.Module]) -> list[str]:
    """``file:line imports module`` for every import, anywhere in a module (functions and TYPE_CHECKING blocks
    too), of a package above the module's own in STAGES."""
    found = []
    for name, tree in trees.items():
        own = STAGES.index(name.split(".")[0])
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported = [node.module]
            else:
                continue  # a relative import stays in its own package
            found += [f"{source_path(name)}:{node.lineno} imports {m} ({m.split('.')[0]} is above {STAGES[own]})"
                      for m in imported if m.split(".")[0] in STAGES and STAGES.index(m.split(".")[0]) > own]
    return found


def test_every_package_has_a_place_in_the_stage_order() -> None:
    assert sorted(STAGES) == sorted(PACKAGES)
    assert sorted(p.parent.name for p in REPO.glob("*/__init__.py")) == sorted(PACKAGES)


def test_every_package_imports_only_packages_below_it() -> None:
    assert upward_imports(sources()) == []


def test_the_catalogue_imports_nothing_of_kchaos() -> None:
    trees = sources()
    modules = set(trees)
    taken = [f"{source_path(name)} imports {m}" for name, tree in trees.items() if name.split(".")[0] == "catalogue"
             for m, _ in imports(tree, modules) if m.split(".")[0] != "catalogue"]
    assert taken == []


def test_the_stage_order_check_finds_an_upward_import() -> None:
    trees = {"clusters.fake": ast.parse("import os\nfrom rundir.layout import RunDir\n\n"
                                        "def f():\n    from workloads.java_client import java_command\n"),
             "verdicts.fake": ast.parse("import harness.errors\nfrom catalogue import exits\n")}
    assert upward_imports(trees) == [
        "clusters/fake.py:5 imports workloads.java_client (workloads is above clusters)",
        "verdicts/fake.py:1 imports harness.errors (harness is above verdicts)"]


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
