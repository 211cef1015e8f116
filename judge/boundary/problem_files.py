"""The problem's files as the oracle uses them: a pristine copy of them written for it alone, and the input
generator of each distribution (the reference's generate_input, or a function in a file beside it)."""

from __future__ import annotations

from typing import Any


def generator(reference, spec: str):
    """A distribution's input generator: the reference's generate_input, or `file.py:function` in its directory."""
    import importlib.util
    from pathlib import Path

    if not spec:
        return reference.generate_input
    file, _, function = spec.partition(":")
    path = Path(file)
    module_spec = importlib.util.spec_from_file_location(f"judge_inputs_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function)


def oracle_dir(target, dest) -> Any:
    """A pristine copy of the task's files (the base kernel included, for problems whose reference imports
    from it), written by judge for the oracle alone."""
    target.assemble(dest, target.kernel_source())
    return dest
