"""A static read of a patched kernel: flags that tell a judge where to look, never a verdict.

Contestants are paid in measured speedup, so some will try to win without a faster kernel: read or
patch the timer's clocks, remember an answer across calls (keyed on the input's address), hide work
on a thread or a stream the timer does not see, or reach into the reference. Each leaves a mark in the
Python source that an AST walk finds, while honest kernel code (CuTe DSL, torch launches, pointers
handed to a kernel) does not. Names are resolved through the file's imports and simple aliases, so
`import time as t; t.sleep` and `getattr(time, "sleep")` both read as `time.sleep`. Strings run as
code, native code and introspection are flags themselves: past them a static read sees nothing.
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections import Counter
from dataclasses import replace

from .patching import HUNK_HEADER, parse_patch
from .screening_flow import _Scope
from .screening_names import _CONTAINERS, _FUNCS, _const_str, _lines
from .screening_rules import RuleVisits
from .stage_details import Flag  # a flag is a part of the screen stage's detail

RULES: dict[str, str] = {
    "monkeypatch": "writes an attribute of an imported module or object (torch, time, builtins, reference, ...) or code objects",
    "sys-modules": "touches sys.modules, the import machinery or __import__",
    "threads": "threads, processes, async tasks, signal/atexit hooks, finalizers, __del__ or tracers",
    "subprocess": "runs another program (subprocess, os.system, exec*, fork, pty)",
    "file-io": "reads or writes files (open, pathlib, os, shutil, tempfile, torch/numpy save and load, sqlite3)",
    "network": "uses the network",
    "cache-by-identity": "state kept across calls: lookups keyed on data_ptr()/id()/hash(), module-level caches "
                         "(the why names the key), memoization",
    "sleep": "sleeps or busy-waits on a clock",
    "timing": "reads clocks or CUDA events, synchronizes, creates or switches CUDA streams, profiles",
    "reference": "reaches into the reference, the judge package or task.yml",
    "introspection": "inspects or rewrites the running program: frames, gc, ctypes, code objects, globals(), torch dispatch, torch._C",
    "env": "reads JUDGE_* or writes the environment, changes directory, signals or limits processes",
    "dynamic-code": "runs code made at run time: exec, eval, compile, import_module, unpickling, decoded blobs, native builds",
    "unparsable": "the patched file does not parse",
}


class _Screen(RuleVisits):
    def __init__(self, tree: ast.Module, lines: list[str]):
        self.tree, self.lines, self.found = tree, lines, {}
        self.parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.module = _Scope(tree)
        self.scopes = [self.module] + [_Scope(n) for n in ast.walk(tree) if isinstance(n, _FUNCS)]
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()  # what `import x` binds: a module, whose update() or pop() is a function
        for node in ast.walk(tree):
            for a in node.names if isinstance(node, (ast.Import, ast.ImportFrom)) else []:
                if isinstance(node, ast.Import):
                    self.modules.add(a.asname or a.name.split(".")[0])
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                elif a.name != "*":
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}" if node.module else a.name
        self.builtin_names = set(dir(builtins)) - set(self.aliases).union(*(s.locals | s.globals for s in self.scopes))
        for _ in range(2):  # aliases of aliases: `cuda = torch.cuda; sync = cuda.synchronize`
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    name = self.resolve(node.value) if isinstance(node.value, (ast.Name, ast.Attribute)) else None
                    if name and "(" not in name:
                        self.aliases.setdefault(node.targets[0].id, name)
        self.state = {n.name: "class" if isinstance(n, ast.ClassDef) else "function"
                      for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        for name, values in self.module.defs.items():
            self.state.setdefault(name, self._kind(values[0]))

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


    def run(self) -> list[Flag]:
        for scope in self.scopes:  # statements first: a write's why beats a pattern's on the same line
            for node in scope.nodes:
                self._writes(scope, node)
                self._calls(scope, node)
                self._identity(scope, node)
                self._defs(node)
        for node in ast.walk(self.tree):
            self._names(node)
        return [self.found[k] for k in sorted(self.found)]


def screen(source: str, only_lines: set[int] | None = None) -> list[Flag]:
    """Flags in `source` (a whole kernel file), sorted by line then rule; with only_lines, only flags on those lines."""
    lines = _lines(source)
    try:
        flags = _Screen(ast.parse(source), lines).run()
    except SyntaxError as error:
        line = error.lineno or 1
        text = lines[line - 1].strip()[:120] if 0 < line <= len(lines) else ""
        flags = [Flag("unparsable", line, text, f"does not parse: {error.msg}")]
    return [f for f in flags if only_lines is None or f.line in only_lines]


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
    """Line numbers, in the patched (new) file, of the lines a unified diff adds (use judge.patching.parse_patch)."""
    return set(_added(patch))


def screen_patch(base_source: str, patched_source: str, patch: str) -> list[Flag]:
    """Flags on the lines the patch adds; a source that does not parse gives one 'unparsable' flag.

    judge applies a hunk where its context is, whatever its header's "+start" says, so a header's line
    counts only where the patched file holds that very text, and a diff of the two files adds what the
    headers miss. A patch also changes what untouched lines mean (an alias, the key of an old cache):
    a flag on an untouched line that the base does not have is kept, and says so.
    """
    flags = screen(patched_source)
    if flags and flags[0].rule == "unparsable":
        return flags[:1]
    new = _lines(patched_source)
    lines = {n for n, text in _added(patch).items() if 0 < n <= len(new) and new[n - 1] == text}
    matcher = difflib.SequenceMatcher(None, _lines(base_source), new, autojunk=False)
    lines.update(j + 1 for tag, _, _, j1, j2 in matcher.get_opcodes() if tag in ("replace", "insert") for j in range(j1, j2))
    before = Counter((f.rule, f.text, f.why) for f in screen(base_source))
    out = []
    for flag in flags:
        if flag.line in lines:
            out.append(flag)
        elif before[(flag.rule, flag.text, flag.why)] > 0:
            before[(flag.rule, flag.text, flag.why)] -= 1
        else:
            out.append(replace(flag, why=f"untouched line, new with this patch: {flag.why}"))
    return out
