"""How the screen (judge.screening) follows a file's names: its scopes (the module, each function and lambda)
and what each binds."""

from __future__ import annotations

import ast

from .screening_names import _FUNCS


class _Scope:
    """A module or function body: its nodes (not those of nested functions), parameters and assignments."""

    def __init__(self, node):
        self.name = None if isinstance(node, ast.Module) else getattr(node, "name", "<lambda>")
        self.nodes, todo = [], list(node.body if isinstance(node.body, list) else [node.body])
        while todo:  # parents come before their children, so a statement's check runs before its parts'
            n = todo.pop()
            self.nodes.append(n)
            todo += [] if isinstance(n, _FUNCS) else list(ast.iter_child_nodes(n))
        self.globals = {n for s in self.nodes if isinstance(s, ast.Global) for n in s.names}
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
        self.locals = (self.params | set(self.defs) | named) - self.globals
