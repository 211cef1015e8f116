"""What a name or an expression may hold, for the screen (judge.stages.screen.stage): a module, or an object reached from one
without a call in between (torch, torch.Tensor, time.perf_counter, sys.modules[...]), or what an indirection hands
back (__import__, getattr, vars(), type(x), x.__class__). Followed through aliases, closures, arguments passed to
the file's own functions and lambdas, their return values, containers, loops and attributes, until nothing
changes. A cheat that hides `torch.Tensor` behind a helper, a closure's cell or a dict still writes on something
that holds it, and the write is flagged."""

from __future__ import annotations

import ast
import re

from .flow import Scopes, _Scope, static_str
from .names import _FUNCS, _const_str

# Builtins that hand back what goes in (an element, or the container itself): their result holds what it did.
_PASS_THROUGH = {"builtins.next", "builtins.iter", "builtins.list", "builtins.tuple", "builtins.dict", "builtins.set",
                 "builtins.reversed", "builtins.sorted", "builtins.min", "builtins.max", "builtins.filter",
                 "contextlib.nullcontext", "copy.copy", "functools.reduce"}
_ELEMENT_METHODS = {"get", "pop", "setdefault", "values", "items", "copy", "__getitem__", "popitem"}
# Attributes that lead from any object to a class, a namespace or a function's insides (a write there patches
# them), and what each leads to, in words.
REACHING_ATTRS = {
    **dict.fromkeys(["__class__"], "the object's class"),
    **dict.fromkeys(["__mro__", "__bases__", "__base__", "__objclass__"], "a class"),
    **dict.fromkeys(["__dict__", "__globals__", "__builtins__", "f_globals", "f_locals", "f_builtins"], "a namespace"),
    **dict.fromkeys(["__self__"], "a bound method's object"), **dict.fromkeys(["__func__", "__wrapped__"], "a function"),
    **dict.fromkeys(["__closure__", "cell_contents"], "a closure's cells"),
}
_INDIRECT = {"builtins.__import__": "a module named at run time", "importlib.import_module": "a module named at run time",
             "importlib.__import__": "a module named at run time", "builtins.globals": "globals()",
             "builtins.locals": "locals()"}
_DOTTED = re.compile(r"^[\w.\[\]]+$")  # torch.Tensor, sys.modules[...]: a name the attribute extends
ENTRY = "custom_kernel"  # the kernel file's entry point (GPU MODE's convention), called with judge's tensors
_ROUNDS = 8  # each round carries holders one step further (an alias of an alias, a helper's return); 8 is ample


