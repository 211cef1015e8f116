"""What a candidate may not change in its own process: the objects judge's runner measures and checks with.

The runner takes a baseline before any candidate code is imported and compares after each piece of work.
A candidate owns its process, so this cannot stop a determined forger (the parent's wall-clock audit and
the trusted verifier do that); it names the everyday tricks: a patched timer, a replaced reference, a
swapped save function, a tracing hook, a dispatch mode that intercepts tensors, a thread left running.
"""

from __future__ import annotations

import builtins
import inspect
import sys
import threading
from typing import Any

# (module name, dotted attribute) pairs whose identity must not change once the baseline is taken.
WATCHED = [
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
    ("time", "time"), ("time", "sleep"),
    ("os", "write"), ("os", "replace"), ("os", "_exit"), ("json", "dumps"),
    ("builtins", "open"), ("builtins", "print"), ("builtins", "isinstance"), ("builtins", "type"),
    ("torch", "save"), ("torch", "load"), ("torch", "equal"), ("torch", "isfinite"), ("torch", "empty"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "_sleep"), ("torch.cuda", "current_stream"),
    ("torch.cuda", "Event"), ("torch.cuda", "is_available"),
    ("torch.cuda.Event", "record"), ("torch.cuda.Event", "elapsed_time"), ("torch.cuda.Event", "synchronize"),
    ("torch.cuda.Event", "query"), ("torch.cuda.Event", "__init__"),
    ("torch.Tensor", "copy_"), ("torch.Tensor", "fill_"), ("torch.Tensor", "zero_"), ("torch.Tensor", "clone"),
    ("torch.Tensor", "cpu"), ("torch.Tensor", "to"), ("torch.Tensor", "detach"), ("torch.Tensor", "contiguous"),
    ("torch.Tensor", "__torch_function__"),
    ("reference", "generate_input"), ("reference", "ref_kernel"), ("reference", "check_implementation"),
]


def _resolve(module: str, attr: str) -> Any:
    head, _, rest = module.partition(".")
    obj = sys.modules.get(head)
    for part in (rest.split(".") if rest else []):
        obj = getattr(obj, part, None) if obj is not None else None
    if obj is None:
        return None
    # Static lookup: a classmethod fetched with getattr is a new bound object each time.
    return inspect.getattr_static(obj, attr, None)


def fingerprint(obj: Any) -> tuple[int, int | None]:
    code = getattr(obj, "__code__", None)
    return id(obj), id(code) if code is not None else None


class Baseline:
    """Identities of the watched objects, of the runner's own functions, and the process's hooks and threads."""

    def __init__(self, own: dict[str, tuple[Any, str]], workspace: str = ""):
        """`own`: judge's own functions in this process, by label, as (class or module, attribute name)."""
        self.workspace = workspace
        self.objects = {f"{m}.{a}": fingerprint(_resolve(m, a)) for m, a in WATCHED}
        self.own_places = own
        self.own = {label: fingerprint(inspect.getattr_static(owner, attr, None)) for label, (owner, attr) in own.items()}
        self.builtins = dict(vars(builtins))
        self.threads = {t.ident for t in threading.enumerate()}
        self.meta_path = list(sys.meta_path)

    def changes(self) -> list[str]:
        """What differs from the baseline, one short phrase each; empty when nothing does."""
        found = []
        for key, before in self.objects.items():
            module, _, attr = key.rpartition(".")
            if fingerprint(_resolve(module, attr)) != before:
                found.append(f"{key} replaced")
        for label, before in self.own.items():
            owner, attr = self.own_places[label]
            if fingerprint(inspect.getattr_static(owner, attr, None)) != before:
                found.append(f"judge's {label} replaced")
        changed_builtins = sorted(k for k, v in vars(builtins).items()
                                  if k in self.builtins and v is not self.builtins[k] and not k.startswith("_"))
        found += [f"builtins.{k} replaced" for k in changed_builtins]
        if sys.gettrace() is not None:
            found.append("a trace function is set (sys.settrace)")
        if sys.getprofile() is not None:
            found.append("a profile function is set (sys.setprofile)")
        if getattr(threading, "_trace_hook", None) or getattr(threading, "_profile_hook", None):
            found.append("a thread trace or profile hook is set")
        if [m for m in sys.meta_path if m not in self.meta_path]:
            found.append("an import hook was added to sys.meta_path")
        found += _torch_modes()
        found += self._kernel_threads()
        return found

    def _kernel_threads(self) -> list[str]:
        """Threads running the kernel file's own code between calls: work that outlives the call. Threads of
        libraries (torch.compile's workers, tqdm) run no code of the workspace and are left alone."""
        if not self.workspace:
            return []
        frames = sys._current_frames()
        found = []
        for thread in threading.enumerate():
            if thread.ident in self.threads or not thread.is_alive():
                continue
            frame = frames.get(thread.ident)
            while frame is not None:
                if frame.f_code.co_filename.startswith(self.workspace):
                    found.append(f"a thread runs the kernel's code after its call returned ({thread.name} at "
                                 f"{frame.f_code.co_filename.removeprefix(self.workspace).lstrip('/')}:{frame.f_lineno})")
                    break
                frame = frame.f_back
        return found


def _torch_modes() -> list[str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    found = []
    if torch._C._len_torch_dispatch_stack():
        found.append("a torch dispatch mode is active (it can intercept every tensor operation)")
    if torch._C._len_torch_function_stack():
        found.append("a torch function mode is active (it can intercept every tensor operation)")
    return found
