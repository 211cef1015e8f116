"""Inputs that are objects of a problem's own classes: instances of dataclasses and torch nn.Modules, as GPU MODE's
amd/mla-decode hands its kernel a `Config` of sizes and weights and a `KVCache` module with state. judge takes one
apart into named parts (a dataclass's fields; a module's plain attributes, parameters, buffers and submodules),
walks and copies the parts as it does tuples, and makes the object again from them: in the oracle as a copy
(`remade`), in a runner from its description with the class imported by name there (`made`).

Only the oracle describes objects, from data it made itself; outputs stay plain (judge.boundary.exchange), so no
object a kernel made reaches the oracle. An object is made without running its class's __init__: a dataclass's
fields are set as they were, a module gets nn.Module's own empty state and then its parts, so that a KV cache
arrives with the length it had, not the one its constructor would give it."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

DATACLASS, MODULE = "dataclass", "module"
PARAMETER, BUFFER, TRANSIENT, SUBMODULE, ATTRIBUTE = "parameter", "buffer", "transient", "submodule", "attribute"
FIXED_PARAMETER = "fixed-parameter"  # a parameter that takes no gradient


def kind_of(obj: Any) -> str | None:
    """DATACLASS or MODULE for an input object judge carries, else None (torch imported only where loaded)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return DATACLASS
    nn = sys.modules.get("torch.nn")
    if nn is not None and isinstance(obj, nn.Module):
        return MODULE
    return None


def parts(obj: Any) -> list[tuple[str, str, Any]] | None:
    """(name, role, value) of each part of an input object, in a fixed order, or None for any other value."""
    kind = kind_of(obj)
    if kind == DATACLASS:
        return [(f.name, ATTRIBUTE, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if kind != MODULE:
        return None
    state = vars(obj)
    found = [(name, ATTRIBUTE, value) for name, value in state.items() if not name.startswith("_")]
    found += [(name, PARAMETER if value is None or value.requires_grad else FIXED_PARAMETER, value)
              for name, value in state["_parameters"].items()]
    transient = state.get("_non_persistent_buffers_set", set())
    found += [(name, TRANSIENT if name in transient else BUFFER, value) for name, value in state["_buffers"].items()]
    found += [(name, SUBMODULE, value) for name, value in state["_modules"].items()]
    return found


def class_name(obj: Any) -> str:
    """`module:qualname` of an object's class, checked to be how a runner finds the same class by name."""
    cls = type(obj)
    name = f"{cls.__module__}:{cls.__qualname__}"
    try:
        found = find_class(name)
    except (ImportError, AttributeError, ValueError):
        found = None
    if found is not cls:
        raise ValueError(f"a {cls.__module__}.{cls.__qualname__}, a class a kernel's process cannot import by that "
                         "name (judge carries dataclasses and nn.Modules defined at the top of a problem's files)")
    return name


def find_class(name: str) -> type:
    """The class `module:qualname` names, its module imported if it is not yet (a runner's first object of it)."""
    module_name, _, qualname = name.partition(":")
    if not module_name or not qualname or "<" in qualname:
        raise ValueError(f"{name!r} names no class judge can import")
    found: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
    for attribute in qualname.split("."):
        found = getattr(found, attribute)
    if not isinstance(found, type):
        raise ValueError(f"{name!r} is not a class")
    return found


def remade(obj: Any, values: list) -> Any:
    """A new object of `obj`'s class with `values` for its parts (in `parts` order): the oracle's copy of one."""
    roles = [(name, role) for name, role, _ in parts(obj)]
    return made(type(obj), kind_of(obj), roles, values)


def made(cls: type, kind: str, roles: list[tuple[str, str]], values: list) -> Any:
    """An object of `cls` with each part (name, role) set to its value, without running the class's __init__."""
    obj = cls.__new__(cls)
    if kind == DATACLASS:
        for (name, _), value in zip(roles, values):
            object.__setattr__(obj, name, value)
        return obj
    import torch

    if not issubclass(cls, torch.nn.Module):
        raise ValueError(f"{cls.__module__}.{cls.__qualname__} is not an nn.Module")
    torch.nn.Module.__init__(obj)
    state = vars(obj)
    for (name, role), value in zip(roles, values):
        if role in (PARAMETER, FIXED_PARAMETER):
            state["_parameters"][name] = None if value is None else torch.nn.Parameter(
                value.detach(), requires_grad=role == PARAMETER)
        elif role in (BUFFER, TRANSIENT):
            state["_buffers"][name] = value
            if role == TRANSIENT:
                state["_non_persistent_buffers_set"].add(name)
        elif role == SUBMODULE:
            state["_modules"][name] = value
        else:
            state[name] = value
    return obj
