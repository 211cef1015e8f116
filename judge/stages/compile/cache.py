"""The compile stage's on-disk cache and what keys it: a kernel's compile-time configurations (signatures),
each compiled once, and its kept PTX, cubin and resource numbers stored per key."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def default_signature(spec: dict[str, Any]) -> dict[str, Any]:
    """What changes the compiled code when the kernel file does not say: the whole spec less its seed."""
    return {k: v for k, v in spec.items() if k != "seed"}


def canonical(signature: Any) -> Any:
    """A signature as plain JSON (tuples become lists, unknown objects their str), so equal ones compare equal."""
    return json.loads(json.dumps(signature, sort_keys=True, default=str))


def distinct_configs(signatures: list[Any]) -> list[tuple[Any, list[int]]]:
    """Equal signatures compile once: each distinct one, in first-seen order, with the specs it serves."""
    seen: dict[str, int] = {}
    configs: list[tuple[Any, list[int]]] = []
    for index, signature in enumerate(signatures):
        text = json.dumps(canonical(signature), sort_keys=True)
        if text in seen:
            configs[seen[text]][1].append(index)
        else:
            seen[text] = len(configs)
            configs.append((canonical(signature), [index]))
    return configs


def cache_key(key_parts: dict[str, str], signature: Any) -> str:
    """sha256 of kernel source, signature, arch, CuTe DSL version (and the task's own files)."""
    return sha(json.dumps({**key_parts, "signature": canonical(signature)}, sort_keys=True))


class CompileCache:
    """Kept PTX, cubin and resource numbers per cache key: `<root>/<key[:2]>/<key>/{meta.json,kernel.ptx,kernel.cubin}`."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def has(self, key: str) -> bool:
        return (self.path(key) / "meta.json").is_file()

    def get(self, key: str) -> dict[str, Any] | None:
        meta = self.path(key) / "meta.json"
        return json.loads(meta.read_text()) if meta.is_file() else None

    def put(self, key: str, meta: dict[str, Any], files: dict[str, Path]) -> dict[str, str]:
        """Store atomically (a finished directory is renamed into place); returns where the files now live."""
        final = self.path(key)
        stored = {name: str(final / name) for name in files}
        if self.has(key):
            return stored
        final.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=final.parent))
        for name, source in files.items():
            shutil.copyfile(source, partial / name)
        (partial / "meta.json").write_text(json.dumps({**meta, "files": stored}, indent=1))
        try:
            os.rename(partial, final)
        except OSError:  # another worker stored the same key first
            shutil.rmtree(partial, ignore_errors=True)
        return stored

    def read_index(self, index_key: str) -> list[dict[str, Any]] | None:
        path = self.root / "index" / f"{index_key}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def write_index(self, index_key: str, configs: list[dict[str, Any]]) -> None:
        path = self.root / "index" / f"{index_key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.{id(configs)}.partial")
        partial.write_text(json.dumps(configs))
        os.replace(partial, path)

