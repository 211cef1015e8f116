"""`judge calibrate`: the command that measures judge's own noise for a target on this machine."""

from __future__ import annotations

import math
from pathlib import Path

import click

from .app import Context, command, emit_json, err, main, out
from ..errors import JudgeError


@command(main, "calibrate", creates=True)
@click.option("--target", required=True, help="A name under --kernels, or a path to a GPU MODE problem directory.")
@click.option("--aa", type=click.IntRange(2, 20), default=3, show_default=True,
              help="How many times the base is judged against an identical copy of itself.")
@click.option("--slowdowns", default="0.5,1,2,5", show_default=True,
              help="Calibrated slowdowns of the base, in percent of its own time, comma-separated.")
@click.option("--timing-budget", type=float, help="Seconds of timing per comparison before no more pairs are added.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"), show_default=True)
def calibrate_cmd(ctx: Context, target, aa, slowdowns, timing_budget, work_dir, as_json: bool):
    """Measure judge's noise for a target on this machine: the base against identical copies of itself, then
    against copies slowed by known fractions; prints each benchmark's noise floor and the smallest slowdown found,
    and keeps the A/A runs in the ledger, where they set the floor of the target's verdicts."""
    try:
        fractions = tuple(float(part) / 100 for part in slowdowns.split(",") if part.strip())
    except ValueError:
        raise JudgeError(f"--slowdowns: '{slowdowns}' is not a comma-separated list of percentages") from None
    if not fractions or any(not 0 < f < 1 for f in fractions):
        raise JudgeError(f"--slowdowns: '{slowdowns}': each slowdown is a percentage above 0 and below 100")
    if ctx.remote is not None:
        raise JudgeError("judge calibrate measures this machine: leave out --server and JUDGE_SERVER")
    from rich.table import Table

    from .. import actions
    from ..noise import Floor
    from ..targets import find_target
    from .progress import RunProgress

    resolved = find_target(target, ctx.kernels)
    with RunProgress(err, enabled=not as_json) as progress:
        result = actions.calibrate(ctx.ledger, resolved, work_dir, aa=aa, slowdowns=fractions,
                                   budget_s=timing_budget, on_event=progress.event)
    if as_json:
        emit_json(result)
        return
    floor = Floor.from_json(result["floor"])
    out.print(f"calibration #{result['id']} · {resolved.name} · base: {result['base_origin']}", markup=False)
    out.print(f"A/A verdicts: {', '.join(str(v) for v in result['aa_verdicts'])}; bias "
              f"{math.expm1(result['bias'] or 0):+.2%}; noise floor of the geomean: {floor.words()}", markup=False)
    table = Table(title="per benchmark", title_justify="left")
    for column in ("benchmark", "noise floor", "smallest slowdown found"):
        table.add_column(column, overflow="fold")
    for bench in result["per_benchmark"]:
        found = "none of those tried" if bench["smallest_found"] is None else f"{bench['smallest_found']:.1%}"
        table.add_row(f"{bench['index']}: {bench['label']}", f"{bench['floor']:.2%}", found)
    out.print(table)
    rows = ", ".join(f"{run['fraction']:.1%}: {run.get('decision', run.get('error'))}" for run in result["slowdowns"])
    out.print(f"slowdowns of the geomean: {rows}", markup=False)
