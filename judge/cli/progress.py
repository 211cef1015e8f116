"""What `judge run` shows while a round runs, fed by the round's events: rich progress on a terminal, a plain line
per stage, case, timed benchmark and verdict in a log, and under --json one JSON object per event on stderr."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..contain import json_safe, terminal
from ..dispatch import describe_place


# A progress event's stage as the terminal and the log say it, where its name alone would not.
STAGE_WORDS = {"sizing": "sizing the memory plan"}


def progress_line(info: dict) -> str:
    """A kernel stage's progress (judge.stages.progress) as one line of a log: per correctness case, per timed
    benchmark of each process pair."""
    head = f"  {terminal(info['proposal'])}: {STAGE_WORDS.get(info['stage'], info['stage'])}"
    if info["stage"] == "sizing":
        return (f"{head}: the reference on benchmark {info['benchmark']} of {info['benchmarks']} "
                f"({terminal(info['label'])}), {info['seconds']:.1f} s so far")
    if info["stage"] == "profile":
        return f"{head}, benchmark {info['benchmark']} of {info['benchmarks']} ({terminal(info['label'])}), " \
               f"{info['seconds']:.1f} s so far"
    if info["stage"] == "timing":
        return (f"{head}, pair {info['pair']}, benchmark {info['benchmark']} of {info['benchmarks']} "
                f"({terminal(info['label'])}), {info['seconds']:.1f} s so far")
    return f"{head}, case {info['case']} of {info['cases']}, {info['seconds']:.1f} s so far"


class JsonEvents:
    """`judge run --json`: each event of the round as it comes, one JSON object per line on stderr, `kind` naming
    it as the server's job events do (stdout keeps the one document at the end)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def event(self, kind: str, **info) -> None:
        line = json.dumps({"kind": kind, **info}, default=lambda value: value.to_json() if hasattr(value, "to_json")
                          else str(value))
        click.echo(json.dumps(json_safe(json.loads(line))), err=True)


class RunProgress:
    """Rich progress for `judge run`: a bar of the compiles, one of the candidates judged (and one per Ray worker)
    beside it, a live line per candidate in correctness or timing (its case, or its pair and benchmark), a line
    per stage and verdict. Where the console is no terminal the live lines are plain lines instead, one per case
    and per timed benchmark. It starts at the first
    event, so that an error before the run starts (e.g. the round is being run already) is its one line alone."""

    def __init__(self, console: Console, enabled: bool):
        self.enabled = enabled
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=console, transient=True)
        self.started = False
        self.task = None
        self.gpu_task = None  # the round's GPU stages: one step per candidate
        self.worker_tasks: dict[str, int] = {}  # per Ray worker (its place as the verdicts name it): candidates done
        self.running: dict[str, int] = {}  # per candidate in its kernel stages: its live line

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
        elif kind == "progress":
            self._running(info)
        elif kind == "evaluated":
            self._done(info["proposal"])
        elif kind == "verdict":
            self._done(info["proposal"])
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
        elif kind == "profile":
            self._done(info["proposal"])
            self.progress.console.print(f"  {terminal(info['proposal'])}: {terminal(info['line'])}", markup=False)
        elif kind == "base-failed":
            self.progress.console.print(f"  {terminal(info['proposal'])}: {terminal(info['reason'])}", markup=False)
        elif kind == "floor":
            self.progress.console.print(f"  noise floor: {info['floor'].words()}", markup=False)
        elif kind == "control-kept":
            self.progress.console.print(f"  (control): {info['words']}", markup=False)
        elif kind == "cpu":
            from ..report.formatting import fmt_device

            self.progress.console.print(f"{info['target']}: runs on this machine's {fmt_device(info['device'])}",
                                        markup=False)

    def _running(self, info: dict) -> None:
        """A candidate's live line: its stage, bar over its cases (correctness) or over a pair's benchmarks
        (timing), time since its first case. In a log, the plain line instead."""
        if not self.progress.console.is_terminal:
            self.progress.console.print(progress_line(info), markup=False)
        name = terminal(info["proposal"])
        if info["stage"] in ("timing", "profile", "sizing"):
            pair = f", pair {info['pair']} (at most {info['max_pairs']})" if info["stage"] == "timing" else ""
            words = f"  {name}: {STAGE_WORDS.get(info['stage'], info['stage'])}{pair}, {terminal(info['label'])}"
            done, total = info["benchmark"] - 1, info["benchmarks"]
        else:
            words, done, total = f"  {name}: correctness", info["case"] - 1, info["cases"]
        if info["proposal"] not in self.running:
            self.running[info["proposal"]] = self.progress.add_task(words, total=total)
        self.progress.update(self.running[info["proposal"]], description=words, completed=done, total=total)

    def _done(self, proposal: str) -> None:
        task = self.running.pop(proposal, None)
        if task is not None:
            self.progress.remove_task(task)

    def _advance(self, where: str | None) -> None:
        """A verdict ends one candidate's GPU stages: a step of the round's bar and of its worker's count."""
        if self.gpu_task is not None:
            self.progress.advance(self.gpu_task)
        if where in self.worker_tasks:
            self.progress.advance(self.worker_tasks[where])
