"""A static read of a patched kernel: flags that tell a judge where to look, never a verdict.

Contestants are paid in measured speedup, so some will try to win without a faster kernel: read or
patch the timer's clocks, remember an answer across calls (keyed on the input's address), hide work
on a thread or a stream the timer does not see, or reach into the reference. Each leaves a mark in the
Python source that an AST walk finds, while honest kernel code (CuTe DSL, torch launches, pointers
handed to a kernel) does not. Names are resolved through the file's imports and simple aliases, so
`import time as t; t.sleep` and `getattr(time, "sleep")` read as `time.sleep`. Strings run as code,
native code and introspection are flags themselves, because past them a static read sees nothing.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
from collections import Counter
from dataclasses import asdict, dataclass, replace
from fnmatch import fnmatchcase

from .patching import HUNK_HEADER, parse_patch

RULES: dict[str, str] = {
    "monkeypatch": "writes an attribute of an imported module or object (torch, time, builtins, reference, ...) or code objects",
    "sys-modules": "touches sys.modules, the import machinery or __import__",
    "threads": "threads, processes, async tasks, signal/atexit hooks, finalizers, __del__ or tracers",
    "subprocess": "runs another program (subprocess, os.system, exec*, fork, pty)",
    "file-io": "reads or writes files (open, pathlib, os, shutil, tempfile, torch/numpy save and load, sqlite3)",
    "network": "uses the network",
    "cache-by-identity": "keeps state across calls: lookups keyed on data_ptr()/id()/hash(), module-level caches (with their key), memoization",
    "sleep": "sleeps or busy-waits on a clock",
    "timing": "reads clocks or CUDA events, synchronizes, or creates/switches CUDA streams, profiles",
    "reference": "reaches into the reference, the judge package or task.yml",
    "introspection": "inspects or rewrites the running program: frames, gc, ctypes, code objects, globals(), torch dispatch, torch._C",
    "env": "reads JUDGE_* or writes the environment, changes directory, signals or limits processes",
    "dynamic-code": "runs code made at run time: exec, eval, compile, import_module, unpickling, decoded blobs, native builds",
    "unparsable": "the patched file does not parse",
}

# Resolved dotted names per rule (fnmatch patterns; "p" also matches "p.x" and "p(...)").
_PATTERNS = {rule: pats.split() for rule, pats in {
    "sys-modules": "sys.modules sys.meta_path sys.path_hooks sys.path_importer_cache importlib.reload imp.reload builtins.__import__",
    "threads": "threading _thread concurrent multiprocessing torch.multiprocessing asyncio signal.signal signal.setitimer "
               "signal.alarm atexit weakref.finalize sys.settrace sys.setprofile sys.setswitchinterval sys.addaudithook sys.monitoring",
    "subprocess": "subprocess os.system os.popen os.exec* os.spawn* os.fork* os.posix_spawn* os.startfile pty pexpect",
    "file-io": "builtins.open io.open io.FileIO os.open os.fdopen os.remove os.unlink os.rename os.renames os.replace os.mkdir "
               "os.makedirs os.rmdir os.removedirs os.chmod os.chown os.symlink os.link os.listdir os.scandir os.walk os.truncate "
               "os.stat os.path.exists os.path.isfile os.path.getmtime shutil tempfile glob pathlib mmap fcntl sqlite3 shelve dbm "
               "torch.save torch.load torch.from_file numpy.save* numpy.load* numpy.fromfile numpy.genfromtxt numpy.memmap pickle.dump*",
    "network": "socket ssl urllib urllib3 http requests httpx aiohttp ftplib smtplib telnetlib xmlrpc paramiko websocket websockets grpc zmq",
    "sleep": "time.sleep torch.cuda._sleep asyncio.sleep signal.pause",
    "timing": "time.perf_counter* time.time* time.monotonic* time.process_time* time.thread_time* time.clock_gettime* timeit "
              "torch.cuda.Event torch.Event torch.cuda.synchronize torch.cuda.Stream torch.cuda.stream torch.cuda.set_stream "
              "torch.cuda.ExternalStream torch.cuda.streams torch.cuda.set_sync_debug_mode torch.profiler torch.autograd.profiler "
              "torch.cuda.profiler *.cuEvent* *.cudaEvent* *.cuStreamCreate* *.cudaStreamCreate* *Synchronize",
    "reference": "reference judge",
    "introspection": "inspect sys._getframe sys._current_frames gc.get_objects gc.get_referrers gc.get_referents ctypes cffi "
                     "traceback.walk_stack traceback.extract_stack builtins.globals torch.utils._python_dispatch torch.overrides "
                     "torch._subclasses torch.library torch._C",
    "env": "os.putenv os.unsetenv os.chdir os.fchdir os.getppid os.getpid os.kill os.killpg os.nice os.sched_setaffinity "
           "resource.setrlimit resource.prlimit signal.pthread_kill signal.raise_signal psutil",
    "dynamic-code": "builtins.exec builtins.eval builtins.compile importlib.import_module importlib.util importlib.machinery "
                    "types.FunctionType types.CodeType types.ModuleType marshal pickle.load* pickle.Unpickler dill cloudpickle "
                    "base64 zlib.decompress* lzma bz2 gzip.decompress codecs.decode runpy code torch.utils.cpp_extension",
}.items()}
# Launch code reads the current stream's raw handle this way; it is not a hook.
_ALLOWED = ("torch._C._cuda_getCurrentRawStream",)
_CLOCKS = ["time.perf_counter*", "time.time*", "time.monotonic*", "time.process_time*", "time.clock_gettime*"]
# Attribute names that mean the same thing whatever the receiver (a local stream, path or frame).
_ATTRS = {
    **dict.fromkeys("read_text read_bytes write_text write_bytes tofile unlink mkdir rmdir touch symlink_to".split(), "file-io"),
    **dict.fromkeys("synchronize elapsed_time wait_stream wait_event record_event".split(), "timing"),
    **dict.fromkeys("__code__ __closure__ __globals__ __builtins__ __subclasses__ f_back f_locals f_globals f_code gi_frame "
                    "tb_frame cr_frame".split(), "introspection"),
    **dict.fromkeys("ref_kernel check_implementation generate_input".split(), "reference"),
}
_DUNDER_WRITES = {"__code__", "__globals__", "__builtins__", "__dict__", "__class__", "__defaults__", "__kwdefaults__"}
_MUTATORS = {"update", "setdefault", "append", "extend", "insert", "clear", "pop", "popitem", "remove", "discard", "add",
             "appendleft", "__setitem__", "__delitem__"}
# Module functions are named add, append, insert (torch.add, cute.append): only dict writes mean a write.
_MODULE_MUTATORS = {"update", "setdefault", "clear", "pop", "popitem", "__setitem__", "__delitem__"}
_LOOKUPS = {"get", "setdefault", "pop", "__contains__", "__getitem__"}
_IDENTITY = {"data_ptr", "untyped_storage", "storage", "_typed_storage", "__hash__"}
_SHAPES = {"shape": "shapes", "size": "shapes", "numel": "shapes", "ndim": "shapes", "dim": "shapes", "dtype": "dtypes",
           "device": "device", "stride": "strides", "is_contiguous": "strides"}
_CONTAINERS = {"dict", "list", "set", "OrderedDict", "defaultdict", "deque", "Counter", "WeakKeyDictionary",
               "WeakValueDictionary", "WeakSet"}
_MEMOIZERS = {"functools.lru_cache", "functools.cache", "functools.cached_property"}
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class Flag:
    rule: str
    line: int
    text: str
    why: str

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Flag":
        return cls(rule=d["rule"], line=int(d["line"]), text=d["text"], why=d["why"])


def _matches(name: str, patterns) -> bool:
    return any(fnmatchcase(name, p) or fnmatchcase(name, p + ".*") or fnmatchcase(name, p + "(*") for p in patterns)


def _short(node: ast.AST, width: int = 60) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _disp(name: str) -> str:
    return name.removeprefix("builtins.")


def _root(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _const_str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _own(body):
    """A scope's nodes, not those of nested functions (their own scopes); class bodies belong to it."""
    todo = list(body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _FUNCS):
            todo.extend(ast.iter_child_nodes(node))


