"""The C library, for the system calls Python's os module does not wrap (mount, unshare, prctl, Landlock's), and
the mount flags judge passes: one handle and one set of constants for judge.sandbox.confine and .mounts."""

from __future__ import annotations

import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 1 << 12, 1 << 14, 1 << 18


def checked(result: int) -> int:
    """A libc call's result, or its errno raised as OSError."""
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result
