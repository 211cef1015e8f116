"""GPU MODE's contract and the hooks a target's judge.toml asks for, read from its files without running them and
held against their declarations in judge/extensions.py when the target loads.

Nothing of a target is imported here: its files are parsed (ast), and each name judge will look up is found
among the names the file binds at its top level. A name that is missing, bound to a literal, or defined (a
`def` or a lambda) taking other arguments than judge passes is a one-line JudgeError naming the target, the
file and the name, before any compile or process starts. `from X import *` is followed where X is a file of
the task (task.yml's `files`). What a read cannot follow (an import, a decorator, a call's result, a star import
of any other module) is taken as it is: the child that calls the name then says what is wrong, as before.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from .errors import JudgeError
from .extensions import (CHECKER, CHECKS, ENTRY, GENERATE_INPUT, GPUMODE_REFERENCE, PEER_HOOK, REFERENCE_FILE, SEE,
                         Hook, InputGenerator, KernelEntry, LayoutCheck, compile_hooks)

FOLLOWED = object()  # a binding the read does not follow: taken as it is
STAR = "*"  # the key of a file's star imports while read; then present only where one could not be followed
LITERALS = {ast.List: "list", ast.Tuple: "tuple", ast.Dict: "dict", ast.Set: "set", ast.JoinedStr: "str",
            ast.ListComp: "list", ast.SetComp: "set", ast.DictComp: "dict", ast.GeneratorExp: "generator"}


def check_hooks(target) -> None:
    """Raise a JudgeError for the first name judge calls that `target`'s files lack or define wrong: GPU MODE's
    contract first, then each hook its judge.toml asks for."""
    modules = _modules(target)
    specs = [dict(spec) for spec in (target.tests or []) + (target.benchmarks or [])]
    _check_contract(target, modules, specs)
    if target.compile_entry:
        for hook in compile_hooks(target.compile_entry):
            _check(target.path, target.kernel_file, hook, "[compile] entry", modules)
    if target.static is not None and target.static.layout_checks:
        _check_checks(target.path, target.static.layout_checks, modules)
    for distribution in target.distributions:
        if distribution.generator:
            function = distribution.generator.partition(":")[2]
            _check(target.path, distribution.file, Hook(function, InputGenerator), "[[distributions]] generator",
                   modules, specs)
    if target.peer is not None:
        _check(target.path, target.peer.file, PEER_HOOK, "[peer] file", modules)


def contract() -> str:
    """GPU MODE's contract as judge calls it, in words, from extensions.py's declarations."""
    reference = [_call(hook) for hook in GPUMODE_REFERENCE]
    reference[-1] += " (or judge.toml's [tolerance])"
    return (f"judge needs {', '.join(reference[:-1])} and {reference[-1]} in {REFERENCE_FILE} and "
            f"{_call(Hook(ENTRY, KernelEntry))} in the kernel file")


def _call(hook: Hook) -> str:
    stars = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    parameters = list(inspect.signature(hook.protocol.__call__).parameters.values())[1:]
    return f"{hook.name}({', '.join(stars.get(p.kind, '') + p.name for p in parameters)})"


def _check_contract(target, modules: dict[str, str], specs: list[dict]) -> None:
    """reference.py's generate_input (where a distribution uses it), ref_kernel and check_implementation (unless
    judge.toml's [tolerance] decides), and the kernel file's custom_kernel."""
    path = target.path
    reference = target.sources.get(REFERENCE_FILE)
    if reference is None or reference == target.kernel_file:
        raise JudgeError(f"{path}: the task's files have no {REFERENCE_FILE} ({contract()})")
    wanted = [hook for hook in GPUMODE_REFERENCE
              if not (hook is GENERATE_INPUT and all(d.generator for d in target.distributions))
              and not (hook is CHECKER and (target.rtol is not None or target.atol is not None))]
    for file, hook in [(reference, hook) for hook in wanted] + [(target.kernel_file, Hook(ENTRY, KernelEntry))]:
        bindings = _bindings(path, file, hook.name, modules)
        value = bindings.get(hook.name)
        if value is None:
            if STAR not in bindings and "__getattr__" not in bindings:
                raise JudgeError(f"{path}: {file} has no {hook.name} ({contract()})")
            continue
        problem = _problem(_resolve(value, bindings), hook.protocol, specs)
        if problem:
            raise _fail(path, f"{file}'s {hook.name} {problem}")


def _modules(target) -> dict[str, str]:
    """The modules a file of the task can import by name (`utils` for utils.py), to the file each is read from."""
    return {name[:-3].replace("/", "."): source for name, source in target.sources.items() if name.endswith(".py")}


def _fail(path: Path, text: str) -> JudgeError:
    return JudgeError(f"{path}: {text} (see {SEE})")


def _check(path: Path, file: str, hook: Hook, asker: str, modules: dict[str, str],
           specs: list[dict] | None = None) -> None:
    bindings = _bindings(path, file, hook.name, modules)
    value = bindings.get(hook.name)
    if value is None:
        if hook.required and STAR not in bindings and "__getattr__" not in bindings:
            raise _fail(path, f"{file} defines no {hook.name}, which judge.toml's {asker} asks for")
        return
    problem = _problem(_resolve(value, bindings), hook.protocol, specs)
    if problem:
        raise _fail(path, f"{file}'s {hook.name} {problem}")


def _check_checks(path: Path, file: str, modules: dict[str, str]) -> None:
    """The layout checks file's CHECKS: a list, each entry a check that takes (kernel, reference, rng)."""
    bindings = _bindings(path, file, CHECKS, modules)
    value = bindings.get(CHECKS)
    if value is None:
        if STAR not in bindings and "__getattr__" not in bindings:
            raise _fail(path, f"{file} defines no {CHECKS}, the list of layout checks judge.toml's "
                              "[static] layout_checks asks for")
        return
    value = _resolve(value, bindings)
    if not isinstance(value, (ast.List, ast.Tuple)):
        kind = _literal(value)
        if kind is not None:
            raise _fail(path, f"{file}'s {CHECKS} is {kind}, not a list of layout checks")
        return
    for index, entry in enumerate(value.elts):
        if isinstance(entry, ast.Name) and entry.id not in bindings:
            raise _fail(path, f"{file}'s {CHECKS}[{index}] names {entry.id}, which {file} does not define")
        problem = _problem(_resolve(entry, bindings), LayoutCheck)
        if problem:
            name = entry.id if isinstance(entry, ast.Name) else f"{CHECKS}[{index}]"
            raise _fail(path, f"{file}'s {name} {problem}")


