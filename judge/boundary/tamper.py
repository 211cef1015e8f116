"""What a candidate may not change in its own process, found by snapshot, not by a list of names.

The runner takes a snapshot before the kernel is imported: every callable and class bound in torch's modules and
in judge's, the methods of every class defined there (torch.Tensor's among them), builtins, and the process's
hooks (trace, profile, import hooks). `Snapshot.changes()` names whatever differs later, so a route judge never
thought of (a torch function the kernel replaces, a Tensor method judge happens to call) is found all the same.

torch patches some of its own bindings the first time torch.compile runs (dynamo's wrappers, module hooks,
the compile cache's properties); `settle_torch()` imports and applies those before the snapshot, so that an
honest torch.compile kernel changes nothing the snapshot compares.

A guard, the process's first audit hook, refuses any later audit hook (one would run inside judge's own
calls; a library's too, such as filelock's fork check: refused, it never runs, and that is no evidence against
the kernel) and any rewrite of the code of judge's functions, and records a rewrite of the code of torch's, even one
the kernel undoes before the snapshot is compared (Python audits code and defaults written on a function, not
attributes written on a class: those the snapshot finds).

A candidate owns its process, so none of this stops one that rewrites judge's code by name and restores it
unseen; the frame that calls the kernel (judge.boundary.callframe) holds no reference such a rewrite could reach, the
screen flags the mechanisms, and the parent's wall clock bounds what it can hide.
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from typing import Any

# Modules whose bindings are watched: torch's, judge's, and the standard library judge's child code calls.
WATCHED_PREFIXES = ("torch", "judge")
# sys is not among them: its hooks are checked one by one (libraries such as CuTe DSL replace sys.excepthook).
WATCHED_MODULES = ("builtins", "time", "os", "json", "struct", "signal", "gc", "threading", "importlib", "math")
MAX_FINDINGS = 20
_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__")


# torch's modules that patch torch when they are imported or first used by torch.compile (torch 2.11-2.13).
_TORCH_SELF_PATCHING = ("torch._dynamo", "torch._dynamo.eval_frame", "torch._dynamo.mutation_guard",
                        "torch._dynamo.package", "torch._dynamo.pgo", "torch._inductor.codecache",
                        "torch._inductor.runtime.autotune_cache", "torch._functorch._aot_autograd.autograd_cache")


def preload_torch() -> list[str]:
    """Import the modules `settle_torch` applies (torch's compiler: over a second), in a warm spare before any
    kernel exists, so that a runner's bind does not wait for them. Only torch's own code runs here. Returns the
    modules that could not be imported (an older or newer torch)."""
    import importlib

    missing = []
    for name in _TORCH_SELF_PATCHING:
        try:
            importlib.import_module(name)
        except Exception:  # a torch without this module: nothing of it to settle
            missing.append(name)
    return missing


def settle_torch() -> list[str]:
    """Let torch make the changes to itself that its compiler makes on first use, before the snapshot is
    taken; returns the modules that could not be imported (an older or newer torch)."""
    missing = preload_torch()  # already imported in a warm spare: then only looked up
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    guard = sys.modules.get("torch._dynamo.mutation_guard")
    if eval_frame is not None and hasattr(eval_frame, "TorchPatcher"):
        eval_frame.TorchPatcher.patch()
    if guard is not None and hasattr(guard, "install_generation_tagging_init"):
        guard.install_generation_tagging_init()
    return missing


def _watched(name: str) -> bool:
    head = name.partition(".")[0]
    return head in WATCHED_PREFIXES or name in WATCHED_MODULES


_HEAP_TYPE = 1 << 9
_DESCRIPTORS = (staticmethod, classmethod, property, types.ModuleType)


def _mark(value: Any) -> tuple | None:
    """What identifies a binding: the object, and a function's code and defaults (a rewrite keeps the object).
    Only callables, classes, modules and descriptors: a hook needs code. Read by type(), never isinstance(),
    so that a lazy module attribute's properties do not run."""
    kind = type(value)
    if kind is types.FunctionType:
        return (id(value), id(value.__code__), id(value.__defaults__), id(value.__kwdefaults__))
    if kind in _DESCRIPTORS or callable(value):
        return (id(value),)
    return None


def _is_class(value: Any) -> bool:
    return issubclass(type(value), type)


def _class_dict(cls: type) -> dict | None:
    """A class's own namespace where it can change (a heap type); None for C types, which cannot."""
    if not cls.__flags__ & _HEAP_TYPE:
        return None
    try:
        return dict(vars(cls))
    except TypeError:
        return None


def _inherited(cls: type, name: str) -> Any:
    """What `name` resolves to on a base class of `cls` (None where no base has it)."""
    for base in cls.__mro__[1:]:
        namespace = vars(base)
        if name in namespace:
            return namespace[name]
    return None


class Snapshot:
    """Marks of every watched binding, taken before the kernel is imported; `changes()` names what differs."""

    def __init__(self, marks: dict[str, tuple], objects: dict[str, Any], workspace: str):
        self.marks = marks
        self.objects = objects  # keeps what was marked alive, so an id is never reused by another object
        self.workspace = workspace
        self.meta_path = list(sys.meta_path)
        self.path_hooks = list(sys.path_hooks)
        self.threads = {t.ident for t in threading.enumerate()}

    @classmethod
    def take(cls, workspace: str = "") -> "Snapshot":
        marks, objects = _marks()
        return cls(marks, objects, workspace)

    def changes(self) -> list[str]:
        """What differs from the snapshot, one short phrase each; empty when nothing does."""
        now, objects = _marks()
        found = [f"{shown(name)} replaced" for name, mark in self.marks.items() if now.get(name, mark) != mark]
        found += [f"{shown(name)} replaced (shadowing its base class's)" for name, value in objects.items()
                  if name not in self.marks and "." in name.partition(":")[2]
                  and name.rpartition(".")[0] in self.marks and _shadows(name, value)]
        found += [f"{shown(name)} deleted" for name in self.marks
                  if name not in now and _module_of(name) in sys.modules]
        if len(found) > MAX_FINDINGS:
            found = found[:MAX_FINDINGS] + [f"and {len(found) - MAX_FINDINGS} more bindings replaced"]
        if sys.gettrace() is not None:
            found.append("a trace function is set (sys.settrace)")
        if sys.getprofile() is not None:
            found.append("a profile function is set (sys.setprofile)")
        if getattr(threading, "_trace_hook", None) or getattr(threading, "_profile_hook", None):
            found.append("a thread trace or profile hook is set")
        if [m for m in sys.meta_path if m not in self.meta_path]:
            found.append("an import hook was added to sys.meta_path")
        if [h for h in sys.path_hooks if h not in self.path_hooks]:
            found.append("an import hook was added to sys.path_hooks")
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and any(monitoring.get_tool(t) is not None for t in range(6)):
            found.append("a sys.monitoring tool is registered")
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


# Where torch defines a class that everyone knows by another name.
_PUBLIC = {"torch._tensor.Tensor": "torch.Tensor", "torch.cuda.streams.Event": "torch.cuda.Event",
           "torch.cuda.streams.Stream": "torch.cuda.Stream"}


def shown(key: str) -> str:
    """A binding's key ('module:attr', 'module:Class.attr') as a reader knows it: 'torch.Tensor.copy_'."""
    module, _, dotted = key.partition(":")
    name = f"{module}.{dotted}"
    for private, public in _PUBLIC.items():
        if name == private or name.startswith(private + "."):
            return public + name[len(private):]
    return name


def _module_of(name: str) -> str:
    return name.split(":", 1)[0]


def _marks() -> tuple[dict[str, tuple], dict[str, Any]]:
    """Every watched binding's mark, keyed 'module:attr' or 'module:Class.attr'."""
    marks: dict[str, tuple] = {}
    objects: dict[str, Any] = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not _watched(module_name):
            continue
        try:
            namespace = dict(vars(module))
        except TypeError:
            continue
        for attr, value in namespace.items():
            mark = _mark(value)
            if mark is None:
                continue
            key = f"{module_name}:{attr}"
            marks[key], objects[key] = mark, value
            if _is_class(value) and getattr(value, "__module__", "") == module_name:
                for name, member in (_class_dict(value) or {}).items():
                    inner = _mark(member)
                    if inner is not None:
                        marks[f"{key}.{name}"], objects[f"{key}.{name}"] = inner, member
    return marks, objects


def _shadows(key: str, value: Any) -> bool:
    """Whether a class member that was not there before hides a callable of a base class."""
    module_name, _, dotted = key.partition(":")
    class_name, _, member = dotted.rpartition(".")
    cls = getattr(sys.modules.get(module_name), class_name, None)
    return _is_class(cls) and _mark(_inherited(cls, member)) is not None


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


class Guard:
    """The state of the process's first audit hook: what it refused and what it saw written."""

    def __init__(self):
        self.seen: list[str] = []

    def findings(self) -> list[str]:
        out = list(dict.fromkeys(self.seen))
        return out[:MAX_FINDINGS] + ([f"and {len(out) - MAX_FINDINGS} more"] if len(out) > MAX_FINDINGS else [])


def install_guard() -> Guard:
    """Add the audit hook described in the module docstring (once per process) and return its state."""
    guard = Guard()
    seen = guard.seen

    def hook(event, args, _seen=seen, _stop=RuntimeError, _add="sys.addaudithook", _set="object.__setattr__",
             _parts=_FUNCTION_PARTS, _prefixes=WATCHED_PREFIXES, _function=types.FunctionType,
             _isinstance=isinstance, _getattr=getattr, _str=str):
        if event == _add:  # refused, the hook never runs (CPython drops it silently): no evidence to record
            raise _stop("judge: no audit hook may be added in a kernel's process")
        if event != _set or len(args) < 2:
            return
        target, name = args[0], args[1]
        module = _getattr(target, "__module__", None)
        if not _isinstance(module, _str) or not module.startswith(_prefixes):
            return
        if _isinstance(target, _function):
            if module.startswith("judge") and name in _parts:
                _seen.append(f"a rewrite of judge's function {target.__qualname__}.{name} was refused")
                raise _stop("judge: judge's functions cannot be rewritten in a kernel's process")
            if name in _parts:
                _seen.append(f"the code of {module}.{target.__qualname__} was rewritten ({name})")

    sys.addaudithook(hook)
    return guard
