"""Where a runner may read and write, and where judge keeps what it leaves: its exchange directory (judge's own,
where the oracle makes its host files), a timed runner's private scratch and its log, a bound spare's directory,
and the confinement policy that says so (judge.sandbox.confine)."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
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
    copy_unfollowed(workspace / ".cache", scratch / ".cache")
    return scratch


def copy_unfollowed(source: Path, dest: Path) -> None:
    """A copy of the tree at `source` that follows no link at any depth, however the tree changes while judge reads
    it (os.fwalk holds each directory open): a correctness runner writes in its workspace while judge copies its
    caches for a timed runner, and a `.cache` or a directory in it swapped for a link to a tree only judge may
    read would have been copied where that runner reads (shutil.copytree checked, then followed). Links are copied
    as links, files with their times (a build's outputs stay newer than its sources); nothing else is copied, and
    what goes while judge reads it is left out (caches only save time)."""
    try:
        for here, dirs, files, fd in os.fwalk(source, follow_symlinks=False):
            into = dest / Path(here).relative_to(source)
            into.mkdir(parents=True, exist_ok=True)
            for name in dirs + files:
                try:
                    _copy_entry(name, fd, into / name)
                except FileNotFoundError:
                    continue
    except FileNotFoundError:  # no caches (yet), or gone
        return


def _copy_entry(name: str, directory_fd: int, to: Path) -> None:
    """One entry of a directory judge holds open: a link as a link, a file with its times, nothing else."""
    found = os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    if stat.S_ISLNK(found.st_mode):
        os.symlink(os.readlink(name, dir_fd=directory_fd), to)
    elif stat.S_ISREG(found.st_mode):
        opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory_fd)
        with os.fdopen(opened, "rb") as reader, open(to, "xb") as writer:
            shutil.copyfileobj(reader, writer)
        os.utime(to, ns=(found.st_atime_ns, found.st_mtime_ns))


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
