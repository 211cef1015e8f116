"""A target as data for another machine (a Ray actor's): every file it needs, and those files laid out again there
under a directory of the receiver's choosing, never outside it."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import JudgeError


def target_files(target) -> dict[str, bytes]:
    """A target as data for another machine: every file of its directory, and the files its task.yml takes from
    beside it (GPU MODE's `../utils.py`), by their paths relative to the directory."""
    from .targets import SUBMISSION

    files = {p.relative_to(target.path).as_posix(): p.read_bytes() for p in sorted(target.path.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts}
    for _, source in target.files:
        if source != SUBMISSION and source not in files:
            files[source] = (target.path / source).read_bytes()
    return files


def write_target(files: dict[str, bytes], parent: Path, name: str) -> Path:
    """Lay out `target_files` under parent/name (files from beside it land beside it); its directory."""
    directory = parent / name
    for relative, data in files.items():
        path = Path(os.path.normpath(directory / relative))
        if parent.resolve() not in path.resolve().parents:
            raise JudgeError(f"target file {relative!r} would land outside {parent}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return directory
