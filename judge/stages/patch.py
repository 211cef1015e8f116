"""Checks and applies a proposal's unified diff to the target's kernel file, in pure Python.

A patch may only change the kernel file; binary patches, new or deleted files, and hunks whose
context is not in the base are rejected with the file and the hunk named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import JudgeError

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    header: str
    old_start: int
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0


@dataclass
class FilePatch:
    old_path: str
    new_path: str
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class PatchStats:
    """What a patch changes, for the report: files, hunks, lines added and removed."""

    files: list[str]
    hunks: int
    added: int
    removed: int


def _strip_path(path: str) -> str:
    path = path.split("\t")[0].strip()
    if path.startswith(("a/", "b/")):
        path = path[2:]
    return path


def parse_patch(text: str, source: str = "patch.diff") -> list[FilePatch]:
    """Parse a unified diff into file patches; refuse binary and malformed patches."""
    if "GIT binary patch" in text or re.search(r"^Binary files .* differ$", text, re.M):
        raise JudgeError(f"{source}: binary patches are not accepted")
    lines = text.splitlines()
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_strip_path(line[4:]), _strip_path(lines[i + 1][4:])))
            i += 2
            continue
        if line.startswith("@@"):
            if not files:
                raise JudgeError(f"{source}: hunk '{line}' comes before any '---'/'+++' file header")
            match = HUNK_HEADER.match(line)
            if not match:
                raise JudgeError(f"{source}: malformed hunk header '{line}'")
            old_count = int(match.group(2)) if match.group(2) is not None else 1
            new_count = int(match.group(4)) if match.group(4) is not None else 1
            hunk = Hunk(header=line[: match.end()], old_start=int(match.group(1)))
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_count or seen_new < new_count):
                body = lines[i]
                if body.startswith("\\"):  # "\ No newline at end of file"
                    i += 1
                    continue
                tag, content = (body[:1], body[1:]) if body else (" ", "")
                if tag == " ":
                    hunk.old_lines.append(content)
                    hunk.new_lines.append(content)
                    seen_old += 1
                    seen_new += 1
                elif tag == "-":
                    hunk.old_lines.append(content)
                    hunk.removed += 1
                    seen_old += 1
                elif tag == "+":
                    hunk.new_lines.append(content)
                    hunk.added += 1
                    seen_new += 1
                else:
                    raise JudgeError(f"{source}: hunk '{hunk.header}' of {files[-1].new_path}: unexpected line {body!r}")
                i += 1
            if seen_old != old_count or seen_new != new_count:
                raise JudgeError(
                    f"{source}: hunk '{hunk.header}' of {files[-1].new_path} is truncated "
                    f"(expected {old_count} old and {new_count} new lines)"
                )
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise JudgeError(f"{source}: no file changes found (expected a unified diff with ---/+++ headers)")
    for fp in files:
        if not fp.hunks:
            raise JudgeError(f"{source}: {fp.new_path}: file header without hunks")
    return files


def check_paths(files: list[FilePatch], kernel_file: str, source: str = "patch.diff") -> None:
    """Only the kernel file may change: no other file, no new or deleted files."""
    allowed = kernel_file
    for fp in files:
        for path in (fp.old_path, fp.new_path):
            if path == "/dev/null":
                raise JudgeError(f"{source}: creates or deletes a file ({fp.old_path} -> {fp.new_path}); only {allowed} may change")
            if not (path == allowed or path.endswith("/" + allowed)):
                raise JudgeError(f"{source}: touches {path}; only the target's kernel file {allowed} may change")


def _find(lines: list[str], needle: list[str], around: int) -> int | None:
    """Index where `needle` occurs in `lines`, nearest to `around` (patch-style offset search)."""
    if not needle:
        return min(max(around, 0), len(lines))
    limit = len(lines) - len(needle)
    for distance in range(0, len(lines) + 1):
        for start in (around - distance, around + distance):
            if 0 <= start <= limit and lines[start : start + len(needle)] == needle:
                return start
        if around - distance < 0 and around + distance > limit:
            break
    return None


def apply_patch(base: str, text: str, kernel_file: str, source: str = "patch.diff") -> str:
    """Return the kernel source with the patch applied; raise JudgeError naming the failing hunk."""
    files = parse_patch(text, source)
    check_paths(files, kernel_file, source)
    lines = base.split("\n")
    trailing_newline = base.endswith("\n")
    if trailing_newline:
        lines = lines[:-1]
    offset = 0
    for fp in files:
        for number, hunk in enumerate(fp.hunks, start=1):
            expected_at = hunk.old_start - 1 + offset if hunk.old_lines else hunk.old_start + offset
            at = _find(lines, hunk.old_lines, expected_at)
            if at is None:
                first = next((l for l in hunk.old_lines if l.strip()), "")
                raise JudgeError(
                    f"{source}: hunk {number} '{hunk.header}' of {fp.new_path} does not apply "
                    f"to the base (context not found; first line: {first.strip()!r})"
                )
            lines[at : at + len(hunk.old_lines)] = hunk.new_lines
            offset += len(hunk.new_lines) - len(hunk.old_lines) + (at - expected_at)
    result = "\n".join(lines)
    return result + "\n" if trailing_newline else result


def patch_stats(text: str, source: str = "patch.diff") -> PatchStats:
    """Files, hunks and lines a patch changes, for the report."""
    files = parse_patch(text, source)
    hunks = [h for fp in files for h in fp.hunks]
    return PatchStats(
        files=sorted({fp.new_path for fp in files}),
        hunks=len(hunks),
        added=sum(h.added for h in hunks),
        removed=sum(h.removed for h in hunks),
    )
