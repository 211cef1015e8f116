"""The `judge` command: parses arguments, calls the library, prints for people or (`--json`) for agents."""

from __future__ import annotations

import functools
import json
import sqlite3
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import actions, inputs
from .contain import LINE_CAP, json_safe, terminal
from .errors import JudgeError
from .ledger import Ledger
from .migrations import applied
from .run_progress import RunProgress
from .targets import find_target

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class Context:
    def __init__(self, ledger_path: Path, kernels: Path):
        self.ledger_path = ledger_path
        self.kernels = kernels
        self.creates = False  # set per command: only commands that add to a ledger may create one
        self._ledger = None

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.ledger_path, create=self.creates)
        return self._ledger

    def explain(self, error: sqlite3.DatabaseError) -> JudgeError | None:
        return self._ledger.explain(error) if self._ledger is not None else None


def emit_json(data) -> None:
    """`--json` output: contestant text in it without escapes or control characters, each field capped
    (judge/contain.py json_safe)."""
    click.echo(json.dumps(json_safe(json.loads(json.dumps(data, default=str))), indent=2))


def fail(message: str, code: int, as_json: bool):
    """Every error's one way out: one line on stderr, or under --json one JSON object on stdout; same exit code."""
    if as_json:
        click.echo(json.dumps(json_safe({"error": message, "exit": code})))
    else:
        err.print(f"error: {terminal(message, LINE_CAP)}", markup=False)
    sys.exit(code)


def command(group, name=None, creates=False):
    """A subcommand with `--json`, whose JudgeError (or a ledger SQLite refuses) is one line and exit code 2.
    `creates`: whether it may create a missing ledger (others refuse one, so a mistyped --ledger is an error)."""

    def wrap(fn):
        @group.command(name)
        @click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
        @click.pass_obj
        @functools.wraps(fn)
        def run(ctx, *args, **kwargs):
            ctx.creates = creates
            try:
                return fn(ctx, *args, **kwargs)
            except JudgeError as error:
                fail(error.message, 2, kwargs.get("as_json"))
            except sqlite3.DatabaseError as error:
                explained = ctx.explain(error)
                if explained is None:
                    raise
                fail(explained.message, 2, kwargs.get("as_json"))

        return run

    return wrap


