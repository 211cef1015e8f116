"""A candidate handed from the stages that run on the driver (patch, screen, compile, static) to those that run
its kernel (correctness and timing), wherever the dispatch (judge/dispatch.py) runs them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Job:
    """One candidate whose compiled kernel waits for the GPU stages."""

    key: Any  # the caller's handle for it
    name: str  # the proposal id, for progress lines
    source: str  # its kernel file
    workspace: Path  # where it is assembled on this machine
    control: bool = False  # the round's A/A control: timed only, by the controls' rule (noise.enough_pairs)
    serves: int = 0  # a control's: the candidates its round may time, whose verdicts its floor serves
