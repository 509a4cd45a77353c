"""Merging the folders of a nightly's shards into one tree of runs, as one unsharded nightly would have left it.

A shard's artifact is a runs root: ``<scenario>/<stamp>/`` run directories
and ``nightly-logs/`` (each run's log and outcome record, the shard's record).
``kchaos matrix ROOT [ROOT...] [--out DIR] [--junit FILE]`` copies every run
directory and record of the roots into the output root (the first root
unless ``--out``; hard links where the file system allows them, so a history
is not stored twice), then writes index.html and the JUnit file there from
the merged tree. So each link in index.html is the same relative path an
unsharded nightly writes, the output root can be published alone, and
matrix and JUnit are byte for byte what one nightly of the same runs gives.
Nothing is copied when a conflict is found (two different runs or records
under one name): one line, exit 2.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import sys
from pathlib import Path

from catalogue.exits import EXIT_VALID, HarnessError
from rundir.layout import CLUSTER, NIGHTLY_LOGS, RESULTS, SCENARIO, RunDir
from verdicts.junit import (OUTCOME_SUFFIX, SHARD_SUFFIX, append_step_summary, clear_outcomes, load_outcomes,
                            load_shards, outcome_records, save_timings, step_summary, write_junit)
from verdicts.matrix import write_matrix


def run_dirs(root: Path) -> list[Path]:
    """Every run directory (``<scenario>/<stamp>/`` with a history/ folder) under root, finished or not."""
    return [p for p in sorted(root.glob("*/*")) if p.parent.name != NIGHTLY_LOGS and RunDir(p).history.is_dir()]


def record_files(root: Path) -> list[Path]:
    """The nightly's outcome records with their logs, and its shard records, under root."""
    logs = root / NIGHTLY_LOGS
    if not logs.is_dir():
        return []
    files = []
    for record in sorted(logs.glob(f"*{OUTCOME_SUFFIX}")):
        files.append(record)
        log = logs / f"{record.name.removesuffix(OUTCOME_SUFFIX)}.log"
        if log.is_file():
            files.append(log)
    return files + sorted(logs.glob(f"*{SHARD_SUFFIX}"))


def _same(a: Path, b: Path) -> bool:
    """Whether b already holds what a holds: the same place, or equal bytes (a run: its results and scenario)."""
    if a.exists() and b.exists() and os.path.samefile(a, b):
        return True
    if a.is_dir():
        return all(_same(a / name, b / name) for name in (RESULTS, SCENARIO) if (a / name).exists()) \
            and all((b / name).exists() == (a / name).exists() for name in (RESULTS, SCENARIO))
    return b.is_file() and filecmp.cmp(a, b, shallow=False)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def _copy_run(src: Path, dst: Path) -> None:
    """A run directory without cluster/ (the nodes' data while they ran: not part of a finished run)."""
    shutil.copytree(src, dst, copy_function=_link_or_copy,
                    ignore=lambda folder, names: [CLUSTER] if Path(folder) == src and CLUSTER in names else [])


def merge_roots(roots: list[Path], out: Path) -> int:
    """Copy every run directory and nightly record of ``roots`` into ``out``; how many files or runs were copied.

    When ``out`` is none of the roots, the records of an earlier nightly in it are forgotten first, as a
    nightly does, so its JUnit file is the merged shards' alone.
    """
    plan: dict[Path, Path] = {}  # destination -> source
    for root in roots:
        for src in [*run_dirs(root), *record_files(root)]:
            dst = out / src.relative_to(root)
            earlier = plan.get(dst)
            if earlier is not None and not _same(earlier, src):
                raise HarnessError(f"{src} and {earlier} differ: two runs or records under one name "
                                   "(roots of different nightlies?)")
            plan.setdefault(dst, src)
    counts = {name.removesuffix(SHARD_SUFFIX).rpartition("-of-")[2] for name in (d.name for d in plan)
              if name.endswith(SHARD_SUFFIX)}
    if len(counts) > 1:
        raise HarnessError(f"the roots hold shards of nightlies split {' and '.join(sorted(counts))} ways: "
                           "merge the shards of one nightly")
    if all(out.resolve() != root.resolve() for root in roots):
        clear_outcomes(out / NIGHTLY_LOGS)
    copies = {dst: src for dst, src in plan.items() if not (dst.exists() and _same(src, dst))}
    for dst, src in copies.items():
        if dst.exists() and src.is_dir():
            raise HarnessError(f"{dst} already holds another run than {src}")
    for dst, src in sorted(copies.items()):
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            _copy_run(src, dst)
        else:
            dst.unlink(missing_ok=True)  # a log an earlier nightly left: its record is gone
            _link_or_copy(str(src), str(dst))
    return len(copies)


def missing_shards(shards: list[dict]) -> list[int]:
    """The shards of the nightly no root held (a machine that died before it kept its runs); said on stderr."""
    if not shards:
        return []
    count = int(str(shards[0]["shard"]).split("/")[1])
    missing = sorted(set(range(1, count + 1)) - {int(str(s["shard"]).split("/")[0]) for s in shards})
    if missing:
        print(f"kchaos: warning: shard(s) {', '.join(map(str, missing))} of {count} missing: their runs are not in "
              "the matrix nor in the JUnit file", file=sys.stderr)
    return missing


def matrix_cmd(roots: list[Path], out: Path, junit: Path | None) -> int:
    """``kchaos matrix``: merge the roots into out (nothing to do for one root), write index.html and JUnit."""
    merging = len(roots) > 1 or out.resolve() != roots[0].resolve()
    if merging:
        print(f"merged {merge_roots(roots, out)} run(s) and record(s) into {out}")
        missing_shards(load_shards(out / NIGHTLY_LOGS))
        if outcome_records(out / NIGHTLY_LOGS):  # the whole nightly's: what later shards balance by
            save_timings(out / NIGHTLY_LOGS, load_outcomes(out / NIGHTLY_LOGS))
    print(f"matrix: {write_matrix(out)}")
    if junit is not None:
        outcomes = load_outcomes(out / NIGHTLY_LOGS)
        if not outcomes:
            raise HarnessError(f"{out / NIGHTLY_LOGS}: no nightly outcome record (*{OUTCOME_SUFFIX}); "
                               "--junit needs the folders `kchaos nightly` wrote")
        print(f"junit: {write_junit(outcomes, junit)}")
        append_step_summary(step_summary(outcomes, load_shards(out / NIGHTLY_LOGS)))
    return EXIT_VALID
