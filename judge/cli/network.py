"""The commands of a contest over the network: `judge serve` and `judge participant add | list | revoke`."""

from __future__ import annotations

from pathlib import Path

import click

from .. import participants
from .app import Context, command, emit_json, err, main, out
from ..errors import JudgeError


@command(main, "serve", creates=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where to listen: loopback only by default; put a TLS reverse proxy in front for other machines.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("reports"), show_default=True,
              help="Where rounds the server runs write their reports.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"), show_default=True)
@click.option("--cache-dir", type=click.Path(path_type=Path), default=Path(".judge-cache"), show_default=True)
@click.option("--rate-limit", type=click.IntRange(min=1), default=120, show_default=True,
              help="Requests a contestant's or a shark's token may make in any minute (organizers have no limit).")
@click.option("--proposals-per-round", type=click.IntRange(min=1), default=20, show_default=True,
              help="Proposals a contestant may have in one round of one target (revising one of them is free).")
@click.option("--judged-visible-to", type=click.Choice(participants.JUDGED_VISIBLE_TO), default="everyone",
              show_default=True, help="Who reads a proposal once its round judged it: everyone (the pages too) or "
                                      "participants with a token (no pages). Before, only its author, the organizers "
                                      "and (its pitch) the sharks.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
              help="Rounds run correctness and timing on a Ray cluster (as judge run --ray).")
@click.option("--gpus", help="Rounds run correctness and timing on these GPUs of this machine (as judge run --gpus).")
def serve_cmd(ctx: Context, host, port, out_dir, work_dir, cache_dir, rate_limit, proposals_per_round, judged_visible_to,
              ray_address, gpus, as_json: bool):
    """Serve this ledger over HTTP: the JSON API (/api, schema at /openapi.json, /docs), the pages (/pages).
    Creates the ledger if it is missing. Participants need tokens: 'judge participant add'."""
    import uvicorn

    from ..dispatch import parse_gpus
    from ..server import Config, create_app

    if ctx.remote is not None:
        raise JudgeError("judge serve serves a local ledger: leave out --server and JUDGE_SERVER")
    ledger = ctx.ledger  # created or upgraded here, before the first request
    if not [p for p in participants.participant_list(ledger) if p["revoked_at"] is None]:
        err.print("judge serve: no participants yet: add them on this machine with "
                  "'judge participant add NAME --role contestant|shark|organizer'", markup=False)
    ledger.close()
    config = Config(ledger=ctx.ledger_path, kernels=ctx.kernels, out_dir=out_dir, work_dir=work_dir, cache_dir=cache_dir,
                    rate_limit=rate_limit, proposals_per_round=proposals_per_round,
                    judged_visible_to=judged_visible_to, gpus=parse_gpus(gpus) if gpus else None, ray_address=ray_address)
    err.print(f"judge serve: {ctx.ledger_path} at http://{host}:{port}/ (API schema at /openapi.json, pages at /pages/)",
              markup=False)
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")


@main.group("participant")
def participant_group():
    """Who takes part over the network, with which role and token (the organizer's, or the ledger holder's)."""


@command(participant_group, "add", creates=True)
@click.argument("name")
@click.option("--role", type=click.Choice(participants.ROLES), required=True)
def participant_add_cmd(ctx: Context, name: str, role: str, as_json: bool):
    """Add a participant and print its token, this once: the ledger keeps only its sha256. Creates the ledger if
    it is missing."""
    added = ctx.call("participants.add_participant", name, role)
    if as_json:
        emit_json(added)
        return
    err.print(f"participant '{added['name']}' added as {added['role']}; its token, shown this once "
              "(hand it over as JUDGE_TOKEN):", markup=False)
    out.print(added["token"], markup=False)


@command(participant_group, "list")
def participant_list_cmd(ctx: Context, as_json: bool):
    """Every participant, revoked ones too; never a token (needs an existing ledger)."""
    rows = ctx.call("participants.participant_list")
    if as_json:
        emit_json(rows)
        return
    for p in rows:
        revoked = f", revoked {p['revoked_at']}" if p["revoked_at"] else ""
        out.print(f"{p['name']:20} {p['role']:10} added {p['created_at']}{revoked}", markup=False)


@command(participant_group, "revoke")
@click.argument("name")
def participant_revoke_cmd(ctx: Context, name: str, as_json: bool):
    """Revoke a participant's token at once; its proposals and votes stay (needs an existing ledger)."""
    row = ctx.call("participants.revoke_participant", name)
    if as_json:
        emit_json(row)
        return
    out.print(f"participant '{row['name']}' ({row['role']}) revoked at {row['revoked_at']}", markup=False)
