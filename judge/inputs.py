"""Reading what users hand judge (proposal files, sharks, votes, JSON on stdin): the one place that does it.

Every read refuses symbolic links and special files (a symlinked pitch.md would pull another file of the
machine into the ledger; a FIFO or a device would block or never end), caps the size, and decodes UTF-8
strictly, each with a one-line error naming the file.
"""

from __future__ import annotations

import errno
import contextvars
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import JudgeError

MIB = 1024 * 1024


@dataclass(frozen=True)
class Limit:
    """A size cap in bytes, with the environment variable that changes it and the words for what it caps."""

    what: str
    env: str
    default: int

    def bytes(self) -> int:
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default
        if not raw.isdigit() or int(raw) == 0:
            raise JudgeError(f"{self.env}: expected a positive number of bytes, got {raw!r}")
        return int(raw)

    def check(self, size: int, where: str) -> None:
        limit = self.bytes()
        if size > limit:
            change = (f"set {self.env} to change it" if not SERVED.get() else
                      f"this server's limit: its organizer sets {self.env} where judge serve runs")
            raise JudgeError(f"{where}: {size} bytes, over the limit of {_size(limit)} for {self.what} ({change})")


# Whether a limit is checked for a request to judge serve: the client cannot change the server's environment, so
# the error names whose limit it is rather than a variable to set (judge.server.state sets it per request).
SERVED: contextvars.ContextVar[bool] = contextvars.ContextVar("judge_served", default=False)


PITCH = Limit("a pitch", "JUDGE_MAX_PITCH_BYTES", 1 * MIB)
PATCH = Limit("a patch", "JUDGE_MAX_PATCH_BYTES", 4 * MIB)
FIELDS = Limit("JSON or TOML input", "JUDGE_MAX_JSON_BYTES", 8 * MIB)


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n % MIB == 0 else f"{n} bytes"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path, limit: Limit) -> bytes:
    """A regular file's bytes, refusing links, special files and files over `limit`, without following a link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise JudgeError(f"{path}: not found") from None
    if stat.S_ISLNK(info.st_mode):
        raise JudgeError(f"{path}: a symbolic link; judge reads only regular files (copy the file here instead)")
    if not stat.S_ISREG(info.st_mode):
        raise JudgeError(f"{path}: {_kind(info.st_mode)}; judge reads only regular files")
    limit.check(info.st_size, str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:  # replaced by a link or removed since lstat
        if error.errno == errno.ELOOP:
            raise JudgeError(f"{path}: a symbolic link; judge reads only regular files (copy the file here instead)") from None
        raise JudgeError(f"{path}: cannot read: {error.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise JudgeError(f"{path}: not a regular file; judge reads only regular files")
        data = file.read(limit.bytes() + 1)
    limit.check(len(data), str(path))
    return data


def decode(data: bytes, where: str) -> str:
    """UTF-8 only: judge stores text, and a byte it cannot read is a mistake to name, not to guess."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise JudgeError(f"{where}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})") from None


def universal_newlines(text: str) -> str:
    """CRLF and CR as LF, as Python's text mode reads them (what judge always stored for pitches and TOML)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def read_text(path: Path, limit: Limit) -> str:
    """A text file of fields or prose: regular, within `limit`, UTF-8, newlines read as LF."""
    return universal_newlines(decode(read_bytes(path, limit), str(path)))


def read_stdin(stream=None) -> str:
    """JSON piped on stdin, within the JSON limit and UTF-8, read no further than the limit allows."""
    if stream is None:
        import sys

        stream = getattr(sys.stdin, "buffer", sys.stdin)
    data = stream.read(FIELDS.bytes() + 1)
    if isinstance(data, str):
        data = data.encode()
    FIELDS.check(len(data), "<stdin>")
    return decode(data, "<stdin>")


def check_text_field(value, limit: Limit, where: str) -> None:
    """A pitch or patch given inline (JSON) meets the same size limit as the file would."""
    if isinstance(value, str):
        limit.check(len(value.encode("utf-8", "surrogatepass")), where)
