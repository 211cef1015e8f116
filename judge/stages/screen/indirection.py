"""The screen's visits of indirection (judge.stages.screen.stage): names built at run time, objects reached through helpers,
closures and namespaces, setattr and its kin, strings run as code, and hooks that run later. A kernel that hides
how it patches torch is flagged for the hiding itself, and the patch it hides is flagged wherever the file's
flow (judge.stages.screen.holders) shows what the written object holds."""

from __future__ import annotations

import ast

from .flow import static_str
from .forbidden import spellings
from .names import _DUNDER_WRITES, _const_str, _disp, _short

# Calls that name an attribute by their second argument.
_BY_NAME = {"builtins.getattr", "builtins.setattr", "builtins.delattr", "builtins.hasattr", "builtins.object.__setattr__",
            "builtins.type.__setattr__", "builtins.object.__getattribute__", "builtins.object.__delattr__",
            "builtins.type.__getattribute__"}
_IMPORTS = {"builtins.__import__", "importlib.import_module", "importlib.__import__"}
_RUN_CODE = {"builtins.exec", "builtins.eval", "builtins.compile"}
# Builtins whose calls the screen reads: handed around as values, they are called where it cannot see.
_AS_VALUE = {"setattr", "getattr", "delattr", "hasattr", "__import__", "vars", "globals", "locals", "exec", "eval",
             "compile"}
_DUNDER_CALLS = {"__setattr__": "sets an attribute by a string, past setattr",
                 "__delattr__": "deletes an attribute by a string, past delattr",
                 "__getattribute__": "reads an attribute by a string, past getattr",
                 "__getattr__": "reads an attribute by a string, past getattr"}
_WEAKREF_CALLBACKS = {"weakref.ref", "weakref.proxy", "weakref.WeakMethod", "weakref.KeyedRef"}
_NAMESPACE_MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
_STRING_DEPTH = 3  # exec("exec('...')"): strings inside strings are read this deep


