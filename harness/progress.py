"""The live progress line of a run: elapsed time, sends, reads, the current fault."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from rundir.phases import PhaseTimer


class RunProgress:
    """A rich progress bar on stderr over the load phase, with the counts beside it; each phase timed."""

    def __init__(self, load_s: float, timer: PhaseTimer | None = None) -> None:
        self.timer = timer if timer is not None else PhaseTimer()
        self._progress = Progress(TextColumn("[bold]{task.fields[phase]:<20}"), BarColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[stats]}"), console=Console(stderr=True),
                                  refresh_per_second=2)
        self._task: TaskID = self._progress.add_task("run", total=load_s, phase="starting", stats="")

    def __enter__(self) -> "RunProgress":
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.timer.stop()
        self._progress.stop()

    def phase(self, name: str) -> None:
        self.timer.start(name)
        self._progress.update(self._task, phase=name)

    def update(self, elapsed_s: float, *, acked: int, failed: int, unknown: int, reads: int, fault: str) -> None:
        stats = (f"acked {acked:,}  failed {failed:,}  unknown {unknown:,}  reads {reads:,}  "
                 f"fault: {fault}")
        self._progress.update(self._task, completed=elapsed_s, stats=stats)