# ---- reading a file's top-level names ----------------------------------------------------------------------


def _bindings(path: Path, file: str, wanted: str, modules: dict[str, str],
              reading: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Each name `file` binds at its top level (in if, try and with blocks too), to what the last binding binds:
    a def, a class, an expression, or FOLLOWED; with what `from X import *` brings where X is one of `modules`
    (a name the file binds itself wins); STAR where it imports everything of a module the read cannot follow."""
    try:
        tree = ast.parse((path / file).read_bytes(), filename=file)
    except SyntaxError as error:
        raise _fail(path, f"{file} does not parse (line {error.lineno}: {error.msg}): judge cannot find its "
                          f"{wanted}") from None
    found: dict[str, Any] = {}
    _visit(tree.body, found)
    unread = False
    for module in found.pop(STAR, []):
        source = modules.get(module) if module else None
        if source is None or source in reading | {file}:
            unread = True
            continue
        for name, value in _bindings(path, source, wanted, modules, reading | {file}).items():
            found.setdefault(name, value)
    if unread:
        found[STAR] = FOLLOWED
    return found


def _visit(body: list[ast.stmt], found: dict[str, Any]) -> None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            found.setdefault(STAR, []).append(node.module if not node.level else None)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                found[(alias.asname or alias.name).split(".")[0]] = FOLLOWED
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(node).__name__ == "TryStar":
            _mark_stored([t for t in (getattr(node, "target", None),) if t is not None], found)
            _mark_stored([i.optional_vars for i in getattr(node, "items", []) if i.optional_vars], found)
            for field in ("body", "orelse", "finalbody"):
                _visit(getattr(node, field, []), found)
            for handler in getattr(node, "handlers", []):
                _visit(handler.body, found)
        else:
            _mark_stored([node], found)


def _mark_stored(nodes: list[ast.AST], found: dict[str, Any]) -> None:
    """Names a statement binds in a way the read does not follow (tuple targets, +=, walrus, match)."""
    for node in nodes:
        for name in ast.walk(node):
            if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                found[name.id] = FOLLOWED


def _resolve(value: Any, bindings: dict[str, Any], depth: int = 8) -> Any:
    """A name bound to another top-level name (`compile_kernel = _compile`) read through to what that binds."""
    while depth and isinstance(value, ast.Name) and value.id in bindings:
        value, depth = bindings[value.id], depth - 1
    return value


def _literal(value: Any) -> str | None:
    """What a literal `value` is (no call can be made on it), "a str", "an int", "None"; None where no literal."""
    if isinstance(value, ast.Constant):
        kind = None if value.value is None else type(value.value).__name__
    else:
        kind = next((kind for node, kind in LITERALS.items() if isinstance(value, node)), None)
        if kind is None:
            return None
    return "None" if kind is None else f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


# ---- a definition against the call judge makes ------------------------------------------------------------


def _problem(value: Any, protocol: type, specs: list[dict] | None = None) -> str | None:
    """What keeps judge's call of `protocol` from reaching `value` as written, or None (also where the read
    cannot tell: a decorated def, a class, an import)."""
    kind = _literal(value)
    if kind is not None:
        return f"is {kind}, not a function"
    if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef)) and not value.decorator_list:
        arguments = value.args
    elif isinstance(value, ast.Lambda):
        arguments = value.args
    else:
        return None
    declared = list(inspect.signature(protocol.__call__).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in declared):
        return next(filter(None, (_keywords_problem(arguments, spec) for spec in specs or [])), None)
    return _positional_problem(arguments, len(declared))


def _positional_problem(arguments: ast.arguments, passed: int) -> str | None:
    positional = len(arguments.posonlyargs) + len(arguments.args)
    required = positional - len(arguments.defaults)
    keyword_only = [a.arg for a, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is None]
    if keyword_only:
        return f"needs keyword argument '{keyword_only[0]}', judge calls it with {_count(passed)} positional"
    if required <= passed and (positional >= passed or arguments.vararg is not None):
        return None
    if arguments.vararg is not None:
        takes = f"at least {_count(required)}"
    elif required == positional:
        takes = _count(required)
    else:
        takes = f"{required} to {_count(positional)}"
    return f"takes {takes}, judge calls it with {passed}"


def _keywords_problem(arguments: ast.arguments, spec: dict) -> str | None:
    """A spec's keys as keyword arguments, as the oracle calls an input generator (and generate_input)."""
    keys = ", ".join(spec)
    everything = arguments.posonlyargs + arguments.args
    defaulted = {a.arg for a in everything[len(everything) - len(arguments.defaults):]} if arguments.defaults else set()
    defaulted |= {a.arg for a, default in zip(arguments.kwonlyargs, arguments.kw_defaults) if default is not None}
    if any(a.arg not in defaulted for a in arguments.posonlyargs):
        return f"takes positional-only arguments, judge calls it with a spec's keys as keywords ({keys})"
    names = [a.arg for a in arguments.args + arguments.kwonlyargs]
    if arguments.kwarg is None:
        extra = next((key for key in spec if key not in names), None)
        if extra is not None:
            return f"takes no argument '{extra}', judge calls it with a spec's keys as keywords ({keys})"
    missing = next((n for n in names if n not in spec and n not in defaulted), None)
    if missing is not None:
        return f"needs argument '{missing}', which a spec of task.yml lacks ({keys})"
    return None


def _count(n: int) -> str:
    return "no argument" if n == 0 else f"{n} argument{'s' if n != 1 else ''}"
