"""judge's working directories: each one made empty before a stage, a candidate or a round writes into it."""

from __future__ import annotations

import shutil
from pathlib import Path


def fresh(path: Path) -> Path:
    """`path` as an empty directory (whatever stood there removed first, its parents made); returns it."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path
