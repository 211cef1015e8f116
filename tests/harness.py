"""Helpers that test modules import (tests/conftest.py holds the fixtures built on them; pyproject's pytest
`pythonpath` puts tests/ on sys.path, so `from harness import ...` works from tests/ and its subfolders).

- The judge CLI on a contest directory: FIXTURE is the axpy target that the `judge_env` fixture links in as
  kernels/axpy, PATCH a patch that applies to its base, and proposal_dir() writes a proposal folder for it.
- judge_toml_error(): edit a target's judge.toml, load the target, and get its one-line error.
- EXAMPLE_LEDGERS and example_ledger(): the ledgers of docs/examples, which ship xz-compressed (the tree travels to
  the GPU machine beside a 57 MiB bundle), each decompressed into a folder of the test's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_LEDGERS = sorted((ROOT / "docs" / "examples").rglob("*.db.xz"))
FIXTURE = Path(__file__).parent / "fixtures" / "axpy"
PATCH = (
    "--- a/submission.py\n+++ b/submission.py\n@@ -5,3 +5,3 @@\n # knobs\n-SCALE = 2.0\n+SCALE = 2.0  # same, faster?\n CHUNKS = 1\n"
)
# Size limits read from the environment; the CLI tests run under the defaults whatever the shell has set.
LIMIT_VARS = ("JUDGE_MAX_PITCH_BYTES", "JUDGE_MAX_PATCH_BYTES", "JUDGE_MAX_JSON_BYTES")


def proposal_dir(root: Path, pid: str = "alpha", patch: str | bytes | None = PATCH, extra: str = "",
                 pitch: str | bytes = "It will be faster.") -> Path:
    """proposals/PID under `root`: proposal.toml for round 1 of axpy (`extra` is TOML added before its [claim]),
    pitch.md, and patch.diff unless `patch` is None; str or bytes are written as they are."""
    d = root / "proposals" / pid
    d.mkdir(parents=True)
    (d / "proposal.toml").write_text(
        f'id = "{pid}"\ntitle = "{pid} title"\nauthor = "team-a"\nround = 1\ntarget = "axpy"\n{extra}[claim]\nlow = 1.1\nhigh = 1.2\n')
    _write(d / "pitch.md", pitch)
    if patch is not None:
        _write(d / "patch.diff", patch)
    return d


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


def replacing(old: str, new: str) -> Callable[[str], str]:
    """An edit for judge_toml_error: the first `old` becomes `new` (which must be there)."""

    def edit(text: str) -> str:
        assert old in text, f"{old!r} is not in judge.toml"
        return text.replace(old, new, 1)

    return edit


def judge_toml_error(target_dir: Path, edit: Callable[[str], str]) -> str:
    """Rewrite target_dir/judge.toml as edit(its text), load the target, and return the JudgeError it must raise,
    less the '<path of judge.toml>: ' that starts it (checked here, as is that it is one line)."""
    from judge.errors import JudgeError
    from judge.targets import load_target

    toml = target_dir / "judge.toml"
    toml.write_text(edit(toml.read_text()))
    with pytest.raises(JudgeError) as caught:
        load_target(target_dir)
    message = caught.value.message
    assert message.startswith(f"{toml}: ") and "\n" not in message, message
    return message.removeprefix(f"{toml}: ")



def use_dsl_arch(monkeypatch, arch: str) -> None:
    """CUTE_DSL_ARCH=`arch` for one test that compiles in its own process, where CuTe DSL may already have compiled
    for another: the DSL reads the variable once per process and keeps it, and the last compile's options (an
    explicit --gpu-arch among them) in its singletons, so a test that compiled for sm_100a would leave the next one
    building sm_90a code for the wrong arch (in a pytest-xdist worker, which runs tests of several modules). Every
    such test sets its arch here."""
    import sys

    monkeypatch.setenv("CUTE_DSL_ARCH", arch)
    if "cutlass" in sys.modules:  # else the DSL reads the variable when it starts
        from cutlass.base_dsl.dsl import DSLSingletonMeta

        for dsl in list(DSLSingletonMeta._instances.values()):
            dsl.envar.arch = arch  # each DSL (CuTe's, its experimental one) as if it had read it first
            dsl.compile_options = type(dsl.compile_options)()  # as the DSL starts: no option of an earlier compile


def example_ledger(compressed: Path, folder: Path) -> Path:
    """A shipped example ledger (`name.db.xz`), decompressed into `folder` as `name.db`."""
    import lzma

    ledger = folder / compressed.name.removesuffix(".xz")
    ledger.write_bytes(lzma.decompress(compressed.read_bytes()))
    return ledger
