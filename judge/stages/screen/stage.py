"""A static read of a patched kernel: flags that tell a judge where to look, and one verdict, a forbidden call.

Contestants are paid in measured speedup, so some will try to win without a faster kernel: read or
patch the timer's clocks, remember an answer across calls (keyed on the input's address), hide work
on a thread or a stream the timer does not see, or reach into the reference. Each leaves a mark in the
Python source that an AST walk finds, while honest kernel code (CuTe DSL, torch launches, pointers
handed to a kernel) does not. Names are resolved through the file's imports and simple aliases, so
`import time as t; t.sleep` and `getattr(time, "sleep")` both read as `time.sleep`, and writes are
followed to what the written object holds (judge.stages.screen.holders): a helper's return, a closure's cell,
an argument. Hiding is itself a flag: names built at run time, setattr handed around, namespaces read by
key, frames, hooks that run later. Strings run as code are screened too when they are constants; past a
string built at run time or native code a static read sees nothing, and says so.
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
import time
from dataclasses import replace

from . import forbidden as forbidden_calls
from ..patch import HUNK_HEADER, parse_patch
from .flow import Scopes, static_str
from .holders import Holders
from .indirection import _STRING_DEPTH, IndirectionVisits
from .names import _CONTAINERS, _lines
from .rules import RuleVisits
from ..details import Flag, ScreenDetail
from ..result import StageResult

RULES: dict[str, str] = {
    "monkeypatch": "writes an attribute of an imported module or object (torch, time, builtins, reference, ...), of "
                   "anything holding one, or of code objects",
    "sys-modules": "touches sys.modules, the import machinery or __import__",
    "threads": "threads, processes or async tasks",
    "hooks": "registers code that runs later, inside judge's own calls: trace, profile and audit hooks, signal handlers "
             "and timers, finalizers, weakref and gc callbacks, atexit, __del__",
    "subprocess": "runs another program (subprocess, os.system, exec*, fork, pty)",
    "file-io": "reads or writes files (open, pathlib, os, shutil, tempfile, torch/numpy save and load, sqlite3)",
    "network": "uses the network",
    "cache-by-identity": "state kept across calls: lookups keyed on data_ptr()/id()/hash(), module-level caches "
                         "(the why names the key), memoization",
    "sleep": "sleeps or busy-waits on a clock",
    "timing": "reads clocks or CUDA events, synchronizes, creates or switches CUDA streams, profiles",
    "reference": "reaches into the reference, the judge package or task.yml",
    "indirection": "hides what it reaches: getattr/setattr/delattr/hasattr or imports by names built at run time, "
                   "namespaces (vars(), __dict__, globals()) read by key, setattr handed around as a value, "
                   "dunder calls, closures' cells that hold modules or torch objects",
    "frames": "reads the call stack: its callers' frames and their locals (sys._getframe, inspect.stack, f_back, "
              "f_locals, tb_frame, gi_frame)",
    "introspection": "inspects or rewrites the running program: gc's object lists, ctypes, code objects, globals(), "
                     "torch dispatch, torch._C",
    "env": "reads JUDGE_* or writes the environment, changes directory, signals or limits processes",
    "dynamic-code": "runs code made at run time: exec, eval, compile, import_module, unpickling, decoded blobs, native builds",
    "forbidden-call": "calls what the target forbids (judge.toml [rules] forbidden_calls): the screen's one verdict",
    "unparsable": "the patched file does not parse",
}


class _Screen(RuleVisits, IndirectionVisits):
    def __init__(self, tree: ast.Module, lines: list[str], forbidden=(), outer: "_Screen | None" = None):
        self.tree, self.lines, self.found, self.forbidden, self.uses = tree, lines, {}, tuple(forbidden), []
        self.depth = outer.depth + 1 if outer else 0
        self.parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.flow = Scopes(tree)
        self.module, self.scopes = self.flow.module, self.flow.all
        self.aliases: dict[str, str] = dict(outer.aliases) if outer else {}
        self.modules: set[str] = set(outer.modules) if outer else set()  # what `import x` binds: a module
        self.star = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.names[0].name == "*"]
        for node in ast.walk(tree):
            for a in node.names if isinstance(node, (ast.Import, ast.ImportFrom)) else []:
                if isinstance(node, ast.Import):
                    self.modules.add(a.asname or a.name.split(".")[0])
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                elif a.name != "*":
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}" if node.module else a.name
        self._alias_assignments(tree)
        self.holders = Holders(self.flow, self.resolve, self.parent)
        self.state = {n.name: "class" if isinstance(n, ast.ClassDef) else "function"
                      for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for name, values in self.module.defs.items():
            self.state.setdefault(name, self._kind(values[0]))

    def _alias_assignments(self, tree) -> None:
        """Aliases of aliases, to a fixed point: `cuda = torch.cuda; sync = cuda.synchronize`, `t = __import__("torch")`."""
        for _ in range(10):
            size = len(self.aliases)
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    name = self.resolve(node.value) if isinstance(node.value, (ast.Name, ast.Attribute, ast.Call,
                                                                               ast.Subscript)) else None
                    if name and "(" not in name:
                        self.aliases.setdefault(node.targets[0].id, name)
            if len(self.aliases) == size:
                return

    def resolve(self, node) -> str | None:
        """The dotted name `node` stands for through the imports ("t.sleep" -> "time.sleep"), or None."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if self.flow.binding(self.flow.scope_of(node), node.id) is not None:
                return None
            if node.id == "__builtins__":
                return "builtins"
            if self.flow.is_builtin(node):
                return "builtins." + node.id
            return f"{self.star[0]}.{node.id}" if len(self.star) == 1 else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return base and f"{base}.{node.attr}"
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            if func == "builtins.getattr" and len(node.args) >= 2 and (name := static_str(node.args[1], self.flow)):
                base = self.resolve(node.args[0])
                return base and "(" not in base and f"{base}.{name}" or None
            if func in ("importlib.import_module", "builtins.__import__") and node.args \
                    and (name := static_str(node.args[0], self.flow)):
                return name
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault", "__getitem__") \
                    and node.args and (name := self._by_key(node.func.value, node.args[0])):
                return name
            return func and f"{func}()"
        if isinstance(node, ast.Subscript):
            return self._by_key(node.value, node.slice)
        return None

    def _by_key(self, value, slice_) -> str | None:
        """A name looked up by a constant key (ns[key], or ns.get(key)): sys.modules["reference"] is the module
        itself, vars(torch)["full"], torch.__dict__["full"] and __builtins__["setattr"] are the names,
        globals()["torch"] is the file's binding."""
        key = static_str(slice_, self.flow)
        if key is None:
            return None
        for _ in range(4):  # a name bound once to the namespace: ns = vars(builtins); ns["setattr"]
            if not isinstance(value, ast.Name) or value.id == "__builtins__" or self.resolve(value):
                break
            bound = self.flow.binding(self.flow.scope_of(value), value.id)
            values = bound.defs.get(value.id, []) if bound else []
            if len(values) != 1:
                return None
            value = values[0]
        if self.resolve(value) == "sys.modules":
            return key
        if self.resolve(value) == "builtins.globals()" or getattr(value, "attr", "") in ("__globals__", "f_globals"):
            return self.aliases.get(key) or None
        owner = value.value if isinstance(value, ast.Attribute) and value.attr == "__dict__" else \
            value.args[0] if isinstance(value, ast.Call) and self.resolve(value.func) == "builtins.vars" and value.args \
            else value if isinstance(value, ast.Name) and value.id == "__builtins__" else None
        base = self.resolve(owner) if owner is not None else None
        return f"{base}.{key}" if base and "(" not in base else None

    def _kind(self, value) -> str:
        for types, kind in ((ast.Dict, ast.DictComp), "dict"), ((ast.List, ast.ListComp), "list"), ((ast.Set, ast.SetComp), "set"):
            if isinstance(value, types):
                return kind
        name = self.resolve(value.func) if isinstance(value, ast.Call) else None
        last = name.rsplit(".", 1)[-1] if name else ""
        return last if last in _CONTAINERS else "variable"

    def add(self, rule: str, where, why: str) -> None:
        line = where if isinstance(where, int) else where.lineno
        self.found.setdefault((line, rule), Flag(rule, line, self._text(line), why))

    def _text(self, line: int) -> str:
        return self.lines[line - 1].strip()[:120] if 0 < line <= len(self.lines) else ""

    def forbid(self, where, name: str, verb: str) -> None:
        """Note a use of a forbidden call, if `name` (resolved, at `where`) is one."""
        line = where if isinstance(where, int) else where.lineno
        self.uses += forbidden_calls.find(self.forbidden, name, verb, line, self._text(line))

    def screen_string(self, code: str, node) -> list[Flag]:
        """The flags of code in a constant string that exec, eval or compile runs, read with this file's imports;
        the forbidden calls in it count as this line's."""
        if self.depth >= _STRING_DEPTH:
            return [Flag("dynamic-code", node.lineno, "", "runs code nested in strings deeper than the screen reads")]
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return [Flag("dynamic-code", node.lineno, "", "runs a string that does not parse as Python")]
        inner = _Screen(tree, _lines(code), self.forbidden, outer=self)
        found = inner.run()
        line = node.lineno
        self.uses += [forbidden_calls.Use(u.call, line, self._text(line), f"in the code it runs: {u.why}")
                      for u in inner.uses]
        return found

    def run(self) -> list[Flag]:
        for scope in self.scopes:  # statements first: a write's why beats a pattern's on the same line
            for node in scope.nodes:
                self._writes(scope, node)
                self._closure_writes(scope, node)
                self._calls(scope, node)
                self._indirect_calls(scope, node)
                self._namespace_keys(scope, node)
                self._identity(scope, node)
                self._defs(node)
        for node in ast.walk(self.tree):
            self._names(node)
        return [self.found[k] for k in sorted(self.found)]


