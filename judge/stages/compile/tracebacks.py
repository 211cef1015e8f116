"""Reads a compile's Python traceback (CuTe DSL's included) down to the one line a report shows: the exception,
its first meaningful message line, and the line of the kernel file it points to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

MAX_MESSAGE = 300


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


_CHAIN = ("The above exception was the direct cause", "During handling of the above exception")


_HEADER = re.compile(r"^([A-Za-z_][\w.]*)(?::(.*))?$")


_POINTER = re.compile(r"-->\s*(\S+?):(\d+)")


_DECORATION = re.compile(r"^\s*(\d+\s*)?\|")


def describe_error(traceback_text: str, kernel_file: str) -> dict[str, Any]:
    """The one line a report shows for a failed compile: exception type, first meaningful message line, and
    the kernel file's line it points to (the DSL's own `-->` pointer, else the deepest frame in the file)."""
    lines = _ANSI.sub("", traceback_text).splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")] or [0]
    blocks = []
    for n, begin in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        blocks.append(lines[begin:end])

    last = blocks[-1]
    frames = _frames(last)
    after = frames[-1][3] + 1 if frames else 1
    header_at = next((i for i in range(after, len(last)) if last[i] and not last[i][0].isspace()), None)
    exc_type, body = "Error", []
    if header_at is not None:
        match = _HEADER.match(last[header_at])
        if match:
            exc_type = match.group(1).rsplit(".", 1)[-1]
            body = [match.group(2) or ""]
        else:
            body = [last[header_at]]
        for line in last[header_at + 1:]:
            if any(line.startswith(marker) for marker in _CHAIN):
                break
            body.append(line)
    message = _first_meaningful(body)

    where = None
    for line in body:
        pointer = _POINTER.search(line)
        if pointer and _same_file(pointer.group(1), kernel_file):
            number = int(pointer.group(2))
            text = next(
                (m.group(2) for m in (re.match(r"^\s*(\d+)\s*\|\s?(.*)$", b) for b in body) if m and int(m.group(1)) == number),
                None,
            )
            where = {"file": Path(pointer.group(1)).name, "line": number, "text": text.strip() if text else None}
            break
    if where is None:
        for block in reversed(blocks):
            mine = [f for f in _frames(block) if _same_file(f[0], kernel_file)]
            if mine:
                path, number, text, _ = mine[-1]
                where = {"file": Path(path).name, "line": number, "text": text}
                break

    line = f"{exc_type}: {message}" if message else exc_type
    if where:
        line += f" ({where['file']}:{where['line']}" + (f": `{where['text']}`)" if where["text"] else ")")
    return {"type": exc_type, "message": message, "where": where, "line": line}


def _frames(block: list[str]) -> list[tuple[str, int, str | None, int]]:
    """(file, line, source text, index of the last line belonging to the frame) for each frame of a block."""
    frames = []
    for i, line in enumerate(block):
        match = _FRAME.match(line)
        if not match:
            continue
        text, last = None, i
        if i + 1 < len(block) and block[i + 1].startswith("    ") and not _FRAME.match(block[i + 1]):
            candidate = block[i + 1].strip()
            if candidate and set(candidate) - set("^~ "):
                text, last = candidate, i + 1
        # caret and tilde lines under the source belong to the frame too
        while last + 1 < len(block) and block[last + 1].strip() and set(block[last + 1].strip()) <= set("^~ "):
            last += 1
        frames.append((match.group(1), int(match.group(2)), text, last))
    return frames


def _first_meaningful(body: list[str]) -> str:
    stripped = [line.strip() for line in body if line.strip()]
    for line in stripped:
        if line.lower().startswith("error:"):
            return _clip(line[len("error:"):].strip())
    for line in stripped:
        if not line.startswith("-->") and not _DECORATION.match(line) and set(line) - set("^~ |"):
            return _clip(line)
    return ""


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _same_file(path: str, kernel_file: str) -> bool:
    return Path(path).as_posix().endswith("/" + kernel_file) or path == kernel_file

