"""Where a runner may read and write, and where judge keeps what it leaves: its exchange directory (judge's own,
where the oracle makes its host files), a timed runner's private scratch and its log, a bound spare's directory,
and the confinement policy that says so (judge.sandbox.confine)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sandbox.worker import Worker


def exchange_dir(root: Path) -> Path:
    """A new, empty directory for one runner's host files, judge's own and under judge's root, where no kernel can
    write (its confinement lets it open the files the oracle makes there, nothing else), its name drawn so that no
    kernel can guess it. Issue 39: in the workspace, a kernel that planted files or a link where its next runners'
    directories would be made the oracle fail the round or write elsewhere."""
    parent = root / "exchange"
    parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    directory = parent / secrets.token_hex(8)
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)  # searchable by a runner that dropped to uid nobody, whatever the umask
    return directory


def new_scratch(root: Path, workspace: Path) -> Path:
    """A timed runner's own writable directory, its caches a copy of the workspace's (what the correctness runner
    compiled is found there); removed with the runner."""
    scratch = root / "scratch" / secrets.token_hex(8)
    scratch.mkdir(parents=True)
    caches = workspace / ".cache"
    if caches.is_dir() and not caches.is_symlink():
        shutil.copytree(caches, scratch / ".cache", symlinks=True, ignore_dangling_symlinks=True, dirs_exist_ok=True)
    return scratch


def timing_logs(root: Path, workspace: Path) -> Path:
    """Where the timed runners of the kernel in `workspace` write their logs (judge's directory, by workspace)."""
    workspace = Path(workspace).resolve()
    return root / "logs" / f"{workspace.name}-{hashlib.sha256(str(workspace).encode()).hexdigest()[:8]}"


def log_path(root: Path, workspace: Path, log_name: str, scratch: Path | None) -> Path:
    """A runner's log: in its workspace, or for a timed runner in judge's own directory, which no runner reads (a
    log in the workspace would carry what one pair's runner printed to the next pair's)."""
    if scratch is None:
        return workspace / log_name
    logs = timing_logs(root, workspace)
    logs.mkdir(parents=True, exist_ok=True)
    return logs / log_name


def rules(env: dict[str, str], workspace: Path, exchange: Path | None, scratch: Path | None):
    """The confinement of a runner in `workspace` and its environment: it writes in its workspace, or only in
    `scratch` and reads the workspace, its caches shown where the workspace's are (judge.sandbox.mounts:
    `show_caches_at`); `exchange` holds its host files."""
    from ..sandbox.confine import Policy, child_env, prepare

    exchanges = [exchange] if exchange else []
    policy = Policy(writable=[workspace], readable=[], exchange=exchanges) if scratch is None else \
        Policy(writable=[scratch], readable=[workspace], exchange=exchanges, caches_at=workspace / ".cache")
    prepare(policy)
    return policy, child_env(policy, env)


def spare_policy(policy: dict | None, spare: Worker) -> dict | None:
    """The confinement of a spare bound to a kernel: the workspace's, and the spare's own directory. What the spare
    imported before it knew its kernel (torch's compiler) fixed paths under the TMPDIR and caches it started with
    (torch._inductor's precompiled headers, taken from Python's temp directory at import), and a kernel that uses
    them must not crash where a cold runner would not. No other process ever uses a spare's directory."""
    if policy is None:
        return None
    return {**policy, "writable": [*policy["writable"], str(spare.home.resolve())]}
