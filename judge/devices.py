"""Whether a target's architecture can run on this machine's GPU, probed once per process.

The probe runs in a child process: initialising CUDA in the judge's own process would tie it to a context
that a faulting candidate could poison, and a broken driver must not hang the judge. The facts themselves are
read in judge/machine.py, in whichever process asks.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from .errors import JudgeError
from .machine import DeviceFacts, facts_here, nvml_capabilities
from .sandbox.isolation import run_isolated

_ARCH = re.compile(r"^sm_(\d+)(\d)([af]?)$")


def probe(timeout_s: float = 120) -> DeviceFacts | None:
    """The facts of CUDA device 0, read in a child process; None when there is no CUDA GPU (or it cannot start)."""
    with tempfile.TemporaryDirectory(prefix="judge-probe-") as tmp:
        outcome = run_isolated(_child_probe, {}, timeout_s=timeout_s, cwd=Path(tmp))
    if outcome.status != "ok" or outcome.value is None:
        return None
    return DeviceFacts(**outcome.value)


def arch_gate(target_arch: str, facts: DeviceFacts | None) -> str | None:
    """None when a target built for `target_arch` can run on this device, else the reason it cannot.

    "cpu" runs anywhere. "any" needs only a CUDA GPU. "sm_XYa" needs capability X.Y exactly (arch-specific instructions such as
    wgmma and tcgen05); "sm_XY" and "sm_XYf" run on capability X.Y or a later minor of the same major.
    """
    return _capability_gate(target_arch, facts.capability if facts is not None else None)


def may_run(target_arch: str) -> bool:
    """Whether the driver's NVML lists a GPU of this host that a target built for `target_arch` could run on: read
    without a CUDA context, before the probe, so that a round can start its oracle and spares while the probe runs
    (judge.warm). Only a guess (NVML's GPUs are the host's, not those CUDA_VISIBLE_DEVICES leaves); the probe's
    facts decide (arch_gate)."""
    return target_arch != "cpu" and any(_capability_gate(target_arch, c) is None for c in nvml_capabilities())


def _capability_gate(target_arch: str, capability: str | None) -> str | None:
    """arch_gate on a GPU's compute capability ("9.0"; None: no CUDA GPU)."""
    if target_arch == "cpu":
        return None
    if target_arch == "any":
        return None if capability is not None else "needs a CUDA GPU, this machine has none"
    match = _ARCH.match(target_arch)
    if not match:
        raise JudgeError(f"target arch '{target_arch}': expected 'any' or sm_<major><minor>[a|f], e.g. sm_90a")
    major, minor, suffix = int(match.group(1)), int(match.group(2)), match.group(3)
    reason = f"needs sm_{major}{minor}, this machine has none"
    if capability is None:
        return reason
    have_major, have_minor = (int(part) for part in capability.split("."))
    if suffix == "a":
        return None if (have_major, have_minor) == (major, minor) else reason
    return None if have_major == major and have_minor >= minor else reason


def _child_probe() -> dict[str, Any] | None:
    facts = facts_here()
    return None if facts is None else facts.to_dict()


_PROBED: list[DeviceFacts | None] = []


def probed() -> DeviceFacts | None:
    """This machine's GPU, probed once per process (a probe costs a child process that imports torch)."""
    if not _PROBED:
        _PROBED.append(probe())
    return _PROBED[0]


def gate(target_arch: str) -> str | None:
    """arch_gate against this machine's GPU, probed once per process."""
    return arch_gate(target_arch, probed())
