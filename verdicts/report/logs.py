"""The few node-log lines the report points at, embedded so the page stays one self-contained file.

A causal chain or an anomaly example names lines of logs/<node>.log (history/broker-events.jsonl and
results.json's ``forensics`` give their numbers). The page cannot open a file next to it reliably (a report
is mailed, attached to CI, opened from an archive), so each named line comes with a few lines around it, in a
<details> the link opens; a whole log is too big to embed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rundir.layout import RunDir

CONTEXT = 3  # lines shown before and after each named line
MAX_EXCERPTS = 120  # the page embeds at most this many excerpts; later references link to the log file
MAX_LINE_CHARS = 400


@dataclass
class Excerpt:
    node: str
    line: int
    lines: list[tuple[int, str]] = field(default_factory=list)  # (number, text)

    @property
    def anchor(self) -> str:
        return log_anchor(self.node, self.line)


def log_anchor(node: str, line: int) -> str:
    """The id of the excerpt around ``line`` of ``logs/<node>.log`` (also what links to it use)."""
    return f"log-{node}-{line}"


def excerpts(run: RunDir, refs: list[tuple[str, int]]) -> list[Excerpt]:
    """The excerpts around each referenced (node, line), in the order first referenced, one read of each log."""
    wanted: list[Excerpt] = []
    seen = set()
    for node, line in refs:
        if (node, line) not in seen and isinstance(line, int) and line > 0 and len(wanted) < MAX_EXCERPTS:
            seen.add((node, line))
            wanted.append(Excerpt(node, line))
    logs = run.node_logs()
    by_node: dict[str, list[Excerpt]] = {}
    for e in wanted:
        by_node.setdefault(e.node, []).append(e)
    for node, group in by_node.items():
        path = logs.get(node)
        if path is None:
            continue
        last = max(e.line for e in group) + CONTEXT
        with path.open(encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, 1):
                if number > last:
                    break
                for e in group:
                    if abs(number - e.line) <= CONTEXT:
                        e.lines.append((number, text.rstrip("\n")[:MAX_LINE_CHARS]))
    return [e for e in wanted if e.lines]
