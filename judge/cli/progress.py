"""What `judge run` shows on the terminal while a round runs: rich progress fed by the round's events."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..contain import terminal
from ..dispatch import describe_place


class RunProgress:
    """Rich progress for `judge run`: a bar of the compiles, one of the candidates judged (and one per Ray worker)
    beside it, a line per stage and verdict. It starts at the first
    event, so that an error before the run starts (e.g. the round is being run already) is its one line alone."""

    def __init__(self, console: Console, enabled: bool):
        self.enabled = enabled
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=console, transient=True)
        self.started = False
        self.task = None
        self.gpu_task = None  # the round's GPU stages: one step per candidate
        self.worker_tasks: dict[str, int] = {}  # per Ray worker (its place as the verdicts name it): candidates done

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.started:
            self.progress.__exit__(*exc)

    def event(self, kind: str, **info) -> None:
        if not self.enabled:
            return
        if not self.started:
            self.progress.__enter__()
            self.started = True
        if kind == "compile-start":
            self.task = self.progress.add_task("compiling", total=info["total"])
        elif kind == "compile-progress" and self.task is not None:
            self.progress.update(self.task, completed=info["done"])
        elif kind == "stage":
            self.progress.console.print(f"  {terminal(info['proposal'])}: {info['stage']} ...", markup=False)
        elif kind == "gpu-start":
            # Every candidate that compiles gets one step when its verdict comes (a compile failure's too), while
            # the compiling bar goes on beside it (judge.stages.compile.pipeline).
            self.gpu_task = self.progress.add_task("candidates judged", total=info["total"])
        elif kind == "verdict":
            where = f" [{info['where']}]" if info.get("where") else ""
            self.progress.console.print(f"  {terminal(info['proposal'])}: {info['outcome']} ({terminal(info['reason'])}){where}",
                                        markup=False)
            self._advance(info.get("where"))
        elif kind == "workers":
            for n, place in enumerate(info["places"], start=1):
                self.progress.console.print(f"worker {n}: {describe_place(place)}", markup=False)
                self.worker_tasks[describe_place(place)] = self.progress.add_task(f"  worker {n}", total=None)
        elif kind == "skip":
            self.progress.console.print(f"  {terminal(info['proposal'])}: {info['outcome']} in an earlier run, kept",
                                        markup=False)
        elif kind == "probe":
            self.progress.console.print(f"{info['target']}: looking for a GPU ...", markup=False)
        elif kind == "calibrate":
            self.progress.console.print(f"  {info['what']} ...", markup=False)
        elif kind == "floor":
            self.progress.console.print(f"  noise floor: {info['floor'].words()}", markup=False)
        elif kind == "cpu":
            from ..report.formatting import fmt_device

            self.progress.console.print(f"{info['target']}: runs on this machine's {fmt_device(info['device'])}",
                                        markup=False)


    def _advance(self, where: str | None) -> None:
        """A verdict ends one candidate's GPU stages: a step of the round's bar and of its worker's count."""
        if self.gpu_task is not None:
            self.progress.advance(self.gpu_task)
        if where in self.worker_tasks:
            self.progress.advance(self.worker_tasks[where])
