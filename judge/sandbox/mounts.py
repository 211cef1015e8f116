"""What a confined child sees of the filesystem's mounts, in the mount namespace of its own that
judge.sandbox.confine makes where permitted (CAP_SYS_ADMIN): its neighbours hidden, its caches shown where they are
found again. Each is all or nothing: where mounting fails the child's view stays as it was, and Landlock still
governs what it may open."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .libc import MS_BIND, MS_NODEV, MS_NOSUID, checked, libc


def inside(path: Path, roots: list[Path]) -> bool:
    """Whether `path`, resolved, is one of `roots` or lies beneath one (judge.sandbox.confine's rules use it too)."""
    path = path.resolve()
    return any(path == root or root in path.parents for root in roots)


def hide_neighbours(own: list[Path], readable: list[Path]) -> int:
    """In this process's own mount namespace (confine._private_shm made it), cover the directories that hold `own` (its
    writable and exchange directories) with an empty tmpfs and bind its own back, so that nothing beside them
    (another runner's workspace, spare home or exchange directory) can be named: Landlock governs opening a file,
    never stat(), access() or connect(), so a kernel could still test whether a file another runner made exists at a
    path it can guess (a candidate's workspace is named after its proposal). A directory above anything it reads, or
    /, is left as it is. Returns how many directories were covered; 0 where mounting failed."""
    hidden: list[Path] = []
    for parent in sorted({path.parent for path in own}, key=lambda p: len(p.parts)):
        if parent == Path("/") or any(inside(r, [parent]) for r in readable) or inside(parent, hidden):
            continue
        hidden.append(parent)
    if not hidden:
        return 0
    handles = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in own}  # before anything is covered
    covered: list[Path] = []
    try:
        for cover in hidden:
            checked(libc.mount(b"tmpfs", bytes(cover), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV),
                               b"mode=0755,size=64k"))
            covered.append(cover)
            for path, handle in handles.items():
                if inside(path, [cover]):
                    path.mkdir(parents=True, exist_ok=True)  # in the tmpfs
                    checked(libc.mount(f"/proc/self/fd/{handle}".encode(), bytes(path), None,
                                       ctypes.c_ulong(MS_BIND), None))
    except OSError:
        for cover in reversed(covered):  # all or nothing: its own directories stay where they were
            libc.umount2(bytes(cover), 2)  # MNT_DETACH, with the binds beneath
        return 0
    finally:
        for handle in handles.values():
            os.close(handle)
    return len(hidden)


def show_caches_at(writable: list[Path], caches_at: Path | None, env_dirs: dict[str, str]) -> Path | None:
    """Its own caches (`.cache` in the first of `writable`) bound over `caches_at`, its cache variables pointed there:
    a timed runner's copy of its workspace's caches at the workspace's paths, so that a build its correctness runner
    made is found as made (torch's extension build: ninja saw new paths in its commands and built again, 30 s a pair
    for a cuda-inline kernel on an H200, 2026-11-29). The path, or None where there is none or mounting failed."""
    own = writable[0] / ".cache" if writable else None
    if caches_at is None or own is None or not own.is_dir():
        return None
    try:  # the place itself, never where a link there points (a correctness runner writes in its workspace)
        place = os.open(caches_at, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        checked(libc.mount(bytes(own), f"/proc/self/fd/{place}".encode(), None, ctypes.c_ulong(MS_BIND), None))
    except OSError:
        return None
    finally:
        os.close(place)
    for name, value in [(n, os.environ.get(n)) for n in env_dirs]:
        if value and Path(value).is_relative_to(own):  # read as written (judge's confine.child_env): no link followed
            os.environ[name] = str(caches_at / Path(value).relative_to(own))
    return caches_at
