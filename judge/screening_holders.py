"""What a name or an expression may hold, for the screen (judge.screening): a module, or an object reached from one
without a call in between (torch, torch.Tensor, time.perf_counter, sys.modules[...]), or what an indirection hands
back (__import__, getattr, vars(), type(x), x.__class__). Followed through aliases, closures, arguments passed to
the file's own functions and lambdas, their return values, containers, loops and attributes, until nothing
changes. A cheat that hides `torch.Tensor` behind a helper, a closure's cell or a dict still writes on something
that holds it, and the write is flagged."""

from __future__ import annotations

import ast
import re

from .screening_flow import Scopes, _Scope
from .screening_names import _FUNCS, _const_str

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
_ROUNDS = 8  # each round carries holders one step further (an alias of an alias, a helper's return); 8 is ample


class Holders:
    """Where the file keeps modules and objects reached from them: by binding, by attribute name, by function."""

    def __init__(self, scopes: Scopes, resolve, parent: dict):
        self.scopes, self.resolve, self.parent = scopes, resolve, parent
        self.names: dict[tuple[int, str], str] = {}  # (id of the binding scope, name) -> what it holds
        self.attrs: dict[str, str] = {}  # x.NAME = holder anywhere, or NAME = holder in a class body
        self.returns: dict[int, str] = {}  # id of a def or lambda -> what it returns
        self.funcs: dict[tuple[int, str], ast.AST] = {}
        for scope in scopes.all:
            for n in scope.nodes:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self.funcs[(id(scope), n.name)] = n
                elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            self.funcs[(id(scopes.binding(scope, t.id) or scope), t.id)] = n.value
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

    def hold(self, node, scope: _Scope, loose: bool = True) -> str | None:
        """What `node` may hold, named for a reader ("torch.Tensor", "a module", "type(...)"), or None. `loose` also
        trusts attribute names: after `self.t = torch`, any `x.t` holds torch."""
        if isinstance(node, ast.Name):
            resolved = self.resolve(node)
            held = self.name(scope, node.id)
            if held or node.id == "__builtins__":
                return held or "builtins"
            return resolved if resolved and not resolved.startswith("builtins.") else None
        if isinstance(node, ast.Attribute):
            if node.attr in REACHING_ATTRS:
                return REACHING_ATTRS[node.attr]
            base = self.hold(node.value, scope, loose)
            if base:
                return f"{base}.{node.attr}" if _DOTTED.match(base) else f"{node.attr} of {base.removeprefix('an attribute ')}"
            return self.attrs.get(node.attr) if loose else None
        if isinstance(node, ast.Subscript):
            base = self.hold(node.value, scope, loose)  # an element of a container that holds base, or a name of it
            return self.resolve(node) or base and (f"{base}[...]" if base.endswith(("modules", "namespace")) else base)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BoolOp)):
            parts = node.values if isinstance(node, (ast.Dict, ast.BoolOp)) else node.elts
            return next(filter(None, (self.hold(p, scope, loose) for p in parts)), None)
        if isinstance(node, (ast.Starred, ast.NamedExpr, ast.Await)):
            return self.hold(node.value, scope, loose)
        if isinstance(node, ast.IfExp):
            return self.hold(node.body, scope, loose) or self.hold(node.orelse, scope, loose)
        if isinstance(node, ast.Call):
            return self._call(node, scope, loose)
        return None

    def _call(self, node: ast.Call, scope: _Scope, loose: bool) -> str | None:
        func, args = self.resolve(node.func), node.args
        if func in ("builtins.getattr", "builtins.vars") and args:
            base = self.hold(args[0], scope, loose)
            name = _const_str(args[1]) if len(args) > 1 else None
            return base and (f"{base}.{name}" if name else f"{base}.<name>" if len(args) > 1 else base)
        if func in _INDIRECT:
            return self.resolve(node) if "(" not in (self.resolve(node) or "(") else _INDIRECT[func]
        if func == "builtins.type" and len(args) == 1:
            return REACHING_ATTRS["__class__"]
        if func in _PASS_THROUGH and args:
            return next(filter(None, (self.hold(a, scope, loose) for a in args)), None)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _ELEMENT_METHODS \
                and (held := self.hold(node.func.value, scope, loose)):
            return f"{held}[...]" if held.endswith(("modules", "namespace")) else held
        callee = self._callee(scope, node.func)
        if callee is not None:
            return self.returns.get(id(callee))
        resolved = self.resolve(node)
        return resolved if resolved and "(" not in resolved else None

    def _callee(self, scope: _Scope, func) -> ast.AST | None:
        """The file's own def or lambda that a call's `func` names, if it names one."""
        if isinstance(func, ast.Lambda):
            return func
        if isinstance(func, ast.Name):
            bound = self.scopes.binding(scope, func.id)
            return self.funcs.get((id(bound), func.id)) if bound else None
        return None

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
        elif isinstance(target, ast.Subscript):
            root = target.value
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if isinstance(root, ast.Name):  # d["t"] = torch: d holds it now
                self._set(self.names, (id(self.scopes.binding(scope, root.id) or scope), root.id), held)

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
        callee = self._callee(scope, call.func)
        inner = self.scopes.by_def.get(id(callee)) if callee is not None else None
        if func_name := self.resolve(call.func):
            if func_name == "builtins.setattr" and len(call.args) == 3 and (attr := _const_str(call.args[1])):
                self._set(self.attrs, attr, self.hold(call.args[2], scope))
        if inner is None:
            return
        positional, vararg = self._params(callee)
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
