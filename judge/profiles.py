"""Profiles as library calls: a kernel text profiled on this machine (judge.stages.profile) unless the ledger already
holds a usable profile of the same text on the same device, the device's peaks measured once, and what the brief and
the scorecard show of a stored profile. A round profiles its base here once its timing is over (`profile_round_base`);
`judge profile` comes through judge.round_actions.profile; what the reports show is judge.report.profile's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from .ledger import Ledger, sha256
from .stages.profile.model import Profile, one_line, unavailable
from .stages.profile.peaks import Peaks, family_of, measure
from .stages.progress import Progress, quiet
from .targets import Target
from .workspaces import fresh

PROFILE_EVENT = "profile"
# A round's profile of its base adds at most this share of the round's own seconds past its first benchmark, which
# may always finish (judge.stages.profile.stage); the next round's profile of the same base goes on from there.
ROUND_PROFILE_SHARE = 0.25


def device_here(target: Target) -> Optional[str]:
    """The name profiles of `target` are kept under on this machine: its GPU's (probed in a child), or the CPU's."""
    from .noise import cpu_model

    if target.on_cpu:
        return cpu_model()
    from .devices import probed

    facts = probed()
    return facts.name if facts is not None else None


def peaks_for(ledger: Ledger, target: Target, device: Optional[str], notes: list[str]) -> Optional[Peaks]:
    """The device's measured peaks for the target's matmul family: kept, else measured now and kept; None on a CPU
    target, and where the measurement fails (said in `notes`)."""
    if target.on_cpu or device is None:
        return None
    family = family_of(target.name)
    kept = ledger.device_peaks(device, family)
    if kept is not None:
        return Peaks.from_json(kept)
    try:
        peaks = measure(family)
    except RuntimeError as error:
        notes.append(one_line(str(error)))
        return None
    ledger.record_device_peaks(peaks.to_json(), family)
    return peaks


def profile_source(ledger: Ledger, target: Target, source: str, subject: str, root: Path, *,
                   round_id: Optional[int] = None, revision_id: Optional[int] = None, use_ncu: bool = True,
                   again: bool = False, progress: Progress = quiet, workspace: Optional[Path] = None,
                   timeout_s: Optional[float] = None) -> dict[str, Any]:
    """The profile of the kernel text `source` on this machine: the stored one where the same text was profiled on
    this device (`reused`), else profiled now in `root` and kept. `workspace` is one where `source` is assembled
    already (a round's base, whose compile caches its runners then find), else one is assembled under `root`.
    Never raises for what the kernel or a tool did."""
    sha = sha256(source)
    device = device_here(target)
    stored = None if again else ledger.stored_profile(target.name, sha, device)
    answer = {"target": target.name, "subject": subject, "kernel_sha256": sha, "device": device}
    left = _left_out(stored)
    if stored is not None and not left:
        return {**answer, "reused": True, "profile_id": stored["id"], "profile": _without_row(stored)}
    notes: list[str] = []
    peaks = peaks_for(ledger, target, device, notes)
    root = Path(root).resolve()
    if workspace is None:
        workspace = fresh(root / "kernel")
        target.assemble(workspace, source)
    from .stages.profile.stage import profile_kernel

    profile = profile_kernel(target, workspace, root / "judge", device=device, peaks=peaks, use_ncu=use_ncu,
                             progress=progress, timeout_s=timeout_s, indices=left or None)
    profile.notes = notes + profile.notes
    if left:
        if profile.status != "ok":  # nothing more this time: the stored one stands, to be gone on with next time
            return {**answer, "reused": True, "profile_id": stored["id"], "profile": _without_row(stored)}
        profile = _gone_on(Profile.from_json(stored), profile)
    data = profile.to_json()
    profile_id = ledger.record_profile(target=target.name, kernel_sha256=sha, subject=subject, device=device,
                                       profile=data, round_id=round_id, revision_id=revision_id)
    return {**answer, "reused": False, "profile_id": profile_id, "profile": data}


def round_profile_s(round_s: float) -> float:
    """How long a round's profile of its base may take: ROUND_PROFILE_SHARE of the round's own seconds, at most the
    stage's LIMIT_S; its first benchmark may always finish. With a floor of 180 s (the FP8 target's 97 s under ncu,
    twice), trimul's round of three candidates, its last verdict at 512 s, would have ended past ten minutes (H200,
    2026-11-29): the round's time, not one target's, sizes it, and what one round leaves out the next profiles."""
    from .stages.profile.stage import LIMIT_S

    return min(LIMIT_S, ROUND_PROFILE_SHARE * round_s)


def profile_round_base(run, finished: bool, on_event: Callable[..., None], round_s: float = 0.0) -> None:
    """A round's profile of its base, once its timing is over and only where the base passed (judge.rounds): never
    inside a timed pair, a failure is the profile's line, never the round's, and it takes at most round_profile_s
    of the round's `round_s` seconds."""
    settings, row = run.settings, run.round_row
    if not finished or not settings.profile or run.gate is not None:
        return
    base = run.ledger.latest_evaluation(row["id"], None, subject="base")
    if base is None or base["outcome"] != "unchanged":
        return
    on_event("stage", proposal="(base)", stage="profile")
    try:
        done = profile_source(run.ledger, run.target, row["base_source"], "base", run.root / "profile",
                              round_id=row["id"], workspace=run.base_dir, timeout_s=round_profile_s(round_s),
                              progress=lambda **info: on_event("progress", proposal="(base)", **info))
        line = Profile.from_json(done["profile"]).line + (" (kept from an earlier profile)" if done["reused"] else "")
    except Exception as error:  # noqa: BLE001 - judge's own failure here is the profile's, never the round's
        line = unavailable(f"{type(error).__name__}: {error}").line
    on_event(PROFILE_EVENT, target=run.target.name, proposal="(base)", line=line)


def _left_out(stored: Optional[dict]) -> list[int]:
    """The benchmarks a stored profile left out for want of time (judge.stages.profile.stage.OUT_OF_TIME)."""
    from .stages.profile.stage import OUT_OF_TIME

    if stored is None:
        return []
    return [b["index"] for b in stored.get("benchmarks", []) if (b.get("error") or "").startswith(OUT_OF_TIME)]


def _gone_on(stored: Profile, more: Profile) -> Profile:
    """A stored profile with the benchmarks it left out for want of time taken from `more`, a later profile of the
    same kernel on the same device on those benchmarks only."""
    done = {b.index: b for b in more.benchmarks}
    notes = list(stored.notes) + [n for n in more.notes if n not in stored.notes]
    if more.tool != stored.tool:
        notes.append(f"benchmarks {', '.join(str(i) for i in sorted(done))} profiled later with {more.tool}")
    return Profile("ok", tool=stored.tool, notes=notes, device=stored.device, versions=more.versions,
                   peaks=more.peaks or stored.peaks, benchmarks=[done.get(b.index, b) for b in stored.benchmarks])


def _without_row(stored: dict) -> dict:
    return {k: v for k, v in stored.items() if k not in ("id", "created_at")}
