"""How the screen (judge.stages.screen.stage) follows a file's names: its scopes (the module, each function and lambda),
which scope binds a name where it is used (closures and `nonlocal` included), and the strings a name is built
from where they are constants ("Ten" + "sor")."""

from __future__ import annotations

import ast
import builtins

from .names import _FUNCS, _const_str


def _outer_parts(node) -> list[ast.AST]:
    """The parts of a function or lambda that its enclosing scope evaluates: decorators, defaults, annotations."""
    if isinstance(node, ast.Lambda):
        return [node.args]
    return [node.args, *node.decorator_list, *([node.returns] if node.returns else [])]


class _Scope:
    """A module or function body: its nodes (not those of nested functions), parameters and assignments."""

    def __init__(self, node, parent: "_Scope | None" = None):
        self.node, self.parent = node, parent
        self.name = None if isinstance(node, ast.Module) else getattr(node, "name", "<lambda>")
        self.nodes, todo = [], list(node.body if isinstance(node.body, list) else [node.body])
        while todo:  # parents come before their children, so a statement's check runs before its parts'
            n = todo.pop()
            self.nodes.append(n)
            todo += _outer_parts(n) if isinstance(n, _FUNCS) else list(ast.iter_child_nodes(n))
        self.globals = {n for s in self.nodes if isinstance(s, ast.Global) for n in s.names}
        self.nonlocals = {n for s in self.nodes if isinstance(s, ast.Nonlocal) for n in s.names}
        a = getattr(node, "args", None)
        self.params = {x.arg for x in (a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]) if x} if a else set()
        self.defs: dict[str, list[ast.AST]] = {}  # name -> the expressions assigned to it, for what a key is made of
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
        imported = {(a.asname or a.name.split(".")[0]) for n in self.nodes if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names if a.name != "*"}
        self.locals = (self.params | set(self.defs) | named | imported) - self.globals - self.nonlocals


class Scopes:
    """Every scope of a module, and which one binds a name where it is used."""

    def __init__(self, tree: ast.Module):
        self.module = _Scope(tree)
        self.all, self.of_node, todo = [], {}, [self.module]
        while todo:
            scope = todo.pop(0)
            self.all.append(scope)
            for n in scope.nodes:
                self.of_node[n] = scope
                if isinstance(n, _FUNCS):
                    todo.append(_Scope(n, scope))
        self.by_def = {id(s.node): s for s in self.all}
        self.module_names = self.module.locals.union(*(s.globals for s in self.all))

    def scope_of(self, node) -> _Scope:
        return self.of_node.get(node, self.module)

    def binding(self, scope: _Scope, name: str) -> _Scope | None:
        """The scope whose `name` a use (or a store) in `scope` means; None for a builtin or an unbound name."""
        s = scope
        while s is not None:
            if name in s.globals:
                break
            if name in s.locals:
                return s
            s = s.parent
        return self.module if name in self.module_names else None

    def is_builtin(self, node: ast.Name) -> bool:
        return hasattr(builtins, node.id) and self.binding(self.scope_of(node), node.id) is None


def static_str(node, scopes: Scopes, depth: int = 0) -> str | None:
    """The string `node` always evaluates to, where it is built from constants ("Ten" + "sor", f-strings of
    constants, a name bound once to one, a constant slice, "".join of constants); else None."""
    if depth > 8:
        return None
    if (const := _const_str(node)) is not None:
        return const
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = static_str(node.left, scopes, depth + 1), static_str(node.right, scopes, depth + 1)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [static_str(v.value if isinstance(v, ast.FormattedValue) else v, scopes, depth + 1) for v in node.values]
        return "".join(parts) if None not in parts else None
    if isinstance(node, ast.Name):
        scope = scopes.binding(scopes.scope_of(node), node.id)
        values = scope.defs.get(node.id, []) if scope else []
        return static_str(values[0], scopes, depth + 1) if len(values) == 1 else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        text, bounds = static_str(node.value, scopes, depth + 1), (node.slice.lower, node.slice.upper, node.slice.step)
        if text is not None and all(b is None or isinstance(getattr(b, "value", None), int) or
                                    isinstance(b, ast.UnaryOp) for b in bounds):
            try:
                return text[slice(*(ast.literal_eval(b) if b is not None else None for b in bounds))]
            except (ValueError, TypeError):
                return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join" \
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
        sep = static_str(node.func.value, scopes, depth + 1)
        parts = [static_str(e, scopes, depth + 1) for e in node.args[0].elts]
        return sep.join(parts) if sep is not None and None not in parts else None
    return None
