"""The screen sees through indirection: a patch that hides how it patches torch (names built at run time, state in
closures, helpers, lambdas, decorators, containers, namespaces, strings run as code) never reaches the sharks as
"no flags", and the hiding is named; honest code that uses none of it stays quiet."""

import glob
import textwrap
from pathlib import Path

import pytest

from judge.stages.patch import apply_patch
from judge.stages.screen.stage import screen, screen_patch

ROOT = Path(__file__).resolve().parent.parent
VECADD = ROOT / "kernels/vecadd_cpu/submission.py"
FIXTURES = ROOT / "tests/fixtures/screening"
FRAMES = "reads the call stack: its callers' frames and their locals (judge's runner, the input sets it holds)"
TIMER = "sets a signal handler or a timer: its code interrupts whatever runs then, judge's timing included"
COLLECTED = "its code runs when the object is collected, at a moment judge does not choose"


def flags(source: str) -> list[tuple[str, int, str]]:
    return [(f.rule, f.line, f.why) for f in screen(textwrap.dedent(source))]


def found(source: str) -> list[tuple[str, int]]:
    return [(f.rule, f.line) for f in screen(textwrap.dedent(source))]


# ---- obfuscated cheats as patches of the CPU example's kernel: what the sharks see ----------------------------

CHEATS = {
    # The case: torch.Tensor.double replaced to finish the output when judge's runner projects it, with
    # every name built at run time and the pending work kept in a closure's dict.
    "cheat-hook-double-built-names.diff": [
        ("indirection", 10, "getattr on torch with a name built from pieces ('Tensor')"),
        ("indirection", 12, "getattr on torch.Tensor with a name built from pieces ('double')"),
        ("indirection", 19, "setattr on torch.Tensor with a name built from pieces ('double')"),
        ("monkeypatch", 19, "calls setattr on torch.Tensor.double"),
        ("cache-by-identity", 28, "mutates module-level variable _pending with .update() in custom_kernel()"),
    ],
    # torch imported by a computed name inside a helper, handed to a decorator factory, set under the function's name.
    "cheat-hook-double-through-helpers.diff": [
        ("indirection", 9, "imports a module by a name computed at run time"),
        ("sys-modules", 9, "calls __import__"),
        ("indirection", 14, "setattr on cls (holds Tensor of a module named at run time) with a name computed at run time"),
        ("monkeypatch", 14, "calls setattr on cls (holds Tensor of a module named at run time) with a computed name"),
    ],
    # torch.Tensor passed to a factory whose closure swaps the method (nonlocal), and a class kept in a dict.
    "cheat-hook-double-in-closure.diff": [
        ("indirection", 13, "rebinds closure variable keep in swap() (keep holds torch.Tensor.double): state kept in a "
                            "closure, where a module-level read does not look"),
        ("monkeypatch", 13, "assigns kind.double (kind holds torch.Tensor)"),
        ("monkeypatch", 20, "assigns _box['cls'].half (_box['cls'] holds torch.Tensor)"),
    ],
    # sys._getframe under a built name, torch's namespace written by a key read from the runner's locals, and the
    # output tensor's class patched through type().
    "cheat-namespace-and-frames.diff": [
        ("frames", 8, f"uses sys._getframe: {FRAMES}"),
        ("indirection", 8, "getattr on sys with a name built from pieces ('_getframe')"),
        ("introspection", 9, "calls vars(torch)"),
        ("frames", 14, f"uses _where(1).f_locals: {FRAMES}"),
        ("cache-by-identity", 16, "writes module-level variable _names in custom_kernel(), keyed on runner.get('name', 'add')"),
        ("indirection", 16, "writes vars(torch)[...] by a name computed at run time: the screen cannot tell which name"),
        ("monkeypatch", 16, "writes vars(torch)[...]: replaces one of its names for everyone who reads it"),
        ("monkeypatch", 17, "assigns type(out).double (type(out) holds the object's class)"),
    ],
    # A constant string run as code is read like the file; one built at run time is named as unreadable.
    "cheat-exec-strings.diff": [
        ("dynamic-code", 7, "calls exec on a constant string: its code is screened too"),
        ("monkeypatch", 7, "in the code exec runs: assigns torch.Tensor.double"),
        ("dynamic-code", 8, "calls exec on a string computed at run time: the screen cannot read the code it runs"),
    ],
    # The work finished later, by a weakref callback and a timer's signal.
    "cheat-hooks-that-run-later.diff": [
        ("hooks", 5, f"imports signal.setitimer: {TIMER}"),
        ("cache-by-identity", 14, "mutates module-level list _later with .pop() in _finish()"),
        ("cache-by-identity", 19, "mutates module-level list _later with .append() in custom_kernel()"),
        ("hooks", 20, f"passes a callback to weakref.ref: {COLLECTED}"),
        ("hooks", 21, f"calls signal.setitimer: {TIMER}"),
    ],
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_obfuscated_cheat_gets_its_flags(name):
    base, patch = VECADD.read_text(), (FIXTURES / name).read_text()
    patched = apply_patch(base, patch, "submission.py")
    assert [(f.rule, f.line, f.why) for f in screen_patch(base, patched, patch)] == CHEATS[name]


def test_every_cheat_fixture_is_listed_and_none_screens_clean():
    names = sorted(Path(p).name for p in glob.glob(str(FIXTURES / "cheat-*.diff")))
    assert names == sorted(CHEATS)
    assert all(CHEATS[n] for n in names)


# ---- how the screen follows what a name holds ----------------------------------------------------------------

def test_a_write_is_followed_to_what_its_object_holds():
    assert flags("""\
        import torch as _a
        _b = _a
        _c = _b
        _d = _c.Tensor
        _d.double = None
        def get():
            return torch_alias
        torch_alias = _a.Tensor
        get().half = None
        (lambda T: T)(_a.Tensor).float = None
        for cls in (_a.Tensor,):
            cls.int = None
        class Keep:
            t = _a.Tensor
            def __init__(self):
                self.m = _a
        Keep.t.long = None
        Keep().m.Tensor.bool = None
        def patch(target, value=_a.Tensor):
            value.short = None
            target.char = None
        patch(_a.nn.functional)
        [x for x in [_a.Tensor]][0].half = None
        """) == [
        ("monkeypatch", 5, "assigns torch.Tensor.double"),
        ("monkeypatch", 9, "assigns get().half (get() holds torch.Tensor)"),
        ("monkeypatch", 10, "assigns (lambda T: T)(_a.Tensor).float ((lambda T: T)(_a.Tensor) holds torch.Tensor)"),
        ("monkeypatch", 12, "assigns cls.int (cls holds torch.Tensor)"),
        ("monkeypatch", 17, "assigns Keep.t.long (Keep.t holds torch.Tensor)"),
        ("monkeypatch", 18, "assigns Keep().m.Tensor.bool (Keep().m.Tensor holds torch.Tensor)"),
        ("monkeypatch", 20, "assigns value.short (value holds torch.Tensor)"),
        ("monkeypatch", 21, "assigns target.char (target holds torch.nn.functional)"),
        ("monkeypatch", 23, "assigns [x for x in [_a.Tensor]][0].half ([x for x in [_a.Tensor]][0] holds torch.Tensor)"),
    ]


def test_names_built_from_constants_resolve_and_are_named_as_built():
    assert flags("""\
        import time
        part = "sl"
        getattr(time, part + "eep")(1)
        getattr(time, f"{part}eep")(1)
        getattr(time, "peels"[::-1])(1)
        getattr(__import__("ti" + "me"), "sleep")(1)
        """) == [
        ("indirection", 3, "getattr on time with a name built from pieces ('sleep')"),
        ("sleep", 3, "calls time.sleep"),
        ("indirection", 4, "getattr on time with a name built from pieces ('sleep')"),
        ("sleep", 4, "calls time.sleep"),
        ("indirection", 5, "getattr on time with a name built from pieces ('sleep')"),
        ("sleep", 5, "calls time.sleep"),
        ("indirection", 6, "imports a module by a name built from pieces ('time')"),
        ("sleep", 6, "calls time.sleep"),
        ("sys-modules", 6, "calls __import__"),
    ]


def test_a_builtin_shadowed_somewhere_else_still_reads_as_the_builtin():
    # The kernel's own parameter named setattr does not hide the module-level call of the real one.
    assert flags("""\
        import torch
        def unused(setattr, getattr):
            return setattr(getattr)
        setattr(torch.Tensor, "double", None)
        """) == [("monkeypatch", 4, "calls setattr on torch.Tensor.double")]


def test_computed_names_and_imports():
    assert flags("""\
        import torch, importlib, operator
        name = input()
        hasattr(torch, name)
        delattr(torch.Tensor, name)
        importlib.import_module("torch." + name)
        __import__("torch", fromlist=[name])
        operator.attrgetter(name)(torch)
        torch.__getattribute__(name)
        """) == [
        ("indirection", 3, "hasattr on torch with a name computed at run time"),
        ("indirection", 4, "delattr on torch.Tensor with a name computed at run time"),
        ("monkeypatch", 4, "calls delattr on torch.Tensor with a computed name"),
        ("dynamic-code", 5, "calls importlib.import_module"),
        ("indirection", 5, "imports a module by a name computed at run time"),
        ("indirection", 6, "imports a member of torch by a name computed at run time"),
        ("sys-modules", 6, "calls __import__"),
        ("indirection", 7, "calls operator.attrgetter with a name computed at run time"),
        ("indirection", 8, "calls torch.__getattribute__ directly: reads an attribute by a string, past getattr"),
    ]


def test_namespaces_read_and_written_by_key():
    assert flags("""\
        import torch, builtins
        key = input()
        torch.__dict__[key]
        vars(torch).update(full=None)
        globals()["torch"].Tensor.double = None
        __builtins__["setattr"](torch.Tensor, "half", None)
        builtins.__dict__.get("setattr")(torch.Tensor, "int", None)
        torch.ops.load_library("hooks.so")
        """) == [
        ("indirection", 3, "looks up torch.__dict__[...] by a name computed at run time: the screen cannot tell which name"),
        ("introspection", 3, "reads torch.__dict__"),
        ("introspection", 4, "calls vars(torch)"),
        ("monkeypatch", 4, "rewrites vars(torch) with .update()"),
        ("introspection", 5, "calls globals"),
        ("monkeypatch", 5, "assigns torch.Tensor.double"),
        ("introspection", 6, "uses __builtins__"),
        ("monkeypatch", 6, "calls setattr on torch.Tensor.half"),
        ("introspection", 7, "reads builtins.__dict__"),
        ("monkeypatch", 7, "calls setattr on torch.Tensor.int"),
        ("dynamic-code", 8, "calls torch.ops.load_library"),
    ]


def test_setattr_and_dunder_setters_handed_around():
    assert flags("""\
        import torch, functools
        s = setattr
        s(torch.Tensor, "double", None)
        functools.partial(setattr, torch.Tensor)("half", None)
        object.__setattr__(torch, "full", None)
        f = torch.Tensor.__setattr__
        Fake = type("Fake", (torch.Tensor,), {})
        """) == [
        ("indirection", 2, "uses setattr as a value: where it is called, the screen cannot follow"),
        ("monkeypatch", 3, "calls setattr on torch.Tensor.double"),
        ("indirection", 4, "uses setattr as a value: where it is called, the screen cannot follow"),
        ("indirection", 5, "calls object.__setattr__ directly: sets an attribute by a string, past setattr"),
        ("monkeypatch", 5, "calls object.__setattr__ on torch.full"),
        ("indirection", 6, "uses torch.Tensor.__setattr__ as a value: sets an attribute by a string, past setattr, "
                           "where the screen cannot follow"),
        ("indirection", 7, "creates a class at run time with type(name, bases, namespace)"),
    ]


def test_code_objects_closures_and_classes_rewritten():
    assert flags("""\
        def make():
            x = 1
            def inner():
                return x
            return inner
        inner = make()
        inner.__closure__[0].cell_contents = 2
        inner.__defaults__ = (3,)
        inner.__code__ = make.__code__
        def custom_kernel(data):
            out = data[-1]
            out.__class__.float = None
            return out
        """) == [
        ("indirection", 7, "assigns inner.__closure__[0].cell_contents: rewrites a closure's cell: every function that "
                           "closes over it now sees another value"),
        ("introspection", 7, "uses inner.__closure__"),
        ("monkeypatch", 8, "assigns inner.__defaults__: changes the function's default arguments"),
        ("introspection", 9, "uses make.__code__"),
        ("monkeypatch", 9, "assigns inner.__code__: swaps the function's code: same name and identity, other behaviour"),
        ("monkeypatch", 12, "assigns out.__class__.float (out.__class__ holds the object's class)"),
    ]


def test_frames():
    assert flags("""\
        import sys, inspect
        caller = inspect.currentframe().f_back
        for record in inspect.stack():
            pass
        try:
            raise ValueError
        except ValueError as e:
            up = e.__traceback__.tb_frame
        def gen():
            yield 1
        g = gen().gi_frame
        """) == [
        ("introspection", 1, "imports inspect"),
        ("frames", 2, f"uses inspect.currentframe().f_back: {FRAMES}"),
        ("frames", 3, f"calls inspect.stack: {FRAMES}"),
        ("frames", 8, f"uses e.__traceback__.tb_frame: {FRAMES}"),
        ("frames", 11, f"uses gen().gi_frame: {FRAMES}"),
    ]
    # Near miss: an exception's traceback formatted for a message is not a frame walk.
    assert found("import traceback\ntry:\n    pass\nexcept Exception as e:\n    traceback.format_exception(e)\n") == []


def test_hooks():
    trace = "installs a trace or profile hook: its code runs inside every later call, judge's own included"
    assert flags("""\
        import sys, threading, signal, gc, atexit, weakref
        sys.setprofile(print)
        threading.settrace(print)
        sys.addaudithook(print)
        signal.signal(signal.SIGALRM, print)
        gc.callbacks.append(print)
        atexit.register(print)
        weakref.finalize(sys, print)
        class Later:
            def __del__(self):
                pass
        """)[2:] == [
        ("hooks", 2, f"calls sys.setprofile: {trace}"),
        ("hooks", 3, f"calls threading.settrace: {trace}"),
        ("hooks", 4, "calls sys.addaudithook: installs an audit hook: its code runs on every audited event (imports, "
                     "opens, exec) until the process ends"),
        ("hooks", 5, f"calls signal.signal: {TIMER}"),
        ("hooks", 6, "calls gc.callbacks.append: adds a garbage-collection callback: its code runs at every "
                     "collection, inside judge's own calls"),
        ("hooks", 7, "calls atexit.register: registers code to run at exit or at a fork, after or around judge's "
                     "measurements"),
        ("hooks", 8, f"calls weakref.finalize: registers a finalizer: {COLLECTED}"),
        ("hooks", 10, f"defines __del__: {COLLECTED}"),
    ]
    # Near miss: a weak reference without a callback.
    assert found("import weakref\ndef f(x):\n    return weakref.ref(x)\n") == []


def test_strings_run_as_code():
    assert flags("""\
        import time
        eval("time.sleep(1)")
        exec("exec('import os')")
        compile("def f(:", "x", "exec")
        """) == [
        ("dynamic-code", 2, "calls eval on a constant string: its code is screened too"),
        ("sleep", 2, "in the code eval runs: calls time.sleep"),
        ("dynamic-code", 3, "calls exec on a constant string: its code is screened too"),
        ("dynamic-code", 4, "calls compile on a constant string: its code is screened too"),
    ]


def test_honest_reflection_stays_quiet():
    # Constant names, the kernel's own objects, a closure over plain numbers, a knob dict: nothing hidden.
    assert found("""\
        import torch
        KNOBS = {"tile": 128}
        class Gemm:
            def __init__(self, **knobs):
                for k, v in knobs.items():
                    setattr(self, k, v)
        class Plan:
            def __init__(self):
                self._dtypes = {}
            def remember(self, key):
                self._dtypes[key] = torch.float32  # a torch object kept by the kernel's own object: not a write on it
                return self.__dict__.setdefault("_shapes", {})
        def counter():
            n = 0
            def bump():
                nonlocal n
                n += 1
                return n
            return bump
        def custom_kernel(data):
            a, b, out = data
            if hasattr(torch, "float8_e4m3fn"):
                dtype = getattr(torch, "float8_e4m3fn")
            gemm = Gemm(**KNOBS)
            gemm.stages = 4
            torch.add(a, b, out=out)
            return out
        """) == []


def test_more_routes_to_torch_tensor():
    assert flags("""\
        import torch, builtins, sys
        ns = vars(builtins)
        ns["setattr"](torch.Tensor, "double", None)
        def helper():
            pass
        helper.__globals__["torch"].Tensor.half = None
        helper.__globals__["custom_kernel"] = None
        (T := torch.Tensor).float = None
        T2, = [torch.Tensor]
        T2.int = None
        sys.modules.get("tor" + "ch").Tensor.bool = None
        def custom_kernel(data):
            cls = data[0].__class__
            setattr(cls, input(), None)
        """) == [
        ("introspection", 2, "calls vars(builtins)"),
        ("monkeypatch", 3, "calls setattr on torch.Tensor.double"),
        ("introspection", 6, "uses helper.__globals__"),
        ("monkeypatch", 6, "assigns torch.Tensor.half"),
        ("introspection", 7, "uses helper.__globals__"),
        ("monkeypatch", 7, "writes helper.__globals__['custom_kernel']: replaces that name for everyone who reads it"),
        ("monkeypatch", 8, "assigns (T := torch.Tensor).float ((T := torch.Tensor) holds torch.Tensor)"),
        ("monkeypatch", 10, "assigns T2.int (T2 holds torch.Tensor)"),
        ("monkeypatch", 11, "assigns torch.Tensor.bool"),
        ("sys-modules", 11, "calls sys.modules.get"),
        ("indirection", 14, "setattr on cls (holds the object's class) with a name computed at run time"),
        ("monkeypatch", 14, "calls setattr on cls (holds the object's class) with a computed name"),
    ]


def test_methods_and_constructors_pass_what_they_are_given():
    assert flags("""\
        import torch
        class Patcher:
            def __init__(self, cls):
                self.cls = cls
                cls.double = None
            def install(self, target):
                target.half = None
            @staticmethod
            def put(target):
                target.float = None
            def get(self):
                return self.cls
        Patcher(torch.Tensor).install(torch.Tensor)
        Patcher.put(torch.Tensor)
        Patcher(torch.Tensor).get().int = None
        """) == [
        ("monkeypatch", 5, "assigns cls.double (cls holds torch.Tensor)"),
        ("monkeypatch", 7, "assigns target.half (target holds torch.Tensor)"),
        ("monkeypatch", 10, "assigns target.float (target holds torch.Tensor)"),
        ("monkeypatch", 15, "assigns Patcher(torch.Tensor).get().int (Patcher(torch.Tensor).get() holds torch.Tensor)"),
    ]


def test_methods_replaced_on_the_tensors_judge_passes():
    # An instance attribute shadows the method for that tensor only: judge's own out.double() would run it.
    passed = "the tensors judge passes (custom_kernel's data)"
    assert flags("""\
        import torch
        def _finish(out, a, b):
            def double():
                torch.add(a, b, out=out)
                return out.to(torch.float64)
            out.double = double
        def custom_kernel(data):
            a, b, out = data
            _finish(out, a, b)
            data[2].float = None
            object.__setattr__(out, "half", None)
            out[0] = 1
            return out
        """) == [
        ("monkeypatch", 6, f"assigns out.double (out holds {passed})"),
        ("monkeypatch", 10, f"assigns data[2].float (data[2] holds {passed})"),
        ("indirection", 11, "calls object.__setattr__ directly: sets an attribute by a string, past setattr"),
        ("monkeypatch", 11, f"calls object.__setattr__ on out (holds {passed}).half"),
    ]
