"""Where judge's own imports keep their bytecode, on a machine that keeps none for them.

Python caches each module's compiled bytecode beside its source (__pycache__), unless PYTHONDONTWRITEBYTECODE is
set or the source tree is read-only; container images often do both. Every process then compiles every module it
imports from source, each time: on an H200 host lent on 2026-11-30 (PYTHONDONTWRITEBYTECODE=1, no .pyc in the
venv), `import torch, torch._dynamo` took 10.6 and 9.9 s, and 4.5 and 4.4 s once a bytecode cache was warm
(`python3 -c "import torch, torch._dynamo"`, with and without PYTHONPYCACHEPREFIX=/tmp/pyc). judge starts such
processes on every round: the runners' template (torch and the compiler modules its snapshot settles), the oracle,
the compile workers, the device probe, and the `judge` command itself.

So where torch's bytecode is neither kept nor can be written beside its source, judge keeps it in a directory of
its own (`cache_dir`: $JUDGE_BYTECODE_CACHE, else ~/.cache/judge/bytecode; JUDGE_BYTECODE_CACHE=off never) for
judge's own imports only, never for a problem's or a candidate's:
  - the `judge` command (`python -m judge`, the console script), which imports no problem or kernel file;
  - in a child, `cached()` around the imports judge makes before any other code runs (torch, judge's modules; the
    runners' template, the oracle before its reference, a compile worker), and around a whole call that runs no
    contestant code (one without confinement: the probe). A kernel's process never writes there.
A kernel's file imported from a cached path would be checked by its source's mtime and size alone, and judge
writes kernels of equal size to the same path within a second; that is why the cache holds no such file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Iterator, Mapping

ENV = "JUDGE_BYTECODE_CACHE"  # the user's choice of directory ("off": none); the parent's to its children
OFF = "off"
# The heaviest import judge's processes make: where its bytecode is kept, that of the rest of the installation is.
SENTINEL = "torch"


def cache_dir(environ: Mapping[str, str] | None = None, sentinel: str = SENTINEL) -> Path | None:
    """The directory judge's own imports keep their bytecode in, made if missing; None where Python keeps the
    sentinel's bytecode itself (or may write it beside its source), where the user keeps bytecode elsewhere
    (PYTHONPYCACHEPREFIX), where the user said off, or where no such directory can be made."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENV, "")
    if chosen == OFF:
        return None
    if chosen:
        path = Path(chosen)
    elif environ.get("PYTHONPYCACHEPREFIX") or _kept_by_python(environ, sentinel):
        return None
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
        path = Path(base) / "judge" / "bytecode"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path.resolve()


def _kept_by_python(environ: Mapping[str, str], sentinel: str) -> bool:
    """Whether the sentinel's bytecode lies beside its source, or its first import will write it there."""
    try:
        spec = importlib.util.find_spec(sentinel)  # its location only: nothing is imported
    except (ImportError, ValueError):
        return True
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True  # not installed here (nothing heavy to cache), or not a source module
    source = Path(spec.origin)  # where a child without a prefix looks, whatever this process's own prefix is
    if (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").exists():
        return True
    return not environ.get("PYTHONDONTWRITEBYTECODE") and os.access(source.parent, os.W_OK)


def for_children(env: dict[str, str]) -> dict[str, str]:
    """`env` for a child that runs judge's own imports first: it names the cache, where there is one."""
    where = cache_dir()
    if where is None:
        env.pop(ENV, None)
    else:
        env[ENV] = str(where)
    return env


@contextlib.contextmanager
def cached(where: str | None) -> Iterator[None]:
    """Imports made inside read and write their bytecode in `where` (nothing changes when None); Python's own
    settings come back after."""
    if not where:
        yield
        return
    saved = sys.pycache_prefix, sys.dont_write_bytecode
    sys.pycache_prefix, sys.dont_write_bytecode = where, False
    try:
        yield
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = saved


def cache_this_process() -> Path | None:
    """For the `judge` command itself, before it imports its modules: every import of the process from now on
    uses the cache (the command imports judge's modules and libraries, never a problem's or kernel's file). A
    directory the user named that cannot be made is said on stderr: judge then keeps none."""
    where = cache_dir()
    if where is not None:
        sys.pycache_prefix, sys.dont_write_bytecode = str(where), False
    elif (problem := unmade(os.environ)) is not None:
        print(f"judge: {problem}", file=sys.stderr)
    return where


def unmade(environ: Mapping[str, str]) -> str | None:
    """Why the directory $JUDGE_BYTECODE_CACHE names cannot be judge's cache; None where it can, or names none."""
    chosen = environ.get(ENV, "")
    if chosen in ("", OFF):
        return None
    try:
        Path(chosen).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return (f"{ENV}={chosen} cannot be made ({error.strerror or error}): judge keeps no bytecode of its own, "
                f"and its processes compile what they import from source where the machine keeps none")
    return None
