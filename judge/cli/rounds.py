"""The `judge` commands about rounds: run, report, brief, base, clear (registered on judge.cli.main's group)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .app import Context, command, emit_json, err, fail, main, out
from ..contain import terminal
from ..errors import JudgeError


@command(main, "run")
@click.option("--round", "round_", type=int,
              help="The round to run (default, per target: the one its proposals wait for, or its last to resume).")
@click.option("--target", help="Only this target: a name under --kernels, or a path to a GPU MODE problem directory.")
@click.option("--again", is_flag=True, help="Evaluate again even proposals that already have a verdict (adds new rows).")
@click.option("--workers", type=int, help="Parallel compiles (default: one per core that no timed pair uses).")
@click.option("--timing-budget", type=float, help="Seconds of timing per candidate before the stopping rule gives up.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".judge-cache"), show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True,
              help="Where the round's report is written at the end.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Correctness and timing on a Ray cluster, one actor per GPU (a CPU target: per block of a node's "
                   "CPUs; pip install 'judge[ray]'); "
                   "ADDRESS as ray.init takes it, none: the cluster this machine knows, or a local one.")
@click.option("--gpus", help="Correctness and timing on these GPUs of this machine, one at a time each, through a "
                             "local Ray: 'all' or a list such as 0,1.")
@click.option("--follow", is_flag=True, help="Through a server: where it runs a round already, follow that one to its "
                                             "end (and write its report here) instead of being refused.")
def run_cmd(ctx: Context, round_, target, again, workers, timing_budget, work_dir, cache_dir, out_dir, ray_address,
            gpus, follow, as_json: bool):
    """Evaluate a round: patch, compile, check and time every proposal with a patch, then write the round's report.
    A round runs only after the target's previous round finished a run, and never once the next one has started.
    Refused while another judge process runs the same round. Needs an existing ledger, except with --target
    (which evaluates the target's base even without proposals), where it creates a missing one."""
    if ctx.remote is not None:
        if ray_address is not None or gpus:
            raise JudgeError("--ray and --gpus are the server's to choose (judge serve --ray, --gpus)")
        with _events(as_json) as progress:
            summaries = ctx.remote.run(round_, target, again, workers, timing_budget, progress.event, out_dir, follow)
        return _print_runs(summaries, as_json)
    if follow:
        raise JudgeError("--follow follows a round a server runs (JUDGE_SERVER); a local judge run shows its own "
                         "progress, and another process's round cannot be followed")
    from .. import round_actions
    from ..dispatch import parse_gpus
    from ..rounds import Settings
    from ..targets import find_target

    explicit = find_target(target, ctx.kernels) if target else None
    if explicit is not None and round_ not in (None, 1) and not ctx.ledger_path.exists():
        raise JudgeError(f"round {round_} of {explicit.name} cannot run: no round has started, so the next is round 1")
    ctx.creates = explicit is not None
    settings = Settings(kernels_dir=ctx.kernels, work_dir=work_dir, cache_dir=cache_dir, workers=workers,
                        timing_budget_s=timing_budget, again=again, ray=ray_address is not None,
                        ray_address=ray_address or None, gpus=parse_gpus(gpus) if gpus else None)
    try:
        with _events(as_json) as progress:
            summaries = round_actions.run(ctx.ledger, round_, explicit, settings, progress.event, out_dir)
    except round_actions.Interrupted as stopped:
        if as_json:
            fail(stopped.message, 130, True)
        err.print(stopped.message, markup=False)
        sys.exit(130)
    _print_runs(summaries, as_json)


def _events(as_json: bool):
    """Where a run's events go: JSON lines on stderr under --json, else rich progress (plain lines in a log). The
    progress module is imported here: it loads the dispatch, which commands that only read need not pay for."""
    from .progress import JsonEvents, RunProgress

    return JsonEvents() if as_json else RunProgress(err, enabled=True)


def _print_runs(summaries: list[dict], as_json: bool) -> None:
    if as_json:
        emit_json(summaries)
        return
    for s in summaries:
        _print_summary(s)
    for path in dict.fromkeys(s["report"] for s in summaries):
        out.print(f"report: {path}", markup=False)


def _print_summary(s: dict) -> None:
    """One target's round on the terminal: its verdicts, the winner or why none, the held results, the time. Cells
    are rich Text, each capped: a contestant's `[bold]` is text, not markup, and rich folds a long cell in time
    that grows with the square of its length (a 16 MiB reason kept `judge run` busy for minutes)."""
    from rich.table import Table
    from rich.text import Text

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
    out.print(f"winner: {terminal(s['winner']) or _no_winner(s['verdicts'], s['held'])}", markup=False)
    for h in s["held"]:
        out.print(f"held: {terminal(h['proposal_id'])} r{h['revision']} (evaluation #{h['evaluation_id']}) is implausible and "
                  f"cannot win until a person who has checked it runs: {h['command']} (before round {s['round'] + 1} "
                  f"starts)", markup=False)
    out.print(time_line(s["time"]), markup=False)


def time_line(spent: dict) -> str:
    """`time: 93.1 s wall; compile 12.0 s, static 4.1 s, correctness 20.3 s, ...`: where a run's time went, and how
    long its writes waited for another judge process's lock on the ledger."""
    stages = spent.get("stages_s", {})
    order = ["patch", "screen", "compile", "static", "correctness", "runner starts", "timing", "measuring"]
    parts = [f"{name} {stages[name]:.1f} s" for name in order if stages.get(name)]
    if spent.get("ledger_wait_s", 0) >= 0.05:
        parts.append(f"waiting for the ledger's lock {spent['ledger_wait_s']:.1f} s")
    return f"time: {spent.get('wall_s', 0.0):.1f} s wall" + (f"; {', '.join(parts)}" if parts else "")


def _no_winner(verdicts: list[dict], held: list[dict]) -> str:
    """Why a round has no winner, in the report's words: a held result, nothing timed, or nothing faster."""
    if held:
        names = ", ".join(f"{terminal(h['proposal_id'])} (evaluation #{h['evaluation_id']})" for h in held)
        return f"none yet ({names} {'is' if len(held) == 1 else 'are'} held as implausible, see below)"
    timed = {"faster", "slower", "inconclusive", "unchanged", "implausible"}
    if not any(v["outcome"] in timed for v in verdicts):
        return "none (nothing was timed in this round)"
    return "none (no proposal was significantly faster than the base)"


@command(main, "watch")
@click.option("--job", "job_id", type=int, help="The server's job to follow (default: the round it runs now, else "
                                                "the last one it started).")
def watch_cmd(ctx: Context, job_id, as_json: bool):
    """Follow a round the server runs, from its start to its end, as its events land: each verdict you may read
    (a contestant: its own as soon as its candidate is judged) on a line of its own; with --json, each event as one
    JSON object per line. Re-attaches to a round already running; exit 0 once it ends, its error's code if it failed."""
    import json

    if ctx.remote is None:
        raise JudgeError("judge watch follows a round a server runs: set JUDGE_SERVER (or --server) and JUDGE_TOKEN")
    job = ctx.remote.job(job_id)

    def show(kind: str, **fields) -> None:
        if as_json:  # one line per event, contained as --json is (judge.contain.json_safe)
            from ..contain import json_safe
            from ..jsonform import jsonable

            click.echo(json.dumps(json_safe(jsonable({"kind": kind, **fields}))))
        elif kind == "verdict":
            where = f" [{fields['where']}]" if fields.get("where") else ""
            out.print(f"{terminal(fields['proposal'])}: {fields['outcome']} ({terminal(fields.get('reason') or '')}){where}",
                      markup=False)
        elif kind == "floor":
            out.print(f"noise floor of {terminal(fields['target'])}: {fields['floor'].words()}", markup=False)
        elif kind == "end":
            what = f"round {job.round}" if job.round is not None else "the rounds"
            out.print(f"job {job.job} ({what}{' of ' + terminal(job.target) if job.target else ''}): {fields['state']}",
                      markup=False)

    ctx.remote.follow(job, show)


@command(main, "report")
@click.option("--round", "round_", type=int, help="The round to report (default: each target's latest that ran).")
@click.option("--target", help="Only this target.")
@click.option("--leaderboard", is_flag=True, help="Render the leaderboard across rounds instead.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
def report_cmd(ctx: Context, round_, target, leaderboard, out_dir, as_json: bool):
    """Render a round's Markdown scorecard (or the leaderboard) and print its path (needs an existing ledger)."""
    from .. import report

    if ctx.remote is not None:
        path, key, view = ctx.remote.write_report(round_, target, leaderboard, out_dir)
        if as_json:
            emit_json({"path": str(path), key: view})
        else:
            out.print(str(path), markup=False)
        return
    ledger = ctx.ledger
    if leaderboard:
        path = report.render_leaderboard(ledger, out_dir)
        if as_json:
            emit_json({"path": str(path), "leaderboard": report.leaderboard_view(ledger)})
        else:
            out.print(str(path), markup=False)
        return
    if round_ is None and target is None and len({r["target"] for r in ledger.rounds()}) > 1:
        latest = {}
        for row in ledger.rounds():
            latest[row["target"]] = row["round"]
        jobs = sorted(latest.items())
    elif round_ is None:
        rows = ledger.rounds(target)
        if not rows:
            raise JudgeError("no round has run yet (run one with 'judge run')" if target is None else
                             f"target '{target}' has no rounds in the ledger")
        jobs = [(target, rows[-1]["round"])]
    else:
        jobs = [(target, round_)]
    paths = [(report.render_round(ledger, n, out_dir, target=name), n, name) for name, n in jobs]
    if as_json:
        views = [{"path": str(path), "round": report.round_view(ledger, n, target=name)} for path, n, name in paths]
        emit_json(views[0] if len(views) == 1 else views)
    else:
        for path, _, _ in paths:
            out.print(str(path), markup=False)


@command(main, "brief")
@click.option("--round", "round_", type=int, help="The round to brief (default: the target's open round).")
@click.option("--target", help="The target (needed when the ledger has several).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True)
def brief_cmd(ctx: Context, round_, target, out_dir, as_json: bool):
    """Write the brief for a round: the base (and how to get it), its times against the speed of light, its
    resources, what was tried, what is open, the rules; print its path (needs an existing ledger)."""
    path, view = ctx.call("round_actions.brief", ctx.kernels, target, round_, out_dir)
    if as_json:
        emit_json({"path": str(path), "brief": view})
    else:
        out.print(str(path), markup=False)


@command(main, "base")
@click.option("--target", help="The target (needed when the ledger has several).")
@click.option("--round", "round_", type=int, help="The round (default: the target's open round, the one that takes "
                                                  "proposals).")
@click.option("--out", "out_file", type=click.Path(path_type=Path), help="Write the source to this file instead.")
def base_cmd(ctx: Context, target, round_, out_file, as_json: bool):
    """Print a round's base kernel, the exact source whose sha256 the brief names: the file a patch for that round
    is made against (needs an existing ledger, or a server)."""
    data = ctx.call("round_actions.base", ctx.kernels, target, round_)
    if out_file is not None:
        write_base(data, out_file)
    if as_json:
        emit_json({k: v for k, v in data.items() if k != "source" or out_file is None}
                  | ({"path": str(out_file)} if out_file is not None else {}))
    elif out_file is not None:
        err.print(f"{out_file}: round {data['round']} base of {data['target']} ({data['origin']}), "
                  f"sha256 {data['sha256'][:12]}, {data['lines']} lines", markup=False)
    else:
        sys.stdout.write(data["source"])
        sys.stdout.flush()


def write_base(data: dict, path: Path) -> None:
    """Write a base's source byte for byte (no newline translation), refusing a directory."""
    if path.is_dir():
        raise JudgeError(f"{path}: is a directory (name the file to write, e.g. {path / data['kernel_file']})")
    try:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(data["source"])
    except OSError as error:
        raise JudgeError(f"{path}: cannot write the base ({error.strerror})") from None


@command(main, "clear")
@click.argument("evaluation_id", type=int)
@click.option("--note", required=True, help="Why the result is real; kept with the clearance.")
@click.option("--by", "cleared_by", default=lambda: __import__("getpass").getuser(), show_default="your user name",
              help="Who clears it.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True,
              help="Where the reports it changes are rendered again.")
def clear_cmd(ctx: Context, evaluation_id: int, note: str, cleared_by: str, out_dir: Path, as_json: bool):
    """Clear an implausible result after checking it by hand: it then stands at what its timing said, the round's
    winner is chosen again and its reports are rendered again. Refused once the target's next round has started
    (its base would change under it). Needs an existing ledger."""
    if ctx.remote is not None:
        result = ctx.remote.clear_evaluation(evaluation_id, note, cleared_by)
        # the reports it changed, rendered again here, where this organizer's copies are (the server's are its own)
        result["reports"] = [str(p) for p in ctx.remote.refresh_reports(result["target"], result["round"], out_dir)]
    else:
        from .. import round_actions

        ledger = ctx.ledger
        result = round_actions.clear_evaluation(ledger, evaluation_id, note, cleared_by, ctx.kernels)
        result["reports"] = [str(p) for p in round_actions.refresh_reports(ledger, ctx.kernels, result["target"],
                                                                           result["round"], out_dir)]
    if as_json:
        emit_json(result)
        return
    out.print(f"evaluation {evaluation_id} cleared: it stands as {result['outcome']} ({terminal(result['reason'])})",
              markup=False)
    out.print(f"round {result['round']} winner: {terminal(result['round_winner']) or 'none'}", markup=False)
    following = result["next_round"]
    out.print(f"round {following['round']} of {result['target']} will start from: {following['origin']} "
              f"(sha256 {following['sha256'][:12]})", markup=False)
    if following["no_longer_apply"]:
        out.print("no longer apply to that base (they need a new revision): "
                  + ", ".join(terminal(p) for p in following["no_longer_apply"]), markup=False)
    for path in result["reports"]:
        out.print(f"rendered again: {path}", markup=False)
