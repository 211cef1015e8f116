"""The visits of the screen (judge.stages.screen.stage) that raise flags: assignments, calls, identity keys, definitions
and names."""

from __future__ import annotations

import ast

from .names import (_ALLOWED, _ATTRS, _CLOCKS, _DUNDER_WRITES, _FUNCS, _IDENTITY, _LOOKUPS, _MODULE_MUTATORS,
                              _MUTATORS, _PATTERNS, _SETATTRS, _SHAPES, _const_str, _disp, _matches, _mechanism,
                              _pattern_rules, _root, _short)


class RuleVisits:
    """The rule checks of judge.stages.screen.stage._Screen, which supplies resolve(), add(), and the state they use."""

    def _labels(self, expr, scope) -> dict:
        """What `expr` is made of: identity (data_ptr(), id(), ...), objects from parameters, shapes."""
        out, todo, seen = {"ident": [], "obj": [], "shape": set()}, [expr], set()
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
                elif name == "builtins.hash":  # hash() of sizes is a shape key; of anything else, identity-like
                    inner = [self._labels(a, scope) for a in n.args]
                    out["ident"] += ["hash()"] if any(i["ident"] or i["obj"] or not i["shape"] for i in inner) else []
                    out["shape"].update(*(i["shape"] for i in inner))
                elif name and name.startswith("builtins."):  # tuple(...), sorted(...), str(...) keep what goes in
                    todo += [*n.args, *(k.value for k in n.keywords)]
                # Any other call makes a new value: a pipeline built on a barrier's data_ptr() is no key.
            elif isinstance(n, ast.Attribute):
                if n.attr == "_cdata":
                    out["ident"].append("_cdata")
                elif n.attr in _SHAPES:
                    out["shape"].add(_SHAPES[n.attr])
                else:
                    todo.append(n.value)
            elif isinstance(n, ast.Name):
                if n.id in scope.defs and n.id not in seen:
                    seen.add(n.id)
                    todo += scope.defs[n.id]
                elif n.id in scope.params:
                    out["obj"].append(n.id)
            elif not isinstance(n, _FUNCS):
                todo += list(ast.iter_child_nodes(n))
        return out

    def _ident(self, expr, scope) -> str | None:
        labels = self._labels(expr, scope)["ident"] if expr is not None else []
        return labels[0] if labels else None

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
        """Does `name`, in this function, mean a module-level binding (state that outlives the call)?"""
        if scope is self.module or name not in self.state or name in self.aliases:
            return False
        return name in scope.globals if rebinding else name not in scope.locals

    def _writes(self, scope, node) -> None:
        if isinstance(node, ast.Assign):
            targets, value, verb = list(node.targets), node.value, "assigns"
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets, value, verb = [node.target], node.value, "augments" if isinstance(node, ast.AugAssign) else "assigns"
        elif isinstance(node, ast.Delete):
            targets, value, verb = list(node.targets), None, "deletes"
        else:
            return
        while targets:
            t = targets.pop()
            if isinstance(t, (ast.Tuple, ast.List, ast.Starred)):
                targets += t.elts if not isinstance(t, ast.Starred) else [t.value]
                continue
            base = self.resolve(t.value) if isinstance(t, (ast.Attribute, ast.Subscript)) else None
            if isinstance(t, ast.Attribute):
                self._attr_write(scope, t, verb)
            elif isinstance(t, ast.Subscript):
                if base == "builtins.globals()":
                    self.add("introspection", t, "writes globals()[...]")
                elif base and base.startswith("sys.modules"):
                    self.add("sys-modules", t, f"{verb} {_short(t.value)}[...]")
                elif (base and not base.startswith("os.environ")) or getattr(t.value, "attr", "") == "__dict__":
                    self.add("monkeypatch", t, f"writes {_short(t.value)}[...]")
            root, ident = _root(t), self._ident(value, scope)
            if isinstance(t, ast.Attribute) and root is not None and root.id == "self" and ident:
                self.add("cache-by-identity", t, f"stores {ident} in {_short(t, 40)}")
            if root is None or getattr(t, "attr", "") in _DUNDER_WRITES or not self._state(scope, root.id, t is root):
                continue
            kind, here = self.state[root.id], f"in {scope.name}()"
            if isinstance(t, ast.Subscript):
                what = f"{kind} {root.id}" if t.value is root else _short(t.value, 40)
                self.add("cache-by-identity", t, f"writes module-level {what} {here}, {self._key(t.slice, scope)}")
            elif ident:
                self.add("cache-by-identity", t, f"stores {ident} in module-level {_short(t, 40)}")
            elif t is root:
                self.add("cache-by-identity", t, f"rebinds module-level {kind} {root.id} {here} (kept across calls)")
            else:
                self.add("cache-by-identity", t, f"{verb} {_short(t, 40)} on module-level {root.id} {here} (kept across calls)")

    def _calls(self, scope, node) -> None:
        if not isinstance(node, ast.Call):
            return
        func, name, args = node.func, self.resolve(node.func), node.args
        first = self.resolve(args[0]) if args else None
        if name in _SETATTRS and args:
            self._setattr_call(scope, node, name)
        elif name == "builtins.vars" and first:
            self.add("introspection", node, f"calls vars({_disp(first)})")
        if not isinstance(func, ast.Attribute) or func.attr not in _MUTATORS:
            return
        base, root = self.resolve(func.value), _root(func.value)
        if base == "sys.path":
            self.add("sys-modules", node, f"edits sys.path with .{func.attr}()")
        elif base and func.attr in _MODULE_MUTATORS and "(" not in base and root is not None and root.id in self.aliases \
                and not base.startswith(("os.environ", "sys.")) and base not in self.modules:
            self.add("monkeypatch", node, f"mutates {_disp(base)} with .{func.attr}()")
        if root is not None and func.value is root and self._state(scope, root.id, False):
            ident = next(filter(None, (self._ident(a, scope) for a in args)), None)
            self.add("cache-by-identity", node, f"passes {ident} to module-level {root.id}.{func.attr}()" if ident else
                     f"mutates module-level {self.state[root.id]} {root.id} with .{func.attr}() in {scope.name}()")

    def _identity(self, scope, node) -> None:
        if isinstance(node, ast.Subscript) and (label := self._ident(node.slice, scope)):
            verb = "looks up" if isinstance(node.ctx, ast.Load) else "writes"
            self.add("cache-by-identity", node, f"{verb} {_short(node.value, 40)}[...] keyed on {label}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _LOOKUPS \
                and node.args and (label := self._ident(node.args[0], scope)):
            self.add("cache-by-identity", node, f"looks up {_short(node.func, 40)}() keyed on {label}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides, sides[1:]):
                if isinstance(op, (ast.In, ast.NotIn)) and (label := self._ident(left, scope)):
                    self.add("cache-by-identity", node, f"tests whether {label} is in {_short(right, 40)}")
                elif isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
                    for a, b in ((left, right), (right, left)):
                        label, root = self._ident(a, scope), _root(b)
                        if label and root is not None and self._state(scope, root.id, False):
                            self.add("cache-by-identity", node, f"compares {label} with module-level {root.id}")

    def _defs(self, node) -> None:
        if isinstance(node, ast.ClassDef):
            for b in node.bases:
                if (name := self.resolve(b)) and _matches(name, ["torch.Tensor", "torch.utils._python_dispatch", "torch.overrides"]):
                    self.add("introspection", node, f"class {node.name} subclasses {name}")
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return
        if node.name == "__del__":
            self.add("hooks", node, "defines __del__: its code runs when the object is collected, at a moment judge "
                                    "does not choose")
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("introspection", node, f"defines {node.name} (intercepts torch calls)")
        for dec in node.decorator_list:
            name = self.resolve(dec.func if isinstance(dec, ast.Call) else dec)
            if name in ("functools.lru_cache", "functools.cache", "functools.cached_property"):
                args = ", ".join(a.arg for a in node.args.args) or "none"
                self.add("cache-by-identity", dec, f"memoizes {node.name}() with {name}, keyed on its arguments ({args})")
        a = node.args
        for arg, default in [*zip(a.args[len(a.args) - len(a.defaults):], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]:
            if default is not None and self._kind(default) != "variable":
                self.add("cache-by-identity", default,
                         f"{node.name}() has a mutable default {arg.arg}={_short(default, 30)} (kept across calls)")

    def _names(self, node) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                full = f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) and node.module else a.name
                self.forbid(node, full, "imports")
                if mechanism := _mechanism(full):
                    self.add(mechanism[0], node, f"imports {full}: {mechanism[1]}")
                    continue
                for rule, pats in _PATTERNS.items():
                    if _matches(full, pats):
                        self.add(rule, node, f"imports {full}")
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and not isinstance(self.parent.get(node), ast.Expr):
            for needle in ("task.yml", "reference.py"):  # a bare string statement is a docstring: skipped
                if needle in node.value:
                    self.add("reference", node, f"names {needle} in a string")
        if isinstance(node, ast.While):
            clocks = [n for n in map(self.resolve, ast.walk(node)) if n and _matches(n, _CLOCKS)]
            if clocks:
                self.add("sleep", node, f"busy-waits on {clocks[0].split('(')[0]}")
        if isinstance(node, (ast.Call, ast.Subscript)):  # getattr(t, "sleep"), sys.modules["x"] stand for names too
            if (name := self.resolve(node)) and not name.endswith(")"):
                self._chain(node, name)
            return
        if isinstance(node, (ast.Name, ast.Attribute)):
            self._chain(node, None if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else self.resolve(node))

    def _chain(self, node, name: str | None) -> None:
        """A name, or an attribute chain, resolved to `name` (None when unknown or a local binding)."""
        parent, ctx = self.parent.get(node), getattr(node, "ctx", None)
        verb = "calls" if isinstance(parent, ast.Call) and parent.func is node else \
            "assigns" if isinstance(ctx, ast.Store) else "deletes" if isinstance(ctx, ast.Del) else "uses"
        outermost = not (isinstance(parent, ast.Attribute) and parent.value is node)  # torch.cuda.Event, not torch.cuda
        if isinstance(node, ast.Attribute) and node.attr == "__dict__" and (owner := self.resolve(node.value)):
            self.add("introspection", node, f"reads {owner}.__dict__")  # torch.__dict__.get(...) too
        if outermost:
            self._as_value(node, name, verb)
        if name and outermost:
            if name.startswith(("os.environ", "os.getenv")):
                self._env(node, name, parent)
            self.forbid(node, name, verb)
            self._patterns(node, name, verb)
        attr = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        if attr in _ATTRS and (isinstance(node, ast.Attribute) or _ATTRS[attr] == "reference" or attr == "__builtins__"):
            if _ATTRS[attr] != "introspection" or verb in ("uses", "calls"):  # writes are monkeypatch's
                words = f": {_mechanism('sys._getframe')[1]}" if _ATTRS[attr] == "frames" else ""
                self.add(_ATTRS[attr], node, f"{verb} {_short(node, 50)}{words}")

    def _patterns(self, node, name: str, verb: str) -> None:
        """The rules whose patterns a resolved name matches; a mechanism's own rule and words first."""
        head = name.split("(")[0]
        if "(" in name and (_mechanism(head) or _pattern_rules(head)):
            return  # open().read, sys._getframe(1).f_back: the call itself is flagged where it is made
        if mechanism := _mechanism(name):
            self.add(mechanism[0], node, f"{verb} {_disp(name)}: {mechanism[1]}")
            return
        if any(name == a or name.startswith((a + ".", a + "(")) for a in _ALLOWED):
            return
        for rule in _pattern_rules(name):
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
            self.add("env", node, f"calls {name}()")
        elif method:
            self.add("env", node, f"reads the whole os.environ (.{method})")
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            key(parent.slice, not isinstance(parent.ctx, ast.Load))
        elif isinstance(parent, ast.Compare) and parent.left is not node and \
                all(isinstance(o, (ast.In, ast.NotIn)) for o in parent.ops):
            key(parent.left, False)
        else:
            self.add("env", node, "reads the whole os.environ")