class _Scope:
    def __init__(self, node):
        self.name = None if isinstance(node, ast.Module) else getattr(node, "name", "<lambda>")
        self.nodes = list(_own(node.body if isinstance(node.body, list) else [node.body]))
        self.globals = {n for s in self.nodes if isinstance(s, ast.Global) for n in s.names}
        a = getattr(node, "args", None)
        self.params = {x.arg for x in (a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]) if x} if a else set()
        self.defs: dict[str, list[ast.AST]] = {}
        for n in self.nodes:
            if isinstance(n, ast.Assign):
                pairs = [(t, n.value) for t in n.targets]
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
                pairs = [(n.target, n.value)]
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                pairs = [(n.target, n.iter)]
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                pairs = [(n.optional_vars, n.context_expr)]
            else:
                continue
            for t, v in pairs:
                for x in ast.walk(t):
                    if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store):
                        self.defs.setdefault(x.id, []).append(v)
        named = {n.name for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        self.locals = (self.params | set(self.defs) | named) - self.globals


class _Screen:
    def __init__(self, tree: ast.Module, lines: list[str]):
        self.tree, self.lines, self.found = tree, lines, {}
        self.parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.module = _Scope(tree)
        self.scopes = [self.module] + [_Scope(n) for n in ast.walk(tree) if isinstance(n, _FUNCS)]
        self.aliases: dict[str, str] = {}
        self.modules = set()  # names `import x` binds are modules: mutate(), update() on them are calls
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.modules.add(a.name if a.asname else a.name.split(".")[0])
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}" if node.module else a.name
        bound = set(self.aliases).union(*(s.locals | s.globals for s in self.scopes))
        self.builtin_names = set(dir(builtins)) - bound
        for _ in range(2):  # aliases of aliases: `cuda = torch.cuda; sync = cuda.synchronize`
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    name = self.resolve(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
                    if name and "(" not in name:
                        self.aliases.setdefault(node.targets[0].id, name)
        self.state = {}  # module-level names that a function can keep state in -> what they hold
        for n in tree.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.state[n.name] = "class" if isinstance(n, ast.ClassDef) else "function"
        for name, values in self.module.defs.items():
            self.state.setdefault(name, self._kind(values[0]))

    # -- names -------------------------------------------------------------------------------------
    def resolve(self, node) -> str | None:
        """The dotted name `node` stands for through the imports ("t.sleep" -> "time.sleep"), or None."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            return "builtins." + node.id if node.id in self.builtin_names else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return base and f"{base}.{node.attr}"
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            if func == "builtins.getattr" and len(node.args) >= 2 and _const_str(node.args[1]):
                base = self.resolve(node.args[0])
                return base and f"{base}.{node.args[1].value}"
            if func in ("importlib.import_module", "builtins.__import__") and node.args and _const_str(node.args[0]):
                return node.args[0].value
            return func and f"{func}()"
        if isinstance(node, ast.Subscript) and self.resolve(node.value) == "sys.modules":
            return _const_str(node.slice)  # sys.modules["reference"] is the module itself
        return None

    def _kind(self, value) -> str:
        for types, kind in ((ast.Dict, ast.DictComp), "dict"), ((ast.List, ast.ListComp), "list"), ((ast.Set, ast.SetComp), "set"):
            if isinstance(value, types):
                return kind
        name = self.resolve(value.func) if isinstance(value, ast.Call) else None
        last = name.rsplit(".", 1)[-1] if name else ""
        return last if last in _CONTAINERS else "variable"

    def add(self, rule: str, where, why: str) -> None:
        line = where if isinstance(where, int) else where.lineno
        text = self.lines[line - 1].strip()[:120] if 0 < line <= len(self.lines) else ""
        self.found.setdefault((line, rule), Flag(rule, line, text, why))

    # -- what a key or value is made of ----------------------------------------------------------------
    def _labels(self, expr, scope) -> dict:
        """Identity labels (data_ptr(), id(), ...), the arguments an object comes from, and shape labels."""
        out = {"ident": [], "obj": [], "shape": set()}
        todo, seen = [expr], set()
        while todo:
            n = todo.pop()
            if isinstance(n, ast.Call):
                f, name = n.func, self.resolve(n.func)
                attr = f.attr if isinstance(f, ast.Attribute) else None
                if attr in _IDENTITY:
                    out["ident"].append(f"{attr}()")
                elif attr in _SHAPES:
                    out["shape"].add(_SHAPES[attr])
                elif name in ("builtins.id", "weakref.ref"):
                    out["ident"].append(_disp(name) + "()")
                elif name == "builtins.len":
                    out["shape"].add("shapes")
                elif name == "builtins.hash":
                    inner = [self._labels(a, scope) for a in n.args]
                    if any(i["ident"] or i["obj"] or not i["shape"] for i in inner):
                        out["ident"].append("hash()")
                    for i in inner:
                        out["shape"] |= i["shape"]
                elif name and name.startswith("builtins."):  # tuple(...), sorted(...), str(...) keep what goes in
                    todo += [*n.args, *(k.value for k in n.keywords)]
                # Any other call makes a new value: a pipeline built from a barrier's data_ptr() is no key.
            elif isinstance(n, ast.Attribute):
                if n.attr == "_cdata":
                    out["ident"].append("_cdata")
                elif n.attr in _SHAPES:
                    out["shape"].add(_SHAPES[n.attr])
                else:
                    todo.append(n.value)
            elif isinstance(n, ast.Name):
                if scope is not None and n.id in scope.defs and n.id not in seen:
                    seen.add(n.id)
                    todo += scope.defs[n.id]
                elif scope is not None and n.id in scope.params:
                    out["obj"].append(n.id)
            elif not isinstance(n, _FUNCS):
                todo += list(ast.iter_child_nodes(n))
        return out

    def _key(self, key, scope) -> str:
        labels = self._labels(key, scope)
        if labels["ident"]:
            return f"keyed on {labels['ident'][0]}"
        if labels["obj"]:
            return f"keyed on {_short(key, 40)}, from argument {sorted(labels['obj'])[0]}"
        if labels["shape"]:
            return "keyed on " + ", ".join(sorted(labels["shape"]))
        if isinstance(key, ast.Name) and len(scope.defs.get(key.id, [])) == 1:
            key = scope.defs[key.id][0]
        return f"keyed on {_short(key, 50)}"

    def _state(self, scope, name: str, rebinding: bool) -> bool:
        """Does `name` in this function mean a module-level binding (state that outlives the call)?"""
        if scope is self.module or name not in self.state or name in self.aliases:
            return False
        return name in scope.globals if rebinding else name not in scope.locals

    # -- the checks --------------------------------------------------------------------------------
    def run(self) -> list[Flag]:
        for scope in self.scopes:
            for node in scope.nodes:
                self._writes(scope, node)
                self._calls(scope, node)
                self._identity(scope, node)
                self._defs(node)
        for node in ast.walk(self.tree):
            self._names(node)
        return [self.found[k] for k in sorted(self.found)]

    def _writes(self, scope, node) -> None:
        if isinstance(node, ast.Assign):
            targets, value, verb = node.targets, node.value, "assigns"
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets, value, verb = [node.target], node.value, "augments" if isinstance(node, ast.AugAssign) else "assigns"
        elif isinstance(node, ast.Delete):
            targets, value, verb = node.targets, None, "deletes"
        else:
            return
        flat, targets = [], list(targets)
        while targets:
            t = targets.pop()
            targets += t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t.value] if isinstance(t, ast.Starred) else []
            flat += [] if isinstance(t, (ast.Tuple, ast.List, ast.Starred)) else [t]
        for t in flat:
            base = self.resolve(t.value) if isinstance(t, (ast.Attribute, ast.Subscript)) else None
            if isinstance(t, ast.Attribute) and (base or t.attr in _DUNDER_WRITES):
                self.add("monkeypatch", t, f"{verb} {_disp(base) + '.' + t.attr if base else _short(t)}")
            elif isinstance(t, ast.Subscript):
                if base == "builtins.globals()":
                    self.add("introspection", t, "writes globals()[...]")
                elif base and base.startswith("sys.modules"):
                    self.add("sys-modules", t, f"{verb} {_short(t.value)}[...]")
                elif (base and not base.startswith("os.environ")) or (
                        isinstance(t.value, ast.Attribute) and t.value.attr == "__dict__"):
                    self.add("monkeypatch", t, f"writes {_short(t.value)}[...]")
            root = _root(t)
            if root is None or getattr(t, "attr", "") in _DUNDER_WRITES or not self._state(scope, root.id, isinstance(t, ast.Name)):
                continue
            kind, here = self.state[root.id], f"in {scope.name}()"
            ident = self._labels(value, scope)["ident"] if value is not None else []
            if isinstance(t, ast.Subscript) and t.value is root:
                self.add("cache-by-identity", t, f"writes module-level {kind} {root.id} {here}, {self._key(t.slice, scope)}")
            elif ident:
                self.add("cache-by-identity", t, f"stores {ident[0]} in module-level {_short(t, 40)}")
            elif isinstance(t, ast.Name):
                self.add("cache-by-identity", t, f"rebinds module-level {kind} {root.id} {here} (kept across calls)")
            else:
                self.add("cache-by-identity", t, f"{verb} {_short(t, 40)} on module-level {root.id} {here} (kept across calls)")

    def _calls(self, scope, node) -> None:
        if not isinstance(node, ast.Call):
            return
        func, name = node.func, self.resolve(node.func)
        if name in ("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__") and node.args:
            target, attr = self.resolve(node.args[0]), _const_str(node.args[1]) if len(node.args) > 1 else None
            if target or attr in _DUNDER_WRITES:
                what = _disp(target) if target else _short(node.args[0], 40)
                self.add("monkeypatch", node, f"calls {_disp(name)} on {what}" + (f".{attr}" if attr else " with a computed name"))
        elif name == "builtins.getattr" and len(node.args) >= 2 and not _const_str(node.args[1]) and self.resolve(node.args[0]):
            self.add("introspection", node, f"getattr on {_disp(self.resolve(node.args[0]))} with a computed name")
        elif name == "builtins.vars" and node.args and self.resolve(node.args[0]):
            self.add("introspection", node, f"calls vars({_disp(self.resolve(node.args[0]))})")
        if not isinstance(func, ast.Attribute) or func.attr not in _MUTATORS:
            return
        base, root = self.resolve(func.value), _root(func.value)
        if base == "sys.path":
            self.add("sys-modules", node, f"edits sys.path with .{func.attr}()")
        elif base and func.attr in _MODULE_MUTATORS and "(" not in base and root is not None and root.id in self.aliases \
                and not base.startswith(("os.environ", "sys.")) and base not in self.modules:
            self.add("monkeypatch", node, f"mutates {_disp(base)} with .{func.attr}()")
        if root is not None and func.value is root and self._state(scope, root.id, False):
            ident = [l for a in node.args for l in self._labels(a, scope)["ident"]]
            self.add("cache-by-identity", node, f"passes {ident[0]} to module-level {root.id}.{func.attr}()" if ident else
                     f"mutates module-level {self.state[root.id]} {root.id} with .{func.attr}() in {scope.name}()")

    def _identity(self, scope, node) -> None:
        def ident(expr):
            labels = self._labels(expr, scope)["ident"]
            return labels[0] if labels else None

        if isinstance(node, ast.Subscript) and (label := ident(node.slice)):
            verb = "looks up" if isinstance(node.ctx, ast.Load) else "writes"
            self.add("cache-by-identity", node, f"{verb} {_short(node.value, 40)}[...] keyed on {label}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LOOKUPS \
                and node.args and (label := ident(node.args[0])):
            self.add("cache-by-identity", node, f"looks up {_short(node.func, 40)}() keyed on {label}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.In, ast.NotIn)) and (label := ident(left)):
                    self.add("cache-by-identity", node, f"tests whether {label} is in {_short(right, 40)}")
                elif isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    for a, b in ((left, right), (right, left)):
                        label, root = ident(a), _root(b)
                        if label and root is not None and self._state(scope, root.id, False):
                            self.add("cache-by-identity", node, f"compares {label} with module-level {root.id}")
        elif isinstance(node, ast.Assign) and (label := ident(node.value)):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    self.add("cache-by-identity", t, f"stores {label} in {_short(t, 40)}")

    def _defs(self, node) -> None:
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                if (name := self.resolve(b)) and _matches(name, ["torch.Tensor", "torch.utils._python_dispatch", "torch.overrides"]):
                    self.add("introspection", node, f"class {node.name} subclasses {name}")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        if node.name == "__del__":
            self.add("threads", node, "defines __del__ (runs at garbage collection)")
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("introspection", node, f"defines {node.name} (intercepts torch calls)")
        for dec in node.decorator_list:
            name = self.resolve(dec.func if isinstance(dec, ast.Call) else dec)
            if name in _MEMOIZERS:
                args = ", ".join(a.arg for a in node.args.args) or "none"
                self.add("cache-by-identity", dec, f"memoizes {node.name}() with {name}, keyed on its arguments ({args})")
        a = node.args
        pairs = list(zip(a.args[len(a.args) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
        for arg, default in pairs:
            if default is not None and self._kind(default) != "variable":
                self.add("cache-by-identity", default, f"{node.name}() has a mutable default {arg.arg}={_short(default, 30)} (kept across calls)")

    def _names(self, node) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                full = f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) and node.module else a.name
                for rule, pats in _PATTERNS.items():
                    if _matches(full, pats):
                        self.add(rule, node, f"imports {full}")
                if a.name in _ATTRS and _ATTRS[a.name] == "reference":
                    self.add("reference", node, f"imports {a.name}")
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not isinstance(self.parent.get(node), ast.Expr):
            for needle in ("task.yml", "reference.py"):
                if needle in node.value:
                    self.add("reference", node, f"names {needle} in a string")
        if isinstance(node, ast.While):
            for n in ast.walk(node):
                if (name := self.resolve(n)) and _matches(name, _CLOCKS):
                    self.add("sleep", node, f"busy-waits on {name.split('(')[0]}")
                    break
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return
        parent = self.parent.get(node)
        ctx = getattr(node, "ctx", None)
        verb = "calls" if isinstance(parent, ast.Call) and parent.func is node else \
            "assigns" if isinstance(ctx, ast.Store) else "deletes" if isinstance(ctx, ast.Del) else "uses"
        if isinstance(node, ast.Attribute) and node.attr in _ATTRS:
            rule = _ATTRS[node.attr]
            if rule != "introspection" or verb == "uses" or verb == "calls":
                self.add(rule, node, f"{verb} {_short(node, 50)}")
        if isinstance(node, ast.Name) and node.id in ("__builtins__", *(k for k, v in _ATTRS.items() if v == "reference")):
            self.add(_ATTRS.get(node.id, "introspection"), node, f"{verb} {node.id}")
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # only the whole chain (torch.cuda.Event, not torch.cuda) is read
        name = self.resolve(node)
        if not name:
            return
        if name.startswith(("os.environ", "os.getenv")):
            self._env(node, name, parent)
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            self.add("introspection", node, f"reads {_disp(name)}")
        if any(name == a or name.startswith((a + ".", a + "(")) for a in _ALLOWED):
            return
        head = name.split("(")[0]
        for rule, pats in _PATTERNS.items():
            if _matches(name, pats) and not ("(" in name and _matches(head, pats)):  # open().read: `open` is flagged
                self.add(rule, node, f"{verb} {_disp(name)}")

    def _env(self, node, name: str, parent) -> None:
        def key(expr, write: bool):
            k = _const_str(expr)
            if write:
                self.add("env", node, f"writes os.environ[{k!r}]" if k is not None else "writes os.environ with a computed key")
            elif k is None:
                self.add("env", node, "reads os.environ with a computed key")
            elif k.startswith("JUDGE_"):
                self.add("env", node, f"reads os.environ[{k!r}]")

        method = name.split(".")[2] if name.count(".") >= 2 else ""
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        if name in ("os.getenv", "os.getenvb") or method == "get":
            key(call.args[0], False) if call and call.args else self.add("env", node, f"uses {name}")
        elif method in _MUTATORS:
            self.add("env", node, f"calls {name}" + (f"({_short(call.args[0], 30)}, ...)" if call and call.args else "()"))
        elif method:
            self.add("env", node, f"reads the whole os.environ (.{method})")
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            key(parent.slice, not isinstance(parent.ctx, ast.Load))
        elif isinstance(parent, ast.Compare) and parent.left is not node and all(isinstance(o, (ast.In, ast.NotIn)) for o in parent.ops):
            key(parent.left, False)
        else:
            self.add("env", node, "reads the whole os.environ")


def screen(source: str, only_lines: set[int] | None = None) -> list[Flag]:
    """Flags in `source` (a whole kernel file), sorted by line then rule; with only_lines, only flags on those lines."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        line = error.lineno or 1
        text = lines[line - 1].strip()[:120] if 0 < line <= len(lines) else ""
        flags = [Flag("unparsable", line, text, f"does not parse: {error.msg}")]
    else:
        flags = _Screen(tree, lines).run()
    return [f for f in flags if only_lines is None or f.line in only_lines]


def added_lines(patch: str) -> set[int]:
    """Line numbers, in the patched (new) file, of the lines a unified diff adds (as its hunk headers say)."""
    parse_patch(patch)  # refuses what judge would refuse, naming the hunk
    added, new, left = set(), 0, [0, 0]  # left: old and new lines still due in the current hunk
    for line in patch.splitlines():
        if left == [0, 0]:
            if match := HUNK_HEADER.match(line):
                new = int(match.group(3))
                left = [int(match.group(2) or 1), int(match.group(4) or 1)]
            continue
        tag = line[:1] or " "
        if tag == "+":
            added.add(new)
        if tag in " +":
            new, left[1] = new + 1, left[1] - 1
        if tag in " -":
            left[0] -= 1
    return added


def _changed_lines(base: str, patched: str, patch: str) -> set[int]:
    """The patched file's lines that the patch adds.

    judge applies a hunk where its context is, whatever its header's "+start" says, so a header can
    point at the wrong lines: a header's line counts only where the patched file holds that very text,
    and a line-by-line diff of the two files adds whatever the headers missed.
    """
    new_lines = patched.splitlines()
    texts = {}
    n, left = 0, [0, 0]
    for line in patch.splitlines():  # the text of each added line, by its header's number
        if left == [0, 0]:
            if match := HUNK_HEADER.match(line):
                n, left = int(match.group(3)), [int(match.group(2) or 1), int(match.group(4) or 1)]
            continue
        tag = line[:1] or " "
        if tag == "+":
            texts[n] = line[1:]
        if tag in " +":
            n, left[1] = n + 1, left[1] - 1
        if tag in " -":
            left[0] -= 1
    lines = {i for i in added_lines(patch) if 0 < i <= len(new_lines) and new_lines[i - 1] == texts.get(i)}
    matcher = difflib.SequenceMatcher(None, base.splitlines(), new_lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


def screen_patch(base_source: str, patched_source: str, patch: str) -> list[Flag]:
    """Flags on the lines the patch adds; a source that does not parse gives one 'unparsable' flag.

    A patch also changes what untouched lines mean (a new alias, a new key for an old cache), so a
    flag on an untouched line that the base does not have is kept too, and says so.
    """
    flags = screen(patched_source)
    if flags and flags[0].rule == "unparsable":
        return flags
    lines = _changed_lines(base_source, patched_source, patch)
    before = Counter((f.rule, f.text, f.why) for f in screen(base_source) if f.rule != "unparsable")
    out = []
    for flag in flags:
        if flag.line in lines:
            out.append(flag)
        elif before[(flag.rule, flag.text, flag.why)] > 0:
            before[(flag.rule, flag.text, flag.why)] -= 1
        else:
            out.append(replace(flag, why=f"untouched line, new with this patch: {flag.why}"))
    return out
