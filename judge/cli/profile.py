"""`judge profile`: where a kernel's time goes on this machine, per benchmark (registered on judge.cli.main's group)."""

from __future__ import annotations

from pathlib import Path

import click

from .app import Context, command, emit_json, main, out
from ..contain import terminal
from ..errors import JudgeError


@command(main, "profile", creates=True)
@click.option("--proposal", "proposal_id", help="Profile this proposal's latest revision instead of the base.")
@click.option("--target", help="The target (needed when the ledger has several); without --proposal.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"), show_default=True)
@click.option("--no-ncu", is_flag=True, help="torch.profiler even where Nsight Compute (ncu) is on the machine.")
@click.option("--again", is_flag=True, help="Profile again even where this kernel was profiled on this device.")
def profile_cmd(ctx: Context, proposal_id, target, work_dir, no_ncu, again, as_json: bool):
    """Profile the open round's base (or, with --proposal, a candidate) on this machine: per benchmark each kernel's
    share of the call, its DRAM bandwidth and tensor-core throughput against the device's measured peaks, and under
    ncu its stalls and occupancy; on a CPU target, the host's ops. Kept in the ledger: a kernel text already
    profiled on this device is not profiled again. Needs an existing ledger, here (not through a server)."""
    if ctx.remote is not None:
        raise JudgeError("judge profile runs kernels on this machine: run it where the ledger is, without --server")
    from .. import round_actions
    from .progress import progress_line

    def progress(**info) -> None:
        if not as_json:
            out.print(progress_line({"proposal": proposal_id or "(base)", **info}), markup=False)

    done = round_actions.profile(ctx.ledger, ctx.kernels, target, proposal_id, work_dir, use_ncu=not no_ncu,
                                 again=again, progress=progress)
    if as_json:
        emit_json(done)
        return
    for line in profile_lines(done):
        out.print(line, markup=False)


def profile_lines(done: dict) -> list[str]:
    """`judge profile`'s text: the profile's line, then per benchmark its bounds and its kernels."""
    from ..stages.profile.model import Profile

    profile = done["profile"]
    who = f"{done['proposal']} r{done['revision']}" if done.get("proposal") else f"round {done['round']}'s base"
    kept = " (kept from an earlier profile of the same text)" if done["reused"] else ""
    head = Profile.from_json(profile).line
    lines = [f"{done['target']}, {terminal(who)}: {head}{kept}"] + [f"  note: {n}" for n in profile.get("notes", [])]
    for bench in profile.get("benchmarks", []):
        call = f"{bench['call_us']:.1f} us a call" if bench.get("call_us") else "call time unknown"
        if bench.get("gpu_us"):
            call = f"{bench['gpu_us']:.1f} us a call on the GPU clock ({call} on the host's, launch included)"
        lines.append(f"benchmark {bench['index']} ({bench['label']}): {bench.get('error') or call}")
        lines += [f"  {bound}" for bound in bench.get("bounds", [])]
        for kernel in bench.get("kernels", [])[:8]:
            share = f"{kernel['share']:.0%}" if kernel.get("share") is not None else "?"
            lines.append(f"    {share:>4} {terminal(kernel['name'])[:80]} ({kernel['launches']:g}x, {kernel['us']:.1f} us)")
    return lines
