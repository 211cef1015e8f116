"""Entry point of an isolated child: `python -m judge.child module:function kwargs.json result.json`.

Kept tiny on purpose: everything here runs beside candidate code, and anything that goes wrong after the
result is written must not change the verdict.
"""

from __future__ import annotations

import faulthandler
import importlib
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path


def _clean(value):
    """NaN and infinities as strings, so the result is strict JSON that SQLite's json functions accept."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _write(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main(argv: list[str]) -> None:
    func, args_file, result_file = argv
    faulthandler.enable()  # a segfault prints the Python stack into the log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's "show me where you hang"
    workspace = os.getcwd()
    # The candidate sees its own files first, and never the directory judge was started from.
    sys.path[:] = [workspace] + [p for p in sys.path if p not in ("", workspace)]

    module_name, _, function_name = func.partition(":")
    kwargs = json.loads(Path(args_file).read_text())
    try:
        function = getattr(importlib.import_module(module_name), function_name)
        value = function(**kwargs)
        text = json.dumps({"ok": True, "value": _clean(value)}, allow_nan=False)
    except Exception as error:  # the verdict is "crashed" with this line; the traceback goes to the log
        traceback.print_exc()
        lines = str(error).strip().splitlines()
        text = json.dumps({"ok": False, "error": f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")})
    _write(Path(result_file), text)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (CUDA context destruction, atexit hooks of candidate code): the result is in.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
