"""The `judge` command: parses arguments, calls the library, prints for people or (`--json`) for agents."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from ..contain import terminal
from ..errors import JudgeError
from .app import Context, command, emit_json, main, out


@command(main, "init", creates=True)
def init_cmd(ctx: Context, as_json: bool):
    """Create the ledger (or bring its schema up to date)."""
    info = ctx.call("cli.main.ledger_info")
    names = info["migrations"]
    if as_json:
        emit_json(info)
    else:
        out.print(f"ledger {info['ledger']}: schema at {names[-1]} ({len(names)} migrations applied)", markup=False)


def ledger_info(ledger) -> dict:
    from ..ledger.migrations import applied

    return {"ledger": str(ledger.path), "migrations": applied(ledger.db)}


@command(main, "submit", creates=True)
@click.argument("paths", nargs=-1, required=True)
def submit_cmd(ctx: Context, paths: tuple[str, ...], as_json: bool):
    """Submit proposal directories (or a folder of them), or one JSON object on stdin with '-'.
    Creates the ledger if it is missing."""
    from .. import actions, inputs
    from ..ledger import Ledger

    stdin_text = inputs.read_stdin() if "-" in paths else None
    author = ctx.remote.default_author() if ctx.remote is not None else None
    if author is not None and stdin_text is not None:
        stdin_text = ctx.remote.with_author(stdin_text, author)
    errors: list[str] = []
    items = actions.load_submissions(list(paths), stdin_text, errors, author)
    if ctx.remote is not None:
        if errors:
            raise JudgeError("\n".join(errors))
        results = ctx.remote.submit(items, ctx.kernels)
    else:
        # A submission with a file that cannot be read creates no ledger: the rest is checked against an empty one.
        ledger = Ledger(":memory:") if errors and not ctx.ledger_path.exists() else ctx.ledger
        results = actions.submit(ledger, items, ctx.kernels, errors)
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
    from .. import actions

    sharks = actions.load_sharks(list(paths))
    results = ctx.call("actions.add_sharks", sharks)
    if as_json:
        emit_json(results)
        return
    for r in results:
        out.print(f"{r['status']:9} shark {r['shark']} version {r['version']}", markup=False)


@command(shark_group, "list")
def shark_list_cmd(ctx: Context, as_json: bool):
    """List sharks and their rubrics (needs an existing ledger)."""
    sharks = ctx.call("actions.shark_list")
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
    from .. import actions, inputs

    stdin_text = inputs.read_stdin() if "-" in paths else None
    items = actions.load_vote_inputs(list(paths), stdin_text)
    cast = ctx.call("actions.cast_votes", items)
    if as_json:
        emit_json([asdict(c) for c in cast])
        return
    for c in cast:
        stated = f", stated {c.stated_total}" if c.stated_total is not None else ""
        flag = f"  FLAG: {c.flag}" if c.flag else ""
        out.print(f"{c.status:9} vote #{c.vote_id}: {c.shark} on {c.proposal} r{c.revision}: total {c.computed_total}{stated}{flag}", markup=False)


@command(main, "list")
@click.option("--round", "round_", type=int, help="Only this round.")
def list_cmd(ctx: Context, round_, as_json: bool):
    """List proposals (latest revisions) with their latest verdicts (needs an existing ledger)."""
    from rich.table import Table
    from rich.text import Text

    rows = ctx.call("actions.list_proposals", round_)
    if as_json:
        emit_json(rows)
        return
    cells = [{"id": terminal(r["id"]), "rev": str(r["revision"]), "round": str(r["round"]), "target": terminal(r["target"]),
              "author": terminal(r["author"]), "claim": f"{r['claim'][0]}-{r['claim'][1]}x" if r["claim"] else "",
              "outcome": r["outcome"] + (" (cleared)" if r["cleared"] else ""), "geomean": f"{r['geomean_speedup']:.3f}x" if r["geomean_speedup"] else ""}
             for r in rows]
    columns = fitting(LIST_COLUMNS, cells, out.width)
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for c in cells:
        table.add_row(*(Text(c[column]) for column in columns))
    out.print(table)


LIST_COLUMNS = ("id", "rev", "round", "target", "author", "claim", "outcome", "geomean")
DROPPED_FIRST = ("author", "claim", "rev", "geomean", "round", "target")


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
    data = ctx.call("actions.show_proposal", proposal_id)
    if as_json:
        emit_json(data)
        return
    for rev in data["revisions"]:
        claim = rev["claim"]
        claim_text = f"claims {claim['low']}-{claim['high']}x" if claim else "no claim"
        out.print(f"{terminal(proposal_id)} r{rev['revision']} (round {rev['round']}, {terminal(rev['target'])}): "
                  f"{terminal(rev['title'])} by {terminal(rev['author'])}; {claim_text}", markup=False)
        for e in rev["evaluations"]:
            cleared = e["cleared"]
            if cleared:
                out.print(f"  evaluation #{e['evaluation_id']}: {cleared['outcome']} "
                          f"({terminal(cleared['reason'] or e['reason'])}); cleared by {terminal(cleared['cleared_by'])} "
                          f"on {cleared['cleared_at']}, held before as {e['outcome']}", markup=False)
            else:
                out.print(f"  evaluation #{e['evaluation_id']}: {e['outcome']} ({terminal(e['reason'])})", markup=False)
            for s in e["stages"]:
                out.print(f"    {s['stage']:12} {s['status']:9} {terminal(s['summary'])}", markup=False)
    for v in data["votes"]:
        flag = f"  FLAG: {v['flag']}" if v["flag"] else ""
        out.print(f"  vote {terminal(v['shark'])}: total {v['total']}{flag}", markup=False)


@command(main, "status")
def status_cmd(ctx: Context, as_json: bool):
    """Counts of what the ledger holds and where each round stands (needs an existing ledger)."""
    data = ctx.call("actions.status")
    if as_json:
        emit_json(data)
        return
    counts = ", ".join(f"{v} {k}" for k, v in data["counts"].items())
    out.print(f"{data['ledger']}: {counts}", markup=False)
    for r in data["rounds"]:
        outcomes = ", ".join(f"{n} {o}" for o, n in r["outcomes"].items()) or "no verdicts"
        out.print(f"  {terminal(r['target'])} round {r['round']}{' (closed)' if r['closed'] else ''}: {outcomes}; "
                  f"winner: {terminal(r['winner']) or 'none'}; base: {terminal(r['base_origin'])}", markup=False)
        for h in r["held"]:
            what = (f"    held: {terminal(h['proposal_id'])} r{h['revision']} (evaluation #{h['evaluation_id']}), "
                    "implausible")
            if h["command"]:
                out.print(f"{what} until a person clears it: {h['command']}", markup=False)
            else:
                out.print(f"{what}, never cleared: round {r['round'] + 1} has begun, so it can no longer win",
                          markup=False)
    for t in data["targets"]:
        out.print(f"  {terminal(t['target'])}: proposals go to round {t['open_round']}", markup=False)


from . import network as cli_network, noise as cli_noise, profile as cli_profile, rounds as cli_rounds  # noqa: E402,F401 (commands registered on `main`)

if __name__ == "__main__":
    from judge.cli.main import main as imported  # the module as imported: the one cli_network registers its commands on

    imported()