class JudgeGroup(click.Group):
    """Under --json every failure, click's usage errors and judge's own bugs included, is one JSON object on
    stdout with the exit code it would have had anyway (a bug's traceback still goes to stderr)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv or not standalone_mode:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as error:
            fail(error.format_message(), error.exit_code, True)
        except click.exceptions.Abort:
            fail("aborted", 1, True)
        except Exception as error:
            traceback.print_exc()
            fail(f"internal error: {type(error).__name__}: {error}", 1, True)
        sys.exit(code if isinstance(code, int) else 0)


LEDGER_HELP = ("The SQLite ledger. init, submit, shark add and run --target create it when it is missing; "
               "every other command refuses a missing ledger.")


@click.group(cls=JudgeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path), default=Path("ledger.db"), show_default=True,
              envvar="JUDGE_LEDGER", help=LEDGER_HELP)
@click.option("--kernels", type=click.Path(path_type=Path), default=Path("kernels"), show_default=True,
              help="Where target directories live.")
@click.version_option(package_name="judge")
@click.pass_context
def main(click_ctx, ledger_path: Path, kernels: Path):
    """judge: the referee for GPU-kernel optimization contests."""
    click_ctx.obj = Context(ledger_path, kernels)


@command(main, "init", creates=True)
def init_cmd(ctx: Context, as_json: bool):
    """Create the ledger (or bring its schema up to date)."""
    ledger = ctx.ledger
    names = applied(ledger.db)
    if as_json:
        emit_json({"ledger": str(ledger.path), "migrations": names})
    else:
        out.print(f"ledger {ledger.path}: schema at {names[-1]} ({len(names)} migrations applied)", markup=False)


@command(main, "submit", creates=True)
@click.argument("paths", nargs=-1, required=True)
def submit_cmd(ctx: Context, paths: tuple[str, ...], as_json: bool):
    """Submit proposal directories (or a folder of them), or one JSON object on stdin with '-'.
    Creates the ledger if it is missing."""
    stdin_text = inputs.read_stdin() if "-" in paths else None
    items = actions.load_submissions(list(paths), stdin_text)
    results = actions.submit(ctx.ledger, items, ctx.kernels)
    if as_json:
        emit_json([asdict(r) for r in results])
        return
    for r in results:
        out.print(f"{r.status:9} {r.proposal_id} revision {r.revision}", markup=False)


@main.group("shark")
def shark_group():
    """Define judging agents and their rubrics."""


@command(shark_group, "add", creates=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def shark_add_cmd(ctx: Context, paths: tuple[Path, ...], as_json: bool):
    """Add sharks from TOML/JSON files; a changed rubric becomes a new version. Creates the ledger if it is missing."""
    sharks = actions.load_sharks(list(paths))
    results = actions.add_sharks(ctx.ledger, sharks)
    if as_json:
        emit_json(results)
        return
    for r in results:
        out.print(f"{r['status']:9} shark {r['shark']} version {r['version']}", markup=False)


@command(shark_group, "list")
def shark_list_cmd(ctx: Context, as_json: bool):
    """List sharks and their rubrics (needs an existing ledger)."""
    sharks = actions.shark_list(ctx.ledger)
    if as_json:
        emit_json(sharks)
        return
    for s in sharks:
        criteria = ", ".join(f"{c['name']} {c['weight']}" + (f" ({c['bound']})" if c["bound"] else "") for c in s["criteria"])
        out.print(f"{s['name']} v{s['version']}: {criteria}", markup=False)


@command(main, "vote")
@click.argument("paths", nargs=-1, required=True)
def vote_cmd(ctx: Context, paths: tuple[str, ...], as_json: bool):
    """Record votes from files or folders of TOML/JSON, or JSON on stdin with '-'; totals are recomputed.
    Needs an existing ledger with the sharks and the proposals voted on."""
    stdin_text = inputs.read_stdin() if "-" in paths else None
    items = actions.load_vote_inputs(list(paths), stdin_text)
    cast = actions.cast_votes(ctx.ledger, items)
    if as_json:
        emit_json([asdict(c) for c in cast])
        return
    for c in cast:
        stated = f", stated {c.stated_total}" if c.stated_total is not None else ""
        flag = f"  FLAG: {c.flag}" if c.flag else ""
        out.print(f"{c.status:9} vote #{c.vote_id}: {c.shark} on {c.proposal} r{c.revision}: total {c.computed_total}{stated}{flag}", markup=False)


@command(main, "run")
@click.option("--round", "round_", type=int, help="The round to run (default: the latest round with proposals).")
@click.option("--target", help="Only this target: a name under --kernels, or a path to a GPU MODE problem directory.")
@click.option("--again", is_flag=True, help="Evaluate again even proposals that already have a verdict (adds new rows).")
@click.option("--workers", type=int, help="Parallel compile processes (default: CPU count).")
@click.option("--timing-budget", type=float, help="Seconds of timing per candidate before the stopping rule gives up.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".judge-cache"), show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True,
              help="Where the round's report is written at the end.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Correctness and timing on a Ray cluster, one actor per GPU (pip install 'judge[ray]'); "
                   "ADDRESS as ray.init takes it, none: the cluster this machine knows, or a local one.")
@click.option("--gpus", help="Correctness and timing on these GPUs of this machine, one at a time each, through a "
                             "local Ray: 'all' or a list such as 0,1.")
def run_cmd(ctx: Context, round_, target, again, workers, timing_budget, work_dir, cache_dir, out_dir, ray_address,
            gpus, as_json: bool):
    """Evaluate a round: patch, compile, check and time every proposal with a patch, then write the round's report.
    Refused while another judge process runs the same round. Needs an existing ledger, except with --target
    (which evaluates the target's base even without proposals), where it creates a missing one."""
    from .rounds import Settings

    ctx.creates = target is not None
    explicit = find_target(target, ctx.kernels) if target else None
    ledger = ctx.ledger
    if round_ is None:
        round_ = actions.latest_round(ledger) if explicit is None else _latest_or_first(ledger)
    from .dispatch import parse_gpus

    settings = Settings(kernels_dir=ctx.kernels, work_dir=work_dir, cache_dir=cache_dir, workers=workers,
                        timing_budget_s=timing_budget, again=again, ray=ray_address is not None,
                        ray_address=ray_address or None, gpus=parse_gpus(gpus) if gpus else None)
    with RunProgress(err, enabled=not as_json) as progress:
        summaries = actions.run(ledger, round_, explicit, settings, progress.event, out_dir)
    if as_json:
        emit_json(summaries)
        return
    for s in summaries:
        # Cells as rich Text: a contestant's `[bold]` is text, not markup. Each capped: rich folds a long cell in
        # time that grows with the square of its length (a 16 MiB reason kept `judge run` busy for minutes).
        title = f"round {s['round']} · {terminal(s['target'])} · base: {terminal(s['base_origin'])}"
        table = Table(title=Text(title), title_justify="left")
        for column in ("proposal", "rev", "outcome", "eval", "reason"):
            table.add_column(column, overflow="fold")
        for v in s["verdicts"]:
            table.add_row(Text(terminal(v["proposal_id"])), str(v["revision"]),
                          v["outcome"] + (" (earlier run)" if v["skipped"] else ""),
                          f"#{v['evaluation_id']}" if v["evaluation_id"] else "", Text(terminal(v["reason"])))
        for p in s["pitches"]:
            table.add_row(Text(terminal(p)), "", "pitch", "", "no patch yet: scored by sharks, not evaluated")
        out.print(table)
        out.print(f"winner: {terminal(s['winner']) or _no_winner(s['verdicts'])}", markup=False)
        out.print(time_line(s["time"]), markup=False)
    out.print(f"report: {summaries[0]['report']}" if summaries else "no target ran", markup=False)


def time_line(spent: dict) -> str:
    """`time: 93.1 s wall; compile 12.0 s, static 4.1 s, correctness 20.3 s, ...`: where a run's time went."""
    stages = spent.get("stages_s", {})
    order = ["patch", "screen", "compile", "static", "correctness", "runner starts", "timing", "measuring"]
    parts = [f"{name} {stages[name]:.1f} s" for name in order if stages.get(name)]
    return f"time: {spent.get('wall_s', 0.0):.1f} s wall" + (f"; {', '.join(parts)}" if parts else "")


def _no_winner(verdicts: list[dict]) -> str:
    """Why a round has no winner, in the report's words: nothing timed, or nothing significantly faster."""
    timed = {"faster", "slower", "inconclusive", "unchanged", "implausible"}
    if not any(v["outcome"] in timed for v in verdicts):
        return "none (nothing was timed in this round)"
    return "none (no proposal was significantly faster than the base)"


def _latest_or_first(ledger: Ledger) -> int:
    try:
        return actions.latest_round(ledger)
    except JudgeError:
        return 1


@command(main, "report")
@click.option("--round", "round_", type=int, help="The round to report (default: the latest that ran).")
@click.option("--target", help="Only this target.")
@click.option("--leaderboard", is_flag=True, help="Render the leaderboard across rounds instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
def report_cmd(ctx: Context, round_, target, leaderboard, out_dir, as_json: bool):
    """Render a round's Markdown scorecard (or the leaderboard) and print its path (needs an existing ledger)."""
    from . import report

    ledger = ctx.ledger
    if leaderboard:
        path = report.render_leaderboard(ledger, out_dir)
        if as_json:
            emit_json({"path": str(path), "leaderboard": report.leaderboard_view(ledger)})
        else:
            out.print(str(path), markup=False)
        return
    if round_ is None:
        round_ = ledger.latest_round_number()
        if round_ is None:
            raise JudgeError("no round has run yet (run one with 'judge run')")
    path = report.render_round(ledger, round_, out_dir, target=target)
    if as_json:
        emit_json({"path": str(path), "round": report.round_view(ledger, round_, target=target)})
    else:
        out.print(str(path), markup=False)


@command(main, "brief")
@click.option("--round", "round_", type=int, help="The round to brief (default: the one after the latest that ran).")
@click.option("--target", help="The target (needed when the ledger has several).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
def brief_cmd(ctx: Context, round_, target, out_dir, as_json: bool):
    """Write the brief for a round: the base, its times against the speed of light, its resources, what was
    tried, what is open, the rules; print its path (needs an existing ledger)."""
    path, view = actions.brief(ctx.ledger, ctx.kernels, target, round_, out_dir)
    if as_json:
        emit_json({"path": str(path), "brief": view})
    else:
        out.print(str(path), markup=False)


@command(main, "clear")
@click.argument("evaluation_id", type=int)
@click.option("--note", required=True, help="Why the result is real; kept with the clearance.")
@click.option("--by", "cleared_by", default=lambda: __import__("getpass").getuser(), show_default="your user name",
              help="Who clears it.")
def clear_cmd(ctx: Context, evaluation_id: int, note: str, cleared_by: str, as_json: bool):
    """Clear an implausible result after checking it by hand: it then stands at what its timing said
    (needs an existing ledger)."""
    result = actions.clear_evaluation(ctx.ledger, evaluation_id, note, cleared_by)
    if as_json:
        emit_json(result)
        return
    out.print(f"evaluation {evaluation_id} cleared: it stands as {result['outcome']} ({terminal(result['reason'])})",
              markup=False)
    out.print(f"round winner: {terminal(result['round_winner']) or 'none'}", markup=False)


@command(main, "list")
@click.option("--round", "round_", type=int, help="Only this round.")
def list_cmd(ctx: Context, round_, as_json: bool):
    """List proposals (latest revisions) with their latest verdicts (needs an existing ledger)."""
    rows = actions.list_proposals(ctx.ledger, round_)
    if as_json:
        emit_json(rows)
        return
    cells = [{"id": terminal(r["id"]), "rev": str(r["revision"]), "round": str(r["round"]), "target": terminal(r["target"]),
              "author": terminal(r["author"]), "claim": f"{r['claim'][0]}-{r['claim'][1]}x" if r["claim"] else "",
              "outcome": r["outcome"], "geomean": f"{r['geomean_speedup']:.3f}x" if r["geomean_speedup"] else ""}
             for r in rows]
    columns = fitting(LIST_COLUMNS, cells, out.width)
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for c in cells:
        table.add_row(*(Text(c[column]) for column in columns))
    out.print(table)


LIST_COLUMNS = ("id", "rev", "round", "target", "author", "claim", "outcome", "geomean")
DROPPED_FIRST = ("author", "target", "claim", "round", "rev", "geomean")


def fitting(columns: tuple[str, ...], cells: list[dict], width: int) -> list[str]:
    """The columns that fit `width` uncut, dropping the least needed first: an id is never truncated (at worst,
    in a terminal too narrow for the id and the outcome, it wraps)."""
    widths = {c: max([len(c)] + [len(row[c]) for row in cells]) for c in columns}
    keep = list(columns)
    for name in DROPPED_FIRST:
        if sum(widths[c] for c in keep) + 3 * len(keep) + 1 <= width:
            break
        keep.remove(name)
    return keep


@command(main, "show")
@click.argument("proposal_id")
def show_cmd(ctx: Context, proposal_id: str, as_json: bool):
    """Everything about one proposal: revisions, evaluations, stages, votes (needs an existing ledger)."""
    data = actions.show_proposal(ctx.ledger, proposal_id)
    if as_json:
        emit_json(data)
        return
    for rev in data["revisions"]:
        claim = rev["claim"]
        claim_text = f"claims {claim['low']}-{claim['high']}x" if claim else "no claim"
        out.print(f"{terminal(proposal_id)} r{rev['revision']} (round {rev['round']}, {terminal(rev['target'])}): "
                  f"{terminal(rev['title'])} by {terminal(rev['author'])}; {claim_text}", markup=False)
        for e in rev["evaluations"]:
            out.print(f"  evaluation #{e['evaluation_id']}: {e['outcome']} ({terminal(e['reason'])})", markup=False)
            for s in e["stages"]:
                out.print(f"    {s['stage']:12} {s['status']:9} {terminal(s['summary'])}", markup=False)
    for v in data["votes"]:
        flag = f"  FLAG: {v['flag']}" if v["flag"] else ""
        out.print(f"  vote {terminal(v['shark'])}: total {v['total']}{flag}", markup=False)


@command(main, "status")
def status_cmd(ctx: Context, as_json: bool):
    """Counts of what the ledger holds and where each round stands (needs an existing ledger)."""
    data = actions.status(ctx.ledger)
    if as_json:
        emit_json(data)
        return
    counts = ", ".join(f"{v} {k}" for k, v in data["counts"].items())
    out.print(f"{data['ledger']}: {counts}", markup=False)
    for r in data["rounds"]:
        outcomes = ", ".join(f"{n} {o}" for o, n in r["outcomes"].items()) or "no verdicts"
        out.print(f"  {terminal(r['target'])} round {r['round']}: {outcomes}; winner: {terminal(r['winner']) or 'none'}; "
                  f"base: {terminal(r['base_origin'])}", markup=False)


if __name__ == "__main__":
    main()
