"""The repository itself: nothing that .gitignore ignores (generated PTX, cubins, ledgers) is tracked."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_no_ignored_file_is_tracked():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked_but_ignored = subprocess.run(
        ["git", "ls-files", "--cached", "--ignored", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert tracked_but_ignored == []
