"""Importing a target's files in tests, the way a GPU MODE runner would see them."""

import importlib.util
import sys
import uuid
from pathlib import Path


def load_from(directory: Path, name: str):
    """Import `directory/name.py` under a fresh module name, with the directory's task.py and utils.py."""
    shadowed = {key: sys.modules.pop(key) for key in ("task", "utils") if key in sys.modules}
    sys.path.insert(0, str(directory))
    try:
        spec = importlib.util.spec_from_file_location(f"target_{name}_{uuid.uuid4().hex[:8]}", directory / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(directory))
        for key in ("task", "utils"):
            sys.modules.pop(key, None)
        sys.modules.update(shadowed)