def _read(source: str, forbidden=()) -> tuple[list[Flag], list[forbidden_calls.Use]]:
    """The flags of a whole file and its uses of the forbidden calls; a file that does not parse gives one
    'unparsable' flag and no uses."""
    lines = _lines(source)
    try:
        reader = _Screen(ast.parse(source), lines, forbidden)
    except SyntaxError as error:
        line = error.lineno or 1
        text = lines[line - 1].strip()[:120] if 0 < line <= len(lines) else ""
        return [Flag("unparsable", line, text, f"does not parse: {error.msg}")], []
    return reader.run(), reader.uses


def _in_order(flags: list[Flag]) -> list[Flag]:
    return sorted(flags, key=lambda f: (f.line, f.rule))


def screen(source: str, only_lines: set[int] | None = None, forbidden=()) -> list[Flag]:
    """Flags in `source` (a whole kernel file), sorted by line then rule; with only_lines, only flags on those lines.
    `forbidden`: the target's forbidden calls (judge.targets.ForbiddenCall), each use of one a 'forbidden-call' flag."""
    flags, uses = _read(source, forbidden)
    return [f for f in _in_order(flags + forbidden_calls.flags(uses)) if only_lines is None or f.line in only_lines]


def _added(patch: str) -> dict[int, str]:
    """Each added line's text, by its number in the new file as the hunk headers count."""
    parse_patch(patch)  # refuses what judge refuses, naming the hunk
    added, new, left = {}, 0, [0, 0]  # left: old and new lines still due in the current hunk
    for line in patch.splitlines():
        if left == [0, 0]:
            if match := HUNK_HEADER.match(line):
                new, left = int(match.group(3)), [int(match.group(2) or 1), int(match.group(4) or 1)]
            continue
        tag = line[:1] or " "
        if tag == "+":
            added[new] = line[1:]
        if tag in " +":
            new, left[1] = new + 1, left[1] - 1
        if tag in " -":
            left[0] -= 1
    return added