class Holders:
    """Where the file keeps modules and objects reached from them: by binding, by attribute name, by function."""

    def __init__(self, scopes: Scopes, resolve, parent: dict):
        self.scopes, self.resolve, self.parent = scopes, resolve, parent
        self.names: dict[tuple[int, str], str] = {}  # (id of the binding scope, name) -> what it holds
        self.attrs: dict[str, str] = {}  # x.NAME = holder anywhere, or NAME = holder in a class body
        self.returns: dict[int, str] = {}  # id of a def or lambda -> what it returns
        self.funcs: dict[tuple[int, str], ast.AST] = {}  # (id of the binding scope, name) -> a def, lambda or class
        self.methods: dict[str, list[ast.AST]] = {}  # a method's name -> the defs of that name in the file's classes
        for scope in scopes.all:
            for n in scope.nodes:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.funcs[(id(scope), n.name)] = n
                    if isinstance(self.parent.get(n), ast.ClassDef) and not isinstance(n, ast.ClassDef):
                        self.methods.setdefault(n.name, []).append(n)
                elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            self.funcs[(id(scopes.binding(scope, t.id) or scope), t.id)] = n.value
        for fn in scopes.module.nodes:  # the tensors judge passes: judge's own code calls their methods later
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == ENTRY and fn.args.args:
                first = fn.args.args[0].arg
                self._set(self.names, (id(scopes.by_def[id(fn)]), first), f"the tensors judge passes ({ENTRY}'s {first})")
        for _ in range(_ROUNDS):
            size = (len(self.names), len(self.attrs), len(self.returns))
            for scope in scopes.all:
                if isinstance(scope.node, ast.Lambda):
                    self._set(self.returns, id(scope.node), self.hold(scope.node.body, scope))
                for n in scope.nodes:
                    self._visit(scope, n)
            if size == (len(self.names), len(self.attrs), len(self.returns)):
                break

    def name(self, scope: _Scope, name: str) -> str | None:
        """What `name`, used in `scope`, holds through the file's own bindings (not its imports)."""
        bound = self.scopes.binding(scope, name)
        return self.names.get((id(bound), name)) if bound else None

    def hold(self, node, scope: _Scope) -> str | None:
        """What `node` may hold, named for a reader ("torch.Tensor", "the object's class"), or None. Attribute names
        are trusted too: after `self.t = torch`, any `x.t` holds torch."""
        if isinstance(node, ast.Name):
            resolved = self.resolve(node)
            held = self.name(scope, node.id)
            if held or node.id == "__builtins__":
                return held or "builtins"
            return resolved if resolved and not resolved.startswith("builtins.") else None
        if isinstance(node, ast.Attribute):
            if node.attr in REACHING_ATTRS:
                return REACHING_ATTRS[node.attr]
            base = self.hold(node.value, scope)
            if base:
                return f"{base}.{node.attr}" if _DOTTED.match(base) else f"{node.attr} of {base.removeprefix('an attribute ')}"
            return self.attrs.get(node.attr)
        if isinstance(node, ast.Subscript):
            base = self.hold(node.value, scope)  # an element of a container that holds base, or a name of it
            return self.resolve(node) or base and (f"{base}[...]" if base.endswith(("modules", "namespace")) else base)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BoolOp)):
            parts = node.values if isinstance(node, (ast.Dict, ast.BoolOp)) else node.elts
            return next(filter(None, (self.hold(p, scope) for p in parts)), None)
        if isinstance(node, (ast.Starred, ast.NamedExpr, ast.Await)):
            return self.hold(node.value, scope)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):  # [x for x in (torch.Tensor,)]
            return self.hold(node.value if isinstance(node, ast.DictComp) else node.elt, scope)
        if isinstance(node, ast.IfExp):
            return self.hold(node.body, scope) or self.hold(node.orelse, scope)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        return None

    def _call(self, node: ast.Call, scope: _Scope) -> str | None:
        func, args = self.resolve(node.func), node.args
        if func in ("builtins.getattr", "builtins.vars") and args:
            base = self.hold(args[0], scope)
            name = static_str(args[1], self.scopes) if len(args) > 1 else None
            return base and (f"{base}.{name}" if name else f"{base}.<name>" if len(args) > 1 else base)
        if func in _INDIRECT:
            return self.resolve(node) if "(" not in (self.resolve(node) or "(") else _INDIRECT[func]
        if func == "builtins.type" and len(args) == 1:
            return REACHING_ATTRS["__class__"]
        if func in _PASS_THROUGH and args:
            return next(filter(None, (self.hold(a, scope) for a in args)), None)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENT_METHODS \
                and (held := self.hold(node.func.value, scope)):
            return f"{held}[...]" if held.endswith(("modules", "namespace")) else held
        returned = next(filter(None, (self.returns.get(id(fn)) for fn, _ in self._callees(scope, node.func))), None)
        if returned:
            return returned
        resolved = self.resolve(node)
        return resolved if resolved and "(" not in resolved else None

    def _callees(self, scope: _Scope, func) -> list[tuple[ast.AST, int]]:
        """The file's own defs or lambdas that a call's `func` may name, each with how many of its parameters the
        call does not pass (1 for a method's self): a function, a lambda, a class's __init__, a method by name."""
        if isinstance(func, ast.Lambda):
            return [(func, 0)]
        if isinstance(func, ast.Name):
            bound = self.scopes.binding(scope, func.id)
            found = self.funcs.get((id(bound), func.id)) if bound else None
            if isinstance(found, ast.ClassDef):
                return [(n, 1) for n in found.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
            return [(found, 0)] if found is not None else []
        if isinstance(func, ast.Attribute):
            return [(fn, 0 if any(getattr(d, "id", "") == "staticmethod" for d in fn.decorator_list) else 1)
                    for fn in self.methods.get(func.attr, [])]
        return []

    @staticmethod
    def _set(table: dict, key, value) -> None:
        if value and key not in table:
            table[key] = value

    def _visit(self, scope: _Scope, n) -> None:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                self._bind(scope, t, n.value, isinstance(self.parent.get(n), ast.ClassDef))
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
            self._bind(scope, n.target, n.value, isinstance(self.parent.get(n), ast.ClassDef))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            self._bind(scope, n.target, n.iter)
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            self._bind(scope, n.optional_vars, n.context_expr)
        elif isinstance(n, ast.Return) and n.value is not None and not isinstance(scope.node, ast.Module):
            self._set(self.returns, id(scope.node), self.hold(n.value, scope))
        elif isinstance(n, _FUNCS):
            self._defaults(scope, n)
        elif isinstance(n, ast.Call):
            self._arguments(scope, n)

    def _bind(self, scope: _Scope, target, value, class_body: bool = False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
            if values is not None and len(values) == len(target.elts) and not any(isinstance(v, ast.Starred) for v in values):
                for t, v in zip(target.elts, values):
                    self._bind(scope, t, v, class_body)
            else:
                for t in target.elts:
                    self._bind(scope, t, value, class_body)
            return
        held = self.hold(value, scope)
        if not held:
            return
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Name):
            self._set(self.names, (id(self.scopes.binding(scope, target.id) or scope), target.id), held)
            if class_body:
                self._set(self.attrs, target.id, held)
        elif isinstance(target, ast.Attribute):
            self._set(self.attrs, target.attr, held)
        elif isinstance(target, ast.Subscript):  # d["t"] = torch: d holds it now; self.d["t"] = torch: any x.d does
            box = target.value
            while isinstance(box, ast.Subscript):
                box = box.value
            if isinstance(box, ast.Name):
                self._set(self.names, (id(self.scopes.binding(scope, box.id) or scope), box.id), held)
            elif isinstance(box, ast.Attribute):
                self._set(self.attrs, box.attr, held)

    def _params(self, fn) -> tuple[list[str], str | None]:
        a = fn.args
        return [x.arg for x in a.posonlyargs + a.args], (a.vararg.arg if a.vararg else None)

    def _defaults(self, scope: _Scope, fn) -> None:
        inner = self.scopes.by_def.get(id(fn))
        a = fn.args
        positional = a.posonlyargs + a.args
        pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
        for arg, default in pairs:
            if default is not None and inner is not None:
                self._set(self.names, (id(inner), arg.arg), self.hold(default, scope))

    def _arguments(self, scope: _Scope, call: ast.Call) -> None:
        """A holder passed to the file's own function: its parameter holds it (decorators with arguments included)."""
        if self.resolve(call.func) == "builtins.setattr" and len(call.args) == 3 and (attr := _const_str(call.args[1])):
            self._set(self.attrs, attr, self.hold(call.args[2], scope))
        for callee, skip in self._callees(scope, call.func):
            inner = self.scopes.by_def.get(id(callee))
            if inner is None:
                continue
            positional, vararg = self._params(callee)
            positional = positional[skip:]
            for i, arg in enumerate(call.args):
                held = self.hold(arg, scope)
                if isinstance(arg, ast.Starred):
                    names = positional + ([vararg] if vararg else [])
                else:
                    names = [positional[i]] if i < len(positional) else [vararg] if vararg else []
                for name in names:
                    self._set(self.names, (id(inner), name), held)
            for kw in call.keywords:
                if kw.arg is not None:
                    self._set(self.names, (id(inner), kw.arg), self.hold(kw.value, scope))