class IndirectionVisits:
    """Visits of judge.stages.screen.stage._Screen, which supplies resolve(), add(), holders, scopes and forbidden."""

    def _how_named(self, node) -> tuple[str | None, str]:
        """The name an argument always is, and how it reads: '' for a plain constant, else words for the flag."""
        if _const_str(node) is not None:
            return node.value, ""
        folded = static_str(node, self.flow)
        if folded is not None:
            return folded, f"a name built from pieces ({folded!r})"
        return None, "a name computed at run time"

    def _receiver(self, node, scope) -> str:
        name = self.resolve(node)
        if name and "(" not in name:
            return _disp(name)
        held = self.holders.hold(node, scope)
        return f"{_short(node, 30)} (holds {held})" if held else _short(node, 30)

    def _owner(self, node, scope) -> str | None:
        """The dotted name `node` holds, for _reach: '' where it holds nothing known, None where it could be any module."""
        name = self.resolve(node)
        held = name if name and "(" not in name else self.holders.hold(node, scope) or ""
        return None if held == "a module named at run time" else held

    def _reach(self, receiver: str | None) -> str:
        """Words naming the target's forbidden calls that an attribute or an import by a computed name could reach
        from `receiver` (a dotted name; None: from anywhere)."""
        calls = [f.call for f in self.forbidden
                 if receiver is None or any(s.startswith(receiver + ".") for s in spellings(f.call))]
        return f"; could reach {', '.join(calls)}, which this target forbids" if calls else ""

    def _indirect_calls(self, scope, node) -> None:
        if not isinstance(node, ast.Call):
            return
        name, args, func = self.resolve(node.func), node.args, node.func
        if name in _BY_NAME and len(args) > 1:
            attr, how = self._how_named(args[1])
            if how and not self._own_instance(args[0], scope):
                self.add("indirection", node, f"{_disp(name)} on {self._receiver(args[0], scope)} with {how}"
                         + (self._reach(self._owner(args[0], scope)) if attr is None else ""))
        if name in _IMPORTS and args:
            self._computed_import(node, name)
        elif name in _RUN_CODE and args:
            self._run_code(node, name)
        elif name in _WEAKREF_CALLBACKS and (len(args) > 1 or any(k.arg == "callback" for k in node.keywords)):
            self.add("hooks", node, f"passes a callback to {name}: its code runs when the object is collected, at a "
                                    "moment judge does not choose")
        elif name in ("operator.attrgetter", "operator.methodcaller") and args and self._how_named(args[0])[1]:
            self.add("indirection", node, f"calls {name} with {self._how_named(args[0])[1]}")
        elif name in ("operator.setitem", "operator.delitem") and args and (found := self._namespace(args[0], scope)):
            self.add("monkeypatch", node, f"rewrites {found[0]} with {name}")
        elif name == "builtins.type" and len(args) == 3:
            self.add("indirection", node, "creates a class at run time with type(name, bases, namespace)")
        if name in ("builtins.object.__setattr__", "builtins.type.__setattr__", "builtins.object.__delattr__"):
            self.add("indirection", node, f"calls {_disp(name)} directly: {_DUNDER_CALLS[name.rsplit('.', 1)[1]]}")
        elif isinstance(func, ast.Attribute) and func.attr in _DUNDER_CALLS:
            self.add("indirection", node, f"calls {_short(func, 40)} directly: {_DUNDER_CALLS[func.attr]}")
        if isinstance(func, ast.Attribute) and func.attr in _NAMESPACE_MUTATORS \
                and (found := self._namespace(func.value, scope)):
            self.add("monkeypatch", node, f"rewrites {found[0]} with .{func.attr}()")

    def _own_instance(self, node, scope) -> bool:
        """`self` (a method's first parameter) holding nothing else: setattr(self, knob, value) is the class's own."""
        fn = scope.node
        return isinstance(node, ast.Name) and isinstance(self.parent.get(fn), ast.ClassDef) and bool(fn.args.args) \
            and fn.args.args[0].arg == node.id and node.id not in scope.defs and not self.holders.hold(node, scope)

    def _computed_import(self, node: ast.Call, name: str) -> None:
        module, how = self._how_named(node.args[0])
        if how:
            self.add("indirection", node, f"imports a module by {how}" + ("" if module else self._reach(None)))
        fromlist = node.args[3] if len(node.args) > 3 else next((k.value for k in node.keywords if k.arg == "fromlist"), None)
        if isinstance(fromlist, (ast.List, ast.Tuple)):
            named = [self._how_named(e) for e in fromlist.elts]
            hows = [h for _, h in named if h]
            if hows:
                unknown = any(value is None for value, _ in named)
                self.add("indirection", node, f"imports a member of {module or 'a module'} by {hows[0]}"
                         + (self._reach(module) if unknown else ""))
        elif fromlist is not None and not (isinstance(fromlist, ast.Constant) and fromlist.value is None):
            self.add("indirection", node, f"imports members of {module or 'a module'} named at run time" + self._reach(module))

    def _run_code(self, node: ast.Call, name: str) -> None:
        code = static_str(node.args[0], self.flow)
        if code is None:
            self.add("dynamic-code", node, f"calls {_disp(name)} on a string computed at run time: the screen cannot "
                                           "read the code it runs")
            return
        self.add("dynamic-code", node, f"calls {_disp(name)} on a constant string: its code is screened too")
        for flag in self.screen_string(code, node):
            self.add(flag.rule, node, f"in the code {_disp(name)} runs: {flag.why}")

    def _namespace(self, node, scope, depth: int = 0) -> tuple[str, ast.AST | None] | None:
        """A namespace read as a dict, whose keys are names ('vars(torch)', 'torch.__dict__', 'globals()'), and the
        object it belongs to (None for globals() and locals())."""
        if isinstance(node, ast.Call) and (name := self.resolve(node.func)) in ("builtins.vars", "builtins.globals",
                                                                                 "builtins.locals"):
            owner = node.args[0] if name == "builtins.vars" and node.args else None
            if owner is not None and not (self.resolve(owner) or self.holders.hold(owner, scope)):
                return None
            return _short(node, 40), owner
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            known = self.resolve(node.value) or self.holders.hold(node.value, scope)
            return (_short(node, 40), node.value) if known else None
        if isinstance(node, ast.Attribute) and node.attr in ("__globals__", "f_globals", "f_locals", "f_builtins"):
            return _short(node, 40), None  # a function's or a frame's namespace: whose, the screen cannot say
        if isinstance(node, ast.Name) and depth < 4:
            bound = self.flow.binding(scope, node.id)
            values = bound.defs.get(node.id, []) if bound else []
            return self._namespace(values[0], bound, depth + 1) if len(values) == 1 else None
        return None

    def _namespace_keys(self, scope, node) -> None:
        if not isinstance(node, ast.Subscript) or not (found := self._namespace(node.value, scope)):
            return
        (space, owner), (key, how) = found, self._how_named(node.slice)
        verb = "looks up" if isinstance(node.ctx, ast.Load) else "writes"
        if how:
            unknown = ": the screen cannot tell which name" if key is None else ""
            reach = self._reach(self._owner(owner, scope)) if owner is not None and key is None else ""
            self.add("indirection", node, f"{verb} {space}[...] by {how}{unknown}{reach}")
        if verb == "writes":
            which = f"[{key!r}]: replaces that name" if key is not None else "[...]: replaces one of its names"
            self.add("monkeypatch", node, f"writes {space}{which} for everyone who reads it")

    def _attr_write(self, scope, t: ast.Attribute, verb: str) -> None:
        """A write on an attribute: of an imported module or object, of something holding one, or a dunder."""
        meaning = _DUNDER_WRITES.get(t.attr)
        if t.attr == "cell_contents":
            self.add("indirection", t, f"{verb} {_short(t, 50)}: {meaning}")
            return
        base = self.resolve(t.value)
        held = None if base and "(" not in base else self.holders.hold(t.value, scope)
        if base and "(" not in base:
            what = f"{_disp(base)}.{t.attr}"
        elif held:  # type(x).y, a helper's return: say what the written object holds
            what = f"{_short(t, 50)} ({_short(t.value, 30)} holds {held})"
        elif base:  # on what an imported function returned: CuTeDSL._get_dsl().envar.arch
            what = f"{_disp(base)}.{t.attr}"
        elif meaning is not None:
            what = _short(t)
        else:
            return
        self.add("monkeypatch", t, f"{verb} {what}" + (f": {meaning}" if meaning else ""))

    def _setattr_call(self, scope, node: ast.Call, name: str) -> None:
        args = node.args
        attr, _ = self._how_named(args[1]) if len(args) > 1 else (None, "")
        first = self.resolve(args[0])
        held = None if first and "(" not in first else self.holders.hold(args[0], scope)
        first = None if held else first
        meaning = _DUNDER_WRITES.get(attr) if attr else None
        if not (first or held or meaning is not None):
            return
        what = _disp(first) if first else f"{_short(args[0], 30)} (holds {held})" if held else _short(args[0], 40)
        self.add("monkeypatch", node, f"calls {_disp(name)} on {what}" + (f".{attr}" if attr else " with a computed name")
                 + (f": {meaning}" if meaning else ""))

    def _closure_writes(self, scope, node) -> None:
        """`nonlocal x; x = ...` where x holds a module or torch object: state kept in a closure's cell."""
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            return
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and n.id in scope.nonlocals:
                    held = self.holders.name(scope, n.id) or self.holders.hold(value, scope)
                    if held:
                        self.add("indirection", node, f"rebinds closure variable {n.id} in {scope.name}() ({n.id} holds "
                                                      f"{held}): state kept in a closure, where a module-level read "
                                                      "does not look")

    def _as_value(self, node, name: str | None, verb: str) -> None:
        """setattr, getattr, __import__, exec ... or X.__setattr__ handed around rather than called."""
        if verb != "uses":
            return
        if isinstance(node, ast.Name) and name and name.startswith("builtins.") and name[9:] in _AS_VALUE:
            self.add("indirection", node, f"uses {name[9:]} as a value: where it is called, the screen cannot follow")
        elif isinstance(node, ast.Attribute) and node.attr in _DUNDER_CALLS:
            self.add("indirection", node, f"uses {_short(node, 40)} as a value: {_DUNDER_CALLS[node.attr]}, where the "
                                          "screen cannot follow")