def added_lines(patch: str) -> set[int]:
    """Line numbers, in the patched (new) file, of the lines a unified diff adds (use judge.stages.patch.parse_patch)."""
    return set(_added(patch))


def screen_patch(base_source: str, patched_source: str, patch: str, forbidden=()) -> list[Flag]:
    """Flags on the lines the patch adds; a source that does not parse gives one 'unparsable' flag. A
    'forbidden-call' flag marks each use of a forbidden call that the patch adds (judge.stages.screen.forbidden.added).

    judge applies a hunk where its context is, whatever its header's "+start" says, so a header's line
    counts only where the patched file holds that very text, and a diff of the two files adds what the
    headers miss. A patch also changes what untouched lines mean (an alias, the key of an old cache):
    a flag on an untouched line that the base does not have is kept, and says so.
    """
    flags, uses = _read(patched_source, forbidden)
    if flags and flags[0].rule == "unparsable":
        return flags[:1]
    new = _lines(patched_source)
    lines = {n for n, text in _added(patch).items() if 0 < n <= len(new) and new[n - 1] == text}
    matcher = difflib.SequenceMatcher(None, _lines(base_source), new, autojunk=False)
    lines.update(j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert") for j in range(j1, j2))
    base_flags, base_uses = _read(base_source, forbidden)
    before = Counter((f.rule, f.text, f.why) for f in base_flags)
    out = forbidden_calls.flags(forbidden_calls.added(base_uses, uses))
    for flag in flags:
        if flag.line in lines:
            out.append(flag)
        elif before[(flag.rule, flag.text, flag.why)] > 0:
            before[(flag.rule, flag.text, flag.why)] -= 1
        else:
            out.append(replace(flag, why=f"untouched line, new with this patch: {flag.why}"))
    return _in_order(out)


def screen_stage(base_source: str, source: str, patch: str, forbidden=(), kernel_file: str = "submission.py") -> StageResult:
    """The static read of the patch (judge.stages.screen.stage): flags for the sharks, and one verdict, 'failed' where the
    patch adds a call the target forbids (its summary names the call, the file:line and the line)."""
    t0 = time.monotonic()
    flags = screen_patch(base_source, source, patch, forbidden)
    calls = [f for f in flags if f.rule == "forbidden-call"]
    if calls:  # the first call site names the verdict; an import or an alias only where nothing calls
        first = next((f for f in calls if f.why.startswith("calls")), calls[0])
        more = f" (and {len(calls) - 1} more forbidden line{'s' if len(calls) > 2 else ''})" if len(calls) > 1 else ""
        summary = f"{first.why}: {kernel_file}:{first.line}: {first.text}{more}"
        return StageResult("screen", "failed", summary, time.monotonic() - t0, ScreenDetail(flags=flags))
    if not flags:
        summary = "no flags"
    else:
        rules = sorted({f.rule for f in flags})
        summary = f"{len(flags)} flag{'s' if len(flags) != 1 else ''} for the sharks: {', '.join(rules)}"
    return StageResult("screen", "passed", summary, time.monotonic() - t0, ScreenDetail(flags=flags))
